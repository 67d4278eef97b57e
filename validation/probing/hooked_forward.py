"""The public entry of the probe: order parameters of any torch transformer from one hooked
forward pass (see :mod:`remprop.validation.probing` for what is read and how).

Reference: Giorlandino & Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import torch
from torch import nn

from .arguments import forward_call
from .discovery import block_attention, device_and_dtype, find_blocks, hidden_layouts, is_hf_model
from .recorder import Recorder
from .state import probing_state
from .trace import ProbeTrace

__all__ = ["probe"]


def probe(model: nn.Module, inputs, mask: torch.Tensor | None = None, *, layers=None,
          last: int | None = None, batch_first: bool | None = None) -> ProbeTrace:
    r"""Order parameters of each layer of ``model`` at initialisation, from one hooked forward pass.

    For the n real tokens of a layer, :math:`G_{ij} = x_i \cdot x_j / d`,
    :math:`q = \frac1n\sum_i G_{ii}`, :math:`p = \frac{1}{n(n-1)}\sum_{i\ne j} G_{ij}`,
    :math:`\rho = p/q`, the mean pairwise cosine, and from the attention probabilities
    :math:`Y_2 = \langle \sum_j a_{ij}^2 \rangle_{\text{heads},\,i}` and the entropy
    :math:`\langle -\sum_j a_{ij}\log a_{ij}\rangle` (:class:`~remprop.validation.probing.trace.ProbeTrace`). Layer 0 is the input
    of the first block, layer l the output of block l, before any final norm. The model is not
    modified: eval mode, eager attention and MHA fast paths are switched for the pass and
    restored, hooks removed, also when the forward raises (:mod:`remprop.validation.probing`).

    Parameters
    ----------
    model : nn.Module
        A Hugging Face model, ``nn.TransformerEncoder``, or any module whose blocks form an
        ``nn.ModuleList``.
    inputs : Tensor or dict
        Integer tensor (batch, T) of token ids (``input_ids`` or positional); float tensor
        (``pixel_values`` for ViT, ``inputs_embeds`` (batch, T, d) for Hugging Face text models,
        else positional in the blocks' layout); or a dict of keyword arguments of
        ``model.forward``. Moved to the model's device; floats cast to its dtype.
    mask : Tensor of bool, shape (batch, T), optional
        True for real tokens, the only ones measured; passed as ``attention_mask`` (Hugging Face,
        with dict inputs only if the dict has none) or ``src_key_padding_mask = ~mask``.
    layers : str or sequence of nn.Module, optional
        The blocks, by qualified name (``"encoder.layer"``) or as modules. Default: the
        longest ``nn.ModuleList`` whose children share one class.
    last : int, optional
        Statistics of the last ``last`` tokens only (2 <= last <= T; causal models).
    batch_first : bool, optional
        Layout of the hidden states (default: that of the blocks' ``nn.MultiheadAttention``, else True).

    Returns
    -------
    ProbeTrace
        ``q, p, rho, cosine`` (batch, L + 1), ``y2, entropy`` (batch, L; NaN where attention
        was not read), ``layer_names``.

    Raises
    ------
    ValueError
        A bad ``model``, ``layers``, ``inputs``, ``mask`` or ``last``; no block list found.
    RuntimeError
        A block that did not run exactly once; hidden states not (batch, T, d).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333.
    """
    if not isinstance(model, nn.Module):
        raise ValueError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    if batch_first is not None and not isinstance(batch_first, bool):
        raise ValueError(f"batch_first must be None or a bool, got {batch_first!r}")
    blocks, names = find_blocks(model, layers)
    device, dtype = device_and_dtype(model)
    args, kwargs, mask, last = forward_call(model, inputs, mask, last, device, dtype, is_hf_model(model))
    attention = block_attention(model, blocks, names)
    recorder = Recorder(names, mask, last)
    layouts = hidden_layouts(attention, batch_first)
    with probing_state(model), recorder.hooked(blocks, attention, layouts), torch.no_grad():
        model(*args, **kwargs)
    return recorder.trace()
