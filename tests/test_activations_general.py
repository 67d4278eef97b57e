"""Gaussian kernels of general activations (tanh, erf, GELU, SiLU, user functions).

References used: closed forms (erf arcsine kernel, ReLU arc-cosine kernel, linear), an
independent NumPy double sum on a 6x finer grid, scipy dblquad, and Monte Carlo.
"""
import json
import math

import numba
import numpy as np
import pytest
from scipy import integrate
from scipy.special import erf

from remprop.theory import (
    ACTIVATIONS,
    Architecture,
    activation_moments,
    derivative_moment,
    mlp_map,
    propagate,
    register_activation,
)
from remprop.theory.quadrature import gauss_hermite, gaussian_trapezoid

from kernel_checks import assert_propagate_matches_block

PHI = {
    "tanh": np.tanh,
    "erf": erf,
    "gelu": lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2))),
    "silu": lambda x: x / (1 + np.exp(-x)),
    "relu": lambda x: np.maximum(x, 0.0),
    "linear": lambda x: x,
}
Q1S = [0.05, 0.2, 1.0, 4.0, 16.0]
CS = [-0.95, -0.3, 0.0, 0.5, 0.9, 0.999, 1.0]


def fine_reference(phi, q1, p1, m=720):
    """E[phi(u)^2], E[phi(u) phi(v)] by a plain nested trapezoid sum (step 9/720 = 0.0125)."""
    z, w = gaussian_trapezoid(m, 9.0)
    a, b = math.sqrt(abs(p1)), math.sqrt(q1 - abs(p1))
    m2 = np.sum(w * phi(math.sqrt(q1) * z) ** 2)
    g = (phi(a * z[:, None] + b * z[None, :]) * w[None, :]).sum(axis=1)
    return m2, np.sum(w * g * (g if p1 >= 0 else g[::-1]))


def erf_closed_form(q1, p1):
    # Williams (1997): E[erf(u) erf(v)] = (2/pi) arcsin(2 p1 / sqrt((1 + 2 q1)^2))
    return (2 / math.pi) * math.asin(2 * q1 / (1 + 2 * q1)), (2 / math.pi) * math.asin(2 * p1 / (1 + 2 * q1))


@pytest.fixture(scope="module")
def user_erf():
    def my_erf(x):
        return math.erf(x)

    def my_erf_derivative(x):
        return 2.0 / math.sqrt(math.pi) * math.exp(-x * x)

    return register_activation("test:erf", my_erf, derivative=my_erf_derivative, parity="odd",
                               replace=True)


# --- accuracy -----------------------------------------------------------------------------
def test_quadrature_reproduces_the_erf_closed_form(user_erf):
    # The general quadrature path (a user-registered erf, declared odd) against the arcsine
    # kernel: 1e-10 absolute over variances 0.05..16 and correlations -0.95..1.
    for q1 in Q1S:
        for c in CS:
            got = activation_moments(q1, c * q1, user_erf)
            want = erf_closed_form(q1, c * q1)
            assert abs(got[0] - want[0]) <= 1e-10 and abs(got[1] - want[1]) <= 1e-10, (q1, c)
            # the built-in erf uses the closed form itself
            np.testing.assert_allclose(activation_moments(q1, c * q1, "erf"), want, rtol=1e-14)


@pytest.mark.parametrize("name", ["tanh", "gelu", "silu"])
def test_smooth_activations_against_a_fine_independent_sum(name):
    # Reference: nested trapezoid sums with step 0.0125 on [-9, 9] (error < 1e-13 for these
    # variances: the strip bound exp(-2 pi d / (s h)) is tiny), written in plain NumPy.
    for q1 in Q1S:
        for c in CS:
            got = activation_moments(q1, c * q1, name)
            want = fine_reference(PHI[name], q1, c * q1)
            assert abs(got[0] - want[0]) <= 1e-10 and abs(got[1] - want[1]) <= 1e-10, (q1, c, got, want)


