r"""Depth laws of the post-LN ReLU stack near rank collapse.

Each block moves ``eps = 1 - rho`` by ``G(eps) = eps - eps'``, with ``eps'`` the exact
spread-phase block map (:func:`~remprop.theory.symbolic.block_tree.post_ln_block_map`,
derived from :meth:`Architecture.block <remprop.theory.Architecture.block>`). The number
of blocks between two cosines is the continuum limit of this iteration with its
Euler-Maclaurin corrections (:func:`depth_to_collapse`); from it follow the depth beyond
which no skip helps (:func:`critical_depth`) and the minimum attention skip strength
``alpha*(L)`` (:func:`alpha_star_law`), in closed form when the MLP is
negligible (:func:`attention_only_residual_law`). Without biases and attention the
``eps^(3/2)`` term of the expansion gives polynomial collapse
(:func:`polynomial_collapse_law`). Derivations: docs/symbolic.md sections 4-5.

References
----------
A. Giorlandino & S. Goldt, arXiv 2505.24333 (collapse depth and the minimum residual
strength); L. Noci et al., NeurIPS 2022 (sqrt(L)-type residual scaling).
"""
from __future__ import annotations

import functools

import numpy as np
import sympy as sp

from remprop._deprecation import renamed

from ..checks import as_float_array, check_open_unit
from .block_expansion import block_map_expansion
from .block_tree import post_ln_block_map
from .symbols import ALPHA_MLP, EPS, INV_ALPHA2, SIGMA_B2, SIGMA_V2, SIGMA_W2, lambdify_parameters

__all__ = [
    "depth_to_collapse",
    "critical_depth",
    "alpha_star_law",
    "attention_only_residual_law",
    "polynomial_collapse_law",
]


# -- numeric block decrement G(eps) = eps - eps', from the exact symbolic map -----------------
_G_ARGS = (EPS, INV_ALPHA2, SIGMA_W2, SIGMA_B2, SIGMA_V2, ALPHA_MLP)


@functools.lru_cache(maxsize=None)
def _decrement_functions():
    """numpy functions G, dG/deps, d2G/deps2 of (eps, s, sigma_w2, sigma_b2, sigma_v2, alpha_mlp)."""
    eps_next, _ = post_ln_block_map(attention_weight=True)
    decrement = EPS - eps_next
    derivs = [decrement, sp.diff(decrement, EPS), sp.diff(decrement, EPS, 2)]
    return tuple(sp.lambdify(_G_ARGS, d, modules="numpy") for d in derivs)


# Composite Gauss-Legendre rule in t = log(eps): the integrand eps / G(eps) is smooth in t.
_PANELS, _NODES_PER_PANEL = 12, 16


def _quadrature(eps_final, eps_start):
    """Nodes (eps values) and weights for integrals d eps over [eps_final, eps_start]."""
    x, w = np.polynomial.legendre.leggauss(_NODES_PER_PANEL)
    lo, hi = np.log(eps_final)[..., None], np.log(eps_start)[..., None]
    edges = np.linspace(0.0, 1.0, _PANELS + 1)
    u = ((edges[:-1, None] + edges[1:, None]) / 2 + (edges[1:, None] - edges[:-1, None]) / 2 * x).ravel()
    wu = ((edges[1:, None] - edges[:-1, None]) / 2 * w).ravel()
    t = lo + (hi - lo) * u
    eps = np.exp(t)
    return eps, (hi - lo) * wu * eps  # d eps = eps dt


def _continuum_depth(eps_final, eps_start, s, sigma_w2, sigma_b2, sigma_v2, alpha_mlp, em_order):
    """Blocks needed to go from eps_start down to eps_final (arrays broadcast, no checks)."""
    g, dg, d2g = _decrement_functions()
    args = [np.asarray(a, dtype=np.float64)[..., None] for a in (s, sigma_w2, sigma_b2, sigma_v2, alpha_mlp)]
    nodes, weights = _quadrature(eps_final, eps_start)
    with np.errstate(divide="ignore", invalid="ignore"):
        g_nodes = g(nodes, *args)
        depth = np.sum(weights / g_nodes, axis=-1)
        sq = [np.asarray(a)[..., 0] for a in args]
        g_start, g_final = g(eps_start, *sq), g(eps_final, *sq)
        if em_order >= 1:
            depth = depth - 0.5 * np.log(g_start / g_final)
        if em_order >= 2:
            depth = depth - (dg(eps_start, *sq) - dg(eps_final, *sq)) / 12.0
            depth = depth - np.sum(weights * dg(nodes, *args) ** 2 / g_nodes, axis=-1) / 12.0
    return np.where(g_start > 0, depth, np.inf)


