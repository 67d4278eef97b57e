r"""Gaussian kernels of activation functions and the two-layer MLP map.

For an activation phi and a centred Gaussian pair (u, v) with Var u = Var v = q1 and
Cov(u, v) = p1 the MLP map needs ``E[phi(u)^2]`` (the norm map: it does not factor
through q1 unless phi is positively homogeneous) and ``E[phi(u) phi(v)]``.

Built-in activations
--------------------
========  =====================================  ===========================================
name      phi(x)                                 kernel
========  =====================================  ===========================================
relu      max(0, x)                              arc-cosine closed form (Cho & Saul 2009)
linear    x                                      (q1, p1)
tanh      tanh(x)                                quadrature, poles at +-i pi/2
erf       erf(x)                                 arcsine closed form (Williams 1997)
gelu      x Phi(x) = x (1 + erf(x/sqrt 2)) / 2   quadrature (Hendrycks & Gimpel 2016)
silu      x / (1 + e^-x)                         quadrature, poles at +-i pi
========  =====================================  ===========================================

Closed forms:

* ReLU: ``E[relu(u) relu(v)] = (q1/2) f(c)``, ``f(c) = (sqrt(1 - c^2) + c (pi - arccos c)) / pi``,
  ``c = p1/q1``; ``E[relu(u)^2] = q1/2``.
* erf: ``E[erf(u) erf(v)] = (2/pi) arcsin(2 p1 / (1 + 2 q1))`` (Williams 1997, with the
  input scale absorbed in q1, p1); ``E[erf(u)^2] = (2/pi) arcsin(2 q1 / (1 + 2 q1))``.

Quadrature (:mod:`.quadrature`): with ``a = sqrt|p1|``, ``b = sqrt(q1 - |p1|)`` write
``u = a w + b e1``, ``v = sign(p1) a w + b e2`` (w, e1, e2 independent standard normals):

.. math:: E[\phi(u)\phi(v)] = E_w\left[g(w)\, g(\mathrm{sign}(p_1) w)\right], \qquad
          g(w) = E_e[\phi(a w + b e)] .

Both one-dimensional expectations use the Gaussian-weighted trapezoid rule, with a
step set separately by ``a`` (outer) and ``b`` (inner) from the analyticity strip of phi.
Symmetry halves the work: an activation is split as ``phi(x) = lambda x + r(x)`` with
``r`` odd (tanh, erf), even (GELU and SiLU: ``r(x) = (x/2) erf(x/sqrt 2)`` and
``(x/2) tanh(x/2)``, ``lambda = 1/2``) or general; then
``E[phi(u) phi(v)] = lambda^2 p1 + E[r(u) r(v)]`` (the cross terms vanish by symmetry)
and ``g`` is odd or even, so only the outer nodes ``w >= 0`` are needed. For tanh and
SiLU the inner sums need no transcendental function at all: with equally spaced nodes,
``exp(-2(x + y)) = exp(-2x) exp(-2y)`` is a product of precomputed factors, and a pair
of nodes ``+-y`` combines into a single division,

.. math:: \tanh(x + y) + \tanh(x - y) = \frac{2 (2 + P C)}{1 + P C + P^2} - 2,
          \quad P = e^{-2x},\ C = 2\cosh 2y .

Accuracy: 1e-10 absolute or better for the built-in smooth activations while the
pre-activation variance q1 is at most 16 (checked against the erf closed form,
a 4x finer rule and Monte Carlo in tests/test_activations_general.py); beyond
``q1 ~ 100`` (tanh) the node cap of :mod:`.quadrature` limits it.

User activations
----------------
:func:`register_activation` adds any numba-jittable scalar function (a plain Python
function is compiled with ``numba.njit``); ``Architecture(activation=fn)`` registers
``fn`` on the fly. Kernels of user activations are compiled per process (numba cannot
cache code that calls a function object created at run time).

References
----------
Y. Cho & L. Saul, "Kernel methods for deep learning", NeurIPS 2009.
C. K. I. Williams, "Computing with infinite networks", NeurIPS 1997 (erf kernel).
D. Hendrycks & K. Gimpel, "Gaussian error linear units (GELUs)", arXiv 1606.08415.
S. Elfwing, E. Uchibe & K. Doya, "Sigmoid-weighted linear units", Neural Netw. 2018 (SiLU).
B. Poole et al., "Exponential expressivity in deep neural networks through transient
chaos", NeurIPS 2016; S. Schoenholz et al., "Deep information propagation", ICLR 2017.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable

import numba
import numpy as np
from numba import njit
from numba.extending import register_jitable

from .checks import as_float_array, check_overlap, output_pair, scalar_or_array
from ._naming import specialised
from .quadrature import HALF_WIDTH, trapezoid_half_nodes

__all__ = [
    "ACTIVATIONS", "relu_kernel", "activation_moments", "dense_map", "mlp_map",
    "register_activation", "activation_spec", "derivative_moment", "ActivationSpec",
]

#: Activations with a Gaussian kernel in the engine, and their integer codes in the
#: kernels. Grows when :func:`register_activation` adds one (codes from 100 up).
ACTIVATIONS = {"relu": 0, "linear": 1, "tanh": 2, "erf": 3, "gelu": 4, "silu": 5}
RELU, LINEAR, TANH, ERF, GELU, SILU = range(6)
#: The activations that ship with remprop (ACTIVATIONS also holds registered ones).
BUILTIN_ACTIVATIONS = tuple(ACTIVATIONS)
FIRST_USER_CODE = 100

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT1_2 = math.sqrt(0.5)
#: Parity of the remainder r(x) = phi(x) - slope * x.
ODD, EVEN, GENERAL = 0, 1, 2
_PARITIES = {"odd": ODD, "even": EVEN, None: GENERAL, "none": GENERAL}


# ---------------------------------------------------------------------------------
# Closed forms (register_jitable: broadcast on arrays from NumPy, scalars in kernels)
# ---------------------------------------------------------------------------------
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
def erf_moments_core(q1, p1):
    """(E[erf(u)^2], E[erf(u) erf(v)]) = (2/pi) arcsin(2 (q1, p1) / (1 + 2 q1))."""
    scale = 1.0 / (1.0 + 2.0 * q1)
    return (2.0 / np.pi) * np.arcsin(2.0 * q1 * scale), (2.0 / np.pi) * np.arcsin(2.0 * p1 * scale)


@register_jitable
def dense_core(q, p, sigma_w2, sigma_b2):
    """Pre-activation order parameters of a dense layer W ~ N(0, sigma_w2/fan_in)."""
    return sigma_w2 * q + sigma_b2, sigma_w2 * p + sigma_b2


# ---------------------------------------------------------------------------------
# Trapezoid helpers
# ---------------------------------------------------------------------------------
@register_jitable
def capped_covariance(m2, m11):
    """Clip ``m11`` to ``[-m2, m2]`` (Cauchy-Schwarz: ``|E[phi(u)phi(v)]| <= E[phi(u)^2]``).

    At full correlation (``|p1| = q1``) the quadrature sums for ``m11`` and ``m2`` differ
    by rounding, and ``m11 = m2 (1 + ulp)`` would give a cosine above 1 downstream.
    """
    if m11 > m2:
        return m2
    if m11 < -m2:
        return -m2
    return m11


@register_jitable
def _half_rule(m):
    """Step h = L/m and weights h N(j h) for j = 0..m."""
    h = HALF_WIDTH / m
    w = np.empty(m + 1)
    for j in range(m + 1):
        z = j * h
        w[j] = h * _INV_SQRT_2PI * math.exp(-0.5 * z * z)
    return h, w


@register_jitable
def _split(q1, p1):
    """a = sqrt|p1|, b = sqrt(q1 - |p1|), sign of p1."""
    c = abs(p1)
    if c > q1:
        c = q1
    sign = 1.0 if p1 >= 0.0 else -1.0
    return math.sqrt(c), math.sqrt(q1 - c), sign


# ---------------------------------------------------------------------------------
# tanh: odd, poles at +-i pi/2
# ---------------------------------------------------------------------------------
_TANH_STRIP = 0.5 * math.pi
_SILU_STRIP = math.pi
_GELU_STRIP = 2.2  # entire; effective strip calibrated on the 1e-11 target
_FACTORISED_Q1_MAX = 900.0  # exp factors stay finite: |2 x| <= 2 L sqrt(2 q1) < 700


@register_jitable
def _tanh_positive(x):
    """tanh(x) for x >= 0 from exp(-2x) (no overflow)."""
    return 2.0 / (1.0 + math.exp(-2.0 * x)) - 1.0


@register_jitable
def tanh_moments_core(q1, p1):
    """(E[tanh(u)^2], E[tanh(u) tanh(v)]) by the factorised trapezoid rule."""
    if q1 > _FACTORISED_Q1_MAX:
        return _tanh_moments_direct(q1, p1)
    s = math.sqrt(q1)
    m = trapezoid_half_nodes(s, _TANH_STRIP)
    h, w = _half_rule(m)
    m2 = 0.0
    for j in range(1, m + 1):
        t = _tanh_positive(s * j * h)
        m2 += w[j] * t * t
    m2 *= 2.0
    a, b, sign = _split(q1, p1)
    m_out = trapezoid_half_nodes(a, _TANH_STRIP)
    m_in = trapezoid_half_nodes(b, _TANH_STRIP)
    h_out, w_out = _half_rule(m_out)
    h_in, w_in = _half_rule(m_in)
    cosh2 = np.empty(m_in + 1)
    for j in range(1, m_in + 1):
        cosh2[j] = 2.0 * math.cosh(2.0 * b * j * h_in)
    acc = 0.0
    for i in range(1, m_out + 1):
        big_p = math.exp(-2.0 * a * i * h_out)
        p2 = big_p * big_p
        g = w_in[0] * (2.0 / (1.0 + big_p) - 1.0)
        for j in range(1, m_in + 1):
            pc = big_p * cosh2[j]
            g += w_in[j] * (2.0 * (2.0 + pc) / (1.0 + pc + p2) - 2.0)
        acc += w_out[i] * g * g
    return m2, capped_covariance(m2, sign * 2.0 * acc)


@register_jitable
def _tanh_moments_direct(q1, p1):
    """The same sums with math.tanh (any q1; slower)."""
    s = math.sqrt(q1)
    m = trapezoid_half_nodes(s, _TANH_STRIP)
    h, w = _half_rule(m)
    m2 = 0.0
    for j in range(1, m + 1):
        t = math.tanh(s * j * h)
        m2 += 2.0 * w[j] * t * t
    a, b, sign = _split(q1, p1)
    m_out = trapezoid_half_nodes(a, _TANH_STRIP)
    m_in = trapezoid_half_nodes(b, _TANH_STRIP)
    h_out, w_out = _half_rule(m_out)
    h_in, w_in = _half_rule(m_in)
    acc = 0.0
    for i in range(1, m_out + 1):
        x = a * i * h_out
        g = w_in[0] * math.tanh(x)
        for j in range(1, m_in + 1):
            y = b * j * h_in
            g += w_in[j] * (math.tanh(x + y) + math.tanh(x - y))
        acc += w_out[i] * g * g
    return m2, capped_covariance(m2, sign * 2.0 * acc)


# ---------------------------------------------------------------------------------
# SiLU: x/2 + (x/2) tanh(x/2), remainder even, poles at +-i pi
# ---------------------------------------------------------------------------------
@register_jitable
def _silu_remainder_positive(x):
    """(x/2) tanh(x/2) = x / (1 + e^-x) - x/2 for x >= 0."""
    return x / (1.0 + math.exp(-x)) - 0.5 * x


@register_jitable
def silu_moments_core(q1, p1):
    """(E[silu(u)^2], E[silu(u) silu(v)]) by the factorised trapezoid rule."""
    if q1 > _FACTORISED_Q1_MAX:
        return _silu_moments_direct(q1, p1)
    s = math.sqrt(q1)
    m = trapezoid_half_nodes(s, _SILU_STRIP)
    h, w = _half_rule(m)
    e2 = 0.0
    for j in range(1, m + 1):
        r = _silu_remainder_positive(s * j * h)
        e2 += w[j] * r * r
    m2 = 0.25 * q1 + 2.0 * e2
    a, b, sign = _split(q1, p1)
    m_out = trapezoid_half_nodes(a, _SILU_STRIP)
    m_in = trapezoid_half_nodes(b, _SILU_STRIP)
    h_out, w_out = _half_rule(m_out)
    h_in, w_in = _half_rule(m_in)
    cosh2 = np.empty(m_in + 1)
    sinh2 = np.empty(m_in + 1)
    for j in range(1, m_in + 1):
        y = b * j * h_in
        cosh2[j] = 2.0 * math.cosh(y)
        sinh2[j] = 2.0 * math.sinh(y) * y
    acc = 0.0
    for i in range(0, m_out + 1):
        x = a * i * h_out
        big_p = math.exp(-x)
        p2 = big_p * big_p
        g = w_in[0] * (x / (1.0 + big_p) - 0.5 * x)
        for j in range(1, m_in + 1):
            # e(x + y) + e(x - y) = (2x + x P C + y P D) / (1 + P C + P^2) - x
            pc = big_p * cosh2[j]
            g += w_in[j] * ((2.0 * x + x * pc + big_p * sinh2[j]) / (1.0 + pc + p2) - x)
        acc += (w_out[i] if i == 0 else 2.0 * w_out[i]) * g * g
    return m2, capped_covariance(m2, 0.25 * p1 + acc)


@register_jitable
def _silu_remainder(x):
    """(x/2) tanh(x/2)."""
    return 0.5 * x * math.tanh(0.5 * x)


# ---------------------------------------------------------------------------------
# GELU: x/2 + (x/2) erf(x / sqrt 2), remainder even, entire
# ---------------------------------------------------------------------------------
@register_jitable
def _gelu_remainder(x):
    """(x/2) erf(x / sqrt 2)."""
    return 0.5 * x * math.erf(x * _SQRT1_2)




# ---------------------------------------------------------------------------------
# Any activation phi(x) = slope x + r(x)
# ---------------------------------------------------------------------------------
def make_quadrature_moments(remainder, parity, slope, strip, tag):
    """Jittable ``(q1, p1) -> moments`` of ``phi(x) = slope x + remainder(x)``.

    ``remainder`` is a jittable scalar function with the given parity (ODD, EVEN or
    GENERAL); ``strip`` its analyticity half-width (sets the trapezoid steps); ``tag``
    names this specialisation (see :mod:`._naming`).
    """

    def moments(q1, p1):
        s = math.sqrt(q1)
        m = trapezoid_half_nodes(s, strip)
        h, w = _half_rule(m)
        r0 = remainder(0.0)
        e2 = w[0] * r0 * r0
        for j in range(1, m + 1):
            rp = remainder(s * j * h)
            rm = remainder(-s * j * h)
            e2 += w[j] * (rp * rp + rm * rm)
        m2 = slope * slope * q1 + e2
        a, b, sign = _split(q1, p1)
        m_out = trapezoid_half_nodes(a, strip)
        m_in = trapezoid_half_nodes(b, strip)
        h_out, w_out = _half_rule(m_out)
        h_in, w_in = _half_rule(m_in)
        if parity == EVEN:
            first = 0
        elif parity == ODD:
            first = 1
        else:
            first = -m_out
        g_values = np.zeros(2 * m_out + 1)
        for i in range(first, m_out + 1):
            x = a * i * h_out
            g = w_in[0] * remainder(x)
            for j in range(1, m_in + 1):
                y = b * j * h_in
                g += w_in[j] * (remainder(x + y) + remainder(x - y))
            g_values[i + m_out] = g
        acc = 0.0
        if parity == GENERAL:
            for i in range(-m_out, m_out + 1):
                mirror = i if sign > 0.0 else -i
                acc += w_out[abs(i)] * g_values[i + m_out] * g_values[mirror + m_out]
        else:
            for i in range(first, m_out + 1):
                g = g_values[i + m_out]
                acc += (w_out[0] if i == 0 else 2.0 * w_out[i]) * g * g
            if parity == ODD:
                acc *= sign
        return m2, capped_covariance(m2, slope * slope * p1 + acc)

    return register_jitable(specialised(moments, tag))


def make_derivative_moment(derivative, strip, tag):
    """Jittable ``q1 -> E[phi'(u)^2]`` by the trapezoid rule (``tag``: see :mod:`._naming`)."""

    def derivative_moment(q1):
        s = math.sqrt(q1)
        m = trapezoid_half_nodes(s, strip)
        h, w = _half_rule(m)
        d0 = derivative(0.0)
        acc = w[0] * d0 * d0
        for j in range(1, m + 1):
            dp = derivative(s * j * h)
            dm = derivative(-s * j * h)
            acc += w[j] * (dp * dp + dm * dm)
        return acc

    return register_jitable(specialised(derivative_moment, tag))


@register_jitable
def _tanh_derivative(x):
    t = math.tanh(x)
    return 1.0 - t * t


@register_jitable
def _silu_derivative(x):
    sig = 1.0 / (1.0 + math.exp(-x)) if x >= 0.0 else math.exp(x) / (1.0 + math.exp(x))
    return sig * (1.0 + x * (1.0 - sig))


@register_jitable
def _gelu_derivative(x):
    return 0.5 * math.erfc(-x * _SQRT1_2) + x * _INV_SQRT_2PI * math.exp(-0.5 * x * x)


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
def _tanh_function(x):
    return math.tanh(x)


@register_jitable
def _relu_function(x):
    return max(x, 0.0)


@register_jitable
def _linear_function(x):
    return x + 0.0


@register_jitable
def _erf_function(x):
    return math.erf(x)


@register_jitable
def _gelu_function(x):
    return 0.5 * x * math.erfc(-x * _SQRT1_2)


@register_jitable
def _silu_function(x):
    return x / (1.0 + math.exp(-x)) if x >= 0.0 else x * math.exp(x) / (1.0 + math.exp(x))


_silu_moments_direct = make_quadrature_moments(_silu_remainder, EVEN, 0.5, _SILU_STRIP, "silu")
#: (E[gelu(u)^2], E[gelu(u) gelu(v)]) by the trapezoid rule (even remainder (x/2) erf(x/sqrt 2)).
gelu_moments_core = make_quadrature_moments(_gelu_remainder, EVEN, 0.5, _GELU_STRIP, "gelu")
#: E[(1 - tanh(u)^2)^2], E[silu'(u)^2], E[gelu'(u)^2] (gelu'(x) = Phi(x) + x N(x)).
tanh_derivative_moment_core = make_derivative_moment(_tanh_derivative, _TANH_STRIP, "tanh")
silu_derivative_moment_core = make_derivative_moment(_silu_derivative, _SILU_STRIP, "silu")
gelu_derivative_moment_core = make_derivative_moment(_gelu_derivative, _GELU_STRIP, "gelu")


# ---------------------------------------------------------------------------------
# Registry
# ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class ActivationSpec:
    """An activation known to the engine.

    Attributes
    ----------
    name : str
    code : int
        Integer code used by the depth kernels (:data:`ACTIVATIONS`).
    function : callable
        The scalar activation (jittable).
    moments : callable
        Jittable ``(q1, p1) -> (E[phi(u)^2], E[phi(u) phi(v)])`` on scalars.
    derivative_moment : callable
        Jittable ``q1 -> E[phi'(u)^2]``.
    builtin : bool
        Built-in activations are compiled once and cached on disk.
    """

    name: str
    code: int
    function: Callable
    moments: Callable
    derivative_moment: Callable
    builtin: bool = True


_SPECS = {
    "relu": ActivationSpec("relu", RELU, _relu_function, relu_moments_core, relu_derivative_moment_core),
    "linear": ActivationSpec("linear", LINEAR, _linear_function, linear_moments_core,
                             linear_derivative_moment_core),
    "tanh": ActivationSpec("tanh", TANH, _tanh_function, tanh_moments_core, tanh_derivative_moment_core),
    "erf": ActivationSpec("erf", ERF, _erf_function, erf_moments_core, erf_derivative_moment_core),
    "gelu": ActivationSpec("gelu", GELU, _gelu_function, gelu_moments_core, gelu_derivative_moment_core),
    "silu": ActivationSpec("silu", SILU, _silu_function, silu_moments_core, silu_derivative_moment_core),
}
_BY_CODE = {spec.code: spec for spec in _SPECS.values()}
#: user function object -> registered name
_BY_FUNCTION: dict = {}


def _compile_scalar(name, fn):
    """A numba dispatcher for ``fn`` that maps float64 -> float64, or ValueError naming ``name``."""
    try:
        dispatcher = fn if isinstance(fn, numba.core.registry.CPUDispatcher) else njit(fn)
        for probe in (0.0, 0.5, -1.5):
            value = dispatcher(probe)
            float(value)
    except Exception as exc:  # numba typing errors come in many classes
        raise ValueError(f"{name} must be a numba-jittable scalar function float -> float; "
                         f"calling it compiled failed: {type(exc).__name__}: {str(exc).splitlines()[0]}"
                         ) from None
    return dispatcher


def register_activation(name, function, *, derivative=None, parity=None, strip=math.pi / 2,
                        replace=False):
    r"""Make a scalar activation available to every map and kernel.

    After ``register_activation("softsign", f)``, ``Architecture(activation="softsign")``,
    :func:`activation_moments` and the edge-of-chaos functions use it; its Gaussian
    moments come from the trapezoid rule of :mod:`.quadrature`,

    .. math:: E[\phi(u)\phi(v)] = E_w[g(w) g(\pm w)],\quad g(w) = E_e[\phi(a w + b e)] .

    Parameters
    ----------
    name : str
        New name (built-in names cannot be replaced).
    function : callable
        A numba-jittable scalar function float -> float: a ``numba.njit`` dispatcher or a
        plain Python function (compiled here). It is called at 0, 0.5 and -1.5 to check.
    derivative : callable, optional
        phi', jittable, for ``chi_1 = sigma_w2 E[phi'(u)^2]``; by default a central
        difference with step ``1e-5 (1 + |x|)`` (error ~1e-10).
    parity : {None, "odd", "even"}
        Declared symmetry of phi; "odd" or "even" halves the quadrature work.
    strip : float
        Half-width of the strip around the real axis in which phi is analytic (tanh:
        pi/2, the default; SiLU: pi); it sets the node count (:mod:`.quadrature`). Use a
        small value for activations with kinks (the error then falls only like h^2).
    replace : bool
        Allow re-registering ``name`` for a different function.

    Returns
    -------
    str
        ``name``.

    Raises
    ------
    ValueError
        Naming ``name``, ``function``, ``derivative``, ``parity`` or ``strip``.

    References
    ----------
    Poole et al., NeurIPS 2016 (mean-field kernels of arbitrary activations).
    """
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if name in _SPECS and (_SPECS[name].builtin or not replace):
        raise ValueError(f"name {name!r} is already registered"
                         + ("" if _SPECS[name].builtin else " (pass replace=True)"))
    if not callable(function):
        raise ValueError(f"function must be callable, got {function!r}")
    if parity not in _PARITIES:
        raise ValueError(f"parity must be None, 'odd' or 'even', got {parity!r}")
    try:
        strip = float(strip)
    except (TypeError, ValueError):
        raise ValueError(f"strip must be a positive number, got {strip!r}") from None
    if not (strip > 0 and math.isfinite(strip)):
        raise ValueError(f"strip must be a positive number, got {strip!r}")
    if derivative is not None and not callable(derivative):
        raise ValueError(f"derivative must be callable or None, got {derivative!r}")
    phi = _compile_scalar("function", function)
    code = max(FIRST_USER_CODE - 1, *_BY_CODE) + 1
    if derivative is None:
        dphi = _central_difference(phi, f"user{code}")
    else:
        dphi = _compile_scalar("derivative", derivative)
    spec = _user_spec(name, phi, dphi, _PARITIES[parity], strip, code)
    previous = _SPECS.get(name)
    _SPECS[name] = spec
    _BY_CODE[spec.code] = spec
    ACTIVATIONS[name] = spec.code
    if previous is not None:
        _BY_FUNCTION.pop(previous.function, None)
    _BY_FUNCTION[function] = name
    _BY_FUNCTION[phi] = name
    return name


def _central_difference(phi, tag):
    def derivative(x):
        step = 1e-5 * (1.0 + abs(x))
        return (phi(x + step) - phi(x - step)) / (2.0 * step)
    return njit(specialised(derivative, tag))


def _user_spec(name, phi, dphi, parity, strip, code):
    tag = f"user{code}"
    moments = make_quadrature_moments(phi, parity, 0.0, strip, tag)
    derivative_moment = make_derivative_moment(dphi, strip, tag)
    return ActivationSpec(name, code, phi, moments, derivative_moment, builtin=False)


def resolve_activation(activation, name="activation"):
    """The registered name for a name or a callable (registering new callables)."""
    if isinstance(activation, str):
        if activation not in _SPECS:
            options = ", ".join(repr(n) for n in _SPECS)
            raise ValueError(f"{name} must be one of {options} or a numba-jittable function, "
                             f"got {activation!r}")
        return activation
    if callable(activation):
        try:
            known = _BY_FUNCTION.get(activation)
        except TypeError:  # unhashable callable
            known = None
        if known is not None:
            return known
        base = getattr(activation, "__name__", "activation")
        label = f"user:{base}"
        suffix = 2
        while label in _SPECS:
            label = f"user:{base}#{suffix}"
            suffix += 1
        try:
            return register_activation(label, activation)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}") from None
    raise ValueError(f"{name} must be an activation name or a numba-jittable function, got {activation!r}")


