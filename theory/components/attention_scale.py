r"""The query/key scale of a stack's attention: the one home of the effective beta and the beta_c rule.

Every map of the theory (propagation, min alpha, the causal theory, gradients) runs each head's
attention at the single-head beta that it behaves like, :func:`effective_beta`; callers pass the
model's ``beta`` and never apply the factor themselves (docs/theory.md section 3). The stack is
entropy-collapsed above :func:`beta_critical`, decided by the norm placement's rule
(:attr:`NormPlacement.beta_critical_rule <remprop.theory.components.block.NormPlacement.beta_critical_rule>`,
docs/theory.md section 6). Rotary positions put the mean rotary correlation ``cbar_T`` on ``p`` in
the REM (section 15); QK-norm makes the scale depend on the attention input's cosine (sections 16
and 19). :class:`~remprop.theory.Architecture` exposes these as methods of the same names.

.. math:: x = \beta_{\rm eff}\sqrt{q\,(q - p\,\bar c_T)},\qquad
          \beta_c = \sqrt{\frac{2}{q\,(q - p\,\bar c_T)}}

References
----------
Giorlandino & Goldt, arXiv 2505.24333 (docs/theory.md sections 3 and 6); Su et al., arXiv 2104.09864 (RoPE).
"""
from __future__ import annotations

import math

import numpy as np

from remprop._deprecation import renamed
from ..checks import as_float_array, scalar_or_array
from ..rem import critical_beta_core, effective_beta as head_effective_beta, gaussian_cosine_mean, \
    partial_rotary_correlation, qk_norm_energy_core, rope_frequencies, rope_mean_correlation
from .. import softcap
from .block import attention_input

__all__ = ["mean_rope_correlation", "rotary_width", "rotary_share", "head_frequencies", "head_factor", "beta_scale",
           "qk_norm_width", "effective_beta", "beta_critical", "block_beta_critical", "attention_map"]


def mean_rope_correlation(arch) -> float:
    """``cbar_T = rope_mean_correlation(seq_len, head_dim, rope_base)`` with RoPE (the mean rotary
    correlation over pairs of keys, :func:`~remprop.theory.rem.rope_mean_correlation`), exactly 1
    otherwise (the part of the scores shared by all keys cancels). Only the REM's scale and beta_c
    use it; the output map keeps ``p``. With ``rotary_dim < head_dim`` (partial rotary) the
    rotated part's ``cbar_T`` mixed with the unrotated part's 1
    (:func:`~remprop.theory.rem.rope.partial_rotary_correlation`)."""
    if not arch.positions.rotary:
        return 1.0
    return rotary_share(arch, rope_mean_correlation(arch.seq_len, rotary_width(arch), arch.rope_base))


def rotary_width(arch) -> int:
    """The coordinates of a head that RoPE rotates: ``rotary_dim``, or ``head_dim``."""
    return arch.head_dim if arch.rotary_dim is None else arch.rotary_dim


