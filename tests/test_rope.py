"""Rotary position embeddings in the REM (docs/theory.md section 15).

Limits (no rotation, p = 0, collapsed tokens, the Fejer closed form), a Monte Carlo of the
score covariance over the weights, a Monte Carlo of Gaussian energies with the RoPE
covariance, and one simulated attention layer with rotated queries and keys.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from remprop.theory import rope_softmax_attention_map, softmax_attention_map
from remprop.theory.rem import (
    beta_critical,
    participation_ratio,
    rope_correlation,
    rope_beta_critical,
    rope_frequencies,
    rope_mean_correlation,
    rope_participation_ratio,
    rope_score_covariance,
)

EULER_GAMMA = 0.5772156649015329


def _pair_mean(values, seq_len):
    """Mean of f(m - l) over the ordered pairs m != l of T positions, by direct summation."""
    k = np.arange(1, seq_len)
    return 2.0 * np.sum((seq_len - k) * values) / (seq_len * (seq_len - 1))


@pytest.mark.parametrize("seq_len, head_dim, base", [(2, 2, 10.0), (37, 16, 1e4), (512, 128, 1e4), (300, 64, 1e12)])
def test_mean_correlation_is_the_pair_sum(seq_len, head_dim, base):
    """The Fejer closed form (and its small-angle series at base 1e12) is the direct pair sum."""
    direct = _pair_mean(np.asarray(rope_correlation(np.arange(1, seq_len), head_dim, base)), seq_len)
    assert rope_mean_correlation(seq_len, head_dim, base) == pytest.approx(direct, rel=1e-12, abs=1e-14)


def test_infinite_base_rotates_only_the_first_pair():
    """theta_0 = 1 for every base: as base -> inf, c(k) -> 1 - (2/d_H)(1 - cos k)."""
    assert rope_frequencies(8, np.inf).tolist() == [1.0, 0.0, 0.0, 0.0]
    seq_len = 64
    cos_mean = _pair_mean(np.cos(np.arange(1, seq_len)), seq_len)
    for head_dim in (8, 64, 1024):
        expected = 1.0 - 2.0 / head_dim * (1.0 - cos_mean)
        assert rope_mean_correlation(seq_len, head_dim, np.inf) == pytest.approx(expected, rel=1e-13)


def test_no_rotation_limit_is_the_rem():
    """base = inf and d_H -> inf: the REM's Y2, with an error shrinking like 2/d_H."""
    beta, q, p, seq_len = 2.0, 1.0, 0.6, 256
    rem = participation_ratio(beta, q, p, seq_len)
    errors = [abs(rope_participation_ratio(beta, q, p, seq_len, d, np.inf) - rem) for d in (64, 640, 6400)]
    assert errors[0] > 1e-4
    # first order in 2/d_H: each factor 10 in d_H divides the error by 10, up to a
    # second-order term O(2/d_H) relative (1.3 % from d_H = 64, 0.13 % from 640)
    assert errors[1] / errors[0] == pytest.approx(0.1, rel=0.03)
    assert errors[2] / errors[1] == pytest.approx(0.1, rel=0.003)


def test_orthogonal_tokens_do_not_see_rope():
    """p = 0: no shared part to rotate; Y2, beta_c and the map are the REM's to rounding."""
    beta = np.array([0.5, 1.5, 3.0])
    np.testing.assert_allclose(rope_participation_ratio(beta, 1.3, 0.0, 512, 64), participation_ratio(beta, 1.3, 0.0, 512),
                               rtol=1e-14)
    assert rope_beta_critical(1.3, 0.0, 512, 64) == pytest.approx(beta_critical(1.3, 0.0), rel=1e-15)
    np.testing.assert_allclose(rope_softmax_attention_map(beta, q=1.3, p=0.0, seq_len=512),
                               softmax_attention_map(beta, q=1.3, p=0.0, seq_len=512), rtol=1e-14)


