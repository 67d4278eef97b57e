r"""DyT (Dynamic Tanh), ``y = gamma * tanh(a x) + beta`` elementwise: a norm without statistics.

Zhu, Chen, He, LeCun & Liu propose DyT as a drop-in replacement of LayerNorm and RMSNorm
(arXiv 2503.10622, 2025): a learnable scalar ``a`` (initialised to ``a0``, 0.5 by default) and
per-feature ``gamma`` (1 at initialisation) and ``beta`` (0). At initialisation the map on the
order parameters is tanh's Gaussian kernel at the scaled variances,

.. math:: q' = E[\tanh(a u)^2], \qquad p' = E[\tanh(a u) \tanh(a v)], \qquad
          (u, v) \sim N\Big(0, \begin{pmatrix} q & p \\ p & q \end{pmatrix}\Big),

the moments of the activation ``tanh`` at ``(a^2 q, a^2 p)`` (the quadrature of
:mod:`remprop.theory.activations`). Unlike LayerNorm it reads the input's scale: it is neither
scale-free nor does it keep the cosine; for small ``a`` it is the linear map ``a^2 (q, p)``, for
large ``a`` the sign's arcsine kernel ``(1, (2/pi) arcsin(p / q))`` (docs/theory.md section 14.1).

Every face of the component is here: :func:`dyt_map`, the numeric and sympy maps, the kernel
face (the interpreter's MLP instruction with ``W1 = a I``, no bias, tanh, ``W2 = I``), the
Gram-state face and the torch face. :class:`~remprop.theory.components.block.NormType` registers it
as ``norm_type="dyt"``, its ``a0`` the architecture's ``dyt_alpha0``.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..activations import activation_spec, moments_array
from ..activations.pair_moments import pair_moment
from ..checks import ParameterError, check_overlap, check_real_scalar, output_pair
from .base import Component, parameter

__all__ = ["DYT_ALPHA0", "DyT", "dyt", "dyt_map", "check_alpha0"]

#: The initial ``a`` of DyT proposed for non-LLM transformers (Zhu et al. 2025).
DYT_ALPHA0 = 0.5
_TANH = "tanh"


def check_alpha0(value, name="alpha0") -> float:
    """DyT's initial scale ``a0``: a finite real number > 0 (:class:`~remprop.theory.checks.ParameterError`
    naming ``name`` otherwise, NaN included)."""
    value = check_real_scalar(name, value)
    if not value > 0.0:
        raise ParameterError(name, f"{name} must be > 0 (DyT's tanh(a0 x) with a0 <= 0 is no norm), got {value!r}")
    return value


def dyt_moments(q, p, alpha0, moments):
    """``moments(a0^2 q, a0^2 p)``: DyT's map from tanh's Gaussian moments ``moments`` (numbers or
    sympy alike)."""
    scale = alpha0 * alpha0
    return moments(scale * q, scale * p)


def dyt_map(q, p, alpha0=DYT_ALPHA0):
    r"""Order parameters after DyT at initialisation, ``y = tanh(a0 x)``.

    .. math:: q' = E[\tanh(a_0 u)^2], \qquad p' = E[\tanh(a_0 u)\tanh(a_0 v)]

    with ``(u, v)`` centred Gaussian, ``Var = q``, ``Cov = p``: tanh's moments at
    ``(a0^2 q, a0^2 p)`` (:func:`~remprop.theory.activation_moments`).

    Parameters
    ----------
    q, p : array_like
        Mean squared norm (> 0) and mean overlap (``|p| <= q``), broadcast together.
    alpha0 : float
        The initial scale ``a0`` > 0 (default 0.5).

    Returns
    -------
    (q', p') : float or ndarray

    References
    ----------
    J. Zhu, X. Chen, K. He, Y. LeCun & Z. Liu, "Transformers without Normalization",
    arXiv 2503.10622 (2025); docs/theory.md section 14.1.

    Examples
    --------
    >>> from remprop.theory.components.dyt import dyt_map
    >>> q, p = dyt_map(1.0, 0.0, alpha0=0.5)
    >>> round(float(q), 4), float(p)
    (0.1735, 0.0)
    """
    q, p = check_overlap(q, p)
    return output_pair(*DyT(check_alpha0(alpha0)).apply(q, p))


@dataclass(repr=False)
class DyT(Component):
    """DyT at initialisation, ``x -> tanh(a0 x)`` (:func:`dyt`; ``gamma = 1``, ``beta = 0``)."""

    alpha0: object = DYT_ALPHA0
    name = "dyt"
    #: How reports name it (``pre-DyT``) and its title.
    short, title = "DyT", "DyT"
    #: Where the map holds (module notes): before the branches, or on their outputs with ``norm="none"``.
    placements = ("pre", "none")
    placement_note = ("DyT's map is a Gaussian expectation over the coordinates of its input; after a post-norm "
                      "skip the next DyT reads the last one's tanh outputs, which are not Gaussian (measured: "
                      "q 5-13% and the cosine 3-5% off the map over four blocks at d = 256, docs/theory.md "
                      "section 14.1); use norm='pre'")

    @classmethod
    def of_architecture(cls, arch):
        """The DyT of ``arch``: its ``dyt_alpha0`` (default :data:`DYT_ALPHA0`)."""
        return dyt(DYT_ALPHA0 if arch is None or arch.dyt_alpha0 is None else arch.dyt_alpha0)

    def apply(self, q, p):
        code = activation_spec(_TANH).code
        return dyt_moments(q, p, self.alpha0, lambda q1, p1: moments_array(code, q1, p1))

    def symbolic(self, q, p, symbols):
        return dyt_moments(q, p, symbols.parameter(self.alpha0), lambda q1, p1: symbols.moments(_TANH, q1, p1))

    def kernel(self, tape):
        """The MLP instruction of ``W1 = a0 I`` (variance ``a0^2``, no bias), tanh, ``W2 = I``: dense
        ``(a0^2 q, a0^2 p)``, tanh's moments, dense ``(1 m2 + 0, 1 m11 + 0)``."""
        alpha0 = float(self.alpha0)
        tape.mlp(alpha0 * alpha0, 0.0, _TANH, 1.0)

    def gram(self, walker, g):
        """Pair by pair on the Gram matrix (exact): each token's ``E[tanh(a0 u_i)^2]`` at ``a0^2 G_ii``,
        each pair's ``E[tanh(a0 u_i) tanh(a0 u_j)]`` at ``(a0^2 G_ii, a0^2 G_jj, a0^2 G_ij)``: tanh's
        moments where the two norms are equal (a simplex then gives :func:`dyt_map` to rounding),
        the two-dimensional quadrature of :func:`~remprop.theory.causal.pair_moment` where they differ."""
        code = activation_spec(_TANH).code
        scale = float(self.alpha0) ** 2
        diag = np.diag(g)
        if np.ptp(diag) == 0:
            m2, out = moments_array(code, np.full_like(g, scale * diag[0]), scale * g)
            out = np.array(out)
            np.fill_diagonal(out, np.diag(m2))
            return out
        m2 = moments_array(code, scale * diag, scale * diag)[0]
        upper = np.triu_indices(g.shape[0], 1)
        out = np.empty_like(g)
        out[upper] = pair_moment(_TANH, scale * diag[upper[0]], scale * diag[upper[1]], scale * g[upper])
        out.T[upper] = out[upper]
        np.fill_diagonal(out, m2)
        return out

    def torch_forward(self, x, sim):
        """``gamma * tanh(a0 x) + beta`` at initialisation (``gamma = 1``, ``beta = 0``: drawn from no
        generator, so the block's other draws do not move), with tensor methods."""
        return (x * float(self.alpha0)).tanh()

    def __repr__(self):
        return f"dyt({float(self.alpha0)!r})"


def dyt(alpha0=DYT_ALPHA0) -> Component:
    """DyT at initialisation, ``x -> tanh(alpha0 x)``: ``(q, p) ->`` tanh's moments at
    ``(alpha0^2 q, alpha0^2 p)``; see :func:`dyt_map`. ``alpha0`` > 0 (a sympy expression passes)."""
    if type(alpha0).__module__.startswith("sympy."):
        return DyT(parameter("alpha0", alpha0))
    return DyT(check_alpha0(alpha0))
