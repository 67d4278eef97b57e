"""Probe any torch transformer at initialisation: order parameters layer by layer, from hooks.

:func:`probe` attaches forward hooks to the blocks of a model -- a Hugging Face model
(``BertModel``, ``RobertaModel``, ``GPT2Model``, ``GPT2LMHeadModel``, ``ViTModel``, ...) or a
plain ``torch.nn.TransformerEncoder`` -- runs one forward pass under ``torch.no_grad()`` and
records, for every sequence of the batch,

* the residual stream entering block 1 (layer 0) and leaving each block l = 1..L: with the
  Gram matrix ``G_ij = x_i . x_j / d`` of the n real tokens,

  ``q = (1/n) sum_i G_ii``, ``p = (1/(n(n-1))) sum_{i != j} G_ij``, ``rho = p / q`` and the
  mean pairwise cosine ``(1/(n(n-1))) sum_{i != j} G_ij / sqrt(G_ii G_jj)``;
* the self-attention probabilities ``a_ij`` of each block: the participation ratio
  ``Y2 = sum_j a_ij^2`` and the entropy ``-sum_j a_ij log a_ij``, averaged over heads and
  real query rows i.

The statistics are those of :func:`~remprop.validation.measurements.token_statistics` and
:func:`~remprop.validation.measurements.attention_statistics`.

How the attention probabilities are read
----------------------------------------
* ``nn.MultiheadAttention`` (the ``self_attn`` of ``nn.TransformerEncoderLayer``, or the first
  one inside any other block): a forward pre-hook (``with_kwargs=True``) sets
  ``need_weights=True, average_attn_weights=False``; a forward hook reads the per-head
  weights and hands the caller the output it asked for (``(out, None)``, or the head mean),
  so the block computes exactly what it would have. The weights are the softmax that
  multiplied the values in that very forward pass.
* Hugging Face models (transformers 5): every attention module returns
  ``(attn_output, attn_weights)``, but only the ``"eager"`` implementation fills
  ``attn_weights`` (``"sdpa"``, the default, returns ``None``). The probe switches the model
  to eager with the public ``model.set_attn_implementation("eager")`` and, afterwards, writes
  back the ``_attn_implementation_internal`` value of every config it found (so the restore
  is exact and cannot fail). The attention module of each block is the one the model class
  declares for its ``output_attentions`` (``_can_record_outputs["attentions"]``: class,
  sub-module name and tuple index), else the first sub-module whose class name contains
  ``SelfAttention``/``Attention``. The probe does *not* pass ``output_attentions=True``:
  transformers 5 answers it by installing permanent capture hooks on the model's modules.

What the probe changes, only for the duration of the forward pass
----------------------------------------------------------------
Every module is put in eval mode (no dropout) and its ``training`` flag restored
afterwards; Hugging Face models run with eager attention (restored afterwards);
``torch.backends.mha`` fast paths are disabled (restored afterwards) -- otherwise, in eval
mode without gradients, ``nn.TransformerEncoder`` turns a padded batch into a nested tensor
and ``nn.TransformerEncoderLayer`` / ``nn.MultiheadAttention`` call fused kernels that bypass
``self_attn.forward`` and its hooks. (The layer fast path is also disabled by any hook on the
layer: ``TransformerEncoderLayer.forward`` checks ``_forward_hooks``/``_forward_pre_hooks`` of
its modules.) All hooks are removed, also when the forward raises. Parameters are never
touched.

Reference: Giorlandino & Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from .simulator import StackTrace
from .measurements import (ATTENTION_STATISTICS, TOKEN_STATISTICS, attention_statistics,
                           last_tokens_statistics, token_statistics)

__all__ = ["ProbeTrace", "probe"]

#: Keyword names under which a block may receive its hidden states.
_HIDDEN_KWARGS = ("hidden_states", "hidden_state", "src", "x", "input", "tgt")
#: Positional parameters of ``nn.MultiheadAttention.forward`` after (query, key, value).
_MHA_PARAMETERS = ("key_padding_mask", "need_weights", "attn_mask", "average_attn_weights", "is_causal")
_MISSING = object()


@dataclass(frozen=True, eq=False)
class ProbeTrace(StackTrace):
    r"""Per-sequence, per-layer statistics of one forward pass, as recorded by :func:`probe`.

    The statistics of a :class:`~remprop.validation.StackTrace` (so code written for our
    simulated stacks reads a probed model too), plus the names of the blocks, whether their
    attention was read, and the token window.

    Layer 0 is the residual stream entering the first block, layer l = 1..L the output of
    block l. With the Gram matrix :math:`G_{ij} = x_i \cdot x_j / d` of the n real tokens
    (or of the last ``last`` tokens):

    .. math::
        q = \frac{1}{n}\sum_i G_{ii},\quad
        p = \frac{1}{n(n-1)}\sum_{i\ne j} G_{ij},\quad
        \rho = p/q,\quad
        Y_2 = \Big\langle \sum_j a_{ij}^2 \Big\rangle_{\text{heads, rows } i}

    Attributes
    ----------
    q, p, rho, cosine : ndarray, shape (batch, L + 1), float64
        Token statistics of layers 0..L (``cosine``: mean pairwise cosine).
    y2, entropy : ndarray, shape (batch, L), float64
        Attention statistics of blocks 1..L; NaN for blocks whose attention probabilities
        could not be read.
    layer_names : tuple of str
        Qualified module names of the L blocks.
    attention_recorded : bool
        True when the attention probabilities of every block were read.
    last : int or None
        The statistics cover the last ``last`` tokens only (causal models); None: all tokens.

    The arrays are read-only.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333.
    """

    layer_names: tuple = ()
    attention_recorded: bool = False
    last: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "layer_names", tuple(str(name) for name in self.layer_names))
        depth = len(self.layer_names)
        shape = None
        for name in TOKEN_STATISTICS + ATTENTION_STATISTICS:
            array = np.array(getattr(self, name), dtype=np.float64)  # a private copy
            expected = depth + 1 if name in TOKEN_STATISTICS else depth
            if array.ndim != 2 or array.shape[1] != expected:
                raise ValueError(f"{name} must have shape (batch, {expected}), got {array.shape}")
            if shape is not None and array.shape[0] != shape:
                raise ValueError(f"{name} has {array.shape[0]} sequences, expected {shape}")
            shape = array.shape[0]
            array.flags.writeable = False
            object.__setattr__(self, name, array)
        object.__setattr__(self, "attention_recorded", bool(self.attention_recorded))

    @property
    def depth(self) -> int:
        """Number of blocks L."""
        return len(self.layer_names)

    @property
    def batch_size(self) -> int:
        """Number of sequences."""
        return self.q.shape[0]

    def mean(self) -> dict:
        """Means over the batch, per layer.

        Returns
        -------
        dict of str -> ndarray
            ``q, p, rho, cosine`` of shape (L + 1,), ``y2, entropy`` of shape (L,).
        """
        return {name: getattr(self, name).mean(axis=0) for name in TOKEN_STATISTICS + ATTENTION_STATISTICS}

    def as_dict(self) -> dict:
        """All fields, arrays as writable copies and ``layer_names`` as a list."""
        out = {name: getattr(self, name).copy() for name in TOKEN_STATISTICS + ATTENTION_STATISTICS}
        out.update(layer_names=list(self.layer_names), attention_recorded=self.attention_recorded,
                   last=self.last)
        return out


# --------------------------------------------------------------------------- model structure

def _find_blocks(model: nn.Module, layers) -> tuple[list, list]:
    """The blocks and their qualified names."""
    names = {}
    for name, module in model.named_modules(remove_duplicate=False):
        names.setdefault(id(module), name)
    if layers is None:
        best = None
        for name, module in model.named_modules():
            if isinstance(module, nn.ModuleList) and len(module) and len({type(c) for c in module}) == 1:
                if best is None or len(module) > len(best):
                    best = module
        if best is None:
            raise ValueError(f"layers: found no nn.ModuleList of blocks of one class in {type(model).__name__}; "
                             "pass layers= (a list of modules or a qualified name)")
        blocks = list(best)
    else:
        if isinstance(layers, str):
            try:
                container = model.get_submodule(layers)
            except AttributeError:
                raise ValueError(f"layers={layers!r} names no sub-module of {type(model).__name__}") from None
            if not isinstance(container, (nn.ModuleList, nn.Sequential)):
                raise ValueError(f"layers={layers!r} is a {type(container).__name__}, "
                                 "not a list of blocks (nn.ModuleList or nn.Sequential)")
            blocks = list(container)
        elif isinstance(layers, (nn.ModuleList, nn.Sequential, Sequence)):
            blocks = list(layers)
        else:
            raise ValueError(f"layers must be None, a qualified name or a sequence of modules, "
                             f"got {type(layers).__name__}")
        if not blocks:
            raise ValueError("layers must name at least one block, got an empty list")
        for block in blocks:
            if not isinstance(block, nn.Module):
                raise ValueError(f"layers must hold nn.Module blocks, got {type(block).__name__}")
            if id(block) not in names:
                raise ValueError(f"layers holds a {type(block).__name__} that is not a sub-module of the model")
        if len({id(block) for block in blocks}) != len(blocks):
            raise ValueError("layers holds the same block twice")
    return blocks, [names[id(block)] for block in blocks]


def _is_hf(module) -> bool:
    return callable(getattr(module, "set_attn_implementation", None)) and hasattr(module, "config")


def _hf_models(model: nn.Module) -> list:
    """The outermost Hugging Face ``PreTrainedModel``-like modules in ``model``."""
    found = []

    def visit(module):
        if _is_hf(module):
            found.append(module)
            return
        for child in module.children():
            visit(child)

    visit(model)
    return found


def _attention_specs(model: nn.Module) -> list:
    """(target class, class-name suffix, layer name, tuple index) of HF ``attentions`` recorders."""
    specs = []
    for module in model.modules():
        declared = getattr(type(module), "_can_record_outputs", None)
        if not isinstance(declared, Mapping) or "attentions" not in declared:
            continue
        entries = declared["attentions"]
        for entry in entries if isinstance(entries, (list, tuple)) else [entries]:
            if isinstance(entry, type):
                specs.append((entry, None, None, 1))
            elif isinstance(entry, str):
                specs.append((None, entry, None, 1))
            elif hasattr(entry, "index"):  # transformers' OutputRecorder
                specs.append((getattr(entry, "target_class", None), getattr(entry, "class_name", None),
                              getattr(entry, "layer_name", None), int(entry.index)))
    return specs


def _attention_module(block: nn.Module, block_name: str, specs: list):
    """(kind, module, index) of the block's self-attention, or None."""
    own = getattr(block, "self_attn", None)
    if isinstance(own, nn.MultiheadAttention):
        return "mha", own, None
    for module in block.modules():
        if isinstance(module, nn.MultiheadAttention):
            return "mha", module, None
    prefix = f"{block_name}." if block_name else ""
    named = [(prefix + name, module) for name, module in block.named_modules() if module is not block]
    for target, suffix, layer_name, index in specs:
        for name, module in named:
            match = (target is not None and isinstance(module, target)) or \
                (suffix is not None and name.endswith(suffix))
            if match and layer_name is not None:
                match = f".{layer_name.strip('.')}." in f".{name}."
            if match:
                return "tuple", module, index
    for key in ("selfattention", "attention"):
        for name, module in named:
            cls = type(module).__name__.lower()
            if key in cls and "cross" not in cls and "cross" not in name.lower():
                return "tuple", module, 1
    return None


