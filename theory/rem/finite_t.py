r"""Exact finite-T participation ratios of an attention row (Random Energy Model).

A row of the attention matrix at initialisation is a Gibbs measure over T keys with
i.i.d. Gaussian energies (THEORY.md section 3): ``a_j = exp(g_j) / Z``, ``Z = sum_j
exp(g_j)``, ``g_j ~ N(0, v)`` with

.. math:: v = \beta^2 q (q - p) \log T = x^2 \log T, \qquad x = \beta\sqrt{q(q - p)}
          = \sqrt{2}\,\beta / \beta_c .

This module computes the moments ``Y_k = E[sum_j a_j^k]`` exactly at any T.

Derivation
----------
With ``1 / Z^k = Gamma(k)^{-1} int_0^inf t^(k-1) exp(-t Z) dt`` and independence of
the energies,

.. math:: Y_k = \frac{T}{\Gamma(k)} \int_0^\infty t^{k-1}\,
          E\left[e^{k g - t e^{g}}\right] \left(E\left[e^{-t e^{g}}\right]\right)^{T-1} dt .

Substituting ``t = exp(-tau)`` removes every overflow (``e^g`` reaches ``e^600`` at
``x = 50``, ``T = 10^7``): with ``y = g - tau``,

.. math:: Y_k = \frac{T}{\Gamma(k)} \int_{-\infty}^{\infty} A_k(\tau)\,L(\tau)^{T-1}\,d\tau,
          \quad A_k(\tau) = E\left[h_k(g - \tau)\right],\ h_k(y) = e^{k y - e^{y}},
          \quad L(\tau) = E\left[e^{-e^{g - \tau}}\right] .

``h_1`` is the density of the Gumbel (minimum) law and ``1 - exp(-e^y)`` its
distribution function, so ``L(tau) = Pr(g - G < tau)`` for an independent Gumbel ``G``.
Both Gaussian expectations are one-dimensional:

* ``A_k`` by the trapezoid rule in ``y`` on the window ``[-(log T + 40), 4.5]``
  (outside it the integrand is below ``e^{-60}``, and the tilted Gaussian tail left
  out is bounded by ``exp(-k (log T + 40))``, see ``_window_bound`` in the tests).
* ``P = 1 - L`` and ``L`` are split as ``P(tau) = Phi_bar((tau - gamma)/sqrt(v + w^2))
  - S(tau)``: the Gumbel distribution function is replaced by the normal one with the
  same mean ``-gamma`` and standard deviation ``w = pi/sqrt(6)`` (closed-form
  convolution with the Gaussian), and the smooth, localised remainder
  ``s(y) = Phi((y + gamma)/w) - (1 - exp(-e^y))`` is integrated on the window
  ``[-(log T + 40), 13.5]``. Leaving out ``y < -Y`` costs at most ``exp(-Y)``
  (the same completing-the-square bound), so ``T (1 - L)`` is exact to ``~1e-17``.

The integrand in ``tau`` is log-concave (a product of log-concave functions), hence
unimodal: the mode is found by golden section and the trapezoid rule is summed from the
mode outwards until the integrand has dropped by ``e^{-40}``. The step is the
integrand's curvature width over 3.5 and the ``y`` step is ``min(0.25, sigma / 2.5)``; for
these analytic integrands the trapezoid rule converges geometrically (the test suite
divides both steps by 3: the change is below 1e-12 relative).

Checks (tests/test_finite_size.py): ``Y_k = T^(1-k)`` at ``v = 0``; T = 2 against a
one-dimensional quadrature of ``E[s^2 + (1 - s)^2]``, ``s`` a logistic of a Gaussian;
direct Monte Carlo of T Gaussian energies; the annealed law
``Y_2 ~ T^{-(1 - x^2)}`` (``x^2 = 2 beta^2 / beta_c^2``) below ``beta_c / 2``; the
``T -> infinity`` law ``Y_2 -> max(0, 1 - sqrt(2)/x)`` (Derrida 1981).

Tables
------
Depth kernels evaluate ``Y_2`` millions of times, so :func:`participation_table`
tabulates ``Y_k`` once per ``(T, k)`` (about 0.3 s; cached in memory and on disk) at 1000 nodes
uniform in ``u = x / (x + x_s)``, ``x_s = min(2, 3 / sqrt(log T))`` (dense where the
crossover from the annealed to the frozen regime sits; it sharpens like ``1 / log T``),
``x`` in ``[0, 50]``, and interpolates with a clamped cubic spline (``d/du = 0`` at
``x = 0``, where ``Y_k`` is even in ``x``). A lookup is a division, a floor and a cubic:
no transcendental function, so a finite-T depth kernel costs little more than an
asymptotic one. Guaranteed interpolation error:
``|Y_table - Y_exact| <= TABLE_TOLERANCE * Y_exact`` (relative 1e-6) for every ``x``
in ``[0, 50]`` and ``T`` in ``[2, 1e7]`` (measured worst case at the midpoints between
nodes, where a spline's error peaks: 2.3e-8 for k = 2 and 3.5e-7 for k = 3, at
T = 1e7; absolute errors below 1e-10; the tests re-check it at several T). Beyond
``x = 50`` the table continues with the large-``x`` law ``1 - Y_k proportional to 1/x``.

References
----------
B. Derrida, "Random-energy model: an exactly solvable model of disordered systems",
Phys. Rev. B 24, 2613 (1981).
A. Giorlandino & S. Goldt, "Two failure modes of deep transformers and how to avoid
them", arXiv 2505.24333 (attention as a REM).
"""
from __future__ import annotations

