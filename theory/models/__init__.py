"""Real model configurations translated to the theory's parameters.

:mod:`.hf_config` reads Hugging Face configurations (BERT, RoBERTa, GPT-2, ViT, the LLaMA-style
decoders; :mod:`.neox` GPT-NeoX / Pythia) at the
library's default initialisation, each ``model_type`` through its reader in the one table
:data:`~remprop.theory.models.readers.READERS`; the shipped configurations (sizes and init ranges) are
in ``configs/``. :mod:`.measured_weights` maps the scales measured on a model's own weights
onto the same parameters (:func:`measured_spec`). :func:`published_recipes` reads the table of
published pre-training recipes (``published_recipes.json``).
"""
from .hf_config import CONFIG_DIR, ModelSpec, load_hf_config, shipped_configs
from .measured_weights import MeasuredWeights, NormGains, input_state, measured_spec, weight_parameters
from .readers import FAMILIES, READERS, model_spec
from .pretraining import PublishedRecipe, published_recipes

__all__ = ["ModelSpec", "model_spec", "load_hf_config", "shipped_configs", "FAMILIES", "READERS", "CONFIG_DIR",
           "MeasuredWeights", "NormGains", "measured_spec", "weight_parameters", "input_state", "PublishedRecipe",
           "published_recipes"]
