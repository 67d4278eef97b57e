"""Causal (decoder) stacks: per-position REM theory and its comparison with masked simulations.

Theory: remprop.theory.causal and remprop.theory.rem.causal (docs/derivations.md section 2); measurements:
remprop.validation.causal and the window statistics of remprop.validation.measurements.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from remprop.theory import Architecture, propagate
from remprop.theory.causal import last_tokens_cosine, propagate_causal
from remprop.theory.rem import causal_participation_ratio, causal_participation_table, participation_moment


def test_causal_row_is_a_rem_with_t_keys_at_the_scale_of_T():
    """Y2(t) uses t states and the energy variance beta^2 q (q - p) log T."""
    T = 256
    # the last position is the encoder's finite-T REM
    assert causal_participation_ratio(1.1, 1.0, 0.2, T, T) == pytest.approx(
        participation_moment(1.1, 1.0, 0.2, T), rel=1e-12)
    # beta -> 0: uniform over the t keys
    for t in (2, 17, 200):
        assert causal_participation_ratio(1e-9, 1.0, 0.0, t, T) == pytest.approx(1.0 / t, rel=1e-6)
    # same energy variance, fewer states: more concentrated rows
    y = [causal_participation_ratio(0.8, 1.0, 0.0, t, T) for t in (8, 32, 128, 256)]
    assert np.all(np.diff(y) < 0)
    # the variance is that of T: equal to the finite-t REM at beta sqrt(log T / log t)
    assert causal_participation_ratio(0.8, 1.0, 0.0, 32, T) == pytest.approx(
        participation_moment(0.8 * math.sqrt(math.log(T) / math.log(32)), 1.0, 0.0, 32), rel=1e-12)


def test_causal_table_interpolates_exact_values():
    """Table vs exact at positions and scales between the nodes (spline in log t and u; tolerance 1e-5)."""
    T = 512
    table = causal_participation_table(T, np.arange(2, T + 1))
    rng = np.random.default_rng(4)
    for _ in range(8):
        t, x = int(rng.integers(2, T + 1)), float(rng.uniform(0.0, 3.0))
        assert table(t, x) == pytest.approx(causal_participation_ratio(x, 1.0, 0.0, t, T), rel=1e-5)
    # the last 50 positions: few position nodes (narrow range of log t), same tolerance
    late = causal_participation_table(T, np.arange(T - 49, T + 1))
    for _ in range(8):
        t, x = int(rng.integers(T - 49, T + 1)), float(rng.uniform(0.0, 3.0))
        assert late(t, x) == pytest.approx(causal_participation_ratio(x, 1.0, 0.0, t, T), rel=1e-5)
    # beyond the tabulated x range the exact value is used
    assert table(300, 60.0) == pytest.approx(causal_participation_ratio(60.0, 1.0, 0.0, 300, T), rel=1e-10)


def test_last_position_follows_the_encoder_theory(monkeypatch):
    """Position T has T keys: propagate_causal equals the finite-T encoder theory there.

    The causal rows keep the independent-rows cross-overlap 1/t (no per-position table of
    C yet, docs/theory.md section 8), so the encoder's block tree is iterated here with the
    same 1/T in place of its tabulated C: what is compared is the per-position Y2 table."""
    from remprop.theory.components import attention as components

    class IndependentRows:
        def __init__(self, seq_len):
            self.seq_len = seq_len

        def __call__(self, x, rho):
            return np.full(np.shape(x), 1.0 / self.seq_len)

    arch = Architecture(alpha_sa=1.2)
    T, depth = 128, 12
    traj = propagate_causal(arch, 0.9, depth, T, [T], q0=1.0, rho0=0.1)
    monkeypatch.setattr(components, "cross_overlap_table", IndependentRows)
    block = arch.replace(seq_len=T).block(0.9)
    q, p = 1.0, 0.1
    rho = [p / q]
    for _ in range(depth):
        q, p = block(q, p)
        rho.append(p / q)
    assert np.allclose(traj.rho[0], rho, rtol=1e-5, atol=1e-7)
    # vectorised over positions: each row equals the position computed alone
    both = propagate_causal(arch, 0.9, depth, T, [8, T], q0=1.0, rho0=0.1)
    alone = propagate_causal(arch, 0.9, depth, T, [8], q0=1.0, rho0=0.1)
    assert np.allclose(both.rho[0], alone.rho[0], rtol=1e-5) and np.allclose(both.rho[1], traj.rho[0], rtol=1e-5)


def test_causal_theory_checks_inputs():
    arch = Architecture()
    with pytest.raises(ValueError, match="positions"):
        propagate_causal(arch, 0.5, 4, 64, [1, 5])
    with pytest.raises(ValueError, match="positions"):
        propagate_causal(arch, 0.5, 4, 64, [65])
    with pytest.raises(ValueError, match="attention"):
        propagate_causal(arch.replace(attention="gain-controlled"), 0.5, 4, 64, [10])
    with pytest.raises(ValueError, match="last"):
        last_tokens_cosine(arch, 0.5, 4, 64, last=64)
    with pytest.raises(ValueError, match="seq_len"):
        causal_participation_ratio(0.5, 1.0, 0.0, 5, 1)


torch = pytest.importorskip("torch")


def test_window_statistics():
    from remprop.validation.measurements import last_tokens_statistics, token_statistics, window_statistics

    x = torch.randn(3, 20, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    window = window_statistics(x, 5, 12)
    direct = token_statistics(x[:, 5:12])
    for name in ("q", "p", "rho", "cosine"):
        assert torch.allclose(window[name], direct[name])
    assert torch.allclose(last_tokens_statistics(x, 6)["cosine"], token_statistics(x[:, -6:])["cosine"])
    for bad in ((5, 6), (-1, 4), (4, 30)):
        with pytest.raises(ValueError, match="window"):
            window_statistics(x, *bad)
    with pytest.raises(ValueError, match="last"):
        last_tokens_statistics(x, 1)


def test_causal_theory_matches_masked_simulation_small():
    """Post-LN causal stack, T = 64, d = 128, 8 layers, last 16 tokens, 4 seeds x 2 sequences.

    Tolerance per layer: 4 standard errors of the mean over sequences plus 0.02 for the
    late-token approximation (at T = 512, d = 720, 50 layers the largest error over layers is
    0.033, docs/derivations.md section 2; the mean error 0.009).
    """
    from remprop.validation.causal import causal_comparison
    from remprop.validation.settings import SimulationSettings

    comparison = causal_comparison(Architecture(), beta=0.8, depth=8,
                                   sim=SimulationSettings(width=128, seq_len=64, seeds=4, sequences=2,
                                                          inputs="synthetic"), last=16, window=16)
    n = comparison.measured_last.shape[0]
    se = comparison.std_last() / math.sqrt(n)
    assert np.all(comparison.error_last[1:] < 4 * se[1:] + 0.02), comparison.error_last
    # the cosine rises over depth (rank collapse at alpha_sa = 1), in theory and measurement
    assert comparison.theory_last[-1] > comparison.theory_last[1] + 0.05
    assert comparison.mean_last()[-1] > comparison.mean_last()[1] + 0.05
    assert comparison.window_errors.shape == (4,)
