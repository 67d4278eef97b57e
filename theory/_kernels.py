"""numba kernels: one block update, and sweeps of it over depth and parameter grids.

The elementary maps are the ``*_core`` functions of the component modules
(``register_jitable``: plain NumPy from Python, inlined here); nothing is re-derived. Parameter rows are packed as

    PARAMS = (beta, sigma_w2, sigma_b2, sigma_v2, alpha_sa, alpha_mlp, q0, p0)

and the categorical choices are the integer codes of :mod:`.architecture`.
"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import numpy as np
from numba import njit, prange

from .activations import dense_core, linear_moments_core, relu_moments_core
from .attention import (
    asymptotic_participation_core,
    critical_beta_core,
    gain_controlled_attention_core,
    softmax_attention_core,
)
from .layernorm import layernorm_core
from .residual import skip_core

PARAMS = ("beta", "sigma_w2", "sigma_b2", "sigma_v2", "alpha_sa", "alpha_mlp", "q0", "p0")
BETA, SIGMA_W2, SIGMA_B2, SIGMA_V2, ALPHA_SA, ALPHA_MLP, Q0, P0 = range(len(PARAMS))

POST, PRE, NONE = 0, 1, 2
SOFTMAX, GAIN_CONTROLLED = 0, 1
RELU, LINEAR = 0, 1

_JIT = dict(cache=True, error_model="numpy")


@njit(**_JIT)
def block_step(norm, attention, activation, q, p, beta, sigma_w2, sigma_b2, sigma_v2,
               alpha_sa, alpha_mlp):
    """One transformer block. Returns (q', p', beta_c of the attention input)."""
    # attention sub-block
    if norm == PRE:
        q_in, p_in = layernorm_core(q, p)
    else:
        q_in, p_in = q, p
    beta_c = critical_beta_core(q_in, p_in)
    y2 = asymptotic_participation_core(beta, beta_c)
    if attention == SOFTMAX:
        q_f, p_f = softmax_attention_core(q_in, p_in, y2, sigma_v2, sigma_b2)
    else:
        q_f, p_f = gain_controlled_attention_core(q_in, p_in, y2, sigma_v2, sigma_b2)
    q, p = skip_core(q_f, p_f, q, p, alpha_sa)
    if norm == POST:
        q, p = layernorm_core(q, p)
    # MLP sub-block
    if norm == PRE:
        q_in, p_in = layernorm_core(q, p)
    else:
        q_in, p_in = q, p
    q1, p1 = dense_core(q_in, p_in, sigma_w2, sigma_b2)
    if activation == RELU:
        m2, m11 = relu_moments_core(q1, p1)
    else:
        m2, m11 = linear_moments_core(q1, p1)
    q_f, p_f = dense_core(m2, m11, sigma_w2, sigma_b2)
    q, p = skip_core(q_f, p_f, q, p, alpha_mlp)
    if norm == POST:
        q, p = layernorm_core(q, p)
    return q, p, beta_c


#: Cells advanced together by one thread. Interleaving independent cells hides the
#: latency of each cell's serial chain of divisions and square roots (and lets LLVM
#: use SIMD where the activation allows): about 4x over one cell at a time.
BATCH = 32


class Kernels(NamedTuple):
    """The compiled sweeps of one (norm, attention, activation) combination."""

    trajectories: Callable
    final_states: Callable
    min_alpha_bisection: Callable


@functools.lru_cache(maxsize=None)
def kernels_for(norm, attention, activation):
    """Kernels specialised to one architecture.

    The integer codes become compile-time constants of the closures below, so the
    branches of :func:`block_step` disappear from the inner loops. Compiled code is
    cached on disk per combination (numba keys the cache on the closure values).
    """

    @njit(**_JIT)
    def advance(q, p, beta_c_first, beta_c_min, prm, alpha_sa, count, first_layer, depth):
        """Advance ``count`` cells of a batch by ``depth`` blocks, in place."""
        for layer in range(depth):
            for j in range(count):
                q_new, p_new, beta_c = block_step(
                    norm, attention, activation, q[j], p[j], prm[BETA, j], prm[SIGMA_W2, j],
                    prm[SIGMA_B2, j], prm[SIGMA_V2, j], alpha_sa[j], prm[ALPHA_MLP, j])
                q[j] = q_new
                p[j] = p_new
                if first_layer and layer == 0:
                    beta_c_first[j] = beta_c
                beta_c_min[j] = min(beta_c_min[j], beta_c)

    @njit(**_JIT)
    def load(params, start, count, prm, q, p, beta_c_first, beta_c_min):
        for j in range(count):
            for k in range(len(PARAMS)):
                prm[k, j] = params[start + j, k]
            q[j] = params[start + j, Q0]
            p[j] = params[start + j, P0]
            beta_c_first[j] = np.inf
            beta_c_min[j] = np.inf

    @njit(cache=True, error_model="numpy", parallel=True)
    def trajectories(params, depth):
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
                advance(q, p, first, low, prm, prm[ALPHA_SA], count, False, 1)
                for j in range(count):
                    q_out[start + j, layer + 1] = q[j]
                    p_out[start + j, layer + 1] = p[j]
                    beta_c_out[start + j, layer] = low[j]
        return q_out, p_out, beta_c_out

    @njit(cache=True, error_model="numpy", parallel=True)
    def final_states(params, depth):
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
            advance(q, p, first, low, prm, prm[ALPHA_SA], count, True, depth)
            for j in range(count):
                out[start + j, 0] = q[j]
                out[start + j, 1] = p[j]
                out[start + j, 2] = first[j]
                out[start + j, 3] = low[j]
        return out

    @njit(cache=True, error_model="numpy", parallel=True)
    def min_alpha_bisection(params, depth, threshold, alpha_max, iterations):
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
            advance(q, p, first, low_bc, prm, trial, count, True, depth)
            at_zero = np.empty(BATCH, dtype=np.bool_)
            for j in range(count):
                at_zero[j] = p[j] / q[j] <= threshold
            load(params, start, count, prm, q, p, first, low_bc)
            advance(q, p, first, low_bc, prm, high, count, True, depth)
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
                advance(q, p, first, low_bc, prm, trial, count, True, depth)
                for j in range(count):
                    if p[j] / q[j] <= threshold:
                        high[j] = trial[j]
                    else:
                        low[j] = trial[j]
            for j in range(count):
                if out[start + j] < 0.0:
                    out[start + j] = high[j]
        return out

    return Kernels(trajectories, final_states, min_alpha_bisection)


def min_alpha_bisection(norm, attention, activation, params, depth, threshold, alpha_max, tol):
    """Smallest alpha_sa with final rho <= threshold for each row of ``params``.

    Bisection on [0, alpha_max] until the bracket is narrower than ``tol``; see
    ``kernels_for(...).min_alpha_bisection``. Returns the upper end of the final bracket
    (an alpha known to satisfy the threshold), 0.0 or +inf.
    """
    iterations = max(0, int(np.ceil(np.log2(alpha_max / tol))))
    return kernels_for(norm, attention, activation).min_alpha_bisection(
        params, depth, threshold, alpha_max, iterations)
