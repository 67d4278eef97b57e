"""A dense layer ``W x + b`` and the bias-free attention output projection, as components."""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..activations import dense_core
from .base import Component, parameter, rescaled_bias

__all__ = ["Dense", "dense", "output_projection"]


@dataclass(repr=False)
class Dense(Component):
    """A dense layer, or the bias-free output projection (:func:`dense`, :func:`output_projection`)."""

    sigma_w2: np.ndarray
    sigma_b2: np.ndarray
    name = "dense"

    def apply(self, q, p):
        return dense_core(q, p, self.sigma_w2, self.sigma_b2)

    def gram(self, walker, g):
        return walker.dense(self, g)

    draw_rank = 2

    @property
    def weight_slot(self):
        """``"output"`` for the bias-free output projection, ``"dense"`` for a dense layer with a bias."""
        return "dense" if np.any(self.sigma_b2 != 0) else "output"

    def torch_weights(self, sim):
        if self.weight_slot == "output":
            return sim.ops.draw_output_projection(sim.generator, sim.width, float(self.sigma_w2), dtype=sim.dtype,
                                                  device=sim.device)
        return sim.ops.draw_dense_weights(sim.generator, sim.width, float(self.sigma_w2), float(self.sigma_b2),
                                          dtype=sim.dtype, device=sim.device)

    def torch_forward(self, x, sim):
        weights = sim.weights_of(self)
        if self.weight_slot == "output":
            return sim.ops.output_projection(x, weights)
        return sim.ops.dense(x, weights)

    def symbolic(self, q, p, symbols):
        return dense_core(q, p, symbols.parameter(self.sigma_w2), symbols.parameter(self.sigma_b2))

    def rescaled_parameters(self):
        return rescaled_bias(self.sigma_b2)

    def kernel(self, tape):
        """One dense instruction: ``dense_core`` with the weight and bias variances (columns or constants)."""
        tape.dense(self.sigma_w2, self.sigma_b2)


def dense(sigma_w2=1.0, sigma_b2=0.0) -> Component:
    r"""A dense layer ``W ~ N(0, sigma_w2 / fan_in)``, bias ``N(0, sigma_b2)``; see :func:`~remprop.theory.dense_map`.

    .. math:: q' = \sigma_w^2 q + \sigma_b^2,\qquad p' = \sigma_w^2 p + \sigma_b^2
    """
    return Dense(parameter("sigma_w2", sigma_w2, nonnegative=True),
                  parameter("sigma_b2", sigma_b2, nonnegative=True))


def output_projection(sigma_o2=1.0) -> Component:
    r"""The attention output projection ``W_O ~ N(0, sigma_o2 / d)`` without bias.

    .. math:: q' = \sigma_o^2 q_A,\qquad p' = \sigma_o^2 p_A

    A random linear map of its input: independent of the tokens at initialisation, it
    scales the norms and overlaps alike and leaves the cosine unchanged
    (``E[(W a)_k (W b)_k] = sigma_o2 a.b / d``).

    References
    ----------
    Vaswani et al. 2017 (``MultiHead = Concat(heads) W_O``); Giorlandino & Goldt,
    arXiv 2505.24333 (whose reference experiments drop ``W_O``).
    """
    return Dense(parameter("sigma_o2", sigma_o2, nonnegative=True), np.zeros(()))
