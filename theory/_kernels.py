"""numba kernels: one block update, and sweeps of it over depth and parameter grids.

The elementary maps are the ``*_core`` functions of the component modules
(``register_jitable``: plain NumPy from Python, inlined here); nothing is re-derived. Parameter rows are packed as

    PARAMS = (beta, sigma_w2, sigma_b2, sigma_v2, alpha_sa, alpha_mlp, q0, p0)

and the categorical choices are the integer codes of :mod:`.architecture`.
"""
from __future__ import annotations

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


@njit(**_JIT)
def _final(norm, attention, activation, row, alpha_sa, depth):
    """Final (q, p) and the first and smallest beta_c of a depth-``depth`` stack."""
    q = row[Q0]
    p = row[P0]
    beta_c_first = np.inf
    beta_c_min = np.inf
    for layer in range(depth):
        q, p, beta_c = block_step(norm, attention, activation, q, p, row[BETA], row[SIGMA_W2],
                                  row[SIGMA_B2], row[SIGMA_V2], alpha_sa, row[ALPHA_MLP])
        if layer == 0:
            beta_c_first = beta_c
        beta_c_min = min(beta_c_min, beta_c)
    return q, p, beta_c_first, beta_c_min


@njit(cache=True, error_model="numpy", parallel=True)
def trajectories(norm, attention, activation, params, depth):
    """Whole trajectories: q, p of shape (n, depth + 1) and beta_c of shape (n, depth)."""
    n = params.shape[0]
    q_out = np.empty((n, depth + 1))
    p_out = np.empty((n, depth + 1))
    beta_c_out = np.empty((n, depth))
    for i in prange(n):
        row = params[i]
        q = row[Q0]
        p = row[P0]
        q_out[i, 0] = q
        p_out[i, 0] = p
        for layer in range(depth):
            q, p, beta_c = block_step(norm, attention, activation, q, p, row[BETA], row[SIGMA_W2],
                                      row[SIGMA_B2], row[SIGMA_V2], row[ALPHA_SA], row[ALPHA_MLP])
            q_out[i, layer + 1] = q
            p_out[i, layer + 1] = p
            beta_c_out[i, layer] = beta_c
    return q_out, p_out, beta_c_out


@njit(cache=True, error_model="numpy", parallel=True)
def final_states(norm, attention, activation, params, depth):
    """Final q, p and the first/smallest beta_c per row, without storing trajectories."""
    n = params.shape[0]
    out = np.empty((n, 4))
    for i in prange(n):
        q, p, beta_c_first, beta_c_min = _final(norm, attention, activation, params[i],
                                                params[i, ALPHA_SA], depth)
        out[i, 0] = q
        out[i, 1] = p
        out[i, 2] = beta_c_first
        out[i, 3] = beta_c_min
    return out


@njit(cache=True, error_model="numpy", parallel=True)
def min_alpha_bisection(norm, attention, activation, params, depth, threshold, alpha_max, tol):
    """Smallest alpha_sa with final rho <= threshold, per row, by bisection.

    Assumes the final cosine decreases with alpha_sa. Returns 0 when alpha_sa = 0
    already satisfies the threshold and +inf when alpha_max does not.
    """
    n = params.shape[0]
    out = np.empty(n)
    for i in prange(n):
        row = params[i]
        q, p, _, _ = _final(norm, attention, activation, row, 0.0, depth)
        if p / q <= threshold:
            out[i] = 0.0
            continue
        q, p, _, _ = _final(norm, attention, activation, row, alpha_max, depth)
        if not p / q <= threshold:
            out[i] = np.inf
            continue
        low = 0.0
        high = alpha_max
        while high - low > tol:
            mid = 0.5 * (low + high)
            q, p, _, _ = _final(norm, attention, activation, row, mid, depth)
            if p / q <= threshold:
                high = mid
            else:
                low = mid
        out[i] = high
    return out
