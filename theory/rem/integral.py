r"""The finite-T integral of the REM row: one quadrature for every moment.

A row of the attention matrix at initialisation is a Gibbs measure over T keys with
i.i.d. Gaussian energies (docs/theory.md section 3): ``a_j = exp(g_j) / Z``,
``Z = sum_j exp(g_j)``, ``g_j ~ N(0, v)`` with

.. math:: v = \beta^2 q (q - p) \log T = x^2 \log T, \qquad x = \beta\sqrt{q(q - p)}
          = \sqrt{2}\,\beta / \beta_c .

This module evaluates the one-key moments ``Y_k = E[sum_j a_j^k]`` and the two-key
moments ``E[sum_{j != l} a_j^k a_l^m]`` exactly at any T, by one quadrature.

Derivation
----------
With ``Z^{-n} = Gamma(n)^{-1} int_0^inf t^(n-1) exp(-t Z) dt`` and independence of the
energies, the substitution ``t = exp(-tau)`` (which removes every overflow: ``e^g``
reaches ``e^600`` at ``x = 50``, ``T = 10^7``) gives, with ``y = g - tau``,

.. math:: Y_k = \frac{T}{\Gamma(k)} \int A_k(\tau)\,L(\tau)^{T-1}\,d\tau, \qquad
          E\Big[\sum_{j \ne l} a_j^k a_l^m\Big] = \frac{T (T - 1)}{\Gamma(k + m)}
          \int A_k(\tau)\,A_m(\tau)\,L(\tau)^{T-2}\,d\tau,

.. math:: A_k(\tau) = E\left[h_k(g - \tau)\right],\ h_k(y) = e^{k y - e^{y}},
          \qquad L(\tau) = E\left[e^{-e^{g - \tau}}\right]

(the powers ``e^{k tau}`` of the two-key integrand cancel against ``t^{k+m-1} dt``).
``h_1`` is the density of the Gumbel (minimum) law and ``1 - exp(-e^y)`` its
distribution function, so ``L(tau) = Pr(g - G < tau)`` for an independent Gumbel ``G``.
Both Gaussian expectations are one-dimensional:

* ``A_k`` by the trapezoid rule in ``y`` on the window ``[-(log T + 40), y_k]``, where
  ``y_k >= 4.5`` is the first point with ``k y - e^y < -60`` (outside the window the
  integrand is below ``e^{-60}``, and the tilted Gaussian tail left out is bounded by
  ``exp(-k (log T + 40))``).
* ``P = 1 - L`` and ``L`` are split as ``P(tau) = Phi_bar((tau - gamma)/sqrt(v + w^2))
  - S(tau)``: the Gumbel distribution function is replaced by the normal one with the
  same mean ``-gamma`` and standard deviation ``w = pi/sqrt(6)`` (closed-form
  convolution with the Gaussian), and the smooth, localised remainder
  ``s(y) = Phi((y + gamma)/w) - (1 - exp(-e^y))`` is integrated on the window
  ``[-(log T + 40), 13.5]``. Leaving out ``y < -Y`` costs at most ``exp(-Y)``
  (the same completing-the-square bound), so ``T (1 - L)`` is exact to ``~1e-17``
  and ``L^{T-1}`` keeps full relative precision when ``L`` is close to 1.

The integrand in ``tau`` is log-concave (a product of log-concave functions), hence
unimodal: the mode is found by golden section and the trapezoid rule is summed from the
mode outwards until the integrand has dropped by ``e^{-40}``. The step is the
integrand's curvature width over 3.5 and the ``y`` step is ``min(0.25, sigma / 2.5)``; for
these analytic integrands the trapezoid rule converges geometrically (the tests divide
both steps by 3: the change is below 1e-11 relative).

Outside ``SIGMA_SMALL <= sigma <= SIGMA_LARGE`` (``sigma = x sqrt(log T)``) the quadrature is
not used: its golden-section search and tau grid lose their resolution there (at
``sigma ~ 1e17`` a step no longer moves tau: the search never ended), and two laws are
exact to double precision instead:

* ``sigma <= SIGMA_SMALL = 1e-5`` (nearly equal energies): the second-order expansion in
  the centred energies ``delta_j = g_j - mean(g)`` (odd moments vanish),

  .. math:: Y_k = T^{1-k}\Big[1 + \tfrac{k(k-1)}{2}(1 - \tfrac1T)\sigma^2\Big],\qquad
            E\Big[\sum_{j \ne l} a_j^k a_l^m\Big] = \frac{T - 1}{T^{k+m-1}}\Big[1 + \Big(
            \tfrac{k(k-1) + m(m-1)}{2}(1 - \tfrac1T) - \tfrac{km}{T}\Big)\sigma^2\Big],

  relative error ``O((k sigma)^4)``, below 1e-17 for the orders k <= 4 in use;
* ``sigma > SIGMA_LARGE = 4e3`` (a frozen row: the largest energy wins unless another lies
  within O(1) of it, which has probability ``~ 1/sigma``): ``C = 1 - Y_k`` and the two-key
  moments follow ``sigma C(sigma) = c_0 + c_1 u + c_2 u^2 + O(u^3)``, ``u = SIGMA_LARGE /
  (4 sigma)``, the quadratic through the quadrature at ``u = 1, 1/2, 1/4`` (continuous at
  ``SIGMA_LARGE``). Relative error of ``C`` below 1e-8 (worst 3.3e-9 against the
  quadrature with steps divided by 3 at ``sigma = 1e5, 1e6``, T = 2, 512, 1e7, orders
  (2), (4), (2, 2), (1, 3); tests/test_reliability_time.py re-checks it); ``sigma = inf``
  gives ``Y_k = 1`` and two-key moments 0.

Each evaluation is therefore bounded: at most 200 golden-section steps and 10^5 tau
steps, each a sum over at most ``(log T + 54) / 0.25`` y-nodes; measured 0.3 ms to 10 ms
per distinct x for T in [2, 1e7] (every x >= 0, +inf included).

Checks (tests/test_finite_t.py, tests/test_gradients.py): ``Y_k = T^(1-k)`` at ``v = 0``;
T = 2 against a one-dimensional quadrature (``a_1`` is a logistic of a Gaussian), for
one-key and two-key moments; the sum rule ``E[sum_{j != l} a_j^k a_l] = Y_k - Y_{k+1}``;
direct Monte Carlo of T Gaussian energies; the annealed law ``Y_2 ~ T^{-(1 - x^2)}``
below ``beta_c / 2``; the ``T -> infinity`` law ``Y_2 -> max(0, 1 - sqrt(2)/x)``
(Derrida 1981); a brute-force nested adaptive quadrature
(benchmarks/bench_finite_t.py, agreement 2e-10).

References
----------
B. Derrida, "Random-energy model: an exactly solvable model of disordered systems",
Phys. Rev. B 24, 2613 (1981).
A. Giorlandino & S. Goldt, "Two failure modes of deep transformers and how to avoid
them", arXiv 2505.24333 (attention as a REM).
"""
from __future__ import annotations

