"""Block assembly: the one description of a transformer block as a tree of components.

:func:`block` composes the attention map of an architecture with its output projection, MLP,
skips and norms, in the order of the norm placement (docs/theory.md section 5):

* ``norm="post"`` (BERT): ``x <- N(alpha_sa x + SA(x)); x <- N(alpha_mlp x + MLP(x))``
* ``norm="pre"`` (GPT-2): ``x <- alpha_sa x + SA(N(x)); x <- alpha_mlp x + MLP(N(x))``
* ``norm="none"``: ``x <- alpha_sa x + SA(x); x <- alpha_mlp x + MLP(x)``
* ``block_form="parallel"`` (pre-norm only): ``x <- alpha_sa x + SA(N(x)) + MLP(N(x))``

with ``N`` LayerNorm, RMSNorm or DyT (``norm_type``), ``branch_norm`` a norm on each branch's output
(docs/theory.md section 19). Everything downstream follows this tree: the numpy maps call it, the
numba kernels are composed from it, the torch stack runs it component by component and the sympy
expansion walks it. The choices it owns are the enums here, which the rest of the library asks
instead of comparing strings.

References
----------
Giorlandino & Goldt, arXiv 2505.24333 (post-LN, pre-LN); Wang & Komatsuzaki 2021 (parallel blocks).
"""
from __future__ import annotations

import numpy as np

from ..choices import Choice
from .base import serial
from .dense import output_projection
from .dyt import DyT
from .gated_mlp import gated_mlp
from .layer_norm import LayerNorm
from .mlp import mlp
from .residual import parallel, residual
from .rms_norm import RMSNorm

__all__ = ["NormPlacement", "NormType", "NORM_COMPONENTS", "MLPForm", "BlockForm", "block", "final_norm",
           "stack_output", "attention_input"]


class NormPlacement(Choice):
    """Where the norms sit in a block (``Architecture.norm``)."""

    POST = "post"
    PRE = "pre"
    NONE = "none"

    @property
    def normalises_stream(self) -> bool:
        """A norm after every sub-block (post-LN): the stream is held at ``q = 1``."""
        return self is NormPlacement.POST

    @property
    def normalises_branch_inputs(self) -> bool:
        """A norm before every branch (pre-LN): the branches read ``(1, p / q)``."""
        return self is NormPlacement.PRE

    @property
    def has_norm(self) -> bool:
        """Any norm in the block (post- or pre-LN): without one the stream's scale is free."""
        return self is not NormPlacement.NONE

    @property
    def beta_critical_rule(self) -> str:
        """Which layer's critical beta decides entropy collapse (docs/theory.md section 6):
        post-LN holds the attention input at ``q = 1`` and the cosine only grows, so the first
        layer has the smallest beta_c; elsewhere the stream's state changes layer by layer."""
        return "first attention layer" if self.normalises_stream else "smallest over layers"

    @property
    def other(self) -> "NormPlacement":
        """The placement a diagnosis offers instead: pre-LN for post-LN, post-LN otherwise."""
        return NormPlacement.PRE if self.normalises_stream else NormPlacement.POST

    def label(self, norm_type: "NormType") -> str:
        """``post-LN``, ``pre-RMS``, ``no-LN``: how reports name a block order."""
        return f"{self.value}-{norm_type.short}" if self.has_norm else "no-LN"


class NormType(Choice):
    """Which norm sits at the placement (``Architecture.norm_type``, docs/theory.md section 14).

    Each member is registered with the component class that holds all its faces
    (:data:`NORM_COMPONENTS`); a new norm is its module and one member and entry here.
    """

    LAYER = "layer"
    RMS = "rms"
    DYT = "dyt"

    @property
    def kind(self):
        """The norm's component class (:data:`NORM_COMPONENTS`)."""
        return NORM_COMPONENTS[self.value]

    def component(self, arch=None):
        """A new component of this norm, its parameters read from ``arch`` (DyT's ``dyt_alpha0``)."""
        return self.kind.of_architecture(arch)

    @property
    def scale_free(self) -> bool:
        """Whether the norm's output forgets its input's scale (LayerNorm, RMSNorm: ``(1, p / q)``);
        DyT's does not, so a post-norm stream is not held at ``q = 1``."""
        return self.kind.scale_free

    @property
    def short(self) -> str:
        """``LN``, ``RMS`` or ``DyT``, as in ``pre-RMS``."""
        return self.kind.short

    @property
    def title(self) -> str:
        """``LayerNorm``, ``RMSNorm`` or ``DyT``."""
        return self.kind.title


