"""The two-layer MLP ``W2 phi(W1 x + b1) + b2`` as a component (its map: :func:`~remprop.theory.mlp_map`)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba.extending import register_jitable

from ..activations import activation_spec, dense_core, moments_array
from .base import Component, parameter, rescaled_bias

__all__ = ["MLP", "mlp", "own_hidden_core"]


@register_jitable
def own_hidden_core(q1, p1, m2, m11):
    """Second moments of a dense MLP's hidden units: phi's own ``(m2, m11)``."""
    return m2, m11


@dataclass(repr=False)
class MLP(Component):
    """The two-layer MLP (:func:`mlp`)."""

    sigma_w2: np.ndarray
    sigma_b2: np.ndarray
    activation: str = "relu"
    sigma_w2_out: np.ndarray = None
    name = "mlp"

    def apply(self, q, p):
        code = activation_spec(self.activation).code
        return self._two_layers(q, p, lambda q1, p1: moments_array(code, q1, p1), lambda value: value)

    def gram(self, walker, g):
        return walker.mlp(self, g)

    weight_slot = "mlp"
    draw_rank = 1

    def torch_weights(self, sim):
        return self.torch_functions(sim)[0](
            sim.generator, sim.width, sim.d_ff, float(self.sigma_w2), float(self.sigma_b2), dtype=sim.dtype,
            device=sim.device, sigma_w2_out=None if self.sigma_w2_out is None else float(self.sigma_w2_out))

    def torch_forward(self, x, sim):
        return self.torch_functions(sim)[1](x, sim.weights_of(self), self.activation)

    def torch_functions(self, sim):
        """The draw and the forward of this MLP form in ``sim.ops``."""
        return sim.ops.draw_mlp_weights, sim.ops.mlp

    def symbolic(self, q, p, symbols):
        return self._two_layers(q, p, lambda q1, p1: symbols.moments(self.activation, q1, p1),
                                symbols.parameter)

    def _two_layers(self, q, p, moments, parameter):
        """dense -> activation (its Gaussian moments) -> dense, for numbers or sympy alike."""
        sigma_w2, sigma_b2 = parameter(self.sigma_w2), parameter(self.sigma_b2)
        q1, p1 = dense_core(q, p, sigma_w2, sigma_b2)
        m2, m11 = self.hidden(q1, p1, *moments(q1, p1))
        out = sigma_w2 if self.sigma_w2_out is None else parameter(self.sigma_w2_out)
        return dense_core(m2, m11, out, sigma_b2)

    def hidden(self, q1, p1, m2, m11):
        """Second moments of the hidden units from the activation's ``(m2, m11)``: :attr:`hidden_core`."""
        return self.hidden_core(q1, p1, m2, m11)

    #: The hidden units' moments from phi's (jittable): phi's own (:func:`own_hidden_core`).
    hidden_core = staticmethod(own_hidden_core)

    def kernel_key(self):
        # the activation's code too: a user activation registered again under its name is another function
        return super().kernel_key() + (("activation_code", activation_spec(self.activation).code),)

    def rescaled_parameters(self):
        """Homogeneous (the bias at degree 1) for a positively homogeneous activation (ReLU, linear);
        None otherwise."""
        if not activation_spec(self.activation).homogeneous:
            return None
        return rescaled_bias(self.sigma_b2)

    #: Whether :attr:`hidden_core` is the gated one (the interpreter's MLP instruction runs either).
    gated = False

    def kernel(self, tape):
        """One MLP instruction: dense, the activation's moments, :attr:`hidden_core`, dense."""
        tape.mlp(self.sigma_w2, self.sigma_b2, self.activation,
                 self.sigma_w2 if self.sigma_w2_out is None else self.sigma_w2_out, gated=self.gated)


def mlp(sigma_w2=0.2, sigma_b2=4e-4, activation="relu", sigma_w2_out=None) -> Component:
    """Two-layer MLP with the given activation (a name in ``ACTIVATIONS`` or a
    numba-jittable function); see :func:`~remprop.theory.mlp_map`. ``sigma_w2_out``: the second layer's
    variance times its fan-in ``d_ff`` (default ``sigma_w2``)."""
    return mlp_args(MLP, sigma_w2, sigma_b2, activation, sigma_w2_out)


def mlp_args(kind, sigma_w2, sigma_b2, activation, sigma_w2_out):
    name = activation_spec(activation).name
    out = None if sigma_w2_out is None else parameter("sigma_w2_out", sigma_w2_out, nonnegative=True)
    return kind(parameter("sigma_w2", sigma_w2, nonnegative=True),
                parameter("sigma_b2", sigma_b2, nonnegative=True), name, out)
