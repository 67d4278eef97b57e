"""One block update on scalars, for the depth kernels: the composed block, sublayer by sublayer.

The description of a block is the composed tree of :meth:`Architecture.block
<remprop.theory.Architecture.block>` / :meth:`~remprop.theory.Architecture.compose`
(docs/theory.md section 5): attention (after a LayerNorm in pre-LN blocks), the optional
output projection, the skip ``alpha_sa``, a LayerNorm in post-LN blocks; then the MLP in
the same frame with ``alpha_mlp``. The norm is LayerNorm or RMSNorm (``norm_type``), the
MLP dense or gated (``mlp``; its hidden moments from
:func:`~remprop.theory.gated_mlp.gated_hidden_core`). :func:`make_block_step` evaluates
the same ``*_core`` maps in that order on scalars, with the categorical choices as
compile-time constants; ``sigma_o2 = 1`` stands for "no output projection" and ``sigma_w2_out`` is
resolved before packing (:meth:`~remprop.theory.Architecture.numeric`).
tests/test_theory_kernels.py (``test_kernels_follow_the_composed_block``) checks the
kernels against the tree iterated layer by layer for every norm x attention x projection
x second-layer variance x (asymptotic, finite T), and every norm placement x norm type x
MLP form, to 1e-12; tests/test_rope_architecture.py does the same with RoPE.
"""
from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

from .._jit import inline_jitable, specialised
from ..activations import dense_core
from ..architecture import ATTENTIONS, MLPS, NORM_TYPES, NORMS
from ..attention import gain_controlled_attention_core, softmax_attention_core, softmax_attention_overlap_core
from ..gated_mlp import gated_hidden_core
from ..layernorm import layernorm_core
from ..rem import (after_table, asymptotic_participation_core, critical_beta_core, cross_overlap_core,
                   table_lookup)
from ..residual import skip_core
from ..rmsnorm import rmsnorm_core

POST, PRE = NORMS["post"], NORMS["pre"]
SOFTMAX = ATTENTIONS["softmax"]
RMS = NORM_TYPES["rms"]
GATED = MLPS["gated"]

#: Stand-in table for asymptotic kernels (never read).
NO_TABLE = np.zeros(8)
NO_TABLE.setflags(write=False)


@inline_jitable
def participation_core(finite, beta, q, p, beta_c, table):
    """``(Y2, x)`` of the attention input: the finite-T table at the reduced scale
    ``x = beta sqrt(q (q - p))`` (also returned, for the cross-overlap), or
    ``max(0, 1 - beta_c/beta)`` with ``x = 0`` (unused) as T -> infinity."""
    if finite:
        x = beta * math.sqrt(max(q * (q - p), 0.0))
        return table_lookup(table, x), x
    return asymptotic_participation_core(beta, beta_c), 0.0


@register_jitable
def norm_core(norm_type, q, p):
    """The norm of ``norm_type`` (a code of :data:`~remprop.theory.architecture.NORM_TYPES`)."""
    if norm_type == RMS:
        return rmsnorm_core(q, p)
    return layernorm_core(q, p)


@inline_jitable
def attention_sublayer(norm, norm_type, attention, finite, q, p, beta, sigma_v2, sigma_b2, alpha_sa, table,
                       sigma_o2, rope, rope_cbar):
    """Attention, output projection (``sigma_o2``; 1 without one), skip and (post-LN)
    norm. Returns (q', p', beta_c of the attention input).

    ``rope`` (compile-time): read ``rope_cbar``, the mean rotary correlation ``cbar_T``
    (exactly 1 without RoPE,
    :attr:`Architecture.mean_rope_correlation <remprop.theory.Architecture.mean_rope_correlation>`):
    the REM's scale and beta_c see ``p cbar_T``, the output map ``p``; with RoPE
    (``rope_cbar < 1``) the finite-T cross-overlap is ``1/T`` (docs/theory.md section 15)."""
    if norm == PRE:
        q_in, p_in = norm_core(norm_type, q, p)
    else:
        q_in, p_in = q, p
    p_rem = p_in * rope_cbar if rope else p_in
    beta_c = critical_beta_core(q_in, p_rem)
    y2, x = participation_core(finite, beta, q_in, p_rem, beta_c, table)
    if attention == SOFTMAX:
        if finite:  # cross-overlap C of two rows: the table packed after the Y2 table
            if rope and rope_cbar < 1.0:
                cross = 1.0 / table[0]
            else:  # at the REM's own reduced scale x (p_rem = p_in here)
                cross = cross_overlap_core(after_table(table), x, p_in / q_in, y2)
            q_f, p_f = softmax_attention_overlap_core(q_in, p_in, y2, cross, sigma_v2, sigma_b2)
        else:
            q_f, p_f = softmax_attention_core(q_in, p_in, y2, sigma_v2, sigma_b2)
    else:
        if finite:
            y2 = y2 - 1.0 / table[0]
        q_f, p_f = gain_controlled_attention_core(q_in, p_in, y2, sigma_v2, sigma_b2)
    q, p = skip_core(sigma_o2 * q_f, sigma_o2 * p_f, q, p, alpha_sa)
    if norm == POST:
        q, p = norm_core(norm_type, q, p)
    return q, p, beta_c


