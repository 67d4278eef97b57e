"""How the simulator runs a block tree in torch, and the stand-alone pairs of each component.

A block is the tree of :meth:`remprop.theory.Architecture.block` (docs/theory.md section 5; the
block order exists once, in :func:`remprop.theory.components.block.block`). Every component
carries its torch face (``torch_weights``, ``torch_forward``, ``weight_slot``, ``draw_rank``,
:mod:`remprop.theory.components`), written with tensor methods and the torch functions of
:mod:`remprop.validation.layers`, which it reaches through the :class:`BlockContext` (theory never
imports torch). :func:`draw_block_weights` walks the tree to draw a block's weights,
:func:`simulate_component` runs a tree: no table of components and no switch on their names, so
a component defined anywhere runs in the torch stack through the tree that holds it.

:data:`REGISTRY` pairs each built-in component's theory map with its torch function on
synthetic tokens, stand-alone (``theory(q, p, **params)``, ``simulate(x, generator,
**params)``), for the component tests and :func:`~remprop.validation.comparison.attention_sweep`.
The skip entry needs a branch: it uses a random dense layer, the simplest branch whose
weights are independent of its input (``alpha x + W x + b``). The output projection entry
is the bias-free dense layer ``x W_O^T`` (theory: ``dense_map(q, p, sigma_o2, 0)``). The
MLP entry takes the second layer's ``sigma_w2_out`` and the hidden width ``d_ff`` (default
d); the gated MLP entry the same, for ``W_down (phi(W_gate x) * W_up x)``. The parallel entry
runs two random dense branches on the same input and adds them to the skip.

Reference: Giorlandino & Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from remprop.theory import (
    dense_map,
    gain_controlled_attention_map,
    gated_mlp_map,
    layernorm_map,
    mlp_map,
    rmsnorm_map,
    skip_map,
    softmax_attention_map,
)
from remprop.theory.checks import check_choice
from remprop.theory.components import Component
from remprop.theory.rem import effective_beta

from . import layers

__all__ = ["ComponentPair", "REGISTRY", "BlockContext", "BlockSizes", "simulate_component", "draw_block_weights"]


@dataclass(frozen=True)
class ComponentPair:
    """A theory map and its simulated counterpart.

    Attributes
    ----------
    name : str
        Registry key.
    theory_map : callable
        The :mod:`remprop.theory` map.
    torch_function : callable
        The :mod:`remprop.validation.layers` function the simulator uses.
    defaults : dict
        Parameters of both sides and their default values.
    """

    name: str
    theory_map: Callable
    torch_function: Callable
    defaults: dict
    _theory: Callable = field(repr=False)
    _simulate: Callable = field(repr=False)

    def _parameters(self, params):
        unknown = sorted(set(params) - set(self.defaults))
        if unknown:
            raise ValueError(f"{unknown[0]} is not a parameter of {self.name} "
                             f"(parameters: {', '.join(self.defaults)})")
        return {**self.defaults, **params}

    def theory(self, q, p, **params):
        """Theory prediction ``(q', p')`` for inputs of order parameters ``(q, p)``."""
        return self._theory(q, p, **self._parameters(params))

    def simulate(self, x, generator: torch.Generator, mask=None, **params):
        """Draw this component's weights from ``generator`` and apply it to ``x`` (batch, T, d)."""
        return self._simulate(x, generator, mask, **self._parameters(params))