import functools
import math

import numpy as np
from numba import njit, prange
from numba.extending import register_jitable

from .._jit import CACHE, JIT_OPTIONS

__all__ = ["row_moment"]

_JIT = dict(cache=CACHE, **JIT_OPTIONS)

EULER_GAMMA = 0.5772156649015329
#: Standard deviation of the Gumbel law, pi / sqrt(6).
GUMBEL_STD = math.pi / math.sqrt(6.0)
_SQRT2 = math.sqrt(2.0)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)

#: y-step of the Gaussian expectations when sigma is large (the y-integrands are analytic
#: in the strip |Im y| < pi/2: trapezoid error ~ exp(-2 pi 1.3 / 0.25) ~ 1e-14).
_DY = 0.25
#: Right ends of the y windows: h_k(y) < e^-60 beyond 4.5 for k <= 4 (further for higher
#: k, see _right_end); |s(y)| < e^-60 beyond 13.5.
_Y_RIGHT_H = 4.5
_Y_RIGHT_S = 13.5
#: Left window margin beyond log T.
_Y_LEFT_MARGIN = 40.0
#: Gaussian cut in units of sigma: at least 12 (mass outside < e^-72) and far enough
#: that T times the mass outside stays below e^-46.
_Z_CUT = 12.0
#: The tau-sum stops once the log-integrand is this far below its maximum.
_TAU_DROP = 40.0
#: Safety bounds on the golden-section steps and on the tau-steps per side.
_MAX_GOLDEN_STEPS = 200
_MAX_TAU_STEPS = 100_000
#: Energy scales below / above which the small- and large-sigma laws replace the quadrature.
SIGMA_SMALL = 1e-5
SIGMA_LARGE = 4e3


