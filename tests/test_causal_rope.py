"""Rotary positions in the causal theory (docs/theory.md section 8) and in theory_participation.

Row t of a causal RoPE layer is the REM with RoPE of its own t keys: its scale reads
``p cbar_t``, ``cbar_t`` the mean rotary correlation of t keys. Checked three ways: closed
forms and limits, Monte Carlo of Gaussian energies with the exact RoPE covariance of a causal
row, and real rotated attention (one layer by position; a causal stack per layer).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from remprop.theory import Architecture, propagate
from remprop.theory.causal import LAST_TOKENS, last_tokens_cosine, propagate_causal
from remprop.theory.rem import (causal_participation_ratio, participation_ratio, rope_correlation,
                                rope_participation_ratio, rope_score_covariance)
from remprop.theory.rem.causal import causal_rope_correlation

D_H, BASE = 64, 1e4
ROPE = dict(positions="rope", head_dim=D_H, rope_base=BASE)


def pair_average(t, head_dim=D_H, base=BASE):
    """Mean of c(m - l) over the ordered pairs m != l of t keys, summed directly."""
    k = np.arange(t)
    c = np.asarray(rope_correlation(k[:, None] - k[None, :], head_dim, base))
    return (c.sum() - t) / (t * (t - 1))


# -- closed forms and limits -----------------------------------------------------------------

def test_row_correlation_is_the_pair_average_of_its_keys():
    """cbar_t: the direct pair sum; the triangular average of c(k); the encoder's factor at T = t."""
    T = 300
    for t in (2, 3, 17, 200, 300):
        cbar = causal_rope_correlation(t, T, D_H, BASE)
        assert cbar == pytest.approx(pair_average(t), rel=1e-12, abs=1e-14)
        k = np.arange(1, t)
        triangular = 2.0 * np.sum((t - k) * np.asarray(rope_correlation(k, D_H, BASE))) / (t * (t - 1))
        assert cbar == pytest.approx(triangular, rel=1e-12)
        assert cbar == Architecture(seq_len=t, **ROPE).mean_rope_correlation
    assert causal_rope_correlation(2, T, D_H, BASE) == pytest.approx(float(rope_correlation(1, D_H, BASE)))
    # not the plain average of c(k) over k = 0..t-1 (which counts long distances as often as short)
    plain = float(np.mean(rope_correlation(np.arange(200), D_H, BASE)))
    assert abs(causal_rope_correlation(200, T, D_H, BASE) - plain) > 0.01
    # vectorised, shape kept, decreasing in t at this base
    values = causal_rope_correlation([[2, 10], [100, 300]], T, D_H, BASE)
    assert values.shape == (2, 2) and np.all(np.diff(values.ravel()) < 0)


def test_causal_rope_row_limits():
    T = 256
    for t in (2, 40, 256):
        # p = 0: the score field has no shared part, the row is the causal REM exactly
        assert causal_participation_ratio(1.3, 1.0, 0.0, t, T, rope_head_dim=D_H) == \
            causal_participation_ratio(1.3, 1.0, 0.0, t, T)
        # RoPE raises Y2 where p > 0
        assert causal_participation_ratio(1.3, 1.0, 0.5, t, T, rope_head_dim=D_H) > \
            causal_participation_ratio(1.3, 1.0, 0.5, t, T)
    # the last row is the encoder's finite-T REM with RoPE
    assert causal_participation_ratio(1.3, 1.0, 0.5, T, T, rope_head_dim=D_H, rope_base=BASE) == pytest.approx(
        rope_participation_ratio(1.3, 1.0, 0.5, T, D_H, BASE), rel=1e-12)
    # base -> inf and d_H -> inf: cbar_t -> 1, the causal REM without rotation; error ~ 2/d_H
    plain = causal_participation_ratio(1.3, 1.0, 0.5, 40, T)
    errors = [abs(causal_participation_ratio(1.3, 1.0, 0.5, 40, T, rope_head_dim=d, rope_base=np.inf) - plain)
              for d in (64, 640, 6400)]
    assert errors[0] > 0 and errors[1] < errors[0] / 8 and errors[2] < errors[1] / 8


