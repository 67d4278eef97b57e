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

import math

import numpy as np
from numba import njit, prange
from numba.extending import register_jitable

__all__ = ["row_moment"]

_JIT = dict(cache=True, error_model="numpy")

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
    while b - a > tol:
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
            if value < f_mode - _TAU_DROP or j > 1000000:
                break
            j += 1
    return min(1.0, math.exp(log_prefactor + f_mode + math.log(total * dtau)))


@njit(parallel=True, **_JIT)
def _moments(sigma, seq_len, k, m, refine):
    out = np.empty(sigma.size)
    for i in prange(sigma.size):
        out[i] = _moment_scalar(sigma[i], seq_len, k, m, refine)
    return out


def row_moment(x, seq_len, orders=(2,), refine=1):
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

    Returns
    -------
    ndarray
        Same shape as ``x``.

    References
    ----------
    Derrida (1981); Giorlandino & Goldt, arXiv 2505.24333 (docs/theory.md section 3).
    """
    x = np.asarray(x, dtype=np.float64)
    unique, inverse = np.unique(x.ravel(), return_inverse=True)
    sigma = unique * math.sqrt(math.log(seq_len))
    k, m = (orders[0], 0) if len(orders) == 1 else orders
    values = _moments(sigma, float(seq_len), float(k), float(m), int(refine))
    return values[inverse].reshape(x.shape)