def _check_em_order(em_order):
    if isinstance(em_order, bool) or em_order not in (0, 1, 2):
        raise ValueError(f"em_order must be 0, 1 or 2, got {em_order!r}")
    return int(em_order)


def depth_to_collapse(eps_final, eps_start=1.0, alpha_sa=1.0, sigma_w2=0.2, sigma_b2=4e-4,
                      sigma_v2=0.2, alpha_mlp=1.0, em_order=2):
    r"""Number of post-LN ReLU blocks taking ``1 - rho`` from ``eps_start`` to ``eps_final``.

    Continuum limit of the exact one-block map ``eps' = eps - G(eps)`` (spread-phase
    attention, :func:`~remprop.theory.symbolic.post_ln_block_map`) with Euler-Maclaurin corrections: the number
    ``N`` of iterations solves ``N(eps - G(eps)) = N(eps) - 1``, whose asymptotic solution
    for a slowly varying step (``|G'| << 1``) is

    .. math::
        N = \int_{\epsilon_L}^{\epsilon_0}\frac{d\epsilon}{G}
            - \frac12\ln\frac{G(\epsilon_0)}{G(\epsilon_L)}
            - \frac{G'(\epsilon_0) - G'(\epsilon_L)}{12}
            - \frac1{12}\int_{\epsilon_L}^{\epsilon_0}\frac{G'^2}{G}\,d\epsilon + \dots

    ``em_order`` keeps the first 1, 2 or 3 of these terms. ``G`` and its derivatives are
    lambdified from the sympy expression of the exact map, so the transient from
    ``rho0 = 0`` (where the attention alone barely moves the cosine) is included.

    Parameters
    ----------
    eps_final, eps_start : array_like
        ``1 - rho`` at the end and at the start, ``0 < eps_final < eps_start <= 1``.
    alpha_sa : array_like
        Attention skip strength, > 0; ``np.inf`` gives the MLP-only stack.
    sigma_w2, sigma_b2, sigma_v2, alpha_mlp : array_like
        Architecture parameters (BERT defaults).
    em_order : {0, 1, 2}
        Euler-Maclaurin terms kept beyond the integral.

    Returns
    -------
    ndarray or float
        The (real) depth; ``inf`` if ``G(eps_start) = 0`` (a fixed point: no collapse).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (block map); Noci et al. 2022 (residual scaling).
    """
    em_order = _check_em_order(em_order)
    eps_final = as_float_array("eps_final", eps_final, positive=True, high=1.0)
    eps_start = as_float_array("eps_start", eps_start, positive=True, high=1.0)
    if (np.broadcast_to(eps_final, np.broadcast_shapes(eps_final.shape, eps_start.shape))
            >= eps_start).any():
        raise ValueError("eps_final must be smaller than eps_start")
    s = _inverse_square("alpha_sa", alpha_sa)
    params = _arch_arrays(sigma_w2, sigma_b2, sigma_v2, alpha_mlp)
    out = _continuum_depth(eps_final, eps_start, s, *params, em_order)
    return float(out) if np.ndim(out) == 0 else out


def _inverse_square(name, alpha):
    alpha = as_float_array(name, alpha, positive=True, allow_inf=True)
    with np.errstate(divide="ignore"):
        return 1.0 / alpha**2


def _arch_arrays(sigma_w2, sigma_b2, sigma_v2, alpha_mlp):
    return (as_float_array("sigma_w2", sigma_w2, positive=True),
            as_float_array("sigma_b2", sigma_b2, nonnegative=True),
            as_float_array("sigma_v2", sigma_v2, nonnegative=True),
            as_float_array("alpha_mlp", alpha_mlp, nonnegative=True))


