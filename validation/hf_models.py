"""Real Hugging Face models at random initialisation, measured against the theory.

:func:`build_model` instantiates a ``transformers`` model from the configuration behind
a :class:`~remprop.theory.ModelSpec` with the library's own default initialisation (no
weights are downloaded); :func:`simulate_model` pushes random inputs through several
initialisations, reads every layer with :func:`~remprop.validation.probe`, and compares
the mean cosine per layer with the prediction of :func:`remprop.diagrams.diagnose`
(causal models: the mean over the last 50 positions, docs/theory.md section 8).

Inputs are what the theory's input state assumes: token ids drawn uniformly from the
vocabulary (BERT, RoBERTa, GPT-2; one token type), or i.i.d. Gaussian pixels of the
spec's ``pixel_std`` (ViT).

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from remprop.theory import ModelSpec, model_spec
from remprop.theory.causal import LAST_TOKENS

from remprop._json import to_jsonable

from .backend import check_positive_int, resolve_device, resolve_dtype
from .cell_store import CellStore
from .probing import probe

__all__ = ["build_model", "model_inputs", "simulate_model", "ModelMeasurement", "LAST_TOKENS"]



def _transformers():
    try:
        import transformers
    except ImportError as err:  # pragma: no cover - the validation extra installs it
        raise ImportError("the Hugging Face models need transformers: pip install 'remprop[validation]'") from err
    return transformers


def _as_spec(spec) -> ModelSpec:
    return spec if isinstance(spec, ModelSpec) else model_spec(spec)


def build_model(spec, *, seed=0, dtype="float32", device=None):
    """The ``transformers`` model of ``spec`` at its library's default initialisation.

    Parameters
    ----------
    spec : ModelSpec or config
        What :func:`remprop.theory.model_spec` returns or accepts.
    seed : int
        Initialisation seed (the global torch generator is restored afterwards).
    dtype : {"float32", "float64"}
    device : str or torch.device, optional
        Default CUDA when available, else CPU.

    Returns
    -------
    torch.nn.Module
        ``AutoModel.from_config(config)`` (``BertModel``, ``RobertaModel``, ``GPT2Model``,
        ``ViTModel``) in eval mode, dropout off.
    """
    spec = _as_spec(spec)
    transformers = _transformers()
    cfg = {k: v for k, v in spec.config.items() if k not in ("model_type", "_name_or_path", "architectures",
                                                               "transformers_version", "torch_dtype", "dtype")}
    config = transformers.AutoConfig.for_model(spec.family, **cfg)
    device = resolve_device(device)
    seed = check_positive_int("seed", seed, 0)
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        model = transformers.AutoModel.from_config(config)
    return model.to(device=device, dtype=resolve_dtype(dtype)).eval()


def model_inputs(spec, count, *, seed=0, device=None, pixel_std=None):
    """Random inputs of the kind the theory's input state assumes.

    Token models: ids uniform in ``[0, vocab_size)``, shape ``(count, T)``. ViT: pixels
    ``N(0, pixel_std^2)`` (default: the spec's), shape ``(count, channels, image, image)``.
    """
    spec = _as_spec(spec)
    count = check_positive_int("count", count)
    gen = torch.Generator(device="cpu").manual_seed(10_007 * check_positive_int("seed", seed, 0) + 1)
    if spec.family == "vit":
        channels = int(spec.config.get("num_channels", 3))
        image = int(spec.config.get("image_size", 224))
        std = spec.pixel_std if pixel_std is None else float(pixel_std)
        out = torch.randn((count, channels, image, image), generator=gen) * std
    else:
        out = torch.randint(0, int(spec.config["vocab_size"]), (count, spec.seq_len), generator=gen)
    return out.to(resolve_device(device))


@dataclass(frozen=True)
class ModelMeasurement:
    """Per-layer statistics of a model over several initialisations.

    Attributes
    ----------
    spec : ModelSpec
    seeds : tuple of int
    rho, q, p : ndarray, shape (seeds, sequences, depth + 1)
        All tokens.
    y2 : ndarray, shape (seeds, sequences, depth)
    rho_last : ndarray or None, shape (seeds, sequences, depth + 1)
        Causal models: the last :data:`~remprop.theory.causal.LAST_TOKENS` tokens.
    theory : ndarray, shape (depth + 1,)
        The predicted mean cosine compared against (causal: of the last tokens).
    """

    spec: ModelSpec
    seeds: tuple
    rho: np.ndarray
    q: np.ndarray
    p: np.ndarray
    y2: np.ndarray
    rho_last: np.ndarray | None
    theory: np.ndarray = field(repr=False)

    @property
    def compared(self) -> np.ndarray:
        """The measured cosines compared with the theory: all tokens, or the last ones."""
        return self.rho if self.rho_last is None else self.rho_last

    @property
    def rho_mean(self) -> np.ndarray:
        """Mean over seeds and sequences, per layer."""
        return self.compared.mean(axis=(0, 1))

    @property
    def rho_std(self) -> np.ndarray:
        """Spread over initialisations: std over seeds of the per-seed means, per layer."""
        per_seed = self.compared.mean(axis=1)
        return per_seed.std(axis=0, ddof=1) if len(self.seeds) > 1 else np.zeros(per_seed.shape[1])

    @property
    def error(self) -> np.ndarray:
        """``|measured mean - theory|`` per layer."""
        return np.abs(self.rho_mean - self.theory)

    def summary(self) -> dict:
        """Max and mean error over layers, and the per-layer curves (JSON-ready)."""
        return {"model": self.spec.name, "depth": self.spec.depth, "seq_len": self.spec.seq_len,
                "seeds": list(self.seeds), "sequences": int(self.rho.shape[1]),
                "compared": "all tokens" if self.rho_last is None else f"last {LAST_TOKENS} tokens",
                "max_error": float(self.error.max()), "mean_error": float(self.error.mean()),
                "theory": self.theory.tolist(), "rho_mean": self.rho_mean.tolist(),
                "rho_std": self.rho_std.tolist(), "y2_mean": self.y2.mean(axis=(0, 1)).tolist()}


def simulate_model(spec, *, seeds=(0, 1, 2, 3), sequences=2, dtype="float32", device=None, theory=None,
                   progress=None, store=None) -> ModelMeasurement:
    """Measure a model's per-layer cosine at random initialisation over several seeds.

    Parameters
    ----------
    spec : ModelSpec or config
    seeds : sequence of int
        Initialisation seeds (one model each).
    sequences : int
        Random input sequences (or images) per model.
    dtype, device
        As in :func:`build_model`.
    theory : array_like, optional
        Prediction to compare with (default: from :func:`remprop.diagrams.diagnose`).
    progress : callable, optional
        Called with each finished seed.
    store : str or Path, optional
        Folder that keeps one record per finished seed (atomic JSON files, see
        :class:`~remprop.validation.cell_store.CellStore`): an interrupted run resumes there,
        computing only the seeds it lacks; a folder of a different model, ``sequences`` or
        ``dtype`` is refused with a ``ValueError``.

    Returns
    -------
    ModelMeasurement

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(d) (theory against simulated BERT).
    """
    spec = _as_spec(spec)
    seeds = tuple(check_positive_int("seeds", s, 0) for s in np.atleast_1d(seeds).tolist())
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    sequences = check_positive_int("sequences", sequences)
    if theory is None:
        from remprop.diagrams import diagnose

        theory = diagnose(spec).compared_rho
    theory = np.asarray(theory, dtype=np.float64)
    if theory.shape != (spec.depth + 1,):
        raise ValueError(f"theory must have shape ({spec.depth + 1},), got {theory.shape}")
    cells = None
    if store is not None:
        manifest = {"format": "remprop.simulate_model/1", "model": spec.to_dict(), "sequences": sequences,
                    "dtype": str(dtype), "last_tokens": LAST_TOKENS if spec.causal else None}
        cells = CellStore(store, to_jsonable(manifest))
    rows = {"rho": [], "q": [], "p": [], "y2": [], "rho_last": []}
    for seed in seeds:
        key = f"seed-{seed}"
        if cells is not None and key in cells.done():
            record = cells.read(key)
        else:
            record = _measure_seed(spec, seed, sequences, dtype, device)
            if cells is not None:
                cells.write(key, record)
        for name, value in record.items():
            rows[name].append(np.asarray(value, dtype=np.float64))
        if progress is not None:
            progress(seed)
    stack = {name: np.stack(values) for name, values in rows.items() if values}
    return ModelMeasurement(spec=spec, seeds=seeds, rho=stack["rho"], q=stack["q"], p=stack["p"], y2=stack["y2"],
                            rho_last=stack.get("rho_last"), theory=theory)



def _measure_seed(spec, seed, sequences, dtype, device) -> dict:
    """Per-layer statistics of one initialisation, as JSON-ready lists."""
    model = build_model(spec, seed=seed, dtype=dtype, device=device)
    inputs = model_inputs(spec, sequences, seed=seed, device=next(model.parameters()).device)
    trace = probe(model, inputs)
    record = {name: getattr(trace, name).tolist() for name in ("rho", "q", "p", "y2")}
    if spec.causal:
        record["rho_last"] = probe(model, inputs, last=min(LAST_TOKENS, spec.seq_len)).rho.tolist()
    return record