def test_tanh_against_scipy_dblquad():
    # A third, adaptive method at two points.
    for q1, c in [(1.0, 0.6), (3.0, -0.4)]:
        p1 = c * q1
        det = q1 * q1 - p1 * p1
        density = lambda v, u: math.exp(-(q1 * u * u - 2 * p1 * u * v + q1 * v * v) / (2 * det)) / (
            2 * math.pi * math.sqrt(det))
        value, err = integrate.dblquad(lambda v, u: math.tanh(u) * math.tanh(v) * density(v, u),
                                       -12 * math.sqrt(q1), 12 * math.sqrt(q1),
                                       -12 * math.sqrt(q1), 12 * math.sqrt(q1),
                                       epsabs=1e-12, epsrel=1e-12)
        assert abs(activation_moments(q1, p1, "tanh")[1] - value) <= 1e-10 + err


@pytest.mark.parametrize("name", ["tanh", "gelu", "silu", "erf"])
def test_against_monte_carlo(name):
    # 4e5 Gaussian pairs: |quadrature - mean| <= 5 standard errors (false alarm 6e-7 each).
    rng = np.random.default_rng(7)
    q1, p1 = 1.3, 0.5
    u = rng.standard_normal(400_000) * math.sqrt(q1)
    v = (p1 / q1) * u + rng.standard_normal(u.size) * math.sqrt(q1 - p1 * p1 / q1)
    for sample, value in zip((PHI[name](u) ** 2, PHI[name](u) * PHI[name](v)),
                             activation_moments(q1, p1, name)):
        se = sample.std() / math.sqrt(sample.size)
        assert abs(sample.mean() - value) <= 5 * se


@pytest.mark.parametrize("name", ["tanh", "silu"])
def test_factorised_sums_equal_the_plain_sums(name):
    # Up to q1 = 900 tanh and SiLU use the factorised inner sums (exp of a sum as a product
    # of precomputed factors), above it the plain sums of the general rule on the same nodes:
    # equal in exact arithmetic, so continuous across the switch up to round-off (a few
    # hundred terms of size <= 1, each ~1e-16 relative: 1e-12 leaves a wide margin).
    for c in [-0.6, 0.0, 0.4, 0.97]:
        below = activation_moments(900.0, c * 900.0, name)
        above = activation_moments(900.0 * (1 + 1e-15), c * 900.0 * (1 + 1e-15), name)
        np.testing.assert_allclose(above, below, rtol=1e-12, atol=1e-12 * below[0])


def test_silu_sums_beyond_the_factorised_range_equal_the_plain_sums():
    # Above q1 = 900 SiLU sums the pairs of inner nodes more than 44 from the outer node in closed
    # form (the remainder's flat branch |z|/2) and the rest term by term without a transcendental
    # function per pair: the plain sums of the general rule on the same nodes, rearranged. Equal in
    # exact arithmetic; ~66000 terms of size <= max(x, y), each rounded to ~1e-16 relative, give
    # <= 1e-12 of E[silu^2] (measured: <= 1e-15).
    from remprop.theory.activations import quadrature_moments as quadrature

    @numba.njit
    def both(q1, p1):
        plain = quadrature._plain_moments(quadrature.SILU_REMAINDER, quadrature.EVEN, 0.5, quadrature._SILU_STRIP,
                                          q1, p1)
        return plain, quadrature.silu_moments_core(q1, p1)

    for q1 in [900.5, 2e3, 1e4, 1e6, 1e12]:
        for c in [-0.6, -0.01, 0.0, 0.5, 0.99, 0.99999, 1.0]:
            want, got = both(q1, c * q1)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 * want[0])


