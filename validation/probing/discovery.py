"""Finding the parts of a torch transformer that the probe hooks.

* :func:`find_blocks`: the blocks (the longest ``nn.ModuleList`` of one class, or the
  ones named by ``layers=``);
* :func:`block_attention`: the self-attention module of each block -- an
  ``nn.MultiheadAttention``, or the module a Hugging Face model declares for its
  ``output_attentions`` (``_can_record_outputs["attentions"]``: class, sub-module name
  and tuple index), else the first sub-module whose class name contains
  ``SelfAttention``/``Attention``;
* :func:`hf_models`, :func:`hf_configs`: the Hugging Face models and configs whose
  attention implementation the probe switches to eager;
* :func:`device_and_dtype`, :func:`hidden_layouts`: where the inputs go and how the
  blocks lay out their hidden states.

Reference: Giorlandino & Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

__all__ = ["find_blocks", "is_hf_model", "hf_models", "block_attention", "hf_configs", "device_and_dtype",
           "hidden_layouts"]


def find_blocks(model: nn.Module, layers) -> tuple[list, list]:
    """The blocks and their qualified names: ``layers`` (a qualified name or modules), or by
    default the longest ``nn.ModuleList`` whose children share one class."""
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


def is_hf_model(module) -> bool:
    """Whether ``module`` is a Hugging Face model (it has a config and ``set_attn_implementation``)."""
    return callable(getattr(module, "set_attn_implementation", None)) and hasattr(module, "config")


def hf_models(model: nn.Module) -> list:
    """The outermost Hugging Face ``PreTrainedModel``-like modules in ``model``."""
    found = []

    def visit(module):
        if is_hf_model(module):
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


def hf_configs(model: nn.Module) -> list:
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



def block_attention(model: nn.Module, blocks, names) -> list:
    """(kind, module, index) of each block's self-attention (None where none is found).

    ``kind`` is ``"mha"`` for ``nn.MultiheadAttention``, ``"tuple"`` for a module whose
    output tuple holds the probabilities at ``index``.
    """
    specs = _attention_specs(model)
    return [_attention_module(block, name, specs) for block, name in zip(blocks, names)]


def hidden_layouts(attention, batch_first) -> list:
    """Whether each block's hidden states are (batch, T, d): ``batch_first`` if given, else
    ``batch_first`` of the block's ``nn.MultiheadAttention``, else True."""
    if batch_first is not None:
        return [batch_first] * len(attention)
    return [bool(found[1].batch_first) if found is not None and found[0] == "mha" else True
            for found in attention]


def device_and_dtype(model: nn.Module):
    """The device of the model's first tensor and the dtype of its first float tensor
    (defaults: CPU, torch's default dtype)."""
    device, dtype = None, None
    for tensor in list(model.parameters()) + list(model.buffers()):
        if device is None:
            device = tensor.device
        if dtype is None and tensor.is_floating_point():
            dtype = tensor.dtype
    return device or torch.device("cpu"), dtype or torch.get_default_dtype()