import functools
import hashlib
import math
import numbers
import os
from pathlib import Path

import numpy as np
from numba import njit, prange
from numba.extending import register_jitable

from .._naming import inline_jitable

__all__ = [
    "participation_moment",
    "participation_table",
    "ParticipationTable",
    "reduced_scale",
    "TABLE_TOLERANCE",
    "TABLE_X_MAX",
    "check_seq_len",
]

_JIT = dict(cache=True, error_model="numpy")

EULER_GAMMA = 0.5772156649015329
#: Standard deviation of the Gumbel law, pi / sqrt(6).
GUMBEL_STD = math.pi / math.sqrt(6.0)
_SQRT2 = math.sqrt(2.0)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)

#: y-step of the Gaussian expectations when sigma is large (the y-integrands are analytic
#: in the strip |Im y| < pi/2: trapezoid error ~ exp(-2 pi 1.3 / 0.25) ~ 1e-14).
_DY = 0.25
#: Right ends of the y windows: h_k(y) < e^-60 beyond 4.5; |s(y)| < e^-60 beyond 13.5.
_Y_RIGHT_H = 4.5
_Y_RIGHT_S = 13.5
#: Left window margin beyond log T.
_Y_LEFT_MARGIN = 40.0
#: Gaussian cut in units of sigma: at least 12 (mass outside < e^-72) and far enough
#: that T times the mass outside stays below e^-46.
_Z_CUT = 12.0


@register_jitable
def _z_cut(log_t):
    return max(_Z_CUT, math.sqrt(2.0 * (log_t + 46.0)))
#: The tau-sum stops once the log-integrand is this far below its maximum.
_TAU_DROP = 40.0

#: x range covered by the tables, and the spline's guaranteed relative error.
TABLE_X_MAX = 50.0
TABLE_TOLERANCE = 1e-6
#: The table's abscissa is u = x / (x + x_s) with x_s = min(2, 3 / sqrt(log T)):
#: the annealed-to-frozen crossover below x = 1 sharpens like 1 / log T.
_TABLE_NODES = 1000
#: Header of a packed table: (seq_len, order, du, n_nodes, x_s, x_last).
_HEADER = 6


