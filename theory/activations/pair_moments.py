"""``E[phi(u) phi(v)]`` of a centred Gaussian pair of unequal variances, by a two-dimensional trapezoid rule.

The public entry is :func:`remprop.theory.causal.pair_moment` (documented there, docs/theory.md
section 8). Here, beside the activations, so that every walker of a Gram matrix (the causal Gram
state's MLP at unequal token norms, the DyT norm's Gram face) reaches the one quadrature without
importing the walkers.
"""
from __future__ import annotations

import functools
import math

import numba
import numpy as np
from numba.extending import register_jitable

from .._jit import CACHE, JIT_OPTIONS
from ..checks import as_float_array
from ..quadrature import gaussian_trapezoid
from .closed_form import erf_function, linear_function, relu_function
from .quadrature_moments import gelu_function, silu_function, tanh_function
from .registry import ERF, GELU, LINEAR, RELU, SILU, TANH, activation_spec, compiled_user_function

__all__ = ["PAIR_HALF_NODES", "pair_moment", "pair_moments_table", "variance_nodes", "CORRELATION_NODES",
           "CHEBYSHEV_CORRELATIONS", "TABLE_SPREAD", "pair_grid", "interpolated_moment"]


#: Trapezoid nodes per side of :func:`pair_moment` (``remprop.theory.causal.PAIR_HALF_NODES``).
PAIR_HALF_NODES = 32


@register_jitable
def _pair_total(phi, n, root_a, root_b, r, s, z, w):
    """The K x K nodes of pair ``n`` summed in place, ``phi`` the activation (a jitable function)."""
    total = 0.0
    for k in range(z.size):
        first = phi(root_a[n] * z[k]) * w[k]
        if first == 0.0:  # ReLU's negative half: no inner sum (exactly 0)
            continue
        shift = r[n] * z[k]
        inner = 0.0
        for l in range(z.size):
            inner += phi(root_b[n] * (shift + s[n] * z[l])) * w[l]
        total += first * inner
    return total


@numba.njit(parallel=True, cache=CACHE, **JIT_OPTIONS)
def _pair_sums(code, user_function, root_a, root_b, r, s, z, w, out):
    """The double sum of :func:`pair_moment` for the activation of ``code``: one pass over the pairs (on
    all threads), no temporaries; a built-in activation's function is called directly, a user-registered
    one's compiled function ``user_function`` (``registry.compiled_user_function``) through its pointer.
    One compiled function for every activation, kept on disk (module-level, no closure)."""
    for n in numba.prange(root_a.size):
        if code == RELU:
            out[n] = _pair_total(relu_function, n, root_a, root_b, r, s, z, w)
        elif code == LINEAR:
            out[n] = _pair_total(linear_function, n, root_a, root_b, r, s, z, w)
        elif code == TANH:
            out[n] = _pair_total(tanh_function, n, root_a, root_b, r, s, z, w)
        elif code == ERF:
            out[n] = _pair_total(erf_function, n, root_a, root_b, r, s, z, w)
        elif code == GELU:
            out[n] = _pair_total(gelu_function, n, root_a, root_b, r, s, z, w)
        elif code == SILU:
            out[n] = _pair_total(silu_function, n, root_a, root_b, r, s, z, w)
        else:  # a user activation (a NaN stand-in for any other code)
            out[n] = _pair_total(user_function, n, root_a, root_b, r, s, z, w)


def pair_moment(activation, var_a, var_b, cov):
    """``E[phi(u) phi(v)]``, ``Var u = var_a``, ``Var v = var_b``, ``Cov = cov``: the trapezoid rule of
    :func:`remprop.theory.causal.pair_moment` (documented there, docs/theory.md section 8)."""
    spec = activation_spec(activation)
    a, b, c = np.broadcast_arrays(as_float_array("var_a", var_a, positive=True),
                                  as_float_array("var_b", var_b, positive=True), as_float_array("cov", cov))
    z, w = gaussian_trapezoid(PAIR_HALF_NODES)
    scale = np.sqrt(a * b)
    r = np.clip(np.divide(c, scale, out=np.zeros(a.shape), where=scale > 0), -1.0, 1.0)
    s = np.sqrt(1.0 - r * r)
    out = np.empty(a.shape)
    flat = (np.ascontiguousarray(x, dtype=np.float64).ravel() for x in (np.sqrt(a), np.sqrt(b), r, s))
    _pair_sums(spec.code, compiled_user_function(spec.code, "function"), *flat, np.ascontiguousarray(z),
               np.ascontiguousarray(w), out.reshape(-1))
    return out