def activation_spec(activation):
    """The :class:`ActivationSpec` of a name, code or registered callable."""
    if isinstance(activation, (int, np.integer)) and not isinstance(activation, bool):
        if int(activation) not in _BY_CODE:
            raise ValueError(f"activation code {activation!r} is not registered")
        return _BY_CODE[int(activation)]
    return _SPECS[resolve_activation(activation)]


@functools.lru_cache(maxsize=None)
def _array_moments(code):
    spec = _BY_CODE[code]
    moments = spec.moments

    def many(q1, p1):
        m2 = np.empty(q1.size)
        m11 = np.empty(q1.size)
        for i in range(q1.size):
            m2[i], m11[i] = moments(q1[i], p1[i])
        return m2, m11
    return njit(cache=spec.builtin, error_model="numpy")(specialised(many, f"code{code}"))


@functools.lru_cache(maxsize=None)
def _array_derivative_moment(code):
    spec = _BY_CODE[code]
    derivative_moment = spec.derivative_moment

    def many(q1):
        out = np.empty(q1.size)
        for i in range(q1.size):
            out[i] = derivative_moment(q1[i])
        return out
    return njit(cache=spec.builtin, error_model="numpy")(specialised(many, f"code{code}"))


def moments_array(code, q1, p1):
    """Moments over float arrays (already validated), broadcast together."""
    q1, p1 = np.broadcast_arrays(np.asarray(q1, dtype=np.float64), np.asarray(p1, dtype=np.float64))
    shape = q1.shape
    m2, m11 = _array_moments(code)(np.ascontiguousarray(q1).ravel(), np.ascontiguousarray(p1).ravel())
    return m2.reshape(shape), m11.reshape(shape)


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
    (``(2/pi) arcsin(2 p1 / (1 + 2 q1))``, Williams 1997), the trapezoid rule of
    :mod:`.quadrature` otherwise (see the module notes; 1e-10 for q1 <= 16).

    Parameters
    ----------
    q1, p1 : array_like
        Pre-activation variance (> 0) and covariance (``|p1| <= q1``).
    activation : str or callable
        A name in :data:`ACTIVATIONS` or a numba-jittable scalar function (registered on
        first use, see :func:`register_activation`).

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
    return scalar_or_array(_array_derivative_moment(spec.code)(flat).reshape(q1.shape))


def dense_map(q, p, sigma_w2=0.2, sigma_b2=4e-4):
    r"""A dense layer ``W ~ N(0, sigma_w2 / fan_in)``, bias ``N(0, sigma_b2)``.

    .. math:: q' = \sigma_w^2 q + \sigma_b^2, \qquad p' = \sigma_w^2 p + \sigma_b^2

    ``q'`` and ``p'`` are broadcast to the common shape of all inputs.
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
    for ReLU).

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