@dataclass
class BlockContext:
    """What the torch faces of one block's components read besides their input.

    Attributes
    ----------
    weights : remprop.validation.layers.BlockWeights or None
        The block's drawn weights (None while drawing them).
    heads : int
        Attention heads H.
    mask : Tensor of bool, shape (batch, T), optional
        True for real tokens.
    causal : bool or int
        Causal attention mask (an integer: a sliding window of that many keys).
    layer_norm_eps : float
        The epsilon of the norm (LayerNorm or RMSNorm).
    probs : Tensor, shape (batch, H, T, T), or None
        Set by the attention component: its probabilities (None where it ran fused).
    need_probs : bool
        Whether the caller reads ``probs``; False lets attention run fused
        (:func:`remprop.validation.layers.fused_attention`).
    rotate : callable or None
        Rotary positions: applied to the queries and keys of softmax attention
        (:func:`remprop.validation.rope.rotary`); None without RoPE.
    qk_norm : remprop.validation.layers.QKNorm or None
        QK-norm of the attention (None: none).
    logit_softcap : float or None
        Attention-logit soft-capping c (None: none).
    sizes : BlockSizes or None
        What drawing the weights needs (:func:`draw_block_weights`); None to run drawn weights.
    ops : module
        The torch functions the components call (:mod:`remprop.validation.layers`).
    """

    weights: layers.BlockWeights | None = None
    heads: int = 1
    mask: torch.Tensor | None = None
    causal: bool | int = False
    layer_norm_eps: float = 1e-12
    probs: torch.Tensor | None = None
    need_probs: bool = True
    rotate: Callable | None = None
    qk_norm: layers.QKNorm | None = None
    logit_softcap: float | None = None
    sizes: "BlockSizes | None" = None
    ops: object = layers

    def weights_of(self, component: Component):
        """The block's weights of ``component`` (its ``weight_slot``)."""
        return self.weights.slot(component.weight_slot)

    def attend(self, forward, x, weights, rotary=True):
        """Run an attention function of :mod:`~remprop.validation.layers` with the block's heads,
        mask, causal mask, QK-norm and soft-capping (and its rotation when ``rotary``); keeps the
        probabilities in ``probs`` (None where ``need_probs`` is False and the layer ran fused)."""
        extra = {"rotate": self.rotate} if rotary and self.rotate is not None else {}
        out, self.probs = forward(x, weights, heads=self.heads, mask=self.mask, causal=self.causal,
                                  qk_norm=self.qk_norm, logit_softcap=self.logit_softcap,
                                  need_weights=self.need_probs, **extra)
        return out

    # what the components' torch_weights read while drawing (sizes must be set)
    generator = property(lambda self: self.sizes.generator)
    width = property(lambda self: self.sizes.width)
    d_ff = property(lambda self: self.sizes.d_ff)
    dtype = property(lambda self: self.sizes.dtype)
    device = property(lambda self: self.sizes.device)

    def draw_attention(self, sigma_v2, sigma_b2):
        """Attention weights at the model's query/key scale (``sizes.beta``, the heads' convention)."""
        z = self.sizes
        return self.ops.draw_attention_weights(z.generator, z.width, z.beta, z.seq_len, sigma_v2, sigma_b2,
                                               dtype=z.dtype, device=z.device,
                                               layout=layers.HeadLayout(self.heads, z.qk_scaling, z.kv_heads))


@dataclass(frozen=True)
class BlockSizes:
    """What the components of a block draw their weights with: the generator of the block's stream,
    the widths, the model's query/key scale and the simulated T."""

    generator: torch.Generator
    width: int
    d_ff: int
    dtype: torch.dtype
    device: torch.device
    beta: float
    seq_len: int
    qk_scaling: str = "model"
    kv_heads: int | None = None


def simulate_component(component: Component, x, context: BlockContext):
    """Run a tree of theory components in torch, each through its own torch face.

    Parameters
    ----------
    component : remprop.theory.components.Component
        E.g. a block of :meth:`remprop.theory.Architecture.block` (docs/theory.md section 5).
    x : Tensor, shape (batch, T, d)
    context : BlockContext
        The block's weights and run settings; ``context.probs`` receives the attention
        probabilities.

    Returns
    -------
    Tensor, shape (batch, T, d)
    """
    return component.torch_forward(x, context)


def draw_block_weights(block: Component, context: BlockContext) -> layers.BlockWeights:
    """Draw the weights of every component of ``block`` that has some, through ``context.sizes``.

    The components are visited in tree order and drawn in the order of their ``draw_rank``
    (attention, MLP, output projection, then any other), each into its ``weight_slot`` of the
    returned :class:`~remprop.validation.layers.BlockWeights`.
    """
    found, stack = [], [block]
    while stack:
        component = stack.pop()
        if component.weight_slot is not None:
            found.append(component)
        stack.extend(reversed(component.children))
    drawn = {}
    for component in sorted(found, key=lambda c: c.draw_rank):
        if component.weight_slot in drawn:
            raise ValueError(f"two components of the block draw into the slot {component.weight_slot!r}")
        drawn[component.weight_slot] = component.torch_weights(context)
    return layers.BlockWeights(attention=drawn.pop("attention", None), mlp=drawn.pop("mlp", None),
                               output=drawn.pop("output", None), extra=drawn)


def _attention_pair(name, theory_map, torch_function):
    def theory(q, p, beta, sigma_v2, sigma_b2, heads, causal, qk_scaling):
        return theory_map(effective_beta(beta, heads, qk_scaling), q=q, p=p, sigma_v2=sigma_v2, sigma_b2=sigma_b2)

    def simulate(x, gen, mask, beta, sigma_v2, sigma_b2, heads, causal, qk_scaling):
        weights = layers.draw_attention_weights(gen, x.shape[-1], beta, x.shape[-2], sigma_v2, sigma_b2,
                                                dtype=x.dtype, device=x.device,
                                                layout=layers.HeadLayout(heads, qk_scaling))
        return torch_function(x, weights, heads=heads, mask=mask, causal=causal)[0]

    return ComponentPair(name, theory_map, torch_function,
                         dict(beta=0.5, sigma_v2=0.2, sigma_b2=4e-4, heads=1, causal=False, qk_scaling="model"),
                         theory, simulate)




