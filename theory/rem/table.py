r"""The table type of the REM: a moment tabulated in ``x = beta sqrt(q (q - p))`` at one T.

Depth kernels evaluate ``Y_2`` millions of times, so :func:`participation_table`
tabulates the exact ``Y_k`` of :mod:`.integral` once per ``(T, k)`` (about 0.7 s; cached
in memory and on disk) at 1000 nodes uniform in ``u = x / (x + x_s)``,
``x_s = min(2, 3 / sqrt(log T))`` (dense where the crossover from the annealed to the
frozen regime sits; it sharpens like ``1 / log T``), ``x`` in ``[0, 50]``, and
interpolates with a clamped cubic spline (``d/du = 0`` at ``x = 0``, where ``Y_k`` is
even in ``x``). A lookup is a division, a floor and a cubic: no transcendental
function, and no branch (both sides of each choice are computed and one is selected), so
that the depth kernels' loop over a batch of cells vectorises
(``remprop.theory.kernels._sweeps``, "Batch buffers on the stack") and a finite-T depth
kernel costs little more than an asymptotic one.

Guaranteed interpolation error: ``|Y_table - Y_exact| <= TABLE_TOLERANCE * Y_exact``
(relative 1e-6) for every ``x`` in ``[0, 50]`` and ``T`` in ``[2, 1e7]`` (measured worst
case at the midpoints between nodes, where a spline's error peaks: 2.3e-8 for k = 2 and
3.5e-7 for k = 3, at T = 1e7; absolute errors below 1e-10; tests/test_finite_t.py
re-checks it at several T). Beyond ``x = 50`` the table continues with the large-``x``
law ``1 - Y_k proportional to 1/x``.

The same tables serve the causal rows (:mod:`remprop.theory.rem.causal`): a row with t keys at the score
scale of T is the t-key table at ``x sqrt(log T / log t)``.

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
from .checks import check_order, check_seq_len
from .integral import row_moment

#: This folder: the sources whose hash keys the tables on disk (:func:`remprop.cache.cached_array`).
_HERE = Path(__file__).parent

__all__ = ["ParticipationTable", "participation_table", "table_lookup", "table_position", "table_lookup_at",
           "after_table", "TABLE_TOLERANCE",
           "TABLE_X_MAX"]

#: x range covered by the tables.
TABLE_X_MAX = 50.0
#: The spline's guaranteed relative error.
TABLE_TOLERANCE = 1e-6
#: Nodes, uniform in u = x / (x + x_s).
_TABLE_NODES = 1000
#: Header of a packed table: (seq_len, order, du, n_nodes, x_s, x_last).
_HEADER = 6


def _table_scale(seq_len):
    """x_s = min(2, 3 / sqrt(log T)): the annealed-to-frozen crossover sharpens like 1 / log T."""
    return min(2.0, 3.0 / math.sqrt(math.log(seq_len)))


@inline_jitable
def after_table(table):
    """The part of a flat array packed after a participation table (``ParticipationTable.packed``
    followed by other tables, as the finite-T depth kernels read them)."""
    return table[_HEADER + 2 * int(table[3]):]


@inline_jitable
def table_position(table, x):
    """Position of ``x`` on a packed table's nodes, ``u / du`` with ``u = x / (x + x_s)`` (in
    ``[0, n - 1]``; ``n - 1`` from ``x_last`` on): one division, shared by the lookups at the same
    ``x`` (:func:`table_lookup_at`; the cross-overlap table, on the same ``u`` with its own step,
    :func:`~remprop.theory.rem.cross_overlap_at`). Branch-free, like the lookups (module notes)."""
    position = x / ((x + table[4]) * table[2])
    if not position >= 0.0:  # NaN or negative round-off
        position = 0.0
    last = table[3] - 1.0
    return last if x >= table[5] else position


@inline_jitable
def table_lookup_at(table, x, position):
    """``Y_k`` at ``x`` from a packed table, ``position`` being :func:`table_position` of ``x``
    (:func:`table_lookup`, with the position computed once for several tables)."""
    du = table[2]
    n = int(table[3])
    x_last = table[5]
    beyond = 1.0 - (1.0 - table[_HEADER + n - 1]) * x_last / max(x, x_last)  # selected from x_last on
    i = min(max(int(position), 0), n - 2)
    t = position - i
    s = 1.0 - t
    f0 = table[_HEADER + i]
    f1 = table[_HEADER + i + 1]
    m0 = table[_HEADER + n + i]
    m1 = table[_HEADER + n + i + 1]
    spline = s * f0 + t * f1 + (du * du / 6.0) * ((s * s * s - s) * m0 + (t * t * t - t) * m1)
    return beyond if x >= x_last else spline


@inline_jitable
def table_lookup(table, x):
    """Y_k at reduced scale ``x = beta sqrt(q (q - p))`` from a packed table.

    ``table`` is the flat array of ``ParticipationTable.packed``: header
    ``(T, k, du, n, x_s, x_last)``, then ``n`` values and ``n`` spline second
    derivatives on ``u = x / (x + x_s)``. Beyond ``x_last`` (= 50) ``1 - Y_k`` falls
    like ``1 / x``. :func:`table_lookup_at` at :func:`table_position`.
    """
    return table_lookup_at(table, x, table_position(table, x))


@njit(cache=CACHE, **JIT_OPTIONS)
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


def _nodes(du, n, x_scale):
    u = du * np.arange(n)
    x = x_scale * u / (1.0 - u)
    x[-1] = TABLE_X_MAX
    return x


class ParticipationTable:
    r"""Tabulated ``Y_k(x)`` at one sequence length, for fast evaluation.

    Built by :func:`participation_table` (cached per ``(seq_len, order)``). Call it
    with the reduced scale ``x = beta sqrt(q (q - p))``; ``packed`` is the flat
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
        if packed is None:
            x_scale = _table_scale(seq_len)
            du = TABLE_X_MAX / (TABLE_X_MAX + x_scale) / (nodes - 1)
            # one thread: a cold start then compiles only the serial loop (row_moment)
            y = row_moment(_nodes(du, nodes, x_scale), seq_len, (order,), parallel=False)
            # dY/du at the right end from a 5-point one-sided difference; 0 at x = 0 (even)
            slope_right = (25 * y[-1] - 48 * y[-2] + 36 * y[-3] - 16 * y[-4] + 3 * y[-5]) / (12 * du)
            second = _clamped_spline_second_derivatives(y, du, 0.0, slope_right)
            packed = np.concatenate([[float(seq_len), float(order), du, float(nodes), x_scale, TABLE_X_MAX],
                                     y, second])
        du, n, self.x_scale = packed[2], int(packed[3]), packed[4]
        self.x_nodes = _nodes(du, n, self.x_scale)
        self.values = packed[_HEADER:_HEADER + n].copy()
        self.packed = packed
        for array in (self.x_nodes, self.values, self.packed):
            array.setflags(write=False)

    def __call__(self, x):
        """Interpolated ``Y_k`` at reduced scale(s) ``x >= 0`` (broadcasts)."""
        x = np.asarray(x, dtype=np.float64)
        # always one contiguous 1-D array: one compiled specialisation (about 1.5 s each, cold)
        return _lookup_many(self.packed, x.ravel()).reshape(x.shape)

    def __repr__(self):
        return f"ParticipationTable(seq_len={self.seq_len}, order={self.order})"


