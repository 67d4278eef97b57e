"""Which tensor of a model plays which part in the theory: the role patterns of each family read.

A *role* is a part of the block the theory has a parameter for: the ``query``, ``key``,
``value``, ``output``, ``mlp_in`` and ``mlp_out`` matrices, the gains of the norms the
attention and the MLP read (``attention_norm``, ``mlp_norm``, ``embedding_norm``), the QK-norm
gains (``query_norm``, ``key_norm``), the gains on each branch's output (``attention_branch``,
``mlp_branch``: a norm after the branch -- Gemma 2, OLMo 2 -- or a LayerScale ``lambda``), biases,
and the input tables (``word``, ``position``, ``token type``, ViT's ``patch`` projection).
A :class:`WeightLayout` holds one family's patterns: regular expressions matching the end of a
tensor's name after any prefix, capturing the layer index (empty outside the blocks), and how
its tensors are stored (GPT-2's ``Conv1D``, fused projections, Gemma's ``1 + w`` gains).

:data:`ROLE_PATTERNS` is the table of the ``transformers`` families;
:func:`module_layout` builds the layout of a user's own block from module paths
(``{"query": "blocks.{layer}.attn.wq", ...}``), and :mod:`remprop.validation.module_weights`
reads plain PyTorch (``nn.TransformerEncoder``) through it.

Reference: docs/real_models.md section 6.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from remprop.theory.checks import ParameterError
from remprop.theory.models.measured_weights import GAIN_ROLES as MEASURED_GAIN_ROLES, WEIGHT_ROLES

__all__ = ["WeightLayout", "ROLE_PATTERNS", "LAYOUTS", "MATRIX_ROLES", "GAIN_ROLES", "BRANCH_ROLES", "TABLE_ROLES",
           "module_layout", "split_fused"]

#: Matrix roles: each one ``v_X`` with its fan-in (the measurement's own, ``WEIGHT_ROLES``).
MATRIX_ROLES = WEIGHT_ROLES
#: Gains of the norms the branches read (and the norm after the embeddings).
GAIN_ROLES = ("attention_norm", "mlp_norm", "embedding_norm")
#: Gains after the norms of queries and keys (QK-norm), and on each branch's output (a norm after
#: the branch, or LayerScale): their mean squares enter beta and the branches' strengths.
BRANCH_ROLES = tuple(role for role in MEASURED_GAIN_ROLES if role not in GAIN_ROLES)
#: Tables the tokens read at the input.
TABLE_ROLES = ("word", "position", "token type", "patch")
#: Fused matrices, split into the roles of their parts (:func:`split_fused`).
FUSED_ROLES = ("qkv", "gate_up")

_BERT = {
    "query": r"layer\.(\d+)\.attention\.self\.query\.weight", "key": r"layer\.(\d+)\.attention\.self\.key\.weight",
    "value": r"layer\.(\d+)\.attention\.self\.value\.weight",
    "output": r"layer\.(\d+)\.attention\.output\.dense\.weight",
    "mlp_in": r"layer\.(\d+)\.intermediate\.dense\.weight", "mlp_out": r"layer\.(\d+)\.output\.dense\.weight",
    # post-LN: the attention reads the stream the previous block's output norm left, the MLP the attention's norm
    "attention_norm": r"layer\.(\d+)\.output\.LayerNorm\.weight",
    "mlp_norm": r"layer\.(\d+)\.attention\.output\.LayerNorm\.weight",
    "embedding_norm": r"()embeddings\.LayerNorm\.weight",
    "mlp_bias": r"layer\.(\d+)\.intermediate\.dense\.bias",
    "query bias": r"layer\.(\d+)\.attention\.self\.query\.bias", "key bias": r"layer\.(\d+)\.attention\.self\.key\.bias",
    "value bias": r"layer\.(\d+)\.attention\.self\.value\.bias",
    "output bias": r"layer\.(\d+)\.attention\.output\.dense\.bias",
    "MLP output bias": r"layer\.(\d+)\.output\.dense\.bias",
    "norm shift": r"(\d+)?\.?(?:output\.)?LayerNorm\.bias",
    "word": r"()embeddings\.word_embeddings\.weight", "position": r"()embeddings\.position_embeddings\.weight",
    "token type": r"()embeddings\.token_type_embeddings\.weight",
}
_GPT2 = {
    "qkv": r"h\.(\d+)\.attn\.c_attn\.weight", "output": r"h\.(\d+)\.attn\.c_proj\.weight",
    "mlp_in": r"h\.(\d+)\.mlp\.c_fc\.weight", "mlp_out": r"h\.(\d+)\.mlp\.c_proj\.weight",
    "attention_norm": r"h\.(\d+)\.ln_1\.weight", "mlp_norm": r"h\.(\d+)\.ln_2\.weight",
    "mlp_bias": r"h\.(\d+)\.mlp\.c_fc\.bias", "qkv bias": r"h\.(\d+)\.attn\.c_attn\.bias",
    "output bias": r"h\.(\d+)\.attn\.c_proj\.bias", "MLP output bias": r"h\.(\d+)\.mlp\.c_proj\.bias",
    "norm shift": r"h\.(\d+)\.ln_[12]\.bias",
    "word": r"()wte\.weight", "position": r"()wpe\.weight",
}
_LLAMA = {
    "query": r"layers\.(\d+)\.self_attn\.q_proj\.weight", "key": r"layers\.(\d+)\.self_attn\.k_proj\.weight",
    "value": r"layers\.(\d+)\.self_attn\.v_proj\.weight", "output": r"layers\.(\d+)\.self_attn\.o_proj\.weight",
    "mlp_in": r"layers\.(\d+)\.mlp\.(?:gate|up)_proj\.weight", "mlp_out": r"layers\.(\d+)\.mlp\.down_proj\.weight",
    "attention_norm": r"layers\.(\d+)\.input_layernorm\.weight",
    "mlp_norm": r"layers\.(\d+)\.post_attention_layernorm\.weight",
    "query bias": r"layers\.(\d+)\.self_attn\.q_proj\.bias", "key bias": r"layers\.(\d+)\.self_attn\.k_proj\.bias",
    "value bias": r"layers\.(\d+)\.self_attn\.v_proj\.bias", "output bias": r"layers\.(\d+)\.self_attn\.o_proj\.bias",
    "word": r"()embed_tokens\.weight",
}
_LLAMA_MATRICES = {role: _LLAMA[role] for role in MATRIX_ROLES}
#: Phi-3: LLaMA's block with the query, key and value rows in one ``qkv_proj`` and gate and up in one ``gate_up_proj``.
_PHI3 = {**{k: v for k, v in _LLAMA.items() if k not in ("query", "key", "value", "mlp_in") and "bias" not in k},
         "qkv": r"layers\.(\d+)\.self_attn\.qkv_proj\.weight", "gate_up": r"layers\.(\d+)\.mlp\.gate_up_proj\.weight"}
#: Gemma 2: sandwich norms (a norm before and after each branch), gains ``1 + w``.
_GEMMA2 = {**_LLAMA_MATRICES, "word": _LLAMA["word"],
           "attention_norm": r"layers\.(\d+)\.input_layernorm\.weight",
           "attention_branch": r"layers\.(\d+)\.post_attention_layernorm\.weight",
           "mlp_norm": r"layers\.(\d+)\.pre_feedforward_layernorm\.weight",
           "mlp_branch": r"layers\.(\d+)\.post_feedforward_layernorm\.weight"}
#: OLMo 2: no norm before the branches, one after each, RMS-normalised queries and keys.
_OLMO2 = {**_LLAMA_MATRICES, "word": _LLAMA["word"],
          "query_norm": r"layers\.(\d+)\.self_attn\.q_norm\.weight", "key_norm": r"layers\.(\d+)\.self_attn\.k_norm\.weight",
          "attention_branch": r"layers\.(\d+)\.post_attention_layernorm\.weight",
          "mlp_branch": r"layers\.(\d+)\.post_feedforward_layernorm\.weight"}
#: ViT (``ViTModel``; the names of transformers 5 and of earlier versions): pre-LN, a patch projection and positions.
_VIT_LAYER = r"(?:encoder\.)?layers?\.(\d+)\."
_VIT = {
    "query": _VIT_LAYER + r"attention\.(?:q_proj|attention\.query)\.weight",
    "key": _VIT_LAYER + r"attention\.(?:k_proj|attention\.key)\.weight",
    "value": _VIT_LAYER + r"attention\.(?:v_proj|attention\.value)\.weight",
    "output": _VIT_LAYER + r"attention\.(?:o_proj|output\.dense)\.weight",
    "mlp_in": _VIT_LAYER + r"(?:mlp\.fc1|intermediate\.dense)\.weight",
    "mlp_out": _VIT_LAYER + r"(?:mlp\.fc2|output\.dense)\.weight",
    "attention_norm": _VIT_LAYER + r"layernorm_before\.weight", "mlp_norm": _VIT_LAYER + r"layernorm_after\.weight",
    "attention_scale": _VIT_LAYER + r"layer_scale1\.lambda1", "mlp_scale": _VIT_LAYER + r"layer_scale2\.lambda1",
    "mlp_bias": _VIT_LAYER + r"(?:mlp\.fc1|intermediate\.dense)\.bias",
    "query bias": _VIT_LAYER + r"attention\.(?:q_proj|attention\.query)\.bias",
    "key bias": _VIT_LAYER + r"attention\.(?:k_proj|attention\.key)\.bias",
    "value bias": _VIT_LAYER + r"attention\.(?:v_proj|attention\.value)\.bias",
    "output bias": _VIT_LAYER + r"attention\.(?:o_proj|output\.dense)\.bias",
    "MLP output bias": _VIT_LAYER + r"(?:mlp\.fc2|output\.dense)\.bias",
    "norm shift": _VIT_LAYER + r"layernorm_(?:before|after)\.bias",
    "patch": r"()embeddings\.patch_embeddings\.projection\.weight",
    "patch bias": r"()embeddings\.patch_embeddings\.projection\.bias",
    "position": r"()embeddings\.position_embeddings",
}

#: model_type -> {role: pattern}; a pattern matches the end of a tensor's name after any prefix
#: and captures the layer index (empty for tensors outside the blocks).
ROLE_PATTERNS = {"bert": _BERT, "roberta": _BERT, "gpt2": _GPT2, "llama": _LLAMA, "mistral": _LLAMA,
                 "qwen2": _LLAMA, "phi3": _PHI3, "gemma2": _GEMMA2, "olmo2": _OLMO2, "vit": _VIT}
#: Roles a layout may leave out: a model without them has gain 1 there (or no such bias, no LayerScale).
OPTIONAL_ROLES = ("attention_scale", "mlp_scale")


@dataclass(frozen=True)
class WeightLayout:
    """Where a model keeps the tensors of each role, and how.

    Attributes
    ----------
    roles : dict
        Role -> regular expression matching the end of a tensor's name (after any prefix) and
        capturing the layer index (``(\\d+)``; ``()`` for a tensor outside the blocks).
    conv1d : bool
        Matrices stored ``(in, out)`` (GPT-2's ``Conv1D``) rather than ``nn.Linear``'s ``(out, in)``.
    gain_offset : float
        What a norm's stored weight is added to: Gemma's RMSNorm scales by ``1 + w`` (1), others 0.
    optional : tuple of str
        Roles a model may lack (a missing one is gain 1).
    """

    roles: dict
    conv1d: bool = False
    gain_offset: float = 0.0
    optional: tuple = field(default=OPTIONAL_ROLES)

    def compiled(self) -> dict:
        """Role -> compiled pattern (anchored at a name's end, after a ``.`` or the name's start)."""
        return {role: re.compile(r"(?:^|\.)" + pattern + "$") for role, pattern in self.roles.items()}


#: model_type -> its :class:`WeightLayout`.
LAYOUTS = {family: WeightLayout(patterns, conv1d=family == "gpt2", gain_offset=1.0 if family == "gemma2" else 0.0)
           for family, patterns in ROLE_PATTERNS.items()}


def split_fused(role, tensor, spec, conv1d):
    """The parts of a fused matrix: ``[(role, chunk, fan_in), ...]``.

    ``qkv``: the query, key and value rows side by side -- GPT-2's ``Conv1D`` ``(d, 3d)`` and
    ``nn.MultiheadAttention``'s ``in_proj_weight`` ``(3d, d)`` in three equal parts, Phi-3's
    ``qkv_proj`` ``((H + 2 H_kv) d_H, d)`` by the configuration's head counts. ``gate_up``:
    Phi-3's ``gate_up_proj`` ``(2 d_ff, d)``, both halves the MLP's first layer.
    """
    axis = 1 if conv1d else 0
    fan_in = tensor.shape[1 - axis]
    if role == "gate_up":
        return [("mlp_in", tensor, fan_in)]
    arch = spec.architecture
    rows = tensor.shape[axis]
    if spec.family == "phi3":
        head_dim, kv = arch.head_dim, arch.kv_heads or arch.heads
        sizes = [arch.heads * head_dim, kv * head_dim, kv * head_dim]
    else:
        sizes = [rows // 3] * 3
    parts = tensor.split(sizes, dim=axis)
    return [(part, chunk, fan_in) for part, chunk in zip(("query", "key", "value"), parts)]


def fused_rows(role, spec) -> int:
    """Rows (outputs) a fused matrix of ``spec`` has: ``3 d`` or Phi-3's ``(H + 2 H_kv) d_H``; ``2 d_ff``."""
    if role == "gate_up":
        return 2 * spec.d_ff
    arch = spec.architecture
    if spec.family == "phi3":
        return (arch.heads + 2 * (arch.kv_heads or arch.heads)) * arch.head_dim
    return 3 * spec.width


def module_layout(roles, *, conv1d=False, gain_offset=0.0) -> WeightLayout:
    """The :class:`WeightLayout` of a user's own block, its roles named by module paths.

    Parameters
    ----------
    roles : dict
        Role -> the path of the module (or parameter) that holds it, ``{layer}`` standing for the
        block's index: ``{"query": "blocks.{layer}.attn.wq", "mlp_in": "blocks.{layer}.mlp.fc1", ...}``.
        A module's path reads its ``.weight`` (``.bias`` for a ``... bias`` role); a parameter's
        path (a LayerScale ``blocks.{layer}.ls1.gamma``) reads itself. Roles: ``query``, ``key``,
        ``value`` (or ``qkv``, fused rows), ``output``, ``mlp_in``, ``mlp_out``, ``attention_norm``,
        ``mlp_norm``, ``query_norm``, ``key_norm``, ``attention_branch``, ``mlp_branch``,
        ``attention_scale``, ``mlp_scale``, ``mlp_bias``.
    conv1d, gain_offset
        See :class:`WeightLayout`.

    Returns
    -------
    WeightLayout
    """
    if not isinstance(roles, dict) or not roles:
        raise ParameterError("roles", f"roles must be a non-empty dict role -> module path, got {roles!r}")
    known = MATRIX_ROLES + GAIN_ROLES + BRANCH_ROLES + FUSED_ROLES + ("mlp_bias",)
    patterns = {}
    for role, path in roles.items():
        if role not in known:
            raise ParameterError("roles", f"roles: unknown role {role!r} (known: {', '.join(known)})")
        if not isinstance(path, str) or "{layer}" not in path:
            raise ParameterError("roles", f"roles[{role!r}] must be a module path with {{layer}} for the block "
                                 f"index, e.g. 'blocks.{{layer}}.attn.wq', got {path!r}")
        escaped = re.escape(path).replace(re.escape("{layer}"), r"(\d+)")
        suffix = r"\.bias" if role == "mlp_bias" else r"(?:\.weight)?"
        patterns[role] = escaped + suffix
    return WeightLayout(patterns, conv1d=conv1d, gain_offset=gain_offset)