def test_collapsed_tokens_freeze_with_rope_only():
    """p = q: the REM's rows stay uniform (Y2 = 1/T, beta_c = inf); RoPE's field does not cancel."""
    seq_len, head_dim = 512, 128
    assert participation_ratio(3.0, 1.0, 1.0, seq_len) == pytest.approx(1.0 / seq_len, rel=1e-12)
    assert math.isinf(beta_critical(1.0, 1.0))
    cbar = rope_mean_correlation(seq_len, head_dim)
    assert rope_beta_critical(1.0, 1.0, seq_len, head_dim) == pytest.approx(math.sqrt(2.0 / (1.0 - cbar)))
    assert rope_participation_ratio(3.0, 1.0, 1.0, seq_len, head_dim) > 0.2
    # T -> infinity at fixed base: every score's variance counts, beta_c = sqrt(2) / q
    assert rope_beta_critical(2.0, 1.5, None, head_dim) == pytest.approx(math.sqrt(2.0) / 2.0)
    assert rope_participation_ratio(2.0, 2.0, 2.0, None, head_dim) == pytest.approx(1.0 - math.sqrt(2.0) / 4.0)


def test_mean_correlation_decays_logarithmically():
    """1 << T << b, d_H large: cbar_T = 1 - (log T - 3/2 + gamma) / log b (docs/theory.md section 15)."""
    for seq_len in (1000, 10000):
        law = 1.0 - (math.log(seq_len) - 1.5 + EULER_GAMMA) / math.log(1e8)
        # corrections: O(1/d_H) from the Riemann sum over pairs, O(1/T) from the pair mean
        assert rope_mean_correlation(seq_len, 4096, 1e8) == pytest.approx(law, abs=2e-3)


def test_small_beta_expansion_uses_the_mean_pair_variance():
    """Y2 = T^-1 [1 + (1 - 1/T) s2] to second order, s2 the mean over pairs of Var(g_m - g_l)/2."""
    seq_len, head_dim, q, p, beta = 64, 32, 1.0, 0.7, 2e-3
    k = np.arange(seq_len)
    cov = rope_score_covariance(beta, k[:, None], k[None, :], q=q, p=p, seq_len=seq_len, head_dim=head_dim)
    half_diff = 0.5 * (np.diag(cov)[:, None] + np.diag(cov)[None, :] - 2.0 * cov)
    s2 = half_diff[~np.eye(seq_len, dtype=bool)].mean()
    y2 = rope_participation_ratio(beta, q, p, seq_len, head_dim)
    # the next order is O(s2^2) ~ 1e-10 relative to s2 ~ 1e-5
    assert (y2 * seq_len - 1.0) / ((1.0 - 1.0 / seq_len) * s2) == pytest.approx(1.0, rel=1e-3)


def _rotate(x, positions, theta):
    """Rotate the pairs (2i, 2i+1) of x[..., m, :] by positions[m] * theta_i."""
    angle = positions[:, None] * theta
    out = np.empty_like(x)
    out[..., 0::2] = x[..., 0::2] * np.cos(angle) - x[..., 1::2] * np.sin(angle)
    out[..., 1::2] = x[..., 0::2] * np.sin(angle) + x[..., 1::2] * np.cos(angle)
    return out


def test_score_covariance_monte_carlo():
    """Scores of one query with rotated keys over N draws of W_Q, W_K: the covariance matrix."""
    rng = np.random.default_rng(0)
    d, seq_len, q, p, beta, base, draws = 16, 6, 1.0, 0.6, 1.0, 100.0, 40000
    gram = d * ((q - p) * np.eye(seq_len) + p)                       # exact simplex Gram matrix
    basis = np.linalg.qr(rng.standard_normal((d, seq_len)))[0]
    tokens = np.linalg.cholesky(gram) @ basis.T                       # x_m . x_l = d G_ml
    s_qk = math.sqrt(beta * math.sqrt(math.log(seq_len)) / d)
    query, positions = 2, np.arange(seq_len, dtype=float)
    theta = rope_frequencies(d, base)
    w_q = s_qk * rng.standard_normal((draws, d, d))
    w_k = s_qk * rng.standard_normal((draws, d, d))
    u = _rotate(np.einsum("nij,j->ni", w_q, tokens[query])[:, None, :], positions[query:query + 1], theta)[:, 0]
    keys = _rotate(np.einsum("nij,mj->nmi", w_k, tokens), positions, theta)
    scores = np.einsum("ni,nmi->nm", u, keys) / math.sqrt(d)
    measured = scores.T @ scores / draws                               # the scores have mean zero
    distance = positions - query
    theory = rope_score_covariance(beta, distance[:, None], distance[None, :], q=q, p=p, seq_len=seq_len, head_dim=d,
                                   base=base)
    # Var(s_m s_l) = C_mm C_ll + C_ml^2 for Gaussian pairs: 5 standard errors per entry
    # (36 entries; the product of Gaussians has heavier tails, so 5 rather than 4)
    se = np.sqrt((np.outer(np.diag(theory), np.diag(theory)) + theory ** 2) / draws)
    assert np.all(np.abs(measured - theory) < 5.0 * se)
    # and the shared part is not constant: two keys 3 apart differ from two keys 1 apart
    assert abs(theory[0, 3] - theory[0, 1]) > 10.0 * se[0, 3]


