"""Sweeps of a tree's block step over depth and parameter grids, compiled per tree structure.

Each row of a parameter grid is packed as :data:`PARAMS`; the tree's structure (which
components, their non-numeric choices, the activation, finite T) is compile-time: the step
is composed from the tree (``_tree``) and :func:`kernels_for` compiles the sweeps around
it. Cells run in batches of :data:`BATCH`; ranges of batches run in parallel on
:func:`numba.get_num_threads` threads (:func:`run_batches`; the compiled sweeps are serial and
release the GIL: a serial kernel compiles in about half the time of a ``prange`` one, and a
call compiles only the sweep it runs).

The carried scale
-----------------
Pre-LN and no-LN residual streams grow (or shrink) geometrically with depth, like
``alpha**(2L)``, and would leave float64 after a few thousand layers. Each cell therefore
carries its state as ``(q, p) * 2**e``: when ``q`` leaves ``[2**-SCALE_EXPONENT,
2**SCALE_EXPONENT]`` its exponent moves into ``e``. The maps are exactly homogeneous
where this is needed (docs/theory.md section 5), so the scaled state advances by the same
block step, ``s = 2**-e`` (the last slot of the step's row):

* pre-LN (the tree's ``carries_scale``: every skip adds a branch that starts with a norm and
  so does not grow with the stream, :attr:`Component.scale_free
  <remprop.theory.components.Component.scale_free>`): each skip connection multiplies its
  branch's output by ``s`` (``build.stream_scale``, read by
  :class:`~remprop.theory.components.Residual` and :class:`~remprop.theory.components.Parallel`),
  branch norms included.
* no LN, homogeneous maps (the tree's ``rescaled_parameters()``: ReLU or linear activation,
  dense MLP; :attr:`ActivationSpec.homogeneous <remprop.theory.activations.ActivationSpec>`):
  every map is homogeneous of degree one up to the biases and the REM's reduced scale
  ``beta sqrt(q (q - p))``, so the step reads ``beta / s`` and ``s sigma_b2`` and the sweeps
  multiply the critical beta by ``s``. A gated MLP is a product of two projections (degree two),
  so no-LN stacks with one are not rescaled. With QK-norm the REM's reduced scale does not
  depend on the stream's scale: ``beta`` and the critical beta are not rescaled. A no-LN
  stream with branch norms grows only linearly with depth and is not rescaled.
* post-LN needs none (LayerNorm sets ``q = 1`` twice per block); no LN with any other
  activation is not rescaled (its moments are not homogeneous) and is reported as leaving
  float64 when it does. Within a post-LN block a skip is read only up to scale (a norm
  follows it: ``build.output_scale_free``), so above
  :data:`~remprop.theory.components.residual.SCALED_SKIP_ABOVE` it returns its state divided by
  ``alpha**2``, finite where ``alpha**2`` would overflow (``alpha`` > 1.3e154): the norm's
  output, the skip-dominated limit, is the same.

With ``e = 0`` the parameters are multiplied by exactly 1, and ``s`` is a power of two, so
results are bit-identical to a kernel without a scale; the cosine ``p / q`` needs no scale at all.

Batch buffers on the stack
--------------------------
A batch's state (q, p, the exponent and scale, the critical betas, the packed rows) lives in
arrays on the stack of the compiled sweep (``remprop.theory._jit.stack_empty``), not on the
heap. The finite-T steps read the table at positions computed from each cell's state; with heap
buffers LLVM could not rule out that a store into ``q`` or ``p`` changes the table, and kept
the loop over a batch's cells scalar, while it vectorised the asymptotic steps (four cells
per AVX2 instruction). A stack buffer aliases nothing, so the finite-T loop vectorises too:
the 500 x 500 x 60 finite-T diagram went from 2.9x the asymptotic one to 1.5-1.7x
(benchmarks/bench_finite_t.py, two threads, A/B in one session). The table lookups are
branch-free for the same reason (:func:`~remprop.theory.rem.table_position`), and ``advance``
is inlined into each sweep (the bisection's passes run in one loop: one call site), so that
what LLVM knows about the buffers reaches the loop. Results are bit-identical.
"""
from __future__ import annotations

import functools
import itertools
import math
import threading
from typing import Callable, NamedTuple

import numpy as np
import numba
from numba import njit
from numba.extending import register_jitable

