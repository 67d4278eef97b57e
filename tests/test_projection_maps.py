"""The attention output projection (sigma_o2) and the MLP second-layer variance (sigma_w2_out),
each checked three ways:

1. closed forms and limits of the theory maps, and ``propagate`` against the composition
   ``Architecture.block`` (same maps, so round-off tolerances);
2. Monte Carlo with NumPy: Gaussian weights applied to tokens with exact order parameters,
   the same expectation measured (tolerance ``K_SE`` standard errors over independent seeds);
3. simulated torch blocks: a short :class:`SimulatedStack` against ``propagate`` at the
   same finite T (the registry's ``simulate`` vs ``theory`` for the two entries is in
   ``test_validation_components``; the Hugging Face equality in ``test_validation_hf``).

Every statistical tolerance is ``K * sem`` (+ a stated bias) with ``sem`` the standard error
over independent seeds: a Gaussian (or Student t with 15 dof for 16 seeds) deviation beyond
K = 5 has probability below 2e-4 per check. All seeds are fixed, so the tests are deterministic.
"""
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from remprop.theory import (
    Architecture,
    components as C,
    dense_map,
    mlp_map,
    propagate,
    relu_kernel,
    softmax_attention_map,
)
from remprop.theory.activations import BUILTIN_ACTIVATIONS

from kernel_checks import assert_propagate_matches_block
from montecarlo_tools import mean_and_se, mlp_on_simplex, order_parameters, simplex_times

K = 5.0


def floats(low, high):
    return st.floats(low, high, allow_nan=False, allow_infinity=False)


@st.composite
def simplex(draw):
    q = draw(floats(1e-3, 10.0))
    return q, q * draw(floats(0.0, 1.0))


# --- 1. closed forms and limits ---------------------------------------------------------
@settings(deadline=None)
@given(simplex(), st.one_of(st.just(0.0), floats(1e-6, 10.0)))  # no subnormal products
def test_output_projection_scales_q_and_p_and_keeps_the_cosine(qp, sigma_o2):
    q, p = qp
    q_o, p_o = C.output_projection(sigma_o2)(q, p)
    # a product of two floats: exact up to one rounding
    assert q_o == sigma_o2 * q and p_o == sigma_o2 * p
    if sigma_o2 > 0:
        assert abs(p_o / q_o - p / q) <= 4.5e-16 * max(1.0, abs(p / q))
    # the registry's theory side: a dense layer without bias
    assert dense_map(q, p, sigma_o2, 0.0) == (q_o, p_o)


@settings(deadline=None)
@given(simplex(), floats(0.05, 6.0))
def test_output_projection_at_one_is_no_projection(qp, beta):
    q, p = qp
    assert C.output_projection(1.0)(q, p) == (q, p)
    attention = C.softmax_attention(beta, 0.3, 0.01)
    assert C.serial(attention, C.output_projection(1.0))(q, p) == attention(q, p)
    assert C.output_projection(0.0)(q, p) == (0.0, 0.0)


# Every block order and attention variant, asymptotic and finite T (each combination is one
# numba kernel to compile: six cover both values of every option).
KERNELS = [("post", "softmax", None), ("post", "gain-controlled", 128), ("pre", "softmax", 128),
           ("pre", "gain-controlled", None), ("none", "softmax", None), ("none", "gain-controlled", 128)]
KERNEL_IDS = [f"{n}-{a}-T{t}" for n, a, t in KERNELS]


@pytest.mark.parametrize("norm, attention, seq_len", KERNELS, ids=KERNEL_IDS)
def test_projection_at_one_and_default_second_layer_leave_propagate_unchanged(norm, attention, seq_len):
    # sigma_o2 = 1 multiplies by 1.0 and sigma_w2_out = sigma_w2 is the same number: exact.
    base = Architecture(norm=norm, attention=attention, seq_len=seq_len, sigma_b2=0.01, alpha_sa=0.9)
    same = base.replace(sigma_o2=1.0, sigma_w2_out=base.sigma_w2)
    betas = np.array([0.3, 1.0, 2.5])
    a, b = propagate(base, betas, 10, rho0=0.2), propagate(same, betas, 10, rho0=0.2)
    assert np.array_equal(a.q, b.q) and np.array_equal(a.p, b.p)
    # and a different projection does change the trajectory
    assert np.abs(propagate(base.replace(sigma_o2=0.5), betas, 10, rho0=0.2).rho - a.rho)[:, 1:].min() > 1e-6