def _table_scale(seq_len):
    return min(2.0, 3.0 / math.sqrt(math.log(seq_len)))


def check_seq_len(seq_len, name="seq_len", allow_none=True):
    """A sequence length: None (T -> infinity) or an integer >= 2."""
    if seq_len is None and allow_none:
        return None
    if isinstance(seq_len, bool) or not isinstance(seq_len, (numbers.Integral, np.integer)):
        if isinstance(seq_len, (float, np.floating)) and float(seq_len).is_integer():
            seq_len = int(seq_len)
        else:
            what = "None or an integer >= 2" if allow_none else "an integer >= 2"
            raise ValueError(f"{name} must be {what}, got {seq_len!r}")
    seq_len = int(seq_len)
    if seq_len < 2:
        raise ValueError(f"{name} must be an integer >= 2, got {seq_len}")
    return seq_len


def _check_order(order):
    if isinstance(order, bool) or not isinstance(order, (numbers.Integral, np.integer)) or order < 1:
        raise ValueError(f"order must be an integer >= 1, got {order!r}")
    return int(order)


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
def _log_integrand(tau, order, sigma, seq_len, y_left, dy, grid_y, grid_log_h, grid_s, z_cut):
    """log of T/Gamma(k) A_k(tau) L(tau)^(T-1) (without the constant T/Gamma(k)).

    ``grid_*`` hold y_i = y_left + i dy with log h_k(y_i) and s(y_i) precomputed; they
    are used when dy equals the fixed large-sigma step (``len(grid_y) > 0``).
    """
    v = sigma * sigma
    g_low = -z_cut * sigma
    g_high = z_cut * sigma
    log_norm = -math.log(sigma) - _LOG_SQRT_2PI
    # node range: y_i = y_left + i dy, restricted to tau + y_i in [g_low, g_high]
    i_first = int(math.ceil((g_low - tau - y_left) / dy))
    if i_first < 0:
        i_first = 0
    i_last_h = int(math.floor((min(g_high - tau, _Y_RIGHT_H) - y_left) / dy))
    i_last_s = int(math.floor((min(g_high - tau, _Y_RIGHT_S) - y_left) / dy))
    # A_k by log-sum-exp
    peak = -np.inf
    for i in range(i_first, i_last_h + 1):
        y = y_left + i * dy
        g = tau + y
        if grid_y.size > 0:
            lh = grid_log_h[i]
        else:
            lh = order * y - math.exp(y)
        val = -0.5 * g * g / v + lh
        if val > peak:
            peak = val
    if peak == -np.inf:
        # window empty (tau far outside the Gaussian): annealed/trivial asymptotes
        if tau > 0.0:
            log_a = 0.5 * order * order * v - order * tau
        else:
            log_a = -0.5 * tau * tau / v
    else:
        acc = 0.0
        for i in range(i_first, i_last_h + 1):
            y = y_left + i * dy
            g = tau + y
            if grid_y.size > 0:
                lh = grid_log_h[i]
            else:
                lh = order * y - math.exp(y)
            acc += math.exp(-0.5 * g * g / v + lh - peak)
        log_a = peak + math.log(acc * dy) + log_norm
    # S(tau) = int s(g - tau) phi_sigma(g) dg
    s_sum = 0.0
    for i in range(i_first, i_last_s + 1):
        y = y_left + i * dy
        g = tau + y
        if grid_y.size > 0:
            s = grid_s[i]
        else:
            s = _gumbel_remainder(y)
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
    return log_a + (seq_len - 1.0) * log_l