def test_small_beta_expansion_uses_the_pair_average():
    """To second order in the energies Y2(t) = t^-1 [1 + (1 - 1/t) beta^2 q (q - p cbar_t) log T]
    (the mean pair half-variance of the row's scores): exact, the next term is O(beta^4)."""
    T, t, q, p, beta = 512, 60, 1.0, 0.6, 2e-3
    second = (1.0 + (1.0 - 1.0 / t) * beta ** 2 * q * (q - p * pair_average(t)) * math.log(T)) / t
    y2 = causal_participation_ratio(beta, q, p, t, T, rope_head_dim=D_H, rope_base=BASE)
    # relative error of the beta^2 term: O(beta^2 log T) ~ 3e-5
    assert abs(y2 - second) < 1e-3 * (second - 1.0 / t)
    # the unrotated beta^2 term, (q - p) in place of (q - p cbar_t) (cbar_60 = 0.63): 35 % smaller
    unrotated = (1.0 + (1.0 - 1.0 / t) * beta ** 2 * q * (q - p) * math.log(T)) / t
    assert abs(y2 - unrotated) > 0.2 * (second - 1.0 / t)


def test_propagate_causal_with_rope():
    T, depth, beta = 128, 6, 1.5
    arch = Architecture(norm="pre", norm_type="rms", mlp="gated", activation="silu", sigma_b2=0.0, seq_len=T, **ROPE)
    absolute = arch.replace(positions="absolute")
    positions = [2, 30, 100, T]
    rope = propagate_causal(arch, beta, depth, T, positions, rho0=0.5)
    plain = propagate_causal(absolute, beta, depth, T, positions, rho0=0.5)
    # RoPE spreads the rows: lower cosines than the unrotated theory at every layer >= 1
    assert np.all(rope.rho[:, 1:] < plain.rho[:, 1:])
    # rho0 = 0, p0 = 0: the first layer is the same (no shared part yet)
    zero = propagate_causal(arch, beta, 1, T, positions, rho0=0.0)
    zero_plain = propagate_causal(absolute, beta, 1, T, positions, rho0=0.0)
    np.testing.assert_array_equal(zero.q, zero_plain.q)
    np.testing.assert_array_equal(zero.p, zero_plain.p)
    # position T: the encoder's RoPE block (whose cross-overlap is 1/T, as the causal rows'),
    # up to the tables' interpolation (relative 1e-5 each)
    last = propagate_causal(arch, beta, depth, T, [T], rho0=0.5)
    np.testing.assert_allclose(last.rho[0], propagate(arch, beta, depth, rho0=0.5).rho, rtol=1e-5)
    # base -> inf, d_H -> inf: the unrotated trajectories, error ~ 2/d_H
    errors = [np.abs(propagate_causal(arch.replace(rope_base=np.inf, head_dim=d), beta, depth, T, positions,
                                      rho0=0.5).rho - plain.rho).max() for d in (64, 6400)]
    assert errors[1] < errors[0] / 50
    # absolute positions: unchanged (the rows' factor is exactly 1)
    np.testing.assert_array_equal(propagate_causal(Architecture(), beta, depth, T, positions, rho0=0.5).rho,
                                  propagate_causal(Architecture(seq_len=T), beta, depth, T, positions, rho0=0.5).rho)


def test_causal_rope_bad_input():
    arch = Architecture(seq_len=64, **ROPE)
    with pytest.raises(ValueError, match="arch.seq_len"):
        propagate_causal(arch, 1.0, 2, 128, [10])
    with pytest.raises(ValueError, match="rope_head_dim must be even"):
        causal_participation_ratio(1.0, 1.0, 0.5, 10, 64, rope_head_dim=63)
    with pytest.raises(ValueError, match="rope_base must be > 1"):
        causal_participation_ratio(1.0, 1.0, 0.5, 10, 64, rope_head_dim=64, rope_base=1.0)
    with pytest.raises(ValueError, match="base"):
        causal_rope_correlation(10, 64, D_H, 0.5)
    with pytest.raises(ValueError, match="positions"):
        causal_rope_correlation([1, 5], 64, D_H)


def test_rope_decoder_configs_get_the_rotary_correction():
    """A LLaMA-family model (what `remprop check` passes to last_tokens_cosine, diagrams/diagnosis.py):
    its rows read cbar_t, not the absolute-position theory. At the shipped initialisation beta is
    small (0.33) and the embeddings nearly orthogonal (p ~ 1e-5 q): the rotation lowers the
    cosine by ~3e-8 relative (rho0 as shipped) and ~1e-4 (rho0 = 0.5), far above rounding (1e-15)."""
    from remprop.theory import model_spec

    spec = model_spec("smollm2-135m").with_depth(3)
    run = spec.settings
    assert run.arch.positions == "rope" and run.arch.seq_len == spec.seq_len
    for rho0 in (run.rho0, 0.5):
        rotated = last_tokens_cosine(run.arch, run.beta, run.depth, spec.seq_len, LAST_TOKENS, run.q0, rho0)
        unrotated = last_tokens_cosine(run.arch.replace(positions="absolute"), run.beta, run.depth, spec.seq_len,
                                       LAST_TOKENS, run.q0, rho0)
        assert np.all(unrotated[1:] - rotated[1:] > 1e-8 * unrotated[1:]), (rotated, unrotated)


