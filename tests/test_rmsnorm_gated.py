"""RMSNorm and gated MLPs (SwiGLU, GeGLU), three ways: closed forms and limits, Monte Carlo
of the same Gaussian expectation, and the simulated block against the theory's block
(docs/theory.md section 14).

Statistical tolerances are ``K * sem + bias`` as in test_validation_components.py: ``sem``
the standard error over independent seeds (or samples), K = 5 (|t| > 5 has probability
~2e-4 per check with 16 seeds, Student t with 15 dof), ``bias`` the finite-size bias
stated next to each check. The kernels against the composed tree for every norm type x
MLP form are in test_theory_kernels.py (``test_kernels_follow_the_composed_block``).
"""
import math

import numpy as np
import pytest

from remprop.theory import (
    MLPS,
    NORM_TYPES,
    Architecture,
    activation_moments,
    gated_mlp_map,
    layernorm_map,
    mlp_map,
    relu_kernel,
    rmsnorm_map,
)
from remprop.theory import components as C
from remprop.theory.components.block import MLPForm, NormType

K = 5.0


def _sem(values):
    return values.std(ddof=1) / math.sqrt(values.size)


# -- closed forms and limits ----------------------------------------------------------------
def test_rmsnorm_map_is_the_layernorm_map_and_idempotent():
    q = np.array([0.3, 1.0, 4.0])[:, None]
    p = q * np.array([-0.2, 0.0, 0.5, 1.0])
    np.testing.assert_array_equal(np.array(rmsnorm_map(q, p)), np.array(layernorm_map(q, p)))
    q1, p1 = rmsnorm_map(q, p)
    np.testing.assert_array_equal(np.array(rmsnorm_map(q1, p1)), np.array((q1, p1)))
    with pytest.raises(ValueError, match="p"):
        rmsnorm_map(1.0, 2.0)


@pytest.mark.parametrize("sigma_w2, sigma_b2, sigma_w2_out", [(0.7, 0.0, None), (1.3, 0.05, 2.0)])
def test_gated_mlp_closed_forms_for_linear_and_relu_gates(sigma_w2, sigma_b2, sigma_w2_out):
    """Linear gate: h = g u, E[h h'] = p1^2 (Isserlis with g, u independent). ReLU gate:
    E[relu(g) relu(g')] = (q1 / 2) f(p1 / q1) (arc-cosine kernel), times p1."""
    out = sigma_w2 if sigma_w2_out is None else sigma_w2_out
    q, p = np.array([0.5, 1.0, 2.0]), np.array([0.1, -0.3, 2.0])
    q1, p1 = sigma_w2 * q + sigma_b2, sigma_w2 * p + sigma_b2
    q2, p2 = gated_mlp_map(q, p, sigma_w2, sigma_b2, "linear", sigma_w2_out)
    np.testing.assert_allclose(q2, out * q1 ** 2 + sigma_b2, rtol=1e-14)
    np.testing.assert_allclose(p2, out * p1 ** 2 + sigma_b2, rtol=1e-14)
    q2, p2 = gated_mlp_map(q, p, sigma_w2, sigma_b2, "relu", sigma_w2_out)
    np.testing.assert_allclose(q2, out * q1 ** 2 / 2 + sigma_b2, rtol=1e-14)
    np.testing.assert_allclose(p2, out * (q1 / 2) * relu_kernel(p1 / q1) * p1 + sigma_b2, rtol=1e-13)


