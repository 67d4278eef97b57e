"""One table pairing each theory map with its simulated torch component.

:data:`REGISTRY` is keyed by component name. Each entry holds

* ``theory_map``: the function of :mod:`remprop.theory` that predicts ``(q, p) -> (q', p')``;
* ``torch_function``: the torch function of :mod:`remprop.validation.layers` that
  :class:`~remprop.validation.simulator.SimulatedStack` calls for this component (the
  simulator looks its components up here, so theory and simulation cannot drift apart);
* ``theory(q, p, **params)`` and ``simulate(x, generator, **params)``: the two sides on
  the same parameters, ready to be compared on synthetic tokens.

The skip entry needs a branch: it uses a random dense layer, the simplest branch whose
weights are independent of its input (``alpha x + W x + b``). The output projection entry
is the bias-free dense layer ``x W_O^T`` (theory: ``dense_map(q, p, sigma_o2, 0)``). The
MLP entry takes the second layer's ``sigma_w2_out`` (``W2 ~ N(0, sigma_w2_out / d_ff)``,
default None = ``sigma_w2``) and the hidden width ``d_ff`` (default d).

Reference: Giorlandino & Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from remprop.theory import (
    dense_map,
    gain_controlled_attention_map,
    layernorm_map,
    mlp_map,
    skip_map,
    softmax_attention_map,
)
from remprop.theory.checks import check_choice
from remprop.theory.rem.heads import effective_beta

from . import layers

__all__ = ["ComponentPair", "REGISTRY"]


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


def _attention_pair(name, theory_map, torch_function):
    def theory(q, p, beta, sigma_v2, sigma_b2, heads, causal, qk_scaling):
        return theory_map(q, p, effective_beta(beta, heads, qk_scaling), sigma_v2, sigma_b2)

    def simulate(x, gen, mask, beta, sigma_v2, sigma_b2, heads, causal, qk_scaling):
        weights = layers.draw_attention_weights(gen, x.shape[-1], beta, x.shape[-2], sigma_v2, sigma_b2,
                                                dtype=x.dtype, device=x.device, heads=heads, qk_scaling=qk_scaling)
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


def _layer_norm_theory(q, p):
    return layernorm_map(q, p)


def _layer_norm_simulate(x, gen, mask):
    return layers.layer_norm(x)


def _mlp_theory(q, p, sigma_w2, sigma_b2, activation, d_ff, sigma_w2_out):
    # d_ff enters the theory only through sigma_w2_out (W2's variance is over d_ff)
    return mlp_map(q, p, sigma_w2, sigma_b2, activation, sigma_w2_out=sigma_w2_out)


def _mlp_simulate(x, gen, mask, sigma_w2, sigma_b2, activation, d_ff, sigma_w2_out):
    check_choice("activation", activation, tuple(layers.ACTIVATION_FUNCTIONS))
    width = x.shape[-1]
    weights = layers.draw_mlp_weights(gen, width, d_ff or width, sigma_w2, sigma_b2, dtype=x.dtype, device=x.device,
                                      sigma_w2_out=sigma_w2_out)
    return layers.mlp(x, weights, activation)


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
    "layer_norm": ComponentPair("layer_norm", layernorm_map, layers.layer_norm, {},
                                _layer_norm_theory, _layer_norm_simulate),
    "mlp": ComponentPair("mlp", mlp_map, layers.mlp,
                         dict(sigma_w2=0.2, sigma_b2=4e-4, activation="relu", d_ff=None, sigma_w2_out=None),
                         _mlp_theory, _mlp_simulate),
    # theory_map dense_map: the projection is a dense layer without bias (sigma_b2 = 0)
    "output_projection": ComponentPair("output_projection", dense_map, layers.output_projection,
                                       dict(sigma_o2=1.0), _output_projection_theory,
                                       _output_projection_simulate),
}
