r"""The cross-overlap of two attention rows at finite T: ``C = E[sum_k a_ik a_lk]``, ``i != l``.

Two rows of the attention matrix score the same T keys with queries of cosine
``rho = p / q``. Their key-dependent energies (docs/theory.md section 3) are, for every
key k, a pair of Gaussians of variance ``v = x^2 log T`` and correlation ``rho``, the
pairs i.i.d. over keys (the part shared by all keys of a row cancels in the softmax):

.. math:: g_{ik} = c\,w_k + s\,h_{ik},\quad g_{lk} = c\,w_k + s\,h_{lk},\qquad
          c = \sigma\sqrt{\rho},\ s = \sigma\sqrt{1 - \rho},\ \sigma^2 = v,

``w, h`` standard normal (``rho < 0``: ``-c w_k`` in the second row). With
``1/(Z_i Z_l) = int int e^{-t Z_i - t' Z_l} dt dt'``, ``t = e^{-tau}``, the keys factorise:

.. math:: C = T \iint d\tau\, d\tau'\; B(\tau, \tau')\, M(\tau, \tau')^{T - 1},

.. math:: B = E_u\big[A(\tau - u) A(\tau' - u)\big],\quad
          M = E_u\big[L(\tau - u) L(\tau' - u)\big],\qquad u \sim N(0, c^2),

with the one-key functions of the energies ``s h`` (variance ``s^2``)
``A(tau) = E[e^{(sh - tau) - e^{sh - tau}}]`` and ``L(tau) = E[e^{-e^{sh - tau}}]``
(the ``A_1``, ``L`` of :mod:`.integral` at variance ``s^2``). Exact at every T for
Gaussian scores; ``C = 1/T`` at ``rho = 0`` or ``x = 0``, ``C = Y_2`` at ``rho = 1``, and
``C -> 1/T + rho (Y_2 - 1/T)`` as ``x -> 0`` (second order in the energies).

Numerics: ``A, L`` and ``P = 1 - L`` (to full relative precision, through the
Gumbel/normal split of :mod:`.integral`) on a lattice in tau; the u-average by the
trapezoid rule on the same lattice (step ``<= 0.8 c``; Gauss-Hermite for small ``c``);
``B``, ``M`` and ``1 - M`` as weighted matrix products; the outer integral by the
trapezoid rule with step ``min(W_f, sqrt(1.64 + s^2)) / 3.5`` (``W_f`` the curvature
width of the one-row integrand, ``1.64 = pi^2/6`` the Gumbel variance) over the range
where the one-row integrand ``A L^{T-1}`` (variance ``v``) exceeds ``e^{-60}`` of its peak
(the two-row integrand is below ``e^{-1} (f(tau) f(tau'))^{1/2}`` by Cauchy-Schwarz).
Halving every step changes C by less than 1e-9 relative (tests/test_cross_overlap.py).

References
----------
B. Derrida, Phys. Rev. B 24, 2613 (1981); A. Giorlandino & S. Goldt, arXiv 2505.24333
(docs/theory.md section 3).
"""
from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np
from numba import njit

from remprop.cache import cached_array

from .._jit import CACHE, JIT_OPTIONS, inline_jitable
from ..checks import as_float_array, check_choice, check_overlap, scalar_or_array
from .checks import check_seq_len
from .table import _table_scale, participation_table
from .integral import _DY, _Y_LEFT_MARGIN, _Y_RIGHT_S, EULER_GAMMA, GUMBEL_STD, _gumbel_remainder, _z_cut, row_moment

#: This folder: the sources whose hash keys the tables on disk (:func:`remprop.cache.cached_array`).
_HERE = Path(__file__).parent

__all__ = ["cross_overlap", "cross_moment", "cross_ratio", "cross_overlap_core", "cross_overlap_at", "CrossOverlapTable", "cross_overlap_table",
           "CROSS_X_MAX"]

