"""What the probe switches for one forward pass, and restores afterwards.

Every module is put in eval mode (no dropout) and its ``training`` flag restored
afterwards; Hugging Face models run with eager attention (restored afterwards: the
``_attn_implementation_internal`` value of every config found is written back, so the
restore is exact and cannot fail); ``torch.backends.mha`` fast paths are disabled
(restored afterwards) -- otherwise, in eval mode without gradients,
``nn.TransformerEncoder`` turns a padded batch into a nested tensor and
``nn.TransformerEncoderLayer`` / ``nn.MultiheadAttention`` call fused kernels that bypass
``self_attn.forward`` and its hooks.

Reference: Giorlandino & Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import contextlib
import warnings

import torch
from torch import nn

from .discovery import hf_configs, hf_models

__all__ = ["probing_state"]

_MISSING = object()


@contextlib.contextmanager
def probing_state(model: nn.Module):
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
                 for config in hf_configs(model)]

        def restore_attention():
            for config, value in saved:
                if value is _MISSING:
                    config.__dict__.pop("_attn_implementation_internal", None)
                else:
                    config._attn_implementation_internal = value

        stack.callback(restore_attention)
        for hf in hf_models(model):
            if getattr(hf.config, "_attn_implementation", None) != "eager":
                try:
                    hf.set_attn_implementation("eager")
                except Exception as error:  # the attention is then not recorded (NaN), not fatal
                    warnings.warn(f"probe: could not switch {type(hf).__name__} to eager attention ({error}); "
                                  "attention probabilities may not be recorded", RuntimeWarning, stacklevel=3)
        yield
