r"""What the library would initialise, and where a model's own weights deviate from it.

``transformers`` initialises a model of each family by its ``_init_weights``: every linear
(and GPT-2 ``Conv1D``) weight and every embedding table ``N(0, r^2)`` with
``r = config.initializer_range``, the row of ``config.pad_token_id`` of a word table that has
one set to zero, every bias 0 and every norm gain 1 (``PreTrainedModel._init_weights``);
GPT-2 then redraws both residual output projections (``attn.c_proj``, ``mlp.c_proj``) with
``r / sqrt(2 n_layer)`` (``GPT2PreTrainedModel._init_weights``); ViT draws its patch
projection (an ``nn.Conv2d``) ``N(0, r^2)`` too and its position table from ``N(0, r^2)``
truncated to ``[-2, 2]`` (``ViTPreTrainedModel._init_weights``). Plain PyTorch's
``nn.TransformerEncoder`` (:data:`TORCH_ENCODER`) has no ``initializer_range``: its
``MultiheadAttention`` draws the fused ``in_proj_weight`` ``(3d, d)`` Xavier-uniform (variance
``2 / (d + 3d) = 1 / (2d)``), zeroes ``in_proj_bias`` and ``out_proj.bias``, and every
``nn.Linear`` (``out_proj``, ``linear1``, ``linear2``) keeps its own ``kaiming_uniform_(a = sqrt 5)``,
``U(-1/sqrt(fan_in), 1/sqrt(fan_in))``: variance ``1 / (3 fan_in)``, its bias the same; the
encoder deep-copies one layer into every layer. :data:`DEFAULT_INITS` holds one
:class:`FamilyInit` per family: a family is one entry.

:func:`default_scales` gives, per role of
:class:`~remprop.theory.models.measured_weights.MeasuredWeights`, the mean square of the
entries that init draws; :func:`init_deviations` holds a measurement against it. A matrix or
table measured on ``n`` entries of a ``N(0, s^2)`` draw has a sample mean square of relative
standard deviation ``sqrt(2 / n)``, of a uniform draw ``sqrt(4 / (5 n))``
(:func:`~remprop.theory.models.measured_weights.second_moment_error`; ``n`` the entries of one
layer where every layer is the same draw); a role is flagged where
its mean square differs from the default's by more than ``SIGNIFICANCE = 5`` of them. Gains
(default exactly 1) and biases (exactly 0) are drawn by no random number: they are flagged
where they differ from it beyond float rounding (:data:`EXACT_TOLERANCE`).
:func:`reset_roles` is the measurement with some tensors put back to the default, whose
diagnosis beside the model's tells what the deviation does
(:mod:`remprop.diagrams.init_deviations`).

Reference: ``transformers`` 5 ``modeling_utils.PreTrainedModel._init_weights``,
``models/gpt2/modeling_gpt2.GPT2PreTrainedModel._init_weights`` and
``models/vit/modeling_vit.ViTPreTrainedModel._init_weights``; PyTorch's
``nn.MultiheadAttention._reset_parameters`` and ``nn.Linear.reset_parameters``; Radford et al.
2019 (GPT-2's ``1/sqrt(2L)`` residual projections).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from .block_weights import MODULE_FAMILY
from .hf_config import vit_patch_inputs
from .measured_weights import SIGNIFICANCE, EmbeddingTable, second_moment_error

__all__ = ["FamilyInit", "DEFAULT_INITS", "TensorDeviation", "default_scales", "init_deviations", "reset_roles",
           "family_init", "GROUPS", "TENSOR_LABELS", "EXACT_TOLERANCE", "TORCH_ENCODER", "UNIFORM_KURTOSIS"]

#: The :data:`DEFAULT_INITS` key of plain PyTorch's ``nn.TransformerEncoder`` (a module spec's ``default_init``).
TORCH_ENCODER = "torch.nn.TransformerEncoder"
#: ``E w^4 / (E w^2)^2`` of a uniform draw (PyTorch's ``*_uniform_`` inits): 9/5.
UNIFORM_KURTOSIS = 9 / 5

#: Relative difference from an exact default (gain 1) that float rounding of stored weights cannot make.
EXACT_TOLERANCE = 1e-6


@dataclass(frozen=True)
class FamilyInit:
    """One family's default initialisation (its ``_init_weights``).

    Attributes
    ----------
    depth_scaled : tuple of str
        Matrix roles drawn with ``r / sqrt(2 L)`` instead of ``r`` (GPT-2: ``output``, ``mlp_out``).
    word_padding : bool
        The word table is an ``nn.Embedding`` with ``padding_idx = config.pad_token_id``,
        whose row the init sets to zero.
    torch_modules : bool
        PyTorch's own module init instead of ``N(0, r^2)`` (``nn.TransformerEncoder``: the
        module docstring), uniform draws.
    shared_layers : bool
        Every layer is one draw (a deep copy): the sampling error is that of one layer's entries.
    source : str
        The init in words (the report's table heading).
    """

    depth_scaled: tuple = ()
    word_padding: bool = True
    torch_modules: bool = False
    shared_layers: bool = False
    source: str = "transformers' _init_weights of the config"


#: model_type -> its :class:`FamilyInit` (the families :mod:`remprop.validation.own_weights` reads).
DEFAULT_INITS = {"bert": FamilyInit(), "roberta": FamilyInit(), "llama": FamilyInit(), "mistral": FamilyInit(),
                 "qwen2": FamilyInit(), "gpt2": FamilyInit(depth_scaled=("output", "mlp_out"), word_padding=False),
                 # the base _init_weights alone (Phi-3's fused qkv/gate_up too); Gemma 2's RMSNorm stores w of
                 # its gain 1 + w at 0, read as the gain (validation.weight_roles), so its gains' default is 1
                 "phi3": FamilyInit(), "gemma2": FamilyInit(), "olmo2": FamilyInit(),
                 # the patch projection and the position table: default_scales
                 "vit": FamilyInit(),
                 TORCH_ENCODER: FamilyInit(torch_modules=True, shared_layers=True, word_padding=False,
                                           source="PyTorch's own init of nn.TransformerEncoder")}

#: Tensor groups of the deviation table and the roles in each (tables by name, biases by their role).
GROUPS = {"embeddings": ("word", "position", "token type", "patch"), "query/key": ("query", "key"),
          "value/output": ("value", "output"), "MLP": ("mlp_in", "mlp_out"),
          "norm gains": ("embedding_norm", "attention_norm", "mlp_norm", "query_norm", "key_norm", "attention_branch",
                         "mlp_branch"), "biases": ("mlp_bias",)}
#: Role -> the tensor's name in the table.
TENSOR_LABELS = {"query": "W_Q", "key": "W_K", "value": "W_V", "output": "W_O", "mlp_in": "MLP first layer",
                 "mlp_out": "MLP second layer", "attention_norm": "attention-input norm gain",
                 "mlp_norm": "MLP-input norm gain", "embedding_norm": "embedding norm gain",
                 "word": "word embeddings", "position": "position embeddings", "token type": "token type embedding",
                 "patch": "patch projection (tokens)",
                 "mlp_bias": "MLP first-layer bias", "query_norm": "query QK-norm gain", "key_norm": "key QK-norm gain",
                 "attention_branch": "attention-output norm gain", "mlp_branch": "MLP-output norm gain"}


def family_init(spec) -> FamilyInit | None:
    """The :class:`FamilyInit` of ``spec`` (None: its default initialisation is not known).

    A ``transformers`` model's is its ``model_type``'s; a block described by hand
    (:func:`~remprop.theory.models.module_spec.module_spec`) has the one its ``default_init``
    names (``nn.TransformerEncoder``: :data:`TORCH_ENCODER`), a user's own block none.
    """
    key = spec.config.get("default_init") if spec.family == MODULE_FAMILY else spec.family
    return DEFAULT_INITS.get(key)


def _family(spec) -> FamilyInit:
    family = family_init(spec)
    if family is None:
        raise ValueError(f"model: the default initialisation is known for model_type {', '.join(DEFAULT_INITS)}; "
                         f"got {spec.family!r}")
    return family


def _padded(spec) -> bool:
    """Whether the default init zeroes a row of the word table (``pad_token_id`` inside the vocabulary)."""
    pad, vocab = spec.config.get("pad_token_id"), int(spec.config.get("vocab_size", 0))
    return _family(spec).word_padding and isinstance(pad, int) and 0 <= pad < vocab


def default_scales(spec) -> dict:
    """Mean square of the entries of every role at the library's default initialisation.

    Parameters
    ----------
    spec : ModelSpec
        The model's configuration (family, ``initializer_range``, depth, vocabulary).

    Returns
    -------
    dict
        Matrix roles -> ``r^2`` (``r^2 / (2 L)`` for a family's depth-scaled roles); gain roles
        -> 1; ``"word"`` -> ``r^2 (1 - 1/V)`` where the padding row is zeroed, else ``r^2``;
        ``"token type"`` -> ``r^2``; ``"position"`` -> ``r^2`` (ViT: of ``N(0, r^2)`` truncated
        to ``[-2, 2]``); ViT's ``"patch"`` -> its table's ``q`` at that init, ``r^2 C P^2 s^2``
        (pixels of std ``s = pixel_std``); biases -> 0. ``nn.TransformerEncoder``: the query, key
        and value ``1 / (2d)``, the output and the MLP's first layer ``1 / (3d)``, its second
        ``1 / (3 d_ff)``, the MLP bias ``1 / (3d)``, gains 1, no tables (its input is given).

    Examples
    --------
    >>> from remprop.theory import model_spec
    >>> s = default_scales(model_spec({"model_type": "gpt2", "n_layer": 24, "n_embd": 256, "n_head": 4,
    ...                                "vocab_size": 100}))
    >>> round(math.sqrt(s["output"]), 6), round(math.sqrt(s["query"]), 6)
    (0.002887, 0.02)
    """
    family, r2 = _family(spec), spec.init_range ** 2
    if family.torch_modules:
        d, d_ff = spec.width, spec.d_ff
        out = {"query": 1 / (2 * d), "key": 1 / (2 * d), "value": 1 / (2 * d), "output": 1 / (3 * d),
               "mlp_in": 1 / (3 * d), "mlp_out": 1 / (3 * d_ff), "mlp_bias": 1 / (3 * d)}
        out.update({role: 1.0 for role in GROUPS["norm gains"]})
        return out
    out = {role: r2 / (2 * spec.depth) if role in family.depth_scaled else r2
           for role in ("query", "key", "value", "output", "mlp_in", "mlp_out")}
    out.update({role: 1.0 for role in GROUPS["norm gains"]})
    vocab = int(spec.config.get("vocab_size", 0))
    out.update({"word": r2 * (1 - 1 / vocab) if _padded(spec) else r2, "position": r2, "token type": r2,
                "mlp_bias": 0.0})
    if spec.family == "vit":
        out["position"] = r2 * _truncated_variance(2.0 / spec.init_range)
        out["patch"] = r2 * vit_patch_inputs(spec.config) * spec.pixel_std ** 2
    return out


def _truncated_variance(c) -> float:
    """Variance of ``N(0, 1)`` truncated to ``[-c, c]``: ``1 - 2 c phi(c) / (2 Phi(c) - 1)``."""
    return 1.0 - 2.0 * c * math.exp(-c * c / 2) / math.sqrt(2 * math.pi) / math.erf(c / math.sqrt(2))


@dataclass(frozen=True)
class TensorDeviation:
    """One role of a model's weights against its default initialisation.

    Attributes
    ----------
    group : str
        Its group (a key of :data:`GROUPS`).
    role : str
        The measured role (``"query"``, ``"word"``, ``"attention_norm"``, ``"mlp_bias"``, ...).
    measured_std, default_std : float
        Root mean square of the entries, measured and at the default (a gain: its rms).
    error : float
        Relative standard deviation of the measured mean square were the weights the
        default's draw (``sqrt(2 / n)``, uniform draws ``sqrt(4 / (5 n))``); 0 for exact
        defaults (gains, transformers' biases).
    flagged : bool
        Differs from the default by more than ``SIGNIFICANCE`` errors (exact defaults: by more
        than :data:`EXACT_TOLERANCE`).
    """

    group: str
    role: str
    measured_std: float
    default_std: float
    error: float
    flagged: bool

    @property
    def tensor(self) -> str:
        """The tensor's name in words (:data:`TENSOR_LABELS`)."""
        return TENSOR_LABELS[self.role]

    @property
    def ratio(self) -> float:
        """``measured_std / default_std`` (inf for a nonzero bias, whose default is 0; 1 for a zero one)."""
        if self.default_std == 0:
            return 1.0 if self.measured_std == 0 else math.inf
        return self.measured_std / self.default_std

    @property
    def z(self) -> float | None:
        """``(mean square ratio - 1) / error``: the deviation in sampling errors (None: an exact default)."""
        return None if self.error == 0 else (self.ratio ** 2 - 1) / self.error

    def to_dict(self) -> dict:
        return {"group": self.group, "role": self.role, "tensor": self.tensor, "measured_std": self.measured_std,
                "default_std": self.default_std, "ratio": self.ratio, "error": self.error, "z": self.z,
                "flagged": self.flagged}


def _table_entries(spec, name) -> int:
    """Entries a table's measured ``q`` averages (:func:`~remprop.validation.own_weights.measure_weights`)."""
    if name == "patch":  # the whole (d, C, P, P) projection
        return vit_patch_inputs(spec.config) * spec.width
    rows = {"word": int(spec.config.get("vocab_size", 1)) - _padded(spec), "position": spec.seq_len, "token type": 1}
    return max(rows[name], 1) * spec.width


def _drawn(spec, scale):
    """(entries, kurtosis) of a block tensor's default draw: one layer's entries where the layers share it."""
    family = _family(spec)
    entries = max(scale.entries // spec.depth, 1) if family.shared_layers else scale.entries
    return entries, UNIFORM_KURTOSIS if family.torch_modules else 3.0


def _row(group, role, measured, default, entries, kurtosis=3.0):
    """A :class:`TensorDeviation` of a measured mean square against the default's (``entries``: None, exact)."""
    if entries is None:
        error = 0.0
        flagged = abs(measured - default) > EXACT_TOLERANCE * max(default, 1.0)
    else:
        error = float(second_moment_error(entries, kurtosis))
        flagged = abs(measured / default - 1) > SIGNIFICANCE * error
    return TensorDeviation(group, role, math.sqrt(measured), math.sqrt(default), error, bool(flagged))


def init_deviations(spec, weights) -> tuple:
    """Every measured role of ``weights`` against ``spec``'s default initialisation.

    Parameters
    ----------
    spec : ModelSpec
        The configuration's spec (its sizes, ``initializer_range``, family).
    weights : MeasuredWeights

    Returns
    -------
    tuple of TensorDeviation
        In the order of :data:`GROUPS`: the embedding tables (not an input state given by
        hand), query/key, value/output, MLP, the norm gains the model has, the MLP bias (the
        other biases, which the engine takes as zero, are named in the diagnosis's assumptions).
    """
    default = default_scales(spec)
    rows = [_row("embeddings", t.name, t.q, default[t.name], _table_entries(spec, t.name))
            for t in weights.embeddings if t.name in default]
    for group in ("query/key", "value/output", "MLP"):
        rows += [_row(group, role, weights.matrices[role].mean_square, default[role],
                      *_drawn(spec, weights.matrices[role])) for role in GROUPS[group]]
    rows += [_row("norm gains", role, weights.gains[role].mean_square, 1.0, None)
             for role in GROUPS["norm gains"] if role in weights.gains]
    if weights.mlp_bias is not None:
        bias = default["mlp_bias"]  # transformers: exactly 0; PyTorch's nn.Linear: a uniform draw
        rows.append(_row("biases", "mlp_bias", weights.mlp_bias.mean_square, bias,
                         *(_drawn(spec, weights.mlp_bias) if bias else (None,))))
    return tuple(rows)


def reset_roles(spec, weights, roles):
    """``weights`` with ``roles`` put back to the default initialisation's scales.

    Matrices and gains take the default mean square in every layer (zero mean; a gain 1), tables
    the default ``q`` and the overlap its draw gives (words ``q / V``: two tokens share a row with
    probability ``1/V``; positions and patches 0; the shared token type ``q``), the MLP bias its
    default's (removed where that is 0).

    Parameters
    ----------
    spec : ModelSpec
    weights : MeasuredWeights
    roles : iterable of str
        Roles of :data:`GROUPS` (roles the weights do not hold are skipped).

    Returns
    -------
    MeasuredWeights
    """
    roles = set(roles)
    known = {role for group in GROUPS.values() for role in group}
    if not roles <= known:
        raise ValueError(f"roles must be among {', '.join(sorted(known))}, got {sorted(roles - known)}")
    default = default_scales(spec)

    def at_default(role, scale):
        value = default[role]
        return dataclasses.replace(scale, mean_square=value, mean=math.sqrt(value) if role in GROUPS["norm gains"]
                                   else 0.0, layers=(value,) * len(scale.layers))

    vocab = max(int(spec.config.get("vocab_size", 1)), 1)
    overlap = {"word": default.get("word", 0.0) / vocab, "position": 0.0, "token type": default.get("token type"),
               "patch": 0.0}
    tables = tuple(EmbeddingTable(t.name, default[t.name], overlap[t.name]) if t.name in roles else t
                   for t in weights.embeddings)
    matrices = {role: at_default(role, s) if role in roles else s for role, s in weights.matrices.items()}
    gains = {role: at_default(role, s) if role in roles else s for role, s in weights.gains.items()}
    bias = weights.mlp_bias
    if "mlp_bias" in roles and bias is not None:
        bias = at_default("mlp_bias", bias) if default["mlp_bias"] else None
    return dataclasses.replace(weights, embeddings=tables, matrices=matrices, gains=gains, mlp_bias=bias)
