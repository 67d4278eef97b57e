"""The forward call of a probed model: its inputs, mask and token window, checked.

A tensor of token ids goes in as ``input_ids`` (Hugging Face models and modules whose
forward takes ``input_ids``) or positionally; a float tensor as the Hugging Face model's
``main_input_name`` (``pixel_values`` for ViT) or ``inputs_embeds``, else positionally; a
dict as keyword arguments. The padding mask goes in as ``attention_mask`` (Hugging Face)
or ``src_key_padding_mask = ~mask`` (``nn.TransformerEncoder``).

Reference: Giorlandino & Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import inspect
from collections.abc import Mapping

import numpy as np
import torch
from torch import nn

__all__ = ["forward_call"]


def forward_call(model: nn.Module, inputs, mask, last, device, dtype, hf: bool):
    """The checked call of ``model``: ``(args, kwargs, mask, last)``.

    ``mask`` comes back on ``device`` (or None); ``last`` as an int (or None). Raises
    ``ValueError`` naming ``inputs``, ``mask`` or ``last`` when one has a wrong type or shape.
    """
    if mask is not None:
        _check_mask(mask, None)
    args, kwargs, tokens = _call_arguments(model, inputs, mask, device, dtype, hf)
    mask = _check_mask(mask, tokens)
    last = _check_last(last, tokens)
    return args, kwargs, None if mask is None else mask.to(device), last


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