_JIT = dict(cache=CACHE, **JIT_OPTIONS)
_SQRT2 = math.sqrt(2.0)
_SQRT_2PI = math.sqrt(2.0 * math.pi)
#: The one-row integrand is kept down to this drop (in log) from its peak.
_TAU_DROP = 60.0
#: Outer steps per width (of the one-row integrand, or sqrt(1.64 + s^2) if smaller).
_TAU_STEPS_PER_WIDTH = 2.0
#: Largest u-step in units of c.
_U_STEP = 0.8
#: Gauss-Hermite nodes of the u-average when ``c`` is below the lattice step.
_HERMITE_NODES = 24
_HERMITE_Z, _HERMITE_W = np.polynomial.hermite_e.hermegauss(_HERMITE_NODES)
_HERMITE_W = _HERMITE_W / _SQRT_2PI


@njit(**_JIT)
def _row_functions(taus, s, log_t):
    """``A(tau)``, ``P(tau) = 1 - L(tau)`` and ``L(tau)`` for energies ``N(0, s^2)`` at each tau.

    ``L`` and ``P`` through ``Phi((tau - gamma) / sqrt(s^2 + w^2)) + S(tau)`` (the Gumbel law
    replaced by the normal one with its mean and variance, the smooth remainder
    integrated; :mod:`.integral`), so that ``P`` keeps its relative precision near 0.
    """
    n = taus.size
    a_out = np.empty(n)
    p_out = np.empty(n)
    l_out = np.empty(n)
    if s <= 0.0:
        for i in range(n):
            y = -taus[i]
            e = math.exp(y)
            a_out[i] = math.exp(y - e)
            p_out[i] = -math.expm1(-e)
            l_out[i] = math.exp(-e)
        return a_out, p_out, l_out
    dg = min(_DY, s / 2.5)
    z = _z_cut(log_t)
    y_left = -(log_t + _Y_LEFT_MARGIN)
    norm = dg / (s * _SQRT_2PI)
    width = math.sqrt(s * s + GUMBEL_STD * GUMBEL_STD)
    for i in range(n):
        tau = taus[i]
        j0 = int(math.ceil(max(-z * s, tau + y_left) / dg))
        j1 = int(math.floor(min(z * s, tau + _Y_RIGHT_S) / dg))
        a = 0.0
        rem = 0.0
        for j in range(j0, j1 + 1):
            g = j * dg
            y = g - tau
            weight = math.exp(-0.5 * (g / s) ** 2)
            if y < 4.5:  # h_1(y) < e^-60 beyond
                a += weight * math.exp(y - math.exp(y))
            rem += weight * _gumbel_remainder(y)
        zz = (tau - EULER_GAMMA) / width / _SQRT2
        a_out[i] = a * norm
        p_out[i] = max(0.5 * math.erfc(zz) - rem * norm, 0.0)
        l_out[i] = max(0.5 * math.erfc(-zz) + rem * norm, 0.0)
    return a_out, p_out, l_out


def _one_row_profile(sigma, seq_len):
    """Range ``[t0, t1]`` where ``log(A L^{T-1})`` (variance sigma^2) is within _TAU_DROP of its
    peak, and its curvature width at the peak."""
    log_t = math.log(seq_len)
    z = _z_cut(log_t)
    h = max(0.25, sigma / (4.0 * math.sqrt(2.0 * log_t + 1.0)))
    taus = np.arange(-z * sigma - 6.0, log_t + z * sigma + 12.0, h)
    a, _, low = _row_functions(taus, sigma, log_t)
    with np.errstate(divide="ignore"):
        f = np.log(a) + (seq_len - 1.0) * np.log(low)
    f[~np.isfinite(f)] = -np.inf
    top = int(np.argmax(f))
    inside = np.nonzero(f > f[top] - _TAU_DROP)[0]
    t0, t1 = taus[inside[0]] - h, taus[inside[-1]] + h
    # curvature at the peak from three fine points
    mode, step = taus[top], 0.05 * (1.0 + sigma / math.sqrt(2.0 * log_t + 1.0))
    a3, _, l3 = _row_functions(np.array([mode - step, mode, mode + step]), sigma, log_t)
    f3 = np.log(a3) + (seq_len - 1.0) * np.log(l3)
    curvature = -(f3[0] - 2.0 * f3[1] + f3[2]) / step ** 2
    width = 1.0 / math.sqrt(curvature) if curvature > 0 else 1.0
    return t0, t1, width


