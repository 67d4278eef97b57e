"""Monte Carlo checks of the maps against finite random networks built with NumPy.

Conventions of docs/theory.md section 2: single head, s_qk^2 = beta sqrt(log T) / d, scores
divided by sqrt(d), values W_V ~ N(0, s_v^2 / d) with a bias N(0, s_b^2), MLP weights
N(0, s_w^2 / fan_in) and biases N(0, s_b^2), no LayerNorm gain.

Every tolerance is ``K_SE`` standard errors computed from the sample itself (independent
seeds or samples), plus, where the theory is asymptotic (T -> infinity), an explicit
allowance for the leading finite-size correction derived in the test's comment. All
seeds are fixed, so the tests are deterministic.
"""
import math

import numpy as np
import pytest

from remprop.theory import activation_moments, beta_critical, mlp_map, participation_ratio

from montecarlo_tools import mean_and_se, mlp_on_simplex, order_parameters, simplex_times

#: Standard errors allowed: for a Gaussian estimate, P(|z| > 5) = 6e-7 per check.
K_SE = 5.0


def relu(x):
    return np.maximum(x, 0.0)


def gaussian_tokens(rng, T, d, q, p):
    """x_i = sqrt(p) z + sqrt(q - p) e_i with z, e_i ~ N(0, I_d): a random simplex."""
    z = rng.standard_normal(d)
    return math.sqrt(p) * z + math.sqrt(q - p) * rng.standard_normal((T, d))


def attention_matrix(rng, tokens_times, T, d, beta):
    """Softmax attention matrix of one head at initialisation (docs/theory.md section 2).

    ``tokens_times(W)`` returns ``X @ W`` for the (T, d) token matrix X.
    """
    s_qk = math.sqrt(beta * math.sqrt(math.log(T)) / d)
    queries = tokens_times(s_qk * rng.standard_normal((d, d)))
    keys = tokens_times(s_qk * rng.standard_normal((d, d)))
    scores = queries @ keys.T / math.sqrt(d)
    scores -= scores.max(axis=1, keepdims=True)
    weights = np.exp(scores)
    return weights / weights.sum(axis=1, keepdims=True)


# --- (a) Gaussian moments of ReLU ------------------------------------------------------
@pytest.mark.parametrize("q1, p1", [(1.0, 0.0), (1.0, 0.6), (2.5, -1.5), (0.3, 0.29)])
def test_relu_gaussian_moments_by_sampling(q1, p1):
    """E[relu(u)^2] and E[relu(u) relu(v)] from 2e6 Gaussian pairs: 5 SE of the sample."""
    rng = np.random.default_rng(1)
    n = 2_000_000
    c = p1 / q1
    g1, g2 = rng.standard_normal((2, n))
    u = math.sqrt(q1) * g1
    v = math.sqrt(q1) * (c * g1 + math.sqrt(1 - c * c) * g2)
    m2, se2 = mean_and_se(relu(u) ** 2)
    m11, se11 = mean_and_se(relu(u) * relu(v))
    want2, want11 = activation_moments(q1, p1, "relu")
    assert abs(m2 - want2) <= K_SE * se2
    assert abs(m11 - want11) <= K_SE * se11
    # power: the sample resolves the kernel to better than 1% of its value
    assert se11 < 0.01 * want11


# --- (b) the ReLU MLP map on a finite-width network -----------------------------------
@pytest.mark.parametrize("q, p", [(1.0, 0.0), (1.0, 0.5), (2.0, 1.8)])
@pytest.mark.parametrize("sigma_w2, sigma_b2", [(0.2, 4e-4), (1.5, 0.1)])
def test_relu_mlp_map_on_finite_width_networks(q, p, sigma_w2, sigma_b2):
    """y = W2 relu(W1 x + b1) + b2, d = d_ff = 512, T = 400 exact-simplex tokens, 12 networks.

    Width: with an exact simplex input every hidden unit sees a Gaussian pair with
    Var = s_w^2 q + s_b^2 and Cov = s_w^2 p + s_b^2 exactly, and the measured q_out, p_out
    are averages of products, linear in the hidden kernel: their expectation over the
    weights equals mlp_map at ANY width. Finite width (the O(1/d) effects on ratios such
    as rho, and the O(1/sqrt(d)) network-to-network spread) therefore enters only the
    variance, which the 5 SE across the 12 independent networks measure. q_out - p_out is
    checked separately: the direction shared by all tokens cancels there, so it is a
    much sharper test of the kernel than q_out and p_out alone.
    """
    d = d_ff = 512
    T = 400
    rows = []
    for seed in range(12):
        rng = np.random.default_rng([2, seed])
        q_out, p_out = mlp_on_simplex(rng, relu, T, q, p, d, d_ff, sigma_w2, sigma_b2)
        rows.append((q_out, p_out, q_out - p_out))
    (q_out, p_out, spread), (se_q, se_p, se_spread) = mean_and_se(rows)
    q_map, p_map = mlp_map(q, p, sigma_w2, sigma_b2, "relu")
    assert abs(q_out - q_map) <= K_SE * se_q
    assert abs(p_out - p_map) <= K_SE * se_p
    assert abs(spread - (q_map - p_map)) <= K_SE * se_spread
    # power: a linear activation would be rejected (it spreads tokens 2-3 times more here)
    q_lin, p_lin = mlp_map(q, p, sigma_w2, sigma_b2, "linear")
    assert abs(spread - (q_lin - p_lin)) > K_SE * se_spread


