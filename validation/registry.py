"""One table pairing each theory component with its simulated torch component.

:data:`REGISTRY` is keyed by component name. Each entry holds

* ``theory_map``: the function of :mod:`remprop.theory` that predicts ``(q, p) -> (q', p')``;
* ``torch_function``: the torch function of :mod:`remprop.validation.layers` that runs
  the component;
* ``component``: the name of the :class:`remprop.theory.components.Component` it
  simulates, so that a block composed by :meth:`remprop.theory.Architecture.block` can be
  run in torch node by node (:func:`simulate_component`; the simulated stacks do, so the
  block order is written once, in ``Architecture.compose``, docs/theory.md section 5);
* ``theory(q, p, **params)`` and ``simulate(x, generator, **params)``: the two sides on
  the same parameters, ready to be compared on synthetic tokens.

The skip entry needs a branch: it uses a random dense layer, the simplest branch whose
weights are independent of its input (``alpha x + W x + b``). The output projection entry
is the bias-free dense layer ``x W_O^T`` (theory: ``dense_map(q, p, sigma_o2, 0)``). The
MLP entry takes the second layer's ``sigma_w2_out`` (``W2 ~ N(0, sigma_w2_out / d_ff)``,
default None = ``sigma_w2``) and the hidden width ``d_ff`` (default d); the gated MLP entry
the same, for ``W_down (phi(W_gate x) * W_up x)``. LayerNorm and RMSNorm have an entry each
(the same map ``(1, p / q)``, different torch functions; docs/theory.md section 14). The
parallel entry runs the branches of ``C.parallel`` on the same input and adds them to the
skip (its stand-alone sides: two random dense branches). Attention reads the block's
grouped key/value heads (the weights' shapes), QK-norm and logit soft-capping from the
:class:`BlockContext` (docs/theory.md section 19).

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

__all__ = ["ComponentPair", "REGISTRY", "BlockContext", "pair_for", "simulate_component"]


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
    component : str
        ``Component.name`` of the theory component this entry runs in a block
        (``"residual"`` for the skip, ``"dense"`` for the bias-free output projection).
    """

    name: str
    theory_map: Callable
    torch_function: Callable
    defaults: dict
    _theory: Callable = field(repr=False)
    _simulate: Callable = field(repr=False)
    component: str
    _forward: Callable = field(repr=False)

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

    def forward(self, component: Component, x, context: "BlockContext"):
        """Run ``torch_function`` as the theory ``component`` of a block, with the block's weights."""
        return self._forward(self.torch_function, component, x, context)


@dataclass
class BlockContext:
    """What the torch components of one block read besides their input.

    Attributes
    ----------
    weights : remprop.validation.layers.BlockWeights
        The block's drawn weights.
    heads : int
        Attention heads H.
    mask : Tensor of bool, shape (batch, T), optional
        True for real tokens.
    causal : bool
        Causal attention mask.
    layer_norm_eps : float
        The epsilon of the norm (LayerNorm or RMSNorm).
    probs : Tensor, shape (batch, H, T, T), or None
        Set by the attention component: its probabilities.
    rotate : callable or None
        Rotary positions: applied to the queries and keys of softmax attention
        (:func:`remprop.validation.rope.rotary`); None without RoPE.
    qk_norm : remprop.validation.layers.QKNorm or None
        QK-norm of the attention (None: none).
    logit_softcap : float or None
        Attention-logit soft-capping c (None: none).
    """

    weights: layers.BlockWeights
    heads: int = 1
    mask: torch.Tensor | None = None
    causal: bool = False
    layer_norm_eps: float = 1e-12
    probs: torch.Tensor | None = None
    rotate: Callable | None = None
    qk_norm: layers.QKNorm | None = None
    logit_softcap: float | None = None


