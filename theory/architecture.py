"""The transformer architecture that the theory propagates through: the user's fields, validated once.

An :class:`Architecture` holds what a user chooses (block order, attention, MLP, variances, skips,
heads, positions, block forms) and checks it at construction. What the choices *mean* lives with
the components that own them (:mod:`remprop.theory.components`): the block assembly
(:mod:`~remprop.theory.components.block`), the query/key scale and the beta_c rule
(:mod:`~remprop.theory.components.attention_scale`), soft-capping (:mod:`remprop.theory.softcap`);
the methods here are their entry points. Configuration readers live in :mod:`remprop.theory.models`.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from remprop._deprecation import renamed

from . import components as C
from .activations import resolve_activation
from .block_forms import check_block_forms
from .checks import ParameterError, as_float_array, check_count
from .components import attention_scale as scale
from .components import block as assembly
from .components.attention import AttentionKind, Positions
from .components.block import BlockForm, MLPForm, NormPlacement, NormType
from .components.dyt import check_alpha0
from .rem import ROPE_BASE, QKScaling, check_heads, check_seq_len
from .rem.rope import _check_rope as check_rope

__all__ = ["Architecture", "NORMS", "ATTENTIONS", "NORM_TYPES", "MLPS", "POSITIONS", "BLOCK_FORMS", "NUMERIC_FIELDS",
           "OPTIONAL_FIELDS", "BETA_CRITICAL_RULES"]

#: Norm placements, as spelled (:class:`~remprop.theory.components.block.NormPlacement`).
NORMS = NormPlacement.spellings()
#: Attention variants (:class:`~remprop.theory.components.attention.AttentionKind`).
ATTENTIONS = AttentionKind.spellings()
#: Norm types (:class:`~remprop.theory.components.block.NormType`).
NORM_TYPES = NormType.spellings()
#: MLP forms (:class:`~remprop.theory.components.block.MLPForm`).
MLPS = MLPForm.spellings()
#: Position encodings (:class:`~remprop.theory.components.attention.Positions`).
POSITIONS = Positions.spellings()
#: Block forms (:class:`~remprop.theory.components.block.BlockForm`).
BLOCK_FORMS = BlockForm.spellings()
#: Which layer's critical beta decides entropy collapse, per norm placement.
BETA_CRITICAL_RULES = {placement.value: placement.beta_critical_rule for placement in NormPlacement}
#: Fields that may be arrays and broadcast into a grid.
NUMERIC_FIELDS = ("sigma_w2", "sigma_b2", "sigma_v2", "alpha_sa", "alpha_mlp")
#: Numeric fields that may also be None, and what None stands for in the maps:
#: ``sigma_o2=None`` (no output projection) acts as 1, ``sigma_w2_out=None`` as ``sigma_w2``.
OPTIONAL_FIELDS = ("sigma_o2", "sigma_w2_out")
#: Fields added after records (training runs, cells, diagrams) were first stored: :meth:`Architecture.to_dict`
#: leaves them out while they are None, so that those records' keys stay what they were.
LATER_FIELDS = ("rotary_dim", "dyt_alpha0")
#: Choice fields and their enums: strings are the public spelling, converted once here.
_CHOICES = {"norm": NormPlacement, "attention": AttentionKind, "norm_type": NormType, "mlp": MLPForm}


@dataclass(frozen=True, eq=False)
class Architecture:
    r"""A stack of identical transformer blocks at initialisation.

    The block is the tree of :func:`remprop.theory.components.block.block` (docs/theory.md
    section 5): post-LN ``x <- N(alpha_sa x + SA(x)); x <- N(alpha_mlp x + MLP(x))``, pre-LN
    ``x <- alpha_sa x + SA(N(x)); x <- alpha_mlp x + MLP(N(x))``, or no norm. Defaults are the
    BERT settings of the reference experiments: ReLU, one head, ``sigma_w2 = sigma_v2 = 0.2``,
    ``sigma_b2 = 4e-4``, ``alpha_mlp = 1``. Choice fields are given as strings and held as the
    members of their enums, which compare equal to the strings.

    Parameters
    ----------
    norm : {"post", "pre", "none"}
        Norm placement (:class:`~remprop.theory.components.block.NormPlacement`).
    attention : {"softmax", "gain-controlled"}
        Softmax attention, or its centred version.
    activation : str or callable
        MLP activation: a name in :data:`~remprop.theory.ACTIVATIONS` or a numba-jittable scalar
        function, registered as ``"user:<name>"`` (:func:`~remprop.theory.register_activation`).
    sigma_w2, sigma_b2, sigma_v2 : array_like
        MLP weight, bias (every bias) and value weight variances times fan-in, >= 0.
    sigma_o2, sigma_w2_out : array_like or None
        Output projection ``W_O ~ N(0, sigma_o2 / d)`` without bias (None: none, as in the reference
        experiments); the MLP's second layer ``W2 ~ N(0, sigma_w2_out / d_ff)`` (None: ``sigma_w2``).
    alpha_sa, alpha_mlp : array_like
        Strength of the identity path around attention and MLP (``alpha x + F(x)``), >= 0.
    seq_len : int or None
        Sequence length T >= 2 (exact finite-T participation ratio in every attention layer);
        None: the ``T -> infinity`` maps.
    heads : int
        Attention heads H.
    qk_scaling : {"model", "head"}
        Query/key variance over ``d`` (each head the single-head REM at beta) or ``d_H`` (each
        head at ``H beta``); :func:`~remprop.theory.rem.heads.effective_beta`.
    norm_type : {"layer", "rms", "dyt"}
        LayerNorm, RMSNorm or DyT ``tanh(a0 x)`` at the placement (docs/theory.md sections 14, 14.1).
    dyt_alpha0 : float or None
        DyT's initial scale ``a0`` > 0 (only with ``norm_type="dyt"``; None: 0.5).
    mlp : {"dense", "gated"}
        ``W2 phi(W1 x + b1) + b2`` or ``W_down (phi(W_gate x + b) * (W_up x + b)) + b``.
    positions : {"absolute", "rope"}
        Positions added to the embeddings (only the input state changes), or rotary: the REM sees
        ``p cbar_T`` (docs/theory.md section 15); needs ``seq_len`` and ``head_dim``.
    rope_base : float
        RoPE base ``b`` of the frequencies ``b^{-2i/d_H}``, > 1 (default 10000).
    head_dim : int or None
        Width ``d_H`` of one head's queries and keys (even); needed by RoPE and QK-norm.
    rotary_dim : int or None
        Coordinates of each head that RoPE rotates (even, ``<= head_dim``; GPT-NeoX's
        ``rotary_pct d_H``), the rest pass unrotated
        (:func:`~remprop.theory.rem.rope.partial_rotary_correlation`); None: all ``head_dim``.
    kv_heads : int or None
        Key/value heads of grouped-query attention (dividing ``heads``; the mean maps are
        unchanged, docs/theory.md section 19); None: ``heads``.
    qk_norm : bool
        RMS-normalised queries and keys (OLMo 2, Gemma 3); ``beta`` then multiplies the
        normalised scores (1 as initialised). Needs ``seq_len`` and ``head_dim``.
    qk_norm_gain, qk_norm_dim : float, int or None
        The norm gain g of queries and keys, > 0; coordinates normalised together (``>= head_dim``; None: ``head_dim``).
    block_form : {"sequential", "parallel"}
        Parallel branches on the same normalised input (GPT-J, NeoX; pre-norm, ``alpha_mlp = 1``).
    branch_norm : bool
        A norm on each branch's output before the skip add (Gemma 2/3, OLMo 2).
    final_norm : bool
        A norm after the last block (GPT-2's ``ln_f``): the final state is its output.
    logit_softcap : float or None
        Attention-logit soft-capping ``c tanh(s / c)`` (Gemma 2), accepted while its bound on the
        change of Y2 is below :data:`~remprop.theory.softcap.SOFTCAP_TOLERANCE`
        (:mod:`remprop.theory.softcap`). Needs ``seq_len``; not with ``norm="none"``.

    Notes
    -----
    Numeric fields may be arrays: they broadcast with ``beta`` in :func:`~remprop.theory.propagate`.
    Invalid values raise ``ValueError`` naming the field. A sublayer whose output is identically
    zero and whose skip is 0 sets every token to zero: from that layer on the cosine is 0/0 and
    the stack is *vanished* (``rho = nan``, classified as rank collapse; docs/theory.md section 1).

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
    rotary_dim: Any = None
    kv_heads: Any = None
    qk_norm: bool = False
    qk_norm_gain: Any = 1.0
    qk_norm_dim: Any = None
    block_form: str = "sequential"
    branch_norm: bool = False
    final_norm: bool = False
    logit_softcap: Any = None
    dyt_alpha0: Any = None

    def __post_init__(self):
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        for name, choice in _CHOICES.items():
            set_(name, choice.parse(name, getattr(self, name)))
        set_("activation", resolve_activation(self.activation))
        set_("seq_len", check_seq_len(self.seq_len))
        set_("heads", check_heads(self.heads))
        set_("qk_scaling", QKScaling.parse("qk_scaling", self.qk_scaling))
        self._check_positions()
        for name in NUMERIC_FIELDS + OPTIONAL_FIELDS:
            if name in OPTIONAL_FIELDS and getattr(self, name) is None:
                continue
            value = as_float_array(name, getattr(self, name), nonnegative=True)
            set_(name, float(value) if value.ndim == 0 else value)
        set_("block_form", BlockForm.parse("block_form", self.block_form))
        if self.dyt_alpha0 is not None:
            if self.norm_type is not NormType.DYT:
                raise ParameterError("dyt_alpha0", f"dyt_alpha0 is DyT's initial scale, read only with "
                                     f"norm_type='dyt' (got norm_type={self.norm_type.value!r})")
            set_("dyt_alpha0", check_alpha0(self.dyt_alpha0, "dyt_alpha0"))
        kind = self.norm_type.kind  # the norm's own rules: where its map holds
        if self.norm.value not in kind.placements:
            raise ParameterError("norm_type", f"norm_type={self.norm_type.value!r} is not defined with "
                                 f"norm={self.norm.value!r}: {kind.placement_note}")
        check_block_forms(self)

    def _check_positions(self):
        """``positions``, ``rope_base`` (> 1) and ``head_dim`` (even, >= 2): the rules of
        :mod:`remprop.theory.rem.rope`, reported with the field names. RoPE needs ``seq_len`` and ``head_dim``."""
        object.__setattr__(self, "positions", Positions.parse("positions", self.positions))
        if self.head_dim is not None:
            object.__setattr__(self, "head_dim", check_count("head_dim", self.head_dim, 2))
        if self.positions.rotary:
            for name, why in (("seq_len", "an integer T >= 2): the mean rotary correlation cbar_T depends on T "
                                          "(docs/theory.md section 15)"),
                              ("head_dim", "the width d_H of one head's queries and keys, usually width / heads): "
                                           "the rotary correlation averages over its d_H / 2 frequencies")):
                if getattr(self, name) is None:
                    raise ValueError(f"{name} is required with positions='rope' ({why}")
        if self.rotary_dim is not None:
            if self.head_dim is None:
                raise ValueError("head_dim is required with rotary_dim (the head's width, of which rotary_dim "
                                 "coordinates rotate)")
            rotary = check_count("rotary_dim", self.rotary_dim, 2)
            if rotary % 2 or rotary > self.head_dim:
                raise ValueError(f"rotary_dim must be even and <= head_dim ({self.head_dim}): RoPE rotates "
                                 f"coordinate pairs of a head, got {rotary}")
            object.__setattr__(self, "rotary_dim", rotary)
        try:
            check_rope(2 if self.head_dim is None else self.head_dim, self.rope_base)  # O(1): no frequency sum
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

    def to_dict(self) -> dict:
        """JSON-ready description (arrays become lists, choices their spellings). Fields added after
        records were first stored (``LATER_FIELDS``) are left out while unset, so that the stored
        runs, cells and diagrams of architectures without them keep their keys."""
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if field.name in LATER_FIELDS and value is None:
                continue
            out[field.name] = value.tolist() if isinstance(value, np.ndarray) else value
            if isinstance(value, str):
                out[field.name] = str(value)
        return out

    # -- the query/key scale: remprop.theory.components.attention_scale ---------------
    @property
    def mean_rope_correlation(self) -> float:
        """:func:`~remprop.theory.components.attention_scale.mean_rope_correlation` (1 without RoPE)."""
        return scale.mean_rope_correlation(self)

    @property
    def head_factor(self) -> int:
        """:func:`~remprop.theory.components.attention_scale.head_factor`."""
        return scale.head_factor(self)

    @property
    def beta_scale(self) -> float:
        """:func:`~remprop.theory.components.attention_scale.beta_scale`."""
        return scale.beta_scale(self)

    @property
    def qk_norm_width(self) -> int:
        """:func:`~remprop.theory.components.attention_scale.qk_norm_width` (0 without QK-norm)."""
        return scale.qk_norm_width(self)

    def effective_beta(self, beta, *, q=None, p=None):
        """:func:`~remprop.theory.components.attention_scale.effective_beta`: the single-head beta
        of every head (docs/theory.md section 3)."""
        return scale.effective_beta(self, beta, q=q, p=p)

    @property
    def beta_critical_rule(self) -> str:
        """Which layer's critical beta decides entropy collapse (the norm placement's rule)."""
        return self.norm.beta_critical_rule

    def beta_critical(self, per_layer=None, *, first=None, smallest=None):
        """:func:`~remprop.theory.components.attention_scale.beta_critical`: the model-level beta
        above which this stack is entropy-collapsed."""
        return scale.beta_critical(self, per_layer, first=first, smallest=smallest)

    def block_beta_critical(self, q, p):
        """:func:`~remprop.theory.components.attention_scale.block_beta_critical` of a block input."""
        return scale.block_beta_critical(self, q, p)

    critical_beta = renamed("critical_beta", beta_critical, "Architecture.beta_critical()")
    block_critical_beta = renamed("block_critical_beta", block_beta_critical, "Architecture.block_beta_critical()")

    # -- the block tree: remprop.theory.components.block -------------------------------
    def attention_input(self, q, p):
        """:func:`~remprop.theory.components.block.attention_input`: what attention sees."""
        return assembly.attention_input(self, q, p)

    def attention_map(self, beta, *, sigma_bv2=None) -> C.Component:
        """:func:`~remprop.theory.components.attention_scale.attention_map`: this architecture's
        attention component at the model's ``beta``."""
        return scale.attention_map(self, beta, sigma_bv2=sigma_bv2)

    def block(self, beta, *, sigma_bv2=None) -> C.Component:
        """This architecture's block as a tree of components: the one description of a block
        (``compose(attention_map(beta))``), which the kernels, the torch stack and the sympy
        expansion all follow (docs/architecture.md)."""
        return self.compose(self.attention_map(beta, sigma_bv2=sigma_bv2))

    def compose(self, attention: C.Component) -> C.Component:
        """:func:`~remprop.theory.components.block.block` around a given attention map."""
        return assembly.block(self, attention)

    def final_layer(self):
        """The norm after the last block (a component) with ``final_norm``, else None."""
        return assembly.final_norm(self)

    def stack_output(self, q, p):
        """:func:`~remprop.theory.components.block.stack_output`: the final norm's map (``(1, p / q)``
        for LayerNorm and RMSNorm) with ``final_norm``, ``(q, p)`` otherwise."""
        return assembly.stack_output(self, q, p)

    def __repr__(self):
        fields = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self))
        return f"Architecture({fields})"
