"""Real Hugging Face models at random initialisation, measured against the theory.

:func:`build_model` instantiates a ``transformers`` model from the configuration behind
a :class:`~remprop.theory.ModelSpec` with the library's own default initialisation (no
weights are downloaded); :func:`simulate_model` pushes random inputs through several
initialisations, reads every layer with :func:`~remprop.validation.probe`, and compares
the mean cosine per layer with the prediction of :func:`remprop.diagrams.diagnose`
(causal models: the mean over the last 50 positions, docs/theory.md section 8).

Inputs are what the theory's input state assumes: token ids drawn uniformly from the
vocabulary (BERT, RoBERTa, GPT-2, the LLaMA-style decoders; one token type), or i.i.d.
Gaussian pixels of the spec's ``pixel_std`` (ViT).

The LLaMA-style decoders (``LlamaModel``, ``MistralModel``, ``Qwen2Model``, ``Phi3Model``, ``Gemma2Model``,
``Olmo2Model``: RMSNorm, gated MLPs, rotary positions, grouped keys and values, branch norms, QK-norm) are
built the same way; :func:`reduced_spec` shrinks any model (depth, width, MLP width, heads, key/value heads)
by editing its configuration and reading it again with :func:`remprop.theory.model_spec`, so the reduced
theory and the reduced module come from one configuration. :func:`first_layer_participation` is the REM's
participation ratio of the first attention layer as the probe measures it (the check of the translation
``beta = r^2 d / sqrt(log T)``), and :func:`simulate_blocks` measures the theory's own blocks in torch at a
model's sizes, which separates a translation error from an error of the maps (docs/real_models.md section 5).

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from remprop.theory import ModelSpec, model_spec
from remprop.theory.causal import LAST_TOKENS, compared_last_tokens
from remprop.theory.checks import check_depth

from remprop._json import to_jsonable
from remprop.progress import progress_bar

from .agreement import agreement
from .backend import check_positive_int, resolve_device, resolve_dtype
from .experiments.cell_store import stored_manifest
from .experiments.seed_records import seed_key, seed_record, seed_store, stored_measurement
from .probing import probe
from .probing.discovery import find_blocks
from . import streamed_layers

__all__ = ["build_model", "model_config", "model_inputs", "simulate_model", "ModelMeasurement", "LAST_TOKENS",
           "reduced_spec", "first_layer_participation", "simulate_blocks", "streamed_model", "model_bytes",
           "needs_streaming", "measure_inputs"]

#: Configuration fields of (depth, width, MLP width, heads) per family (default: the BERT/LLaMA names).
_SIZE_FIELDS = {"gpt2": ("n_layer", "n_embd", "n_inner", "n_head")}
_DEFAULT_SIZE_FIELDS = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads")


def _transformers():
    try:
        import transformers
    except ImportError as err:  # pragma: no cover - the validation extra installs it
        raise ImportError("the Hugging Face models need transformers: pip install 'remprop[validation]'") from err
    return transformers


def _run_arguments(spec, seeds, sequences, theory):
    """The checked ``(spec, seeds, sequences, theory)`` of :func:`simulate_model` and :func:`simulate_blocks`."""
    spec = _as_spec(spec)
    seeds = tuple(check_positive_int("seeds", s, 0) for s in np.atleast_1d(seeds).tolist())
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    return spec, seeds, check_positive_int("sequences", sequences), _theory_of(spec, theory)


def _as_spec(spec) -> ModelSpec:
    return spec if isinstance(spec, ModelSpec) else model_spec(spec)


def reduced_spec(spec, *, depth=None, width=None, d_ff=None, heads=None, kv_heads=None) -> ModelSpec:
    """The same model at another size, read again from its edited configuration.

    The configuration's size fields change and nothing else (initializer range, norm eps,
    RoPE base, vocabulary, ...); :func:`remprop.theory.model_spec` reads the edited
    configuration, so the theory (``beta = r^2 d / sqrt(log T)``, ``sigma_w2_out = r^2 d_ff``, the
    input state) and the module that :func:`build_model` instantiates describe the same
    reduced model. The sequence length and ``pixel_std`` are kept.

    Parameters
    ----------
    spec : ModelSpec or config
        What :func:`remprop.theory.model_spec` returns or accepts.
    depth : int, optional
        Number of blocks (default: unchanged).
    width : int, optional
        Model width d (default: unchanged).
    d_ff : int, optional
        MLP width (default: unchanged if the width is, else scaled with it:
        ``round(d_ff d_new / d)``).
    heads : int, optional
        Attention heads, dividing the width (default: unchanged if the width is, else the
        number that keeps the head width ``d_H``, which must then divide the new width).
    kv_heads : int, optional
        Key/value heads of a grouped-query model (``num_key_value_heads``), dividing
        ``heads`` (default: the largest divisor of ``heads`` not above
        ``heads H_kv / H``, at least 1: the group size kept where it divides). Only for
        models with that field.

    Returns
    -------
    ModelSpec

    Raises
    ------
    ValueError
        Naming the parameter whose value cannot be built (``width`` not a multiple of
        the head width, ``heads`` not dividing ``width``, ...).

    Examples
    --------
    >>> from remprop.validation.hf_models import reduced_spec
    >>> small = reduced_spec("llama-3.2-1b", depth=4, width=256)
    >>> small.depth, small.width, small.heads, small.d_ff, small.config["num_key_value_heads"]
    (4, 256, 4, 1024, 1)
    """
    spec = _as_spec(spec)
    cfg = spec.resized_config()
    depth_field, width_field, ff_field, heads_field = _SIZE_FIELDS.get(spec.family, _DEFAULT_SIZE_FIELDS)
    grouped = cfg.get("num_key_value_heads") is not None or cfg.get("head_dim") is not None
    old_width, old_heads = spec.width, spec.heads
    head_dim = int(cfg.get("head_dim") or old_width // old_heads)
    new_width = old_width if width is None else check_positive_int("width", width, 2)
    if heads is None:
        if new_width == old_width:
            heads = old_heads
        elif new_width % head_dim:
            raise ValueError(f"width ({new_width}) must be a multiple of the head width d_H = {head_dim} of "
                             f"{spec.name}, or give heads")
        else:
            heads = new_width // head_dim
    heads = check_positive_int("heads", heads)
    if new_width % heads:
        raise ValueError(f"heads ({heads}) must divide the width ({new_width})")
    if d_ff is None:
        d_ff = spec.d_ff if new_width == old_width else max(1, round(spec.d_ff * new_width / old_width))
    cfg.update({width_field: new_width, heads_field: heads, ff_field: check_positive_int("d_ff", d_ff)})
    if depth is not None:
        cfg[depth_field] = check_depth(depth)
    if grouped:
        if (new_width, heads) != (old_width, old_heads):  # the heads split the new width (Gemma's need not)
            cfg["head_dim"] = new_width // heads
        old_kv = int(cfg.get("num_key_value_heads") or old_heads)
        if kv_heads is None:
            target = max(1, heads * old_kv // old_heads)
            kv_heads = max(k for k in range(1, target + 1) if heads % k == 0)
        kv_heads = check_positive_int("kv_heads", kv_heads)
        if heads % kv_heads:
            raise ValueError(f"kv_heads ({kv_heads}) must divide heads ({heads})")
        cfg["num_key_value_heads"] = kv_heads
    elif kv_heads is not None:
        raise ValueError(f"kv_heads: {spec.name} ({spec.family}) has no key/value heads of its own "
                         "(num_key_value_heads)")
    return model_spec(cfg, seq_len=spec.seq_len, pixel_std=spec.pixel_std)


def first_layer_participation(spec) -> float:
    r"""The REM's participation ratio of the first attention layer, as the probe averages it.

    The first attention sees the embeddings' state ``(q0, q0 rho0)`` (post-LN blocks), or
    its normalisation ``(1, rho0)`` shrunk by the norm's eps to ``q0 / (q0 + eps)``
    (pre-LN and pre-RMSNorm blocks), at the heads' beta
    (:meth:`~remprop.theory.Architecture.effective_beta`; with QK-norm at that state). Encoder rows hold T keys:
    ``Y2 = Y2_exact(beta; q, p; T)``. Causal rows (docs/theory.md section 8): row t holds t
    keys, row 1 attends to itself, and the probe averages over the T rows,

    .. math:: \bar Y_2 = \frac1T\Big(1 + \sum_{t=2}^{T} Y_2(t)\Big),

    with :func:`~remprop.theory.causal_participation_ratio` (rotary positions: its
    ``cbar_t``, docs/theory.md section 15).

    Parameters
    ----------
    spec : ModelSpec or config

    Returns
    -------
    float

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (the REM); docs/real_models.md (the check).
    """
    from remprop.theory import causal_participation_ratio, participation_moment
    from remprop.theory.causal import row_rope_correlation

    spec = _as_spec(spec)
    arch = spec.architecture
    q, p = arch.attention_input(spec.q0, spec.q0 * spec.rho0)
    if arch.norm.normalises_branch_inputs:
        shrink = spec.q0 / (spec.q0 + spec.layer_norm_eps)
        q, p = q * shrink, p * shrink
    seq_len = spec.seq_len
    if arch.qk_norm:  # the head's beta depends on the state it normalises
        beta = float(arch.effective_beta(spec.beta, q=q, p=p))
    else:
        beta = float(arch.effective_beta(spec.beta))
    # the keys overlap p cbar (rotary positions, partial rotary mixed in; 1 without): cbar_t of row t if causal
    if spec.causal:
        positions = np.arange(2, seq_len + 1)
        rows = [float(causal_participation_ratio(beta, q, p * cbar, t, seq_len))
                for t, cbar in zip(positions, row_rope_correlation(arch, seq_len, positions))]
        return (1.0 + sum(rows)) / seq_len
    return float(participation_moment(beta, q, p * arch.mean_rope_correlation, seq_len))


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
        ``AutoModel.from_config(config)`` (``BertModel``, ``RobertaModel``, ``GPT2Model``, ``ViTModel``,
        ``LlamaModel``, ``MistralModel``, ``Qwen2Model``, ``Phi3Model``, ``Gemma2Model``, ``Olmo2Model``:
        the blocks without a language-model head) in eval mode, dropout off. The weights are drawn on
        ``device`` (on CUDA the same seed gives other numbers than on the CPU, from the same distribution).
    """
    spec = _as_spec(spec)
    transformers = _transformers()
    config = model_config(spec)
    device = resolve_device(device)
    seed = check_positive_int("seed", seed, 0)
    devices = [device] if device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices), device:  # drawn where it runs (a CUDA seed draws other numbers)
        torch.manual_seed(seed)
        model = transformers.AutoModel.from_config(config)
    return model.to(device=device, dtype=resolve_dtype(dtype)).eval()


