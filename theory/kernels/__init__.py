"""numba depth kernels: a block tree lowered to a program, run over depth and whole parameter grids by
one compiled interpreter.

The tree is lowered, the engine is fixed
----------------------------------------
A block is a tree of components (:mod:`remprop.theory.components`; an architecture's is
:meth:`Architecture.block <remprop.theory.Architecture.block>`). Every component has a kernel
face, :meth:`Component.kernel(tape) <remprop.theory.components.Component.kernel>`, which appends
its instructions to a tape (``_tape.Tape``):

* a layer emits one instruction naming the map it is: ``tape.norm(kind)`` (LayerNorm's or
  RMSNorm's core), ``tape.dense(sigma_w2, sigma_b2)``, ``tape.mlp(...)`` (dense, the activation's
  moments by its code, the own or gated hidden moments, dense), ``tape.attention(...)`` (the REM's
  ``Y2`` and critical beta, asymptotic or from the finite-T table; RoPE and QK-norm as flags);
* a combinator lowers its children (``tape.child``): :class:`~remprop.theory.components.Serial`
  its layers in turn, :class:`~remprop.theory.components.Residual` ``push`` (save the input), the
  branch, ``skip(alpha)`` (add it back, times the stream's carried scale),
  :class:`~remprop.theory.components.Parallel` its branches on one saved input (``swap_in``,
  ``add_pop``);
* parameters are :class:`~remprop.theory.components.Column` placeholders (read from the cell's
  packed row, :data:`COLUMNS`) or numbers (constants of the program).

The program (``_tape.Program``: op codes, operand slots, constants) is data. ``_engine`` holds
the three sweeps that run any program -- whole trajectories, final states, the minimum-alpha
bisection -- compiled once (numba, ``cache=True``: once per install) and shared by every
architecture: each instruction is a loop over a batch of cells calling the core of the component
that emitted it, and batches run in parallel (``prange``). A new component that composes existing
maps (a scaled identity is ``tape.dense(c**2, 0)``) needs no new code; a new map is one
instruction: a ``Tape`` method and its branch in ``_engine``. A tree whose MLP uses a
user-registered activation runs in the same sweeps: the activation's moments are compiled on their
own, in the process that registered it, and passed to them as a first-class function.

The carried scale of deep pre-LN and no-LN streams is a property of the tree
(:attr:`~remprop.theory.components.Component.scale_free`,
:attr:`~remprop.theory.components.Component.carries_scale`,
:meth:`~remprop.theory.components.Component.rescaled_parameters`; ``_sweeps``, "The
carried scale"): the program's mode, and each operand's degree.

Public surface
--------------
* :data:`PARAMS` -- the layout of one packed row: :data:`COLUMNS` (``beta, sigma_w2, sigma_b2,
  sigma_v2, alpha_sa, alpha_mlp, sigma_o2, sigma_w2_out, mean_rope_correlation, qk_norm_dim``;
  ``beta`` is the heads' effective beta, with QK-norm the reduced-scale factor) then the input
  state ``(q0, p0) 2**log2_scale``; :func:`remprop.theory.propagation.pack_parameters` builds
  the rows of an architecture and :func:`remprop.theory.propagation.kernel_tree` its tree with
  a :class:`~remprop.theory.components.Column` per parameter;
* :data:`SCALE_EXPONENT` -- a cell's q is kept in ``[2**-SCALE_EXPONENT, 2**SCALE_EXPONENT]``
  and the rest moves into its exponent (docs/theory.md section 5, "The carried scale");
* :func:`kernels_for` -- the :class:`Kernels` (trajectories, final states, minimum-alpha
  bisection) of a tree: its program bound to the engine;
* :func:`propagate_tree` -- a tree of numbers iterated over depth from ``(q0, p0)``;
* :func:`packed_table` -- the finite-T participation table the kernels read;
* :func:`sweeps_to_compile` -- which of the engine's sweeps (:data:`ENGINE_SWEEPS`) the next call
  would compile (neither compiled in this process nor on disk), and :func:`sweeps_to_load` those it
  would read from disk, for estimates that count compiling and loading;
* :func:`min_alpha_bisection` -- the smallest ``alpha_sa`` with final cosine below a
  threshold, per packed row; :func:`bisection_steps` -- its number of halvings.

tests/test_theory_kernels.py (``test_kernels_follow_the_composed_block`` and the tests after
it) check the kernels against the tree iterated in NumPy for every structural choice, to 1e-12;
tests/test_kernel_tree.py that one engine serves every architecture, with the same disk-cache
keys in every process.
"""
from remprop.cache import is_marked_compiled

from .._jit import CACHE
from ._engine import BATCH
from ._sweeps import (COLUMNS, PARAMS, SCALE_EXPONENT, Kernels, bisection_steps, compiled_name, kernels_for,
                      min_alpha_bisection, packed_table, propagate_tree)

__all__ = ["BATCH", "PARAMS", "COLUMNS", "SCALE_EXPONENT", "Kernels", "kernels_for", "packed_table", "min_alpha_bisection",
           "bisection_steps", "propagate_tree", "ENGINE_SWEEPS", "sweeps_to_compile", "sweeps_to_load",
           "needs_compiling"]

#: The engine's three sweeps, in the order of ``_engine.ENGINE``.
ENGINE_SWEEPS = ("trajectories", "final_states", "min_alpha")


def sweeps_to_compile(names=ENGINE_SWEEPS) -> tuple:
    """The sweeps among ``names`` (of :data:`ENGINE_SWEEPS`) whose next call compiles: neither compiled
    in this process nor kept for this machine in numba's disk cache of today's sources (a fresh
    install, or sources edited since; :func:`needs_compiling`). Nothing is loaded or compiled.

    Parameters
    ----------
    names : sequence of str

    Returns
    -------
    tuple of str
    """
    return tuple(name for name, sweep in _named_sweeps(names) if needs_compiling(sweep))


def sweeps_to_load(names=ENGINE_SWEEPS) -> tuple:
    """The sweeps among ``names`` that this process has not loaded yet but numba's disk cache holds: their
    first call reads them from disk (about 1.5-2 s each on two shared cores), without compiling."""
    return tuple(name for name, sweep in _named_sweeps(names)
                 if getattr(sweep, "signatures", True) == [] and not needs_compiling(sweep))


def _named_sweeps(names):
    from ._engine import ENGINE

    sweeps = dict(zip(ENGINE_SWEEPS, ENGINE))
    unknown = [name for name in names if name not in sweeps]
    if unknown:
        raise ValueError(f"names must be among {', '.join(ENGINE_SWEEPS)}, got {unknown[0]!r}")
    return [(name, sweeps[name]) for name in names]


def needs_compiling(dispatcher) -> bool:
    """Whether the first call of ``dispatcher`` (one of the engine's sweeps, :data:`ENGINE_SWEEPS`) in this
    process will compile: nothing compiled for it in this process and, with a disk cache, no record
    that it is kept there for this machine and today's sources.

    The record is remprop's own (:func:`remprop.cache.mark_compiled`, a marker in the cache folder named
    after the theory's sources), written after the sweep's first successful call in any process; numba's
    private cache index is not read. A cache whose markers are missing (numba's files from before them)
    counts as empty until its next call. Kept here, in a module without a numba import statement: the
    sources of those with one name the folder of the engine's disk cache (``theory._jit.source_digest``),
    and an edit of them compiles the engine again.
    """
    if not hasattr(dispatcher, "signatures") or dispatcher.signatures:
        return False  # compiled in this process, or plain Python (numba's JIT disabled): nothing to compile
    return not (CACHE and is_marked_compiled(compiled_name(dispatcher)))
