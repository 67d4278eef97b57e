"""One block update on scalars, for the depth kernels: the composed block, sublayer by sublayer.

The description of a block is the composed tree of :meth:`Architecture.block
<remprop.theory.Architecture.block>` / :meth:`~remprop.theory.Architecture.compose`
(docs/theory.md section 5): attention (after a LayerNorm in pre-LN blocks), the optional
output projection, the skip ``alpha_sa``, a LayerNorm in post-LN blocks; then the MLP in
the same frame with ``alpha_mlp``. The norm is LayerNorm or RMSNorm (``norm_type``), the
MLP dense or gated (``mlp``; its hidden moments from
:func:`~remprop.theory.components.gated_mlp.gated_hidden_core`). :func:`make_block_step` evaluates
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
from ..rem.qk_norm import qk_norm_energy_core
from ..components.attention import gain_controlled_attention_core, softmax_attention_core, softmax_attention_overlap_core
from ..components.gated_mlp import gated_hidden_core
from ..components.layer_norm import layernorm_core
from ..rem import (after_table, asymptotic_participation_core, critical_beta_core, cross_overlap_core,
                   table_lookup)
from ..components.residual import skip_core
from ..components.rms_norm import rmsnorm_core

#: Kernel codes of the categorical choices (compile-time constants of the step).
NORMS = {"post": 0, "pre": 1, "none": 2}
ATTENTIONS = {"softmax": 0, "gain-controlled": 1}
NORM_TYPES = {"layer": 0, "rms": 1}
MLPS = {"dense": 0, "gated": 1}
BLOCK_FORMS = {"sequential": 0, "parallel": 1}
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


def architecture_codes(arch) -> tuple:
    """The kernel codes (norm, attention, activation, norm_type, mlp) of an architecture."""
    from ..activations import ACTIVATIONS
    return (NORMS[arch.norm.value], ATTENTIONS[arch.attention.value], ACTIVATIONS[arch.activation],
            NORM_TYPES[arch.norm_type.value], MLPS[arch.mlp.value])


def architecture_block_code(arch) -> int:
    """The kernel code of an architecture's block form: form + 2 branch_norm."""
    return BLOCK_FORMS[arch.block_form.value] + 2 * int(arch.branch_norm)


@register_jitable
def norm_core(norm_type, q, p):
    """The norm of ``norm_type`` (a code of :data:`~remprop.theory.architecture.NORM_TYPES`)."""
    if norm_type == RMS:
        return rmsnorm_core(q, p)
    return layernorm_core(q, p)


@register_jitable
def attention_scale(norm, norm_type, finite, qk, q, p, beta, rope, rope_cbar, qk_dim):
    """The attention input ``(q_in, p_in)`` ((pre-LN) norm of ``(q, p)``), the REM's reduced scale
    ``x`` and ``beta_c`` of that input.

    ``x = beta sqrt(q_in (q_in - p'))`` with ``p' = p_in cbar_T`` (``rope``: read ``rope_cbar``, the
    mean rotary correlation, exactly 1 without RoPE,
    :attr:`Architecture.mean_rope_correlation <remprop.theory.Architecture.mean_rope_correlation>`;
    docs/theory.md section 15), ``x = 0`` (unused) as T -> infinity. With ``qk`` (QK-norm over
    ``qk_dim`` coordinates, finite T): ``x = beta sqrt(1 - kappa_n(p/q) cbar_T)`` and ``beta_c``
    the factor's critical value ``sqrt(2 / (1 - kappa_n cbar_T))`` (docs/theory.md section 19)."""
    if norm == PRE:
        q_in, p_in = norm_core(norm_type, q, p)
    else:
        q_in, p_in = q, p
    if qk:
        energy = qk_norm_energy_core(p_in / q_in, qk_dim, rope_cbar if rope else 1.0)
        beta_c = math.sqrt(2.0 / energy) if energy > 0.0 else np.inf
        x = beta * math.sqrt(energy)
    else:
        p_rem = p_in * rope_cbar if rope else p_in
        beta_c = critical_beta_core(q_in, p_rem)
        x = beta * math.sqrt(max(q_in * (q_in - p_rem), 0.0)) if finite else 0.0
    return q_in, p_in, x, beta_c


@inline_jitable
def attention_weights(attention, rope, rope_cbar, x, rho, table):
    """``(Y2, C)`` at finite T: the participation ratio of a row and the cross-overlap of two rows
    at the reduced scale ``x`` (``rho = p_in / q_in``), from the packed table (:func:`packed_table
    <remprop.theory.kernels.packed_table>`): ``Y2`` at ``x``, ``C`` from the cross table after it,
    or ``1/T`` with RoPE (``rope_cbar < 1``, docs/theory.md section 15). Gain-controlled attention
    takes ``Y2 - 1/T`` (its shared part removed) and no ``C``.

    The only part of the block that reads the table: inlined into the sweeps (a compiled call
    with the table as an argument costs reference counts per cell and layer); the rest of the
    block is plain scalar functions compiled once. As T -> infinity the step takes
    ``Y2 = max(0, 1 - beta_c / beta)`` instead and never sees the table."""
    y2 = table_lookup(table, x)
    if attention != SOFTMAX:
        return y2 - 1.0 / table[0], 0.0
    if rope and rope_cbar < 1.0:
        return y2, 1.0 / table[0]
    return y2, cross_overlap_core(after_table(table), x, rho, y2)