@register_jitable
def _participation_moment_scalar(sigma, seq_len, order, refine):
    """Y_k for T = seq_len i.i.d. N(0, sigma^2) energies; ``refine`` divides both steps."""
    log_t = math.log(seq_len)
    log_gamma = math.lgamma(order)
    if sigma <= 0.0:
        return math.exp((1.0 - order) * log_t)
    y_left = -(log_t + _Y_LEFT_MARGIN)
    dy = min(_DY, sigma / 2.5) / refine
    # precomputed y-grid for the large-sigma step
    if dy == _DY / refine and refine == 1:
        n_grid = int(math.floor((_Y_RIGHT_S - y_left) / dy)) + 1
        grid_y = np.empty(n_grid)
        grid_log_h = np.empty(n_grid)
        grid_s = np.empty(n_grid)
        for i in range(n_grid):
            y = y_left + i * dy
            grid_y[i] = y
            grid_log_h[i] = order * y - math.exp(y)
            grid_s[i] = _gumbel_remainder(y)
    else:
        grid_y = np.empty(0)
        grid_log_h = np.empty(0)
        grid_s = np.empty(0)

    # --- mode of the log-concave integrand: bracket, then golden section
    z_cut = _z_cut(log_t)
    lo = -z_cut * sigma - 4.0
    hi = log_t + z_cut * sigma + 10.0
    golden = 0.5 * (math.sqrt(5.0) - 1.0)
    a, b = lo, hi
    c = b - golden * (b - a)
    d = a + golden * (b - a)
    fc = _log_integrand(c, order, sigma, seq_len, y_left, dy, grid_y, grid_log_h, grid_s, z_cut)
    fd = _log_integrand(d, order, sigma, seq_len, y_left, dy, grid_y, grid_log_h, grid_s, z_cut)
    tol = 1e-3 * min(1.0, sigma + 0.1)
    while b - a > tol:
        if fc < fd:
            a = c
            c = d
            fc = fd
            d = a + golden * (b - a)
            fd = _log_integrand(d, order, sigma, seq_len, y_left, dy, grid_y, grid_log_h, grid_s, z_cut)
        else:
            b = d
            d = c
            fd = fc
            c = b - golden * (b - a)
            fc = _log_integrand(c, order, sigma, seq_len, y_left, dy, grid_y, grid_log_h, grid_s, z_cut)
    mode = 0.5 * (a + b)
    f_mode = _log_integrand(mode, order, sigma, seq_len, y_left, dy, grid_y, grid_log_h, grid_s, z_cut)
    # --- curvature width at the mode sets the tau step
    h = 0.05 * (1.0 + sigma / math.sqrt(2.0 * log_t + 1.0))
    f_plus = _log_integrand(mode + h, order, sigma, seq_len, y_left, dy, grid_y, grid_log_h, grid_s, z_cut)
    f_minus = _log_integrand(mode - h, order, sigma, seq_len, y_left, dy, grid_y, grid_log_h, grid_s, z_cut)
    curvature = -(f_plus - 2.0 * f_mode + f_minus) / (h * h)
    if not curvature > 0.0:
        curvature = 1.0 / (h * h)
    width = 1.0 / math.sqrt(curvature)
    dtau = width / 3.5 / refine
    # --- trapezoid sum outwards from the mode
    total = 1.0  # the mode itself, relative to exp(f_mode)
    for direction in (1.0, -1.0):
        j = 1
        while True:
            f = _log_integrand(mode + direction * j * dtau, order, sigma, seq_len, y_left, dy,
                               grid_y, grid_log_h, grid_s, z_cut)
            total += math.exp(f - f_mode)
            if f < f_mode - _TAU_DROP or j > 1000000:
                break
            j += 1
    log_result = log_t - log_gamma + f_mode + math.log(total * dtau)
    return min(1.0, math.exp(log_result))


@njit(parallel=True, **_JIT)
def _participation_moment_many(sigma, seq_len, order, refine):
    out = np.empty(sigma.size)
    for i in prange(sigma.size):
        out[i] = _participation_moment_scalar(sigma[i], seq_len, order, refine)
    return out


