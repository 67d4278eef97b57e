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
the spread over seeds is the spread over input draws, not over initialisations (the verdict says
so: ``seed_draws = "input draws"``, :data:`~remprop.validation.agreement.SEED_DRAWS`).

Like ``check NAME --simulate``, each finished seed can be kept (``store``: the per-seed records
of :mod:`~remprop.validation.experiments.seed_records`), so that an interrupted run resumes. The
records of one set of weights live in a subfolder named by their digest (:func:`weights_digest`:
SHA-256 of the tensors, or of a folder's ``config.json`` and weight files), which the manifest
holds in full: other weights -- retrained, edited, another folder -- never reuse them.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333; docs/real_models.md section 6.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import torch
from torch import nn

from remprop._json import to_jsonable
from remprop.progress import progress_bar
from remprop.theory.causal import compared_last_tokens
from remprop.theory.checks import check_regular_file
from remprop.theory.models.measured_weights import weight_files

from .backend import resolve_device
from .experiments.seed_records import seed_key, seed_record, seed_store, stored_measurement
from .hf_models import ModelMeasurement, _run_arguments, measure_inputs
from .own_weights import own_weights_spec

__all__ = ["simulate_own_weights", "load_own_model", "weights_digest", "OWN_FORMAT"]

#: Format tag of an own-weights simulation's store manifest.
OWN_FORMAT = "remprop.simulate_own_weights/1"
#: Bytes read at a time while hashing a weight file.
_CHUNK = 1 << 20


def weights_digest(model) -> str:
    """SHA-256 (hex) of a model's weights: an ``nn.Module``'s ``state_dict`` (every tensor's name,
    dtype, shape and bytes, in order), or a folder's ``config.json`` and weight files
    (:func:`~remprop.theory.models.measured_weights.weight_files`; each name and its bytes). Any
    change of a weight, of the configuration or of the files gives another digest. A special file
    (a named pipe) is refused by name before it is opened."""
    digest = hashlib.sha256()
    if isinstance(model, nn.Module):
        for name, tensor in model.state_dict().items():
            data = tensor.detach().to("cpu").contiguous()
            digest.update(f"{name}|{data.dtype}|{tuple(data.shape)}\n".encode())
            digest.update(data.reshape(-1).view(torch.uint8).numpy().tobytes())  # bfloat16 too: its bytes
        return digest.hexdigest()
    folder = Path(model)
    for path in [folder / "config.json"] + weight_files(folder):
        check_regular_file("model", path)
        digest.update(f"{path.name}\n".encode())
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(_CHUNK), b""):
                digest.update(block)
    return digest.hexdigest()


def _own_store(store, model, spec, sequences):
    """The per-seed store of these weights under ``store``: ``store/weights-<digest[:16]>``."""
    digest = weights_digest(model)
    manifest = {"format": OWN_FORMAT, "weights_sha256": digest, "model": spec.to_dict(), "sequences": sequences,
                "last_tokens": compared_last_tokens(spec.seq_len) if spec.causal else None}
    names = ("rho", "q", "p", "y2") + (("rho_last",) if spec.causal else ())
    return seed_store(Path(store) / f"weights-{digest[:16]}", to_jsonable(manifest), names=names,
                      sequences=sequences)


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
                         theory=None, progress=None, store=None) -> ModelMeasurement:
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
    store : str or Path, optional
        Folder under which each finished seed is kept, in the subfolder of these weights
        (``weights-<digest>``, :func:`weights_digest`): a rerun on the same weights measures only
        the seeds it lacks (a damaged record is moved aside and measured again); ``sequences``
        or a spec other than the stored one's is refused with a ``ValueError``.

    Returns
    -------
    ModelMeasurement
        ``seeds`` are the input seeds (``seed_draws = "input draws"``); its ``summary()`` is what
        ``check --simulate`` reports.
    """
    if spec is None:
        spec = own_weights_spec(model, seq_len=seq_len)
    if spec.weights is None:
        raise ValueError("spec must be measured on the model's own weights (own_weights_spec)")
    spec, seeds, sequences, theory = _run_arguments(spec, seeds, sequences, theory)
    cells = None if store is None else _own_store(store, model, spec, sequences)
    kept = {} if cells is None else {seed: stored_measurement(cells, seed) for seed in seeds}  # damaged: None
    missing = [seed for seed in seeds if kept.get(seed) is None]
    module = load_own_model(model, device=device) if missing else None  # all kept: nothing to load or run
    training = module is not None and module.training
    rows = {"rho": [], "q": [], "p": [], "y2": [], "rho_last": []}
    per_seed = spec.depth * (2 if spec.causal else 1)
    try:
        if module is not None:
            module.eval()  # dropout off; the model's mode is restored afterwards
        with progress_bar(len(seeds) * per_seed, desc=f"simulate {spec.name}", unit="layer",
                          enabled=progress is True) as bar:
            for seed in seeds:
                record = kept.get(seed)
                if record is not None:
                    bar.update(per_seed)
                else:
                    record = measure_inputs(spec, module, seed, sequences, advance=bar.update)
                    if cells is not None:
                        cells.write(seed_key(seed), seed_record(seed, record))
                for name, value in record.items():
                    rows[name].append(np.asarray(value, dtype=np.float64))
    finally:
        if module is not None:
            module.train(training)
    stack = {name: np.stack(values) for name, values in rows.items() if values}
    return ModelMeasurement(spec=spec, seeds=seeds, rho=stack["rho"], q=stack["q"], p=stack["p"], y2=stack["y2"],
                            rho_last=stack.get("rho_last"), theory=theory, seed_draws="input draws")