from .._jit import JIT_OPTIONS, borrowed, inline_jitable, specialised, stack_empty
from ..components.base import Component
from ..rem import cross_overlap_table, participation_table
from ._tree import COLUMNS, NO_SCALE, PARAMS, SCALE_INPUTS, KernelBuilder, digest, stream_scaling

N_PARAMS = len(PARAMS)
ALPHA_SA, ALPHA_MLP, QK_NORM_DIM, Q0, P0, LOG2_SCALE = (PARAMS.index(name) for name in
                                                        ("alpha_sa", "alpha_mlp", "qk_norm_dim", "q0", "p0",
                                                         "log2_scale"))
#: Stand-in table for asymptotic kernels (never read).
NO_TABLE = np.zeros(8)
NO_TABLE.setflags(write=False)

#: Cells advanced together by one thread. Interleaving independent cells hides the
#: latency of each cell's serial chain of divisions and square roots (and lets LLVM
#: use SIMD where the activation allows): about 4x over one cell at a time.
BATCH = 32
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


@inline_jitable
def cell_row(prm, j, alpha_sa, scale):
    """The step's row of cell ``j`` of a batch: its :data:`COLUMNS` (``alpha_sa`` given apart, the
    bisection's trial value), then the carried scale ``s``. A tuple: passed by value, with no
    reference counts in the hot loop."""
    return (prm[0, j], prm[1, j], prm[2, j], prm[3, j], alpha_sa, prm[5, j], prm[6, j], prm[7, j], prm[8, j],
            prm[9, j], scale)


assert len(COLUMNS) == 10 and ALPHA_SA == 4, "cell_row spells out the columns"


class Kernels(NamedTuple):
    """The compiled sweeps of one tree structure (:func:`kernels_for`).

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
    finite : bool
        Whether the tree's attention reads the finite-T table.
    columns : tuple of str
        The :data:`COLUMNS` the tree reads (the others are ignored).
    cacheable : bool
        Whether the compiled code is kept on disk (False with a user-registered activation).
    """

    trajectories: Callable
    final_states: Callable
    min_alpha_bisection: Callable
    finite: bool = False
    columns: tuple = ()
    cacheable: bool = True


#: Batches per unit of work handed to a thread (several units per thread balance cells of
#: unequal cost, e.g. bisections that stop early); a call with fewer runs on the caller's thread.
_UNITS_PER_THREAD = 4


def _contiguous(params):
    """The packed rows as a C-contiguous float64 array: one type signature per sweep."""
    return np.ascontiguousarray(params, dtype=np.float64)


