"""Issue 25, items 5, 6 (the sweep's manifest) and 9 (the theory's part): the theory numerics
give a finite correct answer or one clear error, and a refused sweep does not lock its folder.

Every case of the issue is reproduced through :func:`remprop.cli.main` (exit status and the
lines on stderr) or the Python API, as in ``tests/test_reliability_inputs.py``.
"""
from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest

import remprop.theory
from remprop.diagrams import (ENTROPY_COLLAPSE, RANK_COLLAPSE, TRAINABLE, TrainabilityDiagram, alpha_star,
                              trainability_diagram)
from remprop.theory import Architecture, RunSettings, final_state, propagate, register_activation
from remprop.theory.checks import ParameterError
from remprop.theory.components.residual import SCALED_SKIP_ABOVE
from cli_checks import run_cli, assert_one_line_error  # noqa: E402


# -- item 5: post-LN at a skip strength whose square leaves float64 ----------------------------
# Rounding: the scaled skip (divided by alpha^2) and the plain one differ by a few ulps per
# sublayer; over 10 blocks the final cosine agrees to ~1e-14 relative, checked at 1e-12.
ROUNDING = 1e-12


def test_post_ln_overflowing_skip_is_the_skip_dominated_limit_not_rank_collapse():
    # the issue: alpha 1e300 read as rank-collapsed (rho nan) while alpha* = 0.35
    diagram = trainability_diagram(Architecture(), [0.5], [1.0, 1e19, 1e300], 10)
    rho = diagram.rho_final[:, 0]
    assert np.all(np.isfinite(rho)), rho
    assert list(diagram.phase[:, 0]) == [TRAINABLE] * 3
    # 1e19 < SCALED_SKIP_ABOVE runs the plain skip, whose branch share (1e-38) is already below
    # rounding: the limit alpha -> inf is the same cosine
    assert 1e19 < SCALED_SKIP_ABOVE
    assert rho[2] == pytest.approx(rho[1], rel=ROUNDING)
    # the numpy maps of the tree agree with the kernels (one block, alpha past 1e154)
    q, p = Architecture(alpha_sa=1e300).block(0.5)(1.0, 0.3)
    q_ref, p_ref = Architecture(alpha_sa=1e19).block(0.5)(1.0, 0.3)
    assert (q, p / q) == (1.0, pytest.approx(p_ref / q_ref, rel=ROUNDING))


def test_min_residual_strength_with_a_huge_bound_is_the_default_bound_answer():
    # the issue: inf at alpha_max 1e160 against 1.2334 at the default bound
    default = alpha_star(Architecture(), 0.5, 60)
    wide = alpha_star(Architecture(), 0.5, 60, alpha_max=1e160)
    assert 1.23 < default < 1.24
    assert wide == pytest.approx(default, abs=1e-7)  # both brackets narrower than tol = 1e-8


@pytest.mark.parametrize("norm", ["pre", "none"])
def test_final_states_carry_the_scale_of_a_fast_growing_stream_as_propagate_does(norm):
    # four blocks between renormalisations grew q by alpha**16: nan from alpha ~1e20 in the
    # diagram's final states while propagate (renormalised every block) stayed finite
    alphas = np.array([1.5, 1e20, 1e77, 1e130])[:, None]
    arch = Architecture(norm=norm, alpha_sa=alphas)
    final = final_state(arch, 0.5, 10)["rho"]
    assert np.all(np.isfinite(final)) and np.array_equal(final, propagate(arch, 0.5, 10).rho[..., -1])


def test_diagram_says_which_cells_have_no_final_cosine(capsys, tmp_path):
    # pre-LN at alpha 1e300: one block's alpha**2 leaves float64 even with the carried scale
    code, out, err = run_cli(capsys, "diagram", "--norm", "pre", "--beta", 0.5, "--alpha", "1,1e300",
                             "--depth", 3, "--out", tmp_path, "--json")
    data = json.loads(out)
    assert code == 0 and err == "" and data["undefined_cells"] == 1
    assert "the first at alpha 1e+300, beta 0.5" in data["note"] and "left float64" in data["note"]
    code, out, err = run_cli(capsys, "diagram", "--beta", 0.5, "--alpha", "1,1e300", "--depth", 3,
                             "--out", tmp_path, "--json")
    assert code == 0 and json.loads(out)["undefined_cells"] == 0 and json.loads(out)["note"] is None