@pytest.mark.parametrize("activation", ["silu", "gelu", "relu"])
def test_gated_mlp_limits(activation):
    """Collapsed tokens stay collapsed; bias-free orthogonal tokens stay orthogonal (the up
    projection's E[u u'] = p1 = 0), where the dense MLP makes them overlap (E[phi(u)] != 0);
    the component equals the public map; sigma_w2 = sigma_b2 = 0 is refused as in mlp_map."""
    q2, p2 = gated_mlp_map(1.7, 1.7, 0.9, 0.01, activation)
    assert abs(p2 - q2) <= 1e-12 * q2
    assert gated_mlp_map(1.0, 0.0, 1.0, 0.0, activation)[1] == 0.0
    assert mlp_map(1.0, 0.0, 1.0, 0.0, activation)[1] > 0.01
    got = C.gated_mlp(0.8, 0.02, activation, sigma_w2_out=1.5)(1.2, 0.4)
    np.testing.assert_allclose(got, gated_mlp_map(1.2, 0.4, 0.8, 0.02, activation, 1.5), rtol=1e-14)
    with pytest.raises(ValueError, match="sigma_w2 and sigma_b2"):
        gated_mlp_map(1.0, 0.5, 0.0, 0.0, activation)


@pytest.mark.parametrize("activation", ["silu", "gelu", "relu"])
def test_gated_mlp_cosine_slope_near_collapse_is_one_more_than_the_dense_one(activation):
    """Bias-free, c2 = k(c1) c1: (1 - c2) / (1 - c1) -> 1 + q1 E[phi'^2] / M2 as c1 -> 1, one
    more than the dense MLP's slope (docs/theory.md section 14). Secant at 1 - c1 = 1e-5:
    the slope's own derivative is O(1) (O(1/sqrt(1 - c)) for ReLU's kernel), so 1e-2."""
    from remprop.theory import derivative_moment

    q1, eps = 1.3, 1e-5
    m2 = float(activation_moments(q1, q1, activation)[0])
    slope = q1 * float(derivative_moment(q1, activation)) / m2
    gated = gated_mlp_map(q1, q1 * (1 - eps), 1.0, 0.0, activation)
    dense = mlp_map(q1, q1 * (1 - eps), 1.0, 0.0, activation)
    assert (1 - gated[1] / gated[0]) / eps == pytest.approx(1 + slope, abs=1e-2)
    assert (1 - dense[1] / dense[0]) / eps == pytest.approx(slope, abs=1e-2)


def test_architecture_fields_choices_and_block_tree():
    arch = Architecture(norm="pre", norm_type="rms", mlp="gated", activation="silu", sigma_b2=0.0)
    # strings are converted once into the owning components' enums, which equal their spelling
    assert arch.norm_type is NormType.RMS and arch.mlp is MLPForm.GATED
    assert (Architecture().norm_type, Architecture().mlp) == ("layer", "dense")
    assert set(NORM_TYPES) == {"layer", "rms", "dyt"} and set(MLPS) == {"dense", "gated"}
    assert type(arch.to_dict()["norm_type"]) is str
    assert arch.to_dict()["norm_type"] == "rms" and arch.to_dict()["mlp"] == "gated"
    assert repr(arch.block(0.5)) == ("serial(residual(alpha, serial(rms_norm, softmax_attention)), "
                                     "residual(alpha, serial(rms_norm, gated_mlp)))")
    post = Architecture(norm_type="rms", mlp="gated")
    assert [repr(layer) for layer in post.block(0.5).layers[1::2]] == ["rms_norm", "rms_norm"]
    for field, bad in (("norm_type", "batch"), ("mlp", "moe")):
        with pytest.raises(ValueError, match=field):
            Architecture(**{field: bad})


def test_symbolic_walk_of_the_gated_block():
    """The sympy reader of the tree: a linear bias-free gated MLP gives sigma_out (sigma_w2 p)^2."""
    sp = pytest.importorskip("sympy")
    from remprop.theory.symbolic import SymbolicContext

    q, p, sw, so = sp.symbols("q p sigma_w2 sigma_out", positive=True)
    ff = C.gated_mlp(sw, 0, "linear", sigma_w2_out=so)
    q2, p2 = ff.symbolic(q, p, SymbolicContext())
    assert sp.simplify(p2 - so * (sw * p) ** 2) == 0
    assert sp.simplify(q2 - so * (sw * q) ** 2) == 0