def _configs(model: nn.Module) -> list:
    """Every Hugging Face config reachable from the modules of ``model`` (and their sub-configs)."""
    seen, out = set(), []
    stack = [getattr(module, "config", None) for module in model.modules()]
    while stack:
        config = stack.pop()
        if config is None or id(config) in seen or not hasattr(config, "_attn_implementation_internal"):
            continue
        seen.add(id(config))
        out.append(config)
        for key in getattr(config, "sub_configs", None) or {}:
            stack.append(getattr(config, key, None))
    return out


@contextlib.contextmanager
def _probing_state(model: nn.Module):
    """Eval mode, eager HF attention, MHA fast paths off; everything restored on exit."""
    with contextlib.ExitStack() as stack:
        training = [(module, module.training) for module in model.modules()]

        def restore_training():
            for module, flag in training:
                module.training = flag

        stack.callback(restore_training)
        model.eval()

        fastpath = torch.backends.mha.get_fastpath_enabled()
        stack.callback(torch.backends.mha.set_fastpath_enabled, fastpath)
        torch.backends.mha.set_fastpath_enabled(False)

        saved = [(config, config.__dict__.get("_attn_implementation_internal", _MISSING))
                 for config in _configs(model)]

        def restore_attention():
            for config, value in saved:
                if value is _MISSING:
                    config.__dict__.pop("_attn_implementation_internal", None)
                else:
                    config._attn_implementation_internal = value

        stack.callback(restore_attention)
        for hf in _hf_models(model):
            if getattr(hf.config, "_attn_implementation", None) != "eager":
                try:
                    hf.set_attn_implementation("eager")
                except Exception as error:  # the attention is then not recorded (NaN), not fatal
                    warnings.warn(f"probe: could not switch {type(hf).__name__} to eager attention ({error}); "
                                  "attention probabilities may not be recorded", RuntimeWarning, stacklevel=4)
        yield