@register_jitable
def _z_cut(log_t):
    return max(_Z_CUT, math.sqrt(2.0 * (log_t + 46.0)))


@register_jitable
def _right_end(order):
    """First y >= 4.5 (in steps of 0.5) with ``k y - e^y < -60``: h_k is negligible beyond."""
    y = _Y_RIGHT_H
    while order * y - math.exp(y) > -60.0:
        y += 0.5
    return y


# ---------------------------------------------------------------------------------
# Gaussian tails
# ---------------------------------------------------------------------------------
@register_jitable
def _log_ndtr(z):
    """log Phi(z), accurate in both tails."""
    if z > -30.0:
        if z > 0.0:
            return math.log1p(-0.5 * math.erfc(z / _SQRT2))
        return math.log(0.5 * math.erfc(-z / _SQRT2))
    # asymptotic series of Mills' ratio (relative error < 1e-12 for z <= -30)
    z2 = z * z
    series = 1.0 - 1.0 / z2 + 3.0 / (z2 * z2) - 15.0 / (z2 * z2 * z2) + 105.0 / (z2 * z2 * z2 * z2)
    return -0.5 * z2 - math.log(-z) - _LOG_SQRT_2PI + math.log(series)


@register_jitable
def _gumbel_remainder(y):
    """s(y) = Phi((y + gamma)/w) - (1 - exp(-e^y)), smooth and localised."""
    a = (y + EULER_GAMMA) / (GUMBEL_STD * _SQRT2)
    if y > 0.0:
        return math.exp(-math.exp(y)) - 0.5 * math.erfc(a)
    return 0.5 * math.erfc(-a) + math.expm1(-math.exp(y))


# ---------------------------------------------------------------------------------
# The tau-integrand
# ---------------------------------------------------------------------------------
@register_jitable
def _log_tilted(tau, order, v, y_left, dy, i_first, i_last, grid_exp):
    """log A_k(tau) = log E[exp(k (g - tau) - e^{g - tau})], g ~ N(0, v) (without 1/sqrt(2 pi v)).

    Trapezoid sum by log-sum-exp over y_i = y_left + i dy, i in [i_first, i_last];
    ``grid_exp`` holds e^{y_i} when the y-step is the fixed large-sigma one (else empty).
    """
    peak = -np.inf
    for i in range(i_first, i_last + 1):
        y = y_left + i * dy
        g = tau + y
        lh = order * y - (grid_exp[i] if grid_exp.size > 0 else math.exp(y))
        val = -0.5 * g * g / v + lh
        if val > peak:
            peak = val
    if peak == -np.inf:
        # window empty (tau far outside the Gaussian): annealed/trivial asymptotes
        if tau > 0.0:
            return 0.5 * order * order * v - order * tau + 0.5 * math.log(2.0 * math.pi * v)
        return -0.5 * tau * tau / v + 0.5 * math.log(2.0 * math.pi * v)
    acc = 0.0
    for i in range(i_first, i_last + 1):
        y = y_left + i * dy
        g = tau + y
        lh = order * y - (grid_exp[i] if grid_exp.size > 0 else math.exp(y))
        acc += math.exp(-0.5 * g * g / v + lh - peak)
    return peak + math.log(acc * dy)


