r"""Quadrature rules for expectations over a standard Gaussian.

Two families:

* :func:`gauss_hermite` -- the n-point Gauss-Hermite rule (probabilists' weight
  ``exp(-z^2/2)``), nodes and weights from the Golub-Welsch eigenvalue problem of the
  Jacobi matrix (off-diagonal ``sqrt(k)``), weights normalised to sum to 1. Exact for
  polynomials of degree ``2n - 1``.
* :func:`gaussian_trapezoid` -- equally spaced nodes ``z_j = j h`` on ``[-L, L]`` with
  weights ``h exp(-z_j^2/2) / sqrt(2 pi)``.

The activation kernels of :mod:`remprop.theory.activations` use the trapezoid rule; the
row average of the gradient norms (:mod:`remprop.theory.gradients`) the Gauss-Hermite rule.
(The finite-T REM integrals of :mod:`remprop.theory.rem.integral` need windows in the
log-weight ``y = g - tau`` rather than in the Gaussian variable, and carry their own
trapezoid sums.)
For a function ``f(s z)`` analytic in the strip ``|Im x| < d`` (tanh: ``d = pi/2``;
SiLU: ``pi``), the trapezoid error falls like ``exp(-2 pi d / (s h))``: geometric in the
number of nodes, whereas Gauss-Hermite converges only like ``exp(-c sqrt(n))`` for such
functions (Trefethen & Weideman, SIAM Rev. 56, 385 (2014), sec. 5; measured here for
tanh at variance 4: 97 trapezoid nodes give 1e-11, 96 Gauss-Hermite nodes 6e-6). The
equal spacing also lets the kernels evaluate ``exp`` of a sum of two node coordinates as
a product of precomputed factors, which removes every transcendental function from the
inner loop of the two-dimensional sums (see :mod:`.activations`).

Step rule (:func:`trapezoid_half_nodes`): in the variable z the strip is
``delta = d / s``, and along ``z + i y`` the Gaussian weight grows like ``exp(y^2/2)``, so
the error is bounded by ``exp(-(2 pi y / h - y^2 / 2))`` for every ``y < delta``. We take
``h = 2 pi delta / (KAPPA + delta^2 / 2)`` for ``delta < sqrt(2 KAPPA)`` and
``H_MAX = pi sqrt(2 / KAPPA)`` beyond (the Gaussian weight alone), with ``KAPPA = 32``;
``L = 8`` (tail ``< e^-32``). tests/test_activations_general.py checks 1e-10 absolute
for tanh, SiLU, GELU and erf against closed forms and much finer rules, variances 0.05
to 16. At most ``MAX_HALF_NODES = 256`` nodes per side: beyond ``s ~ 40 d`` the bound
is lost (tanh with pre-activation variance above about 100).

References
----------
G. H. Golub & J. H. Welsch, "Calculation of Gauss quadrature rules", Math. Comp. 23,
221 (1969). L. N. Trefethen & J. A. C. Weideman, "The exponentially convergent
trapezoidal rule", SIAM Review 56, 385 (2014).
"""
from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

__all__ = ["gauss_hermite", "gaussian_trapezoid", "trapezoid_half_nodes",
           "HALF_WIDTH", "H_MAX", "KAPPA", "MAX_HALF_NODES"]

#: Half-width L of the trapezoid grid (Gaussian tail beyond it: exp(-32)).
HALF_WIDTH = 8.0
#: Target exponent of the error bound exp(-KAPPA) (about 1e-14 before prefactors).
KAPPA = 32.0
#: Largest step: the Gaussian weight alone is integrated to 2 exp(-2 pi^2 / h^2) = 2 exp(-KAPPA).
H_MAX = math.pi * math.sqrt(2.0 / KAPPA)
_D_SWITCH = math.sqrt(2.0 * KAPPA)
#: Cap on the nodes per side.
MAX_HALF_NODES = 256
#: Fewest nodes per side (h = L / 10 = 0.8 < H_MAX).
MIN_HALF_NODES = 10


