"""Sweeps of the block update over depth and parameter grids, compiled per architecture.

Each row of a parameter grid is packed as :data:`PARAMS`; the categorical choices
(norm, attention, activation, norm type, MLP form, finite T) become compile-time constants of the closures
built by :func:`kernels_for`. Cells run in batches of :data:`BATCH`, batches in parallel
(``numba.prange``).

The carried scale
-----------------
Pre-LN and no-LN residual streams grow (or shrink) geometrically with depth, like
``alpha**(2L)``, and would leave float64 after a few thousand layers. Each cell therefore
carries its state as ``(q, p) * 2**e``: when ``q`` leaves ``[2**-SCALE_EXPONENT,
2**SCALE_EXPONENT]`` its exponent moves into ``e``. The maps are exactly homogeneous
where this is needed (docs/theory.md section 5), so the scaled state advances by the same
block update with rescaled parameters, ``s = 2**-e``:

* pre-LN: the branches read ``LN(x)``, which is scale-free; their outputs are added to
  the stream at scale ``s``: ``sigma_o2 -> s sigma_o2``, ``sigma_w2_out -> s sigma_w2_out``
  and the second bias ``sigma_b2 -> s sigma_b2``.
* no LN, positively homogeneous activation (ReLU, linear:
  :attr:`ActivationSpec.homogeneous <remprop.theory.activations.ActivationSpec>`): every
  map is homogeneous of degree one up to the biases and the REM's reduced scale
  ``beta sqrt(q (q - p))``, so ``beta -> beta / s``, ``sigma_b2 -> s sigma_b2`` and the
  critical beta is ``s`` times the scaled state's. A gated MLP is a product of two
  projections (degree two), so no-LN stacks with one are not rescaled. With QK-norm the
  REM's reduced scale does not depend on the stream's scale: ``beta`` and the critical
  beta are not rescaled.
* branch norms (docs/theory.md section 19): a normalised branch output is scale-free, so a
  pre-LN stream multiplies it by ``s`` (``branch_scale``); a no-LN stream with branch norms
  grows only linearly with depth and is not rescaled.
* post-LN needs none (LayerNorm sets ``q = 1`` twice per block); no LN with any other
  activation is not rescaled (its moments are not homogeneous) and is reported as leaving
  float64 when it does.

With ``e = 0`` the parameters are multiplied by exactly 1, so results are bit-identical
to a kernel without a scale; the cosine ``p / q`` needs no scale at all.
"""
from __future__ import annotations

import functools
import math
from typing import Callable, NamedTuple

import numpy as np
from numba import njit, prange
from numba.extending import register_jitable

from .._jit import specialised
from ..activations import activation_spec
from ..rem import cross_overlap_table, participation_table
from ._block import BRANCH_NORM, MLPS, NO_TABLE, NORMS, make_block_step

#: The columns of a packed row: ``mean_rope_correlation`` is ``cbar_T`` of RoPE, exactly 1
#: without (:attr:`Architecture.mean_rope_correlation <remprop.theory.Architecture.mean_rope_correlation>`);
#: ``block_code`` is :attr:`Architecture.block_code <remprop.theory.Architecture.block_code>`
#: (the same in every row of a call) and ``qk_norm_dim`` the QK-norm width n, 0 without QK-norm
#: (docs/theory.md section 19).
PARAMS = ("beta", "sigma_w2", "sigma_b2", "sigma_v2", "alpha_sa", "alpha_mlp", "sigma_o2", "sigma_w2_out",
          "mean_rope_correlation", "q0", "p0", "log2_scale", "block_code", "qk_norm_dim")
(BETA, SIGMA_W2, SIGMA_B2, SIGMA_V2, ALPHA_SA, ALPHA_MLP, SIGMA_O2, SIGMA_W2_OUT, ROPE_CBAR, Q0, P0,
 LOG2_SCALE, BLOCK_CODE, QK_NORM_DIM) = range(len(PARAMS))