def cross_moment(x, rho, seq_len, refine=1):
    r"""Exact cross-overlap ``C = E[sum_k a_ik a_lk]`` of two rows at one reduced scale (no checks).

    Rows of T keys with energies ``N(0, x^2 log T)`` correlated by ``rho`` over the same
    key (module docstring). ``refine`` divides every step (a convergence check).

    Parameters
    ----------
    x : float
        Reduced scale ``beta sqrt(q (q - p)) >= 0``.
    rho : float
        Correlation of the two rows' energies, the token cosine ``p / q``, in [-1, 1].
    seq_len : int
        T >= 2.
    refine : int

    Returns
    -------
    float
        C, between ``1/T`` (``rho = 0``) and ``Y_2`` (``rho = 1``) for ``rho >= 0``. Beyond
        ``T = CROSS_T_MAX`` (1e12) the ratio ``r = (C - 1/T)/(Y_2 - 1/T)`` is taken at
        ``CROSS_T_MAX`` (``r`` falls with T, so C is then an upper bound; at T = 1e12,
        ``r <= 0.03`` for ``x >= 0.5``): the quadrature's lattice grows with ``log T``
        (4.8 s per evaluation at 1e15, 111 s at 1e18).

    References
    ----------
    Derrida (1981); Giorlandino & Goldt, arXiv 2505.24333 (docs/theory.md section 3).
    """
    x, rho, seq_len = float(x), float(rho), float(seq_len)
    log_t = math.log(seq_len)
    sigma = x * math.sqrt(log_t)
    if sigma == 0.0 or rho == 0.0:
        return 1.0 / seq_len
    if seq_len > CROSS_T_MAX:  # the lattice grows with log T: r = (C - 1/T)/(Y2 - 1/T) at CROSS_T_MAX
        y2 = float(row_moment(np.array([float(x)]), int(seq_len), (2,))[0])
        return 1.0 / seq_len + cross_ratio(x, rho, CROSS_T_MAX, refine) * (y2 - 1.0 / seq_len)
    if rho >= 1.0:
        return float(row_moment(np.array([x]), int(seq_len), (2,))[0])
    c = sigma * math.sqrt(abs(rho))
    s = sigma * math.sqrt(1.0 - abs(rho))
    t0, t1, width = _one_row_profile(sigma, seq_len)
    dtau = min(width, math.sqrt(1.64 + s * s)) / (_TAU_STEPS_PER_WIDTH * refine)
    n_tau = int(math.ceil((t1 - t0) / dtau)) + 1
    if _U_STEP * c >= dtau / 4.0:  # trapezoid in u on the tau lattice
        steps = max(1, int(math.ceil(dtau * refine / (_U_STEP * c))))
        du = dtau / steps
        n_u = int(math.ceil(_z_cut(log_t) * c / du))
        u = du * np.arange(-n_u, n_u + 1)
        weights = np.exp(-0.5 * (u / c) ** 2) * (du / (c * _SQRT_2PI))
        lattice = t0 + du * (np.arange((n_tau - 1) * steps + 2 * n_u + 1) - n_u)
        a, p, low = _row_functions(lattice, s, log_t)
        index = steps * np.arange(n_tau)[None, :] - np.arange(-n_u, n_u + 1)[:, None] + n_u
        a, p, low = a[index], p[index], low[index]
    else:  # c small: Gauss-Hermite in u
        u = c * _HERMITE_Z
        weights = _HERMITE_W
        points = (t0 + dtau * np.arange(n_tau))[None, :] - u[:, None]
        a, p, low = (f.reshape(points.shape) for f in _row_functions(points.ravel(), s, log_t))
    # the second row sees -u when rho < 0 (both u-grids are symmetric)
    a2, p2, low2 = (a, p, low) if rho > 0 else (a[::-1], p[::-1], low[::-1])
    w = weights[:, None]
    b = (a * w).T @ a2
    m = (low * w).T @ low2
    one_minus_m = (p * w).sum(0)[:, None] + (p2 * w).sum(0)[None, :] - (p * w).T @ p2
    with np.errstate(divide="ignore"):
        log_m = np.where(m < 0.5, np.log(m), np.log1p(-np.minimum(one_minus_m, 0.5)))
    return float(seq_len * dtau * dtau * np.sum(b * np.exp((seq_len - 1.0) * log_m)))