def model_config(spec):
    """The ``transformers`` configuration of ``spec`` (``AutoConfig.for_model`` of its family and
    fields, without the hub's bookkeeping fields)."""
    spec = _as_spec(spec)
    cfg = {k: v for k, v in spec.config.items() if k not in ("model_type", "_name_or_path", "architectures",
                                                               "transformers_version", "torch_dtype", "dtype",
                                                               "_full_size")}
    return _transformers().AutoConfig.for_model(spec.family, **cfg)


def streamed_model(spec, *, seed=0, dtype="float32", device=None):
    """A model of ``spec`` that holds one block, redrawn for each of its ``spec.depth`` layers.

    The same random model as :func:`build_model`'s, layer by layer, in the memory of the embedding
    and one block (:mod:`remprop.validation.streamed_layers`).

    Parameters
    ----------
    spec : ModelSpec or config
        A LLaMA-style decoder whose blocks the library draws with every linear weight
        ``N(0, r^2)`` and every other tensor constant.
    seed : int
        Initialisation seed: the embedding comes from it (:func:`build_model` with one block, whose
        draw is checked), layer l's weights from ``seed`` and l.
    dtype, device
        As in :func:`build_model`.

    Returns
    -------
    torch.nn.Module
        The ``transformers`` model, its blocks replaced by ``spec.depth``
        :class:`~remprop.validation.streamed_layers.RedrawnLayer` entries
        (:func:`~remprop.validation.streamed_layers.stream_blocks`).

    Raises
    ------
    ValueError
        The block is drawn otherwise or not found (:func:`~remprop.validation.streamed_layers.stream_blocks`).

    Notes
    -----
    Layers of different attention types (Gemma 2's alternating sliding-window and global layers)
    stream too: the model's forward picks each layer's mask from ``config.layer_types`` of the full
    depth, which the stream keeps.
    """
    spec = _as_spec(spec)
    config = model_config(spec)  # the full depth's per-layer attention types, read by the forward
    layer_types = getattr(config, "layer_types", None)
    seed = check_positive_int("seed", seed, 0)
    model = build_model(spec.with_depth(1), seed=seed, dtype=dtype, device=device)
    return streamed_layers.stream_blocks(model, spec.depth, init_range=spec.init_range, seed=seed,
                                         layer_types=layer_types)