@register_jitable
def attention_output(attention, finite, q_in, p_in, y2, cross, sigma_v2, sigma_b2, sigma_o2):
    """The attention map on ``(q_in, p_in)`` from a row's ``Y2`` (and the cross-overlap ``C`` of
    two rows at finite T), then the output projection (``sigma_o2``; 1 without one)."""
    if attention == SOFTMAX:
        if finite:
            q_f, p_f = softmax_attention_overlap_core(q_in, p_in, y2, cross, sigma_v2, sigma_b2)
        else:
            q_f, p_f = softmax_attention_core(q_in, p_in, y2, sigma_v2, sigma_b2)
    else:
        q_f, p_f = gain_controlled_attention_core(q_in, p_in, y2, sigma_v2, sigma_b2)
    return sigma_o2 * q_f, sigma_o2 * p_f


@register_jitable
def branch_output(block, norm_type, q_f, p_f, branch_scale):
    """A branch's output as added to the stream: normalised with a branch norm (``block``'s
    :data:`BRANCH_NORM` bit; then times ``branch_scale``, the carried scale of the stream),
    as it is otherwise."""
    if block & BRANCH_NORM:
        q_n, p_n = norm_core(norm_type, q_f, p_f)
        return branch_scale * q_n, branch_scale * p_n
    return q_f, p_f


@register_jitable
def attention_residual(norm, norm_type, q, p, q_f, p_f, alpha_sa, block, branch_scale):
    """The attention branch's output ``(q_f, p_f)`` through the branch norm, the skip and the
    (post-LN) norm."""
    q_f, p_f = branch_output(block, norm_type, q_f, p_f, branch_scale)
    q, p = skip_core(q_f, p_f, q, p, alpha_sa)
    if norm == POST:
        q, p = norm_core(norm_type, q, p)
    return q, p


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
    sigma_o2, sigma_w2_out, sigma_b2_out, rope_cbar, table, qk_dim, branch_scale) -> (q', p', beta_c)``.

    At finite T the step reads the packed table and is inlined into its caller, with
    :func:`attention_weights`, the one part that reads the table; as T -> infinity it never reads
    the table and is a plain compiled function. Everything else is scalar functions compiled once
    and shared by the three sweeps: numba inlining the whole chain of sublayers into each sweep
    took about twice as long to compile (10 s against 5.5 s at finite T, 3-4 s as T -> infinity,
    per architecture) and ran no faster.

    ``norm``, ``attention``, ``norm_type`` and ``mlp`` are the integer codes of
    :data:`~remprop.theory.NORMS`, :data:`~remprop.theory.ATTENTIONS`,
    :data:`~remprop.theory.NORM_TYPES` and :data:`~remprop.theory.MLPS`, ``moments`` the activation's jittable
    ``(q1, p1) -> (E[phi(u)^2], E[phi(u) phi(v)])``, ``finite`` whether attention reads
    the finite-T table; ``tag`` names the specialisation (:mod:`remprop.theory._jit`).
    ``beta_c`` is the critical beta of the attention input. ``sigma_b2_out`` is the bias
    variance of the MLP's second layer (``sigma_b2`` in the model; the depth kernels pass it
    apart so that a carried scale can multiply the branch output alone, see
    :mod:`remprop.theory.kernels`); ``rope_cbar`` the mean rotary correlation (1 without RoPE),
    read only when ``rope`` (:func:`attention_scale`). ``block`` (compile-time) is
    :attr:`Architecture.block_code <remprop.theory.Architecture.block_code>`: parallel branches
    (``x <- alpha_sa x + F_SA(x) + F_MLP(x)``, pre-LN) and/or a norm on each branch's output,
    whose result is multiplied by ``branch_scale`` (the carried scale ``2**-e`` of a pre-LN
    stream, 1 otherwise); ``qk`` (compile-time) QK-norm over ``qk_dim`` coordinates
    (:func:`attention_scale`). Neither is read by the default block (``block = 0``, no ``qk``).
    """

    def step(q, p, beta, sigma_w2, sigma_b2, sigma_v2, alpha_sa, alpha_mlp, sigma_o2, sigma_w2_out,
             sigma_b2_out, rope_cbar, table, qk_dim, branch_scale):
        q_in, p_in, x, beta_c = attention_scale(norm, norm_type, finite, qk, q, p, beta, rope, rope_cbar, qk_dim)
        if finite:
            y2, cross = attention_weights(attention, rope, rope_cbar, x, p_in / q_in, table)
        else:
            y2, cross = asymptotic_participation_core(beta, beta_c), 0.0
        q_a, p_a = attention_output(attention, finite, q_in, p_in, y2, cross, sigma_v2, sigma_b2, sigma_o2)
        if block & PARALLEL:  # both branches read the block input; their outputs add (pre-LN)
            q_a, p_a = branch_output(block, norm_type, q_a, p_a, branch_scale)
            q1, p1 = mlp_input(norm, norm_type, q, p, sigma_w2, sigma_b2)
            m2, m11 = moments(q1, p1)
            if mlp == GATED:
                m2, m11 = gated_hidden_core(q1, p1, m2, m11)
            q_m, p_m = dense_core(m2, m11, sigma_w2_out, sigma_b2_out)
            q_m, p_m = branch_output(block, norm_type, q_m, p_m, branch_scale)
            q, p = skip_core(q_a + q_m, p_a + p_m, q, p, alpha_sa)
            return q, p, beta_c
        q, p = attention_residual(norm, norm_type, q, p, q_a, p_a, alpha_sa, block, branch_scale)
        q1, p1 = mlp_input(norm, norm_type, q, p, sigma_w2, sigma_b2)
        m2, m11 = moments(q1, p1)
        if mlp == GATED:
            m2, m11 = gated_hidden_core(q1, p1, m2, m11)
        q, p = mlp_output(norm, norm_type, m2, m11, q, p, sigma_w2_out, sigma_b2_out, alpha_mlp, block, branch_scale)
        return q, p, beta_c

    return (inline_jitable if finite else register_jitable)(specialised(step, tag))
