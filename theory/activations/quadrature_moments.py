r"""Gaussian moments of smooth activations by the trapezoid rule: tanh, GELU, SiLU, user functions.

For a centred Gaussian pair (u, v) with ``Var = q1`` and ``Cov = p1``, write
``a = sqrt|p1|``, ``b = sqrt(q1 - |p1|)`` and ``u = a w + b e1``,
``v = sign(p1) a w + b e2`` (w, e1, e2 independent standard normals):

.. math:: E[\phi(u)\phi(v)] = E_w\left[g(w)\, g(\mathrm{sign}(p_1) w)\right], \qquad
          g(w) = E_e[\phi(a w + b e)] .

Both one-dimensional expectations use the Gaussian-weighted trapezoid rule of
:mod:`remprop.theory.quadrature`, with a step set separately by ``a`` (outer) and ``b``
(inner) from the analyticity strip of phi. Symmetry halves the work: an activation is
split as ``phi(x) = lambda x + r(x)`` with ``r`` odd (tanh), even (GELU and SiLU:
``r(x) = (x/2) erf(x/sqrt 2)`` and ``(x/2) tanh(x/2)``, ``lambda = 1/2``) or general;
then ``E[phi(u) phi(v)] = lambda^2 p1 + E[r(u) r(v)]`` (the cross terms vanish by
symmetry) and ``g`` is odd or even, so only the outer nodes ``w >= 0`` are needed. For
tanh and SiLU the inner sums need no transcendental function at all: with equally spaced
nodes, ``exp(-2(x + y)) = exp(-2x) exp(-2y)`` is a product of precomputed factors, and a
pair of nodes ``+-y`` combines into a single division,

.. math:: \tanh(x + y) + \tanh(x - y) = \frac{2 (2 + P C)}{1 + P C + P^2} - 2,
          \quad P = e^{-2x},\ C = 2\cosh 2y .

Beyond ``q1 = 900``, where the products of exponentials would overflow, SiLU keeps its
cost down differently (``_silu_remainder_cross_wide``): the inner nodes more than 44 from
an outer node, where the remainder is exactly ``|z|/2`` in float64, are summed in closed
form, the rest mostly without a transcendental function per pair. The sums are the plain ones on
the same nodes, rearranged (equal to 1e-15 of ``E[silu^2]``), in 5-190 microseconds instead
of 15-1200 (a stream without pre-norm, whose MLP sees ``q1`` growing with depth: a warm
``remprop check olmo-2-1b`` 16.9 s -> 6.7 s, the same report).

Accuracy: 1e-10 absolute or better for the built-in smooth activations while the
pre-activation variance q1 is at most 16 (checked against the erf closed form,
a 4x finer rule and Monte Carlo in tests/test_activations_general.py); beyond
``q1 ~ 100`` (tanh) the node cap of :mod:`remprop.theory.quadrature` limits it (SiLU:
relative 5e-7 at ``q1 = 1e4``, 2e-5 at ``1e5``, against nested adaptive quadrature).

References
----------
D. Hendrycks & K. Gimpel, "Gaussian error linear units (GELUs)", arXiv 1606.08415.
S. Elfwing, E. Uchibe & K. Doya, "Sigmoid-weighted linear units", Neural Netw. 2018 (SiLU).
L. N. Trefethen & J. A. C. Weideman, "The exponentially convergent trapezoidal rule",
SIAM Review 56, 385 (2014).
"""
from __future__ import annotations

import math

import numpy as np
from numba.core import types
from numba.extending import overload, register_jitable

from ..quadrature import HALF_WIDTH, trapezoid_half_nodes

__all__ = [
    "ODD", "EVEN", "GENERAL", "capped_covariance", "make_quadrature_moments", "make_derivative_moment",
    "tanh_moments_core", "silu_moments_core", "gelu_moments_core",
    "tanh_derivative_moment_core", "silu_derivative_moment_core", "gelu_derivative_moment_core",
    "tanh_function", "silu_function", "gelu_function",
]

_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_SQRT1_2 = math.sqrt(0.5)
#: Parity of the remainder r(x) = phi(x) - slope * x.
ODD, EVEN, GENERAL = 0, 1, 2

#: Half-widths of the analyticity strips (they set the trapezoid steps).
_TANH_STRIP = 0.5 * math.pi  # poles at +-i pi/2
_SILU_STRIP = math.pi  # poles at +-i pi
_GELU_STRIP = 2.2  # entire; effective strip calibrated on the 1e-11 target
_FACTORISED_Q1_MAX = 900.0  # exp factors stay finite: |2 x| <= 2 L sqrt(2 q1) < 700


