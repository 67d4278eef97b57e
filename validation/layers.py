"""Transformer components at initialisation, in torch: weights and forward maps.

Conventions are those of the reference experiments (docs/theory.md section 2):

* query/key weights ``W_Q, W_K ~ N(0, s_qk^2)`` with ``s_qk^2 = beta sqrt(log T) / d``, scores divided by
  ``sqrt(d_H)``, no query/key biases. The variance is over ``d`` for every number of heads ``H``
  (``qk_scaling="model"``, the default): the score of head h is a sum of ``d_H`` products each of variance
  ``(s_qk^2 d q)^2``, divided by ``d_H``, so ``Var(s_ij) = beta^2 q^2 log T`` for all H. ``qk_scaling="head"``
  divides by ``d_H`` instead: the score variance grows as ``H^2`` (each head behaves as a single head at ``H
  beta``; :func:`remprop.theory.rem.heads.effective_beta`);
* values ``W_V ~ N(0, s_v^2 / d)``, value bias ``N(0, s_b^2)``, no output projection in the reference
  experiments; optionally (``Architecture.sigma_o2``) an output projection ``W_O ~ N(0, s_o^2 / d)`` of the
  concatenated heads, without bias (:func:`draw_output_projection`, :func:`output_projection`);
* MLP ``W1 ~ N(0, s_w^2 / d)``, ``W2 ~ N(0, s_{w,out}^2 / d_ff)`` (``s_{w,out}^2 = s_w^2`` unless
  ``Architecture.sigma_w2_out`` is set), biases ``N(0, s_b^2)``;
* LayerNorm and RMSNorm without affine parameters;
* gated MLP ``W_down (phi(W_gate x + b_gate) * (W_up x + b_up)) + b_down``: gate and up ``N(0, s_w^2 / d)``,
  down ``N(0, s_{w,out}^2 / d_ff)``, biases ``N(0, s_b^2)``;
* gain-controlled attention: the value-weighted output with its sequence mean removed, then the value bias, ``(A
  - 1 abar^T) X W_V^T + b_V``;
* grouped-query attention (``kv_heads`` K < H): ``W_K``, ``W_V`` of shape ``(K d_H, d)``, head h reading
  key/value head ``h // (H / K)`` (the layout of LLaMA's ``repeat_kv``), the value bias ``(K d_H,)`` shared
  alike;
* QK-norm (:class:`QKNorm`): queries and keys RMS-normalised over groups of n coordinates
  (one head, ``n = d_H``: Gemma 3; all heads, ``n = H d_H``: OLMo 2) with a gain g, the
  scores ``beta (q_hat . k_hat) / sqrt(d_H)``: beta multiplies the normalised scores
  (docs/theory.md sections 16 and 19);
* attention-logit soft-capping ``c tanh(s / c)`` of the scaled scores (Gemma 2).

Matrices follow :class:`torch.nn.Linear`: shape ``(out_features, in_features)``, applied
as ``x @ W.T``, so they load into Hugging Face modules unchanged.

Reference: Giorlandino & Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
import torch.nn.functional as F

from remprop.theory.components import RMSNorm
from remprop.theory.attention_masks import causal_window_mask
from remprop.theory.rem import heads as multihead

__all__ = [
    "ACTIVATION_FUNCTIONS", "AttentionWeights", "QKNorm", "MLPWeights", "GatedMLPWeights", "DenseWeights", "BlockWeights",
    "HeadLayout", "query_key_variance", "draw_attention_weights", "draw_mlp_weights", "draw_gated_mlp_weights",
    "draw_dense_weights", "draw_output_projection", "softmax_attention", "gain_controlled_attention",
    "fused_attention", "output_projection", "layer_norm", "rms_norm", "mlp", "gated_mlp", "dense", "skip", "parallel",
]

def _identity(u):
    return u


#: torch activations of the MLP, by the names of :data:`remprop.theory.ACTIVATIONS` (GELU exact, not tanh).
ACTIVATION_FUNCTIONS = {"relu": torch.relu, "linear": _identity, "tanh": torch.tanh, "erf": torch.erf,
                        "gelu": F.gelu, "silu": F.silu}
#: The activations torch applies in place (on a fresh hidden buffer of :func:`mlp`).
_IN_PLACE_ACTIVATIONS = {"relu": torch.Tensor.relu_, "linear": _identity}


@dataclass(frozen=True)
class AttentionWeights:
    """Query ``(d, d)``, key and value ``(K d_H, d)`` matrices and the value bias ``(K d_H,)``
    (``K = H`` key/value heads: ``(d, d)`` and ``(d,)``; fewer: grouped-query attention)."""

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    value_bias: torch.Tensor


@dataclass(frozen=True)
class QKNorm:
    r"""QK-norm of an attention layer: RMS-normalised queries and keys with a gain.

    .. math:: \hat u = g\,\frac{u}{\sqrt{|u|^2 / n}},\qquad
              s_{ij} = \beta\,\frac{\hat u_i \cdot \hat k_j}{\sqrt{d_H}}

    over groups of ``n = dim`` consecutive query coordinates (``d_H``: per head; ``H d_H``: all
    heads at once) and the matching groups of key coordinates (``n K / H`` for K key heads).

    Attributes
    ----------
    gain : float
        g (1 at initialisation).
    dim : int or None
        n; None: the head width ``d_H``.
    scale : float
        beta, the multiplier on the normalised scores (1 for a model as initialised).
    eps : float
        The norm's epsilon (0: none, as the theory).

    References
    ----------
    A. Henry et al., Findings of EMNLP 2020; Team OLMo, arXiv 2501.00656; docs/theory.md section 16.
    """

    gain: float = 1.0
    dim: int | None = None
    scale: float = 1.0
    eps: float = 0.0


@dataclass(frozen=True)
class MLPWeights:
    """``W1 (d_ff, d)``, ``b1 (d_ff,)``, ``W2 (d, d_ff)``, ``b2 (d,)``."""

    w1: torch.Tensor
    b1: torch.Tensor
    w2: torch.Tensor
    b2: torch.Tensor


@dataclass(frozen=True)
class GatedMLPWeights:
    """``W_gate, W_up (d_ff, d)`` with biases ``(d_ff,)``, ``W_down (d, d_ff)``, ``b_down (d,)``."""

    gate: torch.Tensor
    gate_bias: torch.Tensor
    up: torch.Tensor
    up_bias: torch.Tensor
    down: torch.Tensor
    down_bias: torch.Tensor


@dataclass(frozen=True)
class DenseWeights:
    """One dense layer ``W (d_out, d_in)``, ``b (d_out,)``."""

    weight: torch.Tensor
    bias: torch.Tensor


@dataclass(frozen=True)
class BlockWeights:
    """The weights of one transformer block, by the components' ``weight_slot``.

    ``output`` is the attention output projection ``W_O (d, d)`` (no bias), or None for
    blocks without one (the reference experiments). ``mlp`` holds :class:`GatedMLPWeights`
    in blocks with a gated MLP. ``extra`` holds the weights of any other component, by its
    slot (:func:`remprop.validation.registry.draw_block_weights`).
    """

    attention: AttentionWeights | None = None
    mlp: MLPWeights | GatedMLPWeights | None = None
    output: torch.Tensor | None = None
    extra: dict = field(default_factory=dict)

    def slot(self, name):
        """The weights in slot ``name`` (a field, else a key of ``extra``)."""
        if name in ("attention", "mlp", "output"):
            value = getattr(self, name)
        else:
            value = self.extra.get(name)
        if value is None:
            raise ValueError(f"the block weights hold nothing in the slot {name!r} of a component of the block")
        return value


def query_key_variance(beta: float, width: int, seq_len: int, heads: int = 1, qk_scaling: str = "model") -> float:
    r"""Variance of the query and key weights.

    .. math:: s_{qk}^2 = \beta \sqrt{\log T} / d \quad(\text{"model"}),\qquad
              s_{qk}^2 = \beta \sqrt{\log T} / d_H \quad(\text{"head"})

    (see the module docstring and :func:`remprop.theory.rem.heads.query_key_variance`).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, initialisation of the reference experiments.
    """
    return float(multihead.query_key_variance(beta, width, seq_len, heads, qk_scaling))


def _normal(gen, shape, variance, dtype, device):
    out = torch.randn(shape, generator=gen, dtype=dtype, device=device)
    return out.mul_(math.sqrt(variance))


@dataclass(frozen=True)
class HeadLayout:
    """The heads of an attention draw: ``count`` query heads, their ``qk_scaling`` (:func:`query_key_variance`)
    and ``kv_heads`` key/value heads (a divisor of ``count``; None: ``count``)."""

    count: int = 1
    qk_scaling: str = "model"
    kv_heads: int | None = None

    def kv_width(self, width):
        """``kv_heads d_H`` (``width`` for all heads), ``kv_heads`` checked: a positive divisor of ``count``."""
        kv = self.kv_heads
        if kv is not None and (type(kv) is bool or not isinstance(kv, (int, np.integer)) or kv < 1 or self.count % kv):
            raise ValueError(f"kv_heads must be a positive divisor of heads ({self.count}), got {kv!r}")
        return width if kv is None else kv * (width // self.count)


def draw_attention_weights(gen, width, beta, seq_len, sigma_v2, sigma_b2, *, dtype, device, layout=HeadLayout()):
    """Draw ``W_Q, W_K ~ N(0, s_qk^2)``, ``W_V ~ N(0, sigma_v2/d)``, ``b_V ~ N(0, sigma_b2)``, in turn from ``gen``.

    ``s_qk^2``: :func:`query_key_variance` at the ``layout``'s heads and ``qk_scaling``; its ``kv_heads`` give
    ``W_K``, ``W_V`` of shape ``(kv_heads d_H, d)``, ``b_V`` of ``(kv_heads d_H,)`` (the stream of all heads). The
    lowest-level draw; the simulations reach it through a :class:`~remprop.validation.SimulationSettings`."""
    s_qk2 = query_key_variance(beta, width, seq_len, layout.count, layout.qk_scaling)
    kv_width = layout.kv_width(width)
    return AttentionWeights(
        query=_normal(gen, (width, width), s_qk2, dtype, device),
        key=_normal(gen, (kv_width, width), s_qk2, dtype, device),
        value=_normal(gen, (kv_width, width), sigma_v2 / width, dtype, device),
        value_bias=_normal(gen, (kv_width,), sigma_b2, dtype, device),
    )


def draw_mlp_weights(gen, width, d_ff, sigma_w2, sigma_b2, *, dtype, device, sigma_w2_out=None):
    """Draw ``W1 ~ N(0, sigma_w2/d)``, ``b1``, ``W2 ~ N(0, sigma_w2_out/d_ff)``, ``b2 ~ N(0, sigma_b2)``.

    ``sigma_w2_out`` (variance of ``W2`` times its fan-in ``d_ff``) defaults to ``sigma_w2``;
    it only rescales ``W2``, so the random stream is the same for every value.
    """
    if sigma_w2_out is None:
        sigma_w2_out = sigma_w2
    return MLPWeights(
        w1=_normal(gen, (d_ff, width), sigma_w2 / width, dtype, device),
        b1=_normal(gen, (d_ff,), sigma_b2, dtype, device),
        w2=_normal(gen, (width, d_ff), sigma_w2_out / d_ff, dtype, device),
        b2=_normal(gen, (width,), sigma_b2, dtype, device),
    )


def draw_gated_mlp_weights(gen, width, d_ff, sigma_w2, sigma_b2, *, dtype, device, sigma_w2_out=None):
    """Draw a gated MLP: ``W_gate``, ``b_gate``, ``W_up``, ``b_up`` (``N(0, sigma_w2/d)``, ``N(0, sigma_b2)``),
    then ``W_down ~ N(0, sigma_w2_out/d_ff)`` and ``b_down ~ N(0, sigma_b2)``, in this order.

    ``sigma_w2_out`` defaults to ``sigma_w2``. A zero ``sigma_b2`` (the bias-free published
    models) draws zero biases from the same stream.
    """
    if sigma_w2_out is None:
        sigma_w2_out = sigma_w2
    return GatedMLPWeights(
        gate=_normal(gen, (d_ff, width), sigma_w2 / width, dtype, device),
        gate_bias=_normal(gen, (d_ff,), sigma_b2, dtype, device),
        up=_normal(gen, (d_ff, width), sigma_w2 / width, dtype, device),
        up_bias=_normal(gen, (d_ff,), sigma_b2, dtype, device),
        down=_normal(gen, (width, d_ff), sigma_w2_out / d_ff, dtype, device),
        down_bias=_normal(gen, (width,), sigma_b2, dtype, device),
    )


def draw_output_projection(gen, width, sigma_o2, *, dtype, device):
    """Draw the attention output projection ``W_O ~ N(0, sigma_o2/d)``, shape ``(d, d)``, no bias."""
    return _normal(gen, (width, width), sigma_o2 / width, dtype, device)


def draw_dense_weights(gen, width, sigma_w2, sigma_b2, *, dtype, device):
    """Draw a square dense layer ``W ~ N(0, sigma_w2/d)``, ``b ~ N(0, sigma_b2)``."""
    return DenseWeights(weight=_normal(gen, (width, width), sigma_w2 / width, dtype, device),
                        bias=_normal(gen, (width,), sigma_b2, dtype, device))


def _group_rms_norm(u, groups, gain, eps):
    """``gain u / rms(u)`` over ``groups`` equal groups of the last axis."""
    shape = u.shape
    u = u.reshape(*shape[:-1], groups, shape[-1] // groups)
    u = u * torch.rsqrt(u.pow(2).mean(dim=-1, keepdim=True) + eps)
    return u.reshape(shape).mul_(gain)


def _kv_heads(weights: AttentionWeights, width, heads):
    """Key/value heads K of ``weights`` (``W_K`` has ``K d_H`` rows)."""
    d_head = width // heads
    kv = weights.key.shape[0] // d_head
    if kv * d_head != weights.key.shape[0] or kv < 1 or heads % kv or weights.value.shape[0] != weights.key.shape[0]:
        raise ValueError(f"the key and value weights must have K d_H rows with K dividing heads ({heads}) and "
                         f"d_H = {d_head}, got {tuple(weights.key.shape)}, {tuple(weights.value.shape)}")
    return kv


def _expand_heads(u, heads):
    """``(batch, K, T, d_H)`` -> ``(batch, H, T, d_H)``: head h reads key/value head ``h // (H / K)``."""
    groups = heads // u.shape[1]
    return u if groups == 1 else u.repeat_interleave(groups, dim=1)


