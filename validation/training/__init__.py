"""remprop.validation.training: masked-LM training of the simulated stack (does it train?).

* :class:`TrainConfig` -- one run: an Architecture, beta, sizes, the optimiser's settings;
* :func:`train` -- AdamW with linear warm-up and decay, clipping, seeded, resumable from a folder;
* :func:`train_batched` -- many runs of one shape as one stacked model (each run's losses
  are its single run's to float rounding);
* :class:`TrainResult` -- loss curves, the unigram baseline, per-layer query/key gradient
  norms, attention entropy and token cosine at initialisation and at the end; strict JSON;
* :func:`masked_lm_corpus` -- the pydoc topics split by document, a cached BPE tokenizer,
  BERT masking.

The model is :class:`~remprop.validation.simulator.SimulatedStack`'s own blocks and weights
made trainable (:class:`MaskedLMStack`; ``model="bert"``: Hugging Face BERT at the same
initialisation, :class:`BertMaskedLM`), so every Architecture field and beta mean what
they mean in the theory (docs/theory.md sections 2-5). torch is imported on first use of
these names. See docs/training.md for the sizes at which the three phases separate.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333, Fig. 1(f) and 3.
"""
from __future__ import annotations

from remprop._lazy import lazy_attributes

_EXPORTS = {
    "TrainConfig": "config", "TrainResult": "result", "train": "loop", "build_model": "loop",
    "train_batched": "batched",
    "masked_lm_corpus": "data", "MaskedLMCorpus": "data", "MaskedLMStack": "model", "BertMaskedLM": "hf_model",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_attributes(__name__, _EXPORTS)
