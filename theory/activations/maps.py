r"""The dense layer and the two-layer MLP on the order parameters, and the public moments.

A dense layer ``W ~ N(0, sigma_w2 / fan_in)`` with bias ``N(0, sigma_b2)`` maps
``(q, p) -> (sigma_w2 q + sigma_b2, sigma_w2 p + sigma_b2)``; the MLP
``W2 phi(W1 x + b1) + b2`` is two of them around the Gaussian moments of phi
(docs/theory.md section 4). The moments of every registered activation
(:mod:`remprop.theory.activations.registry`) are evaluated over arrays by one compiled function for the
every activation (chosen by its code, ``moments_into``, the loops the depth kernels read too; a
user-registered activation's moments compiled on their own and passed in as a first-class function).

References
----------
B. Poole et al., "Exponential expressivity in deep neural networks through transient
chaos", NeurIPS 2016; S. Schoenholz et al., "Deep information propagation", ICLR 2017.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit
from numba.extending import register_jitable

from .._jit import CACHE, JIT_OPTIONS
from ..checks import as_float_array, check_overlap, output_pair, scalar_or_array
from ..quadrature import HALF_WIDTH
from .closed_form import (erf_derivative_moment_core, erf_moments_core, linear_derivative_moment_core,
                          linear_moments_core, relu_derivative_moment_core, relu_kernel_core, relu_moments_core)
from .quadrature_moments import (gelu_derivative_moment_core, gelu_moments_core, silu_derivative_moment_core,
                                 silu_moments_core, tanh_derivative_moment_core, tanh_moments_core)
from .registry import (_BY_CODE, ERF, FIRST_USER_CODE, GELU, LINEAR, RELU, SILU, TANH, activation_spec,
                       compiled_user_function)

__all__ = [
    "dense_core", "moments_array", "relu_kernel", "activation_moments", "derivative_moment",
    "dense_map", "mlp_map",
]


@register_jitable
def dense_core(q, p, sigma_w2, sigma_b2):
    """Pre-activation order parameters of a dense layer W ~ N(0, sigma_w2/fan_in)."""
    return sigma_w2 * q + sigma_b2, sigma_w2 * p + sigma_b2


@register_jitable
def moments_into(code, user_moments, q1, p1, m2, m11, count):
    """The moments of the activation ``code`` at ``(q1[j], p1[j])`` into ``m2[j], m11[j]`` for ``j < count``:
    a built-in activation's own loop, for a user-registered one (codes from ``FIRST_USER_CODE``)
    ``user_moments``, its compiled moments (``registry.compiled_user_function``); NaN for an unknown
    code. The code is chosen once, outside the loop over the cells (one loop per activation, which LLVM
    can vectorise). The kernels' MLP step reads the same loops."""
    if code >= FIRST_USER_CODE:
        for j in range(count):
            m2[j], m11[j] = user_moments(q1[j], p1[j])
    elif code == RELU:
        for j in range(count):
            m2[j], m11[j] = relu_moments_core(q1[j], p1[j])
    elif code == LINEAR:
        for j in range(count):
            m2[j], m11[j] = linear_moments_core(q1[j], p1[j])
    elif code == TANH:
        for j in range(count):
            m2[j], m11[j] = tanh_moments_core(q1[j], p1[j])
    elif code == ERF:
        for j in range(count):
            m2[j], m11[j] = erf_moments_core(q1[j], p1[j])
    elif code == GELU:
        for j in range(count):
            m2[j], m11[j] = gelu_moments_core(q1[j], p1[j])
    elif code == SILU:
        for j in range(count):
            m2[j], m11[j] = silu_moments_core(q1[j], p1[j])
    else:
        for j in range(count):
            m2[j], m11[j] = math.nan, math.nan