def test_propagate_at_alpha_1e300_is_finite(capsys):
    code, out, err = run_cli(capsys, "propagate", "--alpha", "1e300", "--depth", 5, "--json")
    data = json.loads(out)
    assert code == 0 and err == ""
    assert data["note"] is None and all(math.isfinite(float(r)) for r in data["rho"])
    assert [float(q) for q in data["q"][1:]] == [1.0] * 5


# -- item 6: a refused sweep leaves no manifest -------------------------------------------------
def test_a_sweep_refused_before_its_first_cell_does_not_lock_its_folder(tmp_path):
    pytest.importorskip("torch")
    from remprop.validation.experiments.sweep import SweepSpec, run_sweep

    small = dict(betas=(0.5,), depth=2, seeds=1, sequences=1, width=16, seq_len=16)
    refused = SweepSpec(alphas=(1e200,), arch=Architecture(norm="none"), **small)
    with pytest.raises(ValueError, match="alpha_sa = 1e\\+200"):
        run_sweep(refused, tmp_path, workers=0)
    assert not (tmp_path / "sweep.json").exists()
    report = run_sweep(SweepSpec(alphas=(1.0,), arch=Architecture(norm="none"), **small), tmp_path, workers=0)
    assert report.cells_computed == 1 and (tmp_path / "sweep.json").exists()


# -- item 9: overflow said, activation failures reported, damaged files refused --------------
def test_propagate_says_why_q_reads_inf(capsys):
    # no-LN ReLU at the defaults: q grows like 1.2**L and leaves float64 near layer 3530
    code, out, err = run_cli(capsys, "propagate", "--norm", "none", "--depth", 4000, "--json")
    data = json.loads(out)
    assert code == 0 and err == ""
    first = data["overflow_from_layer"]
    assert 3000 < first < 4000 and data["undefined_from_layer"] is None
    assert data["q"][first] == "inf" and data["q"][first - 1] != "inf"
    assert data["log2_q"][first] > 1024 and all(math.isfinite(float(r)) for r in data["rho"])
    assert f"q and p read inf from layer {first} on" in data["note"] and "float64" in data["note"]
    code, out, _ = run_cli(capsys, "propagate", "--norm", "none", "--depth", 4000)  # layers spread: 4 apart
    assert code == 0 and "note: q and p read inf from layer 353" in out


def _tanh_up_to_100(x):
    if x > 100.0:
        raise ValueError("out of range")
    return math.tanh(x)


def test_an_activation_failing_beyond_the_probe_grid_is_reported_not_nan():
    # checked finite on [-32, 32] only; with sigma_w2 4 and no LN the MLP's input reaches the
    # failing range in block 8 (quadrature nodes up to 8 sqrt(2 q1) > 100)
    name = register_activation("rel25-raise100", _tanh_up_to_100, parity="odd", replace=True)
    arch = Architecture(norm="none", activation=name, sigma_w2=4.0)
    for run in (propagate, final_state):
        with pytest.raises(ParameterError, match=r"^activation 'rel25-raise100': the state turned nan in block 8"
                                                 r" from a finite input") as caught:
            run(arch, 0.5, 12)
        assert caught.value.parameter == "activation"
    assert np.all(np.isfinite(propagate(arch, 0.5, 7).rho))  # before the failure: the numbers