# ---------------------------------------------------------------------------------
# Trapezoid rules
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
def _covariance_rules(q1, p1, strip):
    """The outer and inner half rules of ``E[phi(u) phi(v)]`` (module notes).

    Returns ``(a, h_out, w_out, b, h_in, w_in, sign)`` with ``a = sqrt|p1|`` (outer nodes
    ``a i h_out``), ``b = sqrt(q1 - |p1|)`` (inner nodes ``b j h_in``), sign of p1.
    """
    c = abs(p1)
    if c > q1:
        c = q1
    sign = 1.0 if p1 >= 0.0 else -1.0
    a, b = math.sqrt(c), math.sqrt(q1 - c)
    h_out, w_out = _half_rule(trapezoid_half_nodes(a, strip))
    h_in, w_in = _half_rule(trapezoid_half_nodes(b, strip))
    return a, h_out, w_out, b, h_in, w_in, sign


@register_jitable
def _mean_square(integrand, q1, strip, symmetric):
    """``E[f(u)^2]``, ``u ~ N(0, q1)``, by the symmetric half rule: ``f`` is ``integrand``, the code of a
    built-in integrand or a user-registered activation's compiled function (:func:`_integrand`).

    ``symmetric``: ``f`` is odd or even, so ``f(-x)^2 = f(x)^2`` and only the nodes
    ``x >= 0`` are evaluated.
    """
    s = math.sqrt(q1)
    h, w = _half_rule(trapezoid_half_nodes(s, strip))
    f0 = _integrand(integrand, 0.0)
    acc = w[0] * f0 * f0
    for j in range(1, w.size):
        fp = _integrand(integrand, s * j * h)
        if symmetric:
            acc += w[j] * (2.0 * fp * fp)
        else:
            fm = _integrand(integrand, -s * j * h)
            acc += w[j] * (fp * fp + fm * fm)
    return acc


# ---------------------------------------------------------------------------------
# Any activation phi(x) = slope x + r(x)
# ---------------------------------------------------------------------------------
@register_jitable
def _plain_moments(integrand, parity, slope, strip, q1, p1):
    """``(E[phi(u)^2], E[phi(u) phi(v)])`` of ``phi(x) = slope x + r(x)`` by the plain sums
    (module notes): ``r`` is ``integrand``, the code of a built-in integrand or a user-registered
    activation's compiled function (:func:`_integrand`), with the given parity (ODD, EVEN or
    GENERAL); ``strip`` its analyticity half-width (sets the trapezoid steps)."""
    m2 = slope * slope * q1 + _mean_square(integrand, q1, strip, parity != GENERAL)
    a, h_out, w_out, b, h_in, w_in, sign = _covariance_rules(q1, p1, strip)
    m_out = w_out.size - 1
    if parity == EVEN:
        first = 0
    elif parity == ODD:
        first = 1
    else:
        first = -m_out
    g_values = np.zeros(2 * m_out + 1)
    for i in range(first, m_out + 1):
        x = a * i * h_out
        g = w_in[0] * _integrand(integrand, x)
        for j in range(1, w_in.size):
            y = b * j * h_in
            g += w_in[j] * (_integrand(integrand, x + y) + _integrand(integrand, x - y))
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


def make_quadrature_moments(remainder, parity, slope, strip):
    """Jittable ``(q1, p1) -> moments`` of ``phi(x) = slope x + remainder(x)`` (a user-registered
    activation's).

    ``remainder`` is a compiled (``numba.njit``) scalar function with the given parity (ODD, EVEN or
    GENERAL); ``strip`` its analyticity half-width (sets the trapezoid steps). The plain sums of the
    built-in activations, compiled once for all of them, with ``remainder`` in place of the
    built-in integrand. Compiled in memory, in the process that registers the activation (never kept
    on disk: ``registry.compiled_user_function``).
    """
    def moments(q1, p1):
        return _plain_moments(remainder, parity, slope, strip, q1, p1)

    return register_jitable(moments)


def make_derivative_moment(derivative, strip):
    """Jittable ``q1 -> E[phi'(u)^2]`` of a user-registered activation by the trapezoid rule
    (``derivative`` compiled; in memory, as :func:`make_quadrature_moments`)."""
    def derivative_moment(q1):
        return _mean_square(derivative, q1, strip, False)

    return register_jitable(derivative_moment)