def test_polynomial_and_kinked_user_activations():
    # x is integrated exactly up to the Gaussian tail (e^-32); ReLU has a kink off the
    # nodes, where the trapezoid rule is O(h^2): with strip = 0.05 the step is 8/256 in z,
    # error <= h^2 / 8 * (density <= 0.4) * q1 ~ 5e-5 q1.
    register_activation("test:linear", lambda x: x * 1.0, parity="odd", replace=True)
    register_activation("test:relu", lambda x: x if x > 0.0 else 0.0, strip=0.05, replace=True)
    for q1, c in [(0.5, 0.3), (2.0, -0.7), (1.0, 0.99)]:
        np.testing.assert_allclose(activation_moments(q1, c * q1, "test:linear"), (q1, c * q1),
                                   rtol=1e-13, atol=1e-15)
        got = activation_moments(q1, c * q1, "test:relu")
        want = activation_moments(q1, c * q1, "relu")
        assert abs(got[0] - want[0]) <= 1e-12 * q1  # the kink sits on a node in 1-d
        assert abs(got[1] - want[1]) <= 5e-5 * q1


def test_gauss_hermite_rule():
    nodes, weights = gauss_hermite(12)
    assert weights.sum() == pytest.approx(1.0, rel=1e-14)
    # exact for degree <= 23: E z^(2k) = (2k - 1)!!
    for k in range(12):
        assert np.sum(weights * nodes ** (2 * k)) == pytest.approx(math.prod(range(1, 2 * k, 2)), rel=1e-10)
    # the trapezoid rule beats it for tanh at variance 4 (poles at distance pi/4 in z)
    z, w = gaussian_trapezoid(48)
    reference = fine_reference(np.tanh, 4.0, 0.0)[0]
    gh_nodes, gh_weights = gauss_hermite(97)
    assert abs(np.sum(w * np.tanh(2 * z) ** 2) - reference) < 1e-10
    assert abs(np.sum(gh_weights * np.tanh(2 * gh_nodes) ** 2) - reference) > 1e-7


# --- derivative moments (chi_1) ----------------------------------------------------------
def test_derivative_moments(user_erf):
    for q1 in [0.1, 1.0, 5.0]:
        closed = (4 / math.pi) / math.sqrt(1 + 4 * q1)
        assert derivative_moment(q1, "erf") == pytest.approx(closed, rel=1e-14)
        assert derivative_moment(q1, user_erf) == pytest.approx(closed, abs=1e-10)
        z, w = gaussian_trapezoid(720, 9.0)
        tanh_ref = np.sum(w * (1 - np.tanh(math.sqrt(q1) * z) ** 2) ** 2)
        assert derivative_moment(q1, "tanh") == pytest.approx(tanh_ref, abs=1e-10)
    # finite-difference derivative of a user function (error ~1e-10)
    register_activation("test:tanh-fd", lambda x: math.tanh(x), parity="odd", replace=True)
    assert derivative_moment(0.7, "test:tanh-fd") == pytest.approx(derivative_moment(0.7, "tanh"), abs=1e-9)
    assert derivative_moment(1.0, "relu") == 0.5 and derivative_moment(1.0, "linear") == 1.0


# --- maps and kernels --------------------------------------------------------------------
def test_norm_map_of_non_homogeneous_activations():
    # For tanh, q2 = sigma_w2 E[tanh(u)^2] + sigma_b2 is not proportional to q1 (unlike
    # ReLU's q1/2): check the MLP map against its definition.
    q1 = 2.0 * 1.5 + 0.1
    m2, m11 = activation_moments(q1, 2.0 * 0.3 + 0.1, "tanh")
    q2, p2 = mlp_map(1.5, 0.3, sigma_w2=2.0, sigma_b2=0.1, activation="tanh")
    assert q2 == pytest.approx(2.0 * m2 + 0.1, rel=1e-14) and p2 == pytest.approx(2.0 * m11 + 0.1, rel=1e-14)
    assert q2 / 1.5 != pytest.approx(mlp_map(3.0, 0.3, sigma_w2=2.0, sigma_b2=0.1, activation="tanh")[0] / 3.0,
                                      rel=1e-3)


@pytest.mark.parametrize("activation", ["tanh", "erf", "gelu", "silu"])
def test_kernels_match_the_component_composition(activation):
    # the block order itself is checked for every structural choice in test_theory_kernels
    arch = Architecture(norm="pre", activation=activation, sigma_w2=1.3, sigma_b2=0.05)
    assert_propagate_matches_block(arch, [0.4, 2.0], 8, rho0=0.3)


