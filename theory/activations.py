"""Gaussian kernels of activation functions and the two-layer MLP map.

For an activation phi and a centred Gaussian pair (u, v) with Var u = Var v = q1 and
Cov(u, v) = p1 the MLP map needs E[phi(u)^2] and E[phi(u) phi(v)].

ReLU has the arc-cosine closed form (Cho & Saul 2009):

    E[relu(u) relu(v)] = (q1 / 2) f(c),   f(c) = (sqrt(1 - c^2) + c (pi - arccos c)) / pi,

with c = p1 / q1, f(0) = 1/pi, f(1) = 1, f'(c) = (pi - arccos c) / pi.
"""
from __future__ import annotations

import numpy as np
from numba.extending import register_jitable

from ._checks import scalar_or_array, as_float_array, check_choice, check_overlap

__all__ = ["ACTIVATIONS", "relu_kernel", "activation_moments", "dense_map", "mlp_map"]

#: Activations with a Gaussian kernel in the engine, and their integer codes in the kernels.
ACTIVATIONS = {"relu": 0, "linear": 1}


@register_jitable
def relu_kernel_core(c):
    """Normalised arc-cosine kernel f(c); c is clipped to [-1, 1] against round-off."""
    c = np.minimum(np.maximum(c, -1.0), 1.0)
    return (np.sqrt(1.0 - c * c) + c * (np.pi - np.arccos(c))) / np.pi


@register_jitable
def relu_moments_core(q1, p1):
    """(E[relu(u)^2], E[relu(u) relu(v)]) for Var = q1, Cov = p1."""
    half = 0.5 * q1
    return half, half * relu_kernel_core(p1 / q1)


@register_jitable
def linear_moments_core(q1, p1):
    """(E[u^2], E[u v]) = (q1, p1) for the identity activation."""
    return q1 + 0.0, p1 + 0.0


@register_jitable
def dense_core(q, p, sigma_w2, sigma_b2):
    """Pre-activation order parameters of a dense layer W ~ N(0, sigma_w2/fan_in)."""
    return sigma_w2 * q + sigma_b2, sigma_w2 * p + sigma_b2


def relu_kernel(c):
    r"""Normalised arc-cosine kernel of ReLU.

    .. math:: f(c) = \frac{\sqrt{1 - c^2} + c\,(\pi - \arccos c)}{\pi},
              \qquad E[\mathrm{relu}(u)\,\mathrm{relu}(v)] = \tfrac{q}{2} f(c)

    Parameters
    ----------
    c : array_like
        Correlation coefficient of the Gaussian pair, in [-1, 1].

    References
    ----------
    Y. Cho & L. Saul, "Kernel methods for deep learning", NeurIPS 2009 (n = 1).
    """
    c = as_float_array("c", c, low=-1.0, high=1.0)
    return scalar_or_array(relu_kernel_core(c))


def activation_moments(q1, p1, activation="relu"):
    r"""Gaussian second moments of an activation.

    Returns ``(E[phi(u)^2], E[phi(u) phi(v)])`` for centred (u, v) with
    ``Var = q1`` and ``Cov = p1``.

    Parameters
    ----------
    q1, p1 : array_like
        Pre-activation variance (> 0) and covariance (``|p1| <= q1``).
    activation : {"relu", "linear"}
    """
    check_choice("activation", activation, tuple(ACTIVATIONS))
    q1, p1 = check_overlap(q1, p1, "q1", "p1")
    core = relu_moments_core if activation == "relu" else linear_moments_core
    return tuple(scalar_or_array(x) for x in core(q1, p1))


def dense_map(q, p, sigma_w2=0.2, sigma_b2=4e-4):
    r"""A dense layer ``W ~ N(0, sigma_w2 / fan_in)``, bias ``N(0, sigma_b2)``.

    .. math:: q' = \sigma_w^2 q + \sigma_b^2, \qquad p' = \sigma_w^2 p + \sigma_b^2
    """
    q, p = check_overlap(q, p)
    sigma_w2 = as_float_array("sigma_w2", sigma_w2, nonnegative=True)
    sigma_b2 = as_float_array("sigma_b2", sigma_b2, nonnegative=True)
    return tuple(scalar_or_array(x) for x in dense_core(q, p, sigma_w2, sigma_b2))


def mlp_map(q, p, sigma_w2=0.2, sigma_b2=4e-4, activation="relu"):
    r"""Order parameters after a two-layer MLP ``W2 phi(W1 x + b1) + b2``.

    .. math::
        q_1 = \sigma_w^2 q + \sigma_b^2,\ p_1 = \sigma_w^2 p + \sigma_b^2;\quad
        q_2 = \sigma_w^2 E[\phi(u)^2] + \sigma_b^2,\
        p_2 = \sigma_w^2 E[\phi(u)\phi(v)] + \sigma_b^2

    with (u, v) centred Gaussian, Var = q1, Cov = p1 (equal fan-ins, d_ff = d).

    References
    ----------
    Poole et al. 2016; Schoenholz et al. 2016; Giorlandino & Goldt, arXiv 2505.24333.
    """
    q1, p1 = dense_map(q, p, sigma_w2, sigma_b2)
    m2, m11 = activation_moments(q1, p1, activation)
    return dense_map(m2, m11, sigma_w2, sigma_b2)