#: Cells advanced together by one thread. Interleaving independent cells hides the
#: latency of each cell's serial chain of divisions and square roots (and lets LLVM
#: use SIMD where the activation allows): about 4x over one cell at a time.
BATCH = 32
#: A cell's q is kept in [2**-SCALE_EXPONENT, 2**SCALE_EXPONENT]; the rest is its exponent.
SCALE_EXPONENT = 128
_BIG = 2.0 ** SCALE_EXPONENT
_SMALL = 2.0 ** -SCALE_EXPONENT
#: Scaling modes (compile-time constants): none, pre-LN branches, no-LN homogeneous maps.
NO_SCALE, SCALE_BRANCHES, SCALE_INPUTS = range(3)


def scale_mode(norm, activation, mlp=MLPS["dense"]) -> int:
    """How the kernels carry the scale of an architecture's stream (module docstring)."""
    if norm == NORMS["pre"]:
        return SCALE_BRANCHES
    if norm == NORMS["none"] and mlp == MLPS["dense"] and activation_spec(int(activation)).homogeneous:
        return SCALE_INPUTS
    return NO_SCALE


@register_jitable
def scale_factor(exponent):
    """``2**-exponent``, clamped to [2**-1100, 2**1000] (0 below float64's range)."""
    return math.ldexp(1.0, -int(max(min(exponent, 1100.0), -1000.0)))


class Kernels(NamedTuple):
    """The compiled sweeps of one (norm, attention, activation, norm type, MLP, finite) combination.

    Each takes the packed finite-T table as an optional last argument ``table``
    (required by finite-T kernels, ignored by asymptotic ones).

    Attributes
    ----------
    trajectories : callable
        ``(params, depth, table=None) -> (q, p, log2_scale, beta_c)``: whole trajectories,
        shapes ``(n, depth + 1)`` (three times) and ``(n, depth)``; the state of layer l is
        ``(q, p) * 2**log2_scale`` (module docstring, "The carried scale").
    final_states : callable
        ``(params, depth, table=None) -> out`` of shape ``(n, 5)``: final q, p, the
        first and smallest critical beta over the layers, and the log2 scale of (q, p).
    min_alpha_bisection : callable
        ``(params, depth, threshold, alpha_max, iterations, table=None)``: the smallest
        ``alpha_sa`` with final cosine ``<= threshold`` per row, by bisection.
    """

    trajectories: Callable
    final_states: Callable
    min_alpha_bisection: Callable