def test_callable_activation_in_an_architecture():
    def softsign(x):
        return x / (1.0 + abs(x))

    arch = Architecture(activation=softsign)
    assert arch.activation.startswith("user:") and arch.activation in ACTIVATIONS
    json.dumps(arch.to_dict())
    assert Architecture(activation=softsign).activation == arch.activation  # registered once
    # kernels (the cached engine, the user's moments passed in compiled) == component composition
    traj = propagate(arch, 0.5, 4, rho0=0.2)
    q, p = 1.0, 0.2
    for layer in range(4):
        q, p = arch.block(0.5)(q, p)
        assert traj.rho[layer + 1] == pytest.approx(p / q, rel=1e-12)
    # accuracy: softsign's second derivative jumps at 0, so the rule converges only
    # algebraically (~h^4 in 1-d); the default strip (pi/2) leaves errors ~1e-4, a narrow
    # strip (step 8/256 in z) brings them below 1e-6 (measured <= 1e-7; the reference
    # sum itself, step 0.0125, is good to ~1e-8).
    register_activation("test:softsign-fine", softsign, strip=0.05, replace=True)
    for q1, c in [(0.2, 0.5), (1.0, -0.4), (4.0, 0.9)]:
        want = fine_reference(lambda x: x / (1 + np.abs(x)), q1, c * q1)
        np.testing.assert_allclose(activation_moments(q1, c * q1, "test:softsign-fine"), want, atol=1e-6)


@pytest.mark.parametrize("call, name", [
    (lambda: Architecture(activation="swish"), "activation"),
    (lambda: Architecture(activation=3), "activation"),
    (lambda: activation_moments(1.0, 0.0, "swish"), "activation"),
    (lambda: mlp_map(1.0, 0.0, activation=None), "activation"),
    (lambda: register_activation("x", 3.0), "function"),
    (lambda: register_activation("x", lambda x: [x]), "function"),
    (lambda: register_activation("x", lambda x, y: x), "function"),
    (lambda: register_activation("x", math.tanh), "function"),  # a builtin: not jittable
    (lambda: register_activation("tanh", lambda x: x), "name"),
    (lambda: register_activation("", lambda x: x), "name"),
    (lambda: register_activation("x", lambda x: x, parity="both"), "parity"),
    (lambda: register_activation("x", lambda x: x, strip=0.0), "strip"),
    (lambda: register_activation("x", lambda x: x, derivative=1.0), "derivative"),
])
def test_bad_activations_are_named(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_flat_remainders_are_the_formula_bit_for_bit():
    """The SiLU and GELU remainders return |x|/2 beyond |x| = 44 and 9 without calling tanh or erf; there
    the formula (x/2) tanh(x/2), (x/2) erf(x/sqrt 2) gives exactly |x|/2 in float64 (compiled, as the
    kernels evaluate it), and the shortcut starts well inside that range (exact from about 38.2 and 8.4)."""
    from numba import njit

    from remprop.theory.activations import quadrature_moments as qm

    @njit
    def compare(remainder, formula, xs):
        bad = 0
        for x in xs:
            if remainder(x) != formula(x):
                bad += 1
        return bad

    @njit
    def silu(x):
        return 0.5 * x * math.tanh(0.5 * x)

    @njit
    def gelu(x):
        return 0.5 * x * math.erf(x * 0.7071067811865476)

    for remainder, formula, flat, exact_from in ((qm._silu_remainder, silu, qm._SILU_FLAT, 38.2),
                                                 (qm._gelu_remainder, gelu, qm._GELU_FLAT, 8.4)):
        xs = np.concatenate([np.linspace(0.0, 2 * flat, 400001), np.geomspace(flat, 1e300, 20001)])
        xs = np.concatenate([xs, -xs, np.nextafter([flat, -flat], [np.inf, -np.inf])])
        assert compare(njit(remainder), formula, xs) == 0
        assert flat > exact_from and formula(exact_from) == 0.5 * exact_from