def _exact_moment(x, seq_len, order, refine=1):
    """Y_k(x, T) exactly (float64 array in, array out), computing each distinct x once."""
    x = np.asarray(x, dtype=np.float64)
    flat = x.ravel()
    unique, inverse = np.unique(flat, return_inverse=True)
    sigma = unique * math.sqrt(math.log(seq_len))
    values = _participation_moment_many(sigma, float(seq_len), int(order), int(refine))
    return values[inverse].reshape(x.shape)


# ---------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------
@inline_jitable
def table_lookup(table, x):
    """Y_k at reduced scale ``x = beta sqrt(q (q - p))`` from a packed table.

    ``table`` is the flat array of :attr:`ParticipationTable.packed`: header
    ``(T, k, du, n, x_s, x_last)``, then ``n`` values and ``n`` spline second
    derivatives on ``u = x / (x + x_s)``. Beyond ``x_last`` (= 50) ``1 - Y_k`` falls
    like ``1 / x``.
    """
    du = table[2]
    n = int(table[3])
    x_last = table[5]
    if x >= x_last:
        return 1.0 - (1.0 - table[_HEADER + n - 1]) * x_last / x
    position = x / ((x + table[4]) * du)
    if not position >= 0.0:  # NaN or negative round-off
        position = 0.0
    i = int(position)
    if i > n - 2:
        i = n - 2
    t = position - i
    s = 1.0 - t
    f0 = table[_HEADER + i]
    f1 = table[_HEADER + i + 1]
    m0 = table[_HEADER + n + i]
    m1 = table[_HEADER + n + i + 1]
    return s * f0 + t * f1 + (du * du / 6.0) * ((s * s * s - s) * m0 + (t * t * t - t) * m1)


@njit(**_JIT)
def _lookup_many(table, x):
    out = np.empty(x.size)
    flat = x.ravel()
    for i in range(x.size):
        out[i] = table_lookup(table, flat[i])
    return out


def _clamped_spline_second_derivatives(f, h, slope_left, slope_right):
    """Second derivatives of the clamped cubic spline through equally spaced f."""
    n = f.size
    lower = np.full(n, h / 6.0)
    diag = np.full(n, 2.0 * h / 3.0)
    upper = np.full(n, h / 6.0)
    rhs = np.empty(n)
    rhs[1:-1] = (f[2:] - 2.0 * f[1:-1] + f[:-2]) / h
    diag[0] = diag[-1] = h / 3.0
    rhs[0] = (f[1] - f[0]) / h - slope_left
    rhs[-1] = slope_right - (f[-1] - f[-2]) / h
    # Thomas algorithm
    c = np.empty(n)
    d = np.empty(n)
    c[0] = upper[0] / diag[0]
    d[0] = rhs[0] / diag[0]
    for i in range(1, n):
        m = diag[i] - lower[i] * c[i - 1]
        c[i] = upper[i] / m if i < n - 1 else 0.0
        d[i] = (rhs[i] - lower[i] * d[i - 1]) / m
    out = np.empty(n)
    out[-1] = d[-1]
    for i in range(n - 2, -1, -1):
        out[i] = d[i] - c[i] * out[i + 1]
    return out


