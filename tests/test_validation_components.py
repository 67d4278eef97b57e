"""remprop.validation: the registry of components (theory map vs simulated torch layer),
the initialisation conventions, and the measurements.

Sizes: d = T = 128. Every statistical tolerance is ``K * sem + bias`` where ``sem`` is the
standard error of the mean over independent seeds (one fresh weight draw and one fresh
input per seed) and ``bias`` the known finite-size bias stated next to each check.
K = 5: with the standard deviation itself estimated from 16 seeds (Student t, 15 dof),
|t| > 5 has probability ~2e-4 per check, so the ~40 checks here fail by chance with
probability below 1%; being seeded, they fail the same way on every run.
"""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")

from remprop.theory import NUMERIC_FIELDS, OPTIONAL_FIELDS, Architecture, beta_critical  # noqa: E402
from remprop.theory.activations import BUILTIN_ACTIVATIONS  # noqa: E402
from remprop.validation import layers  # noqa: E402
from remprop.validation.backend import STREAM_WEIGHTS, generator  # noqa: E402
from remprop.validation.inputs import gaussian_tokens  # noqa: E402
from remprop.validation.measurements import attention_statistics, token_statistics  # noqa: E402
from remprop.validation.registry import REGISTRY  # noqa: E402
from remprop.validation.simulator import SimulatedStack  # noqa: E402
from remprop.validation.settings import SimulationSettings  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))

D = T = 128
SEEDS = 16
K = 5.0


def _measure(entry, params, q0, rho0, seeds=SEEDS):
    """Per-seed (q, p) of the simulated component's output (one sequence per seed)."""
    q, p = np.empty(seeds), np.empty(seeds)
    for seed in range(seeds):
        x = gaussian_tokens(q0, rho0, count=1, seq_len=T, width=D, seed=seed, dtype="float64", device="cpu").tokens
        y = entry.simulate(x, generator(seed, STREAM_WEIGHTS, 0), **params)
        stats = token_statistics(y)
        q[seed], p[seed] = float(stats["q"][0]), float(stats["p"][0])
    return q, p


def _sem(values):
    return values.std(ddof=1) / math.sqrt(values.size)


def _annealed_y2(beta, q, p):
    """Finite-T participation ratio of a REM row below beta_c / 2 (annealed estimate).

    For T i.i.d. Gaussian scores of variance v = beta^2 q (q - p) log T the annealed
    approximation E[sum_j e^(2 s_j)] / E[sum_j e^(s_j)]^2 gives Y2 = e^v / T
    (= T^-(1 - 2 beta^2 / beta_c^2), docs/theory.md section 3); the asymptotic theory sets it to 0.
    """
    return math.exp(beta ** 2 * q * (q - p) * math.log(T)) / T


# (component, parameters, q0, rho0); attention only in the spread phase beta < beta_c / 2,
# where the asymptotic map is exact up to the annealed finite-T bias above.
CASES = [
    ("softmax_attention", dict(beta=0.3), 1.0, 0.3),
    ("softmax_attention", dict(beta=0.5), 2.0, 0.7),
    ("gain_controlled_attention", dict(beta=0.3), 1.0, 0.3),
    ("gain_controlled_attention", dict(beta=0.5), 2.0, 0.7),
    ("skip", dict(alpha=0.5), 1.0, 0.3),
    ("skip", dict(alpha=1.3, sigma_w2=0.5), 2.0, 0.7),
    ("parallel", dict(alpha=0.5), 1.0, 0.3),
    ("parallel", dict(alpha=1.3, sigma_w2=0.5), 2.0, 0.7),
    ("layer_norm", {}, 1.0, 0.3),
    ("layer_norm", {}, 2.0, 0.7),
    ("rms_norm", {}, 1.0, 0.3),
    ("rms_norm", {}, 2.0, 0.7),
    ("mlp", dict(activation="relu"), 1.0, 0.3),
    ("mlp", dict(activation="relu", sigma_w2=1.5), 2.0, 0.7),
    ("mlp", dict(activation="linear"), 1.0, 0.3),
    ("mlp", dict(activation="tanh", sigma_w2=1.5), 1.0, 0.3),
    ("mlp", dict(activation="erf", sigma_w2=1.5), 2.0, 0.7),
    ("mlp", dict(activation="gelu", sigma_w2=1.5), 1.0, 0.3),
    ("mlp", dict(activation="silu", sigma_w2=1.5), 2.0, 0.7),
    # second layer with its own variance over a different fan-in d_ff (W2 ~ N(0, s_out / d_ff))
    ("mlp", dict(activation="gelu", sigma_w2=1.5, sigma_w2_out=0.6, d_ff=192), 1.0, 0.3),
    ("mlp", dict(activation="relu", sigma_w2=0.5, sigma_w2_out=2.0, d_ff=80), 2.0, 0.7),
    # gated MLPs (SwiGLU / GeGLU): gate and up independent, down over d_ff
    ("gated_mlp", dict(activation="silu", sigma_w2=1.5), 1.0, 0.3),
    ("gated_mlp", dict(activation="gelu", sigma_w2=0.8, sigma_w2_out=1.2, d_ff=192), 2.0, 0.7),
    # bias-free output projection: E over W_O of the output Gram is sigma_o2 times the input's
    # exactly, and the input's sample (q, p) is exact (gaussian_tokens): no bias term.
    ("output_projection", dict(sigma_o2=0.5), 1.0, 0.3),
    ("output_projection", dict(sigma_o2=2.0), 2.0, 0.7),
]