@register_jitable
def _log_integrand(tau, k, m, sigma, seq_len, y_left, dy, grid_exp, grid_s, z_cut):
    """log of A_k L^(T-1) (``m = 0``) or A_k A_m L^(T-2) (two keys), constants left out."""
    v = sigma * sigma
    g_low = -z_cut * sigma
    g_high = z_cut * sigma
    log_norm = -math.log(sigma) - _LOG_SQRT_2PI
    # node range: y_i = y_left + i dy, restricted to tau + y_i in [g_low, g_high]
    i_first = int(math.ceil((g_low - tau - y_left) / dy))
    if i_first < 0:
        i_first = 0
    i_last_s = int(math.floor((min(g_high - tau, _Y_RIGHT_S) - y_left) / dy))
    out = 0.0
    for order in (k, m):
        if order > 0:
            i_last = int(math.floor((min(g_high - tau, _right_end(order)) - y_left) / dy))
            out += _log_tilted(tau, order, v, y_left, dy, i_first, i_last, grid_exp) + log_norm
    # S(tau) = int s(g - tau) phi_sigma(g) dg
    s_sum = 0.0
    for i in range(i_first, i_last_s + 1):
        y = y_left + i * dy
        g = tau + y
        s = grid_s[i] if grid_s.size > 0 else _gumbel_remainder(y)
        s_sum += s * math.exp(-0.5 * g * g / v)
    s_total = s_sum * dy * math.exp(log_norm)
    z = (tau - EULER_GAMMA) / math.sqrt(v + GUMBEL_STD * GUMBEL_STD)
    p_tail = 0.5 * math.erfc(z / _SQRT2) - s_total  # P = 1 - L
    if p_tail < 0.5:
        log_l = math.log1p(-max(p_tail, 0.0))
    else:
        l_value = 0.5 * math.erfc(-z / _SQRT2) + s_total
        if l_value > 1e-250:
            log_l = math.log(l_value)
        else:
            log_l = _log_ndtr(z)  # far left: only the sign of the slope matters here
    others = seq_len - (2.0 if m > 0 else 1.0)
    if others > 0.0:
        out += others * log_l
    return out


@register_jitable
def _moment_scalar(sigma, seq_len, k, m, refine):
    """Y_k (``m = 0``) or the two-key moment (k, m) for T i.i.d. N(0, sigma^2) energies.

    ``refine`` divides both steps (a convergence check).
    """
    log_t = math.log(seq_len)
    if m > 0:
        log_prefactor = log_t + math.log(seq_len - 1.0) - math.lgamma(k + m)
        if sigma <= 0.0:
            return math.exp(log_t + math.log(seq_len - 1.0) - (k + m) * log_t)
    else:
        log_prefactor = log_t - math.lgamma(k)
        if sigma <= 0.0:
            return math.exp((1.0 - k) * log_t)
    y_left = -(log_t + _Y_LEFT_MARGIN)
    dy = min(_DY, sigma / 2.5) / refine
    # precomputed y-grid for the large-sigma step
    if dy == _DY / refine and refine == 1:
        n_grid = int(math.floor((max(_Y_RIGHT_S, _right_end(max(k, m))) - y_left) / dy)) + 1
        grid_exp = np.empty(n_grid)
        grid_s = np.empty(n_grid)
        for i in range(n_grid):
            y = y_left + i * dy
            grid_exp[i] = math.exp(y)
            grid_s[i] = _gumbel_remainder(y)
    else:
        grid_exp = np.empty(0)
        grid_s = np.empty(0)
    z_cut = _z_cut(log_t)

    def f(tau):
        return _log_integrand(tau, k, m, sigma, seq_len, y_left, dy, grid_exp, grid_s, z_cut)

    # --- mode of the log-concave integrand: bracket, then golden section
    golden = 0.5 * (math.sqrt(5.0) - 1.0)
    a = -z_cut * sigma - 4.0
    b = log_t + z_cut * sigma + 10.0
    c = b - golden * (b - a)
    d = a + golden * (b - a)
    fc = f(c)
    fd = f(d)
    tol = 1e-3 * min(1.0, sigma + 0.1)
    steps = 0
    while b - a > tol and steps < _MAX_GOLDEN_STEPS:
        steps += 1
        if fc < fd:
            a = c
            c = d
            fc = fd
            d = a + golden * (b - a)
            fd = f(d)
        else:
            b = d
            d = c
            fd = fc
            c = b - golden * (b - a)
            fc = f(c)
    mode = 0.5 * (a + b)
    f_mode = f(mode)
    # --- curvature width at the mode sets the tau step
    h = 0.05 * (1.0 + sigma / math.sqrt(2.0 * log_t + 1.0))
    curvature = -(f(mode + h) - 2.0 * f_mode + f(mode - h)) / (h * h)
    if not curvature > 0.0:
        curvature = 1.0 / (h * h)
    dtau = 1.0 / math.sqrt(curvature) / 3.5 / refine
    # --- trapezoid sum outwards from the mode
    total = 1.0  # the mode itself, relative to exp(f_mode)
    for direction in (1.0, -1.0):
        j = 1
        while True:
            value = f(mode + direction * j * dtau)
            total += math.exp(value - f_mode)
            if value < f_mode - _TAU_DROP or j > _MAX_TAU_STEPS:
                break
            j += 1
    return min(1.0, math.exp(log_prefactor + f_mode + math.log(total * dtau)))