def critical_depth(threshold=0.99, sigma_w2=0.2, sigma_b2=4e-4, sigma_v2=0.2, alpha_mlp=1.0,
                   em_order=2):
    r"""Depth beyond which no attention skip strength avoids rank collapse.

    As ``alpha_sa -> inf`` the attention sub-block becomes the identity and the block
    reduces to the MLP sub-block, whose own decrement ``G_M(eps) > 0`` (the bias's linear
    factor ``lambda_M < 1`` and the kernel's ``eps^(3/2)`` term) still drives
    ``rho -> 1``. The MLP-only stack reaches the threshold after

    .. math:: L_{max} = N(\epsilon_t;\ \alpha_{SA} = \infty),\qquad \epsilon_t = 1 - \mathrm{threshold}

    blocks (:func:`depth_to_collapse`), so ``alpha*(L) = inf`` for ``L > L_max``, and
    ``alpha*^2 ~ J_1 / (L_max - L)`` as ``L -> L_max`` with
    ``J_1 = int (dG/ds) / G_M^2 deps``, ``s = 1 / alpha_sa^2``. BERT defaults, threshold
    0.99: ``L_max = 2209.08`` (``alpha*`` finite up to 2209 blocks, infinite from 2210),
    ``J_1 = 2.5e5``; without biases ``L_max = 3039.4``.

    Parameters
    ----------
    threshold : float
        Collapse threshold on the final cosine, in (0, 1).
    sigma_w2, sigma_b2, sigma_v2, alpha_mlp : array_like
        Architecture parameters (BERT defaults); they broadcast.
    em_order : {0, 1, 2}
        Euler-Maclaurin terms kept (see :func:`depth_to_collapse`).

    Returns
    -------
    ndarray or float
        ``L_max`` (real); ``inf`` when the MLP-only block has no decrement at ``rho = 0``.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333; Noci et al. 2022.
    """
    threshold = check_open_unit("threshold", threshold)
    return depth_to_collapse(1.0 - threshold, 1.0, np.inf, sigma_w2, sigma_b2, sigma_v2,
                             alpha_mlp, em_order)


def alpha_star_law(depth, threshold=0.99, sigma_w2=0.2, sigma_b2=4e-4, sigma_v2=0.2,
                              alpha_mlp=1.0, em_order=2):
    r"""Large-depth law of the minimum attention skip strength ``alpha*(L)``, post-LN ReLU.

    ``alpha*`` is the smallest ``alpha_sa`` for which ``L`` post-LN blocks started from
    ``q0 = 1, rho0 = 0`` end with cosine ``<= threshold``. With the attention in its
    spread phase (any ``beta <= sqrt 2``, the first layer's ``beta_c``: then ``alpha*``
    does not depend on ``beta``) and ``s = 1 / alpha_sa^2``, ``alpha*`` solves

    .. math::
        L = N(\epsilon_t;\ s) = \int_{\epsilon_t}^{1}\frac{d\epsilon}{G(\epsilon; s)}
            - \frac12\ln\frac{G(1; s)}{G(\epsilon_t; s)} - \dots,
        \qquad \epsilon_t = 1 - \mathrm{threshold},

    the continuum limit of the exact block map with its Euler-Maclaurin corrections
    (:func:`depth_to_collapse`; leading term: the integral; next: the logarithm, which
    shifts ``alpha*`` by 0.3-0.8 % at BERT settings). ``N`` decreases with ``s`` and is solved
    by bisection in ``log s``. Regimes:

    * MLP negligible (``alpha_mlp -> inf``): ``alpha*^2 = L / I_A - B / 2 + O(1/L)``, a
      ``sqrt(L)`` law (:func:`attention_only_residual_law`, exact there);
    * with the MLP, ``alpha*`` grows faster and diverges at ``L_max``
      (:func:`critical_depth`), ``alpha*^2 ~ J_1 / (L_max - L)``; beyond it ``inf``.

    Valid when each block changes ``eps`` little (``|G'| << 1``: ``alpha*^2 >> sigma_v2`` and
    ``sigma_w2^2 / 2 << alpha_mlp^2``). Against the exact iteration at BERT defaults
    (threshold 0.99) the ``em_order=2`` law is within 2.1e-6 relative at L = 100,
    2.4e-7 at L = 200 and below 3e-8 for L = 500..2000 (``em_order=1``: 6e-5 .. 3e-6;
    ``em_order=0``: 0.3-0.8 %).

    Parameters
    ----------
    depth : array_like
        Number of blocks ``L`` (real values allowed), >= 1.
    threshold : float
        Collapse threshold on the final cosine, in (0, 1).
    sigma_w2, sigma_b2, sigma_v2, alpha_mlp : array_like
        Architecture parameters (BERT defaults); broadcast with ``depth``.
    em_order : {0, 1, 2}
        Euler-Maclaurin terms kept.

    Returns
    -------
    ndarray or float
        ``alpha*`` (``inf`` for ``L >= L_max``; ``nan`` for stacks so shallow that
        ``alpha* < 0.01``, where no continuum law applies), broadcast shape of the inputs.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (block maps, trainability diagram);
    Noci et al., NeurIPS 2022 (sqrt(L)-type residual scaling); Cho & Saul 2009.

    Examples
    --------
    >>> round(float(alpha_star_law(1000)), 4)
    8.8741
    """
    threshold = check_open_unit("threshold", threshold)
    em_order = _check_em_order(em_order)
    depth = as_float_array("depth", depth, low=1.0)
    params = _arch_arrays(sigma_w2, sigma_b2, sigma_v2, alpha_mlp)
    shape = np.broadcast_shapes(depth.shape, *(p.shape for p in params))
    depth = np.broadcast_to(depth, shape).ravel()
    params = [np.broadcast_to(p, shape).ravel() for p in params]
    eps_t = np.full(depth.shape, 1.0 - threshold)
    one = np.ones_like(eps_t)
    l_max = _continuum_depth(eps_t, one, np.zeros_like(eps_t), *params, em_order)
    # N(s) decreases with s; bracket log s in [log 1e-16, log 1e4] (alpha from 1e-2 to 1e8)
    lo = np.full(depth.shape, np.log(1e-16))
    hi = np.full(depth.shape, np.log(1e4))
    for _ in range(64):
        mid = 0.5 * (lo + hi)
        n_mid = _continuum_depth(eps_t, one, np.exp(mid), *params, em_order)
        too_shallow = n_mid > depth  # the stack would need more blocks: more attention (larger s)
        lo = np.where(too_shallow, mid, lo)
        hi = np.where(too_shallow, hi, mid)
    alpha = np.exp(-0.25 * (lo + hi))
    # no root in the bracket: the stack is too shallow for the continuum law (alpha* < 1e-2)
    n_top = _continuum_depth(eps_t, one, np.full(depth.shape, 1e4), *params, em_order)
    alpha = np.where(n_top > depth, np.nan, alpha)
    alpha = np.where(depth >= l_max, np.inf, alpha)
    alpha = alpha.reshape(shape)
    return float(alpha) if alpha.ndim == 0 else alpha


