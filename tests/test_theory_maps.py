"""Closed forms, limits and identities of the elementary maps (docs/theory.md sections 3-4).

Each public map is also compared with the scalar reference (``tests/reference.py``) over
random inputs, to 1e-12 relative (same float64 closed forms on both sides).
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference as ref
from remprop.theory import (
    activation_moments,
    components as C,
    beta_critical,
    dense_map,
    gain_controlled_attention_map,
    layernorm_map,
    mlp_map,
    participation_ratio,
    relu_kernel,
    skip_map,
    softmax_attention_map,
)

TOL = 1e-12


def floats(low, high):
    return st.floats(low, high, allow_nan=False, allow_infinity=False)


@st.composite
def simplex(draw, q_low=1e-3, q_high=10.0):
    """(q, p) of a token simplex with rho in [0, 1] (the T -> infinity domain)."""
    q = draw(floats(q_low, q_high))
    rho = draw(floats(0.0, 1.0))
    return q, q * rho


def close(a, b, scale=None):
    if math.isinf(b):
        return a == b
    scale = max(abs(b), 1e-300) if scale is None else scale
    return abs(a - b) <= TOL * scale


# --- critical beta --------------------------------------------------------------------
def test_critical_beta_of_orthogonal_normalised_tokens_is_sqrt_two():
    assert abs(beta_critical(1.0, 0.0) - math.sqrt(2.0)) <= 1e-15


def test_critical_beta_of_collapsed_tokens_is_infinite():
    assert beta_critical(1.0, 1.0) == math.inf
    assert beta_critical(2.5, 2.5) == math.inf


def test_critical_beta_broadcasts_and_matches_reference():
    q = np.array([[0.5], [1.0], [3.0]])
    p = np.array([-0.2, 0.0, 0.25, 0.5])
    got = beta_critical(q, p)
    assert got.shape == (3, 4)
    for i in range(3):
        for j in range(4):
            assert close(got[i, j], ref.beta_critical(q[i, 0], p[j]))


@settings(deadline=None)
@given(simplex(), floats(0.05, 10.0))
def test_critical_beta_scales_like_a_temperature(qp, scale):
    """beta_c(s q, s p) = beta_c(q, p) / s: the REM depends on beta^2 q (q - p) only."""
    q, p = qp
    if p == q or scale * p == scale * q:
        # collapsed tokens (beta_c = inf), also where q and p one ulp apart round to one value
        # once scaled (q = 1 - eps, p = 1 - 2 eps, scale 5: hypothesis found it)
        assert beta_critical(scale * q, scale * p) == np.inf
        return
    # q - p cancels: its relative rounding error is up to ~2 eps q / (q - p) (on each side),
    # and beta_c = sqrt(2 / (q (q - p))) halves relative errors.
    rounding = 2.3e-16 * (2 + 2 * q / (q - p))
    want = beta_critical(q, p) / scale
    assert abs(beta_critical(scale * q, scale * p) - want) <= (TOL + rounding) * want


# --- participation ratio --------------------------------------------------------------
@settings(deadline=None)
@given(simplex(), floats(1e-3, 1.0 - 1e-9))
def test_participation_ratio_vanishes_below_beta_c(qp, fraction):
    q, p = qp
    beta_c = beta_critical(q, p)
    if not math.isfinite(beta_c):
        return
    assert participation_ratio(fraction * beta_c, q, p) == 0.0
    assert participation_ratio(beta_c, q, p) == 0.0


@settings(deadline=None)
@given(simplex(), floats(1.0 + 1e-6, 1e6))
def test_participation_ratio_above_beta_c_is_one_minus_ratio(qp, factor):
    q, p = qp
    beta_c = beta_critical(q, p)
    if not math.isfinite(beta_c):
        return
    beta = factor * beta_c
    y2 = participation_ratio(beta, q, p)
    assert 0.0 < y2 < 1.0
    assert abs(y2 - (1.0 - beta_c / beta)) <= 1e-15


def test_participation_ratio_tends_to_one_at_infinite_beta():
    betas = np.logspace(1, 12, 12)
    y2 = participation_ratio(betas, 1.0, 0.0)
    assert np.all(np.diff(y2) > 0)
    assert abs(1.0 - y2[-1] - math.sqrt(2.0) / 1e12) <= 1e-15


def test_participation_ratio_broadcasts():
    beta = np.array([[0.5], [1.5], [4.0]])
    p = np.array([0.0, 0.5, 0.9])
    got = participation_ratio(beta, 1.0, p)
    assert got.shape == (3, 3)
    for i in range(3):
        for j in range(3):
            assert close(got[i, j], ref.participation_ratio(beta[i, 0], 1.0, p[j]), 1.0)


# --- arc-cosine kernel of ReLU ---------------------------------------------------------
def test_relu_kernel_special_values():
    assert abs(relu_kernel(0.0) - 1.0 / math.pi) <= 1e-16
    assert relu_kernel(1.0) == 1.0
    assert abs(relu_kernel(-1.0)) <= 1e-16


def test_relu_kernel_derivative_by_central_differences():
    """f'(c) = (pi - arccos c) / pi.

    Central differences with step h err by h^2 |f'''| / 6 + (round-off) ~eps / h, with
    f'''(c) = c / (pi (1 - c^2)^(3/2)). On |c| <= 0.99, |f'''| <= 0.99 / (pi 0.0199^1.5)
    < 113, so h = 1e-5 gives at most 113e-10 / 6 + 2.2e-16 / 1e-5 < 2e-9.
    """
    h = 1e-5
    c = np.linspace(-0.99, 0.99, 397)
    numeric = (relu_kernel(c + h) - relu_kernel(c - h)) / (2 * h)
    exact = (math.pi - np.arccos(c)) / math.pi
    bound = h**2 * np.abs(c) / (math.pi * (1 - c**2) ** 1.5) / 6 + 2 * 2.2e-16 / h
    assert np.all(np.abs(numeric - exact) <= 1.05 * bound + 1e-15)
    # the derivative runs from 0 at c = -1 to 1 at c = 1
    ends = (relu_kernel(np.array([-1.0 + 1e-8, 1.0])) - relu_kernel(np.array([-1.0, 1.0 - 1e-8]))) / 1e-8
    assert ends[0] < 1e-3 and abs(ends[1] - 1.0) < 1e-3


def test_relu_kernel_is_increasing_and_convex_on_the_unit_interval():
    """f'' = 1 / (pi sqrt(1 - c^2)) >= 1/pi: second differences on a grid of step
    2e-3 are >= 4e-6 / pi ~ 1.3e-6, far above round-off (~1e-15)."""
    c = np.linspace(-1.0, 1.0, 1001)
    f = relu_kernel(c)
    assert np.all(np.diff(f) > 0)
    second = f[2:] - 2 * f[1:-1] + f[:-2]
    assert np.all(second >= (c[1] - c[0]) ** 2 / math.pi * (1 - 1e-6))
    # above the diagonal: ReLU increases correlations (f(c) >= c, equality at c = 1)
    assert np.all(f[:-1] > c[:-1])


@settings(deadline=None)
@given(floats(-1.0, 1.0))
def test_relu_kernel_matches_reference(c):
    assert abs(relu_kernel(c) - ref.arccos_kernel(c)) <= TOL


@settings(deadline=None)
@given(simplex(), st.sampled_from(["relu", "linear"]))
def test_activation_moments_closed_forms(qp, activation):
    q1, p1 = qp
    m2, m11 = activation_moments(q1, p1, activation)
    if activation == "relu":
        assert close(m2, q1 / 2)
        assert close(m11, q1 / 2 * ref.arccos_kernel(p1 / q1), q1)
    else:
        assert (m2, m11) == (q1, p1)


# --- LayerNorm, skip connections ------------------------------------------------------
@settings(deadline=None)
@given(simplex())
def test_layernorm_is_idempotent(qp):
    once = layernorm_map(*qp)
    twice = layernorm_map(*once)
    assert once[0] == 1.0 and twice[0] == 1.0
    assert close(twice[1], once[1], 1.0)
    assert close(once[1], qp[1] / qp[0], 1.0)


@settings(deadline=None)
@given(simplex(), simplex())
def test_skip_with_alpha_zero_returns_the_branch(branch, x):
    assert skip_map(*branch, *x, alpha=0.0) == branch


@settings(deadline=None)
@given(simplex(), simplex(), floats(0.0, 5.0))
def test_skip_map_matches_reference(branch, x, alpha):
    got = skip_map(*branch, *x, alpha=alpha)
    want = ref.skip(*branch, *x, alpha)
    assert close(got[0], want[0]) and close(got[1], want[1], want[0])


# --- dense layers and the MLP ---------------------------------------------------------
# sigma_b2 > 0: with sigma_w2 = sigma_b2 = 0 the hidden layer is identically zero and
# its ReLU correlation 0/0 is undefined (mlp_map then raises).
@settings(deadline=None)
@given(simplex(), simplex(), floats(0.0, 1.0), floats(0.0, 3.0), floats(1e-6, 0.5))
def test_linear_mlp_map_is_affine(x, y, weight, sigma_w2, sigma_b2):
    """With phi = identity the MLP is affine in (q, p): convex combinations commute."""
    mix = tuple(weight * a + (1 - weight) * b for a, b in zip(x, y))
    got = mlp_map(*mix, sigma_w2, sigma_b2, activation="linear")
    fx = mlp_map(*x, sigma_w2, sigma_b2, activation="linear")
    fy = mlp_map(*y, sigma_w2, sigma_b2, activation="linear")
    scale = max(fx[0], fy[0])
    for k in range(2):
        assert abs(got[k] - (weight * fx[k] + (1 - weight) * fy[k])) <= 1e-12 * scale
    # and its slope is sigma_w2^2, its offset sigma_b2 (1 + sigma_w2)
    q0 = mlp_map(1e-300, 0.0, sigma_w2, sigma_b2, activation="linear")[0]
    assert abs(q0 - sigma_b2 * (1 + sigma_w2)) <= 1e-15


@settings(deadline=None)
@given(simplex(), floats(0.0, 3.0), floats(1e-6, 0.5), st.sampled_from(["relu", "linear"]))
def test_mlp_and_dense_maps_match_reference(qp, sigma_w2, sigma_b2, activation):
    q, p = qp
    got = mlp_map(q, p, sigma_w2, sigma_b2, activation)
    want = ref.mlp(q, p, sigma_w2, sigma_b2, activation)
    assert close(got[0], want[0]) and close(got[1], want[1], want[0])
    q1, p1 = dense_map(q, p, sigma_w2, sigma_b2)
    assert close(q1, sigma_w2 * q + sigma_b2) and close(p1, sigma_w2 * p + sigma_b2, q1)


@settings(deadline=None)
@given(simplex(), floats(1e-3, 3.0), floats(1e-6, 0.5))
def test_erf_mlp_map_matches_the_arcsine_kernel(qp, sigma_w2, sigma_b2):
    """erf has the closed-form arcsine kernel (Williams 1997; docs/theory.md section 4)."""
    q, p = qp
    got = mlp_map(q, p, sigma_w2, sigma_b2, "erf")
    want = ref.mlp(q, p, sigma_w2, sigma_b2, "erf")
    assert close(got[0], want[0]) and close(got[1], want[1], want[0])


def test_relu_mlp_keeps_collapsed_tokens_collapsed():
    q2, p2 = mlp_map(1.0, 1.0)
    assert q2 == p2


# --- attention maps -------------------------------------------------------------------
@settings(deadline=None)
@given(simplex(), floats(0.05, 8.0), floats(1e-6, 3.0))
def test_attention_output_cosine_without_bias(qp, beta, sigma_v2):
    """sigma_b2 = 0: rho_A = p / (p + (q - p) Y2) (docs/theory.md section 3)."""
    q, p = qp
    if p <= 1e-6 * q:
        return
    q_a, p_a = softmax_attention_map(beta, q=q, p=p, sigma_v2=sigma_v2, sigma_b2=0.0)
    y2 = participation_ratio(beta, q, p)
    assert abs(p_a / q_a - p / (p + (q - p) * y2)) <= 1e-12


def test_spread_attention_collapses_the_tokens_completely():
    """Below beta_c every row averages all tokens: output cosine exactly 1."""
    q_a, p_a = softmax_attention_map(0.5, q=1.0, p=0.3, sigma_v2=0.2, sigma_b2=4e-4)
    assert q_a == p_a


def test_gain_controlled_attention_outputs_the_bias_alone_in_the_spread_phase():
    assert gain_controlled_attention_map(0.5, q=1.0, p=0.3, sigma_v2=0.2, sigma_b2=4e-4) == (4e-4, 4e-4)


@settings(deadline=None)
@given(simplex(), floats(0.05, 8.0), floats(0.0, 3.0), floats(0.0, 0.5))
def test_attention_maps_match_reference(qp, beta, sigma_v2, sigma_b2):
    q, p = qp
    for public, scalar in ((softmax_attention_map, ref.softmax_attention),
                           (gain_controlled_attention_map, ref.gain_controlled_attention)):
        got = public(beta, q=q, p=p, sigma_v2=sigma_v2, sigma_b2=sigma_b2)
        want = scalar(q, p, beta, sigma_v2, sigma_b2)
        assert close(got[0], want[0], max(want[0], 1e-300))
        assert close(got[1], want[1], max(want[0], 1e-300))


def test_attention_maps_broadcast_values():
    beta = np.array([[0.5], [2.0], [5.0]])
    q_a, p_a = softmax_attention_map(beta, q=1.0, p=np.array([0.0, 0.4]), sigma_v2=np.array([0.2, 1.0]), sigma_b2=0.0)
    assert q_a.shape == (3, 2)
    p_a = np.broadcast_to(p_a, (3, 2))
    for i in range(3):
        for j in range(2):
            want = ref.softmax_attention(1.0, [0.0, 0.4][j], beta[i, 0], [0.2, 1.0][j], 0.0)
            assert close(q_a[i, j], want[0]) and close(p_a[i, j], want[1], want[0])


# Every map of (q, p) should return q' and p' of one shape, the broadcast of all its
# inputs ("public functions broadcast"). Inputs: q (2,), p (3, 1), a parameter (4, 1, 1).
_Q = np.array([1.0, 2.0])
_P = np.array([[0.0], [0.5], [0.9]])
_K = np.full((4, 1, 1), 0.7)
BROADCAST_CASES = {
    "softmax_attention_map": lambda: softmax_attention_map(_K, q=_Q, p=_P),
    "gain_controlled_attention_map": lambda: gain_controlled_attention_map(_K, q=_Q, p=_P),
    "layernorm_map": lambda: layernorm_map(_Q, _P),
    "skip_map": lambda: skip_map(_Q, _P, _Q, _P, alpha=_K),
    "dense_map": lambda: dense_map(_Q, _P, sigma_w2=_K),
    "mlp_map": lambda: mlp_map(_Q, _P, sigma_w2=_K),
    "activation_moments": lambda: activation_moments(_Q, _P),
    "components.softmax_attention": lambda: C.softmax_attention(_K)(_Q, _P),
    "components.layer_norm": lambda: C.layer_norm()(_Q, _P),
    "mlp_map(sigma_w2_out)": lambda: mlp_map(_Q, _P, sigma_w2_out=_K),
    "components.mlp(sigma_w2_out)": lambda: C.mlp(sigma_w2_out=_K)(_Q, _P),
    "components.output_projection": lambda: C.output_projection(_K)(_Q, _P),
}
BROADCAST_SHAPE = {name: (3, 2) if name in ("layernorm_map", "activation_moments",
                                            "components.layer_norm") else (4, 3, 2)
                   for name in BROADCAST_CASES}


@pytest.mark.parametrize("name", sorted(BROADCAST_CASES))
def test_maps_return_q_and_p_of_the_common_broadcast_shape(name):
    q_out, p_out = BROADCAST_CASES[name]()
    assert np.shape(q_out) == np.shape(p_out) == BROADCAST_SHAPE[name]


# --- the stax-like components ---------------------------------------------------------
@settings(max_examples=50, deadline=None)
@given(simplex(), floats(0.05, 6.0), floats(0.0, 3.0), floats(0.0, 3.0))
def test_components_compose_left_to_right(qp, beta, alpha_sa, alpha_mlp):
    q, p = qp
    attn = C.softmax_attention(beta)
    ff = C.mlp()
    block = C.serial(C.residual(alpha_sa, attn), C.layer_norm(), C.residual(alpha_mlp, ff),
                     C.layer_norm())
    q1, p1 = skip_map(*softmax_attention_map(beta, q=q, p=p), q, p, alpha_sa)
    q1, p1 = layernorm_map(q1, p1)
    q2, p2 = skip_map(*mlp_map(q1, p1), q1, p1, alpha_mlp)
    q2, p2 = layernorm_map(q2, p2)
    got = block(q, p)
    assert close(got[0], q2) and close(got[1], p2, 1.0)


def test_residual_with_alpha_zero_is_its_branch():
    branch = C.serial(C.gain_controlled_attention(2.0, 0.5, 0.01), C.mlp(0.7, 0.02, "linear"))
    for q, p in ((1.0, 0.0), (2.0, 1.5), (0.3, 0.3)):
        assert C.residual(0.0, branch)(q, p) == branch(q, p)
