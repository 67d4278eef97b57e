"""remprop.validation: real transformer stacks at initialisation, simulated in PyTorch.

Builds transformer stacks exactly as the theory assumes (``docs/theory.md`` section 2), pushes
synthetic Gaussian tokens or embedded real text through them, measures what the theory
predicts (q, p, rho, mean pairwise cosine, attention participation ratio and entropy)
layer by layer, and draws both side by side.

* :class:`SimulatedStack` -- our BERT-style stack built from a ``remprop.theory.Architecture``;
* :class:`SimulationSettings` -- width, sequence length, precision, device, seeds and inputs of a
  simulation, validated once;
* :class:`HuggingFaceBert` -- the same network as a ``transformers.BertModel``;
* :data:`REGISTRY` -- each theory map paired with its simulated torch component;
* :func:`compare`, :func:`attention_sweep` -- theory against simulation;
* :mod:`remprop.validation.experiments.simulated_figures` -- the paper's simulated figures (1d, 1e, 2, 3c, 5, 12);
* :func:`make_figures` -- every reference figure, theory and simulation, into one folder;
* :func:`gradient_sweep`, :func:`figure_3c` -- query/key gradients against autograd (Fig. 3c);
* :func:`causal_comparison`, :func:`figure_12` -- causal stacks, last tokens and error by position;
* :func:`multihead_participation` -- H heads under both query/key variance conventions;
* :func:`own_weights_spec`, :func:`measure_weights` -- a model's own weights measured and mapped
  onto the theory's parameters (``remprop.check(model)``, ``remprop check DIR``);
* :func:`probe` -- q, p, rho, cosine and attention Y2 layer by layer of any torch transformer
  (Hugging Face models, ``nn.TransformerEncoder``) at initialisation, from forward hooks.

torch is imported on first use of these names, not by ``import remprop.validation``
(so ``remprop validate`` builds its parser without torch). Runs on CUDA when
available, else on the CPU.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

from remprop._lazy import lazy_attributes

_EXPORTS = {
    "SimulatedStack": "simulator", "StackTrace": "simulator", "SimulationSettings": "settings",
    "reduced_spec": "hf_models", "first_layer_participation": "hf_models", "simulate_blocks": "hf_models",
    "pair_cosine_comparison": "pair_cosines", "PairCosines": "pair_cosines",
    "run_acceptance": "experiments.acceptance",
    "HuggingFaceBert": "hf_bert", "bert_config": "hf_bert",
    "REGISTRY": "registry", "ComponentPair": "registry",
    "compare": "comparison", "Comparison": "comparison", "attention_sweep": "comparison",
    "AttentionSweep": "comparison",
    "TokenBatch": "inputs", "gaussian_tokens": "inputs", "text_tokens": "inputs", "input_batches": "inputs",
    "WordTokenizer": "text", "TextCorpus": "text", "pydoc_corpus": "text",
    "token_statistics": "measurements", "attention_statistics": "measurements",
    "FigureResult": "experiments.simulated_figures", "FIGURES": "experiments.simulated_figures", "make_figures": "experiments.paper_figures",
    "figure_1d": "experiments.simulated_figures", "figure_1e": "experiments.simulated_figures", "figure_2": "experiments.simulated_figures",
    "figure_5": "experiments.simulated_figures",
    "window_statistics": "measurements", "last_tokens_statistics": "measurements",
    "jacobian_norms": "gradients", "readout_gradient_norms": "gradients", "GradientSweep": "gradients",
    "gradient_sweep": "gradients", "figure_3c": "experiments.simulated_figures",
    "CausalComparison": "causal", "causal_comparison": "causal", "figure_12": "experiments.simulated_figures",
    "multihead_participation": "multihead",
    "probe": "probing", "ProbeTrace": "probing",
    "build_model": "hf_models", "model_inputs": "hf_models", "simulate_model": "hf_models",
    "ModelMeasurement": "hf_models",
    "own_weights_spec": "own_weights", "measure_weights": "own_weights",
    "BlockDescription": "module_weights", "RempropCallback": "integrations", "RempropWarning": "integrations",
    "trainer_recipe": "integrations",
    "branch_perturbation_gains": "update_sensitivity",
}

__all__ = sorted(_EXPORTS)


#: What to do when a name needs torch or transformers (the validation extra), said by the names'
#: import errors here and by the command line's one-line errors.
VALIDATION_HINT = "the validation extra is needed: pip install 'remprop[validation]'"

__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS, missing_hint=VALIDATION_HINT)