@register_jitable
def _small_sigma_moment(sigma, seq_len, k, m):
    """Second-order law of nearly equal energies (``sigma <= SIGMA_SMALL``, module docstring)."""
    spread = (1.0 - 1.0 / seq_len) * sigma * sigma
    if m > 0:
        slope = 0.5 * (k * (k - 1.0) + m * (m - 1.0)) * (1.0 - 1.0 / seq_len) - k * m / seq_len
        return (seq_len - 1.0) * math.exp((1.0 - k - m) * math.log(seq_len)) * (1.0 + slope * sigma * sigma)
    return math.exp((1.0 - k) * math.log(seq_len)) * (1.0 + 0.5 * k * (k - 1.0) * spread)


@register_jitable
def _frozen_part(sigma, seq_len, k, m, refine):
    """The part that vanishes as sigma -> infinity: ``1 - Y_k`` (one key) or the two-key moment."""
    value = _moment_scalar(sigma, seq_len, k, m, refine)
    return value if m > 0 else 1.0 - value


@njit(**_JIT)
def _frozen_fit(seq_len, k, m, refine):
    """``sigma C(sigma)`` at ``u = SIGMA_LARGE / (4 sigma) = 1, 1/2, 1/4`` (the large-sigma law's nodes)."""
    out = np.empty(3)
    for i in range(3):
        s = 0.25 * SIGMA_LARGE * 2.0 ** i
        out[i] = s * _frozen_part(s, seq_len, k, m, refine)
    return out


@functools.lru_cache(maxsize=64)
def _cached_fit(seq_len, k, m, refine):
    """The three nodes of the large-sigma law, once per (T, orders, refine)."""
    fit = _frozen_fit(seq_len, k, m, refine)
    fit.setflags(write=False)
    return fit


#: ``fit`` where no sigma reaches the large-sigma law: read-only like the cached fits, so that the
#: loops over sigma have one compiled signature, not one for each.
_NO_FIT = np.zeros(3)
_NO_FIT.setflags(write=False)