# --------------------------------------------------------------------------- inputs

def _device_and_dtype(model: nn.Module):
    device, dtype = None, None
    for tensor in list(model.parameters()) + list(model.buffers()):
        if device is None:
            device = tensor.device
        if dtype is None and tensor.is_floating_point():
            dtype = tensor.dtype
    return device or torch.device("cpu"), dtype or torch.get_default_dtype()


def _forward_parameters(model: nn.Module) -> set:
    try:
        return set(inspect.signature(model.forward).parameters)
    except (TypeError, ValueError):  # pragma: no cover - builtins without a signature
        return set()


def _call_arguments(model, inputs, mask, device, dtype, hf: bool):
    """(args, kwargs) of the forward call and the (batch, T) shape of the tokens if known."""
    parameters = _forward_parameters(model)
    if isinstance(inputs, Mapping):
        if not all(isinstance(key, str) for key in inputs):
            raise ValueError("inputs: a dict of inputs must have str keys (keyword arguments of forward)")
        kwargs = {key: value.to(device) if isinstance(value, torch.Tensor) else value
                  for key, value in inputs.items()}
        if mask is not None and hf and "attention_mask" not in kwargs:
            kwargs["attention_mask"] = mask.to(device, torch.long)
        return (), kwargs, None
    if not isinstance(inputs, torch.Tensor):
        raise ValueError(f"inputs must be a tensor of token ids, a float tensor or a dict of keyword "
                         f"arguments, got {type(inputs).__name__}")
    args, kwargs, tokens = (), {}, None
    if inputs.dtype == torch.bool or inputs.is_complex():
        raise ValueError(f"inputs must hold integer token ids or floats, got dtype {inputs.dtype}")
    if not inputs.is_floating_point():
        if inputs.ndim != 2:
            raise ValueError(f"inputs: token ids must have shape (batch, T), got {tuple(inputs.shape)}")
        ids = inputs.to(device, torch.long)
        tokens = tuple(ids.shape)
        if hf or "input_ids" in parameters:
            kwargs["input_ids"] = ids
        else:
            args = (ids,)
    else:
        x = inputs.to(device, dtype)
        main = getattr(model, "main_input_name", None) if hf else None
        if hf:
            name = "inputs_embeds" if main in (None, "input_ids") else main
            ndim = {"inputs_embeds": 3, "pixel_values": 4}.get(name)
            if ndim is not None and x.ndim != ndim:
                raise ValueError(f"inputs: a float tensor is passed as {name}, which needs {ndim} dimensions, "
                                 f"got shape {tuple(x.shape)}")
            kwargs[name] = x
            if name == "inputs_embeds":
                tokens = tuple(x.shape[:2])
        else:
            if x.ndim != 3:
                raise ValueError(f"inputs: a float tensor must be a batch of sequences of vectors (3 dimensions), "
                                 f"got shape {tuple(x.shape)}")
            args = (x,)
    if mask is not None:
        if hf:
            kwargs["attention_mask"] = mask.to(device, torch.long)
        elif "src_key_padding_mask" in parameters:
            kwargs["src_key_padding_mask"] = ~mask.to(device)
        elif "attention_mask" in parameters:
            kwargs["attention_mask"] = mask.to(device)
        else:
            raise ValueError(f"mask: {type(model).__name__}.forward takes neither src_key_padding_mask nor "
                             "attention_mask; pass inputs as a dict (mask then only selects the tokens measured)")
    return args, kwargs, tokens