@register_jitable
def _with_slope(slope, q1, p1, square, cross):
    """The moments of ``phi(x) = slope x + r(x)`` from ``E[r(u)^2]`` and ``E[r(u) r(v)]`` (the cross terms
    vanish by symmetry, module notes), the covariance capped."""
    m2 = slope * slope * q1 + square
    return m2, capped_covariance(m2, slope * slope * p1 + cross)


# ---------------------------------------------------------------------------------
# tanh: odd, poles at +-i pi/2
# ---------------------------------------------------------------------------------
@register_jitable
def tanh_function(x):
    """tanh(x)."""
    return math.tanh(x)


@register_jitable
def _tanh_cross(q1, p1):
    """E[tanh(u) tanh(v)] by the factorised sums (q1 <= 900)."""
    a, h_out, w_out, b, h_in, w_in, sign = _covariance_rules(q1, p1, _TANH_STRIP)
    cosh2 = np.empty(w_in.size)
    for j in range(1, w_in.size):
        cosh2[j] = 2.0 * math.cosh(2.0 * b * j * h_in)
    acc = 0.0
    for i in range(1, w_out.size):
        big_p = math.exp(-2.0 * a * i * h_out)
        p2 = big_p * big_p
        g = w_in[0] * (2.0 / (1.0 + big_p) - 1.0)
        for j in range(1, w_in.size):
            pc = big_p * cosh2[j]
            g += w_in[j] * (2.0 * (2.0 + pc) / (1.0 + pc + p2) - 2.0)
        acc += w_out[i] * g * g
    return sign * 2.0 * acc


@register_jitable
def _tanh_positive(x):
    """tanh(x) for x >= 0 from exp(-2x) (no overflow)."""
    return 2.0 / (1.0 + math.exp(-2.0 * x)) - 1.0


@register_jitable
def tanh_moments_core(q1, p1):
    """(E[tanh(u)^2], E[tanh(u) tanh(v)]) by the factorised trapezoid rule (``q1 <= 900``; beyond, where
    the exp factors would overflow, the plain sums)."""
    if q1 > _FACTORISED_Q1_MAX:
        return _plain_moments(TANH_FUNCTION, ODD, 0.0, _TANH_STRIP, q1, p1)
    return _with_slope(0.0, q1, p1, _mean_square(TANH_POSITIVE, q1, _TANH_STRIP, True), _tanh_cross(q1, p1))


# ---------------------------------------------------------------------------------
# SiLU: x/2 + (x/2) tanh(x/2), remainder even, poles at +-i pi
# ---------------------------------------------------------------------------------
@register_jitable
def silu_function(x):
    """x / (1 + e^-x), without overflow for x < 0."""
    return x / (1.0 + math.exp(-x)) if x >= 0.0 else x * math.exp(x) / (1.0 + math.exp(x))


#: Beyond these |x| the remainders' tanh(x/2) and erf(x/sqrt 2) round to +-1 in float64 (from |x| = 38.2
#: and 8.4; tests/test_activations_general.py), so the remainder is |x|/2 exactly: the plain sums of
#: a large pre-activation variance (node cap of the trapezoid rule, most nodes far out) skip the call.
_SILU_FLAT, _GELU_FLAT = 44.0, 9.0


@register_jitable
def _silu_remainder(x):
    """(x/2) tanh(x/2) (|x|/2 where tanh(x/2) rounds to +-1)."""
    if abs(x) > _SILU_FLAT:
        return 0.5 * abs(x)
    return 0.5 * x * math.tanh(0.5 * x)


@register_jitable
def _silu_remainder_cross(q1, p1):
    """E[r(u) r(v)] of the SiLU remainder r(x) = (x/2) tanh(x/2) by the factorised sums."""
    a, h_out, w_out, b, h_in, w_in, _ = _covariance_rules(q1, p1, _SILU_STRIP)
    cosh2 = np.empty(w_in.size)
    sinh2 = np.empty(w_in.size)
    for j in range(1, w_in.size):
        y = b * j * h_in
        cosh2[j] = 2.0 * math.cosh(y)
        sinh2[j] = 2.0 * math.sinh(y) * y
    acc = 0.0
    for i in range(0, w_out.size):
        x = a * i * h_out
        big_p = math.exp(-x)
        p2 = big_p * big_p
        g = w_in[0] * (x / (1.0 + big_p) - 0.5 * x)
        for j in range(1, w_in.size):
            # e(x + y) + e(x - y) = (2x + x P C + y P D) / (1 + P C + P^2) - x
            pc = big_p * cosh2[j]
            g += w_in[j] * ((2.0 * x + x * pc + big_p * sinh2[j]) / (1.0 + pc + p2) - x)
        acc += (w_out[i] if i == 0 else 2.0 * w_out[i]) * g * g
    return acc