@register_jitable
def _moment_value(s, seq_len, k, m, refine, complement, fit):
    """Y_k or the two-key moment at ``sigma = s``; ``complement``: ``1 - Y_k`` (one key).

    ``fit``: :func:`_frozen_fit` (read only where ``s > SIGMA_LARGE``).
    """
    if s > SIGMA_LARGE:
        u = 0.25 * SIGMA_LARGE / s  # 0 at s = inf
        # the quadratic through (1, fit[0]), (1/2, fit[1]), (1/4, fit[2]) (Lagrange form), divided by s
        quadratic = (fit[0] * (u - 0.5) * (u - 0.25) / 0.375 - fit[1] * (u - 1.0) * (u - 0.25) / 0.125
                     + fit[2] * (u - 1.0) * (u - 0.5) / 0.1875)
        part = quadratic / s
        return part if (m > 0 or complement) else 1.0 - part
    if s <= SIGMA_SMALL:
        value = _small_sigma_moment(s, seq_len, k, m)
    else:
        value = _moment_scalar(s, seq_len, k, m, refine)
    return 1.0 - value if (complement and m == 0) else value


@njit(parallel=True, **_JIT)
def _moments(sigma, seq_len, k, m, refine, complement, fit):
    out = np.empty(sigma.size)
    for i in prange(sigma.size):
        out[i] = _moment_value(sigma[i], seq_len, k, m, refine, complement, fit)
    return out


@njit(**_JIT)
def _moments_serial(sigma, seq_len, k, m, refine, complement, fit):
    """:func:`_moments` without the thread launch (about 8 ms on a busy machine) for a few sigma."""
    out = np.empty(sigma.size)
    for i in range(sigma.size):
        out[i] = _moment_value(sigma[i], seq_len, k, m, refine, complement, fit)
    return out


#: Fewer distinct x than this are integrated on one thread.
_PARALLEL_FROM = 32


def row_moment(x, seq_len, orders=(2,), refine=1, complement=False, parallel=None):
    r"""Exact finite-T moment of a REM row at reduced scale(s) ``x`` (no input checks).

    ``orders=(k,)``: ``Y_k = E[sum_j a_j^k]``; ``orders=(k, m)``:
    ``E[sum_{j != l} a_j^k a_l^m]``; energies ``N(0, x^2 log T)``, T = ``seq_len``.
    Each distinct x is integrated once, in parallel (about 0.3 ms each).

    Parameters
    ----------
    x : array_like
        Reduced scale ``beta sqrt(q (q - p)) >= 0``.
    seq_len : int
        T >= 2 (T = 2 for two keys at least).
    orders : tuple of one or two int >= 1
    refine : int
        Divides the tau and y steps (1 in use; larger values check convergence).
    complement : bool
        One-key orders only: return ``1 - Y_k``, to full relative precision also where
        ``Y_k`` rounds to 1 (``sigma > SIGMA_LARGE``); the gradients need it.
    parallel : bool, optional
        Integrate the distinct x on all threads (None: from 32 distinct x on). ``False``
        where compiling the parallel loop (about 7 s on two cores while its code is not yet
        on disk) would cost more than it saves: the participation tables, built once and
        kept on disk (1000 x in about 0.7 s on one thread).

    Returns
    -------
    ndarray
        Same shape as ``x``. Bounded time: at most about 10 ms per distinct x (module
        docstring), for every ``x`` in ``[0, inf]``.

    References
    ----------
    Derrida (1981); Giorlandino & Goldt, arXiv 2505.24333 (docs/theory.md section 3).
    """
    x = np.asarray(x, dtype=np.float64)
    unique, inverse = np.unique(x.ravel(), return_inverse=True)
    k, m = (orders[0], 0) if len(orders) == 1 else orders
    with np.errstate(over="ignore"):  # x near the float64 maximum: sigma = inf, Y_k = 1
        sigma = unique * math.sqrt(math.log(seq_len))
    fit = (_cached_fit(float(seq_len), float(k), float(m), int(refine)) if unique.size and sigma[-1] > SIGMA_LARGE
           else _NO_FIT)
    if parallel is None:
        parallel = unique.size >= _PARALLEL_FROM
    run = _moments if parallel else _moments_serial
    values = run(sigma, float(seq_len), float(k), float(m), int(refine), bool(complement), fit)
    return values[inverse].reshape(x.shape)