# -- Monte Carlo: Gaussian energies with the exact RoPE covariance of a causal row --------------

#: Accuracy of the REM with RoPE for Y2 at cosines <= 0.5: 7 % (docs/theory.md section 15);
#: measured for causal rows in section 8 (at most 4.7 % here).
Y2_LAW = 0.07


def test_monte_carlo_of_causal_rotated_rows():
    """Rows of t keys at the score scale of T = 256 (d_H = 64, base 1e4, q = 1, rho = 0.5),
    4000 rows each: the causal RoPE law within 4 standard errors + 7 %; at t = 128 the causal
    REM without rotation (its Y2 25-45 % lower; at t = 16, cbar_t = 0.78, only 7-11 %) outside."""
    T, q, p, n = 256, 1.0, 0.5, 4000
    rng = np.random.default_rng(11)
    for beta in (1.0, 2.0):
        for t in (16, 128):
            k = np.arange(t)
            cov = np.asarray(rope_score_covariance(beta, k[:, None], k[None, :], q=q, p=p, seq_len=T, head_dim=D_H,
                                                   base=BASE))
            w, v = np.linalg.eigh(cov)
            s = rng.standard_normal((n, t)) @ (v * np.sqrt(np.clip(w, 0.0, None))).T
            a = np.exp(s - s.max(axis=1, keepdims=True))
            y2 = np.sum(a * a, axis=1) / np.sum(a, axis=1) ** 2
            mean, se = y2.mean(), y2.std(ddof=1) / math.sqrt(n)
            law = causal_participation_ratio(beta, q, p, t, T, rope_head_dim=D_H, rope_base=BASE)
            assert abs(law - mean) < 4 * se + Y2_LAW * law, (beta, t, mean, se, law)
            unrotated = causal_participation_ratio(beta, q, p, t, T)
            if t == 128:
                assert abs(unrotated - mean) > 4 * se + Y2_LAW * unrotated, (beta, t, mean, unrotated)


# -- real rotated attention ---------------------------------------------------------------------
torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")

#: Two-sided 99 % point of Student's t with 15 degrees of freedom (16 seeds): a correct theory's
#: seed mean is within K standard errors of it with probability 0.99 per check.
K16 = 2.95


def test_causal_rotated_rows_by_position():
    """One causal layer with RoPE, d = d_H = 128, T = 256, rho = 0.5, 16 seeds: Y2 averaged over
    rows 17-64 and 129-256 within K sem + 7 % of the per-position law (measured: within 1.1 sem);
    on the late rows the unrotated causal REM (25-45 % lower, 10-11 sem) outside. Row 1 is
    exactly 1 on both sides. (Rows t <= 16 are 4-9 % above the law: docs/theory.md section 8.)"""
    from remprop.validation.causal import causal_row_measurement
    from remprop.validation.settings import SimulationSettings

    torch.set_num_threads(min(2, torch.get_num_threads()))
    for beta in (1.0, 2.0):
        r = causal_row_measurement(beta,
                                   sim=SimulationSettings(width=128, seq_len=256, device="cpu", seeds=16, rho0=0.5))
        assert r["y2"].shape == (16, 256) and np.allclose(r["y2"][:, 0], 1.0) and r["y2_theory"][0] == 1.0
        for start, stop in ((16, 64), (128, 256)):          # 0-based rows: positions start+1..stop
            per_seed = r["y2"][:, start:stop].mean(axis=1)
            mean, se = per_seed.mean(), per_seed.std(ddof=1) / math.sqrt(per_seed.size)
            law, unrotated = r["y2_theory"][start:stop].mean(), r["y2_unrotated"][start:stop].mean()
            assert abs(mean - law) < K16 * se + Y2_LAW * law, (beta, start, mean, se, law)
            if start == 128:
                assert abs(mean - unrotated) > K16 * se + Y2_LAW * unrotated, (beta, mean, unrotated)
    with pytest.raises(ValueError, match="rope"):
        causal_row_measurement(1.0, rope="yes")
    with pytest.raises(ValueError, match="heads must divide width"):
        causal_row_measurement(1.0, sim=SimulationSettings(width=128, seq_len=256), heads=3)
    with pytest.raises(ValueError, match="head_dim must be even"):
        causal_row_measurement(1.0, sim=SimulationSettings(width=126, seq_len=256), heads=2)