@pytest.mark.parametrize("activation", sorted(BUILTIN_ACTIVATIONS))
def test_second_layer_variance_rescales_the_mlp_kernel(activation):
    # q2 = s_out E[phi(u)^2] + s_b^2: linear in s_out, and s_out = None is s_out = s_w^2.
    sigma_w2, sigma_b2 = 1.3, 0.02
    q, p = np.array([0.5, 1.0, 2.0]), np.array([0.1, 0.6, -0.3])
    default = mlp_map(q, p, sigma_w2, sigma_b2, activation)
    assert all(np.array_equal(a, b) for a, b in
               zip(default, mlp_map(q, p, sigma_w2, sigma_b2, activation, sigma_w2_out=sigma_w2)))
    for s_out in (0.0, 0.4, 3.0):
        got = mlp_map(q, p, sigma_w2, sigma_b2, activation, sigma_w2_out=s_out)
        for g, d in zip(got, default):
            np.testing.assert_allclose(g - sigma_b2, s_out / sigma_w2 * (d - sigma_b2), rtol=1e-12, atol=1e-15)
        comp = C.mlp(sigma_w2, sigma_b2, activation, sigma_w2_out=s_out)(q, p)
        for c, g in zip(comp, got):
            np.testing.assert_allclose(c, g, rtol=1e-12, atol=1e-15)


@settings(deadline=None)
@given(simplex(), floats(1e-3, 3.0), floats(1e-6, 0.5), floats(0.0, 5.0))
def test_relu_mlp_with_second_layer_variance_closed_form(qp, sigma_w2, sigma_b2, s_out):
    # ReLU: q2 = s_out q1 / 2 + s_b^2, p2 = s_out (q1 / 2) f(p1 / q1) + s_b^2 (arc-cosine f)
    q, p = qp
    q1, p1 = sigma_w2 * q + sigma_b2, sigma_w2 * p + sigma_b2
    q2, p2 = mlp_map(q, p, sigma_w2, sigma_b2, "relu", sigma_w2_out=s_out)
    assert abs(q2 - (s_out * q1 / 2 + sigma_b2)) <= 1e-12 * q2
    assert abs(p2 - (s_out * q1 / 2 * relu_kernel(p1 / q1) + sigma_b2)) <= 1e-12 * q2


@pytest.mark.parametrize("norm, attention, seq_len", KERNELS, ids=KERNEL_IDS)
def test_propagate_with_projection_equals_the_composed_block(norm, attention, seq_len):
    # The numba kernels and Architecture.block evaluate the same (tabulated) maps: round-off
    # only, accumulated over 8 blocks (as test_finite_t's kernel/composition check).
    # The activation enters only through its moments (checked above for every one).
    arch = Architecture(norm=norm, attention=attention, seq_len=seq_len, sigma_o2=0.6, sigma_w2_out=1.7,
                        sigma_b2=0.01, alpha_sa=0.8)
    assert_propagate_matches_block(arch, [0.3, 1.0, 2.5], 8, rho0=0.2)


def test_propagate_broadcasts_the_new_fields():
    # arrays of sigma_o2 and sigma_w2_out broadcast with beta like the other numeric fields
    sigma_o2, s_out, betas = np.array([0.3, 1.0, 2.0]), np.array([[0.5], [1.5]]), np.array([0.4, 2.0])
    arch = Architecture(norm="pre", sigma_o2=sigma_o2, sigma_w2_out=s_out)
    traj = propagate(arch, betas[:, None, None], 5, rho0=0.3)
    assert traj.q.shape == (2, 2, 3, 6)
    for i, beta in enumerate(betas):
        for j in range(2):
            for k in range(3):
                one = propagate(Architecture(norm="pre", sigma_o2=sigma_o2[k], sigma_w2_out=s_out[j, 0]), beta, 5,
                                rho0=0.3)
                np.testing.assert_allclose(traj.q[i, j, k], one.q, rtol=1e-14)
                np.testing.assert_allclose(traj.p[i, j, k], one.p, rtol=1e-14, atol=1e-15)


# --- 2. Monte Carlo with NumPy ----------------------------------------------------------
@pytest.mark.parametrize("q, p", [(1.0, 0.0), (2.0, 1.4)])
@pytest.mark.parametrize("sigma_o2", [0.4, 2.5])
def test_output_projection_by_monte_carlo(q, p, sigma_o2):
    """Y = X W_O^T, W_O ~ N(0, sigma_o2 / d), d = 384, T = 256, 12 independent projections.

    q', p' and q' - p' (the shared direction cancels: the sharpest test of the scaling)
    within K standard errors of sigma_o2 (q, p, q - p).
    """
    d, T = 384, 256
    rows = []
    for seed in range(12):
        rng = np.random.default_rng([11, seed])
        W = rng.standard_normal((d, d)) * math.sqrt(sigma_o2 / d)  # (in, out) = W_O^T
        q_o, p_o = order_parameters(simplex_times(W, T, q, p))
        rows.append((q_o, p_o, q_o - p_o))
    (q_o, p_o, spread), (se_q, se_p, se_spread) = mean_and_se(rows)
    q_map, p_map = C.output_projection(sigma_o2)(q, p)
    assert abs(q_o - q_map) <= K * se_q
    assert abs(p_o - p_map) <= K * se_p + 1e-15
    assert abs(spread - (q_map - p_map)) <= K * se_spread
    # power: no projection (sigma_o2 = 1) is rejected
    assert abs(spread - (q - p)) > K * se_spread


