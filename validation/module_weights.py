"""Models without a Hugging Face configuration: plain PyTorch's ``nn.TransformerEncoder`` and a user's own block.

A ``transformers`` model brings its configuration (the block order, the heads, the activation);
a plain module does not, so the block is described -- by :func:`encoder_block` for a
``torch.nn.TransformerEncoder`` (read off its layers: ``norm_first`` both ways, ``nhead``, the
activation, the fused ``in_proj_weight``, ``out_proj``, ``linear1``/``linear2``,
``norm1``/``norm2``, the final ``norm``), or by the user with a :class:`BlockDescription`
that names the modules of each role (the adapter of a block of their own). The sizes -- width,
MLP width, depth -- are read off the weights; the sequence length and the input state the first
block reads (``q0``, ``rho0``: there are no embedding tables to measure) are given.

Everything else is the measured route of ``transformers`` models
(:func:`~remprop.validation.own_weights.measure_weights`,
:func:`~remprop.theory.models.measured_weights.measured_spec`). A module this cannot map is
refused with the path of the module that stopped it.

Reference: docs/real_models.md section 6.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from torch import nn
from torch.nn import functional

from remprop.theory.checks import ParameterError
from remprop.theory.models.default_init import TORCH_ENCODER
from remprop.theory.models.measured_weights import EmbeddingTable
from remprop.theory.models.module_spec import module_spec

from .weight_roles import module_layout

__all__ = ["BlockDescription", "encoder_block", "module_block_spec"]


@dataclass(frozen=True)
class BlockDescription:
    """A user's own transformer block, described for ``remprop.check(model, block=...)``.

    Attributes
    ----------
    roles : dict
        Role -> module path with ``{layer}`` for the block index
        (:func:`~remprop.validation.weight_roles.module_layout`): at least the attention
        (``query``, ``key``, ``value`` or a fused ``qkv``), ``output``, ``mlp_in``, ``mlp_out``;
        the norms' gains (``attention_norm``, ``mlp_norm``; without them gain 1), LayerScale
        gains (``attention_scale``, ``mlp_scale``), ``mlp_bias``.
    heads : int
        Attention heads.
    norm : {"pre", "post", "none"}
        Where the norms sit (post-LN: ``attention_norm`` names the norm the attention reads,
        the previous block's output norm).
    activation, norm_type, mlp : str
        As :class:`~remprop.theory.Architecture` takes them (``mlp="gated"``: name the gate and up
        projections as one fused ``gate_up`` module, ``(2 d_ff, d)``).
    causal, final_norm, branch_norm : bool
        A causal mask; a norm after the last block; a norm on each branch's output.
    conv1d : bool
        Matrices stored ``(in, out)`` (GPT-2's ``Conv1D``).
    gain_offset : float
        Norm weights stored as ``gain - offset`` (Gemma: 1).
    eps : float
        The norms' epsilon.
    notes : tuple of str
        Notes for the report's assumptions.
    default_init : str, optional
        Its default initialisation's key in
        :data:`~remprop.theory.models.default_init.DEFAULT_INITS` (:func:`encoder_block`:
        ``"torch.nn.TransformerEncoder"``); None (a user's own block): no deviation table.
    """

    roles: dict
    heads: int
    norm: str = "pre"
    activation: str = "gelu"
    norm_type: str = "layer"
    mlp: str = "dense"
    causal: bool = False
    final_norm: bool = False
    branch_norm: bool = False
    conv1d: bool = False
    gain_offset: float = 0.0
    eps: float = 1e-5
    notes: tuple = field(default=())
    default_init: str | None = None

    def layout(self):
        """The :class:`~remprop.validation.weight_roles.WeightLayout` of the ``roles``."""
        return module_layout(self.roles, conv1d=self.conv1d, gain_offset=self.gain_offset)


def _activation_name(activation, path):
    """The engine's name of an ``nn.TransformerEncoderLayer``'s activation (a function or a module)."""
    if activation is functional.relu or isinstance(activation, nn.ReLU):
        return "relu"
    if activation is functional.gelu or isinstance(activation, nn.GELU):
        return "gelu"
    raise ParameterError("model", f"model: {path}.activation is {getattr(activation, '__name__', type(activation).__name__)}"
                         ", not relu or gelu: describe the block with block=BlockDescription(..., activation=...)")


def encoder_block(model) -> BlockDescription:
    """The :class:`BlockDescription` of the (first) ``torch.nn.TransformerEncoder`` in ``model``.

    Every layer must be an ``nn.TransformerEncoderLayer`` with the first one's ``norm_first``,
    heads and activation, attention with one fused ``in_proj_weight`` (``kdim = vdim = d``);
    a layer or attention that is not is refused naming its module path.
    """
    found = next(((path, module) for path, module in model.named_modules()
                  if isinstance(module, nn.TransformerEncoder)), None)
    if found is None:
        raise ParameterError("model", f"model: {type(model).__name__} has no transformers config and holds no "
                             "torch.nn.TransformerEncoder: describe its block with block=BlockDescription(roles=...)")
    path, encoder = found
    prefix = f"{path}." if path else ""
    first = None
    for index, layer in enumerate(encoder.layers):
        where = f"{prefix}layers.{index}"
        if not isinstance(layer, nn.TransformerEncoderLayer):
            raise ParameterError("model", f"model: {where} is a {type(layer).__name__}, not an "
                                 "nn.TransformerEncoderLayer: describe the block with block=BlockDescription(...)")
        if not layer.self_attn._qkv_same_embed_dim:
            raise ParameterError("model", f"model: {where}.self_attn has kdim/vdim other than d (separate q/k/v "
                                 "weights): describe the block with block=BlockDescription(...)")
        traits = (layer.norm_first, layer.self_attn.num_heads, _activation_name(layer.activation, where))
        if first is not None and traits != first:
            raise ParameterError("model", f"model: {where} differs from {prefix}layers.0 in norm_first, heads or "
                                 "activation; the theory has one block for all layers")
        first = traits
    if first is None:
        raise ParameterError("model", f"model: {prefix or 'the encoder '}has no layers")
    norm_first, heads, activation = first
    layer0 = encoder.layers[0]
    block = f"{prefix}layers.{{layer}}."
    roles = {"qkv": block + "self_attn.in_proj_weight", "output": block + "self_attn.out_proj",
             "mlp_in": block + "linear1", "mlp_out": block + "linear2"}
    if layer0.linear1.bias is not None:
        roles["mlp_bias"] = block + "linear1"
    # pre-LN: norm1 before the attention, norm2 before the MLP; post-LN: norm1 after the attention
    # (the MLP reads it), norm2 after the MLP (the next block's attention reads it)
    gains = {"attention_norm": "norm1", "mlp_norm": "norm2"} if norm_first else \
        {"attention_norm": "norm2", "mlp_norm": "norm1"}
    for role, norm in gains.items():
        if getattr(layer0, norm).weight is not None:  # elementwise_affine=False: gain 1
            roles[role] = block + norm
    notes = ("nn.TransformerEncoder: its default init draws every layer the same (deepcopy of one layer); "
             "the engine's maps are the same for equal or independent layers",)
    return BlockDescription(roles=roles, heads=heads, norm="pre" if norm_first else "post", activation=activation,
                            final_norm=encoder.norm is not None, eps=float(layer0.norm1.eps), notes=notes,
                            default_init=TORCH_ENCODER)


def _sizes(model, layout, source):
    """(width, d_ff, depth) read off the weights the layout names; a role of the attention or the
    MLP that matches no tensor is refused naming its path (a model without attention, say)."""
    patterns = layout.compiled()
    shapes = {}
    for name, tensor in model.state_dict().items():
        for role, pattern in patterns.items():
            match = pattern.search(name)
            if match is not None:
                shapes.setdefault(role, {})[int(match.group(1))] = tuple(tensor.shape)
                break
    attention = "qkv" if "qkv" in layout.roles else "query"
    for role in (attention, "output", "mlp_in" if "mlp_in" in layout.roles else "gate_up", "mlp_out"):
        if role not in layout.roles:
            raise ParameterError("block", f"block: roles names no {role} module (a transformer block has an "
                                 "attention and an MLP)")
        if role not in shapes:
            path = re.sub(r"\(\?:[^)]*\)\?$", "", layout.roles[role]).replace(r"(\d+)", "{layer}").replace("\\", "")
            raise ParameterError("block", f"block: no tensor of {source} matches roles[{role!r}] = {path!r}: "
                                 f"the model has no {role.replace('_', ' ')} there")
    query, mlp_in = shapes[attention], shapes.get("mlp_in") or shapes["gate_up"]
    width = next(iter(query.values()))[0 if layout.conv1d else 1]
    rows = next(iter(mlp_in.values()))[1 if layout.conv1d else 0]
    d_ff = rows // 2 if "gate_up" in shapes else rows
    return width, d_ff, len(query)


def module_block_spec(model, *, block=None, seq_len=None, q0=1.0, rho0=0.0):
    """What the measured route needs of a plain module: its configuration, layout and input state.

    Parameters
    ----------
    model : torch.nn.Module
        A module holding an ``nn.TransformerEncoder``, or (with ``block``) a user's own blocks.
    block : BlockDescription, optional
        The block's description (default: :func:`encoder_block` of ``model``).
    seq_len : int
        Sequence length T the model runs at (required: a module has no maximum).
    q0, rho0 : float
        The input state the first block reads: mean squared entry of a token and mean cosine of
        two tokens (default: i.i.d. unit-variance tokens, 1 and 0; add your position and token
        embeddings' share).

    Returns
    -------
    (ModelSpec, WeightLayout, tuple of EmbeddingTable, BlockDescription)
        The configuration (:func:`~remprop.theory.models.module_spec.module_spec`, sizes read
        off the weights), where the roles are, the given input as a table, and the description;
        :func:`~remprop.validation.own_weights.own_weights_spec` measures the rest.
    """
    if seq_len is None:
        raise ParameterError("seq_len", "seq_len: a module without a transformers config has no maximum length: "
                             "give the seq_len it runs at")
    if block is None:
        block = encoder_block(model)
    elif not isinstance(block, BlockDescription):
        raise ParameterError("block", f"block must be a remprop.validation.module_weights.BlockDescription, got "
                             f"{type(block).__name__}")
    source = type(model).__name__
    layout = block.layout()
    width, d_ff, depth = _sizes(model, layout, source)
    spec = module_spec(width=width, depth=depth, heads=block.heads, d_ff=d_ff, seq_len=seq_len, norm=block.norm,
                       activation=block.activation, norm_type=block.norm_type, mlp=block.mlp, causal=block.causal,
                       q0=q0, rho0=rho0, eps=block.eps, final_norm=block.final_norm, branch_norm=block.branch_norm,
                       name=source, default_init=block.default_init)
    return spec, layout, (EmbeddingTable("input", spec.q0, spec.rho0 * spec.q0),), block