def _check_mask(mask, tokens):
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.ndim != 2:
        raise ValueError(f"mask must be a bool tensor of shape (batch, T) (True = real token), got "
                         f"{getattr(mask, 'dtype', type(mask).__name__)} {tuple(getattr(mask, 'shape', ()))}")
    if tokens is not None and tuple(mask.shape) != tokens:
        raise ValueError(f"mask must have the shape {tokens} of the tokens, got {tuple(mask.shape)}")
    return mask


def _check_last(last, tokens):
    if last is None:
        return None
    if isinstance(last, bool) or not isinstance(last, (int, np.integer)) or last < 2:
        raise ValueError(f"last must be None or an integer >= 2, got {last!r}")
    if tokens is not None and last > tokens[1]:
        raise ValueError(f"last must be in [2, {tokens[1]}] (the sequence length), got {last}")
    return int(last)


# --------------------------------------------------------------------------- the probe

class _Recorder:
    """Statistics computed inside the hooks (no hidden state is kept)."""

    def __init__(self, depth, mask, last):
        self.depth, self.mask, self.last = depth, mask, last
        self.tokens = [None] * (depth + 1)
        self.attention = [None] * depth
        self.calls = [0] * depth
        self.shape = None  # (batch, T) of layer 0

    def hidden(self, layer, h, batch_first):
        if not isinstance(h, torch.Tensor) or h.is_nested or h.ndim != 3:
            what = "a nested tensor" if isinstance(h, torch.Tensor) and h.is_nested else \
                f"{type(h).__name__} of shape {tuple(getattr(h, 'shape', ()))}"
            raise RuntimeError(f"probe: the hidden states at layer {layer} must be a (batch, T, d) tensor, "
                               f"got {what}")
        h = h.detach()
        if not batch_first:
            h = h.transpose(0, 1)
        shape = tuple(h.shape[:2])
        if layer == 0:
            self.shape = shape
        if self.mask is not None and tuple(self.mask.shape) != shape:
            raise ValueError(f"mask must have shape {shape} (batch, T) of the hidden states, got "
                             f"{tuple(self.mask.shape)}")
        if self.last is not None:
            if self.last > shape[1]:
                raise ValueError(f"last must be in [2, {shape[1]}] (the sequence length), got {self.last}")
            stats = last_tokens_statistics(h, self.last, self.mask)
        else:
            stats = token_statistics(h, self.mask)
        if self.tokens[layer] is None:
            self.tokens[layer] = stats

    def probs(self, layer, a):
        """Attention statistics of block ``layer`` (1-based); ignores anything that is not (B, H, T, T)."""
        if self.attention[layer - 1] is not None or not isinstance(a, torch.Tensor) or a.ndim != 4:
            return
        a = a.detach()
        if self.shape is not None and (a.shape[0] != self.shape[0] or a.shape[-1] != a.shape[-2]
                                       or a.shape[-2] != self.shape[1]):
            return
        mask = self.mask
        if self.last is not None:
            t = a.shape[-2]
            a = a[..., t - self.last:, :]
            mask = None if mask is None else mask[:, t - self.last:]
        self.attention[layer - 1] = attention_statistics(a, mask)


