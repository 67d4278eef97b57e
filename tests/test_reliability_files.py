"""Reliability of the files remprop writes and reads (issue 15, items 3 and 4).

* Concurrent sweeps on one folder: four ``remprop sweep`` processes started together all
  finish, every cell is computed exactly once, and the records are those of one
  sequential run (remprop.validation.experiments.cell_store claims and private temporary names).
* Only provably stale files are reaped: a temporary file or claim of a dead process, or
  one older than the stated age; a live writer's files stay.
* Damaged cell records (truncated, garbage, another cell's record, a wrong checksum) are
  named in one ``ValueError`` when a complete set is asked for, and computed again by the
  next run.
* A damaged saved trainability diagram is one ``ValueError`` naming the file.
* Issue 46, item 5: ``check --simulate`` reused a tampered per-seed record (a NaN in ``rho``,
  an edited ``q``: ``max nan``, exit 0) -> records carry a checksum and are checked on load; a
  damaged one is moved aside with one warning and the seed measured again. Item 8: an unwritable
  ``REMPROP_CACHE_DIR`` (a file) -> ``precompile --background`` one line naming its log; the
  tokenizer cache only warns.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")

from remprop.diagrams import TrainabilityDiagram, trainability_diagram  # noqa: E402
from remprop.theory import Architecture  # noqa: E402
from remprop.validation.experiments.cell_store import CellStore, DamagedRecordWarning, _temporary_name  # noqa: E402
from remprop.validation.experiments.measured_diagram import MeasuredDiagram  # noqa: E402
from remprop.validation.experiments.sweep import SweepSpec, cell_key, load_records, run_sweep  # noqa: E402

# 4 cells of a few milliseconds (the sizes of the reproduction).
TINY = dict(betas=(0.5, 1.0), alphas=(1.0, 1.5), depth=2, seeds=1, sequences=1, width=16, seq_len=16)


def results(records):
    """The deterministic part of every record (timings and process ids left out)."""
    return {key: record["result"] for key, record in records.items()}


def remprop_command():
    """The remprop CLI of the interpreter running the tests (its venv's script)."""
    script = Path(sys.executable).with_name("remprop")
    return [str(script)] if script.exists() else [sys.executable, "-m", "remprop"]


def sweep_argv(spec, out):
    join = lambda values: ",".join(repr(v) for v in values)  # noqa: E731
    return [*remprop_command(), "sweep", "--beta", join(spec.betas), "--alpha", join(spec.alphas),
            "--depth", str(spec.depth), "--seeds", str(len(spec.seeds)), "--sequences", str(spec.sequences),
            "--width", str(spec.width), "--seq-len", str(spec.seq_len), "--workers", "0", "--no-progress",
            "--json", "--out", str(out)]


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    """One sequential run of the TINY sweep: (spec, folder, records)."""
    spec = SweepSpec(**TINY)
    out = tmp_path_factory.mktemp("tiny_sweep")
    run_sweep(spec, out, workers=0)
    return spec, out, load_records(spec, out)


# -- (a) concurrent sweeps ----------------------------------------------------------------------
def test_four_concurrent_sweep_commands_on_one_folder_compute_each_cell_once(tmp_path, tiny_sweep):
    """The issue's reproduction: opening the store used to delete the others' temporary files."""
    spec, _, reference = tiny_sweep
    out = tmp_path / "shared"
    processes = []
    try:
        for _ in range(4):
            processes.append(subprocess.Popen(sweep_argv(spec, out), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True))
            time.sleep(0.3)
        outputs = [process.communicate(timeout=180) for process in processes]
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()
    for process, (stdout, stderr) in zip(processes, outputs):
        assert process.returncode == 0, stderr
    summaries = [json.loads(stdout) for stdout, _ in outputs]
    total = len(spec.cells())
    assert all(s["cells_computed"] + s["cells_reused"] == total for s in summaries)
    assert sum(s["cells_computed"] for s in summaries) == total  # each cell computed exactly once
    records = load_records(spec, out)
    assert {record["run"]["pid"] for record in records.values()} <= {p.pid for p in processes}
    assert sorted(p.name for p in (out / "cells").iterdir()) == sorted(f"{key}.json" for key in records)
    assert results(records) == results(reference)  # == on floats: bitwise


def test_two_runs_at_once_share_the_cells(tmp_path, tiny_sweep):
    """Two runs started together (threads: each its own store, so each other's live claims)
    split the grid: every cell computed once, the waiting run returns only when all are on disk."""
    spec, _, reference = tiny_sweep
    start = threading.Barrier(2)
    computed, reports, errors = [[], []], [None, None], []

    def run(which):
        try:
            start.wait()
            # after each cell, pause: the other run claims the next cell meanwhile
            reports[which] = run_sweep(spec, tmp_path, workers=0,
                                       on_cell=lambda key, record: (computed[which].append(key), time.sleep(0.2)))
        except BaseException as err:  # noqa: BLE001 - reported below
            errors.append(err)

    import torch

    threads_before = torch.get_num_threads()
    torch.set_num_threads(spec.threads)  # the runs' own setting: neither changes it under the other
    try:
        threads = [threading.Thread(target=run, args=(which,)) for which in (0, 1)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
    finally:
        torch.set_num_threads(threads_before)
    assert not errors, errors
    assert sorted(computed[0] + computed[1]) == sorted(reference)  # each cell once, none lost
    assert computed[0] and computed[1]  # both worked: 4 cells x 0.2 s pauses leave the other run time
    assert [r.cells_computed for r in reports] == [len(c) for c in computed]
    assert all(r.cells_computed + r.cells_reused == len(reference) for r in reports)
    assert not list((tmp_path / "cells").glob("*.claim"))
    assert results(load_records(spec, tmp_path)) == results(reference)


# -- (b) stale files ----------------------------------------------------------------------------
MANIFEST = {"sweep": "files test"}
DEAD_WRITER = """
import sys
from remprop.validation.experiments.cell_store import CellStore, _temporary_name
store = CellStore(sys.argv[1], {"sweep": "files test"})
assert store.claim("a0000_b0000")
_temporary_name(store.path("a0000_b0000")).write_text("{")  # killed in the middle of a write
"""


def test_only_provably_stale_temporaries_and_claims_are_reaped(tmp_path):
    live = CellStore(tmp_path, MANIFEST)
    assert live.claim("a0000_b0001")
    live_temporary = _temporary_name(live.path("a0000_b0001"))
    live_temporary.write_text("{")
    # another run opens the store (and leaves the live files alone), claims a cell, starts a write and dies
    subprocess.run([sys.executable, "-c", DEAD_WRITER, str(tmp_path)], check=True)
    elsewhere = {"pid": 1, "host": "another-host", "token": "ab"}
    (tmp_path / "cells" / "a0001_b0000.claim").write_text(json.dumps({**elsewhere, "started": time.time() - 120}))
    (tmp_path / "cells" / "a0001_b0001.claim").write_text(json.dumps({**elsewhere, "started": time.time()}))
    foreign_old = tmp_path / "cells" / ".a0001_b0000.json~another-host~1~ab.tmp"
    foreign_new = tmp_path / "cells" / ".a0001_b0001.json~another-host~1~ab.tmp"
    for path in (foreign_old, foreign_new):
        path.write_text("{")
    os.utime(foreign_old, (time.time() - 120,) * 2)
    names = lambda pattern: sorted(p.name for p in (tmp_path / "cells").glob(pattern))  # noqa: E731
    assert len(names(".*.tmp")) == 4 and len(names("*.claim")) == 4

    store = CellStore(tmp_path, MANIFEST, temp_timeout=60, claim_timeout=60)  # opening reaps
    # the dead pid's claim and temporary file, and another host's files older than 60 s, are gone
    assert names(".*.tmp") == sorted([live_temporary.name, foreign_new.name])
    assert names("*.claim") == ["a0000_b0001.claim", "a0001_b0001.claim"]
    assert store.claim("a0000_b0000") and store.claim("a0001_b0000")
    assert not store.claim("a0000_b0001") and not store.claim("a0001_b0001")  # live holders keep theirs
    live.release("a0000_b0001")
    assert store.claim("a0000_b0001")
    store.release_all()
    assert names("*.claim") == ["a0001_b0001.claim"]  # release leaves other runs' claims alone
    with pytest.raises(ValueError, match=f"^out: {re.escape(str(tmp_path))} holds a different sweep"):
        CellStore(tmp_path, {"sweep": "another"})


# -- (c) damaged cell records ---------------------------------------------------------------------
def truncate(path, other):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def garbage(path, other):
    path.write_bytes(b"\x00\xff not JSON at all \x89PNG")


def swap(path, other):
    shutil.copyfile(other, path)  # the other cell's complete, valid record under this cell's name


def edit_a_number(path, other):
    record = json.loads(path.read_text())
    record["result"]["final_cosine"][0] += 1e-3
    path.write_text(json.dumps(record))


@pytest.mark.parametrize("damage, reason", [
    (truncate, "not readable JSON"), (garbage, "not UTF-8 text"),
    (swap, "it is the record of cell 'a0001_b0001'"), (edit_a_number, "checksum of its result does not match"),
])
def test_damaged_record_is_named_then_recomputed(tmp_path, tiny_sweep, damage, reason):
    spec, reference_folder, reference = tiny_sweep
    out = tmp_path / "sweep"
    shutil.copytree(reference_folder, out)
    key = cell_key(1, 0)
    path = out / "cells" / f"{key}.json"
    damage(path, out / "cells" / f"{cell_key(1, 1)}.json")
    message = f"^out: cell record {re.escape(str(path))} is damaged \\(.*{re.escape(reason)}"
    with pytest.raises(ValueError, match=message):
        load_records(spec, out)
    with pytest.raises(ValueError, match=message):
        MeasuredDiagram.from_folder(out)
    assert set(load_records(spec, out, require_all=False)) == set(reference) - {key}

    with pytest.warns(DamagedRecordWarning, match=re.escape(str(path))):
        report = run_sweep(spec, out, workers=0)
    assert (report.cells_computed, report.cells_reused) == (1, len(reference) - 1)
    assert path.with_name(path.name + ".corrupt").exists()
    assert results(load_records(spec, out)) == results(reference)


def test_damaged_manifest_is_named(tmp_path, tiny_sweep):
    _, reference_folder, _ = tiny_sweep
    shutil.copytree(reference_folder, tmp_path / "sweep")
    manifest = tmp_path / "sweep" / "sweep.json"
    manifest.write_text(manifest.read_text()[:40])
    with pytest.raises(ValueError, match=f"^out: {re.escape(str(manifest))} is not a readable sweep manifest"):
        MeasuredDiagram.from_folder(tmp_path / "sweep")
    manifest.write_text(json.dumps({"format": "remprop.sweep/1", "arch": {"norm": "sideways"}}))
    with pytest.raises(ValueError, match=f"^out: {re.escape(str(manifest))} is not a valid sweep manifest"):
        MeasuredDiagram.from_folder(tmp_path / "sweep")



def test_stored_manifest_reads_a_store_or_says_none(tmp_path, tiny_sweep):
    from remprop.validation.experiments.cell_store import stored_manifest
    _, reference_folder, _ = tiny_sweep
    shutil.copytree(reference_folder, tmp_path / "sweep")
    manifest = tmp_path / "sweep" / "sweep.json"
    assert stored_manifest(tmp_path / "sweep") == json.loads(manifest.read_text())
    assert stored_manifest(tmp_path / "nothing") is None
    manifest.write_text(manifest.read_text()[:40])
    assert stored_manifest(tmp_path / "sweep") is None
    manifest.write_text("[1, 2]")
    assert stored_manifest(tmp_path / "sweep") is None


# -- (d) damaged saved diagrams ------------------------------------------------------------------
@pytest.fixture(scope="module")
def saved_diagram(tmp_path_factory):
    diagram = trainability_diagram(Architecture(), [0.5, 1.0], [0.5, 1.0, 1.5], 3)
    npz, _ = diagram.save(tmp_path_factory.mktemp("diagram") / "diagram")
    with np.load(npz) as data:
        arrays = dict(data)
    return npz, arrays


def rewrite(path, arrays, **changes):
    np.savez(path, **{name: value for name, value in {**arrays, **changes}.items() if value is not None})


def with_settings(arrays, **changes):
    """The npz member ``meta`` (the grid result's JSON header) with some settings changed."""
    meta = json.loads(str(arrays["meta"]))
    meta["settings"].update(changes)
    return np.array(json.dumps(meta))


@pytest.mark.parametrize("case, reason", [
    ("truncated", "not a NumPy npz archive"), ("not a zip", "not a NumPy npz archive"),
    ("damaged member", "unreadable arrays"), ("no keys", "missing arrays meta, alphas, betas"),
    ("format", "format 'remprop.other/1'"), ("shapes", "phase has shape (2, 3)"),
    ("negative betas", "betas must be > 0"), ("depth -5", "depth must be an integer >= 1, got -5"),
    ("architecture", "settings.arch: norm must be one of"), ("header", "meta is not JSON text"),
])
def test_damaged_saved_diagram_is_one_value_error_naming_the_file(tmp_path, saved_diagram, case, reason):
    original, arrays = saved_diagram
    assert TrainabilityDiagram.load(original).phase.shape == (3, 2)
    path = tmp_path / "damaged.npz"
    raw = original.read_bytes()
    if case == "truncated":
        path.write_bytes(raw[: len(raw) // 2])
    elif case == "not a zip":
        path.write_bytes(b"this is not a zip file\n" * 20)
    elif case == "damaged member":  # the zip directory intact, an array's bytes flipped: its CRC fails
        at = raw.index(b"\x93NUMPY", raw.index(b"phase.npy")) + 130
        path.write_bytes(raw[:at] + bytes(255 - b for b in raw[at:at + 4]) + raw[at + 4:])
    elif case == "no keys":
        rewrite(path, {"format": arrays["format"]})
    else:
        changes = {"format": dict(format=np.array("remprop.other/1")), "shapes": dict(phase=arrays["phase"].T),
                   "negative betas": dict(betas=-arrays["betas"]), "depth -5": dict(meta=with_settings(arrays, depth=-5)),
                   "architecture": dict(meta=with_settings(arrays, arch={"norm": "sideways"})),
                   "header": dict(meta=np.array('{"kind": "theory", '))}[case]
        rewrite(path, arrays, **changes)
    with pytest.raises(ValueError, match=f"^path: {re.escape(str(path))} .*{re.escape(reason)}") as info:
        TrainabilityDiagram.load(path)
    assert len(str(info.value).splitlines()) == 1


# -- issue 46, item 5: the per-seed records of ``check --simulate`` ---------------------------------
def _nan_in_rho(path):
    record = json.loads(path.read_text())
    record["measurement"]["rho"][0][1] = float("nan")
    path.write_text(json.dumps(record))  # json.dumps writes NaN: no record remprop writes holds one


def _q_edited(path):
    record = json.loads(path.read_text())
    record["measurement"]["q"][0][1] = 5.0
    path.write_text(json.dumps(record))


def _truncated(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


@pytest.fixture(scope="module")
def simulated_check(tmp_path_factory):
    """``check --simulate`` of a 2-block BERT (d = 64, T = 32), 2 seeds: (argv, folder, simulation summary)."""
    pytest.importorskip("transformers")
    from remprop.cli import main
    from remprop.theory.models.hf_config import load_hf_config

    folder = tmp_path_factory.mktemp("simulated")
    config = dict(load_hf_config("bert-base"), num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                  intermediate_size=128, vocab_size=500)
    (folder / "config").mkdir()
    (folder / "config" / "tiny.json").write_text(json.dumps(config))
    argv = ["check", "--hf-config", str(folder / "config" / "tiny.json"), "--seq-len", "32", "--simulate",
            "--seeds", "2", "--sequences", "1", "--json", "--no-figure", "--name", "tiny"]
    out = folder / "reference"
    assert main([*argv, "--out", str(out)]) == 0
    return argv, out, json.loads((out / "tiny.json").read_text())["simulation"]


@pytest.mark.parametrize("damage, reason", [(_nan_in_rho, "non-finite number NaN"),
                                            (_q_edited, "checksum of its measurement does not match"),
                                            (_truncated, "not readable JSON")])
def test_tampered_simulation_record_is_recomputed(tmp_path, capsys, simulated_check, damage, reason):
    """Before: a NaN or an edited q in seed-1.json was reused (``max nan, mean nan``, exit 0).
    After: it is moved aside with one warning naming it and the seed is measured again: the
    summary is the untouched run's, exactly (the same seeded draws)."""
    from remprop.cli import main

    argv, reference, expected = simulated_check
    out = tmp_path / "run"
    shutil.copytree(reference, out)
    path = out / "tiny.simulation" / "cells" / "seed-1.json"
    damage(path)
    seed0 = (out / "tiny.simulation" / "cells" / "seed-0.json").stat().st_mtime_ns
    capsys.readouterr()
    assert main([*argv, "--out", str(out)]) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "damaged" in line]
    assert len(warned) == 1 and str(path) in warned[0] and reason in warned[0], warned  # the CLI's one-line warning
    simulation = json.loads((out / "tiny.json").read_text())["simulation"]
    assert simulation == expected
    assert path.with_name(path.name + ".corrupt").exists() and json.loads(path.read_text())["seed"] == 1
    assert (out / "tiny.simulation" / "cells" / "seed-0.json").stat().st_mtime_ns == seed0  # reused


# -- issue 46, item 8: a cache folder that cannot be written ----------------------------------------
def test_precompile_background_with_an_unwritable_cache_is_one_line(tmp_path, capsys, monkeypatch):
    """Before: FileExistsError (REMPROP_CACHE_DIR a file). After: exit 2, one line naming the log's path."""
    from cli_checks import assert_one_line_error, run_cli

    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("REMPROP_CACHE_DIR", str(blocker))
    code, out, err = run_cli(capsys, "precompile", "--background")
    assert_one_line_error(code, err, str(blocker / "precompile.log"), "REMPROP_CACHE_DIR")


def test_tokenizer_cache_that_cannot_be_written_only_warns(tmp_path, monkeypatch):
    """Before: NotADirectoryError from ``train`` / ``trained-diagram``. After: the tokenizer is
    kept in memory, with one warning naming the folder; the same tokenizer as a writable cache's."""
    pytest.importorskip("tokenizers")
    from remprop.validation.training.data import load_tokenizer

    texts = ["the cache folder is a file " * 20, "so the tokenizer is kept in memory " * 20]
    monkeypatch.setenv("REMPROP_CACHE_DIR", str(tmp_path / "cache"))
    written, path = load_tokenizer(texts, 64)
    assert path.exists()
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("REMPROP_CACHE_DIR", str(blocker))
    with pytest.warns(RuntimeWarning, match=re.escape(str(blocker / "tokenizers")) + ".*REMPROP_CACHE_DIR"):
        kept, _ = load_tokenizer(texts, 64)
    assert kept.get_vocab() == written.get_vocab()