#: Largest inner step whose growth factor ``exp(step)`` the windowed SiLU sums carry along a window.
_RUNNING_STEP_MAX = 8.0


@register_jitable
def _silu_remainder_cross_wide(q1, p1):
    r"""E[r(u) r(v)] of the SiLU remainder for a large pre-activation variance (``q1 > 900``).

    The sums of :func:`make_quadrature_moments` (the same nodes, the same values up to
    round-off), rearranged so that their cost does not grow with the node count squared. For
    ``x, y >= 0`` a pair of inner nodes is ``r(x + y) + r(x - y) = max(x, y) - k(x + y) -
    k(x - y)`` with ``r(z) = |z|/2 - k(z)``, ``k(z) = |z| / (1 + e^{|z|})``, and ``k`` is dropped
    where ``|z| > 44`` (where the remainder's own flat branch, ``|z|/2``, holds). So for an outer
    node ``x`` the inner nodes more than 44 below ``x`` add ``x`` times their weights, those
    more than 44 above add their weighted ``y`` (prefix sums, once per call), and only the window
    ``|x - y| <= 44`` is summed term by term, with ``e^{y - x}`` carried from node to node by
    one multiplication (a transcendental function per pair only near the origin, where
    ``x + y <= 44``). At ``q1 = 900`` about a tenth of the pairs lie in the window, at
    ``q1 = 1e5`` a hundredth.
    """
    a, h_out, w_out, b, h_in, w_in, _ = _covariance_rules(q1, p1, _SILU_STRIP)
    m_in = w_in.size - 1
    step = b * h_in
    weight_sum = np.zeros(m_in + 1)  # sums over the inner nodes 1..j of w and of w y
    moment_sum = np.zeros(m_in + 1)
    for j in range(1, m_in + 1):
        weight_sum[j] = weight_sum[j - 1] + w_in[j]
        moment_sum[j] = moment_sum[j - 1] + w_in[j] * (j * step)
    growth = math.exp(step) if step <= _RUNNING_STEP_MAX else 0.0
    acc = 0.0
    for i in range(0, w_out.size):
        x = a * i * h_out
        at_x = _silu_remainder_positive(x)
        g = w_in[0] * at_x
        if step == 0.0:  # full correlation: every inner node at y = 0
            g += weight_sum[m_in] * 2.0 * at_x
        else:
            # the window lo..hi (empty, lo = m_in + 1, where every node lies more than 44 below x)
            lo = min(max(1, int(math.floor((x - _SILU_FLAT) / step))), m_in + 1)
            hi = min(m_in, int(math.ceil((x + _SILU_FLAT) / step)))
            g += x * weight_sum[lo - 1] + (moment_sum[m_in] - moment_sum[hi])
            t = math.exp(lo * step - x)  # e^{y - x} at y = y_lo, |y_lo - x| <= 44 + step
            for j in range(lo, hi + 1):
                y = j * step
                if growth == 0.0:
                    t = math.exp(min(y - x, 700.0))
                pair = max(x, y)
                z = abs(x - y)
                if z <= _SILU_FLAT:  # k(x - y) = z / (1 + e^z), e^z = t or 1 / t
                    pair -= z * t / (t + 1.0) if x >= y else z / (1.0 + t)
                if x + y <= _SILU_FLAT:
                    pair -= (x + y) / (1.0 + math.exp(x + y))
                g += w_in[j] * pair
                t *= growth
        acc += (w_out[i] if i == 0 else 2.0 * w_out[i]) * g * g
    return acc


@register_jitable
def _silu_remainder_positive(x):
    """(x/2) tanh(x/2) = x / (1 + e^-x) - x/2 for x >= 0."""
    return x / (1.0 + math.exp(-x)) - 0.5 * x


@register_jitable
def silu_moments_core(q1, p1):
    """(E[silu(u)^2], E[silu(u) silu(v)]) by the factorised trapezoid rule (``q1 <= 900``; beyond, the
    same sums rearranged, ``_silu_remainder_cross_wide``)."""
    cross = _silu_remainder_cross_wide(q1, p1) if q1 > _FACTORISED_Q1_MAX else _silu_remainder_cross(q1, p1)
    return _with_slope(0.5, q1, p1, _mean_square(SILU_POSITIVE, q1, _SILU_STRIP, True), cross)