def model_bytes(spec, dtype="float32") -> int:
    """Bytes of the parameters of ``spec``'s full model in ``dtype``, counted on the ``meta`` device
    (:func:`~remprop.validation.streamed_layers.parameter_bytes`; nothing is allocated)."""
    return streamed_layers.parameter_bytes(model_config(spec), dtype)


def needs_streaming(spec, dtype="float32", device=None) -> bool:
    """Whether ``spec``'s full model takes more than
    :data:`~remprop.validation.streamed_layers.MEMORY_FRACTION` of the memory available on ``device``
    (:func:`~remprop.validation.streamed_layers.available_memory`); :func:`simulate_model` then
    streams its blocks (:func:`streamed_model`)."""
    return model_bytes(spec, dtype) > streamed_layers.MEMORY_FRACTION * streamed_layers.available_memory(device)


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
    """Per-layer statistics of a model over several seeds (initialisations, or input draws of its own weights).

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
    streamed : bool
        Measured one block at a time, the block redrawn per layer (:func:`streamed_model`).
    seed_draws : {"initialisations", "input draws"}
        What a seed draws (:data:`~remprop.validation.agreement.SEED_DRAWS`).
    """

    spec: ModelSpec
    seeds: tuple
    rho: np.ndarray
    q: np.ndarray
    p: np.ndarray
    y2: np.ndarray
    rho_last: np.ndarray | None
    theory: np.ndarray = field(repr=False)
    streamed: bool = False
    seed_draws: str = "initialisations"

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
        """Spread over seeds (``seed_draws``): std over seeds of the per-seed means, per layer."""
        per_seed = self.compared.mean(axis=1)
        return per_seed.std(axis=0, ddof=1) if len(self.seeds) > 1 else np.zeros(per_seed.shape[1])

    @property
    def error(self) -> np.ndarray:
        """``|measured mean - theory|`` per layer."""
        return np.abs(self.rho_mean - self.theory)

    @property
    def z(self) -> np.ndarray:
        """``(measured mean - theory) / (rho_std / sqrt(seeds))`` per layer: the error in standard errors
        (NaN with one seed, or where the seeds agree exactly, as the input layer of a fixed state)."""
        with np.errstate(divide="ignore", invalid="ignore"):
            z = (self.rho_mean - self.theory) / (self.rho_std / np.sqrt(len(self.seeds)))
        return np.where(self.rho_std > 0, z, np.nan)

    def summary(self) -> dict:
        """Max and mean error over layers, the largest ``|z|``, the ``agreement`` of the one rule
        (:func:`~remprop.validation.agreement.agreement`), the first layer's participation
        ratio against :func:`first_layer_participation`, and the per-layer curves (JSON-ready)."""
        z = np.abs(self.z)
        y2_first = self.y2[:, :, 0].mean(axis=1)
        return {"model": self.spec.name, "depth": self.spec.depth, "width": self.spec.width,
                "heads": self.spec.heads, "seq_len": self.spec.seq_len,
                "seeds": list(self.seeds), "seed_draws": self.seed_draws, "sequences": int(self.rho.shape[1]),
                "streamed": self.streamed,
                "compared": ("all tokens" if self.rho_last is None
                             else f"last {compared_last_tokens(self.spec.seq_len)} tokens"),
                "max_error": float(self.error.max()), "mean_error": float(self.error.mean()),
                "max_abs_z": float(np.nanmax(z)) if np.isfinite(z).any() else None, "agreement": agreement(
                    self.theory, self.compared.reshape(-1, self.theory.size), sequences_per_seed=self.rho.shape[1],
                    seed_draws=self.seed_draws),
                "y2_first": float(y2_first.mean()),
                "y2_first_std": float(y2_first.std(ddof=1)) if len(self.seeds) > 1 else 0.0,
                "y2_first_theory": first_layer_participation(self.spec),
                "theory": self.theory.tolist(), "rho_mean": self.rho_mean.tolist(),
                "rho_std": self.rho_std.tolist(), "y2_mean": self.y2.mean(axis=(0, 1)).tolist()}