#: Deprecated spelling of :func:`alpha_star_law` (one name per idea), removed in the next release.
min_residual_strength_law = renamed("min_residual_strength_law", alpha_star_law)


def attention_only_residual_law(depth, threshold=0.99, sigma_v2=0.2, sigma_b2=4e-4, exact=True):
    r"""``alpha*(L)`` when the MLP sub-block is the identity (``alpha_mlp -> inf``): closed form.

    The spread-phase attention block ``eps' = alpha^2 eps / (alpha^2 + B - sigma_v2 eps)``,
    ``B = sigma_v2 + sigma_b2``, is a Moebius map: ``w = 1 / eps`` obeys the linear recursion
    ``w' = (1 + B / alpha^2) w - sigma_v2 / alpha^2``, so from ``eps0 = 1``

    .. math::
        \frac1{\epsilon_L} = \frac{\sigma_v^2}{B} + \Big(1 + \frac{B}{\alpha^2}\Big)^L
                             \frac{\sigma_b^2}{B},
        \qquad
        \alpha^{*2} = \frac{B}{R^{1/L} - 1},\quad
        R = \frac{B - \sigma_v^2\epsilon_t}{\sigma_b^2\,\epsilon_t}.

    For large ``L``: ``alpha*^2 = L / I_A - B / 2 + O(1/L)`` with
    ``I_A = ln(R) / B``, the ``sqrt(L)`` growth of the minimum skip strength (Noci et al.
    2022 find the analogous ``1/sqrt(L)`` branch scaling). ``rho0 = 0`` is a fixed point of
    bias-free spread attention (the token mean of orthogonal tokens vanishes): ``R`` and
    ``I_A`` diverge logarithmically as ``sigma_b2 -> 0``, and the bias seeds the collapse.

    Parameters
    ----------
    depth : array_like
        Number of blocks, >= 1.
    threshold : float
        Collapse threshold, in (0, 1).
    sigma_v2, sigma_b2 : array_like
        Value weight and bias variances (``sigma_b2 > 0``); broadcast with ``depth``.
    exact : bool
        True: ``B / (R^(1/L) - 1)``; False: the two-term large-``L`` form ``L / I_A - B / 2``.

    Returns
    -------
    ndarray or float
        ``alpha*``.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333; Noci et al., NeurIPS 2022.
    """
    threshold = check_open_unit("threshold", threshold)
    depth = as_float_array("depth", depth, low=1.0)
    sigma_v2 = as_float_array("sigma_v2", sigma_v2, nonnegative=True)
    sigma_b2 = as_float_array("sigma_b2", sigma_b2, positive=True)
    eps_t = 1.0 - threshold
    big_b = sigma_v2 + sigma_b2
    log_r = np.log((big_b - sigma_v2 * eps_t) / (sigma_b2 * eps_t))
    if exact:
        alpha2 = big_b / np.expm1(log_r / depth)
    else:
        alpha2 = depth * big_b / log_r - big_b / 2
    alpha = np.sqrt(np.maximum(alpha2, 0.0))
    return float(alpha) if np.ndim(alpha) == 0 else alpha