# --- (c) one softmax attention layer ---------------------------------------------------
SIGMA_V2, SIGMA_B2 = 0.2, 4e-4


@pytest.mark.parametrize("q, p", [(1.0, 0.0), (1.5, 0.6)])
@pytest.mark.parametrize("beta", [0.5, 2.0, 4.0])
def test_attention_value_map_with_measured_participation_ratio(q, p, beta):
    """(i) q_A = s_v^2 (p + (q - p) Y2) + s_b^2, p_A = s_v^2 p + s_b^2.

    T = 256 exact-simplex tokens, d = 512, 8 seeds. Given the attention matrix A (rows
    sum to 1), the value layer gives exactly, in expectation over W_V and the bias,
        E[q_A | A] = s_v^2 (p + (q - p) Y2) + s_b^2,
        E[p_A | A] = s_v^2 (p + (q - p) C) + s_b^2,
    with the measured Y2 = <sum_j a_ij^2> and cross-overlap C = <sum_j a_ij a_kj>_{i != k}.
    So the q_A check is exact up to 5 SE over seeds; p_A carries the sub-leading C
    (docs/theory.md section 3.4: ~1/T), allowed for explicitly. q_A - p_A = s_v^2 (q - p)(Y2 - C) is
    checked as well: the common direction cancels and the Y2 dependence is resolved.
    """
    T, d = 256, 512

    def times(W):
        return simplex_times(W, T, q, p)

    rows = []
    for seed in range(8):
        rng = np.random.default_rng([3, seed])
        A = attention_matrix(rng, times, T, d, beta)
        y2 = np.einsum("ij,ij->", A, A) / T
        column = A.sum(axis=0)
        cross = (column @ column - y2 * T) / (T * (T - 1))
        W_V = rng.standard_normal((d, d)) * math.sqrt(SIGMA_V2 / d)
        bias = rng.standard_normal(d) * math.sqrt(SIGMA_B2)
        q_a, p_a = order_parameters(A @ times(W_V) + bias)
        rows.append((
            q_a - (SIGMA_V2 * (p + (q - p) * y2) + SIGMA_B2),
            p_a - (SIGMA_V2 * p + SIGMA_B2),
            (q_a - p_a) - SIGMA_V2 * (q - p) * (y2 - cross),
            cross, y2,
        ))
    (res_q, res_p, res_spread, cross, y2), (se_q, se_p, se_spread, _, _) = mean_and_se(rows)
    assert abs(res_q) <= K_SE * se_q
    assert abs(res_spread) <= K_SE * se_spread
    assert abs(res_p) <= K_SE * se_p + SIGMA_V2 * (q - p) * cross
    # the measured Y2 is on the side of the transition the asymptotic theory puts it
    beta_c = beta_critical(q, p)
    assert (y2 > 0.3) == (beta > beta_c)


def spread_phase_y2(beta, T, d=256, seeds=8):
    """Mean participation ratio per seed: T Gaussian tokens (q = 1, p = 0), d = 256."""
    values = []
    for seed in range(seeds):
        rng = np.random.default_rng([4, T, seed])
        X = gaussian_tokens(rng, T, d, 1.0, 0.0)
        A = attention_matrix(rng, X.__matmul__, T, d, beta)
        values.append(np.einsum("ij,ij->", A, A) / T)
    return mean_and_se(values)


