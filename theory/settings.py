"""The run bundle: what decides one theory run, validated once.

Every result of the theory for a stack is fixed by the same six things: the
:class:`~remprop.theory.Architecture`, the query/key scale ``beta``, the depth L, the input
state ``(q0, rho0)`` and the rank-collapse threshold. :class:`RunSettings` holds them and
checks them once, at construction; the trainability diagram, the real-model
specification, the simulated sweep and the comparison each keep one instead of validating
the same fields again, and the functions they call trust it: :func:`~remprop.theory.propagate`,
:func:`~remprop.theory.final_state`, :func:`~remprop.theory.propagation.pack_parameters` and
:func:`~remprop.diagrams.alpha_star` take a RunSettings in place of the
architecture and then check none of its fields again (:func:`given_run`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from .architecture import Architecture
from . import softcap
from .checks import (as_float_array, check_depth, check_grid_axis, check_open_unit, check_real_scalar,
                     check_simplex_cosine)

__all__ = ["RunSettings", "DEFAULT_THRESHOLD", "given_run"]

#: Default collapse threshold on the final mean cosine of two tokens.
DEFAULT_THRESHOLD = 0.99


@dataclass(frozen=True, eq=False)
class RunSettings:
    r"""Architecture, query/key scale, depth, input state and collapse threshold of a run.

    Parameters
    ----------
    arch : Architecture
        The stack (block order, attention, activation, variances, heads, ``seq_len``).
    beta : array_like
        Query/key scale of the model (``s_qk^2 = beta sqrt(log T) / d``), > 0: a scalar, or
        the 1-d grid of a diagram. Every head runs at ``arch.effective_beta(beta)``. With
        ``arch.qk_norm`` it multiplies the normalised scores instead (1: the model as
        initialised; docs/theory.md section 19).
    depth : int
        Number of blocks L, >= 1.
    q0 : float
        Input mean squared norm per coordinate, > 0.
    rho0 : float
        Input mean cosine of two tokens: in ``[-1/(T - 1), 1]`` for ``T = arch.seq_len``
        (T tokens cannot be more anti-aligned on average), in ``[0, 1]`` when
        ``arch.seq_len`` is None (the ``T -> infinity`` limit). Cosines within rounding
        (1e-9) below the floor are clipped onto it, as measured inputs produce.
    threshold : float
        Rank collapse: the final mean cosine is above ``threshold``, in (0, 1).

    Raises
    ------
    ValueError
        Naming the first field that is out of its domain, or ``logit_softcap`` when the
        cap is too small for the theory at this ``beta``
        (:func:`~remprop.theory.softcap.check_logit_softcap`). These are all the checks
        the kernels need: a function given a RunSettings checks none of them again.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (docs/theory.md sections 1, 2 and 6).

    Examples
    --------
    >>> from remprop.theory import Architecture, RunSettings
    >>> run = RunSettings(Architecture(), beta=0.5, depth=60)
    >>> run.depth, run.threshold
    (60, 0.99)
    """

    arch: Architecture
    beta: Any = 0.5
    depth: int = 12
    q0: float = 1.0
    rho0: float = 0.0
    threshold: float = DEFAULT_THRESHOLD

    def __post_init__(self):
        if not isinstance(self.arch, Architecture):
            raise ValueError(f"arch must be a remprop.theory.Architecture, got {type(self.arch).__name__}")
        beta = as_float_array("beta", self.beta, positive=True)
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_("beta", float(beta) if beta.ndim == 0 else beta)
        set_("depth", check_depth(self.depth))
        q0 = check_real_scalar("q0", self.q0)
        if not q0 > 0:
            raise ValueError(f"q0 must be > 0, got {self.q0!r}")
        set_("q0", q0)
        rho0 = check_real_scalar("rho0", self.rho0)
        if rho0 > 1.0:
            raise ValueError(f"rho0 must be <= 1, got {self.rho0!r}")
        set_("rho0", float(check_simplex_cosine("rho0", np.asarray(rho0), self.arch.seq_len)))
        set_("threshold", check_open_unit("threshold", self.threshold))
        softcap.check_logit_softcap(self.arch, self.beta, q0)

    @property
    def p0(self) -> float:
        """Input mean overlap ``q0 rho0``."""
        return self.q0 * self.rho0

    def replace(self, **changes) -> "RunSettings":
        """A copy with some fields changed, validated again."""
        return dataclasses.replace(self, **changes)

    def over_alphas(self, alphas) -> "RunSettings":
        """The run of every cell of an ``(alpha_sa, beta)`` grid, as the kernels take it.

        ``arch.alpha_sa`` becomes ``alphas[:, None]`` and ``beta`` becomes ``beta[None, :]``,
        so that every array of the run broadcasts to ``(len(alphas), len(beta))`` (rows
        alphas, columns betas, as in a trainability diagram). ``alphas`` is checked (a
        non-empty 1-d grid, >= 0); the other fields were checked when this run was made and
        are not checked again (the skip strength changes none of their domains).
        """
        alphas = check_grid_axis("alphas", alphas, nonnegative=True)
        cells = object.__new__(RunSettings)
        for field in dataclasses.fields(self):
            object.__setattr__(cells, field.name, getattr(self, field.name))
        object.__setattr__(cells, "arch", self.arch.replace(alpha_sa=alphas[:, None]))
        object.__setattr__(cells, "beta", np.atleast_1d(self.beta)[None, :])
        return cells

    def to_dict(self) -> dict:
        """JSON-ready fields (the architecture as :meth:`~remprop.theory.Architecture.to_dict`)."""
        beta = self.beta.tolist() if isinstance(self.beta, np.ndarray) else self.beta
        return {"arch": self.arch.to_dict(), "beta": beta, "depth": self.depth, "q0": self.q0,
                "rho0": self.rho0, "threshold": self.threshold}

    @classmethod
    def from_dict(cls, data: dict) -> "RunSettings":
        """Inverse of :meth:`to_dict`."""
        fields = dict(data)
        return cls(arch=Architecture(**fields.pop("arch")), **fields)

    def __repr__(self):
        return (f"RunSettings(arch={self.arch!r}, beta={self.beta!r}, depth={self.depth}, q0={self.q0!r}, "
                f"rho0={self.rho0!r}, threshold={self.threshold!r})")


def given_run(arch, **beside):
    """``arch`` when it is a :class:`RunSettings`, else None: the door of the functions below it.

    A function that takes an architecture and its run's fields (``beta``, ``depth``, ``q0``,
    ...) takes a RunSettings in their place and then trusts it: its fields were checked
    when it was made (docs/architecture.md). ``beside`` are the arguments the caller gave
    next to it; with a RunSettings each must be None (the run holds it), else a ValueError
    names the first.

    Parameters
    ----------
    arch : Architecture or RunSettings
        The first argument of the calling function.
    **beside
        The run's fields as passed separately (None: not given).

    Returns
    -------
    RunSettings or None
    """
    if not isinstance(arch, RunSettings):
        return None
    for name, value in beside.items():
        if value is not None:
            raise ValueError(f"{name}: given beside a RunSettings, which holds it (pass one or the other)")
    return arch