@register_jitable
def derivative_moment_into(code, user_derivative_moment, q1, out, count):
    """``E[phi'(u)^2]`` of the activation ``code`` at ``q1[j]`` into ``out[j]``, ``j < count`` (as
    ``moments_into``)."""
    if code >= FIRST_USER_CODE:
        for j in range(count):
            out[j] = user_derivative_moment(q1[j])
    elif code == RELU:
        for j in range(count):
            out[j] = relu_derivative_moment_core(q1[j])
    elif code == LINEAR:
        for j in range(count):
            out[j] = linear_derivative_moment_core(q1[j])
    elif code == TANH:
        for j in range(count):
            out[j] = tanh_derivative_moment_core(q1[j])
    elif code == ERF:
        for j in range(count):
            out[j] = erf_derivative_moment_core(q1[j])
    elif code == GELU:
        for j in range(count):
            out[j] = gelu_derivative_moment_core(q1[j])
    elif code == SILU:
        for j in range(count):
            out[j] = silu_derivative_moment_core(q1[j])
    else:
        for j in range(count):
            out[j] = math.nan


# forceinline as in the kernel steps, which call the same moments: the helpers below them are then
# compiled once for both (remprop.theory._jit.JIT_OPTIONS). Module-level, without a closure: one
# compiled loop for every activation, kept on disk.
@njit(cache=CACHE, forceinline=True, **JIT_OPTIONS)
def _moments_many(code, user_moments, q1, p1):
    m2, m11 = np.empty(q1.size), np.empty(q1.size)
    moments_into(code, user_moments, q1, p1, m2, m11, q1.size)
    return m2, m11


@njit(cache=CACHE, forceinline=True, **JIT_OPTIONS)
def _derivative_moments_many(code, user_derivative_moment, q1):
    out = np.empty(q1.size)
    derivative_moment_into(code, user_derivative_moment, q1, out, q1.size)
    return out


def moments_array(code, q1, p1):
    """Moments over float arrays (already validated), broadcast together."""
    q1, p1 = np.broadcast_arrays(np.asarray(q1, dtype=np.float64), np.asarray(p1, dtype=np.float64))
    shape = q1.shape
    m2, m11 = _moments_many(code, compiled_user_function(code, "moments"), np.ascontiguousarray(q1).ravel(),
                            np.ascontiguousarray(p1).ravel())
    _check_finite(code, q1.ravel(), m2, m11)
    return m2.reshape(shape), m11.reshape(shape)


