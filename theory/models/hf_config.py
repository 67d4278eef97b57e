"""From a Hugging Face model configuration to the theory's parameters.

A ``transformers`` configuration (an object with ``to_dict()``, a dict, a path to a
``config.json`` or to the folder holding one, or the name of a configuration shipped
with remprop) fixes everything the theory needs once the library's default
initialisation is known. ``transformers`` draws every linear and embedding weight
from ``N(0, r^2)`` with ``r = initializer_range``, zeroes every bias and sets the
LayerNorm gains to 1 and shifts to 0 (``PreTrainedModel._init_weights``); GPT-2 draws
the two residual output projections (``attn.c_proj``, ``mlp.c_proj``) with
``r / sqrt(2 n_layer)`` instead. LLaMA-style decoders (``model_type`` llama, mistral,
qwen2) draw the same ``N(0, r^2)`` and set the RMSNorm gains to 1: pre-RMSNorm blocks with a
gated SiLU MLP (``Architecture(norm="pre", norm_type="rms", mlp="gated")``, docs/theory.md
section 14) and rotary positions (``positions="rope"``, ``rope_base = rope_theta``, or the
``rope_theta`` of ``rope_parameters`` where ``transformers`` >= 5 moved it,
``head_dim = d / H``, docs/theory.md section 15). In the engine's parameters (``d`` the width, ``d_ff``
the MLP width, ``T`` the sequence length):

==========================  ==================================================
query/key scale             ``beta = r^2 d / sqrt(log T)`` (``qk_scaling="model"``:
                            ``Var(W_Q) = r^2`` for every head, scores over ``sqrt(d_H)``)
values                      ``sigma_v2 = r^2 d``
output projection ``W_O``   ``sigma_o2 = r^2 d`` (GPT-2: ``r^2 d / (2 L)``)
MLP                         ``sigma_w2 = r^2 d``, ``sigma_w2_out = r^2 d_ff``
                            (GPT-2: ``r^2 d_ff / (2 L)``; gated: gate and up
                            ``r^2 d``, down ``r^2 d_ff``)
biases                      ``sigma_b2 = 0``
skips                       ``alpha_sa = alpha_mlp = 1``
==========================  ==================================================

The input state is that of the embeddings: BERT-like models add word, position and
token-type embeddings (each ``N(0, r^2)``) and normalise, so every token carries the
same token-type vector: ``q0 = 1``, ``rho0 = (1 + 1/V) / 3`` for uniformly drawn ids
from a vocabulary of ``V``. GPT-2 adds word and position embeddings without
normalising: ``q0 = 2 r^2``, ``rho0 = 1/(2V)``. LLaMA-style models embed words only
(rotary positions act on queries and keys): ``q0 = r^2``, ``rho0 = 1/V``. ViT embeds i.i.d. pixels of variance
``s^2`` by a ``C P^2 -> d`` patch projection and adds positions:
``q0 = r^2 (C P^2 s^2 + 1)``, ``rho0 = 0``.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333 (theory); the initialisation
facts are those of ``transformers`` (``PreTrainedModel._init_weights`` and the
``_init_weights`` of ``GPT2PreTrainedModel``, ``ViTPreTrainedModel`` and
``LlamaPreTrainedModel``). The shipped LLaMA-style configurations copy the sizes of the
published ``config.json`` files on the Hugging Face hub (meta-llama/Llama-3.2-1B,
meta-llama/Meta-Llama-3-8B, mistralai/Mistral-7B-v0.1, Qwen/Qwen2.5-0.5B,
HuggingFaceTB/SmolLM2-135M); a file's ``_source`` names the published file its values were
checked against (the reader ignores it).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..architecture import Architecture
from ..checks import check_regular_file, did_you_mean
from ..rem import ROPE_BASE, check_seq_len, query_key_variance
from ..settings import RunSettings
from .measured_weights import input_state, weight_parameters
from .windows import config_windows, window_note

__all__ = ["ModelSpec", "standard_spec", "load_hf_config", "shipped_configs", "BLOCK_ORDERS", "CONFIG_DIR",
           "vit_patch_inputs"]

#: Folder of the configurations shipped with remprop (sizes and init ranges: facts).
CONFIG_DIR = Path(__file__).with_name("configs")
#: Configuration field that keeps the size of a resized model's original (ModelSpec.full_size).
_FULL_SIZE = "_full_size"

#: Names that stand for a shipped configuration.
ALIASES = {"bert-base-uncased": "bert-base", "bert-base-cased": "bert-base", "bert-large-uncased": "bert-large",
           "gpt2-small": "gpt2", "openai-community/gpt2": "gpt2", "google/vit-base-patch16-224": "vit-base",
           "FacebookAI/roberta-base": "roberta-base", "openai-community/gpt2-medium": "gpt2-medium",
           "meta-llama/Llama-3.2-1B": "llama-3.2-1b", "meta-llama/Meta-Llama-3-8B": "llama-3-8b",
           "mistralai/Mistral-7B-v0.1": "mistral-7b", "Qwen/Qwen2.5-0.5B": "qwen2.5-0.5b",
           "HuggingFaceTB/SmolLM2-135M": "smollm2-135m", "microsoft/Phi-3-mini-4k-instruct": "phi-3-mini",
           "google/gemma-2-2b": "gemma-2-2b", "allenai/OLMo-2-0425-1B": "olmo-2-1b",
           # the hub names of the shipped Pythia configurations (remprop check EleutherAI/pythia-160m)
           **{f"EleutherAI/{path.stem}": path.stem for path in CONFIG_DIR.glob("pythia-*.json")}}

#: The block order of each family :func:`standard_spec` reads.
BLOCK_ORDERS = {"bert": "post", "roberta": "post", "gpt2": "pre", "vit": "pre", "llama": "pre", "mistral": "pre",
                "qwen2": "pre"}
#: Field names of a configuration: ``(width, depth, heads, eps, activation)`` and the defaults of ``eps`` and
#: ``activation``, by family (:func:`standard_spec`; every family also takes BERT's names).
_FIELDS = {
    "gpt2": ("n_embd", "n_layer", "n_head", "layer_norm_epsilon", "activation_function", 1e-5, "gelu_new"),
    "llama": ("hidden_size", "num_hidden_layers", "num_attention_heads", "rms_norm_eps", "hidden_act", 1e-6, "silu"),
    "bert": ("hidden_size", "num_hidden_layers", "num_attention_heads", "layer_norm_eps", "hidden_act", 1e-12, "gelu"),
}
#: The LLaMA-style families: pre-RMSNorm, gated MLP, rotary positions, no biases.
LLAMA_FAMILIES = ("llama", "mistral", "qwen2")

#: Hugging Face activation names -> the engine's activations (and whether it is exact).
_ACTIVATIONS = {"gelu": ("gelu", True), "gelu_new": ("gelu", False), "gelu_pytorch_tanh": ("gelu", False),
                "gelu_fast": ("gelu", False), "relu": ("relu", True), "silu": ("silu", True), "swish": ("silu", True),
                "tanh": ("tanh", True), "linear": ("linear", True)}


def shipped_configs() -> list:
    """Names of the configurations shipped with remprop (``remprop check NAME``)."""
    return sorted(path.stem for path in CONFIG_DIR.glob("*.json"))


def load_hf_config(config) -> dict:
    """The configuration as a plain dict.

    Parameters
    ----------
    config : transformers.PretrainedConfig, dict, str or os.PathLike
        A configuration object (anything with ``to_dict()``), a dict, the path of a ``config.json`` or of a
        folder that holds one, or a shipped name (:func:`shipped_configs`; a few hub names are aliases; an
        unknown name is refused naming the closest shipped one). Nothing is downloaded.
    """
    if hasattr(config, "to_dict") and callable(config.to_dict):
        out = dict(config.to_dict())
    elif isinstance(config, dict):
        out = dict(config)
    elif isinstance(config, (str, os.PathLike)):
        text = os.fspath(config)
        if not text.strip():
            raise ValueError(f"config: got an empty name {text!r} (expected a Hugging Face config.json, the folder "
                             "holding one, or a shipped name)")
        path = Path(text)
        if path.is_dir():
            if os.path.exists(path / "config.json"):  # a named pipe or a folder there is refused, never opened
                check_regular_file("config", path / "config.json")
            if not (path / "config.json").is_file():
                raise ValueError(f"config: the folder {text!r} holds no config.json (expected a Hugging Face "
                                 "config.json, the folder holding one, or a shipped name)")
            path = path / "config.json"
        elif os.path.exists(path):
            check_regular_file("config", path)
        if not path.is_file():
            shipped = CONFIG_DIR / f"{ALIASES.get(text, text)}.json"
            if not (text and shipped.is_file() and shipped.parent == CONFIG_DIR):
                hint = did_you_mean(text, [*shipped_configs(), *ALIASES])
                raise ValueError(f"config: no file {text!r} and no shipped configuration of that name{hint} "
                                 f"(shipped: {', '.join(shipped_configs())})")
            path = shipped
        try:
            out = json.loads(path.read_text())
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
            raise ValueError(f"config: cannot read {str(path)!r} as JSON (expected a Hugging Face config.json: "
                             f"{type(err).__name__}: {err})") from None
        if not isinstance(out, dict):
            raise ValueError(f"config: {str(path)!r} does not hold a JSON object")
        out.setdefault("_name_or_path", ALIASES.get(text, text) if path.parent == CONFIG_DIR else str(path))
    else:
        raise ValueError(f"config must be a transformers config, a dict, a path or a shipped name, "
                         f"got {type(config).__name__}")
    return out


@dataclass(frozen=True)
class ModelSpec:
    r"""A real model's architecture and initialisation in the engine's parameters.

    Attributes
    ----------
    name, family : str
        The configuration's name and ``model_type`` (``"bert"``, ``"roberta"``, ``"gpt2"``, ``"vit"``).
    settings : RunSettings
        The theory run of the model: its architecture (block order, activation,
        variances, skips, heads and ``seq_len = T``), the query/key scale of the
        library's init ``beta = r^2 d / sqrt(log T)``, the depth and the input state.
        ``architecture``, ``beta``, ``depth``, ``q0``, ``rho0``, ``seq_len`` and ``heads``
        read through to it (one copy of each).
    width, d_ff : int
    causal : bool
        Decoder (causal mask): GPT-2, or a BERT-like config with ``is_decoder = true``.
    init_range : float
        ``initializer_range`` r.
    embedding_layer_norm, final_layer_norm : bool
    layer_norm_eps : float
    hidden_act : str
        The library's activation name (``architecture.activation`` is the engine's).
    assumptions : tuple of str
        Where the model departs from the theory's assumptions, and how much.
    pixel_std : float
        ViT: the std of the i.i.d. input pixels behind ``q0`` (1 for token models).
    config : dict
        The configuration it was built from.
    weights : MeasuredWeights or None
        The scales measured on the model's own weights, when its parameters come from them
        (:func:`~remprop.theory.models.measured_weights.measured_spec`); None: the library's
        default initialisation.
    reader : callable or None
        What read the configuration, :func:`~remprop.theory.model_spec` (it sets it): :meth:`with_depth`
        reads the resized configuration with it, through the same table of readers.
    """

    name: str
    family: str
    settings: RunSettings
    width: int
    d_ff: int
    causal: bool
    init_range: float
    embedding_layer_norm: bool
    final_layer_norm: bool
    layer_norm_eps: float
    hidden_act: str
    assumptions: tuple
    pixel_std: float
    config: dict = field(repr=False)
    weights: object = field(default=None, repr=False)
    reader: object = field(default=None, repr=False, compare=False)

    # -- the run's settings, one copy each -----------------------------------------------
    architecture = property(lambda self: self.settings.arch, doc="The theory's Architecture.")
    beta = property(lambda self: self.settings.beta, doc="Query/key scale of the library's init.")
    depth = property(lambda self: self.settings.depth, doc="Number of blocks L.")
    q0 = property(lambda self: self.settings.q0, doc="Input mean squared norm of the first block.")
    rho0 = property(lambda self: self.settings.rho0, doc="Input mean cosine of the first block.")
    seq_len = property(lambda self: self.settings.arch.seq_len, doc="Sequence length T.")
    heads = property(lambda self: self.settings.arch.heads, doc="Attention heads H.")
    attention_windows = property(lambda self: config_windows(self.config, self.seq_len),
                                 doc="Per-layer attention masks (sliding windows, chunks), () for none, sizes clipped "
                                     "to T (:mod:`remprop.theory.models.windows`).")

    @property
    def initialisation(self) -> str:
        """The initialisation in words: the library's default, or the measured weights' source."""
        if self.weights is not None:
            return f"measured on the weights of {self.weights.source}"
        return (f"N(0, {self.init_range:g}^2) weights, zero biases"
                + (", residual projections / sqrt(2L)" if self.family == "gpt2" else ""))

    def with_settings(self, **changes) -> "ModelSpec":
        """The same model with some run settings changed (``arch``, ``beta``, ``q0``, ``rho0``, ...).

        Only the theory's view changes (e.g. ``remprop check --rho0``); use
        :meth:`with_depth` for a model with another layer count.
        """
        return dataclasses.replace(self, settings=self.settings.replace(**changes))

    def with_depth(self, depth) -> "ModelSpec":
        """The same model with ``depth`` blocks (e.g. a short version for quick checks).

        The configuration's layer count changes, so does everything that depends on it
        (GPT-2's ``r / sqrt(2L)`` residual projections).
        """
        from ..checks import check_depth

        if self.weights is not None:
            raise ValueError("depth: a model measured on its own weights has the depth of its weights "
                             f"({self.depth} layers)")
        key = _FIELDS.get(self.family, _FIELDS["bert"])[1]  # the depth field
        if self.reader is None:
            raise ValueError("depth: this spec was not read from a configuration (remprop.theory.model_spec)")
        config = self.resized_config(**{key: check_depth(depth)})
        return self.reader(config, seq_len=self.seq_len, pixel_std=self.pixel_std)

    def size(self) -> dict:
        """``{"depth": L, "width": d, "heads": H}`` of this spec."""
        return {"depth": self.depth, "width": self.width, "heads": self.heads}

    @property
    def full_size(self) -> dict | None:
        """The size (:meth:`size`) of the configuration this spec was resized from
        (:meth:`with_depth`, :func:`remprop.validation.hf_models.reduced_spec`); None when it
        was not. Figures and reports name a resized model with its own size."""
        full = self.config.get(_FULL_SIZE)
        return dict(full) if full is not None else None

    def resized_config(self, **fields) -> dict:
        """The configuration with ``fields`` changed, remembering the original size (:attr:`full_size`)."""
        return {**self.config, _FULL_SIZE: self.full_size or self.size(), **fields}

    def query_key_std(self, beta) -> np.ndarray:
        """The query/key weight std that gives ``beta``: ``sqrt(beta sqrt(log T) / d)``."""
        arch = self.architecture
        return np.sqrt(query_key_variance(beta, self.width, self.seq_len, arch.heads, arch.qk_scaling))

    def to_dict(self) -> dict:
        """JSON-ready summary (without the raw configuration)."""
        return {"name": self.name, "family": self.family, "architecture": self.architecture.to_dict(),
                "beta": self.beta, "depth": self.depth, "width": self.width, "d_ff": self.d_ff,
                "heads": self.heads, "seq_len": self.seq_len, "causal": self.causal,
                "init_range": self.init_range, "q0": self.q0, "rho0": self.rho0,
                "embedding_layer_norm": self.embedding_layer_norm, "final_layer_norm": self.final_layer_norm,
                "layer_norm_eps": self.layer_norm_eps, "hidden_act": self.hidden_act,
                "pixel_std": self.pixel_std, "assumptions": list(self.assumptions),
                "initialisation": self.initialisation,
                "weights": None if self.weights is None else self.weights.to_dict()}


def _get(cfg, *names, default=None, required=True):
    for name in names:
        if cfg.get(name) is not None:
            return cfg[name]
    if default is not None or not required:
        return default
    raise ValueError(f"config.{names[0]} is missing (model_type {cfg.get('model_type')!r})")


def _field(cfg, *names):
    """The first of ``names`` the config sets (the one :func:`_get` read), else the first name:
    the field an error blames."""
    return next((name for name in names if cfg.get(name) is not None), names[0])


def _positive_int(cfg, *names, default=None):
    value = _get(cfg, *names, default=default)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"config.{_field(cfg, *names)} must be a positive integer, got {value!r}")
    return int(value)


def vit_patch_inputs(cfg) -> int:
    """Inputs of a ViT's patch projection, ``C P^2`` (``num_channels``, default 3; ``patch_size``, 16)."""
    return _positive_int(cfg, "num_channels", default=3) * _positive_int(cfg, "patch_size", default=16) ** 2


def _positive_real(cfg, *names, default=None, allow_zero=False):
    value = _get(cfg, *names, default=default)
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ValueError(f"config.{_field(cfg, *names)} must be a real number, got {value!r}") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        raise ValueError(f"config.{_field(cfg, *names)} must be {'>= 0' if allow_zero else '> 0'}, got {value!r}")
    return value


#: The MLP width ``intermediate_size`` a ``transformers`` config of each model type takes when
#: its file leaves it out (the default of ``LlamaConfig``, ``MistralConfig``, ... in
#: transformers 5.x, e.g. 11008 for LLaMA whatever the width); GPT-2's ``n_inner = None``
#: means ``4 d``.
LIBRARY_D_FF = {"bert": 3072, "roberta": 3072, "vit": 3072, "llama": 11008, "mistral": 14336,
                "qwen2": 22016, "phi3": 8192, "gemma2": 9216, "olmo2": 11008, "gpt_neox": 24576}


def _with_library_defaults(cfg):
    """The config with ``intermediate_size`` set to its library default (:data:`LIBRARY_D_FF`)
    where it is left out, the model type whose default it is kept in ``_d_ff_default_of`` for
    the assumptions (Phi-3, Gemma 2 and OLMo 2, read through the LLaMA reader, keep their own)."""
    family = cfg.get("model_type")
    if family in LIBRARY_D_FF and cfg.get("intermediate_size") is None and cfg.get("n_inner") is None:
        cfg = dict(cfg, intermediate_size=LIBRARY_D_FF[family], _d_ff_default_of=family)
    return cfg


def _from_config(source, build):
    """``build()``, with a ValueError re-raised as one about the config field(s) ``source``.

    The quantities the translation derives (the Architecture's variances, beta, q0, the
    maximum length) are not the user's parameters: their errors start with the field they
    come from (``config.initializer_range = 1e200 gives an unusable model: sigma_w2 must be
    finite``), so that a command line never blames one of its options for them.
    """
    try:
        return build()
    except ValueError as err:
        raise ValueError(f"{source} gives an unusable model: {err}") from None


def standard_spec(cfg, *, seq_len=None, pixel_std=1.0) -> ModelSpec:
    """The reader of the families of :data:`BLOCK_ORDERS` (``model_type`` bert, roberta, gpt2, vit, llama,
    mistral, qwen2): ``cfg`` a loaded configuration (:func:`load_hf_config`, library defaults set) whose
    ``model_type`` is one of them. :func:`~remprop.theory.model_spec` reads every configuration through
    the table of readers (:data:`remprop.theory.models.readers.READERS`); the module docstring has the
    translation."""
    family = cfg.get("model_type")
    pixel_std = _positive_real({"pixel_std": pixel_std}, "pixel_std")
    gpt = family == "gpt2"
    llama = family in LLAMA_FAMILIES
    width_field, depth_field, heads_field, eps_field, act_field, eps_default, act_default = _FIELDS[
        "gpt2" if gpt else "llama" if llama else "bert"]
    width = _positive_int(cfg, width_field, "hidden_size")
    depth = _positive_int(cfg, depth_field, "num_hidden_layers")
    heads = _positive_int(cfg, heads_field, "num_attention_heads")
    if width % heads:
        raise ValueError(f"config: the number of heads ({heads}) must divide the width ({width})")
    if llama and cfg.get("head_dim") is not None and _positive_int(cfg, "head_dim") * heads != width:
        raise ValueError(f"config.head_dim ({cfg['head_dim']}) times num_attention_heads ({heads}) must equal "
                         f"hidden_size ({width}): the engine's heads split the width")
    d_ff = _positive_int(cfg, "n_inner", "intermediate_size", default=4 * width)
    r = _positive_real(cfg, "initializer_range", default=0.02)
    eps = _positive_real(cfg, eps_field, "layer_norm_eps", default=eps_default, allow_zero=True)
    act_name = str(_get(cfg, act_field, "hidden_act", default=act_default))
    if act_name not in _ACTIVATIONS:
        raise ValueError(f"config.{act_field} must be one of {', '.join(_ACTIVATIONS)}, got {act_name!r}")
    activation, exact_activation = _ACTIVATIONS[act_name]
    assumptions = []
    if cfg.get("_d_ff_default_of"):
        assumptions.append(f"intermediate_size is not in the config: d_ff = {d_ff}, the default of transformers' "
                           f"{cfg['_d_ff_default_of']} config whatever the width (not 4 d)")

    # sequence length and input state
    if family == "vit":
        image, patch = _positive_int(cfg, "image_size", default=224), _positive_int(cfg, "patch_size", default=16)
        max_len, length_field = (image // patch) ** 2 + 1, "image_size"
    elif llama:
        max_len, length_field = _positive_int(cfg, "max_position_embeddings", default=2048), "max_position_embeddings"
    elif gpt:
        max_len = _positive_int(cfg, "n_positions", "max_position_embeddings", default=1024)
        length_field = "n_positions" if cfg.get("n_positions") is not None else "max_position_embeddings"
    else:
        max_len = _positive_int(cfg, "max_position_embeddings", default=512) - (2 if family == "roberta" else 0)
        length_field = "max_position_embeddings"
    # the config's own maximum is checked here, naming its field (not the caller's seq_len)
    _from_config(f"config.{length_field}", lambda: check_seq_len(max_len, name="the model's maximum length"))
    seq_len = max_len if seq_len is None else check_seq_len(seq_len, allow_none=False)
    if seq_len > max_len:
        raise ValueError(f"seq_len must be <= {max_len} (the model's maximum), got {seq_len}")
    if family == "vit" and seq_len != max_len:
        raise ValueError(f"seq_len of a ViT is fixed by its image and patch sizes: {max_len}, got {seq_len}")

    causal = gpt or llama or bool(cfg.get("is_decoder"))
    if family in ("bert", "roberta"):
        position = cfg.get("position_embedding_type", "absolute")
        if position != "absolute":
            assumptions.append(f"position_embedding_type = {position!r} adds position terms to the scores; "
                               "the engine's attention has none (absolute position embeddings only)")
        vocab = _positive_int(cfg, "vocab_size")
        shared = 1.0 if _get(cfg, "type_vocab_size", default=2) >= 1 else 0.0
        # word, position and (shared by every token) token-type tables, then the LayerNorm
        q0, rho0 = _from_config("config.initializer_range", lambda: input_state(
            [r * r] * (2 + int(shared)), [r * r / vocab, 0.0] + [r * r] * int(shared), norm_gain2=1.0))
        assumptions.append(
            f"input: all tokens share one token-type embedding, so the normalised embeddings start at "
            f"rho0 = {rho0:.4f}, not 0 (uniformly drawn ids; repeated words raise it)")
    elif gpt:
        vocab = _positive_int(cfg, "vocab_size")
        q0, rho0 = _from_config("config.initializer_range", lambda: input_state([r * r, r * r], [r * r / vocab, 0.0]))
        if eps > 0:
            assumptions.append(
                f"LayerNorm eps = {eps:g} against the embeddings' q0 = 2 r^2 = {q0:.2g}: the first "
                f"LayerNorm outputs q = {q0 / (q0 + eps):.4f}, not 1 (the engine's LayerNorm has no eps)")
        if cfg.get("scale_attn_by_inverse_layer_idx"):
            assumptions.append("scale_attn_by_inverse_layer_idx = true divides layer l's scores by l: "
                               "the engine uses one beta for all layers (that of layer 1)")
        if cfg.get("scale_attn_weights") is False:
            assumptions.append("scale_attn_weights = false: scores are not divided by sqrt(d_H); "
                               "the engine's beta assumes they are")
    elif llama:
        q0, rho0, notes = _llama_input_and_notes(cfg, r, eps, heads, seq_len)
        assumptions.extend(notes)
    else:
        patch_dim = vit_patch_inputs(cfg)
        q0, rho0 = r * r * (patch_dim * pixel_std ** 2 + 1.0), 0.0
        assumptions.append(
            f"input: i.i.d. pixels of std {pixel_std:g} give rho0 = 0; natural images share a mean "
            f"colour and start with rho0 > 0 (remprop check --rho0)")
        assumptions.append(
            f"the [CLS] token (q = 2 r^2 = {2 * r * r:.2g}) is 1 of {seq_len} tokens and does not share the "
            f"patch tokens' norm (q0 = {q0:.3g})")

    if not exact_activation:
        assumptions.append(f"{act_name} (tanh approximation of GELU) is modelled by the exact GELU "
                           f"x Phi(x) (largest difference about 5e-4)")
    assumptions.append(
        "the attention output projection W_O is modelled (the reference experiments removed it): "
        f"it scales the attention branch by sigma_o2 = {(r * r * width / (2 * depth if gpt else 1)):.4g}")
    if d_ff != width:
        assumptions.append(f"d_ff = {d_ff} != d = {width}: the MLP's second layer has fan-in d_ff, "
                           f"sigma_w2_out = r^2 d_ff")
    if causal:
        assumptions.append("causal attention: token t sees t keys; the encoder maps hold for late tokens "
                           "(the report compares the last 50 positions), early tokens break the simplex picture")
    assumptions.append(f"finite width d = {width}: measured cosines fluctuate by O(1/sqrt(d T)) around the "
                       f"mean-field maps")

    out_scale = 1.0 / (2 * depth) if gpt else 1.0
    # every variance, beta and (GPT-2, ViT) q0 derive from initializer_range: an error in
    # them names that field, never an option of a command line that does not have it
    source = "config.initializer_range" + (" (with pixel_std)" if family == "vit" else "")
    # the config's own fields are checked first, naming themselves (not initializer_range)
    rope = dict(positions="rope", rope_base=_rope_base(cfg), head_dim=width // heads,
                kv_heads=_kv_heads(cfg, heads)) if llama else {}
    # every weight N(0, r^2): variance times fan-in r^2 d (r^2 d_ff for the MLP's second layer),
    # through the rule a model's measured weights take too (measured_weights.weight_parameters)
    params = _from_config(source, lambda: weight_parameters(
        r * r * width, r * r * width, r * r * width, r * r * width * out_scale, r * r * width,
        r * r * d_ff * out_scale, 0.0, seq_len=seq_len))
    beta = params.pop("beta")
    arch = _from_config(source, lambda: Architecture(
        norm=BLOCK_ORDERS[family], norm_type="rms" if llama else "layer", mlp="gated" if llama else "dense",
        attention="softmax", activation=activation, alpha_sa=1.0, alpha_mlp=1.0, seq_len=seq_len, heads=heads,
        qk_scaling="model", **params, **rope))
    settings = _from_config(source, lambda: RunSettings(arch, beta, depth, q0, rho0))
    name = str(cfg.get("_name_or_path") or family)
    return ModelSpec(
        name=name, family=family, settings=settings, width=width, d_ff=d_ff, causal=causal, init_range=r,
        embedding_layer_norm=family in ("bert", "roberta"), final_layer_norm=family in ("gpt2", "vit") or llama,
        layer_norm_eps=eps, hidden_act=act_name, assumptions=tuple(assumptions), pixel_std=pixel_std, config=cfg)


def _kv_heads(cfg, heads):
    """``num_key_value_heads`` (default: ``heads``), which must divide the heads."""
    kv = _positive_int(cfg, "num_key_value_heads", default=heads)
    if heads % kv:
        raise ValueError(f"config.num_key_value_heads ({kv}) must divide num_attention_heads ({heads})")
    return kv


def _rope_parameters(cfg):
    """The ``rope_parameters`` dicts of a config (``transformers`` >= 5 moves ``rope_theta`` and
    ``rope_scaling`` there; Gemma 3 keeps one per layer type): a list, empty without the field."""
    params = cfg.get("rope_parameters")
    if params is None:
        return []
    if not isinstance(params, dict):
        raise ValueError(f"config.rope_parameters must be a dict, got {type(params).__name__}")
    if params and all(isinstance(value, dict) for value in params.values()):  # one per layer type
        return list(params.values())
    return [params]


def _rope_base(cfg):
    """The RoPE base of a LLaMA-style config: ``rope_theta``, or the ``rope_theta`` of its
    ``rope_parameters`` (``transformers`` >= 5 configs), default 10000.

    A config whose two fields disagree, or whose layer types rotate with different bases,
    is refused: the engine has one base for every layer.
    """
    thetas = {_rope_theta(p, "rope_parameters.rope_theta") for p in _rope_parameters(cfg)
              if p.get("rope_theta") is not None}
    if cfg.get("rope_theta") is not None:
        theta = _rope_theta(cfg, "rope_theta")
        if thetas - {theta}:
            raise ValueError(f"config.rope_theta ({theta:g}) disagrees with config.rope_parameters "
                             f"(rope_theta {', '.join(f'{t:g}' for t in sorted(thetas))})")
        return theta
    if len(thetas) > 1:
        raise ValueError(f"config.rope_parameters gives layers different rope_theta "
                         f"({', '.join(f'{t:g}' for t in sorted(thetas))}): the engine has one rotary base")
    return thetas.pop() if thetas else ROPE_BASE


def _rope_theta(cfg, field):
    """``rope_theta`` of ``cfg``: a base > 1 (``b^(-2i/d_H)`` rotates slower with i), named ``config.field``."""
    theta = _positive_real(cfg, "rope_theta")
    if not theta > 1.0:
        raise ValueError(f"config.{field} must be > 1 (the RoPE base b of the frequencies b^(-2i/d_H)), "
                         f"got {cfg['rope_theta']!r}")
    return theta


def _rope_scaling(cfg):
    """The RoPE scaling type of a config (``rope_scaling``, or a ``rope_parameters`` whose
    ``rope_type`` is not ``"default"``), or None."""
    scaling = cfg.get("rope_scaling")
    if scaling:
        return str(scaling.get("rope_type", scaling.get("type", "?"))) if isinstance(scaling, dict) else str(scaling)
    kinds = {str(p.get("rope_type", "default")) for p in _rope_parameters(cfg)} - {"default"}
    return ", ".join(sorted(kinds)) or None


def _llama_input_and_notes(cfg, r, eps, heads, seq_len):
    """Input state ``(q0, rho0)`` and the departures from the theory of a LLaMA-style config.

    Word embeddings ``N(0, r^2)`` only (no position embeddings): ``q0 = r^2``; two tokens
    share their word with probability ``1/V`` (uniform ids): ``rho0 = 1/V``.
    """
    vocab = _positive_int(cfg, "vocab_size")
    q0, rho0 = _from_config("config.initializer_range", lambda: input_state([r * r], [r * r / vocab]))  # words only
    notes = []
    if eps > 0:
        notes.append(f"RMSNorm eps = {eps:g} against the embeddings' q0 = r^2 = {q0:.2g}: the first RMSNorm "
                     f"outputs q = {q0 / (q0 + eps):.4f}, not 1 (the engine's norm has no eps)")
    notes.append(f"rotary position embeddings (rope_theta = {_rope_base(cfg):g}) enter each attention row's REM "
                 "through the mean rotary correlation of the keys (docs/theory.md section 15); that law "
                 "overestimates Y2 where the tokens' cosine is high (rho >= 0.8)")
    scaling = _rope_scaling(cfg)
    if scaling:
        notes.append(f"rope_scaling ({scaling}) is ignored: the rotation frequencies are those of "
                     "rope_theta")
    kv_heads = cfg.get("num_key_value_heads")
    if kv_heads is not None and kv_heads != heads:
        notes.append(f"num_key_value_heads = {kv_heads} < {heads} heads (grouped-query attention): the same mean "
                     "maps as ungrouped heads (docs/theory.md section 19); heads of one group share their keys and "
                     "values, so head-to-head fluctuations are larger")
    notes += [note for note in [window_note(cfg, seq_len)] if note]
    if cfg.get("model_type") == "qwen2":
        notes.append("query/key/value biases are zero at initialisation (sigma_b2 = 0)")
    return q0, rho0, notes
