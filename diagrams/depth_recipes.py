r"""Depth-dependent residual strengths, such as the 1/sqrt(L) scaling of Noci et al. (2022).

Our skip strength multiplies the identity path, ``x -> alpha x + F(x)`` (the reference
convention, :class:`remprop.theory.Architecture`'s ``alpha_sa``/``alpha_mlp``). Noci et al.
scale the branch, ``x -> x + gamma F(x) = gamma ((1/gamma) x + F(x))``, so

.. math:: \alpha = 1 / \gamma

up to the overall factor gamma. The factor does not matter after a LayerNorm (post-LN:
``LN(x + gamma F(x)) = LN(x/gamma + F(x))`` exactly) nor in stacks whose blocks are
positively homogeneous (no LN, no biases, linear or ReLU MLP, uniform attention: Noci
et al.'s setting, where the order parameters pick up ``gamma^2`` per block). In pre-LN
stacks the factor accumulates on the residual stream: ``x + gamma F(LN x)`` is our
``alpha = 1`` block applied to the input scaled by ``1/gamma`` (``q0 -> q0 / gamma^2``).

:func:`residual_scaling` turns a strength given as a function of depth (a callable
``L -> value``, e.g. :func:`inverse_sqrt_depth`) or as a number into our ``alpha`` at a
given depth; :func:`scale_architecture` puts it into an Architecture. For a trainability
diagram over the prefactor c of ``gamma = c / sqrt(L)``, pass
``residual_scaling(inverse_sqrt_depth(c_grid), depth, convention="branch")`` as the
``alphas`` of :func:`~remprop.diagrams.trainability_diagram`.

References
----------
L. Noci, S. Anagnostidis, L. Biggio, A. Orvieto, S. P. Singh, A. Lucchi, "Signal
propagation in transformers: theoretical perspectives and the role of rank collapse",
NeurIPS 2022 (residual scaling 1/sqrt(L)); A. Giorlandino & S. Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import numpy as np

from remprop.theory import Architecture
from remprop.theory.checks import as_float_array, check_choice, check_depth, scalar_or_array

__all__ = ["CONVENTIONS", "residual_scaling", "inverse_sqrt_depth", "scale_architecture"]

#: "skip": the value multiplies the identity path (ours); "branch": it multiplies F (Noci et al.).
CONVENTIONS = ("skip", "branch")


class inverse_sqrt_depth:  # noqa: N801 - used like a function
    r"""The strength ``L -> scale / sqrt(L)`` (Noci et al. 2022 use it on the branch).

    Parameters
    ----------
    scale : array_like
        Prefactor(s) c > 0; an array gives one strength per prefactor.

    Examples
    --------
    >>> residual_scaling(inverse_sqrt_depth(1.0), depth=100, convention="branch")
    10.0
    """

    def __init__(self, scale=1.0):
        self.scale = as_float_array("scale", scale, positive=True)

    def __call__(self, depth):
        return self.scale / np.sqrt(depth)

    def __repr__(self):
        return f"inverse_sqrt_depth({self.scale.tolist()!r})"


def residual_scaling(alpha, depth, *, convention="skip"):
    r"""Our skip strength (identity path) at depth L from a number or a function of depth.

    .. math:: \alpha(L) = a(L)\ (\text{convention "skip"}),\qquad
              \alpha(L) = 1 / a(L)\ (\text{convention "branch"})

    Parameters
    ----------
    alpha : array_like or callable
        ``a`` itself, or a callable ``L -> a(L)`` evaluated at ``depth``.
    depth : int
        Number of blocks L >= 1.
    convention : {"skip", "branch"}
        Whether ``a`` multiplies the identity path (ours) or the branch (Noci et al.).

    Returns
    -------
    float or ndarray
        Skip strengths alpha >= 0 for :class:`~remprop.theory.Architecture` (``alpha_sa``,
        ``alpha_mlp``) or the ``alphas`` of a trainability diagram.

    Raises
    ------
    ValueError
        Bad depth or convention, a callable that fails or returns a negative or
        non-finite value, or a branch strength of 0.

    References
    ----------
    Noci et al., NeurIPS 2022; Giorlandino & Goldt, arXiv 2505.24333.
    """
    depth = check_depth(depth)
    check_choice("convention", convention, CONVENTIONS)
    if callable(alpha):
        try:
            value = alpha(depth)
        except Exception as error:  # a user function: report it against the parameter
            raise ValueError(f"alpha(depth) failed for depth={depth}: {error}") from None
    else:
        value = alpha
    if convention == "skip":
        return scalar_or_array(as_float_array("alpha", value, nonnegative=True))
    return scalar_or_array(1.0 / as_float_array("alpha", value, positive=True))


def scale_architecture(arch: Architecture, depth, *, alpha_sa=None, alpha_mlp=None, convention="skip"):
    """``arch`` with ``alpha_sa`` and/or ``alpha_mlp`` set by :func:`residual_scaling` at ``depth``.

    Parameters
    ----------
    arch : Architecture
    depth : int
    alpha_sa, alpha_mlp : array_like or callable, optional
        Left unchanged when None.
    convention : {"skip", "branch"}

    Returns
    -------
    Architecture

    References
    ----------
    Noci et al., NeurIPS 2022.
    """
    if not isinstance(arch, Architecture):
        raise ValueError(f"arch must be a remprop.theory.Architecture, got {type(arch).__name__}")
    changes = {}
    if alpha_sa is not None:
        changes["alpha_sa"] = residual_scaling(alpha_sa, depth, convention=convention)
    if alpha_mlp is not None:
        changes["alpha_mlp"] = residual_scaling(alpha_mlp, depth, convention=convention)
    return arch.replace(**changes)
