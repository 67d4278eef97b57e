"""Trainability diagrams and the minimum residual strength (remprop.diagrams).

Exact comparisons use independent propagate() calls (the same float maps, so agreement
is to round-off); tolerances are stated where they appear.
"""
from __future__ import annotations

import json
import math
import tracemalloc

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from remprop.diagrams import (
    ALPHA_MAX,
    ENTROPY_COLLAPSE,
    PHASE_LABELS,
    RANK_COLLAPSE,
    TRAINABLE,
    TrainabilityDiagram,
    classify_phases,
    alpha_star,
    trainability_diagram,
)
from remprop.theory import Architecture, final_state, propagate

TOL = 1e-8  # bisection bracket width (the default)
# Round-off allowance on a final cosine: each block is a handful of float64 operations,
# so L blocks accumulate at most ~L * 10 ulp ~ 1e-13 at L = 100; 1e-12 leaves margin and
# is still far below any physical change of rho (the sweep in the monotonicity test finds
# increases of at most ~1e-14 across 3000 random stacks).
ROUND_OFF = 1e-12


def rho_final(arch, beta, depth, alpha, q0=1.0, rho0=0.0):
    """Final cosine by an independent propagate() call (whole trajectory)."""
    with np.errstate(invalid="ignore", over="ignore"):
        return float(propagate(arch.replace(alpha_sa=alpha), beta, depth, q0, rho0).rho[-1])


def rho_final_fast(arch, beta, depth, alphas, rho0=0.0, q0=1.0):
    """Final cosines at several alphas by the public final_state (no trajectories), also
    independent of the bisection kernel; nan where the stream vanished or overflowed."""
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        return final_state(arch.replace(alpha_sa=np.asarray(alphas, float)), beta, depth, q0, rho0)["rho"]


# Every (norm, activation) combination costs a numba kernel load (~1-2 s) on first use,
# so the bisection checks use ReLU only; the monotonicity sweep covers both activations.
architectures = st.builds(
    Architecture,
    norm=st.sampled_from(["post", "pre", "none"]),
    attention=st.just("softmax"),
    activation=st.sampled_from(["relu", "linear"]),
    sigma_w2=st.floats(0.01, 3.0),
    sigma_b2=st.one_of(st.just(0.0), st.floats(0.0, 0.5)),
    sigma_v2=st.floats(0.01, 3.0),
    alpha_mlp=st.floats(0.0, 3.0),
)
betas = st.floats(0.01, 30.0)


# -- phases ------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bert60():
    # columns: beta well below, just below, above sqrt(2); rows: alpha from 0 to 3
    return trainability_diagram(Architecture(), [0.1, 0.5, 1.4, 3.0], [0.0, 0.5, 1.0, 2.0, 3.0], 60)


def test_bert_phases_in_the_three_regions(bert60):
    d = bert60
    col = {b: j for j, b in enumerate(d.betas)}
    row = {a: i for i, a in enumerate(d.alphas)}
    # small beta, alpha = 1: rho_60 ~ 0.9996 > 0.99 (rank collapse)
    assert d.phase[row[1.0], col[0.5]] == RANK_COLLAPSE
    assert d.rho_final[row[1.0], col[0.5]] > 0.99
    # beta = 3 > sqrt 2: entropy collapse for every alpha
    assert (d.phase[:, col[3.0]] == ENTROPY_COLLAPSE).all()
    # large alpha, small beta: trainable
    assert d.phase[row[3.0], col[0.1]] == TRAINABLE
    assert d.phase[row[2.0], col[1.4]] == TRAINABLE


def test_diagram_cells_match_independent_propagation(bert60):
    d = bert60
    for i, alpha in enumerate(d.alphas):
        for j, beta in enumerate(d.betas):
            traj = propagate(d.arch.replace(alpha_sa=alpha), beta, d.depth)
            assert d.rho_final[i, j] == pytest.approx(traj.rho[-1], abs=ROUND_OFF)
            expected = classify_phases(beta, traj.beta_critical[0], traj.rho[-1], d.threshold)
            assert d.phase[i, j] == expected


def test_beta_critical_post_ln_is_sqrt2_for_orthogonal_unit_inputs(bert60):
    np.testing.assert_allclose(bert60.beta_critical, math.sqrt(2.0), rtol=1e-15)
    np.testing.assert_allclose(bert60.beta_critical_cells, math.sqrt(2.0), rtol=1e-15)
    assert bert60.beta_critical_cells.shape == bert60.phase.shape


def test_beta_critical_post_ln_general_input_state():
    q0, rho0 = 2.0, 0.3
    d = trainability_diagram(Architecture(), [0.2, 1.0], [0.5, 1.5], 5, q0=q0, rho0=rho0)
    np.testing.assert_allclose(d.beta_critical, math.sqrt(2.0 / (q0 * (q0 - q0 * rho0))), rtol=1e-14)