def pair_for(component: Component) -> ComponentPair:
    """The :data:`REGISTRY` entry that simulates a theory component (by ``component.name``)."""
    for pair in REGISTRY.values():
        if pair.component == component.name:
            return pair
    raise ValueError(f"no torch counterpart in REGISTRY for the theory component {component!r}")


def simulate_component(component: Component, x, context: BlockContext):
    """Run a tree of theory components in torch: ``serial`` in order, every other node
    through its :data:`REGISTRY` entry (:func:`pair_for`).

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
    if component.name == "serial":
        for layer in component.layers:
            x = simulate_component(layer, x, context)
        return x
    return pair_for(component).forward(component, x, context)


def _attention_pair(name, theory_map, torch_function):
    def theory(q, p, beta, sigma_v2, sigma_b2, heads, causal, qk_scaling):
        return theory_map(q, p, effective_beta(beta, heads, qk_scaling), sigma_v2, sigma_b2)

    def simulate(x, gen, mask, beta, sigma_v2, sigma_b2, heads, causal, qk_scaling):
        weights = layers.draw_attention_weights(gen, x.shape[-1], beta, x.shape[-2], sigma_v2, sigma_b2,
                                                dtype=x.dtype, device=x.device, heads=heads, qk_scaling=qk_scaling)
        return torch_function(x, weights, heads=heads, mask=mask, causal=causal)[0]

    return ComponentPair(name, theory_map, torch_function,
                         dict(beta=0.5, sigma_v2=0.2, sigma_b2=4e-4, heads=1, causal=False, qk_scaling="model"),
                         theory, simulate, name, _attention_forward)


def _attention_forward(torch_function, component, x, context):
    rotary = {} if context.rotate is None else {"rotate": context.rotate}  # softmax attention's hook
    out, context.probs = torch_function(x, context.weights.attention, heads=context.heads, mask=context.mask,
                                        causal=context.causal, qk_norm=context.qk_norm,
                                        logit_softcap=context.logit_softcap, **rotary)
    return out


def _skip_theory(q, p, alpha, sigma_w2, sigma_b2):
    q_branch, p_branch = dense_map(q, p, sigma_w2, sigma_b2)
    return skip_map(q_branch, p_branch, q, p, alpha)


def _skip_simulate(x, gen, mask, alpha, sigma_w2, sigma_b2):
    weights = layers.draw_dense_weights(gen, x.shape[-1], sigma_w2, sigma_b2, dtype=x.dtype, device=x.device)
    return layers.skip(x, layers.dense(x, weights), alpha)


def _skip_forward(torch_function, component, x, context):
    return torch_function(x, simulate_component(component.branch, x, context), float(component.alpha))


def _parallel_theory(q, p, alpha, sigma_w2, sigma_b2):
    q_branch, p_branch = dense_map(q, p, sigma_w2, sigma_b2)  # two independent branches: their overlaps add
    return skip_map(2.0 * q_branch, 2.0 * p_branch, q, p, alpha)


def _parallel_simulate(x, gen, mask, alpha, sigma_w2, sigma_b2):
    outputs = [layers.dense(x, layers.draw_dense_weights(gen, x.shape[-1], sigma_w2, sigma_b2, dtype=x.dtype,
                                                         device=x.device)) for _ in range(2)]
    return layers.parallel(x, outputs, alpha)


def _parallel_forward(torch_function, component, x, context):
    outputs = [simulate_component(branch, x, context) for branch in component.branches]
    return torch_function(x, outputs, float(component.alpha))


def _norm_pair(name, theory_map, torch_function):
    def theory(q, p):
        return theory_map(q, p)

    def simulate(x, gen, mask):
        return torch_function(x)

    return ComponentPair(name, theory_map, torch_function, {}, theory, simulate, name, _norm_forward)


def _norm_forward(torch_function, component, x, context):
    return torch_function(x, context.layer_norm_eps)


def _mlp_pair(name, theory_map, torch_function, draw, weights_type, activation):
    def theory(q, p, sigma_w2, sigma_b2, activation, d_ff, sigma_w2_out):
        # d_ff enters the theory only through sigma_w2_out (the last layer's variance is over d_ff)
        return theory_map(q, p, sigma_w2, sigma_b2, activation, sigma_w2_out=sigma_w2_out)

    def simulate(x, gen, mask, sigma_w2, sigma_b2, activation, d_ff, sigma_w2_out):
        check_choice("activation", activation, tuple(layers.ACTIVATION_FUNCTIONS))
        width = x.shape[-1]
        weights = draw(gen, width, d_ff or width, sigma_w2, sigma_b2, dtype=x.dtype, device=x.device,
                       sigma_w2_out=sigma_w2_out)
        return torch_function(x, weights, activation)

    def forward(torch_function, component, x, context):
        if not isinstance(context.weights.mlp, weights_type):
            raise ValueError(f"the block's {component.name} needs {weights_type.__name__}, the block weights "
                             f"hold {type(context.weights.mlp).__name__}")
        return torch_function(x, context.weights.mlp, component.activation)

    return ComponentPair(name, theory_map, torch_function,
                         dict(sigma_w2=0.2, sigma_b2=4e-4, activation=activation, d_ff=None, sigma_w2_out=None),
                         theory, simulate, name, forward)


def _output_projection_theory(q, p, sigma_o2):
    return dense_map(q, p, sigma_o2, 0.0)


def _output_projection_simulate(x, gen, mask, sigma_o2):
    weight = layers.draw_output_projection(gen, x.shape[-1], sigma_o2, dtype=x.dtype, device=x.device)
    return layers.output_projection(x, weight)


def _output_projection_forward(torch_function, component, x, context):
    if float(component.sigma_b2) != 0.0:
        raise ValueError(f"a dense layer with a bias (sigma_b2 = {float(component.sigma_b2)}) is not the "
                         "output projection, and a block has no other dense layer to simulate")
    if context.weights.output is None:
        raise ValueError("the architecture has an output projection (sigma_o2) but the block weights "
                         "hold none (BlockWeights.output is None)")
    return torch_function(x, context.weights.output)


#: Component name -> :class:`ComponentPair`.
REGISTRY = {
    "softmax_attention": _attention_pair("softmax_attention", softmax_attention_map, layers.softmax_attention),
    "gain_controlled_attention": _attention_pair("gain_controlled_attention", gain_controlled_attention_map,
                                                 layers.gain_controlled_attention),
    "skip": ComponentPair("skip", skip_map, layers.skip, dict(alpha=1.0, sigma_w2=0.2, sigma_b2=4e-4),
                          _skip_theory, _skip_simulate, "residual", _skip_forward),
    # theory_map skip_map: the branches' overlaps add, then the skip (docs/theory.md section 19)
    "parallel": ComponentPair("parallel", skip_map, layers.parallel, dict(alpha=1.0, sigma_w2=0.2, sigma_b2=4e-4),
                              _parallel_theory, _parallel_simulate, "parallel", _parallel_forward),
    "layer_norm": _norm_pair("layer_norm", layernorm_map, layers.layer_norm),
    "rms_norm": _norm_pair("rms_norm", rmsnorm_map, layers.rms_norm),
    "mlp": _mlp_pair("mlp", mlp_map, layers.mlp, layers.draw_mlp_weights, layers.MLPWeights, "relu"),
    "gated_mlp": _mlp_pair("gated_mlp", gated_mlp_map, layers.gated_mlp, layers.draw_gated_mlp_weights,
                           layers.GatedMLPWeights, "silu"),
    # theory_map dense_map: the projection is a dense layer without bias (sigma_b2 = 0)
    "output_projection": ComponentPair("output_projection", dense_map, layers.output_projection,
                                       dict(sigma_o2=1.0), _output_projection_theory,
                                       _output_projection_simulate, "dense", _output_projection_forward),
}