# ---------------------------------------------------------------------------------
# The table the depth kernels read
# ---------------------------------------------------------------------------------
#: x range of the table; beyond it the ratio r is held at its value at CROSS_X_MAX.
CROSS_X_MAX = 20.0
#: Largest T at which the cross-overlap is computed exactly (see :func:`cross_moment`).
CROSS_T_MAX = 10 ** 12
#: Nodes uniform in u = x / (x + x_s) (x_s of :mod:`.table`) and in xi = sqrt(1 - rho).
_X_NODES = 21
_XI_NODES = 11
#: Header of a packed cross table: (T, 1/T, x_s/du, 1/du, x_s); then 16 coefficients per cell.
_CROSS_HEADER = 5
#: Steps of the tabulated quadratures relative to :func:`cross_moment` (error ~1e-5, far
#: below the interpolation error).
_TABLE_REFINE = 0.75


def cross_ratio(x, rho, seq_len, refine=1):
    r"""``r = (C - 1/T) / (Y_2 - 1/T)``: 0 at ``rho = 0``, 1 at ``rho = 1``, ``rho`` as ``x -> 0``."""
    if x == 0.0:
        return float(rho)
    y2 = float(row_moment(np.array([float(x)]), int(seq_len), (2,))[0])
    return (cross_moment(x, rho, seq_len, refine) - 1.0 / seq_len) / (y2 - 1.0 / seq_len)


def _cell_polynomials(n):
    """``P[c, a, m]``: coefficient of ``s^a`` in the weight of node ``first(c) + m`` in cell ``c``.

    The interpolant on nodes ``0..n-1`` is the cubic through the 4 nodes around each cell
    (``first(c) = min(max(c - 1, 0), n - 4)``: one-sided at the ends), written as a
    polynomial in the offset ``s in [0, 1]`` from the cell's left node.
    """
    polynomials = np.empty((n - 1, 4, 4))
    stencil = np.arange(4.0)
    for cell in range(n - 1):
        first = min(max(cell - 1, 0), n - 4)
        for m in range(4):
            others = np.delete(stencil, m)
            weight = np.polynomial.Polynomial.fromroots(others) / np.prod(stencil[m] - others)
            shifted = weight(np.polynomial.Polynomial([cell - first, 1.0]))  # node index = first + t
            polynomials[cell, :, m] = np.pad(shifted.coef, (0, 4 - shifted.coef.size))
    return polynomials


def _first_node(n):
    """First node of each cell's 4-point stencil (as in :func:`_cell_polynomials`)."""
    cells = np.arange(n - 1)
    return np.minimum(np.maximum(cells - 1, 0), n - 4)