def test_cases_cover_every_registry_entry_and_activation():
    assert {name for name, *_ in CASES} == set(REGISTRY)
    # Built-in activations only: other tests register user activations in the same process.
    assert set(layers.ACTIVATION_FUNCTIONS) == set(BUILTIN_ACTIVATIONS)
    assert {c[1]["activation"] for c in CASES if c[0] == "mlp"} == set(BUILTIN_ACTIVATIONS)


@pytest.mark.parametrize("name, params, q0, rho0", CASES,
                         ids=[f"{c[0]}-{c[2]}-{c[3]}-{sorted(c[1].items())}" for c in CASES])
def test_registry_theory_matches_simulation(name, params, q0, rho0):
    entry = REGISTRY[name]
    q_theory, p_theory = entry.theory(q0, q0 * rho0, **params)
    q_sim, p_sim = _measure(entry, params, q0, rho0)
    bias_q = bias_p = 0.0
    p0 = q0 * rho0
    if name.endswith("attention"):
        beta = params["beta"]
        assert beta < beta_critical(q0, p0) / 2  # the regime the bias estimate holds in
        # finite T: q_A gains s_v^2 (q - p) Y2; the row cross-overlap in p_A is at most Y2
        # (Cauchy-Schwarz); centring removes at most Y2 (gain-controlled).
        bias_q = bias_p = 0.2 * (q0 - p0) * _annealed_y2(beta, q0, p0)
    if name in ("layer_norm", "rms_norm"):
        # LN (and RMSNorm: no centring, the token's feature mean is O(1/sqrt(d))) output p is the mean pairwise cosine of its inputs, which exceeds p/q through
        # the token norm fluctuations Var(eps) = 2 (1 - rho)^2 / d by Var(eps) / (T - 1)
        # + (3/4) rho Var(eps) (derived in test_validation_inputs); factor 2 margin.
        var_eps = 2.0 * (1.0 - rho0) ** 2 / D
        bias_p = 2.0 * (var_eps / (T - 1) + 0.75 * rho0 * var_eps)
    # MLP (any d_ff): the ReLU kernel is applied to sample Gram entries that fluctuate by O(1/sqrt(d));
    # its curvature 1/(pi sqrt(1-c^2)) makes the Jensen bias < 1e-3 of p, far below K * sem.
    # 1e-9 relative: rounding and the LayerNorm epsilon (1e-12).
    assert abs(q_sim.mean() - q_theory) <= K * _sem(q_sim) + bias_q + 1e-9 * abs(q_theory)
    assert abs(p_sim.mean() - p_theory) <= K * _sem(p_sim) + bias_p + 1e-9 * abs(p_theory)


