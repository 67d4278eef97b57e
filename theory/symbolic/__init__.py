r"""Symbolic large-depth theory of the post-LN ReLU block near rank collapse.

Every post-LN block after the first sees normalised tokens, ``q = 1``, ``p = rho``. Write
``eps = 1 - rho``. For a fixed query/key scale ``beta`` the attention is in its spread phase
near collapse: ``beta_c = sqrt(2 / (1 - rho)) = sqrt(2 / eps)`` diverges as ``eps -> 0``, so
``Y2 = 0`` as soon as ``eps < 2 / beta**2``. For ``beta <= sqrt(2)`` (the first layer's
``beta_c`` at ``q = 1, p = 0``) this holds at every layer of a stack started from
``rho0 >= 0``, because the cosine only grows. With ``Y2 = 0`` the block is the composition

.. math::
    \epsilon_1 = E_A(\epsilon) = \frac{\alpha^2\epsilon}{\alpha^2 + \sigma_v^2 + \sigma_b^2
                 - \sigma_v^2\epsilon},\qquad
    \epsilon' = E_M(\epsilon_1) = \frac{C\,[1 - f(1 - r\epsilon_1)] + \alpha_M^2\epsilon_1}{Q},

with ``r = sigma_w2 / (sigma_w2 + sigma_b2)``, ``C = sigma_w2 (sigma_w2 + sigma_b2) / 2``,
``Q = C + sigma_b2 + alpha_mlp**2`` and the ReLU arc-cosine kernel
``f(c) = (sqrt(1 - c^2) + c (pi - arccos c)) / pi`` (Cho & Saul 2009). Because
``f(1 - delta) = 1 - delta + (2 sqrt 2 / (3 pi)) delta^(3/2) + ...`` has half-integer powers,

.. math:: \epsilon' = \lambda\epsilon + \kappa\epsilon^{3/2} + \mu\epsilon^2 + O(\epsilon^{5/2}).

Modules, one idea each:

* :mod:`~remprop.theory.symbolic.symbols`: the sympy symbols and their numeric evaluation;
* :mod:`~remprop.theory.symbolic.block_tree`: the block of
  :meth:`Architecture.block <remprop.theory.Architecture.block>` walked on sympy
  expressions (:func:`symbolic_block_map`), and from it the exact post-LN map
  (:func:`post_ln_block_map`): the block order is never written here by hand;
* :mod:`~remprop.theory.symbolic.arc_cosine`: the ReLU kernel and its expansion at
  ``c = 1`` (:func:`relu_kernel_expansion`);
* :mod:`~remprop.theory.symbolic.block_expansion`: ``lambda``, ``kappa``, ``mu``
  (:func:`block_map_expansion`);
* :mod:`~remprop.theory.symbolic.depth_laws`: the polynomial ``1/L^2`` collapse of the
  bias-free ReLU MLP stack (:func:`polynomial_collapse_law`) and the large-depth law of
  the minimum skip strength ``alpha*(L)`` (:func:`alpha_star_law`,
  :func:`critical_depth`, :func:`depth_to_collapse`, :func:`attention_only_residual_law`).

``docs/symbolic.md`` has the derivation in prose. Importing this package imports sympy;
``remprop.theory`` itself does not.

References
----------
A. Giorlandino & S. Goldt, arXiv 2505.24333 (the block maps).
Y. Cho & L. Saul, "Kernel methods for deep learning", NeurIPS 2009 (arc-cosine kernel).
L. Noci et al., "Signal propagation in transformers", NeurIPS 2022 (sqrt(L)-type residual
scaling).
"""
from .arc_cosine import KernelExpansion, arc_cosine_kernel, relu_kernel_expansion
from .block_expansion import BlockMapExpansion, block_map_expansion
from .block_tree import (
    PARTICIPATION,
    SymbolicContext,
    gaussian_moments,
    post_ln_block_map,
    post_ln_sub_blocks,
    spread_phase,
    symbolic_architecture,
    symbolic_block_map,
)
from .depth_laws import (
    attention_only_residual_law,
    critical_depth,
    depth_to_collapse,
    alpha_star_law,
    min_residual_strength_law,  # deprecated spelling of alpha_star_law, not in __all__
    polynomial_collapse_law,
)
from .symbols import (
    ALPHA_MLP,
    ALPHA_SA,
    BERT,
    DELTA,
    EPS,
    INV_ALPHA2,
    SIGMA_B2,
    SIGMA_V2,
    SIGMA_W2,
)

__all__ = [
    "relu_kernel_expansion",
    "post_ln_block_map",
    "block_map_expansion",
    "polynomial_collapse_law",
    "depth_to_collapse",
    "critical_depth",
    "alpha_star_law",
    "attention_only_residual_law",
    "KernelExpansion",
    "BlockMapExpansion",
    "arc_cosine_kernel",
    "SymbolicContext",
    "symbolic_architecture",
    "symbolic_block_map",
    "post_ln_sub_blocks",
    "spread_phase",
    "gaussian_moments",
    "PARTICIPATION",
    "EPS", "DELTA", "SIGMA_W2", "SIGMA_B2", "SIGMA_V2", "ALPHA_SA", "ALPHA_MLP", "INV_ALPHA2", "BERT",
]