def _cell_coefficients(ratio):
    """``c[i, j, k, a]``: coefficient of ``s_xi^k s_x^a`` of the tensor-product cubic in cell ``(i, j)``."""
    n_x, n_xi = ratio.shape
    px, py = _cell_polynomials(n_x), _cell_polynomials(n_xi)
    fx, fy = _first_node(n_x), _first_node(n_xi)
    coefficients = np.empty((n_x - 1, n_xi - 1, 4, 4))
    for i in range(n_x - 1):
        for j in range(n_xi - 1):
            block = ratio[fx[i]:fx[i] + 4, fy[j]:fy[j] + 4]
            coefficients[i, j] = (px[i] @ block @ py[j].T).T
    return coefficients


@inline_jitable
def cross_overlap_core(table, x, rho, y2):
    r"""Cross-overlap ``C`` of two rows from a packed cross table (jittable, inlined).

    .. math:: C = \frac1T + r(x, \rho)\,\Big(Y_2 - \frac1T\Big)

    ``r`` interpolated by a tensor-product cubic in ``u = x / (x + x_s)`` and
    ``xi = sqrt(1 - rho)`` (the cubic through the 4 nodes around each cell, stored as its
    16 polynomial coefficients per cell; held at ``x = CROSS_X_MAX`` beyond; ``r = rho``
    for ``rho < 0``, the small-x law, there ``|rho| <= 1/(T - 1)``). ``table``:
    ``CrossOverlapTable.packed``; ``y2`` the row's participation ratio at the same ``x``.
    Called once per softmax layer per cell by the finite-T depth kernels: one division for
    the x position, no stencil search, the powers of the two offsets computed beside the
    loads (no serial Horner chain).
    """
    # u / du = (1 - x_s / (x + x_s)) / du: 0 at x = 0, 1 / du at x = inf
    position_x = table[3] - table[2] / (x + table[4])
    return cross_overlap_at(table, position_x, rho, y2)


@inline_jitable
def cross_overlap_at(table, position_x, rho, y2):
    r""":func:`cross_overlap_core` at the position ``u / du`` of ``x`` on the table's x nodes
    (``u = x / (x + x_s)``, the coordinate of the participation table too: the depth kernels
    take it from :func:`~remprop.theory.rem.table_position`, one division for both tables).
    Branch-free: the ``rho <= 0`` law and the cubic are both computed and one is selected, so that
    the depth kernels' loop over cells vectorises (``remprop.theory.kernels._sweeps``)."""
    inv_t = table[1]
    negative = inv_t + rho * (y2 - inv_t)  # r = rho below rho = 0 (selected at the end: no branch)
    if not position_x >= 0.0:  # NaN or negative x
        position_x = 0.0
    position_x = min(position_x, _X_NODES - 1.0)
    position_xi = math.sqrt(max(1.0 - rho, 0.0)) * (_XI_NODES - 1.0)
    if not position_xi >= 0.0:  # NaN rho
        position_xi = 0.0
    position_xi = min(position_xi, _XI_NODES - 1.0)  # rho < 0 (its value is not used)
    # the cells by truncation (the positions are >= 0 here, so it is floor): 1.3x faster than math.floor
    cell_x = min(int(position_x), _X_NODES - 2)
    cell_xi = min(int(position_xi), _XI_NODES - 2)
    sx = position_x - cell_x
    sy = position_xi - cell_xi
    sx2 = sx * sx
    sy2 = sy * sy
    sx3 = sx2 * sx
    sy3 = sy2 * sy
    k = _CROSS_HEADER + 16 * (cell_x * (_XI_NODES - 1) + cell_xi)
    r0 = (table[k] + table[k + 4] * sy) + (table[k + 8] * sy2 + table[k + 12] * sy3)
    r1 = (table[k + 1] + table[k + 5] * sy) + (table[k + 9] * sy2 + table[k + 13] * sy3)
    r2 = (table[k + 2] + table[k + 6] * sy) + (table[k + 10] * sy2 + table[k + 14] * sy3)
    r3 = (table[k + 3] + table[k + 7] * sy) + (table[k + 11] * sy2 + table[k + 15] * sy3)
    r = (r0 + r1 * sx) + (r2 * sx2 + r3 * sx3)
    inside = inv_t + r * (y2 - inv_t)
    return inside if rho > 0.0 else negative  # a NaN rho gives NaN (from the law below 0)