def test_beta_critical_pre_ln_is_smallest_over_layers_per_cell():
    arch = Architecture(norm="pre")
    betas, alphas = np.array([0.5, 1.0, 2.0]), np.array([0.3, 1.0, 2.0])
    d = trainability_diagram(arch, betas, alphas, 12)
    for i, alpha in enumerate(alphas):
        traj = propagate(arch.replace(alpha_sa=alpha), betas, 12)
        np.testing.assert_allclose(d.beta_critical_cells[i], traj.beta_critical.min(axis=-1), rtol=1e-13)
    np.testing.assert_array_equal(d.beta_critical, d.beta_critical_cells.min(axis=0))


def test_classify_phases_rules():
    beta = np.array([1.0, 1.0, 2.0, 2.0, 1.0])
    beta_c = np.array([1.5, 1.5, 1.5, 1.5, 1.5])
    rho = np.array([0.5, 0.999, 0.5, 0.999, np.nan])
    phase = classify_phases(beta, beta_c, rho, 0.99)
    # both failures -> entropy collapse; nan cosine -> rank collapse
    assert phase.tolist() == [TRAINABLE, RANK_COLLAPSE, ENTROPY_COLLAPSE, ENTROPY_COLLAPSE, RANK_COLLAPSE]
    assert phase.dtype == np.int8
    assert PHASE_LABELS == {0: "trainable", 1: "rank-collapse", 2: "entropy-collapse"}


# -- alpha* ------------------------------------------------------------------------------
def test_alpha_star_bert_depth60_brackets_the_threshold():
    arch, depth = Architecture(), 60
    alpha = alpha_star(arch, 0.5, depth)
    assert isinstance(alpha, float) and 0.0 < alpha < ALPHA_MAX
    assert rho_final(arch, 0.5, depth, alpha) <= 0.99 < rho_final(arch, 0.5, depth, alpha - 2 * TOL)


def test_alpha_star_independent_of_beta_below_beta_c():
    # Asymptotic theory: below beta_c attention is fully spread (Y2 = 0) at every layer of a
    # post-LN stack (rho only grows, so beta_c only grows): the stack does not see beta.
    betas = np.linspace(0.05, 1.40, 12)
    alphas = alpha_star(Architecture(), betas, 60)
    assert np.ptp(alphas) == 0.0
    # ...while above beta_c it does.
    above = alpha_star(Architecture(), [1.6, 2.5], 60)
    assert abs(above[1] - above[0]) > 1e-3


def test_alpha_star_consistent_with_phase_array():
    betas = np.linspace(0.05, 1.4, 7)
    alphas = np.linspace(0.0, 3.0, 61)
    d = trainability_diagram(Architecture(), betas, alphas, 60)
    assert np.isfinite(d.alpha_star).all()
    below = d.betas < d.beta_critical
    above_star = d.alphas[:, None] >= d.alpha_star[None, :]
    assert (d.phase[above_star & below[None, :]] == TRAINABLE).all()
    under_star = d.alphas[:, None] < d.alpha_star[None, :] - TOL
    assert (d.phase[under_star & below[None, :]] == RANK_COLLAPSE).all()
    assert under_star.any() and above_star.any()


@settings(max_examples=40, deadline=None)
@given(arch=architectures, beta=betas, depth=st.integers(1, 80), threshold=st.floats(0.3, 0.999),
       rho0=st.floats(0.0, 0.95))
def test_bisection_brackets_threshold_by_independent_propagation(arch, beta, depth, threshold, rho0):
    arch = arch.replace(activation="relu")
    alpha = alpha_star(arch, beta, depth, threshold, rho0=rho0)
    if alpha == 0.0:
        assert rho_final_fast(arch, beta, depth, 0.0, rho0) <= threshold
    elif math.isinf(alpha):
        # no alpha of a fine geometric grid up to the bound reaches the threshold
        grid = np.concatenate([[0.0], np.geomspace(1e-4, ALPHA_MAX, 2000)])
        assert not (rho_final_fast(arch, beta, depth, grid, rho0) <= threshold).any()
    else:
        rho_at, rho_below = rho_final_fast(arch, beta, depth, [alpha, max(0.0, alpha - 2 * TOL)], rho0)
        assert rho_at <= threshold
        # (nan, a vanished stream at alpha = 0 without biases, counts as collapsed)
        assert not rho_below <= threshold


@settings(max_examples=60, deadline=None)
@given(arch=architectures, beta=betas, depth=st.integers(1, 100), rho0=st.floats(0.0, 0.99),
       log_q0=st.floats(-2.0, 2.0))