def simulate_model(spec, *, seeds=(0, 1, 2, 3), sequences=2, dtype="float32", device=None, theory=None,
                   progress=None, store=None, streamed=None) -> ModelMeasurement:
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
    progress : bool or callable, optional
        True: the progress over the simulated layers (every seed's blocks, twice for a causal
        model) on stderr, with its ETA (:func:`remprop.progress.progress_bar`: a bar on a
        terminal, timestamped lines in a log); a callable is called with each finished seed.
    store : str or Path, optional
        Folder that keeps one record per finished seed (atomic JSON files, see
        :class:`~remprop.validation.experiments.cell_store.CellStore`): an interrupted run resumes there,
        computing only the seeds it lacks; a folder of a different model, ``sequences`` or
        ``dtype`` is refused with a ``ValueError``.
    streamed : bool, optional
        Hold one block and redraw it for every layer
        (:func:`streamed_model`): the same random model layer by
        layer, in the memory of the embedding and one block. Default: only where the full model's
        parameters would take more than half the memory available on the device
        (:func:`needs_streaming`), or as the existing
        ``store`` was measured (a resumed run does not depend on the memory free today).

    Returns
    -------
    ModelMeasurement

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(d) (theory against simulated BERT).
    """
    spec, seeds, sequences, theory = _run_arguments(spec, seeds, sequences, theory)
    if streamed is None:
        streamed = _stored_streaming(store)
        if streamed is None:
            streamed = needs_streaming(spec, dtype, device)
    elif not isinstance(streamed, bool):
        raise ValueError(f"streamed must be None, True or False, got {streamed!r}")
    cells = None
    if store is not None:
        manifest = {"format": "remprop.simulate_model/1", "model": spec.to_dict(), "sequences": sequences,
                    "dtype": str(dtype), "last_tokens": compared_last_tokens(spec.seq_len) if spec.causal else None}
        if streamed:  # a store of the full model stays readable: the key is there only when streamed
            manifest["streamed"] = True
        names = ("rho", "q", "p", "y2") + (("rho_last",) if spec.causal else ())
        cells = seed_store(store, to_jsonable(manifest), names=names, sequences=sequences)
    rows = {"rho": [], "q": [], "p": [], "y2": [], "rho_last": []}
    per_seed = spec.depth * (2 if spec.causal else 1)  # blocks run per seed: twice for the last tokens
    with progress_bar(len(seeds) * per_seed, desc=f"simulate {spec.name}", unit="layer",
                      enabled=progress is True) as bar:
        for seed in seeds:
            record = None if cells is None else stored_measurement(cells, seed)  # checked; damaged: None
            if record is not None:
                bar.update(per_seed)
            else:
                record = _measure_seed(spec, seed, sequences, dtype, device, streamed, advance=bar.update)
                if cells is not None:
                    cells.write(seed_key(seed), seed_record(seed, record))
            for name, value in record.items():
                rows[name].append(np.asarray(value, dtype=np.float64))
            if callable(progress):
                progress(seed)
    stack = {name: np.stack(values) for name, values in rows.items() if values}
    return ModelMeasurement(spec=spec, seeds=seeds, rho=stack["rho"], q=stack["q"], p=stack["p"], y2=stack["y2"],
                            rho_last=stack.get("rho_last"), theory=theory, streamed=streamed)


def simulate_blocks(spec, *, seeds=(0, 1, 2, 3), sequences=2, dtype="float32", device=None,
                    theory=None) -> ModelMeasurement:
    """The theory's own blocks at a model's sizes, measured like the model (:func:`simulate_model`).

    A :class:`~remprop.validation.SimulatedStack` of ``spec.architecture`` (the block tree
    of :meth:`~remprop.theory.Architecture.block`, run in torch) at the model's beta,
    depth, width, MLP width, sequence length, norm eps and causal mask, fed Gaussian tokens
    with the model's input state ``(q0, q0 rho0)``
    (:func:`~remprop.validation.inputs.gaussian_tokens`), and measured per layer on all
    tokens and (causal) on the last :data:`LAST_TOKENS`. Set beside :func:`simulate_model`
    it separates the two ways a prediction can miss a real model: where the simulated
    blocks agree with the theory but not with the module, the translation of the
    configuration misses something of the module; where they agree with the module, the
    maps miss something of the blocks (finite width, causal rows). The simulated heads split
    the width: a model whose heads do not (Gemma 2: 8 x 256 against 2304) is simulated in a
    :func:`reduced_spec` version where they do (a ValueError names ``head_dim`` otherwise).

    Parameters
    ----------
    spec : ModelSpec or config
    seeds, sequences, dtype, device, theory
        As in :func:`simulate_model`.

    Returns
    -------
    ModelMeasurement

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (the simulated blocks of the reference experiments).
    """
    from .inputs import gaussian_tokens
    from .measurements import attention_statistics, last_tokens_statistics, token_statistics
    from .settings import SimulationSettings
    from .simulator import SimulatedStack

    spec, seeds, sequences, theory = _run_arguments(spec, seeds, sequences, theory)
    sim = SimulationSettings(width=spec.width, seq_len=spec.seq_len, d_ff=spec.d_ff, causal=spec.causal, dtype=dtype,
                             device=device, layer_norm_eps=spec.layer_norm_eps)
    last = compared_last_tokens(spec.seq_len) if spec.causal else None
    rows = {"rho": [], "q": [], "p": [], "y2": [], "rho_last": []}
    for seed in seeds:
        stack = SimulatedStack(spec.architecture, spec.beta, spec.depth, sim=sim, seed=seed)
        x = gaussian_tokens(spec.q0, spec.rho0, count=sequences, seq_len=spec.seq_len, width=spec.width,
                            seed=seed, dtype=dtype, device=stack.device).tokens
        tokens, window, attention = [], [], []

        def observe(layer, hidden, probs):
            tokens.append({k: v.cpu().numpy() for k, v in token_statistics(hidden).items()})
            if last is not None:
                window.append(last_tokens_statistics(hidden, last)["rho"].cpu().numpy())
            if probs is not None:
                attention.append(attention_statistics(probs)["y2"].cpu().numpy())

        stack.forward(x, observe=observe)
        for name in ("rho", "q", "p"):
            rows[name].append(np.stack([t[name] for t in tokens], axis=1))
        rows["y2"].append(np.stack(attention, axis=1))
        if last is not None:
            rows["rho_last"].append(np.stack(window, axis=1))
    stack = {name: np.stack(values).astype(np.float64) for name, values in rows.items() if values}
    return ModelMeasurement(spec=spec, seeds=seeds, rho=stack["rho"], q=stack["q"], p=stack["p"], y2=stack["y2"],
                            rho_last=stack.get("rho_last"), theory=theory)


def _stored_streaming(store):
    """Whether the seeds in ``store`` were measured streamed (None: no readable store there)."""
    manifest = None if store is None else stored_manifest(store)
    return None if manifest is None else bool(manifest.get("streamed", False))


def _theory_of(spec, theory):
    """The predicted cosine per layer: ``theory`` checked, or :func:`remprop.diagrams.diagnose`'s."""
    if theory is None:
        from remprop.diagrams import diagnose

        theory = diagnose(spec).compared_rho
    theory = np.asarray(theory, dtype=np.float64)
    if theory.shape != (spec.depth + 1,):
        raise ValueError(f"theory must have shape ({spec.depth + 1},), got {theory.shape}")
    return theory