@register_jitable
def _silu_derivative(x):
    sig = 1.0 / (1.0 + math.exp(-x)) if x >= 0.0 else math.exp(x) / (1.0 + math.exp(x))
    return sig * (1.0 + x * (1.0 - sig))


# ---------------------------------------------------------------------------------
# GELU: x/2 + (x/2) erf(x / sqrt 2), remainder even, entire
# ---------------------------------------------------------------------------------
@register_jitable
def gelu_function(x):
    """x Phi(x) = x erfc(-x / sqrt 2) / 2."""
    return 0.5 * x * math.erfc(-x * _SQRT1_2)


@register_jitable
def _gelu_remainder(x):
    """(x/2) erf(x / sqrt 2) (|x|/2 where erf rounds to +-1)."""
    if abs(x) > _GELU_FLAT:
        return 0.5 * abs(x)
    return 0.5 * x * math.erf(x * _SQRT1_2)


@register_jitable
def _gelu_derivative(x):
    return 0.5 * math.erfc(-x * _SQRT1_2) + x * _INV_SQRT_2PI * math.exp(-0.5 * x * x)


@register_jitable
def _tanh_derivative(x):
    t = math.tanh(x)
    return 1.0 - t * t


@register_jitable
def gelu_moments_core(q1, p1):
    """(E[gelu(u)^2], E[gelu(u) gelu(v)]) by the trapezoid rule (even remainder (x/2) erf(x/sqrt 2))."""
    return _plain_moments(GELU_REMAINDER, EVEN, 0.5, _GELU_STRIP, q1, p1)


@register_jitable
def tanh_derivative_moment_core(q1):
    """E[(1 - tanh(u)^2)^2] by the trapezoid rule."""
    return _mean_square(TANH_DERIVATIVE, q1, _TANH_STRIP, False)


@register_jitable
def silu_derivative_moment_core(q1):
    """E[silu'(u)^2] by the trapezoid rule."""
    return _mean_square(SILU_DERIVATIVE, q1, _SILU_STRIP, False)


@register_jitable
def gelu_derivative_moment_core(q1):
    """E[gelu'(u)^2] by the trapezoid rule (gelu'(x) = Phi(x) + x N(x))."""
    return _mean_square(GELU_DERIVATIVE, q1, _GELU_STRIP, False)


# ---------------------------------------------------------------------------------
# The built-in integrands, by code
# ---------------------------------------------------------------------------------
#: Codes of the built-in integrands of the trapezoid rules (:func:`_integrand`).
#: ``SILU_REMAINDER`` (the plain sums of SiLU) is what its rearranged sums beyond ``q1 = 900`` equal
#: (tests/test_activations_general.py).
(TANH_FUNCTION, TANH_POSITIVE, SILU_POSITIVE, SILU_REMAINDER, GELU_REMAINDER, TANH_DERIVATIVE, SILU_DERIVATIVE,
 GELU_DERIVATIVE) = range(1, 9)


@register_jitable
def _builtin_integrand(kind, x):
    """The built-in integrand of code ``kind`` at ``x`` (NaN for an unknown code)."""
    if kind == TANH_FUNCTION:
        return tanh_function(x)
    if kind == TANH_POSITIVE:
        return _tanh_positive(x)
    if kind == SILU_POSITIVE:
        return _silu_remainder_positive(x)
    if kind == SILU_REMAINDER:
        return _silu_remainder(x)
    if kind == GELU_REMAINDER:
        return _gelu_remainder(x)
    if kind == TANH_DERIVATIVE:
        return _tanh_derivative(x)
    if kind == SILU_DERIVATIVE:
        return _silu_derivative(x)
    if kind == GELU_DERIVATIVE:
        return _gelu_derivative(x)
    return math.nan


def _integrand(integrand, x):
    """The integrand of a trapezoid rule at ``x``: for an integer ``integrand`` the built-in of that code
    (:func:`_builtin_integrand`), else ``integrand(x)`` (a user-registered activation's compiled function).

    Compiled, the choice is made on the argument's type while the rule is compiled: the rules
    (:func:`_mean_square`, :func:`_plain_moments`) are compiled once for every built-in activation
    (an integer code, kept on disk inside their callers) and once per user activation (its function,
    in memory only), which then compiles none of the built-in integrands."""
    if isinstance(integrand, (int, np.integer)):
        return _builtin_integrand(integrand, x)
    return integrand(x)


@overload(_integrand)
def _integrand_overload(integrand, x):
    if isinstance(integrand, types.Integer):
        return lambda integrand, x: _builtin_integrand(integrand, x)
    return lambda integrand, x: integrand(x)