@pytest.mark.parametrize("beta", [2.5, 4.0])
def test_attention_output_is_the_gram_weighted_participation_ratio(beta):
    # Where the asymptotic Y2 misses at finite T (beta > beta_c), the value path of the map
    # still holds sequence by sequence: A depends on W_Q, W_K only, so averaging over W_V
    # and b_V gives exactly E[q_A | x, A] = s_v^2 <a_i^T G a_i>_i + s_b^2 with G = X X^T / d.
    # For an exact simplex (G = (q - p) I + p 1 1^T) this is the theory's
    # s_v^2 (p + (q - p) Y2) + s_b^2. (At d = 128 the sample G of Gaussian tokens makes
    # <a^T G a> exceed Y2 by ~0.04 at beta = 2.5: attention picks large-norm keys.)
    sigma_v2, sigma_b2 = 0.2, 4e-4
    diffs = np.empty(SEEDS)
    for seed in range(SEEDS):
        x = gaussian_tokens(1.0, 0.0, count=1, seq_len=T, width=D, seed=seed, dtype="float64", device="cpu").tokens
        w = layers.draw_attention_weights(generator(seed, STREAM_WEIGHTS, 0), D, beta, T, sigma_v2, sigma_b2,
                                          dtype=torch.float64, device="cpu")
        out, probs = layers.softmax_attention(x, w)
        a = probs[0, 0]
        gram = x[0] @ x[0].T / D
        weighted = float(((a @ gram) * a).sum(dim=-1).mean())
        diffs[seed] = float(token_statistics(out)["q"][0]) - (sigma_v2 * weighted + sigma_b2)
    assert abs(diffs.mean()) <= K * _sem(diffs)


def test_registry_names_theory_maps_and_torch_functions():
    import remprop.theory as theory

    for name, entry in REGISTRY.items():
        assert entry.name == name
        assert entry.theory_map is getattr(theory, entry.theory_map.__name__)
        assert entry.torch_function is getattr(layers, entry.torch_function.__name__)


# The torch functions each block calls, in order, for the block tree of Architecture.compose
# (docs/theory.md section 5); the skip runs after its branch.
BLOCK_CALLS = [
    (Architecture(), ["softmax_attention", "skip", "layer_norm", "mlp", "skip", "layer_norm"]),
    (Architecture(norm="pre", attention="gain-controlled", sigma_o2=0.5),
     ["layer_norm", "gain_controlled_attention", "output_projection", "skip", "layer_norm", "mlp", "skip"]),
    (Architecture(norm="none", sigma_o2=2.0),
     ["softmax_attention", "output_projection", "skip", "mlp", "skip"]),
]


@pytest.mark.parametrize("arch, expected", BLOCK_CALLS, ids=[f"{a.norm}-{a.attention}" for a, _ in BLOCK_CALLS])
def test_the_simulator_walks_the_theory_block_through_the_components(monkeypatch, arch, expected):
    """Each component of the block runs through its own torch face, which calls its torch
    function of validation/layers.py: spied on here, in the order of the tree."""
    calls = []
    for name in {name for _, names in BLOCK_CALLS for name in names}:
        def spy(*args, _function=getattr(layers, name), _name=name, **kwargs):
            calls.append(_name)
            return _function(*args, **kwargs)
        monkeypatch.setattr(layers, name, spy)
    stack = SimulatedStack(arch, 0.5, 2, sim=SimulationSettings(width=8, seq_len=4, device="cpu"))
    assert repr(stack.theory_block) == repr(arch.block(0.5))
    stack(torch.randn(1, 4, 8, generator=torch.Generator().manual_seed(0)))
    assert calls == expected * 2


def test_every_block_component_has_a_torch_face():
    from remprop.theory import components as C

    def leaves(tree):
        return [tree] if not tree.children else [leaf for child in tree.children for leaf in leaves(child)]

    base = C.Component.torch_forward
    for arch in [a for a, _ in BLOCK_CALLS] + [Architecture(norm="pre", mlp="gated", norm_type="rms",
                                                            block_form="parallel", branch_norm=True)]:
        for leaf in leaves(arch.block(0.5)):
            assert type(leaf).torch_forward is not base, leaf
    with pytest.raises(NotImplementedError, match="torch face"):
        C.Component().torch_forward(torch.zeros(1, 2, 2), None)


def test_registry_rejects_unknown_parameters():
    with pytest.raises(ValueError, match="gamma"):
        REGISTRY["skip"].theory(1.0, 0.0, gamma=2.0)
    with pytest.raises(ValueError, match="activation"):
        REGISTRY["mlp"].simulate(torch.zeros(1, 4, 8), generator(0, 0), activation="softplus")


