"""numba depth kernels: the block update swept over depth and whole parameter grids.

The public surface for code outside this package (:mod:`remprop.theory.propagation`,
the diagrams, the benchmarks):

* :data:`PARAMS` -- the layout of one packed parameter row,
  ``(beta, sigma_w2, sigma_b2, sigma_v2, alpha_sa, alpha_mlp, sigma_o2, sigma_w2_out,
  mean_rope_correlation, q0, p0, log2_scale, block_code, qk_norm_dim)`` (``beta`` is the heads'
  effective beta, with QK-norm the reduced-scale factor; ``sigma_o2 = 1`` without output
  projection, ``sigma_w2_out`` resolved, the input state ``(q0, p0) 2**log2_scale``; the block
  form and the QK-norm width, docs/theory.md section 19, select compile-time specialisations
  like RoPE's correlation; :func:`remprop.theory.propagation.pack_parameters` builds the rows);
* :data:`SCALE_EXPONENT`, :func:`scale_mode` -- the carried scale of deep pre-LN and no-LN
  streams: a cell's q is kept in ``[2**-SCALE_EXPONENT, 2**SCALE_EXPONENT]`` and the rest
  moves into its exponent (docs/theory.md section 5, "The carried scale");
* :func:`kernels_for` -- the compiled :class:`Kernels` (trajectories, final states,
  minimum-alpha bisection) of one architecture's codes (``Architecture.codes``) and
  ``finite`` (finite sequence length or not);
* :func:`packed_table` -- the finite-T participation table the kernels read;
* :func:`min_alpha_bisection` -- the smallest ``alpha_sa`` with final cosine below a
  threshold, per packed row; :func:`bisection_steps` -- its number of halvings.

The elementary maps are the ``*_core`` functions of the component modules
(``register_jitable``: plain NumPy from Python, inlined here); nothing is re-derived.
The block update follows the composed tree of ``Architecture.block``
(``_block``; a test checks every structural choice against it).

Finite sequence length: the kernels take the packed participation table of
:mod:`remprop.theory.rem.table` (:func:`packed_table`) as their last argument and
read ``Y2`` from it at ``x = beta sqrt(q (q - p))``; asymptotic kernels ignore it.

Caching: the kernels are closures whose cells hold only integers, booleans and
functions that pickle deterministically (module-level ``register_jitable`` functions
by reference, nested ones by value), so numba's on-disk cache key is stable across
processes. (A dispatcher in a closure cell pickles with a random uuid: the cache would
miss, and grow, on every run.) Every nested function gets a qualname unique to its
specialisation (``remprop.theory._jit``): otherwise two architectures' kernels
compiled in different processes can share symbol names and break when both are loaded
from the cache into one process. Kernels of user-registered activations call a function
object created at run time and are compiled per process, without the disk cache.
"""
from ._block import architecture_block_code, architecture_codes
from ._sweeps import (PARAMS, SCALE_EXPONENT, Kernels, bisection_steps, kernels_for, min_alpha_bisection,
                      packed_table, scale_mode)

__all__ = ["architecture_codes", "architecture_block_code", "PARAMS", "SCALE_EXPONENT", "Kernels", "kernels_for", "packed_table", "min_alpha_bisection", "scale_mode",
           "bisection_steps"]