def run_batches(n, sweep):
    """Run ``sweep(b0, b1)`` over the batches ``0 .. ceil(n / BATCH)`` on :func:`numba.get_num_threads`
    threads (the compiled sweeps release the GIL).

    The caller's thread takes part; the other threads are daemons, so that an interrupt, which
    reaches the caller once its own unit returns, is not held up by theirs. Units of
    ``ceil(batches / (4 threads))`` batches are handed out in order from a shared counter.
    """
    batches = (n + BATCH - 1) // BATCH
    threads = max(1, min(numba.get_num_threads(), batches))
    if threads == 1:
        sweep(0, batches)
        return
    size = max(1, -(-batches // (_UNITS_PER_THREAD * threads)))
    units = itertools.count()
    errors = []

    def work():
        try:
            while True:
                b0 = next(units) * size
                if b0 >= batches:
                    return
                sweep(b0, min(b0 + size, batches))
        except BaseException as error:  # re-raised on the caller's thread
            errors.append(error)

    helpers = [threading.Thread(target=work, daemon=True) for _ in range(threads - 1)]
    for helper in helpers:
        helper.start()
    work()
    for helper in helpers:
        helper.join()
    if errors:
        raise errors[0]


#: Kernels by the tree's kernel key (an unbounded cache, like ``functools.lru_cache(None)``).
_KERNELS: dict = {}


def kernels_for(tree) -> Kernels:
    """The compiled sweeps of a block tree, cached by its structure.

    Parameters
    ----------
    tree : remprop.theory.components.Component
        One block, any tree of components with a kernel face
        (:meth:`~remprop.theory.components.Component.kernel`): its parameters are
        :class:`~remprop.theory.components.Column` placeholders, read from each packed row, or
        numbers, compiled in as constants. :func:`remprop.theory.propagation.kernel_tree` builds
        an architecture's.

    Returns
    -------
    Kernels
        Sweeps over rows packed as :data:`PARAMS`, compiled on first use. Two trees with the same
        :meth:`~remprop.theory.components.Component.kernel_key` (the same structure, columns and
        constants; only whether T is finite, not T) share them. Compiled code is cached on disk
        (``__pycache__``) unless the tree has a user-registered activation.
    """
    if not isinstance(tree, Component):
        raise ValueError(f"tree must be a component (remprop.theory.components), got {tree!r}")
    key = tree.kernel_key()
    if key not in _KERNELS:
        _KERNELS[key] = _kernels(tree, key)
    return _KERNELS[key]


def _kernels(tree, key):
    mode, rescaled = stream_scaling(tree)
    step = KernelBuilder(mode, rescaled).build(tree)
    finite, columns = step.reads_table, tuple(name for name in COLUMNS if name in step.columns)
    jit = dict(cache=step.cacheable, **JIT_OPTIONS)
    sweeps = _compile_sweeps(step.function, mode, mode == SCALE_INPUTS and "beta" in rescaled, jit,
                             f"{type(tree).__name__}_{digest((key, mode))}")

    def checked(params, table):
        if params.ndim != 2 or params.shape[1] != len(PARAMS):
            raise ValueError(f"params must have shape (n, {len(PARAMS)}) (remprop.theory.kernels.PARAMS), "
                             f"got {params.shape}")
        if "qk_norm_dim" in columns and np.any(~(params[:, QK_NORM_DIM] >= 1.0)):
            raise ValueError("params: the qk_norm_dim column must hold the QK-norm width (>= 1) in every row")
        if table is None:
            if finite:
                raise ValueError("table must be given to finite-T kernels "
                                 "(remprop.theory.kernels.packed_table(T))")
            return NO_TABLE
        return np.ascontiguousarray(table, dtype=np.float64)

    def run_trajectories(params, depth, table=None):
        params, table, depth = _contiguous(params), checked(params, table), int(depth)
        n = params.shape[0]
        q, p, e, beta_c = np.empty((n, depth + 1)), np.empty((n, depth + 1)), np.empty((n, depth + 1)), \
            np.empty((n, depth))
        run_batches(n, lambda b0, b1: sweeps[0](params, depth, table, b0, b1, q, p, e, beta_c))
        return q, p, e, beta_c

    def run_final_states(params, depth, table=None):
        params, table, depth = _contiguous(params), checked(params, table), int(depth)
        out = np.empty((params.shape[0], 5))
        run_batches(params.shape[0], lambda b0, b1: sweeps[1](params, depth, table, b0, b1, out))
        return out

    def run_min_alpha_bisection(params, depth, threshold, alpha_max, iterations, table=None):
        params, table, depth = _contiguous(params), checked(params, table), int(depth)
        threshold, alpha_max, iterations = float(threshold), float(alpha_max), int(iterations)
        out = np.empty(params.shape[0])
        run_batches(params.shape[0], lambda b0, b1: sweeps[2](params, depth, threshold, alpha_max, iterations,
                                                               table, b0, b1, out))
        return out

    run_trajectories.__doc__, run_final_states.__doc__, run_min_alpha_bisection.__doc__ = (
        function.__doc__ for function in sweeps)
    return Kernels(run_trajectories, run_final_states, run_min_alpha_bisection, finite, columns, step.cacheable)


@register_jitable
def load_batch(params, start, count, prm, q, p, e, s, beta_c_first, beta_c_min):
    """(Re)load the rows ``start:start + count`` into a batch's buffers.

    This and :func:`batch_range` do not depend on the block: compiled once per process for
    every tree (and cached), whereas as closures of :func:`_compile_sweeps` each tree compiled
    its own copy (about 0.5 of the 2.5 s a further tree's first sweep took to compile)."""
    for j in range(count):
        for k in range(len(PARAMS)):
            prm[k, j] = params[start + j, k]
        q[j] = params[start + j, Q0]
        p[j] = params[start + j, P0]
        e[j] = params[start + j, LOG2_SCALE]
        s[j] = scale_factor(e[j])
        beta_c_first[j] = np.inf
        beta_c_min[j] = np.inf


@register_jitable(inline="always")
def batch_state():
    """A batch's buffers ``(prm, q, p, e, s, beta_c_first, beta_c_min)``, uninitialised, on the stack
    of the sweep that calls this (numba inlines it there, so the arrays live in that frame; module
    notes, "Batch buffers on the stack")."""
    return (stack_empty(N_PARAMS, BATCH), stack_empty(BATCH, 0), stack_empty(BATCH, 0), stack_empty(BATCH, 0),
            stack_empty(BATCH, 0), stack_empty(BATCH, 0), stack_empty(BATCH, 0))


@register_jitable
def batch_range(params, b):
    """``(start, count)``: the rows of batch ``b``."""
    start = b * BATCH
    return start, min(params.shape[0], start + BATCH) - start


def _compile_sweeps(step, mode, rescale_beta_c, jit, tag):
    """The compiled ``(trajectories, final_states, min_alpha)`` around one block ``step``
    (``step(q, p, row, table) -> (q, p, beta_c)``), of scaling ``mode`` (``rescale_beta_c``: the
    critical beta times ``s``, no-LN without QK-norm) and tag. Each sweep hands the step a
    ``remprop.theory._jit.borrowed`` view of the table: passed down the tree once per cell and
    layer, it costs no reference counts."""
    def advance(q, p, e, s, beta_c_first, beta_c_min, prm, alpha_sa, count, first_layer, depth, table):
        """Advance ``count`` cells of a batch by ``depth`` blocks, in place (state ``(q, p) 2**e``,
        ``s = 2**-e``). Twelve arguments: the batch's buffers, passed apart (numba hot loop)."""
        every = 3  # renormalise after blocks 4k - 1 (and the last), or after every block (fast growth)
        for j in range(count):
            if alpha_sa[j] > _FAST_GROWTH or prm[ALPHA_MLP, j] > _FAST_GROWTH:
                every = 0
        for layer in range(depth):
            for j in range(count):
                q_new, p_new, beta_c = step(q[j], p[j], cell_row(prm, j, alpha_sa[j], s[j]), table)
                if rescale_beta_c and beta_c < np.inf:  # inf (collapsed tokens) stays inf
                    beta_c = beta_c * s[j]
                q[j] = q_new
                p[j] = p_new
                if first_layer and layer == 0:
                    beta_c_first[j] = beta_c
                beta_c_min[j] = min(beta_c_min[j], beta_c)
            if mode != NO_SCALE and ((layer & every) == every or layer == depth - 1):
                for j in range(count):
                    if (q[j] > _BIG or q[j] < _SMALL) and q[j] > 0.0 and q[j] < np.inf:
                        mantissa, exponent = math.frexp(q[j])
                        q[j] = mantissa
                        p[j] = math.ldexp(p[j], -exponent)
                        e[j] += exponent
                        s[j] = scale_factor(e[j])

    advance = inline_jitable(specialised(advance, tag))

    def trajectories(params, depth, table, b0, b1, q_out, p_out, e_out, beta_c_out):
        """Whole trajectories of batches ``b0:b1``, into q, p, their log2 scale (n, depth + 1) and beta_c (n, depth)."""
        table = borrowed(table)
        prm, q, p, e, s, first, low = batch_state()
        for b in range(b0, b1):
            start, count = batch_range(params, b)
            load_batch(params, start, count, prm, q, p, e, s, first, low)
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

    trajectories = njit(**jit)(specialised(trajectories, tag))

    def final_states(params, depth, table, b0, b1, out):
        """Final q, p, the first/smallest beta_c and the log2 scale of the rows of batches ``b0:b1``, into
        ``out`` (n, 5), without storing trajectories."""
        table = borrowed(table)
        prm, q, p, e, s, first, low = batch_state()
        for b in range(b0, b1):
            start, count = batch_range(params, b)
            load_batch(params, start, count, prm, q, p, e, s, first, low)
            advance(q, p, e, s, first, low, prm, prm[ALPHA_SA], count, True, depth, table)
            for j in range(count):
                out[start + j, 0] = q[j]
                out[start + j, 1] = p[j]
                out[start + j, 2] = first[j]
                out[start + j, 3] = low[j]
                out[start + j, 4] = e[j]

    final_states = njit(**jit)(specialised(final_states, tag))

    def min_alpha(params, depth, threshold, alpha_max, iterations, table, b0, b1, out):
        """Smallest alpha_sa with final rho <= threshold, per row of batches ``b0:b1`` (into ``out``), by bisection.

        Assumes the final cosine does not increase with alpha_sa. Returns 0 when
        alpha_sa = 0 already satisfies the threshold and +inf when alpha_max does not.
        The cells of a batch bisect in lock-step for a fixed number of ``iterations``
        (bracket width ``alpha_max / 2**iterations``).
        """
        table = borrowed(table)
        prm, q, p, e, s, first, low_bc = batch_state()
        low, high, trial, at_zero = (stack_empty(BATCH, 0), stack_empty(BATCH, 0), stack_empty(BATCH, 0),
                                     stack_empty(BATCH, 0))
        for b in range(b0, b1):
            start, count = batch_range(params, b)
            # pass 0 at alpha_sa = 0, pass 1 at alpha_max, then the bisection's midpoints: one call
            # site of the inlined block (one copy of the tree in the compiled sweep)
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
                load_batch(params, start, count, prm, q, p, e, s, first, low_bc)
                advance(q, p, e, s, first, low_bc, prm, trial, count, True, depth, table)
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

    min_alpha = njit(**jit)(specialised(min_alpha, tag))
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


def min_alpha_bisection(tree, params, depth, threshold, alpha_max, tol, seq_len=None):
    """Smallest alpha_sa with final rho <= threshold for each row of ``params``.

    Bisection on [0, alpha_max] until the bracket is narrower than ``tol``; see
    ``kernels_for(tree).min_alpha_bisection``. Returns the upper end of the final bracket
    (an alpha known to satisfy the threshold), 0.0 or +inf. ``tree``: the block
    (:func:`kernels_for`; :func:`remprop.theory.propagation.kernel_tree` of an architecture);
    ``params``: rows packed as :data:`PARAMS`; ``seq_len`` (None or an integer >= 2): the
    table of a tree whose attention is at finite T.
    """
    iterations = bisection_steps(alpha_max, tol)
    return kernels_for(tree).min_alpha_bisection(params, depth, threshold, alpha_max, iterations,
                                                 packed_table(seq_len))


def propagate_tree(tree, depth, q0=1.0, p0=0.0, seq_len=None):
    """Iterate a block tree of numbers ``depth`` times from ``(q0, p0)`` in the compiled kernels.

    The kernels' counterpart of applying ``tree`` layer by layer (``q, p = tree(q, p)``), for any
    tree of components with a kernel face, e.g. one holding a component defined outside
    :mod:`remprop.theory.components`.

    Parameters
    ----------
    tree : remprop.theory.components.Component
        A block whose parameters are numbers (compile-time constants; no
        :class:`~remprop.theory.components.Column`).
    depth : int
        Number of blocks, >= 0.
    q0, p0 : array_like
        Input state, broadcast together.
    seq_len : int or None
        The sequence length of the tree's finite-T attention (its table), None as T -> infinity.

    Returns
    -------
    (q, p, beta_c) : tuple of ndarray
        ``q`` and ``p`` of shape ``broadcast(q0, p0) + (depth + 1,)`` (index 0 the input; ``inf``
        or 0 where a stream leaves float64), the critical beta of every layer's attention,
        shape ``(..., depth)`` (``inf`` without attention).
    """
    kernels = kernels_for(tree)
    if kernels.columns:
        raise ValueError(f"tree reads the columns {kernels.columns} of packed rows: run "
                         "kernels_for(tree).trajectories on rows packed as PARAMS")
    if kernels.finite and seq_len is None:
        raise ValueError("seq_len: the tree's attention is at finite T, give its sequence length")
    q0, p0 = np.broadcast_arrays(np.asarray(q0, dtype=np.float64), np.asarray(p0, dtype=np.float64))
    params = np.zeros((q0.size, len(PARAMS)))
    params[:, Q0], params[:, P0] = q0.ravel(), p0.ravel()
    q, p, exponent, beta_c = kernels.trajectories(params, int(depth), packed_table(seq_len))
    with np.errstate(over="ignore", under="ignore"):
        scale = np.exp2(exponent)
        q, p = q * scale, p * scale
    return (q.reshape(q0.shape + (-1,)), p.reshape(q0.shape + (-1,)), beta_c.reshape(q0.shape + (-1,)))