@njit(**_JIT)
def _lookup_many(table, x, rho, y2):
    out = np.empty(x.size)
    for i in range(x.size):
        out[i] = cross_overlap_core(table, x[i], rho[i], y2[i])
    return out


class CrossOverlapTable:
    r"""Tabulated ratio ``r(x, rho) = (C - 1/T)/(Y_2 - 1/T)`` at one sequence length.

    Built by :func:`cross_overlap_table`; call it with ``(x, rho)`` for ``C``. ``ratio``
    holds ``r`` on the ``n_x x n_xi`` nodes (``x_nodes``, ``xi_nodes = sqrt(1 - rho)``);
    ``packed`` (header ``(T, 1/T, x_s/du, 1/du, x_s)``, then per cell, x-major, the 16
    coefficients ``c[k, a]`` of ``s_xi^k s_x^a``) is what :func:`cross_overlap_core` reads.
    """

    def __init__(self, seq_len, ratio=None):
        self.seq_len = seq_len
        x_scale = _table_scale(seq_len)
        du = CROSS_X_MAX / (CROSS_X_MAX + x_scale) / (_X_NODES - 1)
        u = du * np.arange(_X_NODES)
        self.x_nodes = x_scale * u / (1.0 - u)
        self.x_nodes[-1] = CROSS_X_MAX
        self.xi_nodes = np.linspace(0.0, 1.0, _XI_NODES)
        if ratio is None:
            ratio = np.empty((_X_NODES, _XI_NODES))
            for i, x in enumerate(self.x_nodes):
                for j, xi in enumerate(self.xi_nodes):
                    rho = 1.0 - xi * xi
                    ratio[i, j] = (1.0 if j == 0 else 0.0 if j == _XI_NODES - 1
                                   else cross_ratio(x, rho, seq_len, _TABLE_REFINE))
        self.ratio = np.array(ratio, dtype=np.float64).reshape(_X_NODES, _XI_NODES)
        header = [float(seq_len), 1.0 / seq_len, x_scale / du, 1.0 / du, x_scale]
        self.packed = np.concatenate([header, _cell_coefficients(self.ratio).ravel()])
        for array in (self.x_nodes, self.xi_nodes, self.ratio, self.packed):
            array.setflags(write=False)

    def __call__(self, x, rho):
        """Interpolated ``C`` at reduced scale(s) ``x`` and cosine(s) ``rho`` (broadcast)."""
        x, rho = np.asarray(x, dtype=np.float64), np.asarray(rho, dtype=np.float64)
        # fresh writable arrays of the common shape: the compiled lookup reads the arrays' flags, and a
        # view from np.broadcast_arrays warns (FutureWarning) when its writeable flag is read
        shape = np.broadcast_shapes(x.shape, rho.shape)
        x, rho = np.broadcast_to(x, shape).copy(), np.broadcast_to(rho, shape).copy()
        y2 = participation_table(self.seq_len)(x)
        return _lookup_many(self.packed, x.ravel(), rho.ravel(), y2.ravel()).reshape(x.shape)

    def __repr__(self):
        return f"CrossOverlapTable(seq_len={self.seq_len})"


@functools.lru_cache(maxsize=64)
def _cached_table(seq_len):
    def valid(nodes):  # (T, n_x, n_xi) and r on the nodes
        return (nodes.size == 3 + _X_NODES * _XI_NODES and nodes[0] == seq_len and nodes[1] == _X_NODES
                and nodes[2] == _XI_NODES)

    def build():
        return np.concatenate([[float(seq_len), _X_NODES, _XI_NODES], CrossOverlapTable(seq_len).ratio.ravel()])

    nodes = cached_array(f"cross-overlap-T{seq_len}", (_HERE / "cross_overlap.py", _HERE / "table.py", _HERE / "integral.py"), build, valid)
    return CrossOverlapTable(seq_len, ratio=nodes[3:])