def polynomial_collapse_law(depth, eps0=1.0, sigma_w2=0.2, alpha_mlp=1.0, correction=True):
    r"""``1 - rho`` after ``depth`` bias-free post-LN ReLU MLP blocks: polynomial collapse.

    Without attention (``alpha_sa -> inf`` or ``sigma_v2 = 0``) and without biases,
    ``lambda = 1`` and the block map is ``eps' = eps - K eps^(3/2) + O(eps^(5/2))``,
    ``K = -kappa = (2 sqrt 2 / (3 pi)) w``, ``w = (sigma_w2^2 / 2) / (sigma_w2^2 / 2 + alpha_mlp^2)``.
    For ``u = eps^(-1/2)`` the map is ``u' = u + K/2 + (3 K^2 / 8) / u + O(u^-2)``, hence

    .. math::
        u_L = u_0 + \frac{K L}{2} + \frac{3K}{4}\ln\frac{u_L}{u_0},\qquad
        1 - \rho_L = u_L^{-2} \simeq \frac{4}{K^2 L^2}
        \quad\Big(= \frac{9\pi^2}{2 L^2}\ \text{for a plain ReLU net, } \alpha_M = 0\Big),

    a power law, not the exponential decay that a linear factor ``lambda < 1`` gives.

    Parameters
    ----------
    depth : array_like
        Number of blocks, >= 0.
    eps0 : array_like
        ``1 - rho`` of the input, in (0, 1]. The law is asymptotic in ``1 / u``: from
        ``eps0 = 1`` it misses an O(1) shift of ``u_L`` set by the transient.
    sigma_w2, alpha_mlp : array_like
        MLP weight variance (> 0) and skip strength (>= 0).
    correction : bool
        Keep the logarithmic term (solved by fixed-point iteration); False gives
        ``u_L = u_0 + K L / 2``.

    Returns
    -------
    ndarray or float
        ``1 - rho_L``, broadcast over the inputs.

    References
    ----------
    Cho & Saul 2009 (kernel); Giorlandino & Goldt, arXiv 2505.24333.
    """
    depth = as_float_array("depth", depth, nonnegative=True)
    eps0 = as_float_array("eps0", eps0, positive=True, high=1.0)
    sigma_w2 = as_float_array("sigma_w2", sigma_w2, positive=True)
    alpha_mlp = as_float_array("alpha_mlp", alpha_mlp, nonnegative=True)
    # K from the symbolic expansion: bias-free, attention switched off (lam_A = 1)
    kappa_mlp = block_map_expansion().kappa_mlp
    k = -lambdify_parameters(kappa_mlp)(sigma_w2=sigma_w2, sigma_b2=0.0, sigma_v2=0.0,
                                         alpha_sa=1.0, alpha_mlp=alpha_mlp)
    u0 = eps0 ** -0.5
    u = u0 + k * depth / 2
    if correction:
        for _ in range(50):
            u = u0 + k * depth / 2 + 0.75 * k * np.log(u / u0)
    out = u ** -2.0
    return float(out) if np.ndim(out) == 0 else out
