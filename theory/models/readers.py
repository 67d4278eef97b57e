"""The one table of the model configurations remprop reads: ``model_type`` -> reader.

:func:`model_spec` loads a configuration (:func:`~remprop.theory.models.hf_config.load_hf_config`),
sets the library's defaults of its family, and hands it to the reader :data:`READERS` names for its
``model_type``; a type the table does not name is refused with the list of those it reads. A reader
is ``reader(cfg, *, seq_len=None, pixel_std=1.0) -> ModelSpec``:

* :func:`~remprop.theory.models.hf_config.standard_spec` -- BERT, RoBERTa, GPT-2, ViT and the
  LLaMA-style decoders (LLaMA, Mistral, Qwen2);
* :mod:`.decoder_families` -- Phi-3, Gemma 2 and OLMo 2, read as LLaMA-style decoders with what
  differs set (and Gemma 3, refused with the feature the engine lacks);
* :mod:`.neox` -- GPT-NeoX (the Pythia suite).

A new family is one reader and one line here.
"""
from __future__ import annotations

import dataclasses

from . import decoder_families, neox
from .hf_config import ModelSpec, _with_library_defaults, load_hf_config, standard_spec

__all__ = ["READERS", "FAMILIES", "model_spec"]

#: ``model_type`` -> the reader of its configurations.
READERS = {
    "bert": standard_spec,
    "roberta": standard_spec,
    "gpt2": standard_spec,
    "vit": standard_spec,
    "llama": standard_spec,
    "mistral": standard_spec,
    "qwen2": standard_spec,
    "phi3": decoder_families._phi3_spec,
    "gemma2": decoder_families._gemma2_spec,
    "olmo2": decoder_families._olmo2_spec,
    "gpt_neox": neox._gpt_neox_spec,
    "gemma3_text": decoder_families._gemma3_text_spec,  # refused, naming the feature the engine lacks
}
#: The ``model_type`` values read (those of :data:`READERS` but the refused ones).
FAMILIES = tuple(name for name, reader in READERS.items() if not getattr(reader, "refuses", False))


def model_spec(config, *, seq_len=None, pixel_std=1.0) -> ModelSpec:
    r"""Translate a Hugging Face configuration and the library's default initialisation.

    Parameters
    ----------
    config : transformers.PretrainedConfig, dict, str or os.PathLike
        See :func:`~remprop.theory.models.hf_config.load_hf_config`. Supported ``model_type``:
        :data:`FAMILIES` (``bert``, ``roberta``, ``gpt2``, ``vit``, the LLaMA-style ``llama``,
        ``mistral``, ``qwen2``, and ``phi3``, ``gemma2``, ``olmo2``, ``gpt_neox``), each read by its
        reader in :data:`READERS`.
    seq_len : int, optional
        Sequence length T (default: the model's maximum, ``max_position_embeddings``
        (RoBERTa: minus its 2 offset positions), ``n_positions``, or ``(image/patch)^2 + 1``).
    pixel_std : float
        ViT only: standard deviation of the i.i.d. input pixels.

    Returns
    -------
    ModelSpec

    Notes
    -----
    With every weight ``N(0, r^2)`` a score is a sum of ``d_H`` products of query and key
    components of variance ``r^2 d q`` each, divided by ``sqrt(d_H)``:
    ``Var(s_ij) = (r^2 d q)^2``; the engine's convention ``Var(s_ij) = beta^2 q^2 log T``
    gives ``beta = r^2 d / sqrt(log T)`` for any number of heads.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (the maps); Radford et al. 2019 (GPT-2's
    ``1/sqrt(2L)`` residual projections); Devlin et al. 2019 (BERT); Dosovitskiy et al. 2021 (ViT).
    """
    cfg = _with_library_defaults(load_hf_config(config))
    family = cfg.get("model_type")
    if family not in READERS:
        raise ValueError(f"config.model_type must be one of {', '.join(FAMILIES)}, got {family!r}")
    spec = READERS[family](cfg, seq_len=seq_len, pixel_std=pixel_std)
    return dataclasses.replace(spec, reader=model_spec)  # ModelSpec.with_depth reads through the table again