# -- Monte Carlo of the same expectation ----------------------------------------------------
@pytest.mark.parametrize("activation", ["silu", "gelu"])
@pytest.mark.parametrize("q1, p1", [(1.0, 0.3), (2.5, -0.8)])
def test_gated_hidden_kernel_by_monte_carlo(activation, q1, p1):
    """E[phi(g) phi(g') u u'] and E[phi(g)^2 u^2] over 400k draws of two independent
    Gaussian pairs (g, g'), (u, u') with variance q1, covariance p1: the theory's
    M11(q1, p1) p1 and M2(q1) q1 within K standard errors (no bias: exact expectation)."""
    torch = pytest.importorskip("torch")
    from remprop.validation.layers import ACTIVATION_FUNCTIONS

    n = 400_000
    gen = torch.Generator().manual_seed(13)
    cov = torch.tensor([[q1, p1], [p1, q1]], dtype=torch.float64)
    chol = torch.linalg.cholesky(cov)
    g = torch.randn(n, 2, generator=gen, dtype=torch.float64) @ chol.T
    u = torch.randn(n, 2, generator=gen, dtype=torch.float64) @ chol.T
    h = ACTIVATION_FUNCTIONS[activation](g) * u
    cross, square = (h[:, 0] * h[:, 1]).numpy(), (h[:, 0] ** 2).numpy()
    m2, m11 = activation_moments(q1, p1, activation)
    assert abs(cross.mean() - m11 * p1) <= K * _sem(cross)
    assert abs(square.mean() - m2 * q1) <= K * _sem(square)
    q2, p2 = gated_mlp_map(q1, p1, 1.0, 0.0, activation)
    assert (q2, p2) == pytest.approx((m2 * q1, m11 * p1), rel=1e-14)


# -- the torch components and the simulated block -------------------------------------------
D = T = 128
SEEDS = 16


def _measure(entry, params, q0, rho0, seeds=SEEDS, width=D):
    torch = pytest.importorskip("torch")
    from remprop.validation.backend import STREAM_WEIGHTS, generator
    from remprop.validation.inputs import gaussian_tokens
    from remprop.validation.measurements import token_statistics

    torch.set_num_threads(min(2, torch.get_num_threads()))
    q, p = np.empty(seeds), np.empty(seeds)
    for seed in range(seeds):
        x = gaussian_tokens(q0, rho0, count=1, seq_len=T, width=width, seed=seed, dtype="float64",
                            device="cpu").tokens
        y = entry.simulate(x, generator(seed, STREAM_WEIGHTS, 0), **params)
        stats = token_statistics(y)
        q[seed], p[seed] = float(stats["q"][0]), float(stats["p"][0])
    return q, p


@pytest.mark.parametrize("name, params, q0, rho0", [
    ("gated_mlp", dict(activation="silu", sigma_w2=1.0, sigma_b2=0.0), 1.0, 0.3),
    ("gated_mlp", dict(activation="gelu", sigma_w2=0.8, sigma_b2=0.01, d_ff=256, sigma_w2_out=1.5), 2.0, 0.6),
    ("rms_norm", {}, 2.0, 0.4),
])
def test_registry_gated_mlp_and_rms_norm_match_simulation(name, params, q0, rho0):
    """Registry entries: theory map vs torch function on Gaussian tokens, d = T = 128.
    Bias: the gated kernel is smooth in the sample Gram entries (O(1/d) Jensen bias, below
    K sem); RMSNorm's p exceeds p/q through the token-norm fluctuations exactly as
    LayerNorm's does (test_validation_components.py, factor 2 margin)."""
    from remprop.validation.registry import REGISTRY

    entry = REGISTRY[name]
    q_theory, p_theory = entry.theory(q0, q0 * rho0, **params)
    q_sim, p_sim = _measure(entry, params, q0, rho0)
    bias_p = 0.0
    if name == "rms_norm":
        var_eps = 2.0 * (1.0 - rho0) ** 2 / D
        bias_p = 2.0 * (var_eps / (T - 1) + 0.75 * rho0 * var_eps)
    assert abs(q_sim.mean() - q_theory) <= K * _sem(q_sim) + 1e-9 * q_theory
    assert abs(p_sim.mean() - p_theory) <= K * _sem(p_sim) + bias_p + 1e-9 * abs(p_theory)