@register_jitable
def trapezoid_half_nodes(scale, strip):
    """Nodes per side m (step ``HALF_WIDTH / m``) for ``E[f(scale z)]``, f analytic in ``|Im| < strip``.

    In z the strip is ``d = strip / scale``; along ``z + i y`` the Gaussian weight grows
    by ``exp(y^2 / 2)``, so the error bound is ``exp(-(2 pi y / h - y^2 / 2))`` for any
    ``y < d``. Requiring the exponent >= KAPPA at the best y gives
    ``h = 2 pi d / (KAPPA + d^2 / 2)`` for ``d < sqrt(2 KAPPA)``, else ``H_MAX``.
    """
    h = H_MAX
    if scale > 0.0:
        d = strip / scale
        if d < _D_SWITCH:
            h = 2.0 * math.pi * d / (KAPPA + 0.5 * d * d)
    m = int(math.ceil(HALF_WIDTH / h))
    if m < MIN_HALF_NODES:
        m = MIN_HALF_NODES
    if m > MAX_HALF_NODES:
        m = MAX_HALF_NODES
    return m


def gaussian_trapezoid(half_nodes, half_width=HALF_WIDTH):
    r"""Trapezoid rule for ``E[f(z)]``, ``z ~ N(0, 1)``.

    .. math:: E[f(z)] \approx \sum_{j=-m}^{m} h\,\frac{e^{-z_j^2/2}}{\sqrt{2\pi}} f(z_j),
              \qquad z_j = j h,\ h = L / m

    Parameters
    ----------
    half_nodes : int
        m >= 1 (``2 m + 1`` nodes).
    half_width : float
        L > 0.

    Returns
    -------
    nodes, weights : ndarray
        Weights are not renormalised (their sum is ``1 - O(exp(-L^2/2))``).

    References
    ----------
    Trefethen & Weideman, SIAM Review 56, 385 (2014).
    """
    if isinstance(half_nodes, bool) or int(half_nodes) != half_nodes or half_nodes < 1:
        raise ValueError(f"half_nodes must be an integer >= 1, got {half_nodes!r}")
    if not (isinstance(half_width, (int, float)) and half_width > 0 and math.isfinite(half_width)):
        raise ValueError(f"half_width must be a positive number, got {half_width!r}")
    m = int(half_nodes)
    h = half_width / m
    z = h * np.arange(-m, m + 1)
    return z, h * np.exp(-0.5 * z * z) / math.sqrt(2.0 * math.pi)


def gauss_hermite(n):
    r"""n-point Gauss-Hermite rule for ``E[f(z)]``, ``z ~ N(0, 1)``.

    Nodes are the eigenvalues of the Jacobi matrix ``J`` with zero diagonal and
    off-diagonal ``sqrt(1), ..., sqrt(n - 1)`` (the recurrence of the probabilists'
    Hermite polynomials ``He_{k+1} = z He_k - k He_{k-1}``); the weights are the squared
    first components of the normalised eigenvectors (Golub & Welsch 1969).

    Parameters
    ----------
    n : int
        Number of nodes, >= 1.

    Returns
    -------
    nodes, weights : ndarray
        Weights sum to 1; the rule is exact for polynomials of degree ``<= 2n - 1``.

    References
    ----------
    G. H. Golub & J. H. Welsch, Math. Comp. 23, 221 (1969).
    """
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"n must be an integer >= 1, got {n!r}")
    n = int(n)
    off = np.sqrt(np.arange(1.0, n))
    jacobi = np.diag(off, 1) + np.diag(off, -1)
    nodes, vectors = np.linalg.eigh(jacobi)
    weights = vectors[0] ** 2
    nodes = 0.5 * (nodes - nodes[::-1])  # exact symmetry
    weights = 0.5 * (weights + weights[::-1])
    return nodes, weights / weights.sum()
