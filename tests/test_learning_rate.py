"""The learning-rate ceiling (docs/theory.md section 20): closed forms and limits, a Monte Carlo of the
effective beta under rank-one sign updates, and a torch check of the update sensitivity."""
import math

import numpy as np
import pytest

from remprop.theory import (ATTENTION_CONSTANT, COHERENT_STEPS, FLOOR_CONSTANT, STACK_CONSTANT, Architecture,
                            attention_growth_budget, learning_rate_ceiling, sub_block_sensitivities,
                            update_sensitivity)

# Gain-controlled attention with T -> infinity below beta_c outputs the value bias alone (section 3.5):
# every branch then has a constant output variance and the sums have closed forms.
SIGMA_W2, SIGMA_B2 = 0.2, 4e-4
V_ATT = SIGMA_B2
V_MLP = SIGMA_W2 * (SIGMA_W2 + SIGMA_B2) / 2 + SIGMA_B2      # ReLU MLP on a unit input (section 4)


def gain_controlled(norm, alpha_sa=1.0):
    return Architecture(norm=norm, attention="gain-controlled", alpha_sa=alpha_sa)


def test_pre_ln_sum_of_inverse_roots():
    """Pre-LN, alpha = 1: S = sum_k 1 / sqrt(q_k), q_k = q0 + (sum of the first k branch variances)."""
    depth, q0 = 12, 1.7
    v = np.tile([V_ATT, V_MLP], depth)
    expected = np.sum(1.0 / np.sqrt(q0 + np.cumsum(v)))
    assert update_sensitivity(gain_controlled("pre"), 0.5, depth=depth, q0=q0) == pytest.approx(expected, rel=1e-12)


def test_post_ln_closed_form():
    """Post-LN: the first sub-block reads q0, every later one a unit stream: S = sqrt(q0 / (alpha^2 q0 + v))
    + sum of 1 / sqrt(alpha_k^2 + v_k)."""
    depth, q0, alpha = 9, 2.5, 1.6
    terms = sub_block_sensitivities(gain_controlled("post", alpha), 0.5, depth=depth, q0=q0)
    assert terms[0] == pytest.approx(math.sqrt(q0 / (alpha ** 2 * q0 + V_ATT)), rel=1e-12)
    assert terms[2::2] == pytest.approx(np.full(depth - 1, 1 / math.sqrt(alpha ** 2 + V_ATT)), rel=1e-12)
    assert terms[1::2] == pytest.approx(np.full(depth, 1 / math.sqrt(1 + V_MLP)), rel=1e-12)


def test_depth_laws_post_linear_pre_square_root():
    """Softmax, finite T: post-LN S grows like the depth, pre-LN like its square root (Liu et al. 2020).

    With sigma_v2 = sigma_w2 = 2 the branch variances v are about 2, so a pre-LN stream has q_k ~ k v
    >> q0 and S ~ 2 sqrt(n / v): 16 times the depth gives 4 times S (the q0 offset moves it by about
    sqrt(q0 / (n v)) ~ 2 % at depth 16). Post-LN terms lie in [1 / sqrt(1 + v_max), 1] with
    v_max = sigma_v2 + sigma_b2 (a unit stream): S is linear in n = 2L between those slopes."""
    arch = Architecture(seq_len=128, sigma_v2=2.0, sigma_w2=2.0)
    post = [float(update_sensitivity(arch, 0.5, depth=depth)) for depth in (16, 256)]
    pre = [float(update_sensitivity(arch.replace(norm="pre"), 0.5, depth=depth)) for depth in (16, 256)]
    assert pre[1] / pre[0] == pytest.approx(4.0, rel=0.05)
    for depth, value in zip((16, 256), post):
        assert 2 * depth / math.sqrt(1 + 2.0 + 4e-4) <= value <= 2 * depth
    assert 16 / math.sqrt(3.0004) < post[1] / post[0] <= 16 * math.sqrt(3.0004)
    assert post[1] / post[0] > 14.0      # the terms settle: linear in depth, far from pre-LN's 4


def test_pre_ln_carries_its_scale():
    """A pre-LN stream at alpha = 10 grows like 100^k per sub-block: 10^800 after 200 blocks, beyond
    float64. Carried as log q, its terms decay like 10^-k (to 0 in float64) and the sum stays finite."""
    arch = gain_controlled("pre", 10.0).replace(alpha_mlp=10.0)
    terms = sub_block_sensitivities(arch, 0.5, depth=200)
    assert np.all(np.isfinite(terms)) and np.all(terms >= 0)
    assert terms[20:40] / terms[19:39] == pytest.approx(np.full(20, 0.1), rel=1e-12)
    assert terms.sum() == pytest.approx(update_sensitivity(arch, 0.5, depth=20), rel=1e-12)
    ceiling = learning_rate_ceiling(arch, 0.5, depth=200, width=64, steps=100, seq_len=64)
    assert ceiling.beta_critical == pytest.approx(math.sqrt(2))


