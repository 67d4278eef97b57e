"""The Random Energy Model (REM) of one attention row: its moments at T -> infinity and at
finite sequence length T, two-key moments, causal rows, and heads.

A row of the attention matrix at initialisation is a Gibbs measure over T keys with
i.i.d. Gaussian energies of variance ``x^2 log T``, ``x = beta sqrt(q (q - p))``
(docs/theory.md section 3). Modules:

* :mod:`.asymptotic` -- ``beta_c`` and the ``T -> infinity`` (Poisson-Dirichlet) moments;
* :mod:`.integral` -- the one quadrature of the finite-T moments (one and two keys);
* :mod:`.finite_t` -- the participation moments and ratio at any T;
* :mod:`.pairs` -- two-key moments and the mean square of the participation ratio;
* :mod:`.cross_overlap` -- the overlap of two rows of correlated queries (exact, tabulated);
* :mod:`.table` -- the one table type (a moment tabulated in x at one T, packed for numba);
* :mod:`.causal` -- rows of causal attention (t keys at the score scale of T);
* :mod:`.heads` -- the effective beta of H heads;
* :mod:`.rope` -- rotary position embeddings: the score covariance, Y2 and beta_c with RoPE;
* :mod:`.qk_norm` -- QK-norm: the score moments and the effective beta of normalised queries and keys;
* :mod:`.finite_width` -- one attention layer at finite width d (keys' geometry, mean of cosines);
* :mod:`.spectrum` -- the eigenvalue bulk of the attention matrix;
* :mod:`.checks` -- validators of seq_len, orders, positions.
"""
from .asymptotic import (
    asymptotic_participation_core,
    asymptotic_participation_moment,
    beta_critical,
    critical_beta,  # deprecated spelling of beta_critical, not in __all__
    critical_beta_core,
)
from .causal import (CausalParticipationTable, causal_participation_ratio, causal_participation_table,
                     causal_rope_correlation)
from .cross_overlap import (CROSS_X_MAX, CrossOverlapTable, cross_overlap, cross_overlap_at, cross_overlap_core,
                            cross_overlap_table)
from .checks import check_heads, check_order, check_orders, check_positions, check_seq_len
from .finite_t import participation_moment, participation_ratio, reduced_scale
from .heads import QK_SCALINGS, QKScaling, effective_beta, head_participation_ratio, query_key_variance, score_variance
from .pairs import pair_participation_moment, participation_square
from .finite_width import (CosineSampling, attention_mean_cosine, finite_width_attention_map, gibbs_energy_square,
                           query_norm_variance)
from .qk_norm import gaussian_cosine_mean, qk_norm_beta, qk_norm_energy_core, qk_norm_score_moments
from .rope import (ROPE_BASE, partial_rotary_correlation, rope_beta_critical, rope_correlation, rope_frequencies,
                   rope_mean_correlation, rope_participation_ratio, rope_score_covariance)
from .rope import rope_critical_beta  # deprecated spelling of rope_beta_critical, not in __all__
from .spectrum import attention_bulk_radius, stochastic_bulk_radius
from .table import (TABLE_TOLERANCE, TABLE_X_MAX, ParticipationTable, after_table, participation_table, table_lookup,
                    table_lookup_at, table_position)

__all__ = [
    "beta_critical", "asymptotic_participation_moment",
    "participation_ratio", "participation_moment", "reduced_scale",
    "pair_participation_moment", "participation_square",
    "cross_overlap", "after_table", "cross_overlap_table", "CrossOverlapTable", "cross_overlap_core", "cross_overlap_at",
    "CROSS_X_MAX",
    "ParticipationTable", "participation_table", "table_lookup", "table_lookup_at", "table_position", "TABLE_TOLERANCE", "TABLE_X_MAX",
    "causal_participation_ratio", "CausalParticipationTable", "causal_participation_table", "causal_rope_correlation",
    "QK_SCALINGS", "QKScaling", "effective_beta", "head_participation_ratio", "query_key_variance", "score_variance",
    "check_seq_len", "check_order", "check_orders", "check_positions", "check_heads",
    "critical_beta_core", "asymptotic_participation_core",
    "attention_bulk_radius", "stochastic_bulk_radius",
    "ROPE_BASE", "rope_frequencies", "rope_correlation", "rope_mean_correlation",
    "partial_rotary_correlation", "rope_score_covariance",
    "rope_beta_critical", "rope_participation_ratio",
    "gaussian_cosine_mean", "qk_norm_score_moments", "qk_norm_beta", "qk_norm_energy_core",
    "attention_mean_cosine", "CosineSampling", "finite_width_attention_map", "gibbs_energy_square",
    "query_norm_variance",
]
