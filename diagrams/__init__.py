"""remprop.diagrams: trainability diagrams, the minimum residual strength, and figures.

A depth-L transformer stack at initialisation is in one of three phases
(:mod:`~remprop.diagrams.phases`): trainable, rank-collapsed (the mean cosine of two
tokens after the last block exceeds a collapse threshold, default 0.99) or
entropy-collapsed (beta above the critical beta of the attention input).
:func:`trainability_diagram` maps the phases over (beta, alpha_sa);
:func:`alpha_star` gives the minimum residual strength alpha*, the smallest alpha_sa that avoids rank collapse.
:class:`GridResult` is the one result type (and file format) of the theory's, the measured
and the trained diagrams (:mod:`~remprop.diagrams.grid_result`).

The figure functions need matplotlib and are imported on first use, so that
``import remprop.diagrams`` stays light (the CLI's ``min-alpha`` starts fast).

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

from remprop._lazy import lazy_attributes as _lazy_attributes

from .phases import ENTROPY_COLLAPSE, PHASE_LABELS, RANK_COLLAPSE, TRAINABLE, classify_phases
from .depth_recipes import CONVENTIONS, inverse_sqrt_depth, residual_scaling, scale_architecture
from .residual_strength import ALPHA_MAX, DEFAULT_THRESHOLD, alpha_star
from .residual_strength import min_residual_strength  # deprecated spelling of alpha_star, not in __all__
from .grid_result import GridResult
from .trainability import TrainabilityDiagram, trainability_diagram
from .diagnosis import Change, Diagnosis, diagnose
from .recipes import RECIPES, Recipe, RecipePrediction, recipe_predictions, recipes_figure

#: Public names defined in modules that import matplotlib, loaded lazily.
_LAZY = {
    "trainability_figure": "theory_figures",
    "attention_phase_figure": "theory_figures",
    "layernorm_placement_figure": "theory_figures",
    "attention_phase_data": "figure_data",
    "layernorm_placement_data": "figure_data",
    "LAYERNORM_REFERENCE_RUN": "figure_data",
    "make_theory_figures": "paper_figures",
    "PAPER_FIGURES": "paper_figures",
    "measured_diagram_figure": "measured_figures",
    "edge_of_chaos_data": "edge_of_chaos_figures",
    "edge_of_chaos_figure": "edge_of_chaos_figures",
    "model_figure": "model_figures",
    "model_diagram": "model_figures",
}

__all__ = [
    "alpha_star", "trainability_diagram", "TrainabilityDiagram", "GridResult",
    "TRAINABLE", "RANK_COLLAPSE", "ENTROPY_COLLAPSE", "PHASE_LABELS", "classify_phases",
    "ALPHA_MAX", "DEFAULT_THRESHOLD",
    "CONVENTIONS", "residual_scaling", "inverse_sqrt_depth", "scale_architecture",
    "diagnose", "Diagnosis", "Change",
    "RECIPES", "Recipe", "RecipePrediction", "recipe_predictions", "recipes_figure", *_LAZY,
]


__getattr__, __dir__ = _lazy_attributes(__name__, _LAZY)