def test_broadcasts_over_alpha_and_beta():
    arch = Architecture(alpha_sa=np.array([[0.5], [1.0], [2.0]]), seq_len=64)
    values = update_sensitivity(arch, np.array([0.3, 0.6]), depth=6)
    assert values.shape == (3, 2)
    assert values[0, 0] == pytest.approx(update_sensitivity(Architecture(alpha_sa=0.5, seq_len=64), 0.3, depth=6))
    assert np.all(np.diff(values, axis=0) < 0)          # a stronger skip damps the perturbation


def test_budget_closed_form_and_limits():
    beta_c, width, seq_len = math.sqrt(2), 128, 256
    a = attention_growth_budget(0.5, beta_c, width, seq_len)
    log_t = math.log(seq_len)
    beta_eff2 = 0.25 + 2 * a ** 2 * width * 0.5 / math.sqrt(log_t) + a ** 4 * width ** 3 / log_t
    assert beta_eff2 == pytest.approx(2.0, rel=1e-12)
    assert attention_growth_budget(beta_c * 1.2, beta_c, width, seq_len) == 0.0
    assert attention_growth_budget(0.5, np.inf, width, seq_len) == np.inf
    # large width: the rank-one term dominates, a* ~ ((beta_c^2 - beta^2) log T / d^3)^(1/4)
    big = attention_growth_budget(0.5, beta_c, 10 ** 7, seq_len)
    assert big == pytest.approx(((2 - 0.25) * log_t / 1e21) ** 0.25, rel=1e-2)


def test_ceiling_vanishes_at_beta_c():
    """beta -> beta_c: the attention ceiling -> 0 (like sqrt(beta_c - beta)); at and beyond, exactly 0."""
    arch = Architecture(seq_len=128)
    beta_c = math.sqrt(2)                                 # post-LN: the first layer on unit orthogonal tokens
    gaps = np.array([1e-2, 1e-4, 1e-6])
    near = learning_rate_ceiling(arch, beta_c * (1 - gaps), depth=12, width=256, steps=1000)
    assert np.allclose(near.beta_critical, beta_c)
    assert np.all(near.binding[1:] == "attention")            # near beta_c the attention part binds
    assert np.all(np.diff(near.attention) < 0) and near.attention[-1] < 2e-2 * near.attention[0]
    assert near.ceiling[1] / near.ceiling[2] == pytest.approx(10.0, rel=1e-2)   # sqrt of the gap
    beyond = learning_rate_ceiling(arch, [beta_c * 1.0000001, 3.0], depth=12, width=256, steps=1000)
    assert np.all(beyond.ceiling == 0.0) and np.all(beyond.binding == "attention")