#: Nodes of the fine correlation grid of :func:`pair_moments_table` on [-1, 1] (step 5e-4: linear
#: interpolation off by ``h^2 / 8 max|d^2 m11 / dr^2|``, below 1e-8 of ``m2`` for SiLU / GELU / tanh).
CORRELATION_NODES = 4001
#: Chebyshev nodes in the correlation at which :func:`pair_moments_table` runs the quadrature.
CHEBYSHEV_CORRELATIONS = 65
#: Widest spread of the log-variances that :func:`pair_moments_table` interpolates (a factor of e^4).
TABLE_SPREAD = 4.0


def _chebyshev(count, lo, hi):
    """Chebyshev points of the second kind on [lo, hi] and their barycentric weights."""
    k = np.arange(count)
    points = 0.5 * (lo + hi) + 0.5 * (hi - lo) * np.cos(np.pi * k / max(count - 1, 1))
    weights = np.where(k % 2 == 0, 1.0, -1.0)
    weights[[0, -1]] *= 0.5
    return points, weights


def _barycentric(points, weights, x):
    """Rows: the interpolation weights of each ``x`` on ``points`` (exact at a node)."""
    diff = x[:, None] - points[None, :]
    exact = diff == 0
    diff[exact] = 1.0
    w = weights / diff
    w[exact.any(axis=1)] = exact[exact.any(axis=1)]
    return w / w.sum(axis=1, keepdims=True)


def variance_nodes(spread):
    """Chebyshev nodes in the log-variance that :func:`pair_moments_table` takes for ``spread``:
    1 (equal variances), 3 up to a spread of 0.05 (quadratic: error ``O(spread^3)``), else
    ``3 + ceil(3 spread)``."""
    if spread == 0:
        return 1
    return 3 if spread <= 0.05 else 3 + int(np.ceil(3.0 * spread))


def pair_grid(activation, variances):
    """``(fine, token_weights, roots)`` of :func:`pair_moments_table` at the token variances ``variances``
    (shape (T,)): the quadrature on its grid resampled to :data:`CORRELATION_NODES` correlations
    (``K x K x N_r``), each token's barycentric weights on the ``K`` log-variance nodes (``T x K``) and
    ``sqrt(variances)``; :func:`interpolated_moment` reads one pair from them."""
    spec = activation_spec(activation)
    logs = np.log(np.asarray(variances, dtype=np.float64))
    lo, hi = float(logs.min()), float(logs.max())
    if hi - lo > TABLE_SPREAD:
        raise ValueError(f"the log-variances spread over {hi - lo:.3g} > {TABLE_SPREAD} (pair_moments_table)")
    if hi > lo and spec.builtin:   # the table on the enclosing cells of GRID_STEP, kept across layers and runs
        lo, hi = GRID_STEP * math.floor(lo / GRID_STEP), GRID_STEP * math.ceil(hi / GRID_STEP)
        nodes, node_weights, fine = _cached_grid(spec.name, lo, hi)
    else:
        nodes, node_weights, fine = _grid(spec.name, lo, hi)
    token_weights = np.ones((logs.size, 1)) if nodes.size == 1 else _barycentric(nodes, node_weights, logs)
    return fine, np.ascontiguousarray(token_weights), np.exp(0.5 * logs)


#: Step of the log-variance bounds of a built-in activation's cached table (:func:`pair_grid`): the bounds are
#: widened outwards to multiples of it, so that the layers of a walk, whose token variances move a little,
#: share one quadrature (the table's error stays that of its node count: :func:`variance_nodes`).
GRID_STEP = 1.0 / 64