def test_initialisation_variances_follow_the_conventions():
    # Each matrix has n = d^2 (or d d_ff) i.i.d. entries: the sample variance has relative
    # standard deviation sqrt(2/n) (< 0.02 here); K of those is the tolerance.
    beta, d, d_ff, seq = 0.7, 96, 160, 300
    arch = Architecture(sigma_w2=0.4, sigma_b2=0.01, sigma_v2=0.3)
    sim = SimulationSettings(width=d, seq_len=seq, d_ff=d_ff, dtype="float64", device="cpu")
    w = SimulatedStack(arch, beta, 2, sim=sim).weights(1)
    expected = {
        "query": beta * math.sqrt(math.log(seq)) / d, "key": beta * math.sqrt(math.log(seq)) / d,
        "value": 0.3 / d, "value_bias": 0.01, "w1": 0.4 / d, "b1": 0.01, "w2": 0.4 / d_ff, "b2": 0.01,
    }
    tensors = {**vars(w.attention), **vars(w.mlp)}
    assert tensors["w1"].shape == (d_ff, d) and tensors["w2"].shape == (d, d_ff)
    for key, variance in expected.items():
        t = tensors[key]
        tol = K * math.sqrt(2.0 / t.numel())
        assert abs(float(t.var()) / variance - 1.0) <= tol, key
        assert abs(float(t.mean())) <= K * math.sqrt(variance / t.numel()), key


def test_output_projection_and_second_layer_variances_follow_the_conventions():
    # W_O ~ N(0, sigma_o2 / d) (d x d, no bias), W2 ~ N(0, sigma_w2_out / d_ff); same
    # tolerance as above (sample variance of n i.i.d. entries: relative sd sqrt(2/n)).
    d, d_ff = 96, 160
    arch = Architecture(sigma_w2=0.4, sigma_o2=0.7, sigma_w2_out=1.3)
    sim = SimulationSettings(width=d, seq_len=64, d_ff=d_ff, dtype="float64", device="cpu")
    w = SimulatedStack(arch, 0.7, 1, sim=sim).weights(0)
    assert w.output.shape == (d, d) and w.mlp.w2.shape == (d, d_ff)
    for t, variance in ((w.output, 0.7 / d), (w.mlp.w2, 1.3 / d_ff), (w.mlp.w1, 0.4 / d)):
        assert abs(float(t.var()) / variance - 1.0) <= K * math.sqrt(2.0 / t.numel())
        assert abs(float(t.mean())) <= K * math.sqrt(variance / t.numel())


def test_new_fields_leave_the_existing_random_streams_unchanged():
    # W_O is drawn last and only when the architecture has one; sigma_w2_out only rescales
    # W2. So a seed gives the same attention and MLP weights with or without the new
    # fields, and bit-identical weights (in the original draw order) without them.
    kw = dict(sim=SimulationSettings(width=24, d_ff=40, seq_len=16, dtype="float64", device="cpu"), seed=3)
    plain = SimulatedStack(Architecture(heads=2), 0.8, 2, **kw).weights(1)
    assert plain.output is None
    gen = generator(3, STREAM_WEIGHTS, 1, "cpu")
    f64 = dict(dtype=torch.float64, device="cpu")
    attn = layers.draw_attention_weights(gen, 24, 0.8, 16, 0.2, 4e-4, layout=layers.HeadLayout(2), **f64)
    mlp = layers.draw_mlp_weights(gen, 24, 40, 0.2, 4e-4, **f64)
    for name in ("query", "key", "value", "value_bias"):
        assert torch.equal(getattr(plain.attention, name), getattr(attn, name))
    for name in ("w1", "b1", "w2", "b2"):
        assert torch.equal(getattr(plain.mlp, name), getattr(mlp, name))
    projected = SimulatedStack(Architecture(sigma_o2=0.5, sigma_w2_out=0.8, heads=2), 0.8, 2, **kw).weights(1)
    assert projected.output is not None
    for name in ("query", "key", "value", "value_bias"):
        assert torch.equal(getattr(projected.attention, name), getattr(plain.attention, name))
    for name in ("w1", "b1", "b2"):
        assert torch.equal(getattr(projected.mlp, name), getattr(plain.mlp, name))
    torch.testing.assert_close(projected.mlp.w2, plain.mlp.w2 * math.sqrt(0.8 / 0.2), rtol=1e-15, atol=0)
    # the projection is the next draw of the layer's stream
    torch.testing.assert_close(projected.output, torch.randn(24, 24, generator=gen, **f64) * math.sqrt(0.5 / 24),
                               rtol=1e-15, atol=0)


