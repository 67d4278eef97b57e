"""The recorder of a probed forward pass: hooks that compute statistics as the model runs.

Hooks (all removed on exit from :meth:`Recorder.hooked`, also when the forward raises):

* a forward pre-hook on the first block reads the residual stream entering it (layer 0);
* a forward hook on every block reads its output (layer l) and counts its calls;
* ``nn.MultiheadAttention``: a forward pre-hook (``with_kwargs=True``) sets
  ``need_weights=True, average_attn_weights=False``; a forward hook reads the per-head
  weights and hands the caller the output it asked for (``(out, None)``, or the head mean),
  so the block computes exactly what it would have. The weights are the softmax that
  multiplied the values in that very forward pass;
* other attention modules (Hugging Face, eager): a forward hook reads element ``index``
  of their output tuple. The probe does *not* pass ``output_attentions=True``:
  transformers 5 answers it by installing permanent capture hooks on the model's modules.

Only the statistics of :mod:`remprop.validation.measurements` are kept, no hidden state.

Reference: Giorlandino & Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import contextlib

import numpy as np
import torch

from ..measurements import (ATTENTION_STATISTICS, TOKEN_STATISTICS, attention_statistics,
                            last_tokens_statistics, token_statistics)
from .trace import ProbeTrace

__all__ = ["Recorder"]

#: Keyword names under which a block may receive its hidden states.
_HIDDEN_KWARGS = ("hidden_states", "hidden_state", "src", "x", "input", "tgt")
#: Positional parameters of ``nn.MultiheadAttention.forward`` after (query, key, value).
_MHA_PARAMETERS = ("key_padding_mask", "need_weights", "attn_mask", "average_attn_weights", "is_causal")


class Recorder:
    """Statistics of the blocks named ``names``, computed inside the hooks.

    Parameters
    ----------
    names : sequence of str
        Qualified names of the blocks.
    mask : Tensor of bool, shape (batch, T), optional
        Real tokens (on the model's device).
    last : int, optional
        Only the last ``last`` tokens enter the statistics.
    """

    def __init__(self, names, mask, last):
        self.names = tuple(names)
        depth = len(self.names)
        self.depth, self.mask, self.last = depth, mask, last
        self.tokens = [None] * (depth + 1)
        self.attention = [None] * depth
        self.calls = [0] * depth
        self.shape = None  # (batch, T) of layer 0

    # -- statistics -----------------------------------------------------------------------
    def hidden(self, layer, h, batch_first):
        """Token statistics of layer ``layer`` (0: input of block 1) from hidden states ``h``."""
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

    # -- hooks ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def hooked(self, blocks, attention, layouts):
        """Hooks on ``blocks`` and their ``attention`` modules (see
        :func:`~remprop.validation.probing.discovery.block_attention`; ``layouts``: batch-first
        flags), removed on exit, also when the forward raises."""
        with contextlib.ExitStack() as stack:
            def attach(handle):
                stack.callback(handle.remove)

            attach(blocks[0].register_forward_pre_hook(self._first_input_hook(layouts[0]), with_kwargs=True))
            for layer, (block, found) in enumerate(zip(blocks, attention), start=1):
                attach(block.register_forward_hook(self._block_output_hook(layer, layouts[layer - 1])))
                if found is None:
                    continue
                kind, module, index = found
                if kind == "mha":
                    pre, post = self._mha_hooks(layer)
                    attach(module.register_forward_pre_hook(pre, with_kwargs=True))
                    attach(module.register_forward_hook(post, with_kwargs=True))
                else:
                    attach(module.register_forward_hook(self._tuple_hook(layer, index)))
            yield self

    def _first_input_hook(self, batch_first):
        def hook(module, hook_args, hook_kwargs):
            if hook_args:
                h = hook_args[0]
            else:
                h = next((hook_kwargs[key] for key in _HIDDEN_KWARGS if key in hook_kwargs), None)
            if h is None:
                raise RuntimeError(f"probe: found no hidden states among the arguments of block {self.names[0]!r}")
            self.hidden(0, h, batch_first)
        return hook

    def _block_output_hook(self, layer, batch_first):
        def hook(module, hook_args, output):
            self.calls[layer - 1] += 1
            h = output
            if not isinstance(h, torch.Tensor) and isinstance(h, (tuple, list)) and h:
                h = h[0]
            self.hidden(layer, h, batch_first)
        return hook

    def _mha_hooks(self, layer):
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
            self.probs(layer, weights)
            if not need:
                return out, None
            if average and isinstance(weights, torch.Tensor):
                return out, weights.mean(dim=-3)
            return out, weights

        return pre, post

    def _tuple_hook(self, layer, index):
        def hook(module, hook_args, output):
            if isinstance(output, (tuple, list)) and len(output) > index:
                self.probs(layer, output[index])
        return hook

    # -- result ---------------------------------------------------------------------------
    def trace(self) -> ProbeTrace:
        """The recorded statistics; raises ``RuntimeError`` unless every block ran exactly once."""
        for name, calls in zip(self.names, self.calls):
            if calls != 1:
                raise RuntimeError(f"probe: block {name!r} ran {calls} times in one forward pass; expected once")
        batch = self.shape[0]
        out = {}
        for key in TOKEN_STATISTICS:
            out[key] = np.stack([stats[key].cpu().numpy() for stats in self.tokens], axis=1)
        for key in ATTENTION_STATISTICS:
            out[key] = np.stack([np.full(batch, np.nan) if stats is None else stats[key].cpu().numpy()
                                 for stats in self.attention], axis=1)
        return ProbeTrace(**out, layer_names=self.names,
                          attention_recorded=all(stats is not None for stats in self.attention), last=self.last)