def _queries_keys(x, weights: AttentionWeights, heads, rotate=None, qk_norm=None):
    """Per-head queries and keys, shape ``(batch, H, T, d_H)`` each (grouped key heads expanded to
    their query heads), and the score scale ``1 / sqrt(d_H)`` (times ``qk_norm.scale``)."""
    batch, seq, width = x.shape
    d_head = width // heads
    kv = _kv_heads(weights, width, heads)
    q = x @ weights.query.T
    k = x @ weights.key.T
    scale = 1.0 / math.sqrt(d_head)
    if qk_norm is not None:
        dim = d_head if qk_norm.dim is None else int(qk_norm.dim)
        if dim < 1 or width % dim or dim % d_head:
            raise ValueError(f"qk_norm.dim must be a multiple of the head width {d_head} dividing the width "
                             f"{width}, got {dim}")
        groups = width // dim  # the keys' groups hold dim K / H coordinates each
        q = _group_rms_norm(q, groups, float(qk_norm.gain), float(qk_norm.eps))
        k = _group_rms_norm(k, max(1, groups * kv // heads), float(qk_norm.gain), float(qk_norm.eps))
        scale *= float(qk_norm.scale)
    q = q.view(batch, seq, heads, d_head).transpose(1, 2)
    k = k.view(batch, seq, kv, d_head).transpose(1, 2)
    if rotate is not None:
        q, k = rotate(q), rotate(k)
    return q, _expand_heads(k, heads), scale


def _blocked_keys(mask, causal, seq, device):
    """The (query, key) pairs that get no attention, ``(batch, H, T, T)`` broadcastable: padded keys and, when
    ``causal``, those outside a row's mask (the theory's :func:`~remprop.theory.attention_masks.causal_window_mask`)."""
    blocked = None
    if mask is not None and not bool(mask.all()):
        blocked = ~mask[:, None, None, :]
    if causal:
        unseen = ~torch.from_numpy(causal_window_mask(seq, None if causal is True else causal)).to(device)
        blocked = unseen if blocked is None else (blocked | unseen)
    return blocked


def _attention_probabilities(x, weights: AttentionWeights, heads, mask, causal, rotate=None, qk_norm=None,
                             logit_softcap=None):
    """Softmax attention matrix, shape ``(batch, heads, T, T)``.

    ``rotate`` (optional) maps the queries and the keys, shape ``(batch, H, T, d_H)``, before
    the scores: rotary positions (:mod:`remprop.validation.rope`). ``qk_norm``
    (:class:`QKNorm`) normalises the queries and keys first and multiplies the scores by its
    ``scale``; ``logit_softcap`` c maps the scaled scores to ``c tanh(s / c)``. Key heads
    fewer than ``heads`` (grouped-query attention) are shared by groups of query heads.
    """
    q, k, scale = _queries_keys(x, weights, heads, rotate, qk_norm)
    scores = q @ k.transpose(-1, -2)
    scores.mul_(scale)
    if logit_softcap is not None:
        cap = float(logit_softcap)
        scores = torch.tanh(scores / cap).mul_(cap)
    blocked = _blocked_keys(mask, causal, x.shape[1], x.device)
    if blocked is not None:
        scores.masked_fill_(blocked, float("-inf"))
    return torch.softmax(scores, dim=-1)


def _values(x, weights: AttentionWeights, heads):
    """``X W_V^T`` per head, shape ``(batch, H, T, d_H)`` (grouped value heads expanded), no bias."""
    batch, seq, width = x.shape
    v = (x @ weights.value.T).view(batch, seq, -1, width // heads).transpose(1, 2)
    return _expand_heads(v, heads)


def _concatenate_heads(u):
    """``(batch, H, T, d_H)`` -> ``(batch, T, H d_H)``."""
    batch, heads, seq, d_head = u.shape
    return u.transpose(1, 2).reshape(batch, seq, heads * d_head)


def fused_attention(need_weights, *, logit_softcap=None, gain_controlled=False) -> bool:
    r"""Whether an attention layer runs through ``torch.nn.functional.scaled_dot_product_attention``.

    The one rule deciding the fast path of :func:`softmax_attention`: the fused kernel computes
    ``softmax(s Q K^T + mask) V`` without holding the weights ``a_ij``, so it runs exactly when
    nobody reads them (``need_weights`` False: training steps; probes, the simulator and the
    entropy evaluation read them) and the layer has that form (RoPE, QK-norm and grouped heads
    act before the kernel). Soft-capped logits (``logit_softcap``) and gain-controlled attention
    (``gain_controlled``: it subtracts the column mean of the weights, docs/theory.md section 2)
    keep the explicit path.
    """
    return not need_weights and logit_softcap is None and not gain_controlled


def _fused_values(x, weights: AttentionWeights, heads, mask, causal, rotate, qk_norm):
    """``softmax(scale Q K^T) V`` per head through ``scaled_dot_product_attention`` at the layer's own
    scale and masks, heads concatenated ``(batch, T, d)`` (no value bias)."""
    q, k, scale = _queries_keys(x, weights, heads, rotate, qk_norm)
    v = _values(x, weights, heads)
    plain = (mask is None or bool(mask.all())) and (causal is True or causal is False)  # not a window of 1 key
    allowed = None if plain else ~_blocked_keys(mask, causal, x.shape[1], x.device)
    out = F.scaled_dot_product_attention(q, k, v.to(q.dtype), attn_mask=allowed, is_causal=causal is True and plain,
                                         scale=scale)
    return _concatenate_heads(out)


def _weighted_values(x, probs, weights: AttentionWeights, heads):
    """``A (X W_V^T)`` per head, concatenated: shape ``(batch, T, d)``, no bias (grouped
    value heads shared by their query heads)."""
    return _concatenate_heads(probs @ _values(x, weights, heads))


def _value_bias(weights: AttentionWeights, width, heads):
    """The value bias on the concatenated heads, ``(d,)``: a grouped bias repeated over its query heads."""
    bias = weights.value_bias
    if bias.shape[0] == width:
        return bias
    d_head = width // heads
    return _expand_heads(bias.view(1, -1, 1, d_head), heads).reshape(width)


def softmax_attention(x, weights: AttentionWeights, *, heads=1, mask=None, causal=False, rotate=None, qk_norm=None,
                      logit_softcap=None, need_weights=True):
    r"""Softmax self-attention with values and no output projection.

    .. math:: \mathrm{SA}(X)_i = \sum_j a_{ij} (W_V x_j) + b_V,\quad
              a_{ij} = \mathrm{softmax}_j\!\left(\frac{(W_Q x_i)\cdot(W_K x_j)}{\sqrt{d_H}}\right)

    per head (``d_H = d / H``), heads concatenated. Key/value weights with fewer rows than
    ``d`` are grouped-query attention (:class:`AttentionWeights`).

    Parameters
    ----------
    x : Tensor, shape (batch, T, d)
    weights : AttentionWeights
    heads : int
        Number of heads H (divides d).
    mask : Tensor of bool, shape (batch, T), optional
        True for real tokens; padded keys get zero attention.
    causal : bool, int or AttentionMask
        Token i attends to keys j <= i only; an integer w: to its last w keys, ``i - w < j <= i``; an
        :class:`~remprop.theory.attention_masks.AttentionMask`: to the keys it gives row i (chunk, prefix).
    rotate : callable, optional
        Applied to the queries and the keys, shape ``(batch, H, T, d_H)``, before the
        scores (rotary positions, :func:`remprop.validation.rope.rotary`).
    qk_norm : QKNorm, optional
        Normalised queries and keys, the scores times ``qk_norm.scale``.
    logit_softcap : float, optional
        c of the soft-capped scores ``c tanh(s / c)``.
    need_weights : bool
        False where the caller does not read the probabilities (training steps): the layer then
        runs through ``torch.nn.functional.scaled_dot_product_attention`` at the same scale and
        masks when :func:`fused_attention` allows it, and returns ``probs=None``.

    Returns
    -------
    (out, probs) : Tensor (batch, T, d), Tensor (batch, H, T, T) or None

    References
    ----------
    Vaswani et al. 2017; Giorlandino & Goldt, arXiv 2505.24333 (initialisation); J. Ainslie et al.,
    arXiv 2305.13245 (grouped-query attention); Gemma Team, arXiv 2408.00118 (soft-capping).
    """
    if fused_attention(need_weights, logit_softcap=logit_softcap):  # its output is saved for backward: no add_
        return _fused_values(x, weights, heads, mask, causal, rotate, qk_norm) + _value_bias(
            weights, x.shape[-1], heads), None
    probs = _attention_probabilities(x, weights, heads, mask, causal, rotate, qk_norm, logit_softcap)
    out = _weighted_values(x, probs, weights, heads)
    return out.add_(_value_bias(weights, x.shape[-1], heads)), probs


def gain_controlled_attention(x, weights: AttentionWeights, *, heads=1, mask=None, causal=False, qk_norm=None,
                              logit_softcap=None, need_weights=True):
    r"""Attention with the sequence mean of its value-weighted output removed.

    .. math:: \mathrm{GC}(X)_i = \sum_j \left(a_{ij} - \bar a_j\right) (W_V x_j) + b_V,
              \qquad \bar a_j = \frac1T \sum_i a_{ij}

    The mean runs over the real (unpadded) tokens of each sequence (in causal mode too).
    ``qk_norm``, ``logit_softcap`` and grouped key/value heads as in :func:`softmax_attention`.
    Returns ``(out, probs)`` as :func:`softmax_attention`; it always computes the probabilities
    (its mean needs them: :func:`fused_attention`), whatever ``need_weights``.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, gain-controlled attention.
    """
    probs = _attention_probabilities(x, weights, heads, mask, causal, None, qk_norm, logit_softcap)
    out = _weighted_values(x, probs, weights, heads)
    if mask is None:
        out = out - out.mean(dim=1, keepdim=True)
    else:
        m = mask.to(out.dtype)[..., None]
        mean = (out * m).sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True)
        out = out - mean
    return out.add_(_value_bias(weights, x.shape[-1], heads)), probs


def output_projection(x, weight):
    r"""Attention output projection without bias: ``x W_O^T`` on the concatenated heads.

    With ``W_O ~ N(0, sigma_o2 / d)`` (:func:`draw_output_projection`) the order
    parameters are scaled, the cosine kept:

    .. math:: q' = \sigma_o^2 q,\qquad p' = \sigma_o^2 p

    Parameters
    ----------
    x : Tensor, shape (..., d)
    weight : Tensor, shape (d_out, d)
        ``nn.Linear`` layout.

    References
    ----------
    Vaswani et al. 2017 (``W^O``); library initialisations often set it to zero.
    """
    return (x.reshape(-1, x.shape[-1]) @ weight.T).view(*x.shape[:-1], weight.shape[0])


def layer_norm(x, eps=1e-12):
    r"""LayerNorm over the feature axis without gain or bias.

    .. math:: \mathrm{LN}(x) = \frac{x - \bar x}{\sqrt{\overline{(x - \bar x)^2} + \epsilon}}

    References
    ----------
    Ba, Kiros & Hinton 2016.
    """
    return F.layer_norm(x, (x.shape[-1],), eps=eps)


def rms_norm(x, eps=1e-12):
    r"""RMSNorm over the feature axis without gain: no centring.

    .. math:: \mathrm{RMS}(x) = \frac{x}{\sqrt{\overline{x^2} + \epsilon}}

    References
    ----------
    B. Zhang & R. Sennrich, "Root mean square layer normalization", NeurIPS 2019.
    """
    return RMSNorm.torch_normalise(x, eps)  # the component's torch face holds the formula


def dense(x, weights: DenseWeights):
    """``x W^T + b``."""
    return torch.addmm(weights.bias, x.reshape(-1, x.shape[-1]), weights.weight.T).view(
        *x.shape[:-1], weights.weight.shape[0])


def mlp(x, weights: MLPWeights, activation="relu"):
    r"""Two-layer MLP ``W2 phi(W1 x + b1) + b2``.

    Parameters
    ----------
    x : Tensor, shape (..., d)
    weights : MLPWeights
    activation : str
        A key of :data:`ACTIVATION_FUNCTIONS` (those of ``remprop.theory.ACTIVATIONS``).
    """
    flat = x.reshape(-1, x.shape[-1])
    hidden = torch.addmm(weights.b1, flat, weights.w1.T)
    in_place = _IN_PLACE_ACTIVATIONS.get(activation)  # no second d_ff buffer where torch has one
    hidden = in_place(hidden) if in_place is not None else ACTIVATION_FUNCTIONS[activation](hidden)
    out = torch.addmm(weights.b2, hidden, weights.w2.T)
    return out.view(*x.shape[:-1], out.shape[-1])


def gated_mlp(x, weights: GatedMLPWeights, activation="silu"):
    r"""Gated MLP ``W_down (phi(W_gate x + b_gate) * (W_up x + b_up)) + b_down``.

    SwiGLU with ``activation="silu"``, GeGLU with ``"gelu"`` (Shazeer 2020).

    Parameters
    ----------
    x : Tensor, shape (..., d)
    weights : GatedMLPWeights
    activation : str
        A key of :data:`ACTIVATION_FUNCTIONS`.

    References
    ----------
    N. Shazeer, "GLU variants improve Transformer", arXiv 2002.05202.
    """
    flat = x.reshape(-1, x.shape[-1])
    gate = ACTIVATION_FUNCTIONS[activation](torch.addmm(weights.gate_bias, flat, weights.gate.T))
    hidden = gate * torch.addmm(weights.up_bias, flat, weights.up.T)
    out = torch.addmm(weights.down_bias, hidden, weights.down.T)
    return out.view(*x.shape[:-1], out.shape[-1])


def skip(x, branch, alpha=1.0):
    r"""Residual connection with the strength on the identity path: ``alpha x + F(x)``.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (their convention; Noci et al. 2022 scale the branch).
    """
    if alpha == 1.0:
        return branch + x
    return torch.add(branch, x, alpha=alpha)


def parallel(x, outputs, alpha=1.0):
    r"""Parallel branches around one skip: ``alpha x + sum_i F_i(x)`` (GPT-J, NeoX, Falcon).

    Parameters
    ----------
    x : Tensor, shape (..., d)
    outputs : sequence of Tensor
        The branches' outputs ``F_i(x)``, each of the shape of ``x``.
    alpha : float

    References
    ----------
    B. Wang & A. Komatsuzaki, GPT-J-6B (2021); S. Black et al., arXiv 2204.06745 (GPT-NeoX);
    docs/theory.md section 19.
    """
    total = outputs[0]
    for out in outputs[1:]:
        total = total + out
    return skip(x, total, alpha)
