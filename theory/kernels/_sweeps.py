"""Sweeps of a tree's block over depth and parameter grids: the tree lowered once, one interpreter for all.

Each row of a parameter grid is packed as :data:`PARAMS`. :func:`kernels_for` lowers the tree to
a program (``_tape``: op codes, operand slots, constants) and returns the sweeps of the one
compiled interpreter (``_engine``) bound to it: no tree compiles code of its own. Cells run in
batches of ``_engine.BATCH``; batches run in parallel on :func:`numba.get_num_threads` threads
(``numba.prange`` inside the compiled sweeps).

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
  branch's output by ``s`` (the skip instruction, emitted by
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
  follows it: ``tape.output_scale_free``), so above
  :data:`~remprop.theory.components.residual.SCALED_SKIP_ABOVE` it returns its state divided by
  ``alpha**2``, finite where ``alpha**2`` would overflow (``alpha`` > 1.3e154): the norm's
  output, the skip-dominated limit, is the same.

With ``e = 0`` the parameters are multiplied by exactly 1, and ``s`` is a power of two, so
results are bit-identical to a kernel without a scale; the cosine ``p / q`` needs no scale at all.

"""
from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import numpy as np

from remprop.cache import mark_compiled

from .._jit import CACHE
from ..components.base import Component
from ..rem import cross_overlap_table, participation_table
from ..activations.registry import compiled_user_function
from ._engine import ENGINE, SCALE_EXPONENT
from ._tape import COLUMNS, PARAMS, lower

QK_NORM_DIM, Q0, P0 = (PARAMS.index(name) for name in ("qk_norm_dim", "q0", "p0"))
#: Stand-in table for asymptotic kernels (never read).
NO_TABLE = np.zeros(8)
NO_TABLE.setflags(write=False)


class Kernels(NamedTuple):
    """The sweeps of one tree (:func:`kernels_for`).

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
        Whether the interpreter that runs the tree is the one kept on disk: always True (a tree
        with a user-registered activation passes its moments, compiled on their own, to the same
        sweeps).
    program : remprop.theory.kernels._tape.Program
        The lowered tree.
    """

    trajectories: Callable
    final_states: Callable
    min_alpha_bisection: Callable
    finite: bool = False
    columns: tuple = ()
    cacheable: bool = True
    program: object = None


def compiled_name(dispatcher) -> str:
    """The name under which ``dispatcher`` (a compiled function) is recorded as kept on disk
    (:func:`remprop.cache.mark_compiled`): its module and qualified name."""
    function = getattr(dispatcher, "py_func", dispatcher)
    return f"{function.__module__}.{function.__qualname__}"


#: The sweeps that ran in this process (their disk-cache record written).
_RAN: set = set()


def _ran(sweep):
    """After a sweep's call returned: its code is compiled (or loaded) and, with a disk cache, kept on disk by
    numba; the first time in a process, record that (the marker :func:`needs_compiling
    <remprop.theory.kernels.needs_compiling>` reads)."""
    if sweep not in _RAN:
        _RAN.add(sweep)
        if CACHE:
            mark_compiled(compiled_name(sweep))


def _contiguous(params):
    """The packed rows as a C-contiguous float64 array: one type signature per sweep."""
    return np.ascontiguousarray(params, dtype=np.float64)


#: Kernels by the tree's kernel key (lowering is cheap; the cache keeps one Kernels object per structure).
_KERNELS: dict = {}


def kernels_for(tree) -> Kernels:
    """The sweeps of a block tree: the tree lowered to a program, run by the compiled interpreter.

    Parameters
    ----------
    tree : remprop.theory.components.Component
        One block, any tree of components with a kernel face
        (:meth:`~remprop.theory.components.Component.kernel`): its parameters are
        :class:`~remprop.theory.components.Column` placeholders, read from each packed row, or
        numbers, constants of the program. :func:`remprop.theory.propagation.kernel_tree` builds
        an architecture's.

    Returns
    -------
    Kernels
        Sweeps over rows packed as :data:`PARAMS`. Two trees with the same
        :meth:`~remprop.theory.components.Component.kernel_key` (the same structure, columns and
        constants; only whether T is finite, not T) share them. The interpreter is compiled once and
        kept on disk, for every tree (a user-registered activation's moments are compiled on their own).
    """
    if not isinstance(tree, Component):
        raise ValueError(f"tree must be a component (remprop.theory.components), got {tree!r}")
    key = tree.kernel_key()
    if key not in _KERNELS:
        _KERNELS[key] = _kernels(lower(tree))
    return _KERNELS[key]


def _kernels(program):
    trajectories, final_states, min_alpha = ENGINE
    finite, columns = program.finite, program.columns
    head = (program.ops, program.constants, program.mode, program.rescale_beta_c, program.stack,  # one argument
            compiled_user_function(program.user_activation, "moments"))

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
        params = _contiguous(params)
        table, depth = checked(params, table), int(depth)
        n = params.shape[0]
        q, p, e, beta_c = np.empty((n, depth + 1)), np.empty((n, depth + 1)), np.empty((n, depth + 1)), \
            np.empty((n, depth))
        trajectories(head, params, depth, table, (q, p, e, beta_c))
        _ran(trajectories)
        return q, p, e, beta_c

    def run_final_states(params, depth, table=None):
        params = _contiguous(params)
        table, depth = checked(params, table), int(depth)
        out = np.empty((params.shape[0], 5))
        final_states(head, params, depth, table, out)
        _ran(final_states)
        return out

    def run_min_alpha_bisection(params, depth, threshold, alpha_max, iterations, table=None):
        params = _contiguous(params)
        table, depth = checked(params, table), int(depth)
        out = np.empty(params.shape[0])
        min_alpha(head, params, depth, (float(threshold), float(alpha_max), int(iterations)), table, out)
        _ran(min_alpha)
        return out

    run_trajectories.__doc__, run_final_states.__doc__, run_min_alpha_bisection.__doc__ = (
        function.__doc__ for function in (trajectories, final_states, min_alpha))
    return Kernels(run_trajectories, run_final_states, run_min_alpha_bisection, finite, columns,
                   True, program)


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
