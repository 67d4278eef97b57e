"""The trained diagram: a (beta, alpha_SA) grid of training runs, classified and set against the theory.

Most tests inject a fake ``train`` (a deterministic function of beta and alpha_sa that
mimics the three phases in milliseconds), so that the grid, the classification rule, the
agreement and the cell store's guarantees (resume, concurrent runs, damaged records) are
checked exactly; one test trains a tiny real grid through the command line.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from remprop.cli import main  # noqa: E402
from remprop.diagrams import ENTROPY_COLLAPSE, RANK_COLLAPSE, TRAINABLE, trainability_diagram  # noqa: E402
from remprop.diagrams.learning_rate import LR_ABOVE_CEILING, LR_BELOW_FLOOR  # noqa: E402
from remprop.theory import Architecture, learning_rate_ceiling  # noqa: E402
from remprop.validation.experiments.cell_store import DamagedRecordWarning  # noqa: E402
from remprop.validation.training.config import TrainConfig  # noqa: E402
from remprop.validation.training.trained_diagram import (DIVERGED, TRAINED_FRACTION, UNTRAINED,  # noqa: E402
                                                         TrainedDiagram, classify_trained, predicted_diagram,
                                                         trained_fraction)
from remprop.validation.training.trained_grid import (TrainedGridSpec, load_trained_records,  # noqa: E402
                                                      run_trained_grid, train_cell)

HERE = Path(__file__).resolve().parent
#: Fake losses: the unigram baseline, and what a trainable cell reaches.
UNIGRAM, TRAINED = 6.0, 4.0
#: The fake's beta_c: sqrt(2 / (q (q - p))) at the post-LN input q = 1, p = 0.
FAKE_BETA_C = np.sqrt(2.0)
#: The fake's alpha below which the stack is rank-collapsed.
FAKE_ALPHA_STAR = 0.5
CALLS = []  # (alpha, beta, seed) of every fake training run in this process


from fake_runs import FakeResult  # noqa: E402


def fake_train(config):
    """A training run in a millisecond: entropy collapse above FAKE_BETA_C, rank collapse below
    FAKE_ALPHA_STAR, else trained; the seed moves the loss by at most 0.01."""
    alpha, beta, depth, log_t = config.arch.alpha_sa, config.beta, config.depth, np.log(config.seq_len)
    CALLS.append((alpha, beta, config.seed))
    log = os.environ.get("FAKE_TRAIN_LOG")
    if log:  # concurrent runs: each training run appends one line (O_APPEND writes do not interleave)
        with open(log, "a", encoding="utf-8") as handle:
            handle.write(f"{alpha} {beta} {config.seed} {os.getpid()}\n")
        time.sleep(0.05)
    entropy = np.full(depth, 0.9 * log_t)
    cosine = np.linspace(0.0, 0.3, depth + 1)
    if beta > FAKE_BETA_C:
        entropy[0], final = 0.1 * log_t, UNIGRAM
    elif alpha < FAKE_ALPHA_STAR:
        cosine[1:], final = 0.9995, UNIGRAM - 0.2
    else:
        final = TRAINED
    final += 0.01 * config.seed / 7
    steps = np.arange(0, config.steps + 1, config.eval_every)
    curve = np.linspace(UNIGRAM + 1.0, final, steps.size)
    state = {"qk_grad_norm": np.ones(depth).tolist(), "attention_entropy": entropy.tolist(),
             "token_cosine": cosine.tolist()}
    return FakeResult({"eval_steps": steps.tolist(), "train_loss": curve.tolist(), "test_loss": curve.tolist(),
                       "final_test_loss": final, "unigram_loss": UNIGRAM, "init": state, "final": state})


def small_spec(**changes):
    config = TrainConfig(arch=Architecture(norm="post"), depth=3, width=16, seq_len=16, steps=20, eval_every=10)
    settings = dict(betas=(0.5, 1.0, 3.0), alphas=(0.2, 1.0), seeds=2)
    settings.update(changes)
    return TrainedGridSpec(config, **settings)


def test_classification_rule_and_its_edges():
    # f = (U - L) / (U - R): the best cell is 1, the unigram loss 0, a diverged run (nan) 0
    f = trained_fraction([4.0, 5.0, 5.2, 6.0, np.nan], 6.0)
    np.testing.assert_allclose(f, [1.0, 0.5, 0.4, 0.0, 0.0])
    # nothing beat the unigram loss: no cell is trainable
    np.testing.assert_array_equal(trained_fraction([6.5, 7.0], 6.0), [0.0, 0.0])
    log_t = np.log(64)
    # the rule's edge is TRAINED_FRACTION itself (3/4, fixed from a pilot before any grid ran)
    edge = TRAINED_FRACTION
    phase = classify_trained(fraction=[edge, np.nextafter(edge, 0.0), 0.2, 0.2, 0.0, 0.9],
                             init_entropy_min=[0.1, 0.49 * log_t, 0.51 * log_t, 0.1, 3.0, 0.1],
                             init_cosine_final=[1.0, 0.2, 0.999, 0.999, 0.5, 1.0], seq_len=64, threshold=0.99)
    # trainable wins over any init signature; entropy over rank collapse; neither -> untrained
    assert phase.tolist() == [TRAINABLE, ENTROPY_COLLAPSE, RANK_COLLAPSE, ENTROPY_COLLAPSE, UNTRAINED, TRAINABLE]


def test_spec_checks_and_round_trips_through_its_manifest():
    spec = small_spec()
    assert spec.shape == (2, 3) and spec.seeds == (0, 1) and spec.config.arch.alpha_sa == 1.0
    again = TrainedGridSpec.from_manifest(json.loads(json.dumps(spec.manifest())), device="cpu")
    assert again.manifest() == spec.manifest()
    config = spec.run_config(0, 2, seed=5)
    assert (config.beta, config.arch.alpha_sa, config.seed) == (3.0, 0.2, 5)
    with pytest.raises(ValueError, match="^betas"):
        small_spec(betas=(0.5, -1.0))
    with pytest.raises(ValueError, match="^alphas"):
        small_spec(alphas=(-0.1,))
    with pytest.raises(ValueError, match="^threshold"):
        small_spec(threshold=1.0)


def test_grid_classification_and_agreement_with_the_theory(tmp_path):
    spec = small_spec()
    CALLS.clear()
    report = run_trained_grid(spec, tmp_path, train=fake_train, workers=0)
    assert (report.cells_computed, report.cells_reused) == (6, 0)
    assert len(CALLS) == 6 * 2  # every cell, every seed, once
    diagram = TrainedDiagram.from_folder(tmp_path)
    # the fake's phases: rank collapse on the alpha = 0.2 row below beta_c, entropy collapse at beta 3
    expected = np.array([[RANK_COLLAPSE, RANK_COLLAPSE, ENTROPY_COLLAPSE], [TRAINABLE, TRAINABLE, ENTROPY_COLLAPSE]])
    np.testing.assert_array_equal(diagram.phase, expected)
    np.testing.assert_allclose(diagram.reference_loss, TRAINED + 0.01 / 14)  # mean over seeds 0 and 1
    assert diagram.unigram_loss == UNIGRAM
    np.testing.assert_allclose(diagram.final_test_loss_std[1, 0], np.std([0.0, 0.01 / 7], ddof=1))
    # the theory on the same grid, architecture, depth and (finite-T) sequence length
    theory = trainability_diagram(spec.config.arch.replace(seq_len=16), np.array(spec.betas), np.array(spec.alphas),
                                  3, spec.threshold)
    np.testing.assert_array_equal(diagram.predicted.phase, theory.phase)
    assert diagram.agreement == pytest.approx(np.mean(diagram.phase == theory.phase))
    assert diagram.agreement_trainable == pytest.approx(np.mean((diagram.phase == 0) == (theory.phase == 0)))
    summary = diagram.to_dict()
    json.dumps(summary, allow_nan=False)
    assert summary["values"]["confusion"]["entropy-collapse"]["entropy-collapse"] == \
        int(np.sum((theory.phase == ENTROPY_COLLAPSE) & (expected == ENTROPY_COLLAPSE)))


@pytest.mark.parametrize("lr", [1e-3, 0.25, 0.35])
def test_agreement_at_the_grids_learning_rate(tmp_path, lr):
    """The theory's phases at the grid's rate: cells trainable at init whose window (floor,
    ceiling of learning_rate_ceiling at the grid's width and steps) excludes lr are relabelled.
    At the fake's sizes (depth 3, d 16, 20 steps) the alpha 1 row's window is about 0.18-0.39
    (beta 0.5) and 0.18-0.31 (beta 1): 1e-3 is below both floors, 0.25 inside both, 0.35 above
    the second ceiling only."""
    spec = TrainedGridSpec(
        TrainConfig(arch=Architecture(norm="post"), depth=3, width=16, seq_len=16, steps=20, eval_every=10, lr=lr),
        betas=(0.5, 1.0, 3.0), alphas=(0.2, 1.0), seeds=1)
    run_trained_grid(spec, tmp_path / "grid", train=fake_train, workers=0)
    diagram = TrainedDiagram.from_folder(tmp_path / "grid")
    # the window computed here through the theory's own function, cell by cell
    expected = diagram.predicted.phase.copy()
    for a, alpha in enumerate(spec.alphas):
        for b, beta in enumerate(spec.betas):
            window = learning_rate_ceiling(spec.config.arch.replace(alpha_sa=alpha, seq_len=16), beta, depth=3,
                                           width=16, steps=20, q0=1.0, rho0=diagram.input_rho)
            if expected[a, b] == TRAINABLE and float(window.ceiling) < lr:
                expected[a, b] = LR_ABOVE_CEILING
            elif expected[a, b] == TRAINABLE and float(window.floor) > lr:
                expected[a, b] = LR_BELOW_FLOOR
    np.testing.assert_array_equal(diagram.predicted_at_rate(), expected)
    relabelled = {1e-3: [LR_BELOW_FLOOR, LR_BELOW_FLOOR], 0.25: [TRAINABLE, TRAINABLE],
                  0.35: [TRAINABLE, LR_ABOVE_CEILING]}[lr]
    assert expected[1, :2].tolist() == relabelled
    # the fake trains the alpha 1 row below beta_c: a relabelled cell there disagrees
    outside = np.isin(expected, (LR_ABOVE_CEILING, LR_BELOW_FLOOR))
    agreement = np.mean(np.where(outside, False, diagram.phase == expected))
    assert diagram.agreement_at_rate == pytest.approx(agreement)
    assert diagram.agreement_trainable_at_rate == pytest.approx(np.mean((diagram.phase == 0) == (expected == 0)))
    assert f"learning-rate window at lr {lr:g}" in diagram.summary()
    # written and read back; a file without the values (older) computes them again
    diagram.save(tmp_path / "trained", figure=False)
    back = TrainedDiagram.load(tmp_path / "trained")
    assert back.agreement_at_rate == diagram.agreement_at_rate
    back.grid.values.pop("agreement_at_rate")
    assert back.agreement_at_rate == pytest.approx(agreement)


def test_grid_stopped_after_k_cells_resumes_each_cell_once(tmp_path):
    spec = small_spec(seeds=1)
    CALLS.clear()

    def stop_after_two(key, record):
        if len(CALLS) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_trained_grid(spec, tmp_path, train=fake_train, workers=0, on_cell=stop_after_two)
    assert len(load_trained_records(spec, tmp_path, require_all=False)) == 2
    report = run_trained_grid(spec, tmp_path, train=fake_train, workers=0)
    assert (report.cells_computed, report.cells_reused) == (4, 2)
    assert sorted(CALLS) == sorted((a, b, 0) for a in spec.alphas for b in spec.betas)  # each cell once
    # a record is bitwise what a single uninterrupted run writes (apart from its timing)
    again = train_cell(spec, 0, 0, train=fake_train)
    stored = load_trained_records(spec, tmp_path)["a0000_b0000"]
    assert {k: v for k, v in stored.items() if k != "run"} == {k: v for k, v in again.items() if k != "run"}


def test_damaged_record_is_recomputed_and_another_grid_is_refused(tmp_path):
    spec = small_spec(seeds=1)
    run_trained_grid(spec, tmp_path, train=fake_train, workers=0)
    path = tmp_path / "cells" / "a0001_b0002.json"
    record = json.loads(path.read_text())
    record["results"][0]["final_test_loss"] = 0.0  # an edited number: the checksum fails
    path.write_text(json.dumps(record))
    with pytest.raises(ValueError, match="a0001_b0002.json is damaged"):
        TrainedDiagram.from_folder(tmp_path)
    CALLS.clear()
    with pytest.warns(DamagedRecordWarning, match="a0001_b0002"):
        report = run_trained_grid(spec, tmp_path, train=fake_train, workers=0)
    assert report.cells_computed == 1 and CALLS == [(1.0, 3.0, 0)]
    assert TrainedDiagram.from_folder(tmp_path).phase[1, 2] == ENTROPY_COLLAPSE
    with pytest.raises(ValueError, match="holds a different sweep"):
        run_trained_grid(small_spec(seeds=2), tmp_path, train=fake_train, workers=0)


def _child(out):
    """One of two concurrent runs on one folder (started by the test below).

    Both wait at a start line (a file each, then both files seen) so that a slow start of
    one process on a loaded machine cannot leave the whole grid to the other."""
    ready = Path(out).parent / "ready"
    ready.mkdir(exist_ok=True)
    (ready / str(os.getpid())).touch()
    deadline = time.monotonic() + 60
    while len(list(ready.iterdir())) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    run_trained_grid(small_spec(seeds=1), out, train=fake_train, workers=0, poll_s=0.02)


def test_two_concurrent_runs_train_each_cell_once(tmp_path):
    log = tmp_path / "calls.log"
    code = (f"import sys; sys.path.insert(0, {str(HERE)!r}); import test_trained_diagram as t; "
            f"t._child({str(tmp_path / 'grid')!r})")
    env = {**os.environ, "FAKE_TRAIN_LOG": str(log)}
    runs = [subprocess.Popen([sys.executable, "-c", code], env=env, stderr=subprocess.PIPE) for _ in range(2)]
    for run in runs:
        _, err = run.communicate(timeout=120)
        assert run.returncode == 0, err.decode()[-2000:]
    lines = [line.split() for line in log.read_text().splitlines()]
    cells = sorted((float(a), float(b)) for a, b, _, _ in lines)
    spec = small_spec(seeds=1)
    assert cells == sorted((a, b) for a in spec.alphas for b in spec.betas)  # each cell exactly once
    assert len({pid for *_, pid in lines}) == 2  # both runs took part
    assert TrainedDiagram.from_folder(tmp_path / "grid").phase.shape == (2, 3)


def test_cells_run_on_a_dask_cluster(tmp_path, monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("FAKE_TRAIN_LOG", str(tmp_path / "calls.log"))  # the workers' calls, seen from here
    spec = small_spec(seeds=1)
    report = run_trained_grid(spec, tmp_path / "grid", train=fake_train, workers=2)
    assert report.backend.startswith("dask") and report.cells_computed == 6
    lines = (tmp_path / "calls.log").read_text().splitlines()
    assert len(lines) == 6 and os.getpid() not in {int(line.split()[-1]) for line in lines}  # all on workers
    serial = small_spec(seeds=1)
    run_trained_grid(serial, tmp_path / "serial", train=fake_train, workers=0)
    np.testing.assert_array_equal(TrainedDiagram.from_folder(tmp_path / "grid").phase,
                                  TrainedDiagram.from_folder(tmp_path / "serial").phase)


def test_figure_renders_with_agreement_in_the_title(tmp_path):
    spec = small_spec(seeds=1)
    run_trained_grid(spec, tmp_path, train=fake_train, workers=0)
    diagram = TrainedDiagram.from_folder(tmp_path)
    fig = diagram.figure(fine_points=40)
    assert f"({100 * diagram.agreement:.0f}%)" in fig._suptitle.get_text()
    npz, json_path, png = diagram.save(tmp_path / "out" / "trained")
    assert png.stat().st_size > 10_000 and json.loads(json_path.read_text())["values"]["cells"] == 6


def test_trained_diagram_reads_back_from_its_files(tmp_path):
    spec = small_spec(seeds=1)
    run_trained_grid(spec, tmp_path / "grid", train=fake_train, workers=0)
    diagram = TrainedDiagram.from_folder(tmp_path / "grid")
    diagram.save(tmp_path / "trained", figure=False)
    back = TrainedDiagram.load(tmp_path / "trained")
    assert back.spec.manifest() == spec.manifest() and back.theory == diagram.theory
    for name in ("phase", "final_test_loss", "fraction", "init_entropy_min", "eval_steps", "test_loss"):
        np.testing.assert_array_equal(getattr(back, name), getattr(diagram, name))
    np.testing.assert_array_equal(back.predicted.phase, diagram.predicted.phase)
    assert (back.unigram_loss, back.reference_loss, back.agreement_trainable) == \
        (diagram.unigram_loss, diagram.reference_loss, diagram.agreement_trainable)
    assert back.grid.labels[UNTRAINED] == "untrained"
    # the format before the grid result was JSON only: the error names the file and the command
    old = tmp_path / "old.json"
    old.write_text(json.dumps({"format": "remprop.trained_diagram/1", "cells": 6}))
    with pytest.raises(ValueError, match=f"^path: {old} .*remprop trained-diagram --out FOLDER"):
        TrainedDiagram.load(tmp_path / "old")


#: The trained diagrams of docs/training.md stored with their arrays (``TrainedDiagram.save``).
STORED = sorted((HERE.parent / "docs" / "data").glob("trained-diagram-*.npz"))


@pytest.mark.parametrize("path", STORED, ids=[path.stem for path in STORED])
def test_stored_diagrams_follow_from_their_own_numbers(path):
    """A diagram docs/training.md reports still loads, and what it records follows from its numbers
    under today's code: f from the losses, the trained labels from the rule, the theory's phases
    from the grid's settings, and both agreements (at init, at the grid's rate) from the labels. A
    change to the rule, the theory or the window that would alter a reported number fails here."""
    diagram = TrainedDiagram.load(path.with_suffix(""))
    spec, config = diagram.spec, diagram.spec.config
    np.testing.assert_allclose(diagram.fraction, trained_fraction(diagram.final_test_loss, diagram.unigram_loss),
                               rtol=1e-12)
    np.testing.assert_array_equal(diagram.phase, classify_trained(
        diagram.fraction, diagram.init_entropy_min, diagram.init_cosine_final, config.seq_len, spec.threshold,
        ~np.isfinite(diagram.final_test_loss)))
    theory = predicted_diagram(config, spec.betas, spec.alphas, diagram.theory, spec.threshold, diagram.input_rho)
    np.testing.assert_array_equal(theory.phase, diagram.predicted.phase)
    assert diagram.agreement == pytest.approx(np.mean(diagram.phase == theory.phase), abs=1e-12)
    at_rate = diagram.predicted_at_rate()
    outside = (at_rate == LR_ABOVE_CEILING) | (at_rate == LR_BELOW_FLOOR)
    agrees = np.where(outside, (diagram.phase == UNTRAINED) | (diagram.phase == DIVERGED), diagram.phase == at_rate)
    assert diagram.agreement_at_rate == pytest.approx(agrees.mean(), abs=1e-12)


@pytest.mark.parametrize("argv, option", [
    (["--steps", "0"], "--steps"), (["--beta", "1,-2"], "--beta"), (["--threshold", "1.5"], "--threshold"),
    (["--width", "15", "--heads", "2"], "--width"), (["--device", "tpu"], "--device"),
    (["--alpha", "-1"], "--alpha"), (["--depth", "0"], "--depth"), (["--batch-cells", "0"], "--batch-cells"),
])
def test_command_bad_input_is_one_line_naming_the_option(capsys, tmp_path, argv, option):
    assert main(["trained-diagram", "--out", str(tmp_path), "--workers", "0", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and option in err, err


def test_tiny_real_grid_through_the_command(capsys, tmp_path):
    training = pytest.importorskip("remprop.validation.training")
    if not hasattr(training, "train"):
        pytest.skip("the training core (remprop.validation.training.train) is not there yet")
    argv = ["trained-diagram", "--beta", "0.5,8", "--alpha", "0.2,1", "--depth", "2", "--width", "16",
            "--seq-len", "16", "--steps", "4", "--batch-size", "4", "--eval-every", "2", "--workers", "0",
            "--device", "cpu", "--batch-cells", "2", "--out", str(tmp_path), "--json"]
    assert main(argv) == 0, capsys.readouterr().err
    summary = json.loads(capsys.readouterr().out)
    assert summary["cells"] == 4 and summary["cells_computed"] == 4
    assert (tmp_path / "trained_diagram.png").stat().st_size > 10_000
    assert main(argv) == 0  # a rerun resumes: nothing left to train
    assert json.loads(capsys.readouterr().out)["cells_computed"] == 0