def probe(model: nn.Module, inputs, mask: torch.Tensor | None = None, *, layers=None,
          last: int | None = None, batch_first: bool | None = None) -> ProbeTrace:
    r"""Order parameters of each layer of ``model`` at initialisation, from one hooked forward pass.

    For the n real tokens :math:`x_1..x_n \in \mathbb{R}^d` of a sequence at a given layer,
    with :math:`G_{ij} = x_i \cdot x_j / d`, and the attention probabilities :math:`a_{ij}`:

    .. math::
        q = \frac{1}{n}\sum_i G_{ii},\qquad
        p = \frac{1}{n(n-1)}\sum_{i\ne j} G_{ij},\qquad
        \rho = \frac{p}{q},\qquad
        Y_2 = \Big\langle \sum_j a_{ij}^2 \Big\rangle_{\text{heads},\,i}

    plus the mean pairwise cosine and the attention entropy
    :math:`\langle -\sum_j a_{ij}\log a_{ij}\rangle`. Layer 0 is the input of the first block
    (after embeddings), layer l the output of block l -- before any final norm
    (``ln_f`` of GPT-2, ``layernorm`` of ViT, ``TransformerEncoder.norm``).

    The model is not modified: hooks are removed, and eval mode, the Hugging Face attention
    implementation and ``torch.backends.mha`` fast paths -- switched for the forward pass --
    are restored, also when the forward raises. Parameters are never changed.

    Parameters
    ----------
    model : nn.Module
        A transformer (Hugging Face model, ``nn.TransformerEncoder``, or any module whose
        blocks form an ``nn.ModuleList``).
    inputs : Tensor or dict
        * integer tensor (batch, T): token ids, passed as ``input_ids`` (Hugging Face models and
          modules whose forward takes ``input_ids``), else positionally;
        * float tensor: Hugging Face models get it as their ``main_input_name``
          (``pixel_values``, 4 dimensions, for ViT), or as ``inputs_embeds`` (batch, T, d)
          for text models; other modules get it positionally -- the source sequence of
          ``nn.TransformerEncoder``, (batch, T, d) or (T, batch, d) as its ``batch_first`` says;
        * dict: keyword arguments of ``model.forward``, passed through.

        Tensors are moved to the model's device, float tensors cast to its dtype.
    mask : Tensor of bool, shape (batch, T), optional
        True for real tokens; the others enter no statistic. It is also passed to the model:
        as ``attention_mask`` to Hugging Face models, as ``src_key_padding_mask = ~mask`` to
        ``nn.TransformerEncoder``; with dict inputs, only as ``attention_mask`` to Hugging Face
        models and only if the dict has none.
    layers : str or sequence of nn.Module, optional
        The blocks: a qualified sub-module name (``"encoder.layer"``) or a list of modules.
        Default: the longest ``nn.ModuleList`` whose children share one class.
    last : int, optional
        Statistics of the last ``last`` tokens only (2 <= last <= T): token statistics of
        their Gram matrix, attention statistics of their rows. For causal models (GPT-2),
        whose early tokens do not follow the encoder picture.
    batch_first : bool, optional
        Layout of the blocks' hidden states. Default: ``self_attn.batch_first`` of blocks
        with an ``nn.MultiheadAttention``, else True.

    Returns
    -------
    ProbeTrace
        ``q, p, rho, cosine`` of shape (batch, L + 1) and ``y2, entropy`` of shape
        (batch, L) as float64 numpy arrays (NaN where attention probabilities could not be
        read; see ``attention_recorded``), and the blocks' ``layer_names``.

    Raises
    ------
    ValueError
        If ``model`` is not an ``nn.Module``, no block list is found or ``layers`` is invalid,
        ``inputs``, ``mask`` or ``last`` has a wrong type or shape.
    RuntimeError
        If a block did not run exactly once or its hidden states are not (batch, T, d).

    Notes
    -----
    Attention probabilities: for ``nn.MultiheadAttention`` the probe sets
    ``need_weights=True, average_attn_weights=False`` in a pre-hook and returns to the block
    the output it asked for; for Hugging Face models it switches to the eager attention
    implementation (the only one that returns the softmax) and hooks each block's attention
    module, reading element ``index`` of its output tuple.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if batch_first is not None and not isinstance(batch_first, bool):
        raise ValueError(f"batch_first must be None or a bool, got {batch_first!r}")
    blocks, names = _find_blocks(model, layers)
    device, dtype = _device_and_dtype(model)
    hf = _is_hf(model)
    if mask is not None:
        _check_mask(mask, None)
    args, kwargs, tokens = _call_arguments(model, inputs, mask, device, dtype, hf)
    mask = _check_mask(mask, tokens)
    last = _check_last(last, tokens)
    mask = None if mask is None else mask.to(device)

    specs = _attention_specs(model)
    attention = [_attention_module(block, name, specs) for block, name in zip(blocks, names)]
    layouts = []
    for block, found in zip(blocks, attention):
        if batch_first is not None:
            layouts.append(batch_first)
        elif found is not None and found[0] == "mha":
            layouts.append(bool(found[1].batch_first))
        else:
            layouts.append(True)
    recorder = _Recorder(len(blocks), mask, last)

    def first_input(module, hook_args, hook_kwargs):
        if hook_args:
            h = hook_args[0]
        else:
            h = next((hook_kwargs[key] for key in _HIDDEN_KWARGS if key in hook_kwargs), None)
        if h is None:
            raise RuntimeError(f"probe: found no hidden states among the arguments of block {names[0]!r}")
        recorder.hidden(0, h, layouts[0])

    def block_output(layer):
        def hook(module, hook_args, output):
            recorder.calls[layer - 1] += 1
            h = output
            if not isinstance(h, torch.Tensor) and isinstance(h, (tuple, list)) and h:
                h = h[0]
            recorder.hidden(layer, h, layouts[layer - 1])
        return hook

    def mha_hooks(layer):
        requested = []

        def pre(module, hook_args, hook_kwargs):
            hook_kwargs = dict(hook_kwargs)
            for name, value in zip(_MHA_PARAMETERS, hook_args[3:]):
                hook_kwargs[name] = value
            requested.append((hook_kwargs.get("need_weights", True), hook_kwargs.get("average_attn_weights", True)))
            hook_kwargs.update(need_weights=True, average_attn_weights=False)
            return tuple(hook_args[:3]), hook_kwargs

        def post(module, hook_args, hook_kwargs, output):
            need, average = requested.pop()
            out, weights = output
            recorder.probs(layer, weights)
            if not need:
                return out, None
            if average and isinstance(weights, torch.Tensor):
                return out, weights.mean(dim=-3)
            return out, weights

        return pre, post

    def tuple_hook(layer, index):
        def hook(module, hook_args, output):
            if isinstance(output, (tuple, list)) and len(output) > index:
                recorder.probs(layer, output[index])
        return hook

    with contextlib.ExitStack() as stack:
        def attach(handle):
            stack.callback(handle.remove)

        stack.enter_context(_probing_state(model))
        attach(blocks[0].register_forward_pre_hook(first_input, with_kwargs=True))
        for layer, (block, found) in enumerate(zip(blocks, attention), start=1):
            attach(block.register_forward_hook(block_output(layer)))
            if found is None:
                continue
            kind, module, index = found
            if kind == "mha":
                pre, post = mha_hooks(layer)
                attach(module.register_forward_pre_hook(pre, with_kwargs=True))
                attach(module.register_forward_hook(post, with_kwargs=True))
            else:
                attach(module.register_forward_hook(tuple_hook(layer, index)))
        with torch.no_grad():
            model(*args, **kwargs)

    for name, calls in zip(names, recorder.calls):
        if calls != 1:
            raise RuntimeError(f"probe: block {name!r} ran {calls} times in one forward pass; expected once")
    batch = recorder.shape[0]
    out = {}
    for key in TOKEN_STATISTICS:
        out[key] = np.stack([stats[key].cpu().numpy() for stats in recorder.tokens], axis=1)
    for key in ATTENTION_STATISTICS:
        out[key] = np.stack([np.full(batch, np.nan) if stats is None else stats[key].cpu().numpy()
                             for stats in recorder.attention], axis=1)
    return ProbeTrace(**out, layer_names=tuple(names),
                      attention_recorded=all(stats is not None for stats in recorder.attention), last=last)