def _measure_seed(spec, seed, sequences, dtype, device, streamed=False, advance=None) -> dict:
    """Per-layer statistics of one initialisation (:func:`measure_inputs` on the model drawn with ``seed``)."""
    model = (streamed_model if streamed else build_model)(spec, seed=seed, dtype=dtype, device=device)
    return measure_inputs(spec, model, seed, sequences, advance)


def measure_inputs(spec, model, seed, sequences, advance=None) -> dict:
    """Per-layer ``rho``, ``q``, ``p``, ``y2`` (causal: ``rho_last``) of ``model`` on the inputs :func:`model_inputs`
    draws with ``seed`` (JSON-ready lists); ``advance(1)`` after each block (a hook on the probe's blocks)."""
    inputs = model_inputs(spec, sequences, seed=seed, device=next(model.parameters()).device)

    def block_done(*_):  # returns None: a forward hook's value would replace the block's output
        advance(1)            # (a tqdm bar's update returns a bool)

    hooks = [] if advance is None else [block.register_forward_hook(block_done)
                                        for block in find_blocks(model, None)[0]]
    try:
        trace = probe(model, inputs)
        record = {name: getattr(trace, name).tolist() for name in ("rho", "q", "p", "y2")}
        if spec.causal:
            record["rho_last"] = probe(model, inputs, last=compared_last_tokens(spec.seq_len)).rho.tolist()
    finally:
        for hook in hooks:
            hook.remove()
    return record