def test_weights_are_deterministic_per_seed_and_layer():
    kw = dict(sim=SimulationSettings(width=16, seq_len=8, device="cpu"))
    a = SimulatedStack(None, 0.5, 3, seed=4, **kw)
    b = SimulatedStack(None, 0.5, 3, seed=4, **kw)
    c = SimulatedStack(None, 0.5, 3, seed=5, **kw)
    w2 = b.weights(2)  # drawn first: no dependence on the order of draws
    assert torch.equal(a.weights(2).attention.query, w2.attention.query)
    assert torch.equal(a.weights(2).mlp.w2, w2.mlp.w2)
    assert not torch.equal(a.weights(1).attention.query, w2.attention.query)
    assert not torch.equal(c.weights(2).attention.query, w2.attention.query)


@pytest.mark.parametrize("heads", [1, 4])
def test_multi_head_scores_keep_the_single_head_variance(heads):
    # Convention: s_qk^2 = beta sqrt(log T) / d for every H, so Var(s_ij) = beta^2 q^2 log T
    # per head (docs/theory.md section 2). Per seed the sample variance over T^2 H scores of
    # (q = 1, p = 0) tokens; its spread over seeds (weights, O(1/sqrt(d))) sets the tolerance.
    beta = 0.8
    variances = np.empty(SEEDS)
    for seed in range(SEEDS):
        x = gaussian_tokens(1.0, 0.0, count=1, seq_len=T, width=D, seed=seed, dtype="float64", device="cpu").tokens
        w = layers.draw_attention_weights(generator(seed, STREAM_WEIGHTS, 0), D, beta, T, 0.2, 0.0,
                                          dtype=torch.float64, device="cpu")
        dh = D // heads
        qh = (x @ w.query.T).view(T, heads, dh).transpose(0, 1)
        kh = (x @ w.key.T).view(T, heads, dh).transpose(0, 1)
        variances[seed] = float((qh @ kh.transpose(-1, -2) / math.sqrt(dh)).var())
    assert abs(variances.mean() - beta ** 2 * math.log(T)) <= K * _sem(variances)


def test_participation_ratio_does_not_depend_on_the_number_of_heads():
    # docs/theory.md section 2: with s_qk^2 over d, Y2 is the same for every H (with s_qk^2 over d_H it
    # would not be). Paired seeds; the per-seed difference's spread sets the tolerance.
    beta = 1.0
    diff = np.empty(SEEDS)
    for seed in range(SEEDS):
        x = gaussian_tokens(1.0, 0.0, count=1, seq_len=T, width=D, seed=seed, dtype="float64", device="cpu").tokens
        y2 = []
        for heads in (1, 4):
            w = layers.draw_attention_weights(generator(seed, STREAM_WEIGHTS, heads), D, beta, T, 0.2, 0.0,
                                              dtype=torch.float64, device="cpu")
            y2.append(float(attention_statistics(layers.softmax_attention(x, w, heads=heads)[1])["y2"][0]))
        diff[seed] = y2[1] - y2[0]
    assert abs(diff.mean()) <= K * _sem(diff)


def test_gain_controlled_attention_has_zero_sequence_mean_before_the_bias():
    x = gaussian_tokens(1.0, 0.5, count=2, seq_len=16, width=32, seed=1, dtype="float64", device="cpu").tokens
    w = layers.draw_attention_weights(generator(1, 0), 32, 2.0, 16, 0.2, 0.3, dtype=torch.float64, device="cpu")
    out, _ = layers.gain_controlled_attention(x, w)
    torch.testing.assert_close(out.mean(dim=1), w.value_bias.expand(2, -1), rtol=0, atol=1e-12)
    mask = torch.ones(2, 16, dtype=torch.bool)
    mask[1, 10:] = False
    out, probs = layers.gain_controlled_attention(x, w, mask=mask)
    torch.testing.assert_close(out[1, :10].mean(dim=0), w.value_bias, rtol=0, atol=1e-12)
    assert float(probs[1, :, :, 10:].abs().max()) == 0.0


def test_causal_attention_sees_only_the_past():
    x = gaussian_tokens(1.0, 0.0, count=1, seq_len=12, width=16, seed=0, dtype="float64", device="cpu").tokens
    w = layers.draw_attention_weights(generator(0, 0), 16, 1.0, 12, 0.2, 0.0, dtype=torch.float64, device="cpu")
    out, probs = layers.softmax_attention(x, w, causal=True)
    assert float(probs[0, 0].triu(1).abs().max()) == 0.0
    x2 = x.clone()
    x2[0, 7:] += 5.0  # changing the future leaves the past unchanged
    out2, _ = layers.softmax_attention(x2, w, causal=True)
    torch.testing.assert_close(out[0, :7], out2[0, :7], rtol=0, atol=1e-12)