def cross_overlap_table(seq_len):
    r"""The cached table of the cross-overlap ``C(x, rho)`` at sequence length ``seq_len``.

    ``21 x 11`` nodes in ``(x / (x + x_s), sqrt(1 - rho))``, ``x <= CROSS_X_MAX``; about
    180 quadratures (seconds), cached in memory per T and on disk for other processes
    (:func:`remprop.cache.cached_array`, like :func:`~remprop.theory.rem.participation_table`). Interpolation error of ``r``
    below 2e-3 (``C`` within ``2e-3 (Y_2 - 1/T)``; tests/test_cross_overlap.py).

    Parameters
    ----------
    seq_len : int
        T >= 2.

    Returns
    -------
    CrossOverlapTable

    References
    ----------
    Docs/theory.md section 3.
    """
    return _cached_table(check_seq_len(seq_len, allow_none=False))


def cross_overlap(beta, q, p, seq_len=None, method="exact"):
    r"""Cross-overlap ``C = <sum_k a_ik a_lk>`` of two different rows of softmax attention.

    Finite ``T = seq_len``: the exact expectation for Gaussian scores (module docstring),

    .. math:: C = T \iint d\tau\,d\tau'\; E_u[A(\tau - u) A(\tau' - u)]\,
              E_u[L(\tau - u) L(\tau' - u)]^{T - 1},\qquad u \sim N(0, \rho\,x^2 \log T),

    ``A, L`` the one-key functions at energy variance ``(1 - rho) x^2 log T``,
    ``x = beta sqrt(q (q - p))``, ``rho = p / q``. ``1/T`` at ``rho = 0``, ``Y_2`` at
    ``rho = 1``; at T = 512, beta = 1.2, rho = 0.5: ``6.3 / T``. ``seq_len=None``
    (``T -> infinity``): 0 for ``p < q`` (two rows with different energies share no
    key's weight: the REM is chaotic in its disorder).

    Parameters
    ----------
    beta : array_like
        Query/key scale, >= 0.
    q, p : array_like
        Token order parameters (``|p| <= q``).
    seq_len : int or None
        T >= 2, or None for T -> infinity.
    method : {"exact", "table"}
        ``"exact"``: the quadrature per distinct ``(x, rho)`` (relative error below 1e-6,
        10 to 100 ms each); ``"table"``: :func:`cross_overlap_table` (``C`` within
        ``2e-3 (Y_2 - 1/T)``, microseconds).

    Returns
    -------
    ndarray or float

    References
    ----------
    Derrida (1981); Giorlandino & Goldt, arXiv 2505.24333 (docs/theory.md section 3).

    Examples
    --------
    >>> round(512 * cross_overlap(1.2, 1.0, 0.5, seq_len=512), 2)
    6.31
    """
    seq_len = check_seq_len(seq_len)
    check_choice("method", method, ("exact", "table"))
    beta = as_float_array("beta", beta, nonnegative=True)
    q, p = check_overlap(q, p)
    beta, q, p = np.broadcast_arrays(beta, q, p)
    if seq_len is None:
        return scalar_or_array(np.where(p >= q, 1.0, 0.0) + 0.0 * beta)
    with np.errstate(over="ignore"):
        x = beta * np.sqrt(q) * np.sqrt(q - np.minimum(p, q))
    rho = np.clip(p / q, -1.0, 1.0)
    if method == "table":
        return scalar_or_array(cross_overlap_table(seq_len)(x, rho))
    pairs, inverse = np.unique(np.stack([x.ravel(), rho.ravel()], axis=1), axis=0, return_inverse=True)
    values = np.array([cross_moment(a, b, seq_len) for a, b in pairs])
    return scalar_or_array(values[np.ravel(inverse)].reshape(x.shape))
