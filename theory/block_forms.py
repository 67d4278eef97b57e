"""Decoder block forms: the checks of the Architecture fields that choose them (docs/theory.md section 19).

Grouped key/value heads (``kv_heads``), QK-norm (``qk_norm``, ``qk_norm_gain``,
``qk_norm_dim``), parallel branches (``block_form``), a norm on each branch's output
(``branch_norm``), a norm after the last block (``final_norm``) and attention-logit
soft-capping (``logit_softcap``). :func:`check_block_forms` validates them once, when an
:class:`~remprop.theory.Architecture` is built.
"""
from __future__ import annotations

import numpy as np

from .checks import as_float_array, check_count

__all__ = ["check_block_forms"]


def check_block_forms(arch):
    """``kv_heads``, QK-norm, ``block_form``, ``branch_norm``, ``final_norm`` and
    ``logit_softcap`` (docs/theory.md section 19)."""
    if arch.kv_heads is not None:
        kv = check_count("kv_heads", arch.kv_heads, 1)
        if arch.heads % kv:
            raise ValueError(f"kv_heads must divide heads ({arch.heads}), got {kv}")
        object.__setattr__(arch, "kv_heads", kv)
    for name in ("qk_norm", "branch_norm", "final_norm"):
        if not isinstance(getattr(arch, name), (bool, np.bool_)):
            raise ValueError(f"{name} must be True or False, got {getattr(arch, name)!r}")
        object.__setattr__(arch, name, bool(getattr(arch, name)))
    gain = as_float_array("qk_norm_gain", arch.qk_norm_gain, positive=True)
    if gain.ndim:
        raise ValueError(f"qk_norm_gain must be a single number, got shape {gain.shape}")
    object.__setattr__(arch, "qk_norm_gain", float(gain))
    if arch.qk_norm_dim is not None:
        object.__setattr__(arch, "qk_norm_dim", check_count("qk_norm_dim", arch.qk_norm_dim, 1))
    if arch.qk_norm:
        if arch.seq_len is None:
            raise ValueError("seq_len is required with qk_norm=True (an integer T >= 2): a QK-normed head's "
                             "reduced scale is g^2 sqrt((1 - kappa_n) / log T) (docs/theory.md section 16)")
        if arch.head_dim is None:
            raise ValueError("head_dim is required with qk_norm=True (the width d_H of one head's queries "
                             "and keys): the normalised scores' cosine kappa_n depends on it")
        if arch.qk_norm_dim is not None and arch.qk_norm_dim < arch.head_dim:
            raise ValueError(f"qk_norm_dim must be >= head_dim ({arch.head_dim}): a head's coordinates are "
                             f"normalised together, got {arch.qk_norm_dim}")
    if arch.block_form.parallel:
        if not arch.norm.normalises_branch_inputs:
            raise ValueError(f"block_form 'parallel' needs norm='pre' (both branches read LN(x)), "
                             f"got norm={arch.norm!r}")
        if np.any(np.asarray(arch.alpha_mlp) != 1.0):
            raise ValueError("alpha_mlp must be 1 with block_form='parallel': the block has one skip, "
                             "alpha_sa (x <- alpha_sa x + SA(LN x) + MLP(LN x))")
    if arch.logit_softcap is not None:
        cap = as_float_array("logit_softcap", arch.logit_softcap, positive=True)
        if cap.ndim:
            raise ValueError(f"logit_softcap must be a single number or None, got shape {cap.shape}")
        object.__setattr__(arch, "logit_softcap", float(cap))
        if arch.seq_len is None:
            raise ValueError("logit_softcap needs seq_len: the scores grow like sqrt(log T), so the cap's "
                             "effect has no T -> infinity limit (docs/theory.md section 19)")
        if not arch.norm.has_norm:
            raise ValueError("logit_softcap is not supported with norm='none': the bound on its effect "
                             "needs the attention input's q, which grows along an unnormalised stream")
