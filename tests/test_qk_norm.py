"""QK-norm (theory/rem/qk_norm.py, docs/theory.md section 16) and the configs of Phi-3, Gemma 2, OLMo 2.

Monte Carlo tolerances: a sample mean of N i.i.d. draws is compared with the formula within
Z = 5 standard errors (a 6e-7 two-sided Gaussian tail: with fixed seeds a failure is a
wrong formula, not bad luck), the standard error being the draws' std / sqrt(N).
"""
import json
import math

import numpy as np
import pytest

from remprop.theory import beta_critical, model_spec, participation_ratio, shipped_configs
from remprop.theory.models.hf_config import CONFIG_DIR
from remprop.theory.rem import gaussian_cosine_mean, qk_norm_beta, qk_norm_score_moments

Z = 5.0


def rms_normalise(x, gain):
    """RMSNorm without eps over the last axis, gain g: ``g x / sqrt(mean(x^2))``."""
    return gain * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True))


def qk_normed_scores(rng, draws, q, rho, head_dim, norm_dim, gain, scale_dim):
    """Scores ``s_01, s_02`` of query token 0 against key tokens 1, 2 of an exact simplex.

    Tokens ``x_j = sqrt(d)(sqrt(p) e_0 + sqrt(q - p) e_{j+1})`` (cosine rho, squared norm
    q per coordinate), so ``x_j W = sqrt(d p) W[0] + sqrt(d (q - p)) W[j + 1]`` needs four
    rows of each weight matrix (``W ~ N(0, 1/d)``; the weights' scale drops out). Queries
    and keys are normalised over ``norm_dim`` coordinates; the head is the first ``head_dim``.
    """
    d, p = 64, rho * q
    wq = rng.standard_normal((draws, 2, norm_dim)) / math.sqrt(d)
    wk = rng.standard_normal((draws, 3, norm_dim)) / math.sqrt(d)
    query = math.sqrt(d * p) * wq[:, 0] + math.sqrt(d * (q - p)) * wq[:, 1]
    keys = math.sqrt(d * p) * wk[:, :1] + math.sqrt(d * (q - p)) * wk[:, 1:]
    query, keys = rms_normalise(query, gain)[:, :head_dim], rms_normalise(keys, gain)[:, :, :head_dim]
    scores = np.einsum("nk,njk->nj", query, keys) / math.sqrt(scale_dim)
    return scores[:, 0], scores[:, 1]


@pytest.mark.parametrize("head_dim, norm_dim, scale_dim", [(8, 8, 8), (8, 32, 5.0)])
def test_score_moments_by_monte_carlo(head_dim, norm_dim, scale_dim):
    """Per-head norm (Gemma 3) and one norm over all heads (OLMo 2), a Gemma-like S != d_H; q = 3.7
    and unit-less weights: neither the tokens' norm nor the weights' scale enters."""
    rng = np.random.default_rng(13)
    rho, gain, draws = 0.4, 1.3, 200_000
    s1, s2 = qk_normed_scores(rng, draws, 3.7, rho, head_dim, norm_dim, gain, scale_dim)
    variance, covariance = qk_norm_score_moments(rho, head_dim, gain, norm_dim=norm_dim, scale_dim=scale_dim)
    square, product = s1 * s1, s1 * s2
    assert abs(square.mean() - variance) < Z * square.std() / math.sqrt(draws)
    assert abs(product.mean() - covariance) < Z * product.std() / math.sqrt(draws)
    # the measurement resolves kappa_n(rho) from rho itself (n = 8: kappa = 0.379, not 0.4)
    if norm_dim == 8:
        assert abs(product.mean() - variance * rho) > Z * product.std() / math.sqrt(draws)


def test_gaussian_cosine_mean_limits_and_monte_carlo():
    rho = np.linspace(-1, 1, 21)
    assert np.allclose(gaussian_cosine_mean(rho, 1), 2 / np.pi * np.arcsin(rho), atol=1e-13)   # Sheppard
    for n in (2, 7, 64, 4096):
        kappa = gaussian_cosine_mean(rho, n)
        assert np.allclose(kappa, -kappa[::-1], atol=1e-14) and kappa[0] == pytest.approx(-1) and kappa[-1] == pytest.approx(1)
        assert np.all(np.abs(kappa) <= np.abs(rho) + 1e-14)
    # large n: rho (1 - (1 - rho^2)/(2n)) + O(n^-2)
    n = 4096
    assert np.allclose(gaussian_cosine_mean(rho, n), rho * (1 - (1 - rho ** 2) / (2 * n)), atol=3 / n ** 2)
    rng, draws = np.random.default_rng(5), 200_000
    for n, r in ((3, 0.6), (5, -0.3)):
        a = rng.standard_normal((draws, n))
        b = r * a + math.sqrt(1 - r * r) * rng.standard_normal((draws, n))
        cos = np.sum(a * b, axis=1) / np.linalg.norm(a, axis=1) / np.linalg.norm(b, axis=1)
        assert abs(cos.mean() - gaussian_cosine_mean(r, n)) < Z * cos.std() / math.sqrt(draws)


