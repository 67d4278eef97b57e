"""The transformer architecture that the theory propagates through."""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import components as C
from . import softcap
from .softcap import SOFTCAP_TOLERANCE
from .block_forms import BLOCK_FORMS, check_block_forms
from .checks import as_float_array, check_choice, check_count, scalar_or_array
from .activations import ACTIVATIONS, resolve_activation
from .components.layer_norm import layernorm_core
from .components.rms_norm import rmsnorm_core
from .rem import (QK_SCALINGS, ROPE_BASE, check_heads, check_seq_len, critical_beta_core, effective_beta,
                  gaussian_cosine_mean, qk_norm_energy_core, rope_mean_correlation)

__all__ = ["Architecture", "NORMS", "ATTENTIONS", "NORM_TYPES", "MLPS", "POSITIONS", "NUMERIC_FIELDS",
           "OPTIONAL_FIELDS", "BETA_CRITICAL_RULES", "BLOCK_FORMS", "SOFTCAP_TOLERANCE"]

#: Block orders (LayerNorm placement) and their kernel codes.
NORMS = {"post": 0, "pre": 1, "none": 2}
#: Attention variants and their kernel codes.
ATTENTIONS = {"softmax": 0, "gain-controlled": 1}
#: Which norm sits at the placement ``norm``, and its kernel codes (docs/theory.md section 14).
NORM_TYPES = {"layer": 0, "rms": 1}
#: MLP forms and their kernel codes: ``W2 phi(W1 x)`` or ``W_down (phi(W_gate x) * W_up x)``.
MLPS = {"dense": 0, "gated": 1}
#: How tokens know their positions: added to the embeddings (``"absolute"``, which changes only
#: the input state) or rotary (``"rope"``: queries and keys rotated, docs/theory.md section 15).
POSITIONS = ("absolute", "rope")
#: The ``*_core`` map of each norm type (both ``(1, p / q)``, each from its own module).
NORM_CORES = {"layer": layernorm_core, "rms": rmsnorm_core}
#: Which layer's critical beta decides entropy collapse, per LayerNorm placement
#: (see :attr:`Architecture.beta_critical_rule`).
BETA_CRITICAL_RULES = {
    "post": "first attention layer",
    "pre": "smallest over layers",
    "none": "smallest over layers",
}
#: Readers of real model configurations, by format: ``reader(config, seq_len=None)``
#: returns a specification with an ``.architecture``. The architecture does not import the
#: readers (they build architectures: that would be an import cycle); each reader registers
#: itself here when :mod:`remprop.theory` loads (``"huggingface"``:
#: :func:`remprop.theory.model_spec`).
CONFIG_READERS = {}
#: Fields that may be arrays and broadcast into a grid.
NUMERIC_FIELDS = ("sigma_w2", "sigma_b2", "sigma_v2", "alpha_sa", "alpha_mlp")
#: Numeric fields that may also be None, and what None stands for in the maps:
#: ``sigma_o2=None`` (no output projection) acts as 1, ``sigma_w2_out=None`` as ``sigma_w2``.
OPTIONAL_FIELDS = ("sigma_o2", "sigma_w2_out")


