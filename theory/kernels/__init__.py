"""numba depth kernels: a block tree's step swept over depth and whole parameter grids.

The step is composed from the tree
----------------------------------
A block is a tree of components (:mod:`remprop.theory.components`; an architecture's is
:meth:`Architecture.block <remprop.theory.Architecture.block>`). Every component has a kernel
face, :meth:`Component.kernel(build) <remprop.theory.components.Component.kernel>`, returning
a plain function ``step(q, p, row, table) -> (q', p', beta_c)`` that numba compiles:

* a layer's step evaluates its own ``*_core`` map (the same function its NumPy map calls) on
  the cell's scalars: :class:`~remprop.theory.components.LayerNorm` ``layernorm_core``,
  :class:`~remprop.theory.components.Dense` ``dense_core``, :class:`~remprop.theory.components.MLP`
  dense, the activation's moments, ``hidden_core``, dense; the attention computes ``Y2`` (and
  its critical beta ``beta_c``) from its input;
* a combinator's step calls its children's steps, obtained from ``build.child(component)``:
  :class:`~remprop.theory.components.Serial` the first layer, then the serial of the rest;
  :class:`~remprop.theory.components.Residual` the branch, its output times the stream's carried
  scale (``build.stream_scale``), then the skip; :class:`~remprop.theory.components.Parallel` the
  sum of its branches likewise. ``beta_c`` is ``inf`` without attention and combinators keep the
  smallest (:func:`~remprop.theory.components.base.least`);
* parameters are read through ``build.parameter(x)``, a reader ``read(row) -> float``: a
  :class:`~remprop.theory.components.Column` placeholder reads its slot of the cell's row
  (:data:`COLUMNS`), a number is a compile-time constant. ``row`` is a tuple of floats (a value:
  no reference counts in the hot loop), the packed columns then the carried scale;
* ``table`` is the packed finite-T table; only an attention at finite T reads it
  (``build.reads_table()``: its kernels then require the table). The sweeps hand the tree a
  ``remprop.theory._jit.borrowed`` view of it, which costs no reference counts however
  many steps pass it on.

Every step is compiled once by numba (``register_jitable``) and marked ``forceinline``: LLVM
then inlines the whole tree into the sweeps' loop over a batch of cells, as if the block were
written out by hand (the interleaved cells hide the latency of each cell's chain of divisions
and square roots). A batch's buffers sit on the sweep's stack, where LLVM knows they alias
nothing, so it vectorises the loop over the cells, the finite-T table lookups included
(``_sweeps``, "Batch buffers on the stack"). Inlining at numba's level instead (``inline="always"`` overloads, typed once
per level of the tree) took two to three times as long to compile; plain compiled calls
(no inlining) ran 1.5 times slower at finite T.

``_tree.KernelBuilder`` is the ``build`` object: it names each step after the
component's :meth:`~remprop.theory.components.Component.kernel_key` and registers it. No table of
components exists anywhere: a component defined in any module, with a kernel face, reaches the
kernels through the tree that holds it.

The carried scale of deep pre-LN and no-LN streams is a property of the tree too
(:attr:`~remprop.theory.components.Component.scale_free`,
:attr:`~remprop.theory.components.Component.carries_scale`,
:meth:`~remprop.theory.components.Component.rescaled_parameters`; ``_sweeps``, "The
carried scale").

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
* :func:`kernels_for` -- the compiled :class:`Kernels` (trajectories, final states, minimum-alpha
  bisection) of a tree, cached by its kernel key;
* :func:`propagate_tree` -- a tree of numbers iterated over depth from ``(q0, p0)``;
* :func:`packed_table` -- the finite-T participation table the kernels read;
* :func:`min_alpha_bisection` -- the smallest ``alpha_sa`` with final cosine below a
  threshold, per packed row; :func:`bisection_steps` -- its number of halvings.

tests/test_theory_kernels.py (``test_kernels_follow_the_composed_block`` and the tests after
it) check the kernels against the tree iterated in NumPy for every structural choice, to 1e-12.

Caching
-------
numba's on-disk cache keys a compiled sweep on its source file, its qualname and the pickled
contents of its closure cells. Those cells hold only integers, floats, booleans and functions
that pickle deterministically: module-level ``register_jitable`` functions (the ``*_core`` maps)
by reference, the nested steps and readers by value (their code and their own cells). A
dispatcher in a closure cell would pickle with a random uuid: the cache would miss, and grow,
on every run. Every step and sweep gets a qualname unique to its specialisation
(``remprop.theory._jit.specialised``, with a digest of the kernel key, which holds a digest of
the component's module source): otherwise two trees' kernels compiled in different processes
can share symbol names and break when both are loaded from the cache into one process. Kernels
of user-registered activations call a function object created at run time and are compiled per
process, without the disk cache.
"""
from ._sweeps import (COLUMNS, PARAMS, SCALE_EXPONENT, Kernels, bisection_steps, kernels_for, min_alpha_bisection,
                      packed_table, propagate_tree)

__all__ = ["PARAMS", "COLUMNS", "SCALE_EXPONENT", "Kernels", "kernels_for", "packed_table", "min_alpha_bisection",
           "bisection_steps", "propagate_tree"]