# -- measurements ----------------------------------------------------------------------
def test_token_statistics_equal_the_gram_matrix_definitions():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 9, 5, generator=gen, dtype=torch.float64) + 0.7
    mask = torch.ones(3, 9, dtype=torch.bool)
    mask[1, 6:] = False
    stats = token_statistics(x, mask)
    for b in range(3):
        xs = x[b, mask[b]]
        n, d = xs.shape
        gram = xs @ xs.T / d
        off = ~torch.eye(n, dtype=torch.bool)
        norms = gram.diag().sqrt()
        cos = gram / norms[:, None] / norms[None, :]
        expected = {"q": gram.diag().mean(), "p": gram[off].mean(), "cosine": cos[off].mean()}
        expected["rho"] = expected["p"] / expected["q"]
        for key, value in expected.items():
            assert float(stats[key][b]) == pytest.approx(float(value), rel=1e-12, abs=1e-14), (b, key)


def test_attention_statistics_limits_and_padding():
    t = 8
    uniform = torch.full((1, 2, t, t), 1.0 / t, dtype=torch.float64)
    one_hot = torch.eye(t, dtype=torch.float64).expand(1, 2, t, t)
    s = attention_statistics(uniform)
    assert float(s["y2"][0]) == pytest.approx(1.0 / t) and float(s["entropy"][0]) == pytest.approx(math.log(t))
    s = attention_statistics(one_hot)
    assert float(s["y2"][0]) == pytest.approx(1.0) and float(s["entropy"][0]) == pytest.approx(0.0, abs=1e-15)
    mixed = uniform.clone()
    mixed[:, :, 5:] = one_hot[:, :, 5:]  # rows of padded queries are left out
    mask = torch.zeros(1, t, dtype=torch.bool)
    mask[0, :5] = True
    assert float(attention_statistics(mixed, mask)["y2"][0]) == pytest.approx(1.0 / t)


def test_measurements_reject_bad_masks():
    x = torch.zeros(2, 4, 3)
    with pytest.raises(ValueError, match="mask"):
        token_statistics(x, torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="mask"):
        token_statistics(x, torch.tensor([[True, False, False, False]] * 2))
    with pytest.raises(ValueError, match="x"):
        token_statistics(torch.zeros(4, 3))
    with pytest.raises(ValueError, match="probs"):
        attention_statistics(torch.zeros(4, 4))


def test_numeric_fields_are_the_architectures():
    # The simulator takes its parameters from Architecture: no second field list.
    # API change: Architecture.numeric() now also resolves the OPTIONAL_FIELDS (sigma_o2 ->
    # 1 when None, sigma_w2_out -> sigma_w2), so params has those 7 keys, not NUMERIC_FIELDS.
    arch = Architecture(alpha_sa=1.7, sigma_v2=0.3)
    stack = SimulatedStack(arch, 0.5, 1, sim=SimulationSettings(width=8, seq_len=4, device="cpu"))
    assert set(stack.params) == set(arch.numeric()) == set(NUMERIC_FIELDS) | set(OPTIONAL_FIELDS)
    assert stack.params["alpha_sa"] == 1.7 and stack.params["sigma_v2"] == 0.3
    assert stack.params["sigma_o2"] == 1.0 and stack.params["sigma_w2_out"] == 0.2
    stack = SimulatedStack(arch.replace(sigma_o2=0.4, sigma_w2_out=0.9), 0.5, 1,
                           sim=SimulationSettings(width=8, seq_len=4, device="cpu"))
    assert stack.params["sigma_o2"] == 0.4 and stack.params["sigma_w2_out"] == 0.9
    # heads and their query/key convention too (issue 11, bug 4: no copies that can disagree)
    stack = SimulatedStack(arch.replace(heads=4, qk_scaling="head"), 0.5, 1,
                           sim=SimulationSettings(width=8, seq_len=4, device="cpu"))
    assert (stack.heads, stack.qk_scaling) == (4, "head")
    with pytest.raises(TypeError, match="heads"):
        SimulatedStack(arch, 0.5, 1, sim=SimulationSettings(width=8, seq_len=4), heads=2)