@pytest.mark.parametrize("q, p", [(1.0, 0.0), (1.5, 0.6)])
def test_attention_followed_by_projection_by_monte_carlo(q, p):
    """serial(softmax attention, W_O): given the attention matrix A (from W_Q, W_K) the values
    and W_O average to E[q_O | A] = s_o^2 (s_v^2 (p + (q - p) Y2) + s_b^2) and
    E[p_O | A] = s_o^2 (s_v^2 (p + (q - p) C) + s_b^2), with the measured Y2 and row
    cross-overlap C (~1/T); residuals within K SE over 8 seeds (T = 128, d = 256, beta = 2.5,
    localised attention so Y2 is far from 0).
    """
    T, d, beta = 128, 256, 2.5
    s_v, s_b, s_o = 0.7, 0.02, 1.8
    s_qk = math.sqrt(beta * math.sqrt(math.log(T)) / d)
    rows = []
    for seed in range(8):
        rng = np.random.default_rng([12, seed])
        scores = simplex_times(s_qk * rng.standard_normal((d, d)), T, q, p) @ \
            simplex_times(s_qk * rng.standard_normal((d, d)), T, q, p).T / math.sqrt(d)
        A = np.exp(scores - scores.max(axis=1, keepdims=True))
        A /= A.sum(axis=1, keepdims=True)
        y2 = np.einsum("ij,ij->", A, A) / T
        column = A.sum(axis=0)
        cross = (column @ column - y2 * T) / (T * (T - 1))
        values = A @ simplex_times(rng.standard_normal((d, d)) * math.sqrt(s_v / d), T, q, p)
        values += rng.standard_normal(d) * math.sqrt(s_b)
        q_o, p_o = order_parameters(values @ (rng.standard_normal((d, d)) * math.sqrt(s_o / d)))
        rows.append((q_o - s_o * (s_v * (p + (q - p) * y2) + s_b),
                     p_o - s_o * (s_v * (p + (q - p) * cross) + s_b), y2))
    (res_q, res_p, y2), (se_q, se_p, _) = mean_and_se(rows)
    assert abs(res_q) <= K * se_q and abs(res_p) <= K * se_p
    # the asymptotic composed map is near (Y2 at T = 128 exceeds 1 - beta_c / beta, see
    # test_theory_montecarlo); here it only has to be the right scale: sigma_o2 times attention
    q_theory = C.serial(C.softmax_attention(beta, s_v, s_b), C.output_projection(s_o))(q, p)[0]
    q_attention = softmax_attention_map(beta, q=q, p=p, sigma_v2=s_v, sigma_b2=s_b)[0]
    assert q_theory == pytest.approx(s_o * q_attention, rel=1e-15)
    assert y2 > 0.3


def _np_activation(name):
    return {"relu": lambda x: np.maximum(x, 0.0), "tanh": np.tanh}[name]


@pytest.mark.parametrize("activation", ["relu", "tanh"])
@pytest.mark.parametrize("q, p", [(1.0, 0.0), (2.0, 1.6)])
def test_mlp_with_second_layer_variance_by_monte_carlo(activation, q, p):
    """y = W2 phi(W1 x + b1) + b2 with W1 ~ N(0, s_w^2 / d), W2 ~ N(0, s_out / d_ff),
    d = 256 != d_ff = 640, T = 200 exact-simplex tokens, 12 networks.

    Exact simplex inputs give every hidden unit the Gaussian pair of mlp_map at any width,
    and q_out, p_out are linear in the hidden kernel: expectations equal the map; K SE.
    """
    d, d_ff, T = 256, 640, 200
    sigma_w2, sigma_b2, s_out = 1.5, 0.05, 0.4
    phi = _np_activation(activation)
    rows = []
    for seed in range(12):
        rng = np.random.default_rng([13, seed])
        q_out, p_out = mlp_on_simplex(rng, phi, T, q, p, d, d_ff, sigma_w2, sigma_b2, sigma_w2_out=s_out)
        rows.append((q_out, p_out, q_out - p_out))
    (q_out, p_out, spread), (se_q, se_p, se_spread) = mean_and_se(rows)
    q_map, p_map = mlp_map(q, p, sigma_w2, sigma_b2, activation, sigma_w2_out=s_out)
    assert abs(q_out - q_map) <= K * se_q
    assert abs(p_out - p_map) <= K * se_p
    assert abs(spread - (q_map - p_map)) <= K * se_spread
    # power: the default second layer (sigma_w2_out = sigma_w2, 3.75x larger) is rejected
    q_def, p_def = mlp_map(q, p, sigma_w2, sigma_b2, activation)
    assert abs(spread - (q_def - p_def)) > K * se_spread


