"""remprop.theory: signal propagation through transformers at initialisation.

Pure mathematics (NumPy, numba, sympy): the Random Energy Model of attention, the
maps of every block component on the order parameters (q, p), block orders, and their
iteration over depth, vectorised over whole parameter grids.

Reference: A. Giorlandino & S. Goldt, "Two failure modes of deep transformers and how
to avoid them: a unified theory of signal propagation at initialisation",
arXiv 2505.24333.
"""
from . import components
from .activations import (
    ACTIVATIONS,
    activation_moments,
    dense_map,
    derivative_moment,
    mlp_map,
    register_activation,
    relu_kernel,
)
from .architecture import (ATTENTIONS, BLOCK_FORMS, MLPS, NORM_TYPES, NORMS, NUMERIC_FIELDS, OPTIONAL_FIELDS, POSITIONS,
                           Architecture)
from .components.attention import gain_controlled_attention_map, softmax_attention_map
from .edge_of_chaos import chaos_boundary, chi_1, mlp_block_boundary, mlp_block_chi
from .components.gated_mlp import gated_mlp_map
from .components.layer_norm import layernorm_map
from .components.rms_norm import rmsnorm_map
from .propagation import Trajectory, final_state, propagate
from .learning_rate import (ATTENTION_CONSTANT, COHERENT_STEPS, FLOOR_CONSTANT, STACK_CONSTANT, LearningRateCeiling,
                            attention_growth_budget, learning_rate_ceiling, qk_norm_growth_budget,
                            sub_block_sensitivities, update_sensitivity)
from .sampled_trajectory import SampledTrajectory, propagate_at_layers
from .settings import DEFAULT_THRESHOLD, RunSettings
from .components.residual import skip_map
from .rope_attention import rope_softmax_attention_map
from .rem.qk_norm import qk_norm_beta
from .rem.spectrum import attention_bulk_radius, stochastic_bulk_radius
from .rem import (
    QK_SCALINGS,
    asymptotic_participation_moment,
    causal_participation_ratio,
    beta_critical,
    critical_beta,  # deprecated spelling of beta_critical, not in __all__
    cross_overlap,
    cross_overlap_table,
    effective_beta,
    head_participation_ratio,
    pair_participation_moment,
    participation_moment,
    participation_ratio,
    participation_square,
    participation_table,
)
from .gradients import (
    gradient_row_moments,
    key_gradient_norm,
    query_gradient_norm,
    scaled_query_gradient_norm,
)
from .causal import CausalGramTrajectory, gram_width, last_tokens_cosine, propagate_causal, propagate_causal_gram
from .gram_state import GramTrajectory, propagate_gram, simplex_distance
from .models import ModelSpec, load_hf_config, model_spec, shipped_configs

__all__ = [
    "ACTIVATIONS", "ATTENTIONS", "BLOCK_FORMS", "NORMS", "NORM_TYPES", "MLPS", "POSITIONS", "NUMERIC_FIELDS", "OPTIONAL_FIELDS",
    "Architecture", "Trajectory", "RunSettings", "DEFAULT_THRESHOLD",
    "beta_critical", "participation_ratio", "participation_moment", "participation_table",
    "softmax_attention_map", "gain_controlled_attention_map",
    "skip_map", "layernorm_map", "rmsnorm_map", "dense_map", "mlp_map", "gated_mlp_map", "activation_moments", "relu_kernel",
    "register_activation", "derivative_moment",
    "chi_1", "chaos_boundary", "mlp_block_chi", "mlp_block_boundary",
    "propagate", "final_state", "components",
    "SampledTrajectory", "propagate_at_layers",
    "QK_SCALINGS", "effective_beta", "head_participation_ratio",
    "asymptotic_participation_moment", "pair_participation_moment", "participation_square",
    "cross_overlap", "cross_overlap_table",
    "query_gradient_norm", "key_gradient_norm", "scaled_query_gradient_norm", "gradient_row_moments",
    "causal_participation_ratio", "propagate_causal", "last_tokens_cosine", "propagate_causal_gram", "gram_width",
    "CausalGramTrajectory",
    "ModelSpec", "model_spec", "load_hf_config", "shipped_configs",
    "attention_bulk_radius", "stochastic_bulk_radius",
    "rope_softmax_attention_map",
    "qk_norm_beta",
    "GramTrajectory", "propagate_gram", "simplex_distance",
    "update_sensitivity", "sub_block_sensitivities", "attention_growth_budget", "qk_norm_growth_budget",
    "learning_rate_ceiling", "LearningRateCeiling",
    "STACK_CONSTANT", "FLOOR_CONSTANT", "ATTENTION_CONSTANT", "COHERENT_STEPS",
]
