"""Sweeps of the block update over depth and parameter grids, compiled per architecture.

Each row of a parameter grid is packed as :data:`PARAMS`; the categorical choices
(norm, attention, activation, finite T) become compile-time constants of the closures
built by :func:`kernels_for`. Cells run in batches of :data:`BATCH`, batches in parallel
(``numba.prange``).
"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import numpy as np
from numba import njit, prange
from numba.extending import register_jitable

from .._jit import specialised
from ..activations import activation_spec
from ..rem import participation_table
from ._block import NO_TABLE, make_block_step

PARAMS = ("beta", "sigma_w2", "sigma_b2", "sigma_v2", "alpha_sa", "alpha_mlp", "sigma_o2", "sigma_w2_out",
          "q0", "p0")
BETA, SIGMA_W2, SIGMA_B2, SIGMA_V2, ALPHA_SA, ALPHA_MLP, SIGMA_O2, SIGMA_W2_OUT, Q0, P0 = range(len(PARAMS))

#: Cells advanced together by one thread. Interleaving independent cells hides the
#: latency of each cell's serial chain of divisions and square roots (and lets LLVM
#: use SIMD where the activation allows): about 4x over one cell at a time.
BATCH = 32


class Kernels(NamedTuple):
    """The compiled sweeps of one (norm, attention, activation, finite) combination.

    Each takes the packed finite-T table as an optional last argument ``table``
    (required by finite-T kernels, ignored by asymptotic ones).

    Attributes
    ----------
    trajectories : callable
        ``(params, depth, table=None) -> (q, p, beta_c)``: whole trajectories, shapes
        ``(n, depth + 1)``, ``(n, depth + 1)`` and ``(n, depth)``.
    final_states : callable
        ``(params, depth, table=None) -> out`` of shape ``(n, 4)``: final q, p, and the
        first and smallest critical beta over the layers.
    min_alpha_bisection : callable
        ``(params, depth, threshold, alpha_max, iterations, table=None)``: the smallest
        ``alpha_sa`` with final cosine ``<= threshold`` per row, by bisection.
    """

    trajectories: Callable
    final_states: Callable
    min_alpha_bisection: Callable


@functools.lru_cache(maxsize=None)
def kernels_for(norm, attention, activation, finite=False):
    """Kernels specialised to one architecture.

    Parameters
    ----------
    norm, attention, activation : int
        The codes of :attr:`Architecture.codes <remprop.theory.Architecture.codes>`.
    finite : bool
        Finite sequence length (the attention reads the packed table of
        :func:`packed_table`) or ``T -> infinity``.

    Returns
    -------
    Kernels
        Compiled sweeps over rows packed as :data:`PARAMS`. The codes and ``finite``
        become compile-time constants of the closures, so the branches of the block
        disappear from the inner loops. Compiled code is cached on disk per combination
        for built-in activations (numba keys the cache on the closure values).
    """
    spec = activation_spec(int(activation))
    finite = bool(finite)
    jit = dict(cache=spec.builtin, error_model="numpy")
    tag = f"{norm}_{attention}_{spec.code}_{int(finite)}"
    step = make_block_step(norm, attention, spec.moments, finite, tag)

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
        """(Re)load the rows ``start:start + count`` into a batch's buffers."""
        for j in range(count):
            for k in range(len(PARAMS)):
                prm[k, j] = params[start + j, k]
            q[j] = params[start + j, Q0]
            p[j] = params[start + j, P0]
            beta_c_first[j] = np.inf
            beta_c_min[j] = np.inf

    load = register_jitable(specialised(load, tag))

    def batch(params, b):
        """Buffers of batch ``b``, loaded: ``(start, count, prm, q, p, beta_c_first, beta_c_min)``."""
        start = b * BATCH
        count = min(params.shape[0], start + BATCH) - start
        prm = np.empty((len(PARAMS), BATCH))
        q = np.empty(BATCH)
        p = np.empty(BATCH)
        first = np.empty(BATCH)
        low = np.empty(BATCH)
        load(params, start, count, prm, q, p, first, low)
        return start, count, prm, q, p, first, low

    batch = register_jitable(specialised(batch, tag))

    def trajectories(params, depth, table):
        """Whole trajectories: q, p of shape (n, depth + 1) and beta_c of shape (n, depth)."""
        n = params.shape[0]
        q_out = np.empty((n, depth + 1))
        p_out = np.empty((n, depth + 1))
        beta_c_out = np.empty((n, depth))
        for b in prange((n + BATCH - 1) // BATCH):
            start, count, prm, q, p, first, low = batch(params, b)
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
            start, count, prm, q, p, first, low = batch(params, b)
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
            start, count, prm, q, p, first, low_bc = batch(params, b)
            low = np.zeros(BATCH)
            high = np.full(BATCH, alpha_max)
            trial = np.zeros(BATCH)
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
                                 "(remprop.theory.kernels.packed_table(T))")
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
    """The packed Y2 table the finite-T kernels read, for ``seq_len`` (None -> the unused stand-in).

    Parameters
    ----------
    seq_len : int or None
        Sequence length T >= 2, or None for ``T -> infinity``.

    Returns
    -------
    ndarray
        ``participation_table(T, 2).packed`` (:func:`remprop.theory.participation_table`),
        or a read-only stand-in that asymptotic kernels never read.
    """
    return NO_TABLE if seq_len is None else participation_table(seq_len, 2).packed


def min_alpha_bisection(norm, attention, activation, params, depth, threshold, alpha_max, tol,
                        seq_len=None):
    """Smallest alpha_sa with final rho <= threshold for each row of ``params``.

    Bisection on [0, alpha_max] until the bracket is narrower than ``tol``; see
    ``kernels_for(...).min_alpha_bisection``. Returns the upper end of the final bracket
    (an alpha known to satisfy the threshold), 0.0 or +inf. ``norm``, ``attention``,
    ``activation``: the codes of :attr:`Architecture.codes <remprop.theory.Architecture.codes>`;
    ``params``: rows packed as :data:`PARAMS`; ``seq_len`` (None or an integer >= 2)
    selects the finite-T attention maps.
    """
    iterations = max(0, int(np.ceil(np.log2(alpha_max / tol))))
    kernels = kernels_for(norm, attention, activation, seq_len is not None)
    return kernels.min_alpha_bisection(params, depth, threshold, alpha_max, iterations,
                                       packed_table(seq_len))