@functools.lru_cache(maxsize=None)
def kernels_for(norm, attention, activation, norm_type, mlp, finite=False):
    """Kernels specialised to one architecture: ``kernels_for(*arch.codes, finite)``.

    Parameters
    ----------
    norm, attention, activation, norm_type, mlp : int
        The codes of :func:`~remprop.theory.kernels.architecture_codes`.
    finite : bool
        Finite sequence length (the attention reads the packed table of
        :func:`packed_table`) or ``T -> infinity``.

    Returns
    -------
    Kernels
        Compiled sweeps over rows packed as :data:`PARAMS`. The codes and ``finite``
        become compile-time constants of the closures, so the branches of the block
        disappear from the inner loops. Compiled code is cached on disk per combination
        for built-in activations (numba keys the cache on the closure values). Rotary
        positions are a compile-time choice too, made per call from the rows: rows whose
        ``mean_rope_correlation`` column is not exactly 1 run a second specialisation that
        reads it (compiled on first use), the others one that never does. So are the block
        form (``block_code``, which must be the same in every row) and QK-norm (``qk_norm_dim``
        not 0, in every row or in none; finite T only), docs/theory.md section 19.
    """
    spec = activation_spec(int(activation))
    finite = bool(finite)
    jit = dict(cache=spec.builtin, error_model="numpy")
    norm_type, mlp = int(norm_type), int(mlp)
    tag = f"{norm}_{attention}_{spec.code}_{int(finite)}_{norm_type}_{mlp}"
    mode = scale_mode(norm, activation, mlp)

    @functools.lru_cache(maxsize=None)
    def compiled(rope, block=0, qk=False):
        """The sweeps with RoPE's overlap factor read (``rope``) or left out, of one block form
        and with or without QK-norm; compiled on first use."""
        full_tag = tag + ("_rope" if rope else "") + (f"_b{block}" if block else "") + ("_qk" if qk else "")
        step = make_block_step(norm, attention, spec.moments, finite, full_tag, norm_type, mlp, rope, block, qk)
        block_mode = NO_SCALE if (block & BRANCH_NORM and mode == SCALE_INPUTS) else mode
        return _compile_sweeps(step, block_mode, jit, full_tag, qk)

    def sweeps(params):
        """Rows without RoPE (every ``mean_rope_correlation`` exactly 1) run the kernels that never
        read that column: the default costs nothing for RoPE. The block form and QK-norm are
        read from their columns (module docstring of :mod:`remprop.theory.kernels`)."""
        if not params.shape[0]:
            return compiled(False)
        rope = bool(np.any(params[:, ROPE_CBAR] != 1.0))
        codes = params[:, BLOCK_CODE]
        if np.any(codes != codes[0]) or codes[0] not in (0.0, 1.0, 2.0, 3.0):
            raise ValueError("params: the block_code column must hold one of 0, 1, 2, 3, the same in every row")
        qk_dims = params[:, QK_NORM_DIM]
        qk = bool(np.any(qk_dims != 0.0))
        if qk and (np.any(qk_dims < 1.0) or not finite):
            raise ValueError("params: QK-norm (qk_norm_dim column) needs a finite sequence length and a width "
                             ">= 1 in every row")
        if codes[0] == 0.0 and not qk:
            return compiled(rope)
        return compiled(rope, int(codes[0]), qk)

    def _table(table):
        if table is None:
            if finite:
                raise ValueError("table must be given to finite-T kernels "
                                 "(remprop.theory.kernels.packed_table(T))")
            return NO_TABLE
        return np.ascontiguousarray(table, dtype=np.float64)

    def run_trajectories(params, depth, table=None):
        return sweeps(params)[0](params, depth, _table(table))

    def run_final_states(params, depth, table=None):
        return sweeps(params)[1](params, depth, _table(table))

    def run_min_alpha_bisection(params, depth, threshold, alpha_max, iterations, table=None):
        return sweeps(params)[2](params, depth, threshold, alpha_max, iterations, _table(table))

    run_trajectories.__doc__, run_final_states.__doc__, run_min_alpha_bisection.__doc__ = (
        function.__doc__ for function in compiled(False))
    return Kernels(run_trajectories, run_final_states, run_min_alpha_bisection)