def _check_finite(code, q1, *moments):
    """ValueError naming a registered activation whose quadrature met a failing node.

    The quadrature turns an exception or a non-finite value of a registered function into
    NaN (:mod:`.registry`); here that NaN becomes an error with the activation's name and
    the input range of the nodes, ``|x| <= HALF_WIDTH sqrt(2 q1)`` (``x = a w + b e`` with
    ``a^2 + b^2 = q1`` and ``|w|, |e| <= HALF_WIDTH``; :mod:`remprop.theory.quadrature`).
    Built-in activations are left alone (their moments are finite wherever q1 is).
    """
    spec = _BY_CODE[code]
    if spec.builtin:
        return
    bad = ~np.isfinite(moments[0])
    for values in moments[1:]:
        bad |= ~np.isfinite(values)
    bad &= np.isfinite(q1)
    if bad.any():
        q_bad = float(np.asarray(q1, dtype=float)[bad].max())
        reach = HALF_WIDTH * float(np.sqrt(2.0 * q_bad))
        raise ValueError(f"activation {spec.name!r} raised or returned a non-finite value at an input in "
                         f"[{-reach:.3g}, {reach:.3g}] (the quadrature nodes at pre-activation variance "
                         f"q1 = {q_bad:.4g}): its Gaussian moments are undefined there")


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
    ``Var = q1`` and ``Cov = p1``: closed forms for relu, linear and erf
    (``(2/pi) arcsin(2 p1 / (1 + 2 q1))``, Williams 1997; :mod:`.closed_form`), the
    trapezoid rule otherwise (:mod:`.quadrature_moments`; 1e-10 for q1 <= 16).

    Parameters
    ----------
    q1, p1 : array_like
        Pre-activation variance (> 0) and covariance (``|p1| <= q1``).
    activation : str or callable
        A name in :data:`~remprop.theory.ACTIVATIONS` or a numba-jittable scalar function
        (registered on first use, see :func:`~remprop.theory.register_activation`).

    References
    ----------
    Cho & Saul 2009; Williams 1997; Poole et al. 2016.
    """
    spec = activation_spec(activation)
    q1, p1 = check_overlap(q1, p1, "q1", "p1")
    return tuple(scalar_or_array(x) for x in moments_array(spec.code, q1, p1))


def derivative_moment(q1, activation="tanh"):
    r"""``E[phi'(u)^2]`` for ``u ~ N(0, q1)``: the slope factor of ``chi_1``.

    .. math:: \chi_1 = \sigma_w^2\, E[\phi'(u)^2]

    (Poole et al. 2016). Closed forms: relu 1/2, linear 1, erf
    ``(4/pi) / sqrt(1 + 4 q1)``; trapezoid rule otherwise.

    Parameters
    ----------
    q1 : array_like
        Variance, > 0.
    activation : str or callable

    References
    ----------
    B. Poole et al., NeurIPS 2016; S. Schoenholz et al., ICLR 2017.
    """
    spec = activation_spec(activation)
    q1 = as_float_array("q1", q1, positive=True)
    flat = np.ascontiguousarray(q1).ravel()
    out = _derivative_moments_many(spec.code, compiled_user_function(spec.code, "derivative_moment"), flat)
    _check_finite(spec.code, flat, out)
    return scalar_or_array(out.reshape(q1.shape))


def dense_map(q, p, sigma_w2=0.2, sigma_b2=4e-4):
    r"""A dense layer ``W ~ N(0, sigma_w2 / fan_in)``, bias ``N(0, sigma_b2)``.

    .. math:: q' = \sigma_w^2 q + \sigma_b^2, \qquad p' = \sigma_w^2 p + \sigma_b^2

    ``q'`` and ``p'`` are broadcast to the common shape of all inputs (docs/theory.md
    section 4).
    """
    q, p = check_overlap(q, p)
    sigma_w2 = as_float_array("sigma_w2", sigma_w2, nonnegative=True)
    sigma_b2 = as_float_array("sigma_b2", sigma_b2, nonnegative=True)
    return output_pair(*dense_core(q, p, sigma_w2, sigma_b2))


def mlp_map(q, p, sigma_w2=0.2, sigma_b2=4e-4, activation="relu", sigma_w2_out=None):
    r"""Order parameters after a two-layer MLP ``W2 phi(W1 x + b1) + b2``.

    .. math::
        q_1 = \sigma_w^2 q + \sigma_b^2,\ p_1 = \sigma_w^2 p + \sigma_b^2;\quad
        q_2 = \sigma_{w,out}^2 E[\phi(u)^2] + \sigma_b^2,\
        p_2 = \sigma_{w,out}^2 E[\phi(u)\phi(v)] + \sigma_b^2

    with (u, v) centred Gaussian, Var = q1, Cov = p1; ``W1 ~ N(0, sigma_w2 / d)`` and
    ``W2 ~ N(0, sigma_w2_out / d_ff)`` (``sigma_w2_out`` defaults to ``sigma_w2``; the
    hidden width ``d_ff`` enters only through it). For non-homogeneous activations
    ``q2`` needs its own integral ``E[phi(u)^2]`` (it is not ``q1`` times a constant as
    for ReLU). See docs/theory.md section 4.

    References
    ----------
    Poole et al. 2016; Schoenholz et al. 2016; Giorlandino & Goldt, arXiv 2505.24333.
    """
    spec = activation_spec(activation)
    q1, p1 = dense_map(q, p, sigma_w2, sigma_b2)
    if (np.asarray(q1) <= 0.0).any():
        raise ValueError("sigma_w2 and sigma_b2 must not both vanish: the pre-activation "
                         "variance sigma_w2 * q + sigma_b2 must be > 0")
    m2, m11 = activation_moments(q1, p1, spec.name)
    if sigma_w2_out is None:
        sigma_w2_out = sigma_w2
    else:
        sigma_w2_out = as_float_array("sigma_w2_out", sigma_w2_out, nonnegative=True)
    return dense_map(m2, m11, sigma_w2_out, sigma_b2)
