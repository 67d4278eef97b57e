"""A model's own weights run forward beside the theory of its measured parameters.

``remprop check DIR --simulate`` and :func:`simulate_own_weights`: the user's model (a
``transformers`` model, or the folder ``save_pretrained`` wrote, loaded with
``AutoModel.from_pretrained``) -- its weights, not a fresh initialisation -- is fed random
inputs of the kind the theory's input state assumes (:func:`~remprop.validation.hf_models.model_inputs`:
uniform token ids), every layer is read by the probe
(:func:`~remprop.validation.hf_models.measure_inputs`), and the mean cosine per layer is
compared with the diagnosis of the parameters measured on those weights
(:func:`remprop.validation.own_weights.check`; causal models: the last tokens), by the same
rule and in the same :class:`~remprop.validation.hf_models.ModelMeasurement` as
``remprop check NAME --simulate``. With one set of weights, the seeds are those of the inputs:
the spread over seeds is the spread over input draws, not over initialisations.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333; docs/real_models.md section 6.
"""
from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

from remprop.progress import progress_bar

from .backend import resolve_device
from .hf_models import ModelMeasurement, _run_arguments, measure_inputs
from .own_weights import own_weights_spec

__all__ = ["simulate_own_weights", "load_own_model"]


def load_own_model(model, *, device=None):
    """The module to run: ``model`` itself (an ``nn.Module``), or the model of a folder
    (``transformers.AutoModel.from_pretrained``, float32, on ``device``: default CUDA where
    available). A folder that lacks a tensor of that model is refused (transformers would draw it
    at random); unused tensors (a language-model head) are left out without a word."""
    if isinstance(model, nn.Module):
        return model
    if not isinstance(model, (str, os.PathLike)) or not Path(model).is_dir():
        raise ValueError(f"model must be a transformers model or a folder of its weights, got {model!r}")
    import transformers
    from transformers.utils import logging as hf_logging

    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()  # its load report: a head's weights unused by the base model are expected
    hf_logging.disable_progress_bar()
    try:
        loaded, info = transformers.AutoModel.from_pretrained(str(model), dtype=torch.float32,
                                                              output_loading_info=True)
    except Exception as err:  # a folder the reader measured but transformers cannot load: one line
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise ValueError(f"model: transformers cannot load {str(model)!r} to run it ({type(err).__name__}: "
                         f"{first[:200]})") from None
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
    missing = sorted(info.get("missing_keys") or ())
    if missing:  # transformers would draw them afresh: the run would not be the folder's weights
        raise ValueError(f"model: {str(model)!r} lacks {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''} "
                         "for transformers' model: loading would draw them at random, not run the folder's weights")
    return loaded.to(resolve_device(device))


def simulate_own_weights(model, *, spec=None, seq_len=None, seeds=(0, 1, 2, 3), sequences=2, device=None,
                         theory=None, progress=None) -> ModelMeasurement:
    """Measure a model's per-layer cosine on its own weights, over random inputs.

    Parameters
    ----------
    model : transformers.PreTrainedModel, str or os.PathLike
        A model, or a folder with its ``config.json`` and weights
        (:func:`~remprop.validation.own_weights.own_weights_spec`).
    spec : ModelSpec, optional
        Its spec measured on the weights (default: :func:`~remprop.validation.own_weights.own_weights_spec`).
    seq_len : int, optional
        Sequence length T of the default spec.
    seeds : sequence of int
        Seeds of the input draws (the weights are the model's: one set).
    sequences : int
        Random input sequences per seed.
    device : str or torch.device, optional
        Where a folder's model runs (a model given runs where it is).
    theory : array_like, optional
        The predicted cosine per layer (default: :func:`remprop.diagrams.diagnose` of ``spec``).
    progress : bool, optional
        True: the simulated layers with their ETA on stderr.

    Returns
    -------
    ModelMeasurement
        ``seeds`` are the input seeds; its ``summary()`` is what ``check --simulate`` reports.
    """
    if spec is None:
        spec = own_weights_spec(model, seq_len=seq_len)
    if spec.weights is None:
        raise ValueError("spec must be measured on the model's own weights (own_weights_spec)")
    spec, seeds, sequences, theory = _run_arguments(spec, seeds, sequences, theory)
    module = load_own_model(model, device=device)
    training = module.training
    rows = {"rho": [], "q": [], "p": [], "y2": [], "rho_last": []}
    per_seed = spec.depth * (2 if spec.causal else 1)
    try:
        module.eval()  # dropout off; the model's mode is restored afterwards
        with progress_bar(len(seeds) * per_seed, desc=f"simulate {spec.name}", unit="layer",
                          enabled=progress is True) as bar:
            for seed in seeds:
                record = measure_inputs(spec, module, seed, sequences, advance=bar.update)
                for name, value in record.items():
                    rows[name].append(np.asarray(value, dtype=np.float64))
    finally:
        module.train(training)
    stack = {name: np.stack(values) for name, values in rows.items() if values}
    return ModelMeasurement(spec=spec, seeds=seeds, rho=stack["rho"], q=stack["q"], p=stack["p"], y2=stack["y2"],
                            rho_last=stack.get("rho_last"), theory=theory)