def test_ceiling_scalings():
    """eta_stack = 2 C_stack / (d S_sens min(steps, S_c)) exactly: ~ 1/d, ~ 1/steps up to the coherence
    horizon S_c and flat beyond it; the floor 2 C_floor / (d S_sens steps) falls like 1/steps throughout."""
    arch = Architecture(alpha_sa=2.0, seq_len=128)
    horizon = COHERENT_STEPS
    one = learning_rate_ceiling(arch, 0.5, depth=24, width=128, steps=horizon)
    assert one.stack == pytest.approx(2 * STACK_CONSTANT / (128 * one.sensitivity * horizon), rel=1e-12)
    assert one.attention == pytest.approx(ATTENTION_CONSTANT * 2 * one.budget / horizon, rel=1e-12)
    assert one.floor == pytest.approx(2 * FLOOR_CONSTANT / (128 * one.sensitivity * horizon), rel=1e-12)
    assert one.ceiling == min(one.stack, one.attention)
    wide = learning_rate_ceiling(arch, 0.5, depth=24, width=256, steps=horizon)
    assert wide.stack == pytest.approx(one.stack / 2, rel=1e-12)
    short = learning_rate_ceiling(arch, 0.5, depth=24, width=128, steps=horizon // 3)
    assert short.stack == pytest.approx(3 * one.stack, rel=1e-12)
    assert short.attention == pytest.approx(3 * one.attention, rel=1e-12)
    for factor in (2, 10):
        long = learning_rate_ceiling(arch, 0.5, depth=24, width=128, steps=horizon * factor)
        assert (long.stack, long.attention) == (pytest.approx(one.stack, rel=1e-12),
                                                pytest.approx(one.attention, rel=1e-12))
        assert long.floor == pytest.approx(one.floor / factor, rel=1e-12)


def test_ceiling_orders_the_published_points():
    """The constants fitted on the CPU sweep (d 32, never reading these points) put the issue's GPU points
    (d 256 and 480) on the right side of the ceiling."""
    deep = learning_rate_ceiling(Architecture(alpha_sa=2.0, seq_len=128), 0.5, depth=48, width=256, steps=400)
    assert 1e-4 <= deep.ceiling < 5e-4
    for alpha in (0.5, 1.0):
        arch = Architecture(alpha_sa=alpha, seq_len=128)
        assert learning_rate_ceiling(arch, 0.5, depth=30, width=480, steps=300).ceiling < 5e-4
    assert learning_rate_ceiling(Architecture(seq_len=64), 0.5, depth=24, width=64, steps=300).ceiling >= 1e-3


def test_multi_head_conventions():
    """"head" scaling runs each head at H beta: its ceiling is that of one head at H beta with d_H rows."""
    heads = Architecture(heads=4, qk_scaling="head", seq_len=128)
    c = learning_rate_ceiling(heads, 0.3, depth=6, width=256, steps=1000)
    a = attention_growth_budget(1.2, math.sqrt(2), 256, 128, head_dim=64)
    assert c.budget == pytest.approx(a, rel=1e-12)
    assert c.beta_critical == pytest.approx(math.sqrt(2) / 4)


def test_qk_norm_gets_a_ceiling_from_its_gains():
    """QK-norm (OLMo 2, Gemma 3): the scores' scale is beta g^2, so gains grown by a* = g (sqrt(beta_c / beta)
    - 1) put the stack exactly at its critical beta (docs/theory.md section 20): checked through the
    architecture's own effective beta, not the formula again; collapsed and uncollapsable edges."""
    from remprop.theory import qk_norm_growth_budget

    arch = Architecture(seq_len=128, norm="pre", qk_norm=True, head_dim=64, qk_norm_gain=1.3)
    c = learning_rate_ceiling(arch, 1.0, depth=4, width=256, steps=100)
    beta_c = float(c.beta_critical)
    a = float(c.budget)
    assert a == pytest.approx(float(qk_norm_growth_budget(1.0, beta_c, 1.3)), rel=1e-12) and a > 0
    grown = arch.replace(qk_norm_gain=1.3 + a)
    assert float(grown.effective_beta(1.0)) == pytest.approx(float(arch.effective_beta(beta_c)), rel=1e-12)
    assert c.attention == pytest.approx(ATTENTION_CONSTANT * 2 * a / 100, rel=1e-12)
    assert qk_norm_growth_budget(2.0 * beta_c, beta_c, 1.3) == 0.0          # collapsed at init
    assert qk_norm_growth_budget(1.0, math.inf, 1.3) == math.inf
    with pytest.raises(ValueError, match="gain"):
        qk_norm_growth_budget(1.0, 2.0, 0.0)


@pytest.mark.parametrize("norm", ["pre", "none"])
def test_branch_norms_count_each_branch_at_its_normalised_output(norm):
    """A norm on each branch's output (Gemma 2/3 with pre-LN, OLMo 2 without): the branch adds exactly its
    norm's unit mean square to the stream (alpha 1), so after m branches the stream is q0 + m and a
    branch's perturbation, relative to its unit output, reaches the stream as 1 / sqrt(q0 + m): the
    closed form, at any input scale (docs/theory.md section 20)."""
    arch = Architecture(seq_len=128, norm=norm, branch_norm=True)
    for q0 in (1.0, 3.0):
        terms = sub_block_sensitivities(arch, 0.5, depth=4, q0=q0)
        np.testing.assert_allclose(terms, 1.0 / np.sqrt(q0 + np.arange(1, 9)), rtol=1e-12)
    c = learning_rate_ceiling(arch, 0.5, depth=4, width=128, steps=100)
    assert float(c.sensitivity) == pytest.approx(float(np.sum(1.0 / np.sqrt(1.0 + np.arange(1, 9)))), rel=1e-12)


def test_bad_inputs_name_the_parameter():
    arch = Architecture(seq_len=128)
    for kwargs, name in (({"width": 0}, "width"), ({"steps": 0}, "steps"), ({"beta": -1.0}, "beta"),
                         ({"beta": float("nan")}, "beta")):
        args = {"depth": 4, "width": 64, "steps": 100, "beta": 0.5, **kwargs}
        with pytest.raises(ValueError, match=name):
            learning_rate_ceiling(arch, **args)
    with pytest.raises(ValueError, match="seq_len"):
        learning_rate_ceiling(Architecture(), 0.5, depth=4, width=64, steps=100)
    assert learning_rate_ceiling(Architecture(), 0.5, depth=4, width=64, steps=100, seq_len=64).ceiling > 0


def test_effective_beta_monte_carlo():
    """Score variance after rank-one sign updates of W_Q and W_K, by Monte Carlo.

    W_Q, W_K ~ N(0, beta sqrt(log T) / d); W -> W + a u v^T with random signs (u shared); scores
    s = x^T M' y / sqrt(d) on Gaussian tokens; beta_eff^2 = Var s / log T. Each of N = 150 draws
    averages 200 scores; the tolerance is 4 standard errors of the mean over draws (their sample
    spread covers the weights, the signs and the tokens), at three sizes a where the initial, the
    cross and the rank-one term each dominate. The sqrt(beta) variant of the cross term is rejected.
    """
    rng = np.random.default_rng(5)
    d, seq_len, beta, draws, pairs = 32, 256, 0.3, 150, 200
    log_t = math.log(seq_len)
    s_qk = math.sqrt(beta * math.sqrt(log_t) / d)
    for a in (0.0, 0.05, 0.2):
        u, v_q, v_k = (rng.choice([-1.0, 1.0], size=(draws, d)) for _ in range(3))
        w_q = rng.normal(0.0, s_qk, (draws, d, d)) + a * u[:, :, None] * v_q[:, None, :]
        w_k = rng.normal(0.0, s_qk, (draws, d, d)) + a * u[:, :, None] * v_k[:, None, :]
        x, y = rng.normal(size=(2, draws, pairs, d))
        scores = np.einsum("npi,npi->np", x @ w_q.transpose(0, 2, 1), y @ w_k.transpose(0, 2, 1)) / math.sqrt(d)
        samples = np.mean(scores ** 2, axis=1) / log_t
        measured, error = samples.mean(), samples.std(ddof=1) / math.sqrt(draws)
        predicted = beta ** 2 + 2 * a ** 2 * d * beta / math.sqrt(log_t) + a ** 4 * d ** 3 / log_t
        assert abs(measured - predicted) < 4 * error, (a, measured, predicted, error)
        if a == 0.05:   # the cross term dominates the change here (7.8 standard errors apart)
            other = beta ** 2 + 2 * a ** 2 * d * math.sqrt(beta) / math.sqrt(log_t) + a ** 4 * d ** 3 / log_t
            assert abs(measured - other) > 4 * error


@pytest.mark.parametrize("norm, alpha", [("post", 1.0), ("pre", 1.0), ("post", 0.5)])
def test_torch_branch_perturbations_match_the_terms(norm, alpha):
    """Perturb each branch output of a simulated stack (float64, d = 128, T = 16, 4 blocks, 2 seeds of 2
    sequences) by a small rank-one change and measure the output's relative change: it is b_k.

    Tolerance: a later sub-block passes a fixed perturbation direction with a Jacobian gain whose
    relative fluctuation over the weights is about sqrt(2 / d); skip and norm damp it by
    v / (alpha^2 + v) <= sigma_v2 / (alpha^2 + sigma_v2), and the square root halves it, over at most
    n = 2 L sub-blocks: per term 4 (v / (alpha^2 + v)) sqrt(2 n / d) / 2 (4 standard deviations; 12 % at
    alpha = 1, 31 % at alpha = 0.5, where post-LN terms alternate between 1.9 and 1).
    """
    pytest.importorskip("torch")
    from remprop.validation import SimulationSettings, gaussian_tokens
    from remprop.validation.update_sensitivity import branch_perturbation_gains

    width, seq_len, depth, beta = 128, 16, 4, 0.5
    sim = SimulationSettings(width=width, seq_len=seq_len, dtype="float64", device="cpu")
    arch = Architecture(norm=norm, seq_len=seq_len, alpha_sa=alpha)
    theory = sub_block_sensitivities(arch, beta, depth=depth)
    measured = np.mean([branch_perturbation_gains(
        arch, beta, depth, gaussian_tokens(count=2, seq_len=seq_len, width=width, seed=seed, dtype="float64").tokens,
        seed=seed, sim=sim) for seed in range(2)], axis=0)
    damping = 0.2 / (alpha ** 2 + 0.2)
    tolerance = 4 * damping * math.sqrt(2 * 2 * depth / width) / 2
    assert measured / theory == pytest.approx(np.ones(2 * depth), abs=tolerance)
    assert measured.sum() / theory.sum() == pytest.approx(1.0, abs=tolerance)


def test_no_norm_closed_form_and_examples():
    """No norm: the branch reads the stream, b_k = sqrt(q_{k-1} / q_k) with q_k = alpha^2 q_{k-1} + v_k
    (gain-controlled attention at T -> infinity outputs its value bias, v = sigma_b2; the ReLU MLP
    sigma_w2 (sigma_w2 q + sigma_b2) / 2 + sigma_b2). The docstring examples run."""
    import doctest

    import remprop.theory.learning_rate as module

    depth, q0, alpha = 5, 1.3, 0.9
    q, expected = q0, []
    for _ in range(depth):
        for v in (lambda q: SIGMA_B2, lambda q: SIGMA_W2 * (SIGMA_W2 * q + SIGMA_B2) / 2 + SIGMA_B2):
            skip2 = alpha ** 2 if len(expected) % 2 == 0 else 1.0     # attention: alpha_sa; MLP: alpha_mlp = 1
            new = skip2 * q + v(q)
            expected.append(math.sqrt(q / new))
            q = new
    terms = sub_block_sensitivities(gain_controlled("none", alpha), 0.5, depth=depth, q0=q0)
    assert terms == pytest.approx(np.array(expected), rel=1e-12)
    assert doctest.testmod(module).failed == 0


def test_the_ceiling_counts_a_small_pre_ln_stream_at_its_branches_scale():
    """GPT-2's 0.02 embeddings (q0 = 8e-4) and weak branches: at initialisation the sub-blocks of a pre-LN
    stack are 1/sqrt(q) times as sensitive, but the ceiling counts the stream after its m-th branch at no
    less than 1 + m (the input and every branch grown to unit scale by the first updates; docs/theory.md
    section 20, "The stream's scale"; the scale sweep's smallemb runs trained at the unit-stream runs'
    rates, and its depth-24 and depth-48 pre-LN runs far above the init-time law). The default branches
    grow the stream by less than 1 a branch (0.035 at beta 0.5, alpha 1), so every grown term is exactly
    1/sqrt(1 + m): the closed form, for either input scale, against more than twice it at init."""
    from remprop.theory import update_sensitivity

    arch = Architecture(norm="pre", seq_len=64)
    closed = 1.0 / np.sqrt(1.0 + np.arange(1, 17))
    at_init_small = update_sensitivity(arch, 0.5, depth=8, q0=8e-4)
    at_init_unit = update_sensitivity(arch, 0.5, depth=8, q0=1.0)
    assert at_init_small > 2.0 * at_init_unit > 4.0 * closed.sum()      # the init-time sensitivities
    for q0 in (8e-4, 1.0):
        terms = sub_block_sensitivities(arch, 0.5, depth=8, q0=q0, grown_stream=True)
        np.testing.assert_allclose(terms, closed, rtol=1e-12)
        assert update_sensitivity(arch, 0.5, depth=8, q0=q0, grown_stream=True) == pytest.approx(closed.sum(), rel=1e-12)
    # weak skips: the grown stream forgets through them too, g = alpha^2 g + 1 a branch from g = 1 (alpha
    # 0.5: g -> 4/3); each term counts the larger of the stream at init and the grown one
    weak = Architecture(norm="pre", seq_len=64, alpha_sa=0.5, alpha_mlp=0.5)
    g = np.empty(16)
    g[0] = 0.25 + 1.0
    for m in range(1, 16):
        g[m] = 0.25 * g[m - 1] + 1.0
    q_init = 1.0 / sub_block_sensitivities(weak, 0.5, depth=8) ** 2       # the stream after each branch at init
    np.testing.assert_allclose(sub_block_sensitivities(weak, 0.5, depth=8, grown_stream=True),
                               1.0 / np.sqrt(np.maximum(q_init, g)), rtol=1e-12)
    small = learning_rate_ceiling(arch, 0.5, depth=8, width=64, steps=300, q0=8e-4)
    unit = learning_rate_ceiling(arch, 0.5, depth=8, width=64, steps=300, q0=1.0)
    assert float(small.sensitivity) == pytest.approx(closed.sum(), rel=1e-12)
    assert float(small.stack) == pytest.approx(float(unit.stack), rel=1e-12)
    # post-LN reads normalised inputs after its first sub-block: the rule changes nothing there
    post = Architecture(norm="post", seq_len=64)
    assert update_sensitivity(post, 0.5, depth=8, grown_stream=True) == update_sensitivity(post, 0.5, depth=8)
