r"""Causal (decoder) attention: the REM of a token that sees only the keys before it.

With a causal mask, the token at position t (1-based) attends to the t keys
``1..t``. Its scores keep the scale of the model's sequence length T, which sets
``s_qk^2 = beta sqrt(log T) / d``: the row is a REM with **t** states and energy variance

.. math:: v = \beta^2 q (q - p) \log T ,

so (with the exact finite-size moments of :mod:`.finite_size`, whose variance is
``x^2 log(seq_len)``) the participation ratio of row t is

.. math:: Y_2(t) = Y_2^{\rm exact}\Big(x \sqrt{\log T / \log t};\ t\Big),
          \qquad x = \beta \sqrt{q (q - p)} ,

and two rows t, t' near the end of the sequence have the cross-overlap ``1/t`` (independent
rows over about t common keys). Late tokens (``t`` close to T) see almost the whole
simplex of tokens, so their order parameters follow the encoder's block maps with these
two replacements (THEORY.md section 8); :func:`propagate_causal` iterates those maps for
each position separately, and :func:`last_tokens_cosine` averages the cosine
``rho_t = p_t / q_t`` over the last k positions. Early tokens break the simplex picture
(position 1 attends to itself only; every early token has few keys): the prediction is
meant for late positions, and its error against position is measured in
``remprop.validation.causal``.

Position 1 has no REM (one key): positions must be >= 2.

References
----------
A. Giorlandino & S. Goldt, arXiv 2505.24333 (Fig. 12: causal model, last 50 tokens);
B. Derrida (1981).
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
from scipy.interpolate import CubicSpline, RectBivariateSpline

from . import components as C
from .checks import as_float_array, check_depth
from .architecture import Architecture
from .attention import softmax_attention_overlap_core
from .rem.finite_t import check_seq_len, participation_moment

__all__ = [
    "causal_participation_ratio",
    "CausalParticipationTable",
    "causal_participation_table",
    "CausalTrajectory",
    "propagate_causal",
    "last_tokens_cosine",
    "LAST_TOKENS",
]

#: Late tokens of a causal model that follow the encoder maps: the reference experiment
#: averages the last 50 positions of T = 512 (THEORY.md section 8).
LAST_TOKENS = 50

#: x range and node count of the causal tables (nodes uniform in u = log(1 + x / 0.5)).
CAUSAL_X_MAX = 50.0
_X_SCALE = 0.5
_X_NODES = 120
#: Most position nodes of a table (geometric in t between the smallest and largest position).
_T_NODES = 20


def _check_positions(positions, seq_len):
    arr = np.asarray(positions)
    if arr.size == 0 or not np.issubdtype(arr.dtype, np.number) or np.any(arr != np.round(arr)):
        raise ValueError(f"positions must be integers in [2, seq_len], got {positions!r}")
    arr = np.asarray(np.round(arr), dtype=np.int64)
    if arr.min() < 2 or arr.max() > seq_len:
        raise ValueError(f"positions must lie in [2, seq_len={seq_len}], got {arr.min()}..{arr.max()}")
    return arr


def causal_participation_ratio(beta, q, p, position, seq_len, order=2):
    r"""Exact ``Y_k`` of the attention row of the token at ``position`` in a causal layer.

    .. math:: Y_k(t) = Y_k^{\rm exact}\big(\beta \sqrt{\log T / \log t},\ q,\ p;\ t\big)

    (t states, energy variance ``beta^2 q (q - p) log T``).

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

    Returns
    -------
    ndarray or float

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (THEORY.md section 8); Derrida (1981).
    """
    seq_len = check_seq_len(seq_len, allow_none=False)
    (t,) = _check_positions([position], seq_len)
    beta = as_float_array("beta", beta, nonnegative=True)
    return participation_moment(beta * math.sqrt(math.log(seq_len) / math.log(t)), q, p, int(t), order=order)


class CausalParticipationTable:
    r"""Interpolated ``Y2(t, x)`` of causal rows at one model length T.

    Exact values (:func:`causal_participation_ratio`) at position nodes (every position
    when there are at most 20 distinct ones, else 20 geometric nodes) and 120 nodes in
    ``u = log(1 + x / 0.5)`` for ``x = beta sqrt(q (q - p))`` in ``[0, 50]``; ``logit Y2`` is
    interpolated by a cubic spline in u and (with several position nodes) in ``log t``.
    Relative error below 1e-3 (tests/test_causal.py); beyond ``x = 50`` exact values.
    """

    def __init__(self, seq_len, positions):
        self.seq_len = check_seq_len(seq_len, allow_none=False)
        positions = np.unique(_check_positions(positions, self.seq_len))
        if positions.size > _T_NODES:
            nodes = np.unique(np.round(np.geomspace(positions[0], positions[-1], _T_NODES)).astype(np.int64))
        else:
            nodes = positions
        self.t_nodes = nodes
        u = np.linspace(0.0, math.log1p(CAUSAL_X_MAX / _X_SCALE), _X_NODES)
        x = _X_SCALE * np.expm1(u)
        logit = np.empty((nodes.size, u.size))
        for i, t in enumerate(nodes):
            y = np.asarray(participation_moment(x * math.sqrt(math.log(self.seq_len) / math.log(t)), 1.0, 0.0,
                                                int(t)))
            logit[i] = np.log(y) - np.log1p(-y)
        self._u_max = u[-1]
        if nodes.size == 1:
            spline = CubicSpline(u, logit[0])
            self._logit = lambda log_t, uu: spline(uu)
        else:
            spline2 = RectBivariateSpline(np.log(nodes), u, logit, kx=min(3, nodes.size - 1), ky=3)
            self._logit = lambda log_t, uu: spline2.ev(log_t, uu)

    def __call__(self, positions, x):
        """``Y2`` at positions (ints in the table's range) and reduced scales x >= 0 (broadcast)."""
        positions, x = np.broadcast_arrays(np.asarray(positions), np.asarray(x, dtype=np.float64))
        shape = x.shape
        positions, x = positions.ravel(), x.ravel()
        u = np.log1p(x / _X_SCALE)
        out = 1.0 / (1.0 + np.exp(-self._logit(np.log(positions.astype(np.float64)), u)))
        for i in np.nonzero(u > self._u_max)[0]:
            t = int(positions[i])
            out[i] = participation_moment(x[i] * math.sqrt(math.log(self.seq_len) / math.log(t)), 1.0, 0.0, t)
        return out.reshape(shape) if shape else float(out[0])


@functools.lru_cache(maxsize=16)
def _cached_table(seq_len, positions):
    return CausalParticipationTable(seq_len, np.array(positions))


def causal_participation_table(seq_len, positions):
    """The cached :class:`CausalParticipationTable` for ``seq_len`` and these positions."""
    seq_len = check_seq_len(seq_len, allow_none=False)
    positions = tuple(int(t) for t in np.unique(_check_positions(positions, seq_len)))
    return _cached_table(seq_len, positions)


@dataclass(repr=False)
class _CausalAttention(C.Component):
    beta: np.ndarray
    sigma_v2: np.ndarray
    sigma_b2: np.ndarray
    positions: np.ndarray
    table: CausalParticipationTable
    name = "causal_softmax_attention"

    def apply(self, q, p):
        x = self.beta * np.sqrt(np.maximum(q * (q - p), 0.0))
        y2 = self.table(self.positions, x)
        return softmax_attention_overlap_core(q, p, y2, 1.0 / self.positions, self.sigma_v2, self.sigma_b2)


def _causal_block(arch, beta, positions, table):
    return arch.compose(_CausalAttention(beta, np.asarray(arch.sigma_v2, float), np.asarray(arch.sigma_b2, float),
                                         positions, table))


@dataclass(frozen=True)
class CausalTrajectory:
    """Per-position order parameters of a causal stack.

    Attributes
    ----------
    positions : ndarray of int, shape (n,)
    q, p : ndarray, shape (n, depth + 1)
        Column 0 is the input.
    """

    positions: np.ndarray
    q: np.ndarray
    p: np.ndarray

    @property
    def rho(self):
        return self.p / self.q

    @property
    def depth(self):
        return self.q.shape[-1] - 1


def propagate_causal(arch: Architecture, beta, depth, seq_len, positions, q0=1.0, rho0=0.0) -> CausalTrajectory:
    r"""Late-token theory of a causal stack: the encoder maps with t keys per position.

    For each position t the block maps of ``arch`` are iterated with the causal
    attention map

    .. math:: q_A = s_v^2 (p + (q - p) Y_2(t)) + s_b^2,\qquad
              p_A = s_v^2 (p + (q - p)/t) + s_b^2,

    ``Y_2(t)`` from :class:`CausalParticipationTable` (t states at the score scale of T).

    Parameters
    ----------
    arch : Architecture
        Scalar numeric fields; ``attention="softmax"`` (the centring of gain-controlled
        attention mixes all positions and has no per-position map).
    beta : float
        Query/key scale, > 0.
    depth : int
    seq_len : int
        The model's T.
    positions : array_like of int
        Positions t in [2, T] (1-based).
    q0, rho0 : float
        Input state of every position.

    Returns
    -------
    CausalTrajectory

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 12 (THEORY.md section 8).
    """
    if not isinstance(arch, Architecture):
        raise ValueError(f"arch must be a remprop.theory.Architecture, got {type(arch).__name__}")
    if arch.attention != "softmax":
        raise ValueError(f"attention must be 'softmax' for the causal theory, got {arch.attention!r}")
    for name, value in arch.numeric().items():
        if value.ndim:
            raise ValueError(f"{name} must be a scalar for the causal theory, got shape {value.shape}")
    depth = check_depth(depth)
    seq_len = check_seq_len(seq_len, allow_none=False)
    positions = _check_positions(positions, seq_len)
    beta = as_float_array("beta", beta, positive=True)
    if beta.ndim:
        raise ValueError(f"beta must be a scalar for the causal theory, got shape {beta.shape}")
    q0 = as_float_array("q0", q0, positive=True)
    rho0 = as_float_array("rho0", rho0, low=-1.0, high=1.0)
    table = causal_participation_table(seq_len, positions)
    block = _causal_block(arch, beta, positions.astype(np.float64), table)
    q = np.empty((positions.size, depth + 1))
    p = np.empty((positions.size, depth + 1))
    q[:, 0] = q0
    p[:, 0] = q0 * rho0
    cur_q, cur_p = q[:, 0].copy(), p[:, 0].copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        for layer in range(depth):
            cur_q, cur_p = block.apply(cur_q, cur_p)
            q[:, layer + 1] = cur_q
            p[:, layer + 1] = cur_p
    return CausalTrajectory(positions, q, p)


def last_tokens_cosine(arch: Architecture, beta, depth, seq_len, last=LAST_TOKENS, q0=1.0, rho0=0.0):
    r"""Predicted average cosine of the last ``last`` tokens of a causal stack, per layer.

    ``(1/k) sum_{t = T-k+1}^{T} rho_t`` with ``rho_t`` from :func:`propagate_causal`.

    Returns
    -------
    ndarray, shape (depth + 1,)

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 12.
    """
    seq_len = check_seq_len(seq_len, allow_none=False)
    if isinstance(last, bool) or not isinstance(last, (int, np.integer)) or not 1 <= last <= seq_len - 1:
        raise ValueError(f"last must be an integer in [1, seq_len - 1], got {last!r}")
    traj = propagate_causal(arch, beta, depth, seq_len, np.arange(seq_len - last + 1, seq_len + 1), q0, rho0)
    return traj.rho.mean(axis=0)