def test_final_cosine_non_increasing_in_alpha_for_softmax_attention(arch, beta, depth, rho0, log_q0):
    # The assumption behind the bisection (see remprop.diagrams.residual_strength).
    alphas = np.concatenate([[0.0], np.geomspace(1e-3, 1e3, 400)])
    rho = rho_final_fast(arch, beta, depth, alphas, rho0, math.exp(log_q0))
    rho = rho[np.isfinite(rho)]  # pre-LN / no-LN streams overflow at large alpha
    assume(rho.size > 1)
    assert np.diff(rho).max() <= ROUND_OFF


def test_gain_controlled_is_not_monotone_and_the_scan_finds_the_first_crossing():
    # No LayerNorm, gain-controlled attention: the good alphas form a window, so a plain
    # bisection on [0, alpha_max] sees a collapsed stack at alpha_max and gives up.
    arch = Architecture(norm="none", attention="gain-controlled", sigma_w2=1.0, sigma_b2=1e-6, sigma_v2=1.0)
    depth, beta, threshold = 60, 0.5, 0.5
    assert not rho_final(arch, beta, depth, ALPHA_MAX) <= threshold  # collapsed at the bound
    alpha = alpha_star(arch, beta, depth, threshold)
    assert 0.0 < alpha < 10.0
    assert rho_final(arch, beta, depth, alpha) <= threshold
    below = np.linspace(0.0, alpha - 2 * TOL, 2001)
    assert not (rho_final_fast(arch, beta, depth, below) <= threshold).any()


@pytest.mark.parametrize("norm", ["post", "pre", "none"])
def test_alpha_star_non_decreasing_in_depth(norm):
    arch = Architecture(norm=norm)
    betas = np.array([0.3, 1.0, 2.0])
    # alpha_max 1.5 keeps pre-LN / no-LN streams (~alpha^(2L)) finite at L = 80.
    stars = np.array([alpha_star(arch, betas, depth, alpha_max=1.5) for depth in range(1, 81)])
    finite = np.isfinite(stars)
    # once inf (no alpha <= 1.5 works) it stays inf at larger depth
    assert (np.diff(finite.astype(int), axis=0) <= 0).all()
    steps = np.diff(np.where(finite, stars, 1.5 + 1.0), axis=0)
    assert steps.min() >= -TOL


def test_pre_ln_large_depth_bound_follows_overflow_edge():
    # alpha**(2 L) overflows float64 near alpha = 1.42 at L = 1000; alpha* ~ 1.0001 lies
    # below that edge and must be found although alpha_max = 1e3 overflows.
    arch, depth = Architecture(norm="pre"), 1000
    alpha = alpha_star(arch, 0.5, depth)
    assert math.isfinite(alpha)
    assert rho_final(arch, 0.5, depth, alpha) <= 0.99 < rho_final(arch, 0.5, depth, alpha - 2 * TOL)


def test_alpha_star_shapes_and_ignored_alpha_sa():
    arch = Architecture()
    scalar = alpha_star(arch, 0.5, 10)
    assert isinstance(scalar, float)
    vector = alpha_star(arch.replace(alpha_sa=np.array([0.1, 7.0])), [0.5, 2.0], 10)
    assert vector.shape == (2,) and vector[0] == scalar
    grid = alpha_star(arch.replace(sigma_w2=np.array([[0.1], [0.2], [0.4]])), [0.5, 2.0], 10)
    assert grid.shape == (3, 2)
    assert grid[1, 0] == scalar  # sigma_w2 = 0.2 is the default


def test_alpha_star_zero_and_inf():
    arch = Architecture()
    # beta >> beta_c: attention rows are nearly one-hot, one block keeps tokens apart even
    # without a skip path
    assert alpha_star(arch, 30.0, 1, threshold=0.9) == 0.0
    assert rho_final(arch, 30.0, 1, 0.0) <= 0.9
    # inputs already more aligned than the threshold stay so for every alpha
    assert alpha_star(arch, 0.5, 5, threshold=0.5, rho0=0.9) == math.inf


# -- files ---------------------------------------------------------------------------------
def test_save_load_round_trip(tmp_path):
    # rho0 above the threshold: alpha* = inf in every column (exercises "inf" in JSON)
    d = trainability_diagram(Architecture(sigma_w2=0.3), [0.5, 2.0], [0.0, 1.0, 2.0], 8, 0.9, rho0=0.95)
    assert np.isinf(d.alpha_star).all()
    npz_path, json_path = d.save(tmp_path / "diagram.npz")
    assert npz_path.name == "diagram.npz" and json_path.name == "diagram.json"

    def strict(token):
        raise AssertionError(f"non-standard JSON constant {token}")

    summary = json.loads(json_path.read_text(), parse_constant=strict)
    assert summary["format"] == "remprop.grid_result/1" and summary["kind"] == "theory"
    assert summary["arrays"]["alpha_star"] == ["inf", "inf"]
    assert summary["arrays"]["phase"] == d.phase.tolist() and summary["axes"] == ["alpha", "beta"]
    assert summary["labels"] == {"0": "trainable", "1": "rank-collapse", "2": "entropy-collapse"}
    settings = summary["settings"]
    assert settings["arch"]["sigma_w2"] == 0.3 and settings["depth"] == 8 and settings["threshold"] == 0.9
    assert summary["betas"] == [0.5, 2.0]
    back = TrainabilityDiagram.load(tmp_path / "diagram")
    for name in ("betas", "alphas", "phase", "rho_final", "beta_critical", "beta_critical_cells", "alpha_star"):
        np.testing.assert_array_equal(getattr(back, name), getattr(d, name))
    assert back.phase.dtype == np.int8
    assert (back.depth, back.threshold, back.rho0) == (8, 0.9, 0.95)
    assert back.arch.to_dict() == d.arch.to_dict()