@dataclass(frozen=True, eq=False)
class Architecture:
    r"""A stack of identical transformer blocks at initialisation.

    Block orders (``x`` is the residual stream):

    * ``norm="post"`` (BERT): ``x <- LN(alpha_sa x + SA(x)); x <- LN(alpha_mlp x + MLP(x))``
    * ``norm="pre"`` (GPT-2): ``x <- alpha_sa x + SA(LN(x)); x <- alpha_mlp x + MLP(LN(x))``
    * ``norm="none"``: ``x <- alpha_sa x + SA(x); x <- alpha_mlp x + MLP(x)``

    ``LN`` is LayerNorm or RMSNorm (``norm_type``); ``MLP`` is dense or gated (``mlp``).
    ``block_form="parallel"`` (pre-LN only): ``x <- alpha_sa x + SA(LN(x)) + MLP(LN(x))``;
    ``branch_norm=True`` puts a norm on each branch's output, ``alpha x + LN(F(...))``
    (Gemma 2/3's sandwich: ``norm="pre"``; OLMo 2: ``norm="none"``); ``final_norm=True``
    a norm after the last block (docs/theory.md section 19).
    Defaults are the BERT settings of the reference experiments: ReLU, single head,
    ``sigma_w2 = sigma_v2 = 0.2``, ``sigma_b2 = 4e-4``, ``alpha_mlp = 1``.

    Parameters
    ----------
    norm : {"post", "pre", "none"}
        Norm placement (LayerNorm or RMSNorm, see ``norm_type``).
    attention : {"softmax", "gain-controlled"}
        Softmax attention, or its centred (gain-controlled) version.
    activation : str or callable
        MLP activation: a name in :data:`~remprop.theory.ACTIVATIONS` ("relu",
        "linear", "tanh", "erf", "gelu", "silu" or a registered one) or a numba-jittable
        scalar function, which is registered on the fly under the name
        ``"user:<function name>"`` (see :func:`~remprop.theory.register_activation`);
        the field then holds that name.
    sigma_w2 : array_like
        MLP weight variance times fan-in (``W ~ N(0, sigma_w2 / d)``; the gate and the up
        projection of a gated MLP), >= 0.
    sigma_b2 : array_like
        Bias variance of every bias (values and MLP), >= 0 (0 for the bias-free
        LLaMA-style blocks).
    sigma_v2 : array_like
        Value weight variance times fan-in, >= 0.
    sigma_o2 : array_like or None
        Attention output projection ``W_O ~ N(0, sigma_o2 / d)`` applied to the
        concatenated heads, without bias (library initialisations set it to zero), >= 0:
        ``(q_A, p_A) -> sigma_o2 (q_A, p_A)``. ``None`` (default): no output projection,
        as in the reference experiments (the map of a projection at ``sigma_o2 = 1``).
    sigma_w2_out : array_like or None
        Variance times fan-in of the MLP's second layer, ``W2 ~ N(0, sigma_w2_out / d_ff)``,
        >= 0. ``None`` (default): ``sigma_w2``. A library that draws every weight with one
        standard deviation ``r`` has ``sigma_w2 = r^2 d`` but ``sigma_w2_out = r^2 d_ff``.
    alpha_sa, alpha_mlp : array_like
        Strength of the identity path around attention and MLP (``alpha x + F(x)``), >= 0.
    seq_len : int or None
        Sequence length T. ``None`` (default) uses the ``T -> infinity`` attention maps
        (``Y2 = max(0, 1 - beta_c/beta)``); an integer >= 2 uses the exact finite-T
        participation ratio of :mod:`~remprop.theory.rem.finite_t` in every attention
        layer (gain-controlled attention: ``Y2 - 1/T``).
    heads : int
        Number of attention heads H (each head sees the whole token geometry).
    qk_scaling : {"model", "head"}
        Query/key variance convention: ``"model"`` (default) draws
        ``W_Q, W_K ~ N(0, beta sqrt(log T) / d)`` for every head, which keeps the per-head
        score variance and so the meaning of ``beta`` the same for every H; ``"head"``
        divides by ``d_H = d / H`` instead, so each head behaves like a single head at
        ``H beta`` (see :func:`~remprop.theory.rem.heads.effective_beta`).
    norm_type : {"layer", "rms"}
        The norm at the placement ``norm``: LayerNorm (default) or RMSNorm (no centring;
        LLaMA, Mistral, Qwen2). Both map ``(q, p) -> (1, p / q)`` at large width when the
        tokens' per-token feature mean vanishes (docs/theory.md section 14).
    mlp : {"dense", "gated"}
        ``"dense"`` (default): ``W2 phi(W1 x + b1) + b2``. ``"gated"``:
        ``W_down (phi(W_gate x + b) * (W_up x + b)) + b`` (SwiGLU with
        ``activation="silu"``, GeGLU with ``"gelu"``; the published ones have no biases,
        ``sigma_b2 = 0``); ``sigma_w2_out`` is then the down projection's variance times
        ``d_ff`` (:func:`~remprop.theory.gated_mlp_map`, docs/theory.md section 14).
    positions : {"absolute", "rope"}
        ``"absolute"`` (default): positions added to the embeddings, which enter only
        through the input state ``(q0, rho0)``. ``"rope"``: rotary position embeddings
        (queries and keys rotated, values not); the REM of every attention row then sees
        the overlap ``p cbar_T`` instead of ``p`` (:attr:`mean_rope_correlation`,
        docs/theory.md section 15). Needs ``seq_len`` and ``head_dim``.
    rope_base : float
        RoPE base ``b`` of the frequencies ``theta_i = b^{-2i/d_H}``, > 1 (``inf``
        allowed); default 10000 (Llama 2; Llama 3 uses 500000). Read only with
        ``positions="rope"``.
    head_dim : int or None
        Width ``d_H`` of one head's queries and keys (even; ``d / heads`` in the usual
        layout). The theory has no width otherwise: the rotary correlation ``c(k)`` is an
        average over the ``d_H / 2`` rotation frequencies, so it is required with
        ``positions="rope"`` and ``qk_norm=True`` (and unused otherwise).
    kv_heads : int or None
        Key/value heads of grouped-query (``1 < kv_heads < heads``) or multi-query
        (``kv_heads = 1``) attention: the query heads of a group share ``W_K`` and ``W_V``.
        Must divide ``heads``; None (default): ``heads``. The mean maps are unchanged (the
        heads' outputs enter the next layer's overlaps linearly, each with the law of an
        ungrouped head; docs/theory.md section 19): carried and validated, not read by the maps.
    qk_norm : bool
        RMS-normalised queries and keys (OLMo 2, Gemma 3). Needs ``seq_len`` and ``head_dim``.
        The scores then no longer depend on the query/key weights' scale: every head's
        reduced scale is ``x = beta g^2 sqrt((1 - kappa_n(rho) cbar_T) / log T)`` at the
        cosine ``rho`` of its input, and ``beta`` is a multiplier on the normalised scores
        (1 for the model as initialised; ``beta g^2`` acts as the squared gain). See
        :meth:`effective_beta` and docs/theory.md sections 16 and 19.
    qk_norm_gain : float
        The norm gain g of queries and keys (1 at initialisation), > 0.
    qk_norm_dim : int or None
        Coordinates normalised together, ``n >= head_dim`` (OLMo 2: all heads, ``heads *
        head_dim``); None (default): ``head_dim`` (per head, Gemma 3). Scores are divided by
        ``sqrt(head_dim)``.
    block_form : {"sequential", "parallel"}
        ``"parallel"``: attention and MLP read the same normalised input and their outputs add
        (GPT-J, NeoX, Falcon); only with ``norm="pre"``, one skip ``alpha_sa`` (``alpha_mlp``
        must be 1).
    branch_norm : bool
        A norm (``norm_type``) on each branch's output before the skip add.
    final_norm : bool
        A norm after the last block (GPT-2's ``ln_f``, LLaMA's ``norm``): the final state of
        :func:`~remprop.theory.propagate` and :func:`~remprop.theory.final_state` is its
        output (``q = 1``, the cosine unchanged).
    logit_softcap : float or None
        Attention-logit soft-capping ``c tanh(s / c)`` (Gemma 2: 50). The theory has no capped
        energies: the maps are those of uncapped attention, accepted when the bound of
        :meth:`logit_softcap_change` on the relative change of Y2 is below
        :data:`SOFTCAP_TOLERANCE` (a ValueError naming ``logit_softcap`` otherwise). Needs
        ``seq_len``; not with ``norm="none"``.

    Notes
    -----
    Numeric fields may be arrays: they broadcast with ``beta`` in
    :func:`~remprop.theory.propagate`. Invalid values raise ``ValueError`` naming the field.

    Vanished stream. A sublayer whose output is identically zero and whose skip is 0
    (``alpha_sa = 0`` with ``sigma_v2 = sigma_b2 = 0`` or ``sigma_o2 = 0``;
    ``alpha_mlp = 0`` with ``sigma_w2 = sigma_b2 = 0`` or ``sigma_w2_out = sigma_b2 = 0``)
    sets every token to the zero vector: from that layer on ``q = p = 0`` and the cosine
    ``rho = p / q`` is 0/0. Such a stack is accepted (a diagram's alpha axis passes through
    it) and its state is defined as *vanished*: :func:`~remprop.theory.propagate` reports
    ``rho = nan`` from that layer on, the diagrams classify a ``nan`` final cosine as rank
    collapse (all tokens equal: rank 0), and ``remprop propagate`` prints the layer where
    the cosine became undefined with a note (docs/theory.md section 1). A user activation
    that fails at a quadrature node gives ``nan`` in the same way
    (:func:`~remprop.theory.activation_moments` raises, naming it).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (settings of ``docs/theory.md`` section 2).
    """

    norm: str = "post"
    attention: str = "softmax"
    activation: str = "relu"
    sigma_w2: Any = 0.2
    sigma_b2: Any = 4e-4
    sigma_v2: Any = 0.2
    alpha_sa: Any = 1.0
    alpha_mlp: Any = 1.0
    seq_len: Any = None
    heads: int = 1
    qk_scaling: str = "model"
    sigma_o2: Any = None
    sigma_w2_out: Any = None
    norm_type: str = "layer"
    mlp: str = "dense"
    positions: str = "absolute"
    rope_base: Any = ROPE_BASE
    head_dim: Any = None
    kv_heads: Any = None
    qk_norm: bool = False
    qk_norm_gain: Any = 1.0
    qk_norm_dim: Any = None
    block_form: str = "sequential"
    branch_norm: bool = False
    final_norm: bool = False
    logit_softcap: Any = None

    def __post_init__(self):
        check_choice("norm", self.norm, tuple(NORMS))
        check_choice("attention", self.attention, tuple(ATTENTIONS))
        check_choice("norm_type", self.norm_type, tuple(NORM_TYPES))
        check_choice("mlp", self.mlp, tuple(MLPS))
        object.__setattr__(self, "activation", resolve_activation(self.activation))
        object.__setattr__(self, "seq_len", check_seq_len(self.seq_len))
        object.__setattr__(self, "heads", check_heads(self.heads))
        check_choice("qk_scaling", self.qk_scaling, QK_SCALINGS)
        self._check_positions()
        for name in NUMERIC_FIELDS + OPTIONAL_FIELDS:
            if name in OPTIONAL_FIELDS and getattr(self, name) is None:
                continue
            value = as_float_array(name, getattr(self, name), nonnegative=True)
            object.__setattr__(self, name, float(value) if value.ndim == 0 else value)
        check_block_forms(self)

    def _check_positions(self):
        """``positions``, ``rope_base`` (> 1) and ``head_dim`` (even, >= 2); RoPE needs
        ``seq_len`` and ``head_dim``. The rules are those of :mod:`remprop.theory.rem.rope`,
        reported with the field names."""
        check_choice("positions", self.positions, POSITIONS)
        if self.head_dim is not None:
            object.__setattr__(self, "head_dim", check_count("head_dim", self.head_dim, 2))
        if self.positions == "rope":
            if self.seq_len is None:
                raise ValueError("seq_len is required with positions='rope' (an integer T >= 2): the mean "
                                 "rotary correlation cbar_T depends on T (docs/theory.md section 15)")
            if self.head_dim is None:
                raise ValueError("head_dim is required with positions='rope' (the width d_H of one head's "
                                 "queries and keys, usually width / heads): the rotary correlation averages "
                                 "over its d_H / 2 frequencies")
        try:
            rope_mean_correlation(2, 2 if self.head_dim is None else self.head_dim, self.rope_base)
        except ValueError as err:
            raise ValueError(str(err).replace("base must", "rope_base must", 1)) from None
        object.__setattr__(self, "rope_base", float(self.rope_base))

    # -- conveniences -------------------------------------------------------------
    def replace(self, **changes) -> "Architecture":
        """A copy with some fields changed (validated again); unknown fields raise ValueError."""
        known = {field.name for field in dataclasses.fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ValueError(f"{', '.join(unknown)}: not a field of Architecture "
                             f"(fields: {', '.join(sorted(known))})")
        return dataclasses.replace(self, **changes)

    def numeric(self) -> dict:
        """Every parameter of the maps as a float64 array: the numeric fields, then the
        optional ones with None resolved (``sigma_o2`` -> 1, ``sigma_w2_out`` -> ``sigma_w2``)."""
        out = {name: np.asarray(getattr(self, name), dtype=np.float64) for name in NUMERIC_FIELDS}
        out["sigma_o2"] = np.asarray(1.0 if self.sigma_o2 is None else self.sigma_o2, dtype=np.float64)
        out["sigma_w2_out"] = (out["sigma_w2"] if self.sigma_w2_out is None
                               else np.asarray(self.sigma_w2_out, dtype=np.float64))
        return out

    @property
    def output_projection(self) -> bool:
        """Whether attention has an output projection ``W_O`` (``sigma_o2`` is not None)."""
        return self.sigma_o2 is not None

    @property
    def block_code(self) -> int:
        """Kernel code of the block's form (docs/theory.md section 19): ``BLOCK_FORMS[block_form]
        + 2 branch_norm`` (0: sequential branches, no branch norm)."""
        return BLOCK_FORMS[self.block_form] + 2 * int(self.branch_norm)

    @property
    def qk_norm_width(self) -> int:
        """``n`` of QK-norm (``qk_norm_dim``, or ``head_dim``); 0 without QK-norm (a kernel column)."""
        if not self.qk_norm:
            return 0
        return self.head_dim if self.qk_norm_dim is None else self.qk_norm_dim

    @property
    def codes(self) -> tuple:
        """Integer codes (norm, attention, activation, norm_type, mlp) of the numba kernels
        (:func:`remprop.theory.kernels.kernels_for`)."""
        return (NORMS[self.norm], ATTENTIONS[self.attention], ACTIVATIONS[self.activation],
                NORM_TYPES[self.norm_type], MLPS[self.mlp])

    def to_dict(self) -> dict:
        """JSON-ready description (arrays become lists)."""
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            out[field.name] = value.tolist() if isinstance(value, np.ndarray) else value
        return out

    @classmethod
    def from_hf_config(cls, config, *, seq_len=None) -> "Architecture":
        """The architecture of a Hugging Face model at the library's default initialisation.

        ``config``: a ``transformers`` config, a dict, a ``config.json`` path or a shipped
        name (``"bert-base"``, ``"gpt2"``, ``"llama-3.2-1b"``, ...). BERT, RoBERTa, GPT-2, ViT and
        the LLaMA-style decoders (llama, mistral, qwen2: pre-RMSNorm, gated SiLU MLP) are supported.
        The query/key scale, depth and input state are not architecture fields: they come
        with the full translation, :func:`remprop.theory.model_spec` (``.beta``,
        ``.depth``, ``.q0``, ``.rho0``, and the assumptions the model breaks).

        Examples
        --------
        >>> from remprop.theory import Architecture
        >>> arch = Architecture.from_hf_config("bert-base")
        >>> arch.norm, arch.heads, arch.seq_len, round(arch.sigma_w2_out, 4)
        ('post', 12, 512, 1.2288)
        """
        return CONFIG_READERS["huggingface"](config, seq_len=seq_len).architecture

    # -- query/key scale: the one home of the effective beta and the beta_c rule ---------
    @property
    def mean_rope_correlation(self) -> float:
        r"""The factor ``cbar_T`` on ``p`` in the REM of every attention row.

        .. math:: x = \beta\sqrt{q\,(q - p\,\bar c_T)},\qquad
                  \beta_c = \sqrt{\frac{2}{q\,(q - p\,\bar c_T)}}

        ``cbar_T = rope_mean_correlation(seq_len, head_dim, rope_base)`` with RoPE (the mean
        rotary correlation over pairs of keys, :func:`~remprop.theory.rem.rope_mean_correlation`),
        exactly 1 otherwise (the part of the scores shared by all keys cancels). Only the
        REM's scale and beta_c use it; the output map keeps ``p`` (docs/theory.md section 15).
        """
        if self.positions != "rope":
            return 1.0
        return rope_mean_correlation(self.seq_len, self.head_dim, self.rope_base)


    @property
    def head_factor(self) -> int:
        """``beta_eff / beta`` of every head: ``heads`` with ``qk_scaling="head"``, else 1
        (1 with QK-norm, where the weights' scale drops out)."""
        return self.heads if self.qk_scaling == "head" and not self.qk_norm else 1

    @property
    def beta_scale(self) -> float:
        """The factor from the model's ``beta`` to the kernels' column: :attr:`head_factor`, or
        with QK-norm ``g^2 / sqrt(log T)`` (docs/theory.md section 19). :meth:`critical_beta`
        divides by it."""
        if self.qk_norm:
            return self.qk_norm_gain ** 2 / math.sqrt(math.log(self.seq_len))
        return float(self.head_factor)

    def effective_beta(self, beta, *, q=None, p=None):
        r"""The single-head beta that each head behaves like.

        .. math:: \beta_{\rm eff} = \beta\ (\text{"model"}),\qquad \beta_{\rm eff} = H \beta\ (\text{"head"})

        Every map of the theory (propagation, min alpha, the causal theory, gradients)
        runs its attention at this beta; callers pass the model's ``beta`` and never
        apply the factor themselves (docs/theory.md section 3).

        With ``qk_norm`` the head's beta depends on the state ``(q, p)`` of the attention input
        (docs/theory.md sections 16 and 19): ``beta_eff^2 q (q - p cbar_T) = x^2`` with
        ``x = beta g^2 sqrt((1 - kappa_n(p/q) cbar_T) / log T)``, i.e.
        ``beta * qk_norm_beta(p/q, head_dim, T, g, q=q)`` without RoPE. Given ``q`` and ``p``
        it returns that; without them the value at the reference state ``q = 1, p = 0``,
        ``beta g^2 / sqrt(log T)`` (:attr:`beta_scale`), which the kernels read as the
        reduced-scale factor. ``q``, ``p`` are ignored without QK-norm.
        """
        if not self.qk_norm:
            return effective_beta(beta, self.heads, self.qk_scaling)
        beta = as_float_array("beta", beta, positive=True)
        if q is None and p is None:
            return scalar_or_array(beta * self.beta_scale)
        if q is None or p is None:
            raise ValueError("effective_beta with qk_norm needs both q and p (the attention input's state), "
                             "or neither")
        q = as_float_array("q", q, positive=True)
        p = as_float_array("p", p)
        cbar = self.mean_rope_correlation
        energy = 1.0 - np.asarray(gaussian_cosine_mean(np.clip(p / q, -1.0, 1.0), self.qk_norm_width)) * cbar
        with np.errstate(divide="ignore", invalid="ignore"):
            return scalar_or_array(beta * self.beta_scale * np.sqrt(np.maximum(energy, 0.0)
                                                                    / (q * np.maximum(q - p * cbar, 0.0))))

    @property
    def beta_critical_rule(self) -> str:
        """Which layer's critical beta decides entropy collapse for this block order.

        ``"first attention layer"`` for post-LN (LayerNorm after every sub-block holds the
        attention input at ``q = 1`` and the cosine only grows, so the first layer has the
        smallest beta_c); ``"smallest over layers"`` for pre-LN and no LN, where the
        stream's state changes from layer to layer (docs/theory.md section 6).
        """
        return BETA_CRITICAL_RULES[self.norm]

    def attention_input(self, q, p):
        """Order parameters that the attention of a block sees, given the block input ``(q, p)``.

        ``LN(x) -> (1, p / q)`` for pre-LN (LayerNorm or RMSNorm, ``norm_type``), the block
        input itself otherwise (docs/theory.md sections 5 and 14). Broadcasts; no validation
        (callers hold validated states).
        """
        q = np.asarray(q, dtype=np.float64)
        p = np.asarray(p, dtype=np.float64)
        if self.norm == "pre":
            return NORM_CORES[self.norm_type](q, p)
        return q, p

    def critical_beta(self, per_layer=None, *, first=None, smallest=None):
        r"""The model-level beta above which this stack is entropy-collapsed.

        From the per-head critical betas :math:`\beta_c^{(l)} = \sqrt{2 / (q_l (q_l - p_l \bar c_T))}`
        of each layer's attention input (:attr:`mean_rope_correlation`, 1 without RoPE), the
        rule :attr:`beta_critical_rule` picks the first layer (post-LN) or the smallest over
        layers (pre-LN, no LN), and the
        head factor puts it on the axis of the model's ``beta``:
        ``beta > critical_beta(...)`` exactly when ``effective_beta(beta) > beta_c``.
        With ``qk_norm`` the per-layer values are those of the kernels' column
        (``sqrt(2 / (1 - kappa_n cbar_T))``) and the result is the multiplier on the normalised
        scores at which the stack freezes (:attr:`beta_scale`, docs/theory.md section 19): the
        model as initialised has ``beta = 1``.

        Parameters
        ----------
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
            raise ValueError("critical_beta needs per_layer, or both first and smallest")
        chosen = first if self.norm == "post" else smallest
        return scalar_or_array(np.asarray(chosen, dtype=np.float64) / self.beta_scale)

    def block_critical_beta(self, q, p):
        """Per-head critical beta of the attention of a block whose input is ``(q, p)``.

        ``sqrt(2 / (q (q - p cbar_T)))`` of :meth:`attention_input` (``cbar_T``:
        :attr:`mean_rope_correlation`); ``inf`` for collapsed tokens without RoPE. Feed
        the values of every layer to :meth:`critical_beta` for the stack's verdict.
        """
        q_in, p_in = self.attention_input(q, p)
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.qk_norm:  # in the kernels' units: x = column * sqrt(energy) reaches sqrt(2)
                energy = (np.vectorize(qk_norm_energy_core, otypes=[np.float64])(
                    p_in / q_in, self.qk_norm_width, self.mean_rope_correlation))
                return scalar_or_array(np.sqrt(2.0 / energy))
            return critical_beta_core(q_in, np.minimum(p_in, q_in) * self.mean_rope_correlation)

    def attention_map(self, beta, *, sigma_bv2=None) -> C.Component:
        """This architecture's attention component at the model's ``beta``.

        Softmax or gain-controlled (``attention``), each head at :meth:`effective_beta`,
        finite T when ``seq_len`` is set, with RoPE when ``positions="rope"``
        (:attr:`mean_rope_correlation`). ``sigma_bv2``: a value-bias variance of its own
        (default ``sigma_b2``, the one variance of every bias).
        """
        make = C.softmax_attention if self.attention == "softmax" else C.gain_controlled_attention
        rope = self.mean_rope_correlation if self.positions == "rope" else None
        self.check_logit_softcap(beta)
        return make(self.effective_beta(beta), self.sigma_v2, self.sigma_b2 if sigma_bv2 is None else sigma_bv2,
                    seq_len=self.seq_len, mean_rope_correlation=rope,
                    qk_norm_dim=self.qk_norm_width if self.qk_norm else None)

    def block(self, beta, *, sigma_bv2=None) -> C.Component:
        """This architecture's block as a composition of component maps.

        ``compose(attention_map(beta))``: the one description of a block. The numba kernels
        are checked against it, the torch simulator walks it through the component
        registry and the sympy expansion is derived from it (docs/architecture.md).
        ``sigma_bv2`` as in :meth:`attention_map`.
        """
        return self.compose(self.attention_map(beta, sigma_bv2=sigma_bv2))

    def compose(self, attention: C.Component) -> C.Component:
        """The block of this architecture around a given attention map.

        Adds the output projection (when ``sigma_o2`` is set), the MLP (dense or gated,
        ``mlp``), the skips and the norms (LayerNorm or RMSNorm, ``norm_type``) in the order of
        ``norm``; :meth:`block` passes the softmax or gain-controlled map, the causal theory
        its per-position map.
        """
        if self.output_projection:
            attention = C.serial(attention, C.output_projection(self.sigma_o2))
        make_mlp = C.gated_mlp if self.mlp == "gated" else C.mlp
        ff = make_mlp(self.sigma_w2, self.sigma_b2, self.activation, sigma_w2_out=self.sigma_w2_out)
        norm = C.rms_norm if self.norm_type == "rms" else C.layer_norm

        def branch(f):
            """A branch: norm before it (pre-LN) and after it (``branch_norm``)."""
            layers = ((norm(),) if self.norm == "pre" else ()) + (f,) + ((norm(),) if self.branch_norm else ())
            return layers[0] if len(layers) == 1 else C.serial(*layers)

        if self.block_form == "parallel":  # pre-LN only (checked)
            return C.parallel(self.alpha_sa, branch(attention), branch(ff))
        if self.norm == "post":
            return C.serial(C.residual(self.alpha_sa, branch(attention)), norm(),
                            C.residual(self.alpha_mlp, branch(ff)), norm())
        return C.serial(C.residual(self.alpha_sa, branch(attention)), C.residual(self.alpha_mlp, branch(ff)))

    def final_layer(self):
        """The norm after the last block (a component) with ``final_norm``, else None."""
        if not self.final_norm:
            return None
        return C.rms_norm() if self.norm_type == "rms" else C.layer_norm()

    def stack_output(self, q, p):
        """The stack's output state from the last block's ``(q, p)``: the final norm's
        ``(1, p / q)`` with ``final_norm`` (the cosine unchanged), ``(q, p)`` otherwise. Broadcasts."""
        q = np.asarray(q, dtype=np.float64)
        p = np.asarray(p, dtype=np.float64)
        if not self.final_norm:
            return q, p
        with np.errstate(divide="ignore", invalid="ignore"):
            return NORM_CORES[self.norm_type](q, p)

    # -- attention-logit soft-capping: theory/softcap.py (docs/theory.md section 19) -------
    def logit_softcap_change(self, beta, q0=1.0):
        """:func:`remprop.theory.softcap.logit_softcap_change` of this architecture."""
        return softcap.logit_softcap_change(self, beta, q0)

    def logit_softcap_max_beta(self, q0=1.0):
        """:func:`remprop.theory.softcap.logit_softcap_max_beta` of this architecture."""
        return softcap.logit_softcap_max_beta(self, q0)

    def check_logit_softcap(self, beta, q0=1.0):
        """:func:`remprop.theory.softcap.check_logit_softcap` of this architecture."""
        softcap.check_logit_softcap(self, beta, q0)

    def __repr__(self):
        fields = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self))
        return f"Architecture({fields})"
