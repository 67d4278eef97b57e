r"""Gaussian moments of the activations with closed forms: ReLU, linear, erf.

For a centred Gaussian pair (u, v) with ``Var u = Var v = q1`` and ``Cov(u, v) = p1``:

* ReLU (arc-cosine kernel, Cho & Saul 2009): ``E[relu(u) relu(v)] = (q1/2) f(c)``,

  .. math:: f(c) = \frac{\sqrt{1 - c^2} + c\,(\pi - \arccos c)}{\pi},\qquad c = p_1 / q_1,

  ``E[relu(u)^2] = q1/2`` and ``E[relu'(u)^2] = 1/2``.
* linear: ``(q1, p1)`` and ``E[1] = 1``.
* erf (Williams 1997, with the input scale absorbed in q1, p1):
  ``E[erf(u) erf(v)] = (2/pi) arcsin(2 p1 / (1 + 2 q1))``,
  ``E[erf(u)^2] = (2/pi) arcsin(2 q1 / (1 + 2 q1))`` and
  ``E[erf'(u)^2] = (4/pi) E[exp(-2 u^2)] = (4/pi) / sqrt(1 + 4 q1)``.

Every ``*_core`` is ``register_jitable``: it broadcasts over arrays from NumPy and takes
scalars inside the numba kernels (docs/theory.md section 4).

References
----------
Y. Cho & L. Saul, "Kernel methods for deep learning", NeurIPS 2009.
C. K. I. Williams, "Computing with infinite networks", NeurIPS 1997 (erf kernel).
"""
from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

__all__ = [
    "relu_kernel_core", "relu_moments_core", "linear_moments_core", "erf_moments_core",
    "relu_derivative_moment_core", "linear_derivative_moment_core", "erf_derivative_moment_core",
    "relu_function", "linear_function", "erf_function",
]


@register_jitable
def relu_kernel_core(c):
    """Normalised arc-cosine kernel f(c); c is clipped to [-1, 1] against round-off.

    ``sqrt(1 - c^2)`` is taken as ``sqrt((1 - c)(1 + c))``: ``1 - c`` is exact for
    ``c >= 1/2``, so f(c) is within about one ulp at every c (``1 - c * c`` cancels near
    ``c = 1`` and loses ``eps / sqrt(1 - c)``: 1.2e-14 at ``1 - c = 1e-8``); ``arccos`` of
    an exact argument is accurate.
    """
    c = np.minimum(np.maximum(c, -1.0), 1.0)
    return (np.sqrt((1.0 - c) * (1.0 + c)) + c * (np.pi - np.arccos(c))) / np.pi


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
def erf_moments_core(q1, p1):
    """(E[erf(u)^2], E[erf(u) erf(v)]) = (2/pi) arcsin(2 (q1, p1) / (1 + 2 q1))."""
    scale = 1.0 / (1.0 + 2.0 * q1)
    return (2.0 / np.pi) * np.arcsin(2.0 * q1 * scale), (2.0 / np.pi) * np.arcsin(2.0 * p1 * scale)


@register_jitable
def relu_derivative_moment_core(q1):
    """E[step(u)^2] = 1/2."""
    return 0.5 + 0.0 * q1


@register_jitable
def linear_derivative_moment_core(q1):
    """E[1] = 1."""
    return 1.0 + 0.0 * q1


@register_jitable
def erf_derivative_moment_core(q1):
    """E[erf'(u)^2] = (4/pi) E[exp(-2 u^2)] = (4/pi) / sqrt(1 + 4 q1)."""
    return (4.0 / np.pi) / np.sqrt(1.0 + 4.0 * q1)


@register_jitable
def relu_function(x):
    """max(x, 0)."""
    return max(x, 0.0)


@register_jitable
def linear_function(x):
    """x."""
    return x + 0.0


@register_jitable
def erf_function(x):
    """erf(x)."""
    return math.erf(x)
