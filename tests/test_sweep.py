"""Measured trainability diagrams (remprop.validation.experiments.sweep, .cell_store, .distributed,
.measured_diagram): resumable per-cell files, bitwise-reproducible cells across
interruptions, processes and backends, the measured classification rule, the figure and
the ``remprop sweep`` command."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("torch")

from remprop.cli import main  # noqa: E402
from remprop.diagrams import ENTROPY_COLLAPSE, RANK_COLLAPSE, TRAINABLE  # noqa: E402
from remprop.theory import Architecture, beta_critical, layernorm_map  # noqa: E402
from remprop.validation.experiments.cell_store import CellStore, atomic_write_json  # noqa: E402
from remprop.validation.experiments.measured_diagram import MeasuredDiagram, measured_beta_critical  # noqa: E402
from remprop.validation.experiments.sweep import SweepSpec, cell_key, load_records, run_sweep  # noqa: E402

# A small grid whose cells take milliseconds: 3 x 3 cells, 6 blocks, d = T = 32.
SMALL = dict(betas=(0.5, 1.0, 2.0), alphas=(0.5, 1.0, 1.5), depth=6, seeds=2, sequences=1, width=32, seq_len=32)
# A grid slow enough (about 0.1 s a cell) for a subprocess to be killed in the middle of it.
KILLABLE = dict(betas=tuple(np.linspace(0.3, 2.4, 5)), alphas=tuple(np.linspace(0.6, 1.8, 5)), depth=30, seeds=2,
                sequences=1, width=64, seq_len=64)


def results(records):
    """The deterministic part of every record (timings and process ids left out)."""
    return {key: record["result"] for key, record in records.items()}


def file_identity(path):
    stat = path.stat()
    return stat.st_ino, stat.st_mtime_ns


@pytest.fixture(scope="module")
def small_reference(tmp_path_factory):
    spec = SweepSpec(**SMALL)
    out = tmp_path_factory.mktemp("small_reference")
    report = run_sweep(spec, out, workers=0)
    assert (report.backend, report.cells_computed, report.cells_reused) == ("serial", 9, 0)
    return spec, load_records(spec, out)


@pytest.fixture(scope="module")
def killable_reference(tmp_path_factory):
    spec = SweepSpec(**KILLABLE)
    out = tmp_path_factory.mktemp("killable_reference")
    run_sweep(spec, out, workers=0)
    return spec, load_records(spec, out)


# -- the cell store ---------------------------------------------------------------------------
def test_atomic_write_never_leaves_a_partial_file(tmp_path):
    target = tmp_path / "cell.json"
    atomic_write_json(target, {"x": 0.1 + 0.2})
    assert json.loads(target.read_text())["x"] == 0.1 + 0.2  # repr precision: bit for bit
    with pytest.raises(ValueError):  # NaN is not strict JSON: the write fails half way
        atomic_write_json(target, {"x": float("nan")})
    assert json.loads(target.read_text())["x"] == 0.1 + 0.2  # the old file is intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cell.json"]  # no temporary left


def test_store_pins_its_manifest_and_cleans_stale_temporaries(tmp_path):
    store = CellStore(tmp_path, {"depth": 3, "betas": [0.5]})
    store.write("a0000_b0000", {"v": 1})
    stale = store.cells_dir / ".stale-from-a-killed-run.tmp"  # no writer named: judged by its age
    stale.write_text("{")
    os.utime(stale, (time.time() - 2 * store.temp_timeout,) * 2)
    fresh = store.cells_dir / ".being-written-by-someone.tmp"
    fresh.write_text("{")
    again = CellStore(tmp_path, {"betas": [0.5], "depth": 3})  # same settings, other key order
    assert again.done() == {"a0000_b0000"}
    assert sorted(p.name for p in store.cells_dir.glob(".*.tmp")) == [fresh.name]
    with pytest.raises(ValueError, match=r"^out: .*different sweep \(depth: stored 3, asked 4\)"):
        CellStore(tmp_path, {"depth": 4, "betas": [0.5]})
    with pytest.raises(ValueError, match="^out: .* holds no sweep"):
        CellStore(tmp_path / "empty", {"depth": 3}, create=False)
    with pytest.raises(ValueError, match="^key"):
        store.path("../escape")


# -- spec checks ------------------------------------------------------------------------------
@pytest.mark.parametrize("change, name", [
    (dict(betas=(0.5, -1.0)), "betas"), (dict(betas=()), "betas"), (dict(alphas=(-0.1,)), "alphas"),
    (dict(depth=0), "depth"), (dict(seeds=0), "seeds"), (dict(seeds=(1, 1)), "seeds"), (dict(seeds=()), "seeds"),
    (dict(sequences=0), "sequences"), (dict(width=1), "width"), (dict(seq_len=1), "seq_len"),
    (dict(threshold=1.0), "threshold"), (dict(q0=0.0), "q0"), (dict(rho0=1.5), "rho0"),
    (dict(inputs="noise"), "inputs"), (dict(dtype="float16"), "dtype"), (dict(threads=0), "threads"),
    (dict(arch=Architecture(sigma_w2=np.array([0.1, 0.2]))), "arch.sigma_w2"), (dict(arch="bert"), "arch"),
])
def test_bad_spec_names_the_parameter(change, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        SweepSpec(**{**SMALL, **change})


def test_spec_round_trips_through_its_manifest():
    spec = SweepSpec(**SMALL, arch=Architecture(norm="pre", alpha_sa=3.0))
    assert spec.arch.alpha_sa == 1.0  # the grid's alphas replace it
    again = SweepSpec.from_manifest(json.loads(json.dumps(spec.manifest())))
    assert again.manifest() == spec.manifest() and again.shape == (3, 3) and again.samples == 2


# -- interruption and resumption ------------------------------------------------------------------
def test_sweep_stopped_after_k_cells_resumes_each_cell_exactly_once(tmp_path, small_reference):
    """Interrupt on a dask LocalCluster after 3 cells, resume in this process: every cell once,
    the 3 finished cells untouched, all numbers bitwise those of an uninterrupted run."""
    pytest.importorskip("distributed")
    spec, reference = small_reference
    written = []

    def stop_after_three(key, record):
        written.append(key)
        if len(written) == 3:
            raise KeyboardInterrupt("stopped by the test")

    with pytest.raises(KeyboardInterrupt):
        run_sweep(spec, tmp_path, workers=2, on_cell=stop_after_three)
    store_cells = tmp_path / "cells"
    first = {p.stem: file_identity(p) for p in store_cells.glob("*.json")}
    assert set(first) == set(written) and len(first) == 3

    resumed = []
    report = run_sweep(spec, tmp_path, workers=0, on_cell=lambda key, record: resumed.append(key))
    assert (report.cells_reused, report.cells_computed) == (3, 6)
    assert len(resumed) == len(set(resumed)) == 6 and set(resumed).isdisjoint(first)
    assert {p.stem: file_identity(p) for p in store_cells.glob("*.json") if p.stem in first} == first
    assert sorted(p.name for p in store_cells.iterdir()) == sorted(f"{k}.json" for k in reference)
    assert results(load_records(spec, tmp_path)) == results(reference)  # == on floats: bitwise
    # A third run finds everything on disk and starts nothing.
    report = run_sweep(spec, tmp_path, workers=2)
    assert (report.backend, report.cells_computed, report.cells_reused) == ("none", 0, 9)


def test_sweep_killed_with_sigkill_resumes_on_a_running_cluster(tmp_path, killable_reference):
    """`remprop sweep --workers 0` in a subprocess is SIGKILLed once some cells are on disk;
    the sweep resumes on a dask cluster given by its scheduler address, computes only the
    missing cells, and ends bitwise equal to an uninterrupted run in this process."""
    distributed = pytest.importorskip("distributed")
    spec, reference = killable_reference
    out = tmp_path / "sweep"
    betas = ",".join(repr(b) for b in spec.betas)
    alphas = ",".join(repr(a) for a in spec.alphas)
    argv = [sys.executable, "-m", "remprop", "sweep", "--beta", betas, "--alpha", alphas, "--depth", str(spec.depth),
            "--seeds", "2", "--sequences", "1", "--width", "64", "--seq-len", "64", "--workers", "0",
            "--out", str(out),
            "--no-progress"]
    process = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and process.poll() is None:
            if len(list(out.glob("cells/*.json"))) >= 3:
                break
            time.sleep(0.01)
        assert process.poll() is None, process.stderr.read().decode()
        os.killpg(process.pid, signal.SIGKILL)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        process.stderr.close()
    assert process.returncode == -signal.SIGKILL
    before = {p.stem: file_identity(p) for p in (out / "cells").glob("*.json")}
    total = len(spec.cells())
    assert 3 <= len(before) < total  # killed midway

    resumed = []
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as cluster:
        report = run_sweep(spec, out, scheduler=cluster.scheduler_address,
                           on_cell=lambda key, record: resumed.append(key))
    assert report.backend.startswith("dask") and report.workers == 2
    assert (report.cells_reused, report.cells_computed) == (len(before), total - len(before))
    assert sorted(resumed) == sorted(set(reference) - set(before))
    assert {k: v for k, v in ((p.stem, file_identity(p)) for p in (out / "cells").glob("*.json")) if k in before} \
        == before
    assert sorted(p.name for p in (out / "cells").iterdir()) == sorted(f"{k}.json" for k in reference)
    assert results(load_records(spec, out)) == results(reference)


def test_scheduler_that_does_not_answer_is_a_value_error_naming_it():
    pytest.importorskip("distributed")
    from remprop.validation.experiments.distributed import dask_client

    with pytest.raises(ValueError, match="^scheduler: cannot connect"):
        with dask_client(scheduler="tcp://127.0.0.1:9", timeout=1):
            pass


# -- the measured classification ----------------------------------------------------------------
def fake_records(spec, final_cosine, layer_q, layer_p):
    """Records with chosen numbers: final cosine per cell (alpha, beta), per-layer q and p."""
    records = {}
    for a, b in spec.cells():
        key = cell_key(a, b)
        records[key] = {"key": key, "alpha_index": a, "beta_index": b, "alpha": spec.alphas[a],
                        "beta": spec.betas[b],
                        "result": {"layer_q": list(layer_q), "layer_p": list(layer_p),
                                   "layer_cosine": [0.0] * (spec.depth + 1), "layer_y2": [0.0] * spec.depth,
                                   "final_cosine": [final_cosine[a][b]] * spec.samples}}
    return records


def test_measured_phase_follows_the_theory_rule():
    """beta_c from the measured input (q, p) of the first layer decides entropy collapse;
    the final cosine against the threshold decides rank collapse; both -> entropy."""
    spec = SweepSpec(betas=(0.5, 1.2, 3.0), alphas=(0.5, 2.0), depth=3, seeds=1, sequences=2, threshold=0.9)
    q, p = [1.5, 1.0, 1.0, 1.0], [0.3, 0.9, 0.95, 0.99]  # input state: beta_c = sqrt(2 / (1.5 * 1.2)) = 1.054
    finals = [[0.95, 0.5, 0.95], [0.5, "nan", 0.2]]
    diagram = MeasuredDiagram.from_records(spec, fake_records(spec, finals, q, p), theory="asymptotic")
    beta_c = float(beta_critical(1.5, 0.3))
    assert np.allclose(diagram.beta_critical_cells, beta_c)
    assert diagram.phase.tolist() == [[RANK_COLLAPSE, ENTROPY_COLLAPSE, ENTROPY_COLLAPSE],
                                      [TRAINABLE, ENTROPY_COLLAPSE, ENTROPY_COLLAPSE]]
    # The prediction starts from the measured input state and uses the same rule.
    assert diagram.input_q == 1.5 and diagram.input_rho == pytest.approx(0.2)
    assert np.allclose(diagram.predicted.beta_critical_cells, beta_c)
    assert diagram.agreement == np.mean(diagram.phase == diagram.predicted.phase)


def test_pre_ln_uses_the_smallest_beta_c_over_layers_after_layernorm():
    q = np.array([[2.0, 4.0, 9.0, 16.0]])
    p = np.array([[0.2, 2.0, 3.0, 15.0]])
    expected = np.min(beta_critical(*layernorm_map(q[:, :-1], p[:, :-1])), axis=-1)
    assert np.allclose(measured_beta_critical(Architecture(norm="pre"), q, p), expected)
    assert np.allclose(measured_beta_critical(Architecture(norm="none"), q, p),
                       np.min(beta_critical(q[:, :-1], p[:, :-1]), axis=-1))
    assert np.allclose(measured_beta_critical(Architecture(norm="post"), q, p), beta_critical(2.0, 0.2))
    # four heads under qk_scaling="head" run at 4 beta: the model-level beta_c is a quarter
    assert np.allclose(measured_beta_critical(Architecture(norm="pre", heads=4, qk_scaling="head"), q, p),
                       expected / 4)


def test_measured_diagram_of_a_real_sweep(tmp_path, small_reference):
    spec, records = small_reference
    diagram = MeasuredDiagram.from_records(spec, records)
    # Synthetic inputs have exactly q = 1, p = 0: the measured beta_c is sqrt(2) in every cell.
    assert np.allclose(diagram.beta_critical_cells, np.sqrt(2.0), rtol=1e-6)
    assert (diagram.phase[:, np.asarray(spec.betas) > np.sqrt(2)] == ENTROPY_COLLAPSE).all()
    paths = diagram.save(tmp_path / "measured")
    assert sorted(p.suffix for p in paths) == [".json", ".npz", ".png"]
    summary = json.loads((tmp_path / "measured.json").read_text())
    assert summary["values"]["agreement"] == diagram.agreement and summary["values"]["cells"] == 9
    assert summary["kind"] == "measured" and summary["arrays"]["phase"] == diagram.phase.tolist()
    assert summary["predicted"]["arrays"]["phase"] == diagram.predicted.phase.tolist()
    figure = diagram.figure(fine_points=40)
    assert f"{int(diagram.agrees.sum())}/9 cells ({100 * diagram.agreement:.1f}%)" in figure.get_suptitle()
    with pytest.raises(ValueError, match="^records: 1 of 9 cells are missing"):
        MeasuredDiagram.from_records(spec, {k: v for k, v in list(records.items())[1:]})


def test_measured_diagram_reads_back_from_its_files(tmp_path, small_reference):
    """The measured diagram is a grid result: its npz reads back into the same diagram, prediction included."""
    from remprop.diagrams import TrainabilityDiagram

    spec, records = small_reference
    diagram = MeasuredDiagram.from_records(spec, records)
    diagram.save(tmp_path / "measured", figure=False)
    back = MeasuredDiagram.load(tmp_path / "measured.npz")
    assert back.spec.manifest() == spec.manifest() and back.theory == diagram.theory
    for name in ("phase", "cosine_final", "cosine_final_std", "beta_critical_cells", "layer_cosine", "layer_y2"):
        np.testing.assert_array_equal(getattr(back, name), getattr(diagram, name))
    np.testing.assert_array_equal(back.predicted.alpha_star, diagram.predicted.alpha_star)
    assert back.predicted.arch.to_dict() == diagram.predicted.arch.to_dict()
    assert (back.agreement, back.input_q, back.devices) == (diagram.agreement, diagram.input_q, diagram.devices)
    assert back.confusion() == diagram.confusion()
    # a theory diagram is not a measured one, and the other way round
    with pytest.raises(ValueError, match="holds a measured grid, not a theory one"):
        TrainabilityDiagram.load(tmp_path / "measured")
    # the format before the grid result had no reader: the error names the file and the command
    old = tmp_path / "old.npz"
    np.savez(old, measured_phase=diagram.phase, sweep_json=np.array("{}"), theory=np.array("finite-T"))
    with pytest.raises(ValueError, match=f"^path: {old} .*remprop sweep --out FOLDER") as info:
        MeasuredDiagram.load(old)
    assert "\n" not in str(info.value)


# -- the command ---------------------------------------------------------------------------------
def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


SMALL_ARGS = ["--beta", "0.5,1,2", "--alpha", "0.5,1,1.5", "--depth", "6", "--seeds", "2", "--sequences", "1",
              "--width", "32", "--seq-len", "32", "--workers", "0", "--no-progress"]


def test_sweep_command_writes_the_diagram_and_resumes(capsys, tmp_path, small_reference):
    spec, reference = small_reference
    code, out, err = run_cli(capsys, "sweep", *SMALL_ARGS, "--out", tmp_path, "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["cells_computed"] == 9 and summary["cells_reused"] == 0 and summary["backend"] == "serial"
    assert summary["cells"] == 9 and 0 <= summary["cells_agreeing"] <= 9
    assert all(os.path.exists(f) for f in summary["files"])
    assert results(load_records(spec, tmp_path)) == results(reference)  # CLI and library: same cells
    code, out, err = run_cli(capsys, "sweep", *SMALL_ARGS, "--out", tmp_path)
    assert code == 0, err
    assert "0 computed, 9 already on disk" in out and "cells agree" in out


@pytest.mark.parametrize("extra, option", [
    (["--workers", "-1"], "--workers"), (["--seeds", "0"], "--seeds"), (["--width", "1"], "--width"),
    (["--beta", "0,1"], "--beta"), (["--device", "tpu"], "--device"), (["--theory", "exact"], "--theory"),
])
def test_sweep_command_bad_input_is_one_line(capsys, tmp_path, extra, option):
    code, out, err = run_cli(capsys, "sweep", *SMALL_ARGS, "--out", tmp_path, *extra)
    assert code == 2 and len(err.strip().splitlines()) == 1 and option in err and "Traceback" not in err


def test_sweep_command_refuses_a_folder_of_another_sweep(capsys, tmp_path):
    code, _, err = run_cli(capsys, "sweep", *SMALL_ARGS, "--out", tmp_path)
    assert code == 0, err
    code, _, err = run_cli(capsys, "sweep", *SMALL_ARGS, "--depth", "7", "--out", tmp_path)
    assert code == 2 and "different sweep (depth: stored 6, asked 7)" in err and "--out" in err


def test_without_dask_the_sweep_runs_in_this_process(tmp_path, monkeypatch, small_reference):
    import remprop.validation.experiments.distributed as distributed

    spec, reference = small_reference
    monkeypatch.setattr(distributed, "dask_installed", lambda: False)
    report = run_sweep(spec, tmp_path, workers=2)
    assert report.backend == "serial (dask.distributed is not installed)" and report.cells_computed == 9
    assert results(load_records(spec, tmp_path)) == results(reference)
    with pytest.raises(ValueError, match="^scheduler: dask.distributed is not installed"):
        run_sweep(SweepSpec(**{**SMALL, "depth": 7}), tmp_path / "other", scheduler="tcp://127.0.0.1:9")