@pytest.mark.parametrize("beta", [0.3, 0.5])
def test_spread_phase_participation_ratio_follows_the_annealed_power_law(beta):
    """(ii) beta < beta_c / 2: Y2 ~ T^-(1 - 2 beta^2 / beta_c^2), exponent from T = 128, 1024.

    With q = 1, p = 0 the scores of a row are i.i.d. Gaussian with variance
    v = beta^2 log T = 2 (beta / beta_c)^2 log T, so Y2 = N / Z^2 with N = sum e^{2E},
    Z = sum e^E. Annealed: E[Y2] ~ E[N] / E[Z]^2 = e^v / T (the law, prefactor 1).
    Allowances (doubled to cover higher orders):
    * finite T, first order of the delta method: E[Y2] = (e^v / T)(1 + delta),
      delta = (3 (e^v - 1) - 2 (e^{2v} - 1)) / T; shifts the exponent by
      |log((1 + delta_2) / (1 + delta_1))| / log(T_2 / T_1);
    * finite d: the row variance is v chi2_d chi2_d chi2_d / d^3 (relative variance 6/d),
      E[e^v_row] = e^v (1 + 3 v^2 / d): shift 3 (v_2^2 - v_1^2) / (d log(T_2 / T_1)).
    Statistical: 5 SE of the exponent (delta method from the per-seed SEs).
    """
    T1, T2, d = 128, 1024, 256
    beta_c = beta_critical(1.0, 0.0)
    exponent = 1.0 - 2.0 * beta**2 / beta_c**2
    y1, se1 = spread_phase_y2(beta, T1, d)
    y2, se2 = spread_phase_y2(beta, T2, d)
    log_ratio = math.log(T2 / T1)
    measured = -math.log(y2 / y1) / log_ratio
    se = math.hypot(se1 / y1, se2 / y2) / log_ratio

    def variance(T):
        return 2.0 * (beta / beta_c) ** 2 * math.log(T)

    def delta(T):
        v = variance(T)
        return (3 * math.expm1(v) - 2 * math.expm1(2 * v)) / T

    shift_T = abs(math.log((1 + delta(T2)) / (1 + delta(T1)))) / log_ratio
    shift_d = 3 * (variance(T2) ** 2 - variance(T1) ** 2) / (d * log_ratio)
    tolerance = K_SE * se + 2 * (shift_T + shift_d)
    assert abs(measured - exponent) <= tolerance
    # power: the fluctuation exponent is resolved (uniform attention would give 1)
    assert 1.0 - measured > tolerance
    # and the spread phase is far from the asymptotic localised value
    assert participation_ratio(beta, 1.0, 0.0) == 0.0 and y2 < 0.05


@pytest.mark.parametrize("beta", [4.0, 6.0])
def test_localised_phase_participation_ratio_approaches_one_minus_beta_c_over_beta(beta):
    """(iii) beta >> beta_c (q = 1, p = 0): Y2 -> 1 - m, m = beta_c / beta, at T = 512.

    The top scores of a row (std s = beta sqrt(log T)) form, near their maximum, a
    Poisson process whose Gibbs weights give Y2 = 1 - m when the maximum sits at
    s sqrt(2 log T). At finite T the maxima of T Gaussians sit lower, at
    a_T = sqrt(2 log T - log(4 pi log T)) standard deviations, which replaces m by
    m_T = a_T / (beta sqrt(log T)) < m: Y2 is pushed up by m - m_T, a correction that
    vanishes like log(log T) / log T (0.19 m at T = 512), and the curvature of the
    Gaussian tail pulls it back down. We check 1 - m <= Y2 <= 1 - m_T, each side
    widened by 5 SE over 6 seeds (d = 256; the per-row spread of the score variance,
    relative 6/d, moves m by < 1%).
    """
    T, d = 512, 256
    q, p = 1.0, 0.0
    values = []
    for seed in range(6):
        rng = np.random.default_rng([5, seed])
        X = gaussian_tokens(rng, T, d, q, p)
        A = attention_matrix(rng, X.__matmul__, T, d, beta)
        values.append(np.einsum("ij,ij->", A, A) / T)
    y2, se = mean_and_se(values)
    asymptotic = participation_ratio(beta, q, p)
    log_t = math.log(T)
    a_t = math.sqrt(2 * log_t - math.log(4 * math.pi * log_t))
    finite_t = 1.0 - a_t / (beta * math.sqrt(q * (q - p) * log_t))
    assert asymptotic - K_SE * se <= y2 <= finite_t + K_SE * se
    assert abs(asymptotic - (1.0 - beta_critical(q, p) / beta)) <= 1e-15