@functools.lru_cache(maxsize=256)
def _cached_table(seq_len, order):
    def valid(packed):
        n = int(packed[3]) if packed.size > _HEADER else -1
        return n >= 5 and packed.size == _HEADER + 2 * n and packed[0] == seq_len and packed[1] == order

    packed = cached_array(f"participation-T{seq_len}-k{order}", (_HERE / "table.py", _HERE / "integral.py"),
                          lambda: np.asarray(ParticipationTable(seq_len, order).packed), valid)
    return ParticipationTable(seq_len, order, packed=packed)


def participation_table(seq_len, order=2):
    r"""The cached table of ``Y_k(x)`` at sequence length ``seq_len``.

    Building costs 1000 exact evaluations (about 0.7 s, on one thread); later calls with
    the same ``(seq_len, order)`` return the same object, and the table is also saved in
    remprop's cache folder (:func:`remprop.cache.cached_array`: ``$REMPROP_CACHE_DIR``, else
    the user cache) so that other processes load it instead (file name keyed by a hash of the
    integrator's and this module's source; an unwritable folder only disables the disk copy).

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
    Derrida (1981); Giorlandino & Goldt, arXiv 2505.24333 (docs/theory.md section 3).

    Examples
    --------
    >>> round(float(participation_table(512)(1.5)), 3)
    0.279
    """
    return _cached_table(check_seq_len(seq_len, allow_none=False), check_order(order))
