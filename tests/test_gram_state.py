"""The Gram-matrix theory state (remprop.theory.gram_state; docs/theory.md section 17)."""
import math

import numpy as np
import pytest
import torch

from remprop.theory import Architecture, propagate
from remprop.theory.gram_state import (GramTrajectory, check_gram, gram_support_problem, mean_pair_cosine,
                                       pair_cosines, propagate_gram, simplex_distance,
                                       structured_attention_gram)

T = 32


def _simplex(t, q, rho):
    return q * (1.0 - rho) * np.eye(t) + q * rho


def _word_tokens(t, d, seed=0, vocab=5, std=0.1):
    """Tokens E_word[id] + E_pos with words repeated (the structure of embedded text), as float64."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, vocab, size=t)
    x = std * rng.standard_normal((vocab, d))[ids] + std * rng.standard_normal((t, d))
    return x, ids


def _block_tree_trajectory(arch, beta, depth, q0, rho0):
    """(q, rho) per layer from the block tree itself (equal to the kernels of propagate to
    1e-12, tests/test_theory_kernels.py), without compiling a depth kernel per variant."""
    block, q, p = arch.block(beta), [q0], [q0 * rho0]
    for _ in range(depth):
        q_new, p_new = block(q[-1], p[-1])
        q.append(float(q_new)), p.append(float(p_new))
    return np.array(q), np.array(p) / np.array(q)


@pytest.mark.parametrize("fields, reference", [
    (dict(norm="post"), "propagate"),
    (dict(norm="pre"), "propagate"),
    (dict(norm="post", norm_type="rms", mlp="gated", activation="silu"), "tree"),
    (dict(norm="pre", norm_type="rms", mlp="gated", activation="silu", sigma_o2=0.5), "tree"),
    (dict(norm="pre", heads=2, qk_scaling="head", activation="gelu"), "tree"),
    (dict(norm="none", alpha_sa=1.0, alpha_mlp=1.0), "tree"),
])
def test_simplex_input_reproduces_the_mean_cosine_maps(fields, reference):
    # a simplex Gram matrix: the control variate is identically zero and every pair map is
    # the mean-cosine map itself, so the states agree to rounding (issue 14 acceptance)
    arch = Architecture(seq_len=T, **fields)
    q0, rho0, beta, depth = 1.3, 0.2, 0.9, 5
    tr = propagate_gram(arch, beta, _simplex(T, q0, rho0), depth)
    if reference == "propagate":
        ref = propagate(arch, beta, depth, q0=q0, rho0=rho0)
        ref_q, ref_rho = ref.q, ref.rho
    else:
        ref_q, ref_rho = _block_tree_trajectory(arch, beta, depth, q0, rho0)
    np.testing.assert_allclose(tr.q, ref_q, rtol=1e-12)
    np.testing.assert_allclose(tr.rho, ref_rho, rtol=1e-12, atol=1e-14)
    # equal norms: the mean pair cosine is p / q
    np.testing.assert_allclose(tr.mean_cosine, ref_rho, rtol=1e-12, atol=1e-14)
    assert np.all(tr.mean_cosine_se < 1e-12)


def test_seq_len_none_runs_at_the_grams_T():
    tr = propagate_gram(Architecture(norm="pre"), 0.7, _simplex(T, 1.0, 0.1), 3)
    ref = propagate(Architecture(norm="pre", seq_len=T), 0.7, 3, q0=1.0, rho0=0.1)
    np.testing.assert_allclose(tr.rho, ref.rho, rtol=1e-12)
    assert tr.settings["seq_len"] == T and isinstance(tr, GramTrajectory)


def test_attention_correction_matches_brute_force_monte_carlo():
    # the control-variate estimate of E[A G A^T] against a plain Monte Carlo of the same
    # Gaussian-field expectation (independent draws, no control variate), on a structured G.
    # Tolerance: 4 combined standard errors of the two estimates (each from its own draws).
    t, beta = 16, 1.2
    x, ids = _word_tokens(t, 64)
    x /= np.sqrt((x * x).mean(axis=1, keepdims=True))       # what the attention sees after a norm
    g = check_gram(x @ x.T / 64)
    arch = Architecture(norm="none", seq_len=t, sigma_v2=1.0, sigma_b2=0.0)
    comp = arch.attention_map(beta)
    q_s = np.trace(g) / t
    p_s = (g.sum() - np.trace(g)) / (t * (t - 1))
    q_a, p_a = comp.apply(np.float64(q_s), np.float64(p_s))
    closed = np.full((t, t), float(p_a))
    np.fill_diagonal(closed, float(q_a))
    draws = 400
    mean, samples = structured_attention_gram(g, beta, draws, np.random.default_rng(1))
    cv = closed + mean
    # brute force
    rng = np.random.default_rng(2)
    lam, u = np.linalg.eigh(g)
    root = (u * np.sqrt(np.maximum(lam, 0))) @ u.T
    c = beta * math.sqrt(math.log(t))
    n_bf = 4000
    bf = np.empty((n_bf, t, t))
    for k in range(n_bf):
        s = c * root @ rng.standard_normal((t, t)) @ root
        s = np.exp(s - s.max(axis=1, keepdims=True))
        a = s / s.sum(axis=1, keepdims=True)
        bf[k] = a @ g @ a.T
    same = (ids[:, None] == ids[None, :]) & ~np.eye(t, dtype=bool)
    other = (ids[:, None] != ids[None, :])
    diag = np.eye(t, dtype=bool)
    for mask in (same, other, diag):
        est, est_se = cv[mask].mean(), samples[:, mask].mean(axis=1).std(ddof=1) / math.sqrt(draws)
        ref = bf[:, mask].mean(axis=1)
        ref_mean, ref_se = ref.mean(), ref.std(ddof=1) / math.sqrt(n_bf)
        assert abs(est - ref_mean) < 4 * math.hypot(est_se, ref_se) + 2e-3 * abs(ref_mean), (est, ref_mean)
    # the structure matters here: same-word pairs are far above the simplex closed form
    assert cv[same].mean() - closed[same].mean() > 10 * samples[:, same].mean(axis=1).std(ddof=1) / math.sqrt(draws)


def _attention_sublayer_errors(seeds=(0, 1), sequences=2, d=256, t=128, beta=0.5):
    """Errors of both theories on the attention sublayer ``x + SA(LN x)`` of a simulated
    pre-LN block 1 fed with embedded text (its measured input): one value per sequence."""
    from remprop.validation import SimulatedStack, SimulationSettings
    from remprop.validation.inputs import text_tokens
    from remprop.validation.registry import BlockContext, simulate_component
    arch = Architecture(norm="pre", seq_len=t)
    out = {"mean": [], "gram": []}
    for seed in seeds:
        stack = SimulatedStack(arch, beta, 1,
                               sim=SimulationSettings(width=d, seq_len=t, dtype="float64", device="cpu"), seed=seed)
        x = text_tokens(sequences, seq_len=t, width=d, seed=seed, dtype="float64", device="cpu").tokens
        sublayer = stack.theory_block.layers[0]        # residual(alpha_sa, serial(norm, attention))
        with torch.no_grad():
            y = simulate_component(sublayer, x, BlockContext(stack.weights(0), heads=1))
        for b in range(sequences):
            xb, yb = x[b].numpy(), y[b].numpy()
            g_in, g_out = xb @ xb.T / d, yb @ yb.T / d
            measured = mean_pair_cosine(g_out)
            q, p = np.trace(g_in) / t, (g_in.sum() - np.trace(g_in)) / (t * (t - 1))
            q1, p1 = sublayer(q, p)
            out["mean"].append(float(p1 / q1) - measured)
            gram_arch = Architecture(norm="pre", seq_len=t)
            from remprop.theory.gram_state import _GramWalker
            walker = _GramWalker(8, np.random.default_rng(seed * 10 + b), gram_arch.activation)
            out["gram"].append(mean_pair_cosine(walker.apply(sublayer, g_in)) - measured)
    return {k: np.array(v) for k, v in out.items()}


def test_structured_theory_beats_the_mean_cosine_on_a_simulated_text_block():
    # pre-LN, beta 0.5, d = 256, T = 128, 16 seeds x 2 text windows, the attention sublayer
    # x + SA(LN x) of block 1. One initialisation scatters the measured cosine by about 0.02
    # (finite width); the margin must exceed 3 standard errors of the mean over the 32
    # sequences (about 0.004 each).
    err = _attention_sublayer_errors(seeds=range(16))
    spread = 3 * max(err["mean"].std(ddof=1), err["gram"].std(ddof=1)) / math.sqrt(len(err["mean"]))
    assert abs(err["mean"].mean()) - abs(err["gram"].mean()) > spread, err
    assert abs(err["gram"].mean()) < 3 * err["gram"].std(ddof=1) / math.sqrt(len(err["gram"]))


def test_simplex_distance():
    assert simplex_distance(_simplex(T, 2.0, 0.3)) == 0.0
    # independent Gaussian tokens: the cosines scatter by 1/sqrt(d) (relative error of the
    # estimate from T (T - 1) / 2 = 2016 nearly independent pairs: about 2 %; 10 % allowed)
    d = 400
    x = np.random.default_rng(0).standard_normal((64, d))
    assert simplex_distance(x @ x.T / d) == pytest.approx(1 / math.sqrt(d), rel=0.1)
    x, ids = _word_tokens(64, d)
    assert simplex_distance(x @ x.T / d) > 0.1         # same-word pairs near 0.5, the others near 0
    c = pair_cosines(x @ x.T / d)
    assert c.shape == (64 * 63 // 2,) and mean_pair_cosine(x @ x.T / d) == pytest.approx(c.mean(), rel=1e-12)


def test_trajectory_fields_and_kept_layers():
    x, _ = _word_tokens(T, 128)
    g = x @ x.T / 128
    tr = propagate_gram(Architecture(norm="pre"), 0.5, g, 4, draws=4, seed=3)
    assert tr.mean_cosine.shape == tr.q.shape == tr.rho.shape == tr.mean_cosine_se.shape == (5,)
    assert sorted(tr.grams) == [0, 1, 2, 4]
    assert tr.mean_cosine[0] == pytest.approx(mean_pair_cosine(g), rel=1e-12)
    assert tr.cosines(4).shape == (T * (T - 1) // 2,)
    assert 0 < tr.mean_cosine_se[1] <= tr.mean_cosine_se[4] < 0.05
    again = propagate_gram(Architecture(norm="pre"), 0.5, g, 4, draws=4, seed=3, keep_layers=[3])
    np.testing.assert_array_equal(again.mean_cosine, tr.mean_cosine)     # seeded
    assert list(again.grams) == [3]
    with pytest.raises(ValueError, match="layer"):
        again.cosines(1)


def test_bad_inputs():
    arch = Architecture(norm="pre")
    good = _simplex(T, 1.0, 0.1)
    bad_grams = {"square": np.ones((3, 4)), "symmetric": good + np.triu(np.full((T, T), 0.1), 1),
                 "finite": np.where(np.eye(T, dtype=bool), np.nan, good), "positive diagonal": good - np.eye(T) * 2,
                 "semidefinite": _simplex(T, 1.0, -0.5)}
    for words, g in bad_grams.items():
        with pytest.raises(ValueError, match=f"gram must .*{words.split()[0]}"):
            propagate_gram(arch, 0.5, g, 2)
    with pytest.raises(ValueError, match="seq_len"):
        propagate_gram(Architecture(seq_len=T + 1), 0.5, good, 2)
    with pytest.raises(ValueError, match="positions"):
        propagate_gram(Architecture(positions="rope", seq_len=T, head_dim=8), 0.5, good, 2)
    with pytest.raises(ValueError, match="attention"):
        propagate_gram(Architecture(attention="gain-controlled"), 0.5, good, 2)
    with pytest.raises(ValueError, match="activation"):
        propagate_gram(Architecture(norm="none", activation="gelu"), 0.5, good, 2)
    with pytest.raises(ValueError, match="sigma_v2"):
        propagate_gram(Architecture(sigma_v2=[0.1, 0.2]), 0.5, good, 2)
    for kw, name in ((dict(draws=0), "draws"), (dict(seed=-1), "seed")):
        with pytest.raises(ValueError, match=name):
            propagate_gram(arch, 0.5, good, 2, **kw)
    with pytest.raises(ValueError, match="beta"):
        propagate_gram(arch, 0.0, good, 2)
    with pytest.raises(ValueError, match="depth"):
        propagate_gram(arch, 0.5, good, 0)
    with pytest.raises(ValueError, match="arch"):
        propagate_gram("post", 0.5, good, 2)
    assert gram_support_problem(arch) is None


def test_compare_uses_the_gram_state_for_text():
    from remprop.validation.comparison import compare
    from remprop.validation.settings import SimulationSettings
    text = SimulationSettings(seq_len=32, width=64, seeds=1, sequences=2, device="cpu", inputs="text")
    kw = dict(beta=0.5, depth=2)
    gram = compare(Architecture(norm="pre"), sim=text, theory="gram", **kw)
    assert gram.settings["theory"] == "gram" and gram.settings["simplex_distance"] > 0.05
    # the theory starts from each sequence's measured Gram matrix: layer 0 is the measured cosine
    assert gram.theory.rho[0] == pytest.approx(gram.mean("cosine")[0], abs=1e-9)
    assert len(gram.settings["theory_cosine_se"]) == 3
    mean = compare(Architecture(norm="pre"), sim=text, theory="mean", **kw)
    assert mean.settings["theory"] == "mean"
    # every theory reports how far the inputs are from a simplex: the same inputs, the same distance
    assert mean.settings["simplex_distance"] == gram.settings["simplex_distance"]
    assert "from a simplex" in mean.summary() and "mean-cosine maps" in mean.summary()
    np.testing.assert_array_equal(mean.trace.cosine, gram.trace.cosine)
    synthetic = compare(Architecture(norm="pre"), sim=text.replace(inputs="synthetic"), **kw)
    assert synthetic.settings["theory"] == "mean"
    # independent Gaussian tokens: pair cosines of variance exactly 1/d, so the distance is about
    # 1/sqrt(d); ~990 pairs give an rms good to ~2.5 % (1/sqrt(2 N)): 15 % is six of those
    assert synthetic.settings["simplex_distance"] * np.sqrt(64) == pytest.approx(1.0, abs=0.15)
    with pytest.raises(ValueError, match="theory"):
        compare(Architecture(norm="pre"), sim=text, theory="exact", **kw)
    # the single-initialisation chains, the default for text: the same measurement, the same
    # measured start, another theory
    sampled = compare(Architecture(norm="pre"), sim=text, **kw)
    assert sampled.settings["theory"] == "sampled" and sampled.settings["simplex_distance"] > 0.05
    np.testing.assert_array_equal(sampled.trace.cosine, gram.trace.cosine)
    assert sampled.theory.rho[0] == pytest.approx(gram.theory.rho[0], abs=1e-9)
    assert np.all(np.isfinite(sampled.theory.rho)) and not np.allclose(sampled.theory.rho[1:], gram.theory.rho[1:])
    # the figure's legend names the theory it draws (the mean maps here run at T -> infinity)
    import matplotlib.pyplot as plt
    from remprop.diagrams.comparison_figures import plot_layer_comparisons
    legends = {}
    for name, comparison in (("sampled", sampled), ("gram", gram), ("mean", mean)):
        ax = plot_layer_comparisons([comparison])
        legends[name] = [t.get_text() for t in ax.get_legend().get_texts()]
        plt.close(ax.figure)
    assert "theory: Gram chains, $T = 32$" in legends["sampled"]
    assert "theory: mean Gram state, $T = 32$" in legends["gram"]
    assert r"theory, $T \to \infty$" in legends["mean"]


def test_pair_cosine_figure(tmp_path):
    from remprop.diagrams.gram_figures import plot_pair_cosines, repeated_pair_mask
    x, ids = _word_tokens(T, 128)
    g = x @ x.T / 128
    tr = propagate_gram(Architecture(norm="pre"), 0.5, g, 2, draws=2)
    mask = repeated_pair_mask(ids)
    assert mask.shape == (T * (T - 1) // 2,) and mask.any()
    # repeated-word pairs sit near cosine 1/2 at the input, the rest near 0
    assert tr.cosines(0)[mask].mean() > 0.3 > 0.1 > abs(tr.cosines(0)[~mask].mean())
    axes = plot_pair_cosines({k: tr.cosines(k) for k in (0, 1, 2)}, {k: tr.cosines(k) for k in (0, 1, 2)}, mask)
    assert len(axes) == 3
    axes[0].figure.savefig(tmp_path / "pairs.png")
    assert (tmp_path / "pairs.png").stat().st_size > 0
    with pytest.raises(ValueError, match="measured"):
        plot_pair_cosines({0: tr.cosines(0)}, {1: tr.cosines(0)}, mask)
    with pytest.raises(ValueError, match="repeated"):
        plot_pair_cosines({0: tr.cosines(0)}, {0: tr.cosines(0)}, mask.astype(int))
    with pytest.raises(ValueError, match="ids"):
        repeated_pair_mask([1.5, 2.0])


def test_frozen_attention_keeps_a_gram_matrix():
    # beta far above beta_c: rows lock onto a few keys and A, A_s decorrelate (the REM is
    # chaotic in its energies), so the control variate may leave a matrix that is not PSD;
    # the plain Monte Carlo mean of the same draws (PSD by construction) then takes over
    x, _ = _word_tokens(64, 128, vocab=8)
    x /= np.sqrt((x * x).mean(axis=1, keepdims=True))
    g = x @ x.T / 128
    tr = propagate_gram(Architecture(norm="pre"), 4.0, g, 3, draws=4)
    assert np.isfinite(tr.mean_cosine).all() and np.all(tr.q > 0)
    for layer in tr.grams:
        check_gram(tr.grams[layer])
    assert 0 <= tr.settings["plain_monte_carlo_layers"] <= 3


# -- sampled chains (docs/theory.md section 17.1) ------------------------------------------
def test_sampled_chains_tend_to_the_mean_maps_as_beta_vanishes():
    # at c = beta sqrt(log T) -> 0 every row is uniform plus c (S - row means); on a simplex the
    # term linear in c cancels (rows of S - row means sum to 0 against G 1 = const), so one draw
    # differs from the mean maps by O(c^2): bounded by c^2 and shrinking ~100x for beta / 10
    arch = Architecture(norm="pre")
    diffs = []
    for beta in (1e-3, 1e-4):
        tr = propagate_gram(arch, beta, _simplex(T, 1.0, 0.2), 4, draws=3, sampled=True)
        q_ref, rho_ref = _block_tree_trajectory(arch.replace(seq_len=T), beta, 4, 1.0, 0.2)
        diff = max(np.abs(tr.mean_cosine - rho_ref).max(), np.abs(tr.q - q_ref).max())
        assert diff <= beta ** 2 * math.log(T), (beta, diff)
        diffs.append(diff)
    assert diffs[0] / diffs[1] > 30, diffs
    assert tr.settings["sampled"] is True and tr.settings["plain_monte_carlo_layers"] == 0


def test_sampled_attention_is_an_unbiased_draw_of_the_mean_gram():
    # the average of single-draw outputs sigma_v2 A G A^T + sigma_b2 is the finite-T closed
    # form of section 3.4 on a simplex (2000 draws, T = 32; within 4 standard errors)
    from remprop.theory import components, softmax_attention_map
    from remprop.theory.gram_state import _SampledGramWalker
    comp, g = components.softmax_attention(1.5, 0.2, 4e-4, seq_len=T), _simplex(T, 1.0, 0.3)
    walker = _SampledGramWalker(np.random.default_rng(1), "relu", 1)
    out = np.array([walker.attention(comp, g) for _ in range(2000)])
    q = np.trace(out, axis1=1, axis2=2) / T
    p = (out.sum(axis=(1, 2)) - q * T) / (T * (T - 1))
    q_a, p_a = softmax_attention_map(1.5, q=1.0, p=0.3, sigma_v2=0.2, sigma_b2=4e-4, seq_len=T)
    for sample, exact in ((q, q_a), (p, p_a)):
        assert abs(sample.mean() - exact) < 4 * sample.std(ddof=1) / math.sqrt(len(sample)), (sample.mean(), exact)
    # one draw is not the mean: the rows' participation ratios scatter the output norms
    assert np.mean(out[:, np.arange(T), np.arange(T)].std(axis=1) / q) > 0.05


def test_sampled_chain_keeps_the_row_fluctuations_of_a_simulated_layer():
    # beta = 2 (frozen), T = 32, a simplex input: the spread (coefficient of variation) of the
    # output token norms |a_i|^2 of one torch attention layer at d = 2048 (40 initialisations)
    # against 200 single draws; the mean Gram state has none. Tolerance: 4 combined standard
    # errors plus the finite-width spread sqrt(2/d) of |W_V v|^2, added in quadrature. The layer
    # runs in float32 (rounding 6e-8, far below the spreads compared; the d x d draws take a third
    # of float64's time)
    from remprop.theory import components
    from remprop.theory.gram_state import _SampledGramWalker
    from remprop.validation import layers
    beta, d = 2.0, 2048
    g = _simplex(T, 1.0, 0.3)
    comp = components.softmax_attention(beta, 0.2, 4e-4, seq_len=T)
    walker = _SampledGramWalker(np.random.default_rng(2), "relu", 1)

    def spread(gram):
        diag = np.diag(gram)
        return diag.std() / diag.mean()

    theory = np.array([spread(walker.attention(comp, g)) for _ in range(200)])
    rng = np.random.default_rng(5)
    simulated = []
    for seed in range(40):
        frame = np.linalg.qr(rng.standard_normal((d, T)))[0].T * math.sqrt(d)     # x x^T / d = g exactly
        x = torch.tensor(np.linalg.cholesky(g) @ frame, dtype=torch.float32)
        weights = layers.draw_attention_weights(torch.Generator().manual_seed(seed), d, beta, T, 0.2, 4e-4,
                                                dtype=torch.float32, device="cpu")
        a = layers.softmax_attention(x[None], weights)[0][0].double()
        simulated.append(spread((a @ a.T / d).numpy()))
    simulated = np.array(simulated)
    se = math.hypot(theory.std(ddof=1) / math.sqrt(len(theory)), simulated.std(ddof=1) / math.sqrt(len(simulated)))
    width_term = math.sqrt(theory.mean() ** 2 + 2 / d) - theory.mean()
    assert abs(simulated.mean() - theory.mean()) < 4 * se + width_term, (simulated.mean(), theory.mean(), se)
    assert theory.mean() > 0.15
    mean_state = propagate_gram(Architecture(norm="pre"), beta, g, 1, draws=4)
    assert spread(mean_state.grams[0]) == 0.0


def test_sampled_heads_average_their_draws():
    # H heads at the same effective beta average H independent draws: the spread over chains of
    # the layer-1 mean cosine falls by sqrt(H) = 2 at H = 4 (200 chains: the ratio of two sample
    # standard deviations has a relative error of about sqrt(2 / 199) * sqrt(2) = 0.14; 4 sigma)
    spread = {}
    for heads in (1, 4):
        tr = propagate_gram(Architecture(norm="pre", heads=heads), 1.5, _simplex(T, 1.0, 0.2), 1, draws=200,
                            sampled=True, keep_layers=())
        spread[heads] = tr.mean_cosine_se[1] * math.sqrt(200)
    assert abs(spread[1] / spread[4] - 2.0) < 4 * 0.14 * 2.0, spread


def test_sampled_chain_on_a_singular_gram_matrix():
    # T = 32 tokens of width 8: G has rank 8, its Cholesky factor does not exist and the chain
    # falls back to the symmetric square root. Its attention layer is still a draw of the mean
    # Gram state's: 1000 draws of the output's mean diagonal q against the plain Monte Carlo
    # mean of the same layer (1000 draws), within 4 combined standard errors
    from remprop.theory import components
    from remprop.theory.gram_state import _SampledGramWalker, structured_attention_gram
    x = np.random.default_rng(3).standard_normal((T, 8))
    g = x @ x.T / 8
    assert np.linalg.matrix_rank(g) == 8
    comp = components.softmax_attention(1.5, 1.0, 0.0, seq_len=T)
    walker = _SampledGramWalker(np.random.default_rng(4), "relu", 1)
    sampled = np.array([np.trace(walker.attention(comp, g)) / T for _ in range(1000)])
    _, _, plain = structured_attention_gram(g, 1.5, draws=1000, rng=np.random.default_rng(5), full=True)
    plain = np.trace(plain, axis1=1, axis2=2) / T
    assert np.all(np.isfinite(sampled))
    se = math.hypot(sampled.std(ddof=1), plain.std(ddof=1)) / math.sqrt(1000)
    assert abs(sampled.mean() - plain.mean()) < 4 * se, (sampled.mean(), plain.mean(), se)


def test_sampled_bad_input():
    g = _simplex(T, 1.0, 0.2)
    with pytest.raises(ValueError, match="sampled"):
        propagate_gram(Architecture(norm="pre"), 0.5, g, 2, sampled="yes")
    tr = propagate_gram(Architecture(norm="pre"), 0.5, g, 2, draws=1, sampled=True)
    assert np.all(tr.mean_cosine_se == 0) and sorted(tr.grams) == [0, 1, 2]