# --- 3. a simulated stack against propagate at the same finite T --------------------------
D, T, DEPTH, SEEDS, BETA = 256, 128, 4, 16, 1.0
LN_BIAS = 2 * np.arange(DEPTH + 1) * 0.23 / D


def _simulate(arch):
    """Per-seed rho and q of every layer: 16 seeds, one Gaussian sequence (q0 = 1, rho0 = 0.2) each."""
    torch = pytest.importorskip("torch", reason="the simulator needs torch (the validation extra)")
    from remprop.validation.inputs import gaussian_tokens
    from remprop.validation.simulator import SimulatedStack
    from remprop.validation.settings import SimulationSettings

    torch.set_num_threads(min(2, torch.get_num_threads()))
    rho, q = np.empty((SEEDS, DEPTH + 1)), np.empty((SEEDS, DEPTH + 1))
    for seed in range(SEEDS):
        x = gaussian_tokens(1.0, 0.2, count=1, seq_len=T, width=D, seed=seed, dtype="float64", device="cpu").tokens
        sim = SimulationSettings(width=D, seq_len=T, dtype="float64", device="cpu")
        trace = SimulatedStack(arch, BETA, DEPTH, sim=sim, seed=seed).trace(x)
        rho[seed], q[seed] = trace.rho[0], trace.q[0]
    return rho, q


def _theory(arch):
    return propagate(arch.replace(seq_len=T), BETA, DEPTH, q0=1.0, rho0=0.2)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_simulated_stack_with_projection_follows_the_finite_t_theory(norm):
    """SimulatedStack with W_O and its own W2 variance, GELU, d = 256, T = 128, 4 blocks,
    beta = 1 (between beta_c / 2 and beta_c: the finite-T Y2 matters), 16 seeds with one
    Gaussian sequence each, against propagate(arch with seq_len = T).

    Tolerance per layer: K * sem over the 16 seeds (Student t, 15 dof) + the LayerNorm bias
    of test_validation_stack (each LayerNorm returns the mean cosine of its input, not p/q:
    at most 0.23 / d per LayerNorm applied so far) + 1e-9 (rounding, LN epsilon). q is
    linear in the Gram matrices: no LayerNorm bias (pre-LN: q grows; post-LN: q = 1).
    """
    arch = Architecture(norm=norm, activation="gelu", sigma_w2=1.0, sigma_v2=1.0, sigma_b2=0.01,
                        sigma_o2=0.3, sigma_w2_out=4.0)
    rho, q = _simulate(arch)
    (rho_sim, sem_rho), (q_sim, sem_q) = mean_and_se(rho), mean_and_se(q)
    theory = _theory(arch)
    tol_rho, tol_q = K * sem_rho + LN_BIAS + 1e-9, K * sem_q + 1e-9 * theory.q
    assert np.all(np.abs(rho_sim - theory.rho) <= tol_rho), (rho_sim, theory.rho, tol_rho)
    assert np.all(np.abs(q_sim - theory.q) <= tol_q), (q_sim, theory.q, tol_q)
    # power: the theory without the projection is rejected (by ~2 tolerances)
    wrong = _theory(arch.replace(sigma_o2=None))
    assert np.any(np.abs(rho_sim - wrong.rho) > tol_rho)
    if norm == "pre":
        # and so is the default second layer, through q (~10 tolerances)
        assert np.any(np.abs(q_sim - _theory(arch.replace(sigma_w2_out=None)).q) > tol_q)
        return
    # Post-LN: sigma_w2_out moves rho by less than one tolerance here, so check its effect
    # on paired runs: the same seeds give the same weights up to the scale of W2 (the
    # random streams do not depend on sigma_w2_out), and the per-seed differences of rho
    # cancel most of the seed-to-seed spread. Tolerance: K * sem of the differences + the
    # LayerNorm bias (each run's bias lies in [0, LN_BIAS], so their difference too).
    rho_default, _ = _simulate(arch.replace(sigma_w2_out=None))
    delta, sem_delta = mean_and_se(rho - rho_default)
    delta_theory = theory.rho - _theory(arch.replace(sigma_w2_out=None)).rho
    tol_delta = K * sem_delta + LN_BIAS + 1e-9
    assert np.all(np.abs(delta - delta_theory) <= tol_delta), (delta, delta_theory, tol_delta)
    assert np.any(np.abs(delta_theory) > tol_delta)  # power: the effect itself is resolved