def test_simulated_llama_like_stack_follows_the_theory_block():
    """Pre-RMSNorm blocks with SwiGLU, no biases, an output projection (LLaMA-like), d = 128,
    T = 32, three blocks: the simulated (q, p) per layer against the composed block iterated
    at the same finite T (exact finite-T Y2). Bias: the residual stream adds O(1) terms whose
    sample fluctuation is O(1/sqrt(d T)); the RMSNorm cosine bias above, 1e-2 of p, covers the
    finite-width Jensen terms of the SiLU kernel; tolerance K sem + 2e-2 |p|."""
    torch = pytest.importorskip("torch")
    from remprop.validation.inputs import gaussian_tokens
    from remprop.validation.simulator import SimulatedStack
    from remprop.validation.settings import SimulationSettings

    torch.set_num_threads(min(2, torch.get_num_threads()))
    seq_len, depth, beta = 32, 3, 0.4
    arch = Architecture(norm="pre", norm_type="rms", mlp="gated", activation="silu", sigma_b2=0.0,
                        sigma_w2=1.0, sigma_v2=1.0, sigma_o2=0.5, sigma_w2_out=0.5, seq_len=seq_len)
    block = arch.block(beta)
    q_theory, p_theory = [1.0], [0.3]
    for _ in range(depth):
        q, p = block(q_theory[-1], p_theory[-1])
        q_theory.append(float(q))
        p_theory.append(float(p))
    q_sim, p_sim = np.empty((SEEDS, depth + 1)), np.empty((SEEDS, depth + 1))
    for seed in range(SEEDS):
        x = gaussian_tokens(1.0, 0.3, count=1, seq_len=seq_len, width=D, seed=seed, dtype="float64",
                            device="cpu").tokens
        stack = SimulatedStack(arch, beta, depth,
                               sim=SimulationSettings(width=D, seq_len=seq_len, dtype="float64", device="cpu"),
                               seed=seed)
        trace = stack.trace(x)
        q_sim[seed], p_sim[seed] = trace.q[0], trace.p[0]
    for layer in range(1, depth + 1):
        q_s, p_s = q_sim[:, layer], p_sim[:, layer]
        assert abs(q_s.mean() - q_theory[layer]) <= K * _sem(q_s) + 2e-2 * q_theory[layer], layer
        assert abs(p_s.mean() - p_theory[layer]) <= K * _sem(p_s) + 2e-2 * abs(p_theory[layer]), layer


