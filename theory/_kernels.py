"""numba kernels: one block update, and sweeps of it over depth and parameter grids.

The elementary maps are the ``*_core`` functions of the component modules
(``register_jitable``: plain NumPy from Python, inlined here); nothing is re-derived. Parameter rows are packed as

    PARAMS = (beta, sigma_w2, sigma_b2, sigma_v2, alpha_sa, alpha_mlp, sigma_o2, sigma_w2_out, q0, p0)

and the categorical choices are the integer codes of :mod:`.architecture`.

Finite sequence length: the kernels take the packed participation table of
:mod:`.finite_size` (``participation_table(T).packed``) as their last argument and
read ``Y2`` from it at ``x = beta sqrt(q (q - p))``; asymptotic kernels ignore it.

Caching: the kernels are closures whose cells hold only integers, booleans and
functions that pickle deterministically (module-level ``register_jitable`` functions
by reference, nested ones by value), so numba's on-disk cache key is stable across
processes. (A dispatcher in a closure cell pickles with a random uuid: the cache would
miss, and grow, on every run.) Every nested function gets a qualname unique to its
specialisation (:mod:`._naming`): otherwise two architectures' kernels compiled in
different processes can share symbol names and break when both are loaded from the
cache into one process. Kernels of user-registered activations call a function object
created at run time and are compiled per process, without the disk cache.
"""
from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple

import numpy as np
from numba import njit, prange
from numba.extending import register_jitable

from .activations import activation_spec, dense_core, linear_moments_core, relu_moments_core
from .attention import (
    asymptotic_participation_core,
    critical_beta_core,
    gain_controlled_attention_core,
    softmax_attention_core,
    softmax_attention_overlap_core,
)
from .rem.finite_t import participation_table, table_lookup
from ._naming import inline_jitable, specialised
from .layernorm import layernorm_core
from .residual import skip_core

PARAMS = ("beta", "sigma_w2", "sigma_b2", "sigma_v2", "alpha_sa", "alpha_mlp", "sigma_o2", "sigma_w2_out",
          "q0", "p0")
BETA, SIGMA_W2, SIGMA_B2, SIGMA_V2, ALPHA_SA, ALPHA_MLP, SIGMA_O2, SIGMA_W2_OUT, Q0, P0 = range(len(PARAMS))

POST, PRE, NONE = 0, 1, 2
SOFTMAX, GAIN_CONTROLLED = 0, 1
RELU, LINEAR = 0, 1

_JIT = dict(cache=True, error_model="numpy")

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
def mlp_output(norm, m2, m11, q, p, sigma_w2, sigma_b2, alpha_mlp):
    """Second dense layer, skip and (post-LN) LayerNorm, from the activation moments."""
    q_f, p_f = dense_core(m2, m11, sigma_w2, sigma_b2)
    q, p = skip_core(q_f, p_f, q, p, alpha_mlp)
    if norm == POST:
        q, p = layernorm_core(q, p)
    return q, p


@njit(**_JIT)
def block_step(norm, attention, activation, q, p, beta, sigma_w2, sigma_b2, sigma_v2,
               alpha_sa, alpha_mlp):
    """One transformer block, T -> infinity, ReLU or linear MLP (kept for callers of the
    first kernels; :func:`kernels_for` covers every activation and finite T).

    Returns (q', p', beta_c of the attention input).
    """
    q, p, beta_c = attention_sublayer(norm, attention, False, q, p, beta, sigma_v2, sigma_b2,
                                      alpha_sa, NO_TABLE, 1.0)
    q1, p1 = mlp_input(norm, q, p, sigma_w2, sigma_b2)
    if activation == RELU:
        m2, m11 = relu_moments_core(q1, p1)
    else:
        m2, m11 = linear_moments_core(q1, p1)
    q, p = mlp_output(norm, m2, m11, q, p, sigma_w2, sigma_b2, alpha_mlp)
    return q, p, beta_c


#: Cells advanced together by one thread. Interleaving independent cells hides the
#: latency of each cell's serial chain of divisions and square roots (and lets LLVM
#: use SIMD where the activation allows): about 4x over one cell at a time.
BATCH = 32


class Kernels(NamedTuple):
    """The compiled sweeps of one (norm, attention, activation, finite) combination.

    Each takes the packed finite-T table as an optional last argument ``table``
    (required by finite-T kernels, ignored by asymptotic ones).
    """

    trajectories: Callable
    final_states: Callable
    min_alpha_bisection: Callable


