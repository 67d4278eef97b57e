r"""Causal attention rows: the REM of a token that sees only the keys before it.

With a causal mask, the token at position t (1-based) attends to the t keys ``1..t``.
Its scores keep the scale of the model's sequence length T, which sets
``s_qk^2 = beta sqrt(log T) / d``: the row is a REM with **t** states and energy variance
``v = beta^2 q (q - p) log T`` (docs/theory.md section 8). The finite-T moments are
parametrised by ``x = beta sqrt(q (q - p))`` with variance ``x^2 log(seq_len)``, so

.. math:: Y_k(t) = Y_k^{\rm exact}\Big(x \sqrt{\log T / \log t};\ t\Big) .

The table of causal rows is therefore made of the ordinary finite-T tables
(:func:`~remprop.theory.rem.table.participation_table` at t keys, read at the rescaled
x) at a few position nodes, with a cubic spline of ``logit Y2`` in ``log t`` between
them. Position 1 has no REM (one key): positions must be >= 2.

Rotary positions (docs/theory.md section 8). With RoPE the part ``p`` of the scores shared
by the keys becomes a field with correlation ``c(m - l)`` over the keys
(:mod:`~remprop.theory.rem.rope`); the query position drops out, so row t is the REM with
RoPE of its own t keys: ``p`` is replaced by ``p cbar_t`` in its scale, with the mean
pair correlation of t consecutive keys (:func:`causal_rope_correlation`),

.. math:: \bar c_t = \frac{2}{t (t - 1)}\sum_{k=1}^{t-1} (t - k)\, c(k) ,

:func:`~remprop.theory.rem.rope_mean_correlation` at t: a triangular average of ``c``
over the distances (not the plain average over ``k = 0..t-1``: a distance k occurs
between t - k pairs of keys). ``Y2`` of the row is then exact to second order in the
energies and is the REM itself at ``p = 0``, as for the encoder's rows (section 15).

References
----------
A. Giorlandino & S. Goldt, arXiv 2505.24333 (Fig. 12: causal model, last 50 tokens);
B. Derrida (1981).
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..checks import as_float_array, check_overlap
from .checks import check_positions, check_seq_len
from .finite_t import participation_moment
from .rope import ROPE_BASE, rope_mean_correlation
from .table import TABLE_X_MAX, participation_table

__all__ = ["causal_participation_ratio", "causal_rope_correlation", "CausalParticipationTable",
           "causal_participation_table"]

#: Position nodes of a table: geometric in t, at most this far apart in log t, at least 4
#: (a cubic), at most 20; every position when there are no more of them.
_LOG_T_STEP = 0.3
_MIN_T_NODES = 4
_MAX_T_NODES = 20


def _key_scale(seq_len, t):
    """``sqrt(log T / log t)``: the reduced scale of a t-key row at the score scale of T."""
    return math.sqrt(math.log(seq_len) / math.log(t))


def causal_rope_correlation(positions, seq_len, head_dim=64, base=ROPE_BASE):
    r"""Mean rotary correlation ``cbar_t`` of the keys of each causal row t.

    Row t sees the keys ``1..t``; the shared part of its scores has the correlation
    ``c(m - l)`` (:func:`~remprop.theory.rem.rope_correlation`) and its REM the overlap
    ``p cbar_t`` (docs/theory.md section 8), with the mean over the ordered pairs of its keys

    .. math:: \bar c_t = \frac{1}{t (t - 1)}\sum_{m \ne l \le t} c(m - l)
              = \frac{2}{t (t - 1)}\sum_{k=1}^{t-1} (t - k)\, c(k),

    which is :func:`~remprop.theory.rem.rope_mean_correlation` at t (the one formula,
    Fejer's kernel). It does not depend on T: ``seq_len`` only bounds the positions.

    Parameters
    ----------
    positions : array_like of int
        t in [2, T] (1-based).
    seq_len : int
        The model's T.
    head_dim : int
        ``d_H``, even.
    base : float
        RoPE base, > 1 (``inf`` allowed).

    Returns
    -------
    ndarray or float
        Shape of ``positions``; ``cbar_T`` of :func:`~remprop.theory.rem.rope_mean_correlation`
        at ``t = T``.

    References
    ----------
    docs/theory.md sections 8 and 15; Su et al., arXiv 2104.09864.

    Examples
    --------
    >>> round(causal_rope_correlation(512, 512, 128), 3)
    0.414
    """
    seq_len = check_seq_len(seq_len, allow_none=False)
    shape = np.shape(positions)
    t = check_positions(positions, seq_len).ravel()
    unique, inverse = np.unique(t, return_inverse=True)
    values = np.array([rope_mean_correlation(int(u), head_dim, base) for u in unique])[inverse]
    return values.reshape(shape) if shape else float(values[0])


def causal_participation_ratio(beta, q, p, position, seq_len, order=2, *, rope_head_dim=None, rope_base=ROPE_BASE):
    r"""Exact ``Y_k`` of the attention row of the token at ``position`` in a causal layer.

    .. math:: Y_k(t) = Y_k^{\rm exact}\big(\beta \sqrt{\log T / \log t},\ q,\ p\,\bar c_t;\ t\big)

    (t states, energy variance ``beta^2 q (q - p cbar_t) log T``; ``cbar_t = 1`` without
    rotary positions, :func:`causal_rope_correlation` with them).

    Parameters
    ----------
    beta, q, p : array_like
        Query/key scale and the order parameters of the keys.
    position : int
        t in [2, T] (1-based).
    seq_len : int
        The model's sequence length T (sets the score scale).
    order : int
        k >= 1.
    rope_head_dim : int or None
        Head width ``d_H`` of rotary positions (even); None (default): no rotation.
    rope_base : float
        RoPE base (read only with ``rope_head_dim``).

    Returns
    -------
    ndarray or float

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (docs/theory.md section 8); Derrida (1981).
    """
    seq_len = check_seq_len(seq_len, allow_none=False)
    (t,) = check_positions([position], seq_len)
    beta = as_float_array("beta", beta, nonnegative=True)
    if rope_head_dim is not None:
        q, p = check_overlap(q, p)
        try:
            cbar = causal_rope_correlation(int(t), seq_len, rope_head_dim, rope_base)
        except ValueError as err:   # the rules of rope.py, reported with this function's names
            raise ValueError(str(err).replace("head_dim", "rope_head_dim", 1).replace("base must", "rope_base must", 1)
                             ) from None
        p = p * cbar
    return participation_moment(beta * _key_scale(seq_len, t), q, p, int(t), order=order)


class CausalParticipationTable:
    r"""Interpolated ``Y2(t, x)`` of causal rows at one model length T.

    At each position node (geometric in t, at most 0.3 apart in ``log t``, 4 to 20 of
    them; every position when there are no more) the t-key :func:`~remprop.theory.rem.table.participation_table`
    read at ``x sqrt(log T / log t)``; between nodes a not-a-knot cubic spline of
    ``logit Y2`` in ``log t``. Relative error below 1e-5 for ``x <= 3`` (tests/test_causal.py);
    where the rescaled x of the position exceeds the tables' range (50), exact values.

    Attributes
    ----------
    seq_len : int
    t_nodes : ndarray of int
    tables : tuple of ParticipationTable
        One per node.
    """

    def __init__(self, seq_len, positions):
        self.seq_len = check_seq_len(seq_len, allow_none=False)
        positions = np.unique(check_positions(positions, self.seq_len))
        span = math.log(positions[-1] / positions[0])
        count = min(_MAX_T_NODES, max(_MIN_T_NODES, math.ceil(span / _LOG_T_STEP) + 1))
        if positions.size > count:
            positions = np.unique(np.round(np.geomspace(positions[0], positions[-1], count)).astype(np.int64))
        self.t_nodes = positions
        self.tables = tuple(participation_table(int(t), 2) for t in positions)
        self._scales = np.array([_key_scale(self.seq_len, int(t)) for t in positions])
        self._weights_of = {}

    def _weights(self, positions):
        """Spline weights ``w[i, j]``: logit Y2 at position i = sum_j w[i, j] logit Y2 at node j.

        Cached per array of positions (a depth iteration asks for the same ones each layer).
        """
        key = positions.tobytes()
        if key not in self._weights_of:
            if self.t_nodes.size == 1:
                weights = np.ones((positions.size, 1))
            else:
                log_nodes = np.log(self.t_nodes.astype(np.float64))
                from scipy.interpolate import CubicSpline  # lazily: 0.4 s of import

                spline = CubicSpline(log_nodes, np.eye(log_nodes.size), bc_type="not-a-knot")
                weights = spline(np.log(positions.astype(np.float64)))
            if len(self._weights_of) > 64:
                self._weights_of.clear()
            self._weights_of[key] = weights
        return self._weights_of[key]

    def __call__(self, positions, x):
        """``Y2`` at positions (ints in the table's range) and reduced scales x >= 0 (broadcast)."""
        positions, x = np.broadcast_arrays(np.asarray(positions), np.asarray(x, dtype=np.float64))
        shape = x.shape
        positions, x = positions.ravel(), x.ravel()
        node_values = np.array([table(x * scale) for table, scale in zip(self.tables, self._scales)])
        logit = np.sum(self._weights(positions).T * (np.log(node_values) - np.log1p(-node_values)), axis=0)
        out = 1.0 / (1.0 + np.exp(-logit))
        for i in np.flatnonzero(x * np.sqrt(math.log(self.seq_len) / np.log(positions)) > TABLE_X_MAX):
            t = int(positions[i])
            out[i] = participation_moment(x[i] * _key_scale(self.seq_len, t), 1.0, 0.0, t)
        return out.reshape(shape) if shape else float(out[0])


@functools.lru_cache(maxsize=16)
def _cached_table(seq_len, positions):
    return CausalParticipationTable(seq_len, np.array(positions))


def causal_participation_table(seq_len, positions):
    """The cached :class:`CausalParticipationTable` for ``seq_len`` and these positions."""
    seq_len = check_seq_len(seq_len, allow_none=False)
    positions = tuple(int(t) for t in np.unique(check_positions(positions, seq_len)))
    return _cached_table(seq_len, positions)