def _skip_theory(q, p, alpha, sigma_w2, sigma_b2):
    q_branch, p_branch = dense_map(q, p, sigma_w2, sigma_b2)
    return skip_map(q_branch, p_branch, q, p, alpha)


def _skip_simulate(x, gen, mask, alpha, sigma_w2, sigma_b2):
    weights = layers.draw_dense_weights(gen, x.shape[-1], sigma_w2, sigma_b2, dtype=x.dtype, device=x.device)
    return layers.skip(x, layers.dense(x, weights), alpha)




def _parallel_theory(q, p, alpha, sigma_w2, sigma_b2):
    q_branch, p_branch = dense_map(q, p, sigma_w2, sigma_b2)  # two independent branches: their overlaps add
    return skip_map(2.0 * q_branch, 2.0 * p_branch, q, p, alpha)


def _parallel_simulate(x, gen, mask, alpha, sigma_w2, sigma_b2):
    outputs = [layers.dense(x, layers.draw_dense_weights(gen, x.shape[-1], sigma_w2, sigma_b2, dtype=x.dtype,
                                                         device=x.device)) for _ in range(2)]
    return layers.parallel(x, outputs, alpha)




def _norm_pair(name, theory_map, torch_function):
    def theory(q, p):
        return theory_map(q, p)

    def simulate(x, gen, mask):
        return torch_function(x)

    return ComponentPair(name, theory_map, torch_function, {}, theory, simulate)




def _mlp_pair(name, theory_map, torch_function, draw, activation):
    def theory(q, p, sigma_w2, sigma_b2, activation, d_ff, sigma_w2_out):
        # d_ff enters the theory only through sigma_w2_out (the last layer's variance is over d_ff)
        return theory_map(q, p, sigma_w2, sigma_b2, activation, sigma_w2_out=sigma_w2_out)

    def simulate(x, gen, mask, sigma_w2, sigma_b2, activation, d_ff, sigma_w2_out):
        check_choice("activation", activation, tuple(layers.ACTIVATION_FUNCTIONS))
        width = x.shape[-1]
        weights = draw(gen, width, d_ff or width, sigma_w2, sigma_b2, dtype=x.dtype, device=x.device,
                       sigma_w2_out=sigma_w2_out)
        return torch_function(x, weights, activation)

    return ComponentPair(name, theory_map, torch_function,
                         dict(sigma_w2=0.2, sigma_b2=4e-4, activation=activation, d_ff=None, sigma_w2_out=None),
                         theory, simulate)


def _output_projection_theory(q, p, sigma_o2):
    return dense_map(q, p, sigma_o2, 0.0)


def _output_projection_simulate(x, gen, mask, sigma_o2):
    weight = layers.draw_output_projection(gen, x.shape[-1], sigma_o2, dtype=x.dtype, device=x.device)
    return layers.output_projection(x, weight)


#: Component name -> :class:`ComponentPair`.
REGISTRY = {
    "softmax_attention": _attention_pair("softmax_attention", softmax_attention_map, layers.softmax_attention),
    "gain_controlled_attention": _attention_pair("gain_controlled_attention", gain_controlled_attention_map,
                                                 layers.gain_controlled_attention),
    "skip": ComponentPair("skip", skip_map, layers.skip, dict(alpha=1.0, sigma_w2=0.2, sigma_b2=4e-4),
                          _skip_theory, _skip_simulate),
    # theory_map skip_map: the branches' overlaps add, then the skip (docs/theory.md section 19)
    "parallel": ComponentPair("parallel", skip_map, layers.parallel, dict(alpha=1.0, sigma_w2=0.2, sigma_b2=4e-4),
                              _parallel_theory, _parallel_simulate),
    "layer_norm": _norm_pair("layer_norm", layernorm_map, layers.layer_norm),
    "rms_norm": _norm_pair("rms_norm", rmsnorm_map, layers.rms_norm),
    "mlp": _mlp_pair("mlp", mlp_map, layers.mlp, layers.draw_mlp_weights, "relu"),
    "gated_mlp": _mlp_pair("gated_mlp", gated_mlp_map, layers.gated_mlp, layers.draw_gated_mlp_weights, "silu"),
    # theory_map dense_map: the projection is a dense layer without bias (sigma_b2 = 0)
    "output_projection": ComponentPair("output_projection", dense_map, layers.output_projection,
                                       dict(sigma_o2=1.0), _output_projection_theory,
                                       _output_projection_simulate),
}