#: Finite-width bias of the mean cosine after each norm, < 0.23 / d (tests/test_validation_stack.py).
NORM_BIAS = 0.23 / 256


@pytest.mark.parametrize("fields", [
    dict(norm="pre", norm_type="rms", mlp="gated", activation="silu", sigma_b2=0.0, sigma_v2=1.0),
    dict(norm="post", alpha_sa=0.5),
], ids=["llama-block", "post-ln"])
def test_simulated_causal_rope_stack_follows_the_theory(fields):
    """Causal stacks with RoPE (two heads of d_H = 128, d = 256, T = 128, beta = 2, rho0 = 0.5,
    6 layers, 16 seeds): the last 32 tokens' rho per layer within K sem + the norms' bias
    (measured: within 1.2 sem); the causal theory without rotation misses it (by 9 and
    14 sem at the worst layer)."""
    from remprop.validation.causal import causal_comparison
    from remprop.validation.settings import SimulationSettings

    torch.set_num_threads(min(2, torch.get_num_threads()))
    T, depth, beta, seeds = 128, 6, 2.0, 16
    arch = Architecture(heads=2, seq_len=T, positions="rope", head_dim=128, **fields)
    c = causal_comparison(arch, beta, depth,
                          sim=SimulationSettings(width=256, seq_len=T, device="cpu", seeds=seeds, sequences=1,
                                                 inputs="synthetic", rho0=0.5), last=32, window=32, observable="rho")
    sem = c.std_last() / math.sqrt(seeds)
    tolerance = K16 * sem + 2 * np.arange(depth + 1) * NORM_BIAS + 1e-9
    assert np.all(c.error_last <= tolerance), (c.error_last, tolerance)
    s = c.settings
    unrotated = propagate_causal(arch.replace(positions="absolute"), beta, depth, T, np.arange(T - 31, T + 1),
                                 q0=s["q0"], rho0=s["rho0"]).rho.mean(axis=0)
    assert np.any(np.abs(unrotated - c.mean_last()) > tolerance), (unrotated, c.mean_last(), tolerance)
    with pytest.raises(ValueError, match="arch.seq_len"):
        causal_comparison(arch, beta, 2,
                          sim=SimulationSettings(width=256, seq_len=64, device="cpu", seeds=1, sequences=1,
                                                 inputs="synthetic"), last=8, window=8)


# -- theory_participation ---------------------------------------------------------------------

def test_theory_participation_reads_rope_and_finite_T():
    from remprop.validation.comparison import theory_participation

    T, beta = 128, 1.6
    arch = Architecture(norm="pre", heads=2, qk_scaling="head", seq_len=T, **ROPE)
    traj = propagate(arch, beta, 4, rho0=0.5)
    y2 = theory_participation(arch, beta, traj)
    q_in, p_in = arch.attention_input(traj.q[:-1], traj.p[:-1])
    np.testing.assert_allclose(y2, rope_participation_ratio(2 * beta, q_in, p_in, T, D_H, BASE), rtol=1e-13)
    assert np.all(y2 > participation_ratio(2 * beta, q_in, p_in, T))
    # the Y2 the block itself uses: recovered from the attention component's q_A (table, 1e-6)
    attention = arch.attention_map(beta)
    qa, _ = attention(q_in, p_in)
    np.testing.assert_allclose((qa - arch.sigma_b2) / arch.sigma_v2 - p_in, (q_in - p_in) * y2, rtol=1e-5)
    # finite T without rotation: the exact finite-T REM; seq_len None: the asymptotic law
    plain = arch.replace(positions="absolute")
    np.testing.assert_allclose(theory_participation(plain, beta, traj), participation_ratio(2 * beta, q_in, p_in, T),
                               rtol=1e-13)
    asym = plain.replace(seq_len=None)
    np.testing.assert_allclose(theory_participation(asym, beta, traj), participation_ratio(2 * beta, q_in, p_in),
                               rtol=1e-13)
