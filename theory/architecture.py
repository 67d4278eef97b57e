"""The transformer architecture that the theory propagates through."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import components as C
from .checks import as_float_array, check_choice
from .activations import ACTIVATIONS, resolve_activation
from .rem.finite_t import check_seq_len
from .rem.heads import QK_SCALINGS, check_heads, effective_beta

__all__ = ["Architecture", "NORMS", "ATTENTIONS", "NUMERIC_FIELDS", "OPTIONAL_FIELDS"]

#: Block orders (LayerNorm placement) and their kernel codes.
NORMS = {"post": 0, "pre": 1, "none": 2}
#: Attention variants and their kernel codes.
ATTENTIONS = {"softmax": 0, "gain-controlled": 1}
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

    Defaults are the BERT settings of the reference experiments: ReLU, single head,
    ``sigma_w2 = sigma_v2 = 0.2``, ``sigma_b2 = 4e-4``, ``alpha_mlp = 1``.

    Parameters
    ----------
    norm : {"post", "pre", "none"}
        LayerNorm placement.
    attention : {"softmax", "gain-controlled"}
        Softmax attention, or its centred (gain-controlled) version.
    activation : str or callable
        MLP activation: a name in :data:`~remprop.theory.ACTIVATIONS` ("relu",
        "linear", "tanh", "erf", "gelu", "silu" or a registered one) or a numba-jittable
        scalar function, which is registered on the fly under the name
        ``"user:<function name>"`` (see :func:`~remprop.theory.register_activation`);
        the field then holds that name.
    sigma_w2 : array_like
        MLP weight variance times fan-in (``W ~ N(0, sigma_w2 / d)``), >= 0.
    sigma_b2 : array_like
        Bias variance of every bias (values and MLP), >= 0.
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

    Numeric fields may be arrays: they broadcast with ``beta`` in
    :func:`~remprop.theory.propagate`. Invalid values raise ``ValueError`` naming the field.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (settings of Sec. 2 of ``THEORY.md``).
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

    def __post_init__(self):
        check_choice("norm", self.norm, tuple(NORMS))
        check_choice("attention", self.attention, tuple(ATTENTIONS))
        object.__setattr__(self, "activation", resolve_activation(self.activation))
        object.__setattr__(self, "seq_len", check_seq_len(self.seq_len))
        object.__setattr__(self, "heads", check_heads(self.heads))
        check_choice("qk_scaling", self.qk_scaling, QK_SCALINGS)
        for name in NUMERIC_FIELDS + OPTIONAL_FIELDS:
            if name in OPTIONAL_FIELDS and getattr(self, name) is None:
                continue
            value = as_float_array(name, getattr(self, name), nonnegative=True)
            object.__setattr__(self, name, float(value) if value.ndim == 0 else value)

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
    def codes(self) -> tuple:
        """Integer codes (norm, attention, activation) used by the numba kernels."""
        return NORMS[self.norm], ATTENTIONS[self.attention], ACTIVATIONS[self.activation]

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
        name (``"bert-base"``, ``"gpt2"``, ...). BERT, RoBERTa, GPT-2 and ViT are supported.
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
        from .models.hf_config import model_spec

        return model_spec(config, seq_len=seq_len).architecture

    def effective_beta(self, beta):
        """The single-head beta of each head: ``beta``, or ``heads * beta`` with ``qk_scaling="head"``."""
        return effective_beta(beta, self.heads, self.qk_scaling)

    def block(self, beta) -> C.Component:
        """This architecture's block as a composition of component maps.

        The composition is the readable statement of the block order; it evaluates the
        same maps as the numba kernels (and is slower).
        """
        attn = (C.softmax_attention if self.attention == "softmax" else C.gain_controlled_attention)(
            self.effective_beta(beta), self.sigma_v2, self.sigma_b2, seq_len=self.seq_len)
        return self.compose(attn)

    def compose(self, attention: C.Component) -> C.Component:
        """The block of this architecture around a given attention map.

        Adds the output projection (when ``sigma_o2`` is set), the MLP, the skips and the
        LayerNorms in the order of ``norm``; :meth:`block` passes the softmax or
        gain-controlled map, the causal theory its per-position map.
        """
        if self.output_projection:
            attention = C.serial(attention, C.output_projection(self.sigma_o2))
        ff = C.mlp(self.sigma_w2, self.sigma_b2, self.activation, sigma_w2_out=self.sigma_w2_out)
        if self.norm == "post":
            return C.serial(C.residual(self.alpha_sa, attention), C.layer_norm(),
                            C.residual(self.alpha_mlp, ff), C.layer_norm())
        if self.norm == "pre":
            return C.serial(C.residual(self.alpha_sa, C.serial(C.layer_norm(), attention)),
                            C.residual(self.alpha_mlp, C.serial(C.layer_norm(), ff)))
        return C.serial(C.residual(self.alpha_sa, attention), C.residual(self.alpha_mlp, ff))

    def __repr__(self):
        fields = ", ".join(f"{f.name}={getattr(self, f.name)!r}" for f in dataclasses.fields(self))
        return f"Architecture({fields})"
