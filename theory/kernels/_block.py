"""One block update on scalars, for the depth kernels: the composed block, sublayer by sublayer.

The description of a block is the composed tree of :meth:`Architecture.block
<remprop.theory.Architecture.block>` / :meth:`~remprop.theory.Architecture.compose`
(docs/theory.md section 5): attention (after a LayerNorm in pre-LN blocks), the optional
output projection, the skip ``alpha_sa``, a LayerNorm in post-LN blocks; then the MLP in
the same frame with ``alpha_mlp``. :func:`make_block_step` evaluates the same
``*_core`` maps in that order on scalars, with the categorical choices as compile-time
constants; ``sigma_o2 = 1`` stands for "no output projection" and ``sigma_w2_out`` is
resolved before packing (:meth:`~remprop.theory.Architecture.numeric`).
tests/test_theory_kernels.py (``test_kernels_follow_the_composed_block``) checks the
kernels against the tree iterated layer by layer for every norm x attention x projection
x second-layer variance x (asymptotic, finite T), to 1e-12.
"""
from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

from .._jit import inline_jitable, specialised
from ..activations import dense_core
from ..architecture import ATTENTIONS, NORMS
from ..attention import gain_controlled_attention_core, softmax_attention_core, softmax_attention_overlap_core
from ..layernorm import layernorm_core
from ..rem import asymptotic_participation_core, critical_beta_core, table_lookup
from ..residual import skip_core

POST, PRE = NORMS["post"], NORMS["pre"]
SOFTMAX = ATTENTIONS["softmax"]

#: Stand-in table for asymptotic kernels (never read).
NO_TABLE = np.zeros(8)
NO_TABLE.setflags(write=False)


@inline_jitable
def participation_core(finite, beta, q, p, beta_c, table):
    """Y2 of the attention input: the finite-T table, or max(0, 1 - beta_c/beta)."""
    if finite:
        return table_lookup(table, beta * math.sqrt(max(q * (q - p), 0.0)))
    return asymptotic_participation_core(beta, beta_c)


@inline_jitable
def attention_sublayer(norm, attention, finite, q, p, beta, sigma_v2, sigma_b2, alpha_sa, table, sigma_o2):
    """Attention, output projection (``sigma_o2``; 1 without one), skip and (post-LN)
    LayerNorm. Returns (q', p', beta_c of the attention input)."""
    if norm == PRE:
        q_in, p_in = layernorm_core(q, p)
    else:
        q_in, p_in = q, p
    beta_c = critical_beta_core(q_in, p_in)
    y2 = participation_core(finite, beta, q_in, p_in, beta_c, table)
    if attention == SOFTMAX:
        if finite:  # cross-overlap of two rows: 1/T
            q_f, p_f = softmax_attention_overlap_core(q_in, p_in, y2, 1.0 / table[0], sigma_v2, sigma_b2)
        else:
            q_f, p_f = softmax_attention_core(q_in, p_in, y2, sigma_v2, sigma_b2)
    else:
        if finite:
            y2 = y2 - 1.0 / table[0]
        q_f, p_f = gain_controlled_attention_core(q_in, p_in, y2, sigma_v2, sigma_b2)
    q, p = skip_core(sigma_o2 * q_f, sigma_o2 * p_f, q, p, alpha_sa)
    if norm == POST:
        q, p = layernorm_core(q, p)
    return q, p, beta_c


@register_jitable
def mlp_input(norm, q, p, sigma_w2, sigma_b2):
    """Pre-activation (q1, p1) of the MLP (after LayerNorm in pre-LN blocks)."""
    if norm == PRE:
        q_in, p_in = layernorm_core(q, p)
    else:
        q_in, p_in = q, p
    return dense_core(q_in, p_in, sigma_w2, sigma_b2)


@register_jitable
def mlp_output(norm, m2, m11, q, p, sigma_w2_out, sigma_b2, alpha_mlp):
    """Second dense layer, skip and (post-LN) LayerNorm, from the activation moments."""
    q_f, p_f = dense_core(m2, m11, sigma_w2_out, sigma_b2)
    q, p = skip_core(q_f, p_f, q, p, alpha_mlp)
    if norm == POST:
        q, p = layernorm_core(q, p)
    return q, p


def make_block_step(norm, attention, moments, finite, tag):
    """The block update ``step(q, p, beta, sigma_w2, sigma_b2, sigma_v2, alpha_sa, alpha_mlp,
    sigma_o2, sigma_w2_out, table) -> (q', p', beta_c)``, inlined into its caller.

    ``norm`` and ``attention`` are the integer codes of :data:`~remprop.theory.NORMS` and
    :data:`~remprop.theory.ATTENTIONS`, ``moments`` the activation's jittable
    ``(q1, p1) -> (E[phi(u)^2], E[phi(u) phi(v)])``, ``finite`` whether attention reads
    the finite-T table; ``tag`` names the specialisation (:mod:`remprop.theory._jit`).
    ``beta_c`` is the critical beta of the attention input.
    """

    def step(q, p, beta, sigma_w2, sigma_b2, sigma_v2, alpha_sa, alpha_mlp, sigma_o2, sigma_w2_out, table):
        q, p, beta_c = attention_sublayer(norm, attention, finite, q, p, beta, sigma_v2,
                                          sigma_b2, alpha_sa, table, sigma_o2)
        q1, p1 = mlp_input(norm, q, p, sigma_w2, sigma_b2)
        m2, m11 = moments(q1, p1)
        q, p = mlp_output(norm, m2, m11, q, p, sigma_w2_out, sigma_b2, alpha_mlp)
        return q, p, beta_c

    return inline_jitable(specialised(step, tag))