@register_jitable
def mlp_input(norm, norm_type, q, p, sigma_w2, sigma_b2):
    """Pre-activation (q1, p1) of the MLP (after the norm in pre-LN blocks); a gated MLP's
    gate and up projection both have these."""
    if norm == PRE:
        q_in, p_in = norm_core(norm_type, q, p)
    else:
        q_in, p_in = q, p
    return dense_core(q_in, p_in, sigma_w2, sigma_b2)


@register_jitable
def mlp_output(norm, norm_type, m2, m11, q, p, sigma_w2_out, sigma_b2, alpha_mlp):
    """Second dense layer, skip and (post-LN) norm, from the hidden units' moments."""
    q_f, p_f = dense_core(m2, m11, sigma_w2_out, sigma_b2)
    q, p = skip_core(q_f, p_f, q, p, alpha_mlp)
    if norm == POST:
        q, p = norm_core(norm_type, q, p)
    return q, p


def make_block_step(norm, attention, moments, finite, tag, norm_type=0, mlp=0, rope=False):
    """The block update ``step(q, p, beta, sigma_w2, sigma_b2, sigma_v2, alpha_sa, alpha_mlp,
    sigma_o2, sigma_w2_out, sigma_b2_out, rope_cbar, table) -> (q', p', beta_c)``, inlined into its caller.

    ``norm``, ``attention``, ``norm_type`` and ``mlp`` are the integer codes of
    :data:`~remprop.theory.NORMS`, :data:`~remprop.theory.ATTENTIONS`,
    :data:`~remprop.theory.NORM_TYPES` and :data:`~remprop.theory.MLPS`, ``moments`` the activation's jittable
    ``(q1, p1) -> (E[phi(u)^2], E[phi(u) phi(v)])``, ``finite`` whether attention reads
    the finite-T table; ``tag`` names the specialisation (:mod:`remprop.theory._jit`).
    ``beta_c`` is the critical beta of the attention input. ``sigma_b2_out`` is the bias
    variance of the MLP's second layer (``sigma_b2`` in the model; the depth kernels pass it
    apart so that a carried scale can multiply the branch output alone, see
    :mod:`remprop.theory.kernels`); ``rope_cbar`` the mean rotary correlation (1 without RoPE),
    read only when ``rope`` (:func:`attention_sublayer`).
    """

    def step(q, p, beta, sigma_w2, sigma_b2, sigma_v2, alpha_sa, alpha_mlp, sigma_o2, sigma_w2_out,
             sigma_b2_out, rope_cbar, table):
        q, p, beta_c = attention_sublayer(norm, norm_type, attention, finite, q, p, beta, sigma_v2,
                                          sigma_b2, alpha_sa, table, sigma_o2, rope, rope_cbar)
        q1, p1 = mlp_input(norm, norm_type, q, p, sigma_w2, sigma_b2)
        m2, m11 = moments(q1, p1)
        if mlp == GATED:
            m2, m11 = gated_hidden_core(q1, p1, m2, m11)
        q, p = mlp_output(norm, norm_type, m2, m11, q, p, sigma_w2_out, sigma_b2_out, alpha_mlp)
        return q, p, beta_c

    return inline_jitable(specialised(step, tag))
