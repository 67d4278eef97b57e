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
MLP form, to 1e-12; tests/test_rope_architecture.py does the same with RoPE, and
tests/test_block_forms.py with QK-norm, parallel branches and branch norms (docs/theory.md
section 19), the choices of :attr:`Architecture.block_code
<remprop.theory.Architecture.block_code>` and QK-norm being compile-time constants too.
"""
from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

from .._jit import inline_jitable, specialised
from ..activations import dense_core
from ..architecture import ATTENTIONS, BLOCK_FORMS, MLPS, NORM_TYPES, NORMS
from ..rem.qk_norm import qk_norm_energy_core
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
PARALLEL = BLOCK_FORMS["parallel"]
#: Bit of ``block_code`` for a norm on each branch's output.
BRANCH_NORM = 2

#: Stand-in table for asymptotic kernels (never read).
NO_TABLE = np.zeros(8)
NO_TABLE.setflags(write=False)


@inline_jitable
def participation_core(finite, qk, beta, q, p, rope, rope_cbar, qk_dim, table):
    """``(Y2, x, beta_c)`` of the attention input ``(q, p)``: the finite-T table at the reduced
    scale ``x = beta sqrt(q (q - p'))`` (also returned, for the cross-overlap; ``p' = p cbar_T``
    with ``rope``), or ``max(0, 1 - beta_c/beta)`` with ``x = 0`` (unused) as T -> infinity.
    With ``qk`` (QK-norm, finite T): ``x = beta sqrt(1 - kappa_n(p/q) cbar_T)`` and ``beta_c``
    the factor's critical value ``sqrt(2 / (1 - kappa_n cbar_T))`` (docs/theory.md section 19).
    One table lookup in the code (two would trip numba's inlining checks)."""
    if qk:
        energy = qk_norm_energy_core(p / q, qk_dim, rope_cbar if rope else 1.0)
        beta_c = math.sqrt(2.0 / energy) if energy > 0.0 else np.inf
        x = beta * math.sqrt(energy)
    else:
        p_rem = p * rope_cbar if rope else p
        beta_c = critical_beta_core(q, p_rem)
        x = beta * math.sqrt(max(q * (q - p_rem), 0.0)) if finite else 0.0
    if finite:
        return table_lookup(table, x), x, beta_c
    return asymptotic_participation_core(beta, beta_c), x, beta_c


@register_jitable
def norm_core(norm_type, q, p):
    """The norm of ``norm_type`` (a code of :data:`~remprop.theory.architecture.NORM_TYPES`)."""
    if norm_type == RMS:
        return rmsnorm_core(q, p)
    return layernorm_core(q, p)


@inline_jitable
def attention_branch(norm, norm_type, attention, finite, q, p, beta, sigma_v2, sigma_b2, table, sigma_o2, rope,
                     rope_cbar, qk, qk_dim):
    """The attention branch: (pre-LN) norm, attention, output projection (``sigma_o2``; 1
    without one). Returns (q_F, p_F, beta_c of the attention input).

    ``rope`` (compile-time): read ``rope_cbar``, the mean rotary correlation ``cbar_T``
    (exactly 1 without RoPE,
    :attr:`Architecture.mean_rope_correlation <remprop.theory.Architecture.mean_rope_correlation>`):
    the REM's scale and beta_c see ``p cbar_T``, the output map ``p``; with RoPE
    (``rope_cbar < 1``) the finite-T cross-overlap is ``1/T`` (docs/theory.md section 15).
    ``qk`` (compile-time, finite T only): QK-norm over ``qk_dim`` coordinates; ``beta`` is the
    reduced-scale factor, ``x = beta sqrt(1 - kappa_n(p/q) cbar_T)`` and ``beta_c`` the
    factor's critical value ``sqrt(2 / (1 - kappa_n cbar_T))`` (docs/theory.md section 19)."""
    if norm == PRE:
        q_in, p_in = norm_core(norm_type, q, p)
    else:
        q_in, p_in = q, p
    y2, x, beta_c = participation_core(finite, qk, beta, q_in, p_in, rope, rope_cbar, qk_dim, table)
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
    return sigma_o2 * q_f, sigma_o2 * p_f, beta_c


@register_jitable
def branch_output(block, norm_type, q_f, p_f, branch_scale):
    """A branch's output as added to the stream: normalised with a branch norm (``block``'s
    :data:`BRANCH_NORM` bit; then times ``branch_scale``, the carried scale of the stream),
    as it is otherwise."""
    if block & BRANCH_NORM:
        q_n, p_n = norm_core(norm_type, q_f, p_f)
        return branch_scale * q_n, branch_scale * p_n
    return q_f, p_f


@inline_jitable
def attention_sublayer(norm, norm_type, attention, finite, q, p, beta, sigma_v2, sigma_b2, alpha_sa, table,
                       sigma_o2, rope, rope_cbar, qk, qk_dim, block, branch_scale):
    """Attention branch (:func:`attention_branch`), branch norm, skip and (post-LN) norm.
    Returns (q', p', beta_c of the attention input)."""
    q_f, p_f, beta_c = attention_branch(norm, norm_type, attention, finite, q, p, beta, sigma_v2, sigma_b2, table,
                                        sigma_o2, rope, rope_cbar, qk, qk_dim)
    q_f, p_f = branch_output(block, norm_type, q_f, p_f, branch_scale)
    q, p = skip_core(q_f, p_f, q, p, alpha_sa)
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
def mlp_output(norm, norm_type, m2, m11, q, p, sigma_w2_out, sigma_b2, alpha_mlp, block, branch_scale):
    """Second dense layer, branch norm, skip and (post-LN) norm, from the hidden units' moments."""
    q_f, p_f = dense_core(m2, m11, sigma_w2_out, sigma_b2)
    q_f, p_f = branch_output(block, norm_type, q_f, p_f, branch_scale)
    q, p = skip_core(q_f, p_f, q, p, alpha_mlp)
    if norm == POST:
        q, p = norm_core(norm_type, q, p)
    return q, p


def make_block_step(norm, attention, moments, finite, tag, norm_type=0, mlp=0, rope=False, block=0, qk=False):
    """The block update ``step(q, p, beta, sigma_w2, sigma_b2, sigma_v2, alpha_sa, alpha_mlp,
    sigma_o2, sigma_w2_out, sigma_b2_out, rope_cbar, table, qk_dim, branch_scale) -> (q', p', beta_c)``,
    inlined into its caller.

    ``norm``, ``attention``, ``norm_type`` and ``mlp`` are the integer codes of
    :data:`~remprop.theory.NORMS`, :data:`~remprop.theory.ATTENTIONS`,
    :data:`~remprop.theory.NORM_TYPES` and :data:`~remprop.theory.MLPS`, ``moments`` the activation's jittable
    ``(q1, p1) -> (E[phi(u)^2], E[phi(u) phi(v)])``, ``finite`` whether attention reads
    the finite-T table; ``tag`` names the specialisation (:mod:`remprop.theory._jit`).
    ``beta_c`` is the critical beta of the attention input. ``sigma_b2_out`` is the bias
    variance of the MLP's second layer (``sigma_b2`` in the model; the depth kernels pass it
    apart so that a carried scale can multiply the branch output alone, see
    :mod:`remprop.theory.kernels`); ``rope_cbar`` the mean rotary correlation (1 without RoPE),
    read only when ``rope`` (:func:`attention_sublayer`). ``block`` (compile-time) is
    :attr:`Architecture.block_code <remprop.theory.Architecture.block_code>`: parallel branches
    (``x <- alpha_sa x + F_SA(x) + F_MLP(x)``, pre-LN) and/or a norm on each branch's output,
    whose result is multiplied by ``branch_scale`` (the carried scale ``2**-e`` of a pre-LN
    stream, 1 otherwise); ``qk`` (compile-time) QK-norm over ``qk_dim`` coordinates
    (:func:`attention_branch`). Neither is read by the default block (``block = 0``, no ``qk``).
    """

    def step(q, p, beta, sigma_w2, sigma_b2, sigma_v2, alpha_sa, alpha_mlp, sigma_o2, sigma_w2_out,
             sigma_b2_out, rope_cbar, table, qk_dim, branch_scale):
        if block & PARALLEL:  # both branches read the block input; their outputs add (pre-LN)
            q_a, p_a, beta_c = attention_branch(norm, norm_type, attention, finite, q, p, beta, sigma_v2, sigma_b2,
                                                table, sigma_o2, rope, rope_cbar, qk, qk_dim)
            q_a, p_a = branch_output(block, norm_type, q_a, p_a, branch_scale)
            q1, p1 = mlp_input(norm, norm_type, q, p, sigma_w2, sigma_b2)
            m2, m11 = moments(q1, p1)
            if mlp == GATED:
                m2, m11 = gated_hidden_core(q1, p1, m2, m11)
            q_m, p_m = dense_core(m2, m11, sigma_w2_out, sigma_b2_out)
            q_m, p_m = branch_output(block, norm_type, q_m, p_m, branch_scale)
            q, p = skip_core(q_a + q_m, p_a + p_m, q, p, alpha_sa)
            return q, p, beta_c
        q, p, beta_c = attention_sublayer(norm, norm_type, attention, finite, q, p, beta, sigma_v2,
                                          sigma_b2, alpha_sa, table, sigma_o2, rope, rope_cbar, qk, qk_dim, block,
                                          branch_scale)
        q1, p1 = mlp_input(norm, norm_type, q, p, sigma_w2, sigma_b2)
        m2, m11 = moments(q1, p1)
        if mlp == GATED:
            m2, m11 = gated_hidden_core(q1, p1, m2, m11)
        q, p = mlp_output(norm, norm_type, m2, m11, q, p, sigma_w2_out, sigma_b2_out, alpha_mlp, block, branch_scale)
        return q, p, beta_c

    return inline_jitable(specialised(step, tag))