#: Spelling of a :class:`NormType` -> its component class, which holds every face of the norm and
#: builds it from an architecture (``of_architecture``).
NORM_COMPONENTS = {"layer": LayerNorm, "rms": RMSNorm, "dyt": DyT}


class MLPForm(Choice):
    """Dense ``W2 phi(W1 x)`` or gated ``W_down (phi(W_gate x) * W_up x)`` (``Architecture.mlp``)."""

    DENSE = "dense"
    GATED = "gated"

    @property
    def gated(self) -> bool:
        """Whether the hidden units are a gate times an up projection."""
        return self is MLPForm.GATED

    def component(self, sigma_w2, sigma_b2, activation, sigma_w2_out=None):
        """The MLP component of this form."""
        make = gated_mlp if self.gated else mlp
        return make(sigma_w2, sigma_b2, activation, sigma_w2_out=sigma_w2_out)

    def describe(self, activation) -> str:
        """``gated silu MLP`` or ``relu MLP``."""
        return f"gated {activation} MLP" if self.gated else f"{activation} MLP"


class BlockForm(Choice):
    """Branches one after the other, or both reading the block input (``Architecture.block_form``)."""

    SEQUENTIAL = "sequential"
    PARALLEL = "parallel"

    @property
    def parallel(self) -> bool:
        """Attention and MLP read the same normalised input and their outputs add."""
        return self is BlockForm.PARALLEL


def block(arch, attention):
    """The block of ``arch`` around the attention component ``attention``.

    Adds the output projection (when ``arch.sigma_o2`` is set), the MLP (``arch.mlp``), the skips
    and the norms (``arch.norm_type``) in the order of ``arch.norm`` and ``arch.block_form``, with
    a norm on each branch's output when ``arch.branch_norm`` (module docstring).
    :meth:`Architecture.block <remprop.theory.Architecture.block>` passes the softmax or
    gain-controlled attention map, the causal theory its per-position map.

    Parameters
    ----------
    arch : remprop.theory.Architecture
        A validated architecture (its fields are trusted).
    attention : Component
        The attention map.

    Returns
    -------
    Component
    """
    if arch.output_projection:
        attention = serial(attention, output_projection(arch.sigma_o2))
    ff = arch.mlp.component(arch.sigma_w2, arch.sigma_b2, arch.activation, sigma_w2_out=arch.sigma_w2_out)

    def norm():
        return arch.norm_type.component(arch)

    def branch(f):
        """A branch: norm before it (pre-LN) and after it (``branch_norm``)."""
        layers = ((norm(),) if arch.norm.normalises_branch_inputs else ()) + (f,) + \
            ((norm(),) if arch.branch_norm else ())
        return layers[0] if len(layers) == 1 else serial(*layers)

    if arch.block_form.parallel:  # pre-LN only (checked by the architecture)
        return parallel(arch.alpha_sa, branch(attention), branch(ff))
    if arch.norm.normalises_stream:
        return serial(residual(arch.alpha_sa, branch(attention)), norm(),
                      residual(arch.alpha_mlp, branch(ff)), norm())
    return serial(residual(arch.alpha_sa, branch(attention)), residual(arch.alpha_mlp, branch(ff)))


def final_norm(arch):
    """The norm after the last block (a component) with ``arch.final_norm``, else None."""
    return arch.norm_type.component(arch) if arch.final_norm else None


def stack_output(arch, q, p):
    """The stack's output state from the last block's ``(q, p)``: the final norm's map with
    ``arch.final_norm`` (LayerNorm's and RMSNorm's ``(1, p / q)``, the cosine unchanged), ``(q, p)``
    otherwise. Broadcasts."""
    q = np.asarray(q, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    if not arch.final_norm:
        return q, p
    with np.errstate(divide="ignore", invalid="ignore"):
        return final_norm(arch).apply(q, p)


def attention_input(arch, q, p):
    """Order parameters that the attention of a block sees, given the block input ``(q, p)``:
    the norm's map for pre-LN (``N(x) -> (1, p / q)`` for LayerNorm and RMSNorm), the block input
    itself otherwise (docs/theory.md sections 5 and 14). Broadcasts; no validation."""
    q = np.asarray(q, dtype=np.float64)
    p = np.asarray(p, dtype=np.float64)
    if arch.norm.normalises_branch_inputs:
        with np.errstate(divide="ignore", invalid="ignore"):
            return arch.norm_type.component(arch).apply(q, p)
    return q, p