def test_effective_rem_against_gaussian_energies():
    """T Gaussian energies with the exact RoPE covariance (spectral sampling): Y2 within 7 % at rho = 0.5."""
    rng = np.random.default_rng(1)
    seq_len, head_dim, q, p, beta, samples = 128, 64, 1.0, 0.5, 1.5, 4000
    theta = rope_frequencies(head_dim)
    log_t = math.log(seq_len)
    m = np.arange(seq_len)
    waves = np.concatenate([np.cos(np.outer(m, theta)), np.sin(np.outer(m, theta))], axis=1)
    shared = math.sqrt(beta ** 2 * q * p * log_t * 2.0 / head_dim) * rng.standard_normal((samples, head_dim)) @ waves.T
    energies = shared + math.sqrt(beta ** 2 * q * (q - p) * log_t) * rng.standard_normal((samples, seq_len))
    energies -= energies.max(axis=1, keepdims=True)
    weights = np.exp(energies)
    weights /= weights.sum(axis=1, keepdims=True)
    y2 = (weights ** 2).sum(axis=1)
    theory = rope_participation_ratio(beta, q, p, seq_len, head_dim)
    # documented accuracy 7 % at rho <= 0.5, plus 3 standard errors of the sample mean
    assert abs(y2.mean() - theory) < 0.07 * theory + 3.0 * y2.std() / math.sqrt(samples)
    assert theory > 1.3 * participation_ratio(beta, q, p, seq_len)    # RoPE matters here


def test_rotary_attention_layer():
    """Real rotated attention (d = 256, T = 128): Y2 and the output cosine within the seed spread."""
    torch = pytest.importorskip("torch")
    from remprop.validation.rope import rotary, rope_measurement
    from remprop.validation.settings import SimulationSettings

    rotate = rotary(5, 4, 10.0, dtype=torch.float64)
    u, k = torch.randn(4, dtype=torch.float64), torch.randn(4, dtype=torch.float64)
    y = rotate(torch.stack([u, u, u, k, k]))                            # u at 0, 1, 2 and k at 3, 4
    torch.testing.assert_close(y[1] @ y[3], y[2] @ y[4])                # scores depend on m - n only
    assert not torch.allclose(y[0] @ y[3], y[1] @ y[3])
    torch.testing.assert_close(y.norm(dim=-1), torch.stack([u, u, u, k, k]).norm(dim=-1))

    seeds, beta = 6, 1.5
    rope = rope_measurement(beta, positions="rope",
                            sim=SimulationSettings(width=256, seq_len=128, seeds=seeds, rho0=0.5))
    none = rope_measurement(beta, positions="none",
                            sim=SimulationSettings(width=256, seq_len=128, seeds=seeds, rho0=0.5))
    for key in ("y2", "cosine"):
        spread = rope[key].std(ddof=1) / math.sqrt(seeds)
        # 3 standard errors of the seed mean, plus the effective REM's 7 % (Y2 only)
        slack = 0.07 * rope[f"{key}_theory"].mean() if key == "y2" else 0.0
        assert abs(rope[key].mean() - rope[f"{key}_theory"].mean()) < 3.0 * spread + slack
    # RoPE raises Y2 and lowers the cosine, by more than the seed spread of the paired difference
    diff = rope["y2"] - none["y2"]
    assert diff.mean() > 3.0 * diff.std(ddof=1) / math.sqrt(seeds)
    assert np.all(rope["cosine"] < none["cosine"])


@pytest.mark.parametrize("kwargs, name", [(dict(head_dim=7), "head_dim"), (dict(head_dim=0), "head_dim"),
                                          (dict(base=1.0), "base"), (dict(base=float("nan")), "base")])
def test_inputs_are_checked(kwargs, name):
    with pytest.raises(ValueError, match=name):
        rope_mean_correlation(16, **kwargs)