def _grid(name, lo, hi):
    """``(nodes, node_weights, fine)``: the quadrature of ``name`` on the Chebyshev grid over ``[lo, hi]``."""
    nodes, node_weights = _chebyshev(variance_nodes(hi - lo), lo, hi)
    r_nodes, _ = _chebyshev(CHEBYSHEV_CORRELATIONS, -1.0, 1.0)
    a, b, r = np.meshgrid(np.exp(nodes), np.exp(nodes), r_nodes, indexing="ij")
    coarse = pair_moment(name, a, b, r * np.sqrt(a * b))                   # (K, K, R)
    return nodes, node_weights, np.ascontiguousarray(coarse @ _resampling())


#: Tables :func:`pair_grid` keeps (the most recent; ``8 K^2 N_r`` bytes each, 0.3 MB at three variance nodes).
KEPT_TABLES = 16
#: (writable arrays: numba compiles another signature for read-only ones; the callers only read them)
_cached_grid = functools.lru_cache(maxsize=KEPT_TABLES)(_grid)


@functools.lru_cache(maxsize=1)
def _resampling():
    """``(R, CORRELATION_NODES)``: the Chebyshev correlation nodes' values on the fine uniform grid."""
    r_nodes, r_weights = _chebyshev(CHEBYSHEV_CORRELATIONS, -1.0, 1.0)
    return np.ascontiguousarray(_barycentric(r_nodes, r_weights, np.linspace(-1.0, 1.0, CORRELATION_NODES)).T)


def pair_moments_table(activation, variances, cov):
    r"""``E[phi(u_i) phi(u_j)]`` of every pair of tokens, ``Var u_i = variances[i]`` (shape (T,)),
    ``Cov(u_i, u_j) = cov[i, j]`` (T, T): :func:`pair_moment` interpolated, in ``O(T^2)``.

    The quadrature runs on a grid (:func:`pair_grid`): :func:`variance_nodes` Chebyshev nodes in each
    log-variance over the tokens' range (at most :data:`TABLE_SPREAD`) and :data:`CHEBYSHEV_CORRELATIONS`
    in the correlation; the correlation is resampled to :data:`CORRELATION_NODES` uniform nodes (linear
    interpolation per pair) and the log-variances are interpolated by Lagrange (barycentric) weights
    (:func:`interpolated_moment`). ``K^2 R`` quadratures in place of ``T (T + 1) / 2``; tested against
    :func:`pair_moment` to 1e-6 of ``E[phi^2]``. For the fast causal Gram state's MLP at unequal token
    norms (docs/theory.md section 8.1).
    """
    fine, token_weights, roots = pair_grid(activation, variances)
    out = np.empty((roots.size, roots.size))
    _interpolate_pairs(roots, np.ascontiguousarray(cov, dtype=np.float64), fine, token_weights, out)
    return out


@register_jitable
def interpolated_moment(cov, root_i, root_j, fine, weights_i, weights_j):
    """One pair of :func:`pair_moments_table`: ``sum_kl w_ik w_jl F_kl(r)`` at ``r = cov / (root_i root_j)``
    (clipped to [-1, 1]), ``F_kl`` linear on the fine correlation grid."""
    count, width = weights_i.size, fine.shape[2]
    half = 0.5 * (width - 1)
    r = min(max(cov / (root_i * root_j), -1.0), 1.0)
    position = (r + 1.0) * half
    k = min(int(position), width - 2)
    fraction = position - k
    total = 0.0
    for a in range(count):
        inner = 0.0
        for b in range(count):
            inner += weights_j[b] * (fine[a, b, k] + fraction * (fine[a, b, k + 1] - fine[a, b, k]))
        total += weights_i[a] * inner
    return total


@numba.njit(parallel=True, cache=CACHE, **JIT_OPTIONS)
def _interpolate_pairs(roots, cov, fine, token_weights, out):
    """``out[i, j]``: :func:`interpolated_moment` of every pair (rows on all threads)."""
    for i in numba.prange(roots.size):   # every pair twice: row-major writes (the transposed ones miss the cache)
        for j in range(roots.size):
            out[i, j] = interpolated_moment(cov[i, j], roots[i], roots[j], fine, token_weights[i], token_weights[j])
