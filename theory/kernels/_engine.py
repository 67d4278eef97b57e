"""The interpreter of lowered block trees: three sweeps compiled once for every architecture.

A program (``_tape.Program``) is a list of instructions over the stream state ``(q, p)`` of each
cell; :func:`run_program` advances a batch of cells through one block by running the
instructions in turn, each instruction a loop over the batch's cells (so the dispatch on the op
code is paid once per instruction and batch, and the loop over cells is the component's own
``*_core`` map, which LLVM can vectorise). The sweeps (:func:`trajectories`,
:func:`final_states`, :func:`min_alpha`) run blocks over depth, batches in parallel
(``numba.prange``); they are plain module-level functions, compiled once, on first use, and kept
on disk (``cache=CACHE``): numba keys that cache on this file's text and each sweep's bytecode, the same
whether the module was loaded from its source or its ``.pyc``.

Every op calls the core of the component that emits it, imported from that component's module:
LayerNorm's and RMSNorm's ``*_core``, ``dense_core``, the MLP's dense-moments-hidden-dense chain
with the activation's moments chosen by its code (one loop per activation), the
attention's ``attention_step_core``, the skip's ``skip_core``. A new map is one op here and one
method of ``_tape.Tape``; a new component that composes existing maps needs neither.

A user-registered activation cannot be a branch of code compiled before it existed: a program passes
the sweeps its moments compiled on their own (``activations.registry.compiled_user_function``, a
``numba.cfunc``), a first-class function argument that the MLP's moments loop
(``activations.maps.moments_into``) calls for codes from 100 up (a NaN stand-in in programs without
one). So every program, with or without one, runs in the same compiled sweeps, kept on disk; only the
user activation's moments are compiled in the process that registered it. An edit to a core in
another module is seen by numba's cache only through the folder it lies in, which is named after the
theory's sources (``remprop.theory._jit``).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange
from numba.extending import register_jitable

from .._jit import CACHE, JIT_OPTIONS
from ..activations.maps import dense_core, moments_into
from ..components.attention import asymptotic_attention_step_core, finite_attention_step_core
from ..components.base import least
from ..components.gated_mlp import gated_hidden_core
from ..components.layer_norm import layernorm_core
from ..components.residual import SCALED_SKIP_ABOVE, skip_core, skip_over_alpha2_core
from ..components.rms_norm import rmsnorm_core
from ._tape import (ATTENTION_FINITE, ATTENTION_GAIN_CONTROLLED, ATTENTION_QK_NORM, ATTENTION_ROPE, COLUMNS,
                    MAX_OPERANDS, MLP_GATED, NO_SCALE, NORM_RMS, OP_ADD_POP, OP_ATTENTION, OP_DENSE, OP_DROP,
                    OP_MLP, OP_NORM, OP_PUSH, OP_SKIP, OP_SWAP_IN, PARAMS, SCALE_BRANCHES, SCALE_INPUTS,
                    SKIP_SCALE_FREE)

N_COLUMNS = len(COLUMNS)
N_PARAMS = len(PARAMS)
ALPHA_SA, ALPHA_MLP, Q0, P0, LOG2_SCALE = (PARAMS.index(name) for name in
                                           ("alpha_sa", "alpha_mlp", "q0", "p0", "log2_scale"))
#: Cells advanced together: each instruction is a loop over a batch's cells, so the op dispatch is
#: paid once per batch, and independent cells hide each other's chains of divisions and roots. 128
#: against 64: 14.1 against 16.1 ns per block update of a 500 x 500 x 60 post-LN diagram on one
#: thread (CPU time, load about 3 on the two shared cores; 256 and 512 within 3% of 128).
BATCH = 128
#: A cell's q is kept in [2**-SCALE_EXPONENT, 2**SCALE_EXPONENT]; the rest is its exponent.
SCALE_EXPONENT = 128
_BIG = 2.0 ** SCALE_EXPONENT
_SMALL = 2.0 ** -SCALE_EXPONENT
#: A carried scale is renormalised every fourth block, or every block in a batch with a skip
#: strength above this: four blocks grow q by up to ``alpha**16`` (pre-LN), which leaves float64
#: from ``2**128 alpha**16`` (alpha about 2**56); one block at a time holds up to about 7e134.
_FAST_GROWTH = 2.0 ** 32


@register_jitable
def scale_factor(exponent):
    """``2**-exponent``, clamped to [2**-1100, 2**1000] (0 below float64's range)."""
    return math.ldexp(1.0, -int(max(min(exponent, 1100.0), -1000.0)))


@register_jitable
def operand_count(code):
    """How many operands an instruction of op ``code`` reads (the rows :func:`fill_operands` fills)."""
    if code == OP_ATTENTION:
        return 5
    if code == OP_MLP:
        return 3
    if code == OP_DENSE:
        return 2
    if code == OP_SKIP:
        return 1
    return 0


@register_jitable
def operand_rows(ops):
    """``at``: the operands of instruction ``i`` are rows ``at[i]:at[i + 1]`` of a batch's operand
    block (:func:`buffers`), ``at[-1]`` rows in all."""
    at = np.zeros(ops.shape[0] + 1, dtype=np.int64)
    for i in range(ops.shape[0]):
        at[i + 1] = at[i] + operand_count(ops[i, 0])
    return at


@register_jitable
def fill_operands(values, ops, at, s, args, count, scaled_only):
    """Every instruction's operands for the batch's cells into ``args`` (rows ``at[i] + k``):
    each its slot's value times ``s**degree`` (slot and degree read once, outside the cells' loop);
    with ``scaled_only`` only those of degree +-1 (after the carried scale ``s`` changed). The
    operands of a program hold for every block until ``s`` changes, so they are filled once per
    batch and depth run, not once per block. Copies, not views of ``values``: LLVM then knows that the
    cells' loops of an instruction read memory they do not write, and vectorises them (views made
    them 1.5x slower)."""
    for i in range(ops.shape[0]):
        for k in range(at[i + 1] - at[i]):
            row = at[i] + k
            slot, degree = ops[i, 2 + k], ops[i, 2 + MAX_OPERANDS + k]
            if degree == 1:
                for j in range(count):
                    args[row, j] = values[slot, j] * s[j]
            elif degree == -1:
                for j in range(count):
                    args[row, j] = values[slot, j] / s[j]
            elif not scaled_only:
                for j in range(count):
                    args[row, j] = values[slot, j]


@register_jitable
def run_program(ops, mode, table, work, count, user_moments):
    """Advance the ``count`` cells of a batch through one block: the instructions of ``ops`` in
    turn, each a loop over the cells. ``work`` is the batch's buffers (:func:`buffers`): ``s`` the
    carried scale, ``beta_c`` receives the block's smallest critical beta, ``args`` (operand rows x
    cells, filled by :func:`fill_operands`) holds instruction ``i``'s operands from row ``at[i]``;
    ``t`` (4 x cells) is scratch."""
    _, q, p, _, s, beta_c, stack_q, stack_p, args, t, at = work
    for j in range(count):
        beta_c[j] = np.inf
    top = 0
    for i in range(ops.shape[0]):
        code, flags = ops[i, 0], ops[i, 1]
        if code == OP_NORM:
            if flags == NORM_RMS:
                for j in range(count):
                    q[j], p[j] = rmsnorm_core(q[j], p[j])
            else:
                for j in range(count):
                    q[j], p[j] = layernorm_core(q[j], p[j])
        elif code == OP_DENSE:
            a = at[i]
            for j in range(count):
                q[j], p[j] = dense_core(q[j], p[j], args[a, j], args[a + 1, j])
        elif code == OP_MLP:
            a = at[i]
            for j in range(count):
                t[0, j], t[1, j] = dense_core(q[j], p[j], args[a, j], args[a + 1, j])
            moments_into(flags >> 8, user_moments, t[0], t[1], t[2], t[3], count)
            if (flags & MLP_GATED) != 0:
                for j in range(count):
                    t[2, j], t[3, j] = gated_hidden_core(t[0, j], t[1, j], t[2, j], t[3, j])
            for j in range(count):
                q[j], p[j] = dense_core(t[2, j], t[3, j], args[a + 2, j], args[a + 1, j])
        elif code == OP_ATTENTION:
            a = at[i]
            gain_controlled = (flags & ATTENTION_GAIN_CONTROLLED) != 0
            rope, qk = (flags & ATTENTION_ROPE) != 0, (flags & ATTENTION_QK_NORM) != 0
            # one loop per kind of attention (the flags chosen outside the cells' loop, which LLVM
            # then vectorises): 4x faster than one loop that tests the flags per cell
            if (flags & ATTENTION_FINITE) != 0:
                if gain_controlled or rope or qk:
                    for j in range(count):
                        q[j], p[j], t[0, j] = finite_attention_step_core(
                            q[j], p[j], args[a, j], args[a + 1, j], args[a + 2, j], args[a + 3, j], args[a + 4, j],
                            gain_controlled, rope, qk, table)
                else:  # plain softmax, the flags constants (cbar and qk_dim unread): 1.1x faster
                    for j in range(count):
                        q[j], p[j], t[0, j] = finite_attention_step_core(
                            q[j], p[j], args[a, j], args[a + 1, j], args[a + 2, j], 1.0, 1.0, False, False, False,
                            table)
            elif rope:
                for j in range(count):
                    q[j], p[j], t[0, j] = asymptotic_attention_step_core(
                        q[j], p[j], args[a, j], args[a + 1, j], args[a + 2, j], args[a + 3, j], gain_controlled, True)
            elif gain_controlled:
                for j in range(count):
                    q[j], p[j], t[0, j] = asymptotic_attention_step_core(
                        q[j], p[j], args[a, j], args[a + 1, j], args[a + 2, j], 1.0, True, False)
            else:
                for j in range(count):
                    q[j], p[j], t[0, j] = asymptotic_attention_step_core(
                        q[j], p[j], args[a, j], args[a + 1, j], args[a + 2, j], 1.0, False, False)
            for j in range(count):
                beta_c[j] = least(beta_c[j], t[0, j])
        elif code == OP_PUSH or code == OP_SWAP_IN:
            for j in range(count):
                stack_q[top, j] = q[j]
                stack_p[top, j] = p[j]
            top += 1
            if code == OP_SWAP_IN:  # the next branch reads the input saved beneath
                for j in range(count):
                    q[j] = stack_q[top - 2, j]
                    p[j] = stack_p[top - 2, j]
        elif code == OP_SKIP:
            top -= 1
            alpha = args[at[i]]
            if mode == SCALE_BRANCHES:  # the branch times the carried scale of a pre-LN stream
                for j in range(count):
                    q[j] = s[j] * q[j]
                    p[j] = s[j] * p[j]
            huge = False  # a skip so strong that alpha**2 would leave float64 (rare: checked per batch)
            if (flags & SKIP_SCALE_FREE) != 0:
                for j in range(count):
                    huge |= alpha[j] > SCALED_SKIP_ABOVE
            if huge:
                for j in range(count):
                    if alpha[j] > SCALED_SKIP_ABOVE:
                        q[j], p[j] = skip_over_alpha2_core(q[j], p[j], stack_q[top, j], stack_p[top, j], alpha[j])
                    else:
                        q[j], p[j] = skip_core(q[j], p[j], stack_q[top, j], stack_p[top, j], alpha[j])
            else:
                for j in range(count):
                    q[j], p[j] = skip_core(q[j], p[j], stack_q[top, j], stack_p[top, j], alpha[j])
        elif code == OP_ADD_POP:
            top -= 1
            for j in range(count):
                q[j] = stack_q[top, j] + q[j]
                p[j] = stack_p[top, j] + p[j]
        elif code == OP_DROP:
            top -= 1

@register_jitable
def load_batch(params, constants, start, count, values, q, p, e, s):
    """Rows ``start:start + count`` into a batch's buffers (columns and constants into ``values``)."""
    for j in range(count):
        for k in range(N_COLUMNS):
            values[k, j] = params[start + j, k]
        for k in range(constants.size):
            values[N_COLUMNS + k, j] = constants[k]
        q[j] = params[start + j, Q0]
        p[j] = params[start + j, P0]
        e[j] = params[start + j, LOG2_SCALE]
        s[j] = scale_factor(e[j])

@register_jitable
def buffers(ops, constants, stack):
    """A batch's work buffers: ``(values, q, p, e, s, beta_c, stack_q, stack_p, args, t, at)``, the
    state ``(q, p) 2**e`` with ``s = 2**-e``, the operands of instruction ``i`` in ``args`` from row
    ``at[i]`` (:func:`operand_rows`; :func:`run_program` reads them)."""
    at = operand_rows(ops)
    return (np.empty((N_COLUMNS + constants.size, BATCH)), np.empty(BATCH), np.empty(BATCH), np.empty(BATCH),
            np.empty(BATCH), np.empty(BATCH), np.empty((stack, BATCH)), np.empty((stack, BATCH)),
            np.empty((max(at[-1], 1), BATCH)), np.empty((4, BATCH)), at)

@register_jitable
def advance(program, table, work, first, low, count, first_layer, depth):
    """Advance ``count`` cells of a batch (``work``, :func:`buffers`) by ``depth`` blocks of
    ``program`` (the sweeps' first argument) in place, keeping the first layer's critical beta (in
    ``first``, where ``first_layer``) and the smallest (``low``)."""
    ops, _, mode, rescale_beta_c, _, user_moments = program
    values, q, p, e, s, bc, args, at = work[0], work[1], work[2], work[3], work[4], work[5], work[8], work[10]
    fill_operands(values, ops, at, s, args, count, False)
    every = 3  # renormalise after blocks 4k - 1 (and the last), or after every block (fast growth)
    for j in range(count):
        if values[ALPHA_SA, j] > _FAST_GROWTH or values[ALPHA_MLP, j] > _FAST_GROWTH:
            every = 0
    for layer in range(depth):
        run_program(ops, mode, table, work, count, user_moments)
        if rescale_beta_c:  # the branches chosen outside the cells' loops
            for j in range(count):
                if bc[j] < np.inf:  # inf (collapsed tokens) stays inf
                    bc[j] = bc[j] * s[j]
        if first_layer and layer == 0:
            for j in range(count):
                first[j] = bc[j]
        for j in range(count):
            low[j] = min(low[j], bc[j])
        if mode != NO_SCALE and ((layer & every) == every or layer == depth - 1):
            for j in range(count):
                if (q[j] > _BIG or q[j] < _SMALL) and q[j] > 0.0 and q[j] < np.inf:
                    mantissa, exponent = math.frexp(q[j])
                    q[j] = mantissa
                    p[j] = math.ldexp(p[j], -exponent)
                    e[j] += exponent
                    s[j] = scale_factor(e[j])
            fill_operands(values, ops, at, s, args, count, True)  # the operands that carry the scale

@njit(cache=CACHE, parallel=True, **JIT_OPTIONS)
def trajectories(program, params, depth, table, out):
    """Whole trajectories into ``out = (q, p, log2 scale, beta_c)``: (n, depth + 1) three times and
    (n, depth). ``program``: ``(ops, constants, mode, rescale_beta_c, stack, user moments)``
    of a ``_tape.Program`` (the last: the compiled moments of its user activation,
    ``activations.registry.compiled_user_function``)."""
    _, constants, _, _, stack, _ = program
    q_out, p_out, e_out, beta_c_out = out
    for b in prange((params.shape[0] + BATCH - 1) // BATCH):
        work = buffers(program[0], constants, stack)
        values, q, p, e, s = work[0], work[1], work[2], work[3], work[4]
        first, low = np.empty(BATCH), np.empty(BATCH)
        start = b * BATCH
        count = min(params.shape[0], start + BATCH) - start
        load_batch(params, constants, start, count, values, q, p, e, s)
        for j in range(count):
            q_out[start + j, 0] = q[j]
            p_out[start + j, 0] = p[j]
            e_out[start + j, 0] = e[j]
        for layer in range(depth):
            for j in range(count):
                low[j] = np.inf
            advance(program, table, work, first, low, count, False, 1)
            for j in range(count):
                q_out[start + j, layer + 1] = q[j]
                p_out[start + j, layer + 1] = p[j]
                e_out[start + j, layer + 1] = e[j]
                beta_c_out[start + j, layer] = low[j]

@njit(cache=CACHE, parallel=True, **JIT_OPTIONS)
def final_states(program, params, depth, table, out):
    """Final q, p, the first/smallest beta_c and the log2 scale of every row, into ``out`` (n, 5)."""
    _, constants, _, _, stack, _ = program
    for b in prange((params.shape[0] + BATCH - 1) // BATCH):
        work = buffers(program[0], constants, stack)
        values, q, p, e, s = work[0], work[1], work[2], work[3], work[4]
        first, low = np.empty(BATCH), np.empty(BATCH)
        start = b * BATCH
        count = min(params.shape[0], start + BATCH) - start
        load_batch(params, constants, start, count, values, q, p, e, s)
        for j in range(count):
            first[j] = np.inf
            low[j] = np.inf
        advance(program, table, work, first, low, count, True, depth)
        for j in range(count):
            out[start + j, 0] = q[j]
            out[start + j, 1] = p[j]
            out[start + j, 2] = first[j]
            out[start + j, 3] = low[j]
            out[start + j, 4] = e[j]

@njit(cache=CACHE, parallel=True, **JIT_OPTIONS)
def min_alpha(program, params, depth, search, table, out):
    """Smallest alpha_sa with final rho <= threshold per row, by bisection (``out``, n).

    Assumes the final cosine does not increase with alpha_sa. 0 when alpha_sa = 0 already
    satisfies the threshold, +inf when alpha_max does not. The cells of a batch bisect in
    lock-step for ``iterations`` halvings (bracket width ``alpha_max / 2**iterations``); ``search`` is
    ``(threshold, alpha_max, iterations)``."""
    _, constants, _, _, stack, _ = program
    threshold, alpha_max, iterations = search
    for b in prange((params.shape[0] + BATCH - 1) // BATCH):
        work = buffers(program[0], constants, stack)
        values, q, p, e, s = work[0], work[1], work[2], work[3], work[4]
        first, low_bc = np.empty(BATCH), np.empty(BATCH)
        low, high, trial, at_zero = np.empty(BATCH), np.empty(BATCH), np.empty(BATCH), np.empty(BATCH)
        start = b * BATCH
        count = min(params.shape[0], start + BATCH) - start
        # pass 0 at alpha_sa = 0, pass 1 at alpha_max, then the bisection's midpoints
        for stage in range(iterations + 2):
            for j in range(count):
                if stage == 0:
                    low[j] = 0.0
                    high[j] = alpha_max
                    trial[j] = 0.0
                elif stage == 1:
                    trial[j] = alpha_max
                else:
                    trial[j] = 0.5 * (low[j] + high[j])
            load_batch(params, constants, start, count, values, q, p, e, s)
            for j in range(count):
                values[ALPHA_SA, j] = trial[j]
                first[j] = np.inf
                low_bc[j] = np.inf
            advance(program, table, work, first, low_bc, count, True, depth)
            for j in range(count):
                below = p[j] / q[j] <= threshold
                if stage == 0:
                    at_zero[j] = 1.0 if below else 0.0
                elif stage == 1:
                    if at_zero[j] == 1.0:
                        out[start + j] = 0.0
                    elif not below:
                        out[start + j] = np.inf
                    else:
                        out[start + j] = -1.0  # to be bisected
                elif below:
                    high[j] = trial[j]
                else:
                    low[j] = trial[j]
        for j in range(count):
            if out[start + j] < 0.0:
                out[start + j] = high[j]



#: The interpreter of every program, of every architecture and activation: plain module-level functions,
#: compiled once and kept on disk (numba keys the cache on this file and each sweep's bytecode; no closure).
ENGINE = (trajectories, final_states, min_alpha)