class ParticipationTable:
    r"""Tabulated ``Y_k(x)`` at one sequence length, for fast evaluation.

    Built by :func:`participation_table` (cached per ``(seq_len, order)``). Call it
    with the reduced scale ``x = beta sqrt(q (q - p))``; :attr:`packed` is the flat
    float64 array that the numba kernels read with :func:`table_lookup`.

    Attributes
    ----------
    seq_len, order : int
    x_nodes : ndarray
        Tabulation nodes in x (uniform in ``u = x / (x + x_s)``, from 0 to 50).
    values : ndarray
        Exact ``Y_k`` at the nodes.
    x_scale : float
        ``x_s``.
    packed : ndarray
        Header ``(T, k, du, n, x_s, x_last)``, values, spline second derivatives.
    """

    def __init__(self, seq_len, order, nodes=_TABLE_NODES, packed=None):
        self.seq_len = seq_len
        self.order = order
        if packed is not None:  # restored from the disk cache
            du, n, x_scale = packed[2], int(packed[3]), packed[4]
            u = du * np.arange(n)
            x = x_scale * u / (1.0 - u)
            x[-1] = TABLE_X_MAX
            self.x_nodes, self.values, self.x_scale = x, packed[_HEADER:_HEADER + n].copy(), x_scale
            self.packed = packed
            for array in (self.x_nodes, self.values, self.packed):
                array.setflags(write=False)
            return
        x_scale = _table_scale(seq_len)
        u_max = TABLE_X_MAX / (TABLE_X_MAX + x_scale)
        du = u_max / (nodes - 1)
        u = du * np.arange(nodes)
        x = x_scale * u / (1.0 - u)
        x[-1] = TABLE_X_MAX
        y = _exact_moment(x, seq_len, order)
        # dY/du at the right end from a 5-point one-sided difference; 0 at x = 0 (even)
        slope_right = (25 * y[-1] - 48 * y[-2] + 36 * y[-3] - 16 * y[-4] + 3 * y[-5]) / (12 * du)
        second = _clamped_spline_second_derivatives(y, du, 0.0, slope_right)
        self.x_nodes = x
        self.values = y
        self.x_scale = x_scale
        self.packed = np.concatenate([[float(seq_len), float(order), du, float(nodes), x_scale, TABLE_X_MAX],
                                      y, second])
        for array in (self.x_nodes, self.values, self.packed):
            array.setflags(write=False)

    def __call__(self, x):
        """Interpolated ``Y_k`` at reduced scale(s) ``x >= 0`` (broadcasts)."""
        x = np.asarray(x, dtype=np.float64)
        return _lookup_many(self.packed, x).reshape(x.shape)

    def __repr__(self):
        return f"ParticipationTable(seq_len={self.seq_len}, order={self.order})"


#: Tables are also kept on disk, keyed by this module's source: a new version of the
#: integrator or of the tabulation never reads an old file.
_SOURCE_KEY = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()[:16]


def _disk_path(seq_len, order):
    """``$REMPROP_CACHE_DIR`` or this package's ``__pycache__`` (where numba caches too)."""
    directory = os.environ.get("REMPROP_CACHE_DIR") or str(Path(__file__).parent / "__pycache__")
    return Path(directory) / f"participation-{_SOURCE_KEY}-T{seq_len}-k{order}.npy"


def _load_packed(seq_len, order):
    try:
        packed = np.load(_disk_path(seq_len, order), allow_pickle=False)
    except (OSError, ValueError):
        return None
    n = int(packed[3]) if packed.ndim == 1 and packed.size > _HEADER else -1
    if (n < 5 or packed.size != _HEADER + 2 * n or packed[0] != seq_len or packed[1] != order
            or not np.all(np.isfinite(packed))):
        return None
    return packed


def _save_packed(seq_len, order, packed):
    path = _disk_path(seq_len, order)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        with open(temporary, "wb") as handle:
            np.save(handle, packed)
        os.replace(temporary, path)
    except OSError:  # read-only install: keep the table in memory only
        pass


@functools.lru_cache(maxsize=64)
def _cached_table(seq_len, order):
    packed = _load_packed(seq_len, order)
    if packed is not None:
        return ParticipationTable(seq_len, order, packed=packed)
    table = ParticipationTable(seq_len, order)
    _save_packed(seq_len, order, np.asarray(table.packed))
    return table