@functools.lru_cache(maxsize=None)
def kernels_for(norm, attention, activation, finite=False):
    """Kernels specialised to one architecture.

    The integer codes and ``finite`` become compile-time constants of the closures
    below, so the branches of the block disappear from the inner loops. Compiled code is
    cached on disk per combination for built-in activations (numba keys the cache on
    the closure values).
    """
    spec = activation_spec(int(activation))
    moments = spec.moments
    finite = bool(finite)
    jit = dict(cache=spec.builtin, error_model="numpy")
    tag = f"{norm}_{attention}_{spec.code}_{int(finite)}"

    def step(q, p, beta, sigma_w2, sigma_b2, sigma_v2, alpha_sa, alpha_mlp, sigma_o2, sigma_w2_out, table):
        q, p, beta_c = attention_sublayer(norm, attention, finite, q, p, beta, sigma_v2,
                                          sigma_b2, alpha_sa, table, sigma_o2)
        q1, p1 = mlp_input(norm, q, p, sigma_w2, sigma_b2)
        m2, m11 = moments(q1, p1)
        q, p = mlp_output(norm, m2, m11, q, p, sigma_w2_out, sigma_b2, alpha_mlp)
        return q, p, beta_c

    step = inline_jitable(specialised(step, tag))

    def advance(q, p, beta_c_first, beta_c_min, prm, alpha_sa, count, first_layer, depth, table):
        """Advance ``count`` cells of a batch by ``depth`` blocks, in place."""
        for layer in range(depth):
            for j in range(count):
                q_new, p_new, beta_c = step(
                    q[j], p[j], prm[BETA, j], prm[SIGMA_W2, j], prm[SIGMA_B2, j],
                    prm[SIGMA_V2, j], alpha_sa[j], prm[ALPHA_MLP, j], prm[SIGMA_O2, j],
                    prm[SIGMA_W2_OUT, j], table)
                q[j] = q_new
                p[j] = p_new
                if first_layer and layer == 0:
                    beta_c_first[j] = beta_c
                beta_c_min[j] = min(beta_c_min[j], beta_c)

    advance = register_jitable(specialised(advance, tag))

    def load(params, start, count, prm, q, p, beta_c_first, beta_c_min):
        for j in range(count):
            for k in range(len(PARAMS)):
                prm[k, j] = params[start + j, k]
            q[j] = params[start + j, Q0]
            p[j] = params[start + j, P0]
            beta_c_first[j] = np.inf
            beta_c_min[j] = np.inf

    load = register_jitable(specialised(load, tag))

    def trajectories(params, depth, table):
        """Whole trajectories: q, p of shape (n, depth + 1) and beta_c of shape (n, depth)."""
        n = params.shape[0]
        q_out = np.empty((n, depth + 1))
        p_out = np.empty((n, depth + 1))
        beta_c_out = np.empty((n, depth))
        for b in prange((n + BATCH - 1) // BATCH):
            start = b * BATCH
            count = min(n, start + BATCH) - start
            prm = np.empty((len(PARAMS), BATCH))
            q = np.empty(BATCH)
            p = np.empty(BATCH)
            first = np.empty(BATCH)
            low = np.empty(BATCH)
            load(params, start, count, prm, q, p, first, low)
            for j in range(count):
                q_out[start + j, 0] = q[j]
                p_out[start + j, 0] = p[j]
            for layer in range(depth):
                for j in range(count):
                    low[j] = np.inf
                advance(q, p, first, low, prm, prm[ALPHA_SA], count, False, 1, table)
                for j in range(count):
                    q_out[start + j, layer + 1] = q[j]
                    p_out[start + j, layer + 1] = p[j]
                    beta_c_out[start + j, layer] = low[j]
        return q_out, p_out, beta_c_out

    trajectories = njit(parallel=True, **jit)(specialised(trajectories, tag))

    def final_states(params, depth, table):
        """Final q, p and the first/smallest beta_c per row, without storing trajectories."""
        n = params.shape[0]
        out = np.empty((n, 4))
        for b in prange((n + BATCH - 1) // BATCH):
            start = b * BATCH
            count = min(n, start + BATCH) - start
            prm = np.empty((len(PARAMS), BATCH))
            q = np.empty(BATCH)
            p = np.empty(BATCH)
            first = np.empty(BATCH)
            low = np.empty(BATCH)
            load(params, start, count, prm, q, p, first, low)
            advance(q, p, first, low, prm, prm[ALPHA_SA], count, True, depth, table)
            for j in range(count):
                out[start + j, 0] = q[j]
                out[start + j, 1] = p[j]
                out[start + j, 2] = first[j]
                out[start + j, 3] = low[j]
        return out

    final_states = njit(parallel=True, **jit)(specialised(final_states, tag))

    def min_alpha(params, depth, threshold, alpha_max, iterations, table):
        """Smallest alpha_sa with final rho <= threshold, per row, by bisection.

        Assumes the final cosine does not increase with alpha_sa. Returns 0 when
        alpha_sa = 0 already satisfies the threshold and +inf when alpha_max does not.
        The cells of a batch bisect in lock-step for a fixed number of ``iterations``
        (bracket width ``alpha_max / 2**iterations``).
        """
        n = params.shape[0]
        out = np.empty(n)
        for b in prange((n + BATCH - 1) // BATCH):
            start = b * BATCH
            count = min(n, start + BATCH) - start
            prm = np.empty((len(PARAMS), BATCH))
            q = np.empty(BATCH)
            p = np.empty(BATCH)
            first = np.empty(BATCH)
            low_bc = np.empty(BATCH)
            low = np.zeros(BATCH)
            high = np.full(BATCH, alpha_max)
            trial = np.zeros(BATCH)
            load(params, start, count, prm, q, p, first, low_bc)
            advance(q, p, first, low_bc, prm, trial, count, True, depth, table)
            at_zero = np.empty(BATCH, dtype=np.bool_)
            for j in range(count):
                at_zero[j] = p[j] / q[j] <= threshold
            load(params, start, count, prm, q, p, first, low_bc)
            advance(q, p, first, low_bc, prm, high, count, True, depth, table)
            for j in range(count):
                if at_zero[j]:
                    out[start + j] = 0.0
                elif not p[j] / q[j] <= threshold:
                    out[start + j] = np.inf
                else:
                    out[start + j] = -1.0  # to be bisected
            for _ in range(iterations):
                for j in range(count):
                    trial[j] = 0.5 * (low[j] + high[j])
                load(params, start, count, prm, q, p, first, low_bc)
                advance(q, p, first, low_bc, prm, trial, count, True, depth, table)
                for j in range(count):
                    if p[j] / q[j] <= threshold:
                        high[j] = trial[j]
                    else:
                        low[j] = trial[j]
            for j in range(count):
                if out[start + j] < 0.0:
                    out[start + j] = high[j]
        return out

    min_alpha = njit(parallel=True, **jit)(specialised(min_alpha, tag))

    def _table(table):
        if table is None:
            if finite:
                raise ValueError("table must be given to finite-T kernels "
                                 "(remprop.theory.rem.finite_t.participation_table(T).packed)")
            return NO_TABLE
        return np.ascontiguousarray(table, dtype=np.float64)

    def run_trajectories(params, depth, table=None):
        return trajectories(params, depth, _table(table))

    def run_final_states(params, depth, table=None):
        return final_states(params, depth, _table(table))

    def run_min_alpha_bisection(params, depth, threshold, alpha_max, iterations, table=None):
        return min_alpha(params, depth, threshold, alpha_max, iterations, _table(table))

    run_trajectories.__doc__ = trajectories.__doc__
    run_final_states.__doc__ = final_states.__doc__
    run_min_alpha_bisection.__doc__ = min_alpha.__doc__
    return Kernels(run_trajectories, run_final_states, run_min_alpha_bisection)


def packed_table(seq_len):
    """The packed Y2 table for ``seq_len`` (None -> the unused stand-in)."""
    return NO_TABLE if seq_len is None else participation_table(seq_len, 2).packed


def min_alpha_bisection(norm, attention, activation, params, depth, threshold, alpha_max, tol,
                        seq_len=None):
    """Smallest alpha_sa with final rho <= threshold for each row of ``params``.

    Bisection on [0, alpha_max] until the bracket is narrower than ``tol``; see
    ``kernels_for(...).min_alpha_bisection``. Returns the upper end of the final bracket
    (an alpha known to satisfy the threshold), 0.0 or +inf. ``seq_len`` (None or an
    integer >= 2) selects the finite-T attention maps.
    """
    iterations = max(0, int(np.ceil(np.log2(alpha_max / tol))))
    kernels = kernels_for(norm, attention, activation, seq_len is not None)
    return kernels.min_alpha_bisection(params, depth, threshold, alpha_max, iterations,
                                       packed_table(seq_len))