@pytest.mark.parametrize("cosine", [0.0, 0.5])
def test_rmsnorm_differs_from_layernorm_on_a_relu_output_without_projection(cosine):
    """Where the norm's input has a common feature mean (ReLU output, no projection, mean
    sqrt(q1 / 2 pi) in every feature), LayerNorm gives (f - 1/pi) / (1 - 1/pi) and RMSNorm
    f = relu_kernel(c); on a zero-mean stream both give the input cosine. d = 256, T = 32,
    8 seeds. Bias: O(1/d) (the norm fluctuations above, and the sample feature mean's
    Var = q / d), covered by 0.02."""
    torch = pytest.importorskip("torch")
    from remprop.validation import layers

    d, seq_len, seeds = 256, 32, 8
    f = float(relu_kernel(cosine))
    expected = {"relu": {"layer": (f - 1 / math.pi) / (1 - 1 / math.pi), "rms": f},
                "linear": {"layer": cosine, "rms": cosine}}
    for activation, targets in expected.items():
        for norm_type, norm in (("layer", layers.layer_norm), ("rms", layers.rms_norm)):
            values = np.empty(seeds)
            for seed in range(seeds):
                gen = torch.Generator().manual_seed(seed)
                shared = torch.randn(1, 4 * d, generator=gen, dtype=torch.float64)
                h = math.sqrt(cosine) * shared + math.sqrt(1 - cosine) * torch.randn(
                    seq_len, 4 * d, generator=gen, dtype=torch.float64)
                w = torch.randn(d, 4 * d, generator=gen, dtype=torch.float64) / math.sqrt(4 * d)
                x = h @ w.T
                y = norm(torch.relu(x) if activation == "relu" else x)
                gram = (y @ y.T / d)[~torch.eye(seq_len, dtype=torch.bool)]
                values[seed] = float(gram.mean())
            assert abs(values.mean() - targets[norm_type]) <= K * _sem(values) + 0.02, (activation, norm_type)


# -- LLaMA-style configurations ---------------------------------------------------------------
LLAMA_SHIPPED = {"llama-3.2-1b": (2048, 8192, 16, 32, 131072), "llama-3-8b": (4096, 14336, 32, 32, 8192),
                 "mistral-7b": (4096, 14336, 32, 32, 32768), "qwen2.5-0.5b": (896, 4864, 24, 14, 32768),
                 "smollm2-135m": (576, 1536, 30, 9, 8192)}


@pytest.mark.parametrize("name", sorted(LLAMA_SHIPPED))
def test_llama_style_configs_translate(name):
    """Pre-RMSNorm, gated SiLU MLP, no biases, every weight N(0, r^2): the variances times
    fan-in, beta = r^2 d / sqrt(log T), word embeddings only (q0 = r^2, rho0 = 1/V); the
    ignored rotary positions and grouped keys/values are named in the assumptions."""
    from remprop.theory import model_spec

    width, d_ff, depth, heads, max_len = LLAMA_SHIPPED[name]
    spec = model_spec(name)
    arch, r2 = spec.architecture, spec.init_range ** 2
    assert (arch.norm, arch.norm_type, arch.mlp, arch.activation) == ("pre", "rms", "gated", "silu")
    assert (spec.width, spec.d_ff, spec.depth, spec.heads, spec.seq_len) == (width, d_ff, depth, heads, max_len)
    assert spec.causal and spec.final_layer_norm and not spec.embedding_layer_norm
    assert arch.sigma_b2 == 0.0
    for value, expected in ((arch.sigma_w2, r2 * width), (arch.sigma_v2, r2 * width), (arch.sigma_o2, r2 * width),
                            (arch.sigma_w2_out, r2 * d_ff), (spec.beta, r2 * width / math.sqrt(math.log(max_len))),
                            (spec.q0, r2), (spec.rho0, 1.0 / spec.config["vocab_size"])):
        assert value == pytest.approx(expected, rel=1e-12)
    assert any("rotary" in text for text in spec.assumptions)
    assert any("num_key_value_heads" in text for text in spec.assumptions)
    assert model_spec(name).architecture.to_dict() == arch.to_dict()
    assert spec.with_depth(3).depth == 3


def test_llama_config_checks_head_dim_and_unknown_families():
    from remprop.theory import model_spec
    from remprop.theory.models.hf_config import load_hf_config

    cfg = load_hf_config("smollm2-135m")
    with pytest.raises(ValueError, match="head_dim"):
        model_spec(dict(cfg, head_dim=32))
    with pytest.raises(ValueError, match="model_type"):
        model_spec(dict(cfg, model_type="falcon"))
    short = model_spec(dict(cfg, max_position_embeddings=128, sliding_window=64, model_type="mistral"))
    assert any("sliding_window" in text for text in short.assumptions)