def test_load_refuses_a_diagram_whose_final_cosines_disagree_with_its_phases(tmp_path):
    diagram = trainability_diagram(Architecture(), [0.5, 2.0], [0.0, 2.0], 3)
    assert {TRAINABLE, ENTROPY_COLLAPSE} <= set(diagram.phase.ravel())
    diagram.save(tmp_path / "good")
    assert np.array_equal(TrainabilityDiagram.load(tmp_path / "good").phase, diagram.phase)
    arrays = dict(np.load(tmp_path / "good.npz"))
    for name, value in (("rho_final", np.nan), ("rho_final", 3.0), ("beta_critical_cells", 1e-3)):
        damaged = dict(arrays, **{name: np.full_like(arrays[name], value)})
        np.savez(tmp_path / "bad.npz", **damaged)
        with pytest.raises(ValueError, match=rf"bad\.npz is not a valid saved TrainabilityDiagram \({name}: "):
            TrainabilityDiagram.load(tmp_path / "bad")


def test_a_vanished_stream_still_loads():
    # nan final cosines are a defined state where they agree with the phases (rank collapse)
    diagram = trainability_diagram(Architecture(sigma_v2=0.0, sigma_b2=0.0, alpha_mlp=0.0), [0.5], [0.0], 3)
    assert np.isnan(diagram.rho_final).all() and (diagram.phase == RANK_COLLAPSE).all()
    assert TrainabilityDiagram.from_grid(diagram.grid).phase[0, 0] == RANK_COLLAPSE


def test_min_residual_strength_of_no_beta_is_empty():
    assert alpha_star(Architecture(), [], 10).shape == (0,)
    assert final_state(Architecture(), [], 10)["rho"].shape == (0,)


# -- item 9: warnings are one plain line, and the spurious ones are gone ----------------------
def test_cli_shows_a_warning_as_one_plain_line(capsys, monkeypatch):
    original = remprop.theory.propagate

    def warning_propagate(*args, **kwargs):
        warnings.warn("something to know\nover two lines", UserWarning)
        return original(*args, **kwargs)

    monkeypatch.setattr(remprop.theory, "propagate", warning_propagate)
    code, out, err = run_cli(capsys, "propagate", "--depth", 2)
    assert code == 0 and "layer" in out
    assert err == "remprop propagate: warning: something to know over two lines\n"
    # the display is the command's only: outside it Python's own is back
    assert warnings.showwarning is warnings._showwarning_orig


def test_single_value_axes_draw_without_warnings(capsys, tmp_path):
    # matplotlib warned of identical axis limits (a warning turned into an error here: exit 1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        code, out, err = run_cli(capsys, "diagram", "--beta", 0.5, "--alpha", 1, "--depth", 3, "--out", tmp_path)
    assert code == 0 and err == ""


def test_a_diagram_without_finite_critical_betas_draws_without_warnings():
    run = RunSettings(Architecture(norm="pre"), [0.5, 1.0], 3)
    nan = np.full((2, 2), np.nan)
    diagram = TrainabilityDiagram.from_arrays(run, [0.5, 1.0], phase=np.full((2, 2), RANK_COLLAPSE, np.int8),
                                              rho_final=nan, beta_critical_cells=nan, beta_critical=nan[0],
                                              alpha_star=np.full(2, np.inf))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        diagram.figure()


def test_logit_softcap_extremes_give_an_answer_without_warnings(capsys):
    # 1e300 raised "unexpected OverflowError" (c**2); 1e-300 a divide-by-zero RuntimeWarning
    code, out, err = run_cli(capsys, "propagate", "--seq-len", 128, "--logit-softcap", "1e300", "--depth", 2)
    assert code == 0 and err == ""
    code, out, err = run_cli(capsys, "propagate", "--seq-len", 128, "--logit-softcap", "1e-300",
                             "--depth", 2)
    assert_one_line_error(code, err, "--logit-softcap", "too small")
    from remprop.theory.softcap import logit_softcap_max_beta

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for cap in (1e-300, 50.0, 1e300):
            limit = logit_softcap_max_beta(Architecture(seq_len=128, logit_softcap=cap))
            assert math.isfinite(limit) and limit > 0