def test_beta_is_the_rem_energy_variance_in_the_engine_convention():
    rho, T, q = np.array([0.0, 0.3, 0.8]), 512, np.array([[0.5], [2.0]])
    beta = qk_norm_beta(rho, 64, T, 1.7, q=q, norm_dim=256, scale_dim=48.0)
    variance, covariance = qk_norm_score_moments(rho, 64, 1.7, norm_dim=256, scale_dim=48.0)
    # beta^2 q (q - p) log T = Var - Cov (docs/theory.md sections 3.1 and 16)
    assert np.allclose(beta ** 2 * q * (q - rho * q) * math.log(T), variance - covariance, rtol=1e-12)
    # the reduced scale x = beta sqrt(q (q - p)) does not depend on q
    x = beta * np.sqrt(q * q * (1 - rho))
    assert np.allclose(x[0], x[1], rtol=1e-12)
    # n -> infinity: g^2 sqrt(d_H / (S log T)) / q for every rho
    wide = qk_norm_beta(rho, 64, T, norm_dim=10 ** 6)
    assert np.allclose(wide, math.sqrt(1 / math.log(T)), rtol=1e-6)
    # rho -> 1 is continuous (limit kappa'(1))
    assert qk_norm_beta(1.0, 16, T) == pytest.approx(qk_norm_beta(1 - 1e-7, 16, T), rel=1e-5)
    # at initialisation (g = 1, S = d_H) a QK-normed head stays below beta_c for T >= 3 at every
    # cosine (x^2 = (1 - kappa)/log T <= T/((T - 1) log T) < 2), and for T = 2 when rho >= 0
    for T, low in ((2, 0.0), (3, -0.5), (128, -1 / 127), (4096, -1 / 4095), (10 ** 6, -1e-6)):
        r = np.linspace(low, 0.999, 50)
        assert np.all(qk_norm_beta(r, 128, T) < beta_critical(1.0, r))
    assert qk_norm_beta(-1.0, 128, 2) > beta_critical(1.0, -1.0)   # the bound is sharp: T = 2, rho = -1


def test_y2_of_qk_normed_rows_at_initialisation():
    """Real QK-normed rows (g = 1, d_H = 64, T = 256, rho = 0.5) against the REM at beta_qk."""
    rng, T, head_dim, rho, draws = np.random.default_rng(7), 256, 64, 0.5, 1200
    y2 = []
    for _ in range(draws // 200):
        wk = rng.standard_normal((200, T + 1, head_dim))
        keys = rms_normalise(math.sqrt(rho) * wk[:, :1] + math.sqrt(1 - rho) * wk[:, 1:], 1.0)
        query = rms_normalise(rng.standard_normal((200, head_dim)), 1.0)
        s = np.einsum("nk,njk->nj", query, keys) / math.sqrt(head_dim)
        a = np.exp(s - s.max(axis=1, keepdims=True))
        a /= a.sum(axis=1, keepdims=True)
        y2.append(np.sum(a * a, axis=1))
    y2 = np.concatenate(y2)
    theory = participation_ratio(qk_norm_beta(rho, head_dim, T), 1.0, rho, T)
    assert abs(y2.mean() - theory) < Z * y2.std() / math.sqrt(draws)
    assert y2.mean() < 2 / T   # near-uniform rows: far on the rank-collapse side of beta_c


def test_qk_norm_errors_name_their_parameter():
    with pytest.raises(ValueError, match="rho"):
        qk_norm_beta(1.2, 64, 128)
    with pytest.raises(ValueError, match="rho"):
        qk_norm_beta(-0.6, 64, 3)              # below the simplex floor -1/(T - 1) = -0.5
    with pytest.raises(ValueError, match="norm_dim"):
        qk_norm_score_moments(0.1, 64, norm_dim=32)
    with pytest.raises(ValueError, match="gain"):
        qk_norm_score_moments(0.1, 64, gain=0.0)
    with pytest.raises(ValueError, match="seq_len"):
        qk_norm_beta(0.1, 64, 1)


# -- model configurations -----------------------------------------------------------------------------
def test_phi3_reads_as_a_llama_style_decoder():
    spec = model_spec("phi-3-mini")
    arch, r2 = spec.architecture, 0.02 ** 2
    assert "phi-3-mini" in shipped_configs() and model_spec("microsoft/Phi-3-mini-4k-instruct").name == spec.name
    assert spec.family == "phi3" and spec.config["model_type"] == "phi3"
    assert (spec.width, spec.d_ff, spec.depth, spec.heads, spec.seq_len) == (3072, 8192, 32, 32, 4096)
    assert (arch.norm, arch.norm_type, arch.mlp, arch.activation) == ("pre", "rms", "gated", "silu")
    assert spec.beta == pytest.approx(r2 * 3072 / math.sqrt(math.log(4096)), rel=1e-12)
    assert arch.sigma_w2_out == pytest.approx(r2 * 8192, rel=1e-12)
    assert any("fused" in text for text in spec.assumptions)
    assert any("sliding_window = 2047" in text for text in spec.assumptions)
    short = spec.with_depth(2)
    assert (short.family, short.depth) == ("phi3", 2)


def test_unsupported_families_get_one_clear_error():
    """Gemma 2 and OLMo 2 are supported (docs/theory.md section 19); Gemma 3's block is not."""
    assert {"gemma-2-2b", "olmo-2-1b"} <= set(shipped_configs())
    cfg = dict(json.loads((CONFIG_DIR / "gemma-2-2b.json").read_text()), model_type="gemma3_text")
    with pytest.raises(ValueError, match="model_type = 'gemma3_text' is not supported: .*per-head QK-norm"):
        model_spec(cfg)


@pytest.mark.slow
def test_check_runs_for_phi3_and_names_the_feature_for_gemma3(capsys, tmp_path):
    from remprop.cli import main

    code = main(["check", "phi-3-mini", "--depth", "2", "--seq-len", "256", "--json", "--no-figure",
                 "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert code == 0 and json.loads(out)["model"]["family"] == "phi3"
    gemma3 = tmp_path / "gemma3.json"
    gemma3.write_text(json.dumps(dict(json.loads((CONFIG_DIR / "gemma-2-2b.json").read_text()),
                                      model_type="gemma3_text")))
    code = main(["check", str(gemma3), "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "per-head QK-norm" in err and len(err.strip().splitlines()) == 1