def participation_table(seq_len, order=2):
    r"""The cached table of ``Y_k(x)`` at sequence length ``seq_len``.

    Building costs 1000 exact evaluations (about 0.3 s on two cores); later calls with
    the same ``(seq_len, order)`` return the same object, and the table is also saved in
    ``$REMPROP_CACHE_DIR`` (default: the ``__pycache__`` folder of this package, where
    numba caches its code) so that other processes load it instead (file name keyed by
    a hash of this module's source; an unwritable folder only disables the disk copy).

    Parameters
    ----------
    seq_len : int
        Sequence length T >= 2.
    order : int
        Moment k >= 1 (``Y_1 = 1``; 2 is the participation ratio, 3 enters gradients).

    Returns
    -------
    ParticipationTable
        Relative interpolation error at most :data:`TABLE_TOLERANCE` on ``x <= 50``.

    References
    ----------
    Derrida (1981); Giorlandino & Goldt, arXiv 2505.24333.
    """
    return _cached_table(check_seq_len(seq_len, allow_none=False), _check_order(order))


def reduced_scale(beta, q, p):
    r"""``x = beta sqrt(q (q - p)) = sqrt(2) beta / beta_c``: Y_k depends on x and T only."""
    return beta * np.sqrt(q * (q - p))


def participation_moment(beta, q, p, seq_len, order=2, method="exact"):
    r"""Exact moment ``Y_k = E[sum_j a_j^k]`` of a softmax attention row at finite T.

    The energies of one attention row are T i.i.d. ``N(0, v)`` with
    ``v = beta^2 q (q - p) log T``; with ``t = e^{-tau}`` in
    ``Z^{-k} = Gamma(k)^{-1} int t^{k-1} e^{-tZ} dt``,

    .. math:: Y_k = \frac{T}{\Gamma(k)} \int d\tau\ E\left[e^{k(g-\tau) - e^{g-\tau}}\right]
              \left(E\left[e^{-e^{g-\tau}}\right]\right)^{T-1},
              \qquad g \sim N(0, v),

    evaluated in log space (see the module notes). ``Y_1 = 1``, ``Y_k = T^{1-k}`` at
    ``beta = 0``; as ``T -> inf``, ``Y_2 -> max(0, 1 - beta_c / beta)``; below
    ``beta_c / 2``, ``Y_2 ~ T^{-(1 - 2 beta^2 / beta_c^2)}`` (annealed).

    Parameters
    ----------
    beta : array_like
        Query/key scale, >= 0 (``s_qk^2 = beta sqrt(log T) / d``).
    q, p : array_like
        Token order parameters, ``q > 0``, ``|p| <= q``.
    seq_len : int
        Sequence length T >= 2 (tested from 2 to 1e7, for ``x`` up to 50).
    order : int
        k >= 1; 2 is the participation ratio, 3 the moment entering the gradients.
    method : {"exact", "table"}
        ``"exact"`` integrates for each distinct ``x`` (about a millisecond each,
        parallel); ``"table"`` interpolates the cached :func:`participation_table`
        (relative error <= 1e-6, microseconds).

    Returns
    -------
    ndarray or float
        ``Y_k`` in ``[T^{1-k}, 1]``, broadcast over ``beta, q, p``.

    References
    ----------
    B. Derrida, Phys. Rev. B 24, 2613 (1981); A. Giorlandino & S. Goldt,
    arXiv 2505.24333 (THEORY.md section 3).

    Examples
    --------
    >>> round(participation_moment(1.5, 1.0, 0.0, seq_len=512), 3)
    0.279
    """
    from ..checks import as_float_array, check_choice, check_overlap, scalar_or_array

    seq_len = check_seq_len(seq_len, allow_none=False)
    order = _check_order(order)
    check_choice("method", method, ("exact", "table"))
    beta = as_float_array("beta", beta, nonnegative=True)
    q, p = check_overlap(q, p)
    x = reduced_scale(beta, q, np.minimum(p, q))
    if order == 1:
        return scalar_or_array(np.ones_like(x))
    if method == "table":
        return scalar_or_array(participation_table(seq_len, order)(x))
    return scalar_or_array(_exact_moment(x, seq_len, order))
