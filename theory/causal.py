r"""Causal (decoder) attention: the REM of a token that sees only the keys before it.

With a causal mask, the token at position t (1-based) attends to the t keys
``1..t``. Its scores keep the scale of the model's sequence length T, which sets
``s_qk^2 = beta sqrt(log T) / d``: the row is a REM with **t** states and energy variance

.. math:: v = \beta^2 q (q - p) \log T ,

so the participation ratio of row t is the finite-T one of t keys at a rescaled
reduced scale (:mod:`remprop.theory.rem.causal`),

.. math:: Y_2(t) = Y_2^{\rm exact}\Big(x \sqrt{\log T / \log t};\ t\Big),
          \qquad x = \beta \sqrt{q (q - p)} ,

and two rows t, t' near the end of the sequence have the cross-overlap ``1/t`` (independent
rows over about t common keys; the encoder's finite-T map uses the tabulated overlap of
correlated rows, :func:`~remprop.theory.cross_overlap_table`, which is not tabulated per
position yet: at t = T, beta = 0.9, rho0 = 0.1 the two differ by 0.009 in the cosine after
12 post-LN blocks). Late tokens (``t`` close to T) see almost the whole
simplex of tokens, so their order parameters follow the encoder's block maps with these
two replacements (docs/theory.md section 8); :func:`propagate_causal` iterates those maps for
each position separately, and :func:`last_tokens_cosine` averages the cosine
``rho_t = p_t / q_t`` over the last k positions. Early tokens break the simplex picture
(position 1 attends to itself only; every early token has few keys): the prediction is
meant for late positions, and its error against position is measured in
``remprop.validation.causal``.

Position 1 has no REM (one key): positions must be >= 2.

Rotary positions (``arch.positions == "rope"``, LLaMA family). Row t sees its t keys
through the rotary correlation ``c(m - l)`` (stationary: the query position drops out), so
its REM reads the overlap ``p cbar_t`` in place of ``p``, with the mean pair correlation of
t keys (:func:`~remprop.theory.rem.causal.causal_rope_correlation`, the encoder's
``Architecture.mean_rope_correlation`` at ``T = t``):

.. math:: x_t = \beta \sqrt{q (q - p\, \bar c_t)} ,

while the values (not rotated) keep ``p`` in the output map and the cross-overlap stays
``1/t``. ``rope_base -> inf`` and ``d_H -> inf`` give ``cbar_t -> 1``, the theory without
rotation; ``p = 0`` gives it exactly.

References
----------
A. Giorlandino & S. Goldt, arXiv 2505.24333 (Fig. 12: causal model, last 50 tokens);
B. Derrida (1981).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import components as C
from .architecture import Architecture
from .attention import softmax_attention_overlap_core
from .checks import as_float_array, check_depth
from .rem import CausalParticipationTable, causal_participation_table, check_positions, check_seq_len
from .rem.causal import causal_rope_correlation

__all__ = [
    "CausalTrajectory",
    "propagate_causal",
    "last_tokens_cosine",
    "LAST_TOKENS",
]

#: Late tokens of a causal model that follow the encoder maps: the reference experiment
#: averages the last 50 positions of T = 512 (docs/theory.md section 8).
LAST_TOKENS = 50


@dataclass(repr=False)
class _CausalAttention(C.Component):
    beta: np.ndarray
    sigma_v2: np.ndarray
    sigma_b2: np.ndarray
    positions: np.ndarray
    table: CausalParticipationTable
    #: ``cbar_t`` of each position (RoPE), exactly 1 without rotation.
    rope_correlation: np.ndarray
    name = "causal_softmax_attention"

    def apply(self, q, p):
        x = self.beta * np.sqrt(np.maximum(q * (q - p * self.rope_correlation), 0.0))
        y2 = self.table(self.positions, x)
        return softmax_attention_overlap_core(q, p, y2, 1.0 / self.positions, self.sigma_v2, self.sigma_b2)


def _causal_block(arch, beta, positions, table, rope_correlation):
    return arch.compose(_CausalAttention(beta, np.asarray(arch.sigma_v2, float), np.asarray(arch.sigma_b2, float),
                                         positions, table, rope_correlation))


def _row_rope_correlation(arch, seq_len, positions):
    """``cbar_t`` of each causal row: the encoder's factor on ``p``
    (``Architecture.mean_rope_correlation``, 1 without RoPE) for the t keys of row t."""
    if arch.positions != "rope":
        return np.ones(positions.shape)
    return np.asarray(causal_rope_correlation(positions, seq_len, arch.head_dim, arch.rope_base), dtype=np.float64)


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

    ``Y_2(t)`` from :class:`~remprop.theory.rem.CausalParticipationTable` (t states at the score scale of T)
    at ``x_t = beta sqrt(q (q - p cbar_t))``: ``cbar_t = 1`` without rotary positions, the mean
    rotary correlation of t keys with ``arch.positions == "rope"``
    (:func:`~remprop.theory.rem.causal.causal_rope_correlation`, docs/theory.md section 8).

    Parameters
    ----------
    arch : Architecture
        Scalar numeric fields; ``attention="softmax"`` (the centring of gain-controlled
        attention mixes all positions and has no per-position map). ``arch.seq_len`` is
        None or ``seq_len`` (a RoPE architecture has it set). With ``positions="rope"`` each row
        reads ``head_dim`` and ``rope_base``.
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
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 12 (docs/theory.md section 8).
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
    if arch.seq_len is not None and arch.seq_len != seq_len:
        raise ValueError(f"seq_len must equal arch.seq_len when the architecture sets it, got seq_len={seq_len}, "
                         f"arch.seq_len={arch.seq_len}")
    positions = check_positions(positions, seq_len)
    beta = as_float_array("beta", beta, positive=True)
    if beta.ndim:
        raise ValueError(f"beta must be a scalar for the causal theory, got shape {beta.shape}")
    q0 = as_float_array("q0", q0, positive=True)
    rho0 = as_float_array("rho0", rho0, low=-1.0, high=1.0)
    table = causal_participation_table(seq_len, positions)
    # each head is the single-head REM at the heads' effective beta (one rule: Architecture)
    block = _causal_block(arch, np.asarray(arch.effective_beta(beta), dtype=np.float64),
                          positions.astype(np.float64), table, _row_rope_correlation(arch, seq_len, positions))
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