def test_save_finite_values_round_trip_through_json(tmp_path, bert60):
    _, json_path = bert60.save(tmp_path / "bert")
    summary = json.loads(json_path.read_text())
    np.testing.assert_array_equal(summary["arrays"]["alpha_star"], bert60.alpha_star)
    np.testing.assert_array_equal(summary["arrays"]["beta_critical"], bert60.beta_critical)


# -- memory and progress -----------------------------------------------------------------------
def test_diagram_keeps_no_trajectories():
    # 300 x 300 cells x 60 layers: trajectories (q and p) would take 300*300*61*16 B = 88 MB.
    # Final states need ~ (4 + 3) floats per cell = 5 MB; 20 MB leaves room for chunk buffers.
    tracemalloc.start()
    try:
        trainability_diagram(Architecture(), np.linspace(0.05, 3, 300), np.linspace(0, 3, 300), 60)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 20e6


def test_progress_bar(capsys):
    trainability_diagram(Architecture(), [0.5, 1.0], [1.0, 2.0], 3, progress=True)
    assert "cell" in capsys.readouterr().err


# -- bad input ---------------------------------------------------------------------------------
@pytest.mark.parametrize("threshold", [0, 1, 1.5, float("nan"), -0.1])
def test_bad_threshold(threshold):
    with pytest.raises(ValueError, match="threshold"):
        alpha_star(Architecture(), 0.5, 10, threshold)
    with pytest.raises(ValueError, match="threshold"):
        trainability_diagram(Architecture(), [0.5], [1.0], 10, threshold)


@pytest.mark.parametrize("depth", [0, -3, 2.5, "60"])
def test_bad_depth(depth):
    with pytest.raises(ValueError, match="depth"):
        alpha_star(Architecture(), 0.5, depth)
    with pytest.raises(ValueError, match="depth"):
        trainability_diagram(Architecture(), [0.5], [1.0], depth)


@pytest.mark.parametrize("beta", [0.0, -1.0, [0.5, 0.0], float("nan")])
def test_bad_beta(beta):
    with pytest.raises(ValueError, match="beta"):
        alpha_star(Architecture(), beta, 10)


@pytest.mark.parametrize("kwargs, name", [
    ({"betas": []}, "betas"), ({"betas": [0.5, -1.0]}, "betas"), ({"betas": [[0.5]]}, "betas"),
    ({"alphas": []}, "alphas"), ({"alphas": [-0.5]}, "alphas"), ({"q0": 0.0}, "q0"),
    ({"rho0": 1.5}, "rho0"), ({"arch": "bert"}, "arch"),
    ({"arch": Architecture(sigma_w2=np.array([0.1, 0.2]))}, "sigma_w2"),
])
def test_bad_diagram_arguments(kwargs, name):
    args = {"arch": Architecture(), "betas": [0.5], "alphas": [1.0], "depth": 4}
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        trainability_diagram(**args)


@pytest.mark.parametrize("kwargs, name", [
    ({"alpha_max": 0.0}, "alpha_max"), ({"alpha_max": math.inf}, "alpha_max"), ({"tol": 0.0}, "tol"),
    ({"tol": -1e-8}, "tol"), ({"q0": -1.0}, "q0"), ({"rho0": 2.0}, "rho0"),
])
def test_bad_alpha_star_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        alpha_star(Architecture(), 0.5, 10, **kwargs)


def test_min_residual_strength_follows_finite_seq_len():
    # With finite T the participation ratio is positive below beta_c, so alpha* must
    # depend on beta and agree with a direct bracket of the finite-T final cosine.
    arch = Architecture(seq_len=128)
    betas = np.array([0.3, 1.0])
    star = alpha_star(arch, betas, 20)
    assert star[0] != star[1]
    above = final_state(arch.replace(alpha_sa=star), betas, 20)["rho"]
    below = final_state(arch.replace(alpha_sa=star - 2e-6), betas, 20)["rho"]
    assert (above <= 0.99).all() and (below > 0.99).all()