def head_frequencies(arch) -> np.ndarray:
    """``theta_f`` of every coordinate pair of a head with RoPE: those of the rotated pairs
    (:func:`rotary_width`, :func:`~remprop.theory.rem.rope_frequencies`), then a 0 for each pair
    that partial rotary leaves unrotated (the causal Gram state draws the scores over them)."""
    rotated = np.asarray(rope_frequencies(rotary_width(arch), arch.rope_base), dtype=np.float64)
    return np.concatenate([rotated, np.zeros((arch.head_dim - rotary_width(arch)) // 2)])


def rotary_share(arch, correlation):
    """A correlation of the rotated coordinates (at ``head_dim = rotary_width(arch)``) as that of
    the whole head: :func:`~remprop.theory.rem.rope.partial_rotary_correlation` (unchanged when
    every coordinate rotates)."""
    if arch.rotary_dim is None or arch.rotary_dim == arch.head_dim:
        return correlation
    return partial_rotary_correlation(correlation, arch.head_dim, arch.rotary_dim)


def head_factor(arch) -> int:
    """``beta_eff / beta`` of every head: ``heads`` with ``qk_scaling="head"``, else 1 (1 with
    QK-norm, where the weights' scale drops out)."""
    return 1 if arch.qk_norm else arch.qk_scaling.head_factor(arch.heads)


def beta_scale(arch) -> float:
    """The factor from the model's ``beta`` to the kernels' column: :func:`head_factor`, or with
    QK-norm ``g^2 / sqrt(log T)`` (docs/theory.md section 19). :func:`beta_critical` divides by it."""
    if arch.qk_norm:
        return arch.qk_norm_gain ** 2 / math.sqrt(math.log(arch.seq_len))
    return float(head_factor(arch))


def qk_norm_width(arch) -> int:
    """``n`` of QK-norm (``qk_norm_dim``, or ``head_dim``); 0 without QK-norm."""
    if not arch.qk_norm:
        return 0
    return arch.head_dim if arch.qk_norm_dim is None else arch.qk_norm_dim


def effective_beta(arch, beta, *, q=None, p=None):
    r"""The single-head beta that each head of ``arch`` behaves like.

    .. math:: \beta_{\rm eff} = \beta\ (\text{"model"}),\qquad \beta_{\rm eff} = H \beta\ (\text{"head"})

    With ``qk_norm`` the head's beta depends on the state ``(q, p)`` of the attention input
    (docs/theory.md sections 16 and 19): ``beta_eff^2 q (q - p cbar_T) = x^2`` with
    ``x = beta g^2 sqrt((1 - kappa_n(p/q) cbar_T) / log T)``. Given ``q`` and ``p`` it returns
    that; without them the value at the reference state ``q = 1, p = 0``, ``beta g^2 / sqrt(log T)``
    (:func:`beta_scale`), which the kernels read as the reduced-scale factor. ``q``, ``p`` are
    ignored without QK-norm.
    """
    if not arch.qk_norm:
        return head_effective_beta(beta, arch.heads, arch.qk_scaling)
    beta = as_float_array("beta", beta, positive=True)
    if q is None and p is None:
        return scalar_or_array(beta * beta_scale(arch))
    if q is None or p is None:
        raise ValueError("effective_beta with qk_norm needs both q and p (the attention input's state), "
                         "or neither")
    q = as_float_array("q", q, positive=True)
    p = as_float_array("p", p)
    cbar = mean_rope_correlation(arch)
    energy = 1.0 - np.asarray(gaussian_cosine_mean(np.clip(p / q, -1.0, 1.0), qk_norm_width(arch))) * cbar
    with np.errstate(divide="ignore", invalid="ignore"):
        return scalar_or_array(beta * beta_scale(arch) * np.sqrt(np.maximum(energy, 0.0)
                                                                 / (q * np.maximum(q - p * cbar, 0.0))))


def beta_critical(arch, per_layer=None, *, first=None, smallest=None):
    r"""The model-level beta above which the stack ``arch`` is entropy-collapsed.

    From the per-head critical betas :math:`\beta_c^{(l)} = \sqrt{2 / (q_l (q_l - p_l \bar c_T))}`
    of each layer's attention input, the rule of the norm placement picks the first layer
    (post-LN) or the smallest over layers (pre-LN, no LN), and :func:`beta_scale` puts it on the
    axis of the model's ``beta``: ``beta > beta_critical(...)`` exactly when
    ``effective_beta(beta) > beta_c``. With ``qk_norm`` the per-layer values are those of the
    kernels' column (``sqrt(2 / (1 - kappa_n cbar_T))``) and the result is the multiplier on the
    normalised scores at which the stack freezes (the model as initialised has ``beta = 1``).

    Parameters
    ----------
    arch : Architecture
    per_layer : array_like, shape (..., depth), optional
        Per-head critical beta of every layer (e.g. ``Trajectory.beta_critical``).
    first, smallest : array_like, optional
        Instead of ``per_layer``: the first layer's and the smallest value (as
        :func:`~remprop.theory.final_state` returns them).

    Returns
    -------
    ndarray or float
        ``inf`` where the tokens are collapsed (``q = p``).
    """
    if per_layer is not None:
        per_layer = np.asarray(per_layer, dtype=np.float64)
        first, smallest = per_layer[..., 0], per_layer.min(axis=-1)
    elif first is None or smallest is None:
        raise ValueError("beta_critical needs per_layer, or both first and smallest")
    chosen = first if arch.norm.normalises_stream else smallest
    return scalar_or_array(np.asarray(chosen, dtype=np.float64) / beta_scale(arch))


def block_beta_critical(arch, q, p):
    """Per-head critical beta of the attention of a block whose input is ``(q, p)``:
    ``sqrt(2 / (q (q - p cbar_T)))`` of the attention input; ``inf`` for collapsed tokens without
    RoPE. Feed the values of every layer to :func:`beta_critical` for the stack's verdict."""
    q_in, p_in = attention_input(arch, q, p)
    with np.errstate(divide="ignore", invalid="ignore"):
        if arch.qk_norm:  # in the kernels' units: x = column * sqrt(energy) reaches sqrt(2)
            energy = np.vectorize(qk_norm_energy_core, otypes=[np.float64])(
                p_in / q_in, qk_norm_width(arch), mean_rope_correlation(arch))
            return scalar_or_array(np.sqrt(2.0 / energy))
        return critical_beta_core(q_in, np.minimum(p_in, q_in) * mean_rope_correlation(arch))


def attention_map(arch, beta, *, sigma_bv2=None):
    """The attention component of ``arch`` at the model's ``beta``: softmax or gain-controlled,
    each head at :func:`effective_beta`, finite T when ``seq_len`` is set, with RoPE's ``cbar_T``
    and QK-norm's width. ``sigma_bv2``: a value-bias variance of its own (default ``sigma_b2``)."""
    if arch.logit_softcap is not None:
        softcap.check_logit_softcap(arch, beta)
    rope = mean_rope_correlation(arch) if arch.positions.rotary else None
    return arch.attention.component(effective_beta(arch, beta), arch.sigma_v2,
                                    arch.sigma_b2 if sigma_bv2 is None else sigma_bv2, seq_len=arch.seq_len,
                                    mean_rope_correlation=rope,
                                    qk_norm_dim=qk_norm_width(arch) if arch.qk_norm else None)


#: Deprecated spellings of :func:`beta_critical` and :func:`block_beta_critical`, removed in the next release.
critical_beta = renamed("critical_beta", beta_critical)
block_critical_beta = renamed("block_critical_beta", block_beta_critical)