def _compile_sweeps(step, mode, jit, tag, qk=False):
    """The compiled ``(trajectories, final_states, min_alpha)`` of one block ``step``
    (:func:`~remprop.theory.kernels._block.make_block_step`), scaling ``mode`` and tag;
    ``qk``: QK-norm (no rescaling of beta, module docstring)."""
    def advance(q, p, e, s, beta_c_first, beta_c_min, prm, alpha_sa, count, first_layer, depth, table):
        """Advance ``count`` cells of a batch by ``depth`` blocks, in place (state ``(q, p) 2**e``,
        ``s = 2**-e``)."""
        for layer in range(depth):
            for j in range(count):
                beta = prm[BETA, j]
                sigma_b2 = prm[SIGMA_B2, j]
                sigma_o2 = prm[SIGMA_O2, j]
                sigma_w2_out = prm[SIGMA_W2_OUT, j]
                sigma_b2_out = sigma_b2
                branch_scale = 1.0
                if mode == SCALE_BRANCHES:
                    sigma_o2 = sigma_o2 * s[j]
                    sigma_w2_out = sigma_w2_out * s[j]
                    sigma_b2_out = sigma_b2 * s[j]
                    branch_scale = s[j]
                elif mode == SCALE_INPUTS:
                    if not qk:
                        beta = beta / s[j]
                    sigma_b2 = sigma_b2 * s[j]
                    sigma_b2_out = sigma_b2
                q_new, p_new, beta_c = step(
                    q[j], p[j], beta, prm[SIGMA_W2, j], sigma_b2, prm[SIGMA_V2, j], alpha_sa[j],
                    prm[ALPHA_MLP, j], sigma_o2, sigma_w2_out, sigma_b2_out, prm[ROPE_CBAR, j], table,
                    prm[QK_NORM_DIM, j], branch_scale)
                if mode == SCALE_INPUTS and not qk and beta_c < np.inf:  # inf (collapsed tokens) stays inf
                    beta_c = beta_c * s[j]
                q[j] = q_new
                p[j] = p_new
                if first_layer and layer == 0:
                    beta_c_first[j] = beta_c
                beta_c_min[j] = min(beta_c_min[j], beta_c)
            if mode != NO_SCALE and ((layer & 3) == 3 or layer == depth - 1):
                for j in range(count):
                    if (q[j] > _BIG or q[j] < _SMALL) and q[j] > 0.0 and q[j] < np.inf:
                        mantissa, exponent = math.frexp(q[j])
                        q[j] = mantissa
                        p[j] = math.ldexp(p[j], -exponent)
                        e[j] += exponent
                        s[j] = scale_factor(e[j])

    advance = register_jitable(specialised(advance, tag))

    def load(params, start, count, prm, q, p, e, s, beta_c_first, beta_c_min):
        """(Re)load the rows ``start:start + count`` into a batch's buffers."""
        for j in range(count):
            for k in range(len(PARAMS)):
                prm[k, j] = params[start + j, k]
            q[j] = params[start + j, Q0]
            p[j] = params[start + j, P0]
            e[j] = params[start + j, LOG2_SCALE]
            s[j] = scale_factor(e[j])
            beta_c_first[j] = np.inf
            beta_c_min[j] = np.inf

    load = register_jitable(specialised(load, tag))

    def batch(params, b):
        """Buffers of batch ``b``, loaded: ``(start, count, prm, q, p, e, s, beta_c_first, beta_c_min)``."""
        start = b * BATCH
        count = min(params.shape[0], start + BATCH) - start
        prm = np.empty((len(PARAMS), BATCH))
        q = np.empty(BATCH)
        p = np.empty(BATCH)
        e = np.zeros(BATCH)
        s = np.ones(BATCH)
        first = np.empty(BATCH)
        low = np.empty(BATCH)
        load(params, start, count, prm, q, p, e, s, first, low)
        return start, count, prm, q, p, e, s, first, low

    batch = register_jitable(specialised(batch, tag))

    def trajectories(params, depth, table):
        """Whole trajectories: q, p, their log2 scale of shape (n, depth + 1) and beta_c of shape (n, depth)."""
        n = params.shape[0]
        q_out = np.empty((n, depth + 1))
        p_out = np.empty((n, depth + 1))
        e_out = np.empty((n, depth + 1))
        beta_c_out = np.empty((n, depth))
        for b in prange((n + BATCH - 1) // BATCH):
            start, count, prm, q, p, e, s, first, low = batch(params, b)
            for j in range(count):
                q_out[start + j, 0] = q[j]
                p_out[start + j, 0] = p[j]
                e_out[start + j, 0] = e[j]
            for layer in range(depth):
                for j in range(count):
                    low[j] = np.inf
                advance(q, p, e, s, first, low, prm, prm[ALPHA_SA], count, False, 1, table)
                for j in range(count):
                    q_out[start + j, layer + 1] = q[j]
                    p_out[start + j, layer + 1] = p[j]
                    e_out[start + j, layer + 1] = e[j]
                    beta_c_out[start + j, layer] = low[j]
        return q_out, p_out, e_out, beta_c_out

    trajectories = njit(parallel=True, **jit)(specialised(trajectories, tag))

    def final_states(params, depth, table):
        """Final q, p, the first/smallest beta_c and the log2 scale per row, without storing trajectories."""
        n = params.shape[0]
        out = np.empty((n, 5))
        for b in prange((n + BATCH - 1) // BATCH):
            start, count, prm, q, p, e, s, first, low = batch(params, b)
            advance(q, p, e, s, first, low, prm, prm[ALPHA_SA], count, True, depth, table)
            for j in range(count):
                out[start + j, 0] = q[j]
                out[start + j, 1] = p[j]
                out[start + j, 2] = first[j]
                out[start + j, 3] = low[j]
                out[start + j, 4] = e[j]
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
            start, count, prm, q, p, e, s, first, low_bc = batch(params, b)
            low = np.zeros(BATCH)
            high = np.full(BATCH, alpha_max)
            trial = np.zeros(BATCH)
            advance(q, p, e, s, first, low_bc, prm, trial, count, True, depth, table)
            at_zero = np.empty(BATCH, dtype=np.bool_)
            for j in range(count):
                at_zero[j] = p[j] / q[j] <= threshold
            load(params, start, count, prm, q, p, e, s, first, low_bc)
            advance(q, p, e, s, first, low_bc, prm, high, count, True, depth, table)
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
                load(params, start, count, prm, q, p, e, s, first, low_bc)
                advance(q, p, e, s, first, low_bc, prm, trial, count, True, depth, table)
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
    return trajectories, final_states, min_alpha


def packed_table(seq_len):
    """The packed tables the finite-T kernels read, for ``seq_len`` (None -> the unused stand-in).

    Parameters
    ----------
    seq_len : int or None
        Sequence length T >= 2, or None for ``T -> infinity``.

    Returns
    -------
    ndarray
        ``participation_table(T, 2).packed`` (:func:`remprop.theory.participation_table`)
        followed by ``cross_overlap_table(T).packed`` (the cross-overlap of two attention
        rows, :func:`remprop.theory.cross_overlap_table`), or a read-only stand-in that
        asymptotic kernels never read.
    """
    if seq_len is None:
        return NO_TABLE
    return _finite_tables(int(seq_len))


@functools.lru_cache(maxsize=64)
def _finite_tables(seq_len):
    packed = np.concatenate([participation_table(seq_len, 2).packed, cross_overlap_table(seq_len).packed])
    packed.setflags(write=False)
    return packed


def bisection_steps(alpha_max, tol) -> int:
    """Halvings of ``[0, alpha_max]`` until the bracket is narrower than ``tol``:
    ``max(0, ceil(log2(alpha_max / tol)))``."""
    return max(0, int(np.ceil(np.log2(alpha_max / tol))))


def min_alpha_bisection(norm, attention, activation, norm_type, mlp, params, depth, threshold, alpha_max, tol,
                        seq_len=None):
    """Smallest alpha_sa with final rho <= threshold for each row of ``params``.

    Bisection on [0, alpha_max] until the bracket is narrower than ``tol``; see
    ``kernels_for(...).min_alpha_bisection``. Returns the upper end of the final bracket
    (an alpha known to satisfy the threshold), 0.0 or +inf. ``norm``, ``attention``,
    ``activation``, ``norm_type``, ``mlp``: the codes of
    :func:`~remprop.theory.kernels.architecture_codes` (``*arch.codes``);
    ``params``: rows packed as :data:`PARAMS`; ``seq_len`` (None or an integer >= 2)
    selects the finite-T attention maps.
    """
    iterations = bisection_steps(alpha_max, tol)
    kernels = kernels_for(norm, attention, activation, norm_type, mlp, seq_len is not None)
    return kernels.min_alpha_bisection(params, depth, threshold, alpha_max, iterations,
                                       packed_table(seq_len))
