"""The acceptance runner of issue 14 (remprop.validation.experiments.acceptance and .acceptance_table,
``remprop acceptance``):
resumable one-file-per-case store, the depth-prefix property it relies on, inputs rebuilt
from (seed, sequence), the pass rule, the table, the Markdown and the command line."""
from __future__ import annotations

import json
import re

import numpy as np
import pytest

pytest.importorskip("torch")

from remprop.cli import main  # noqa: E402
from remprop.theory import Architecture, propagate  # noqa: E402
from remprop.validation.experiments import acceptance as acc  # noqa: E402
from remprop.validation.experiments import acceptance_table as tables  # noqa: E402
from remprop.validation.experiments.cell_store import atomic_write_json  # noqa: E402

# tiny sizes: each case takes milliseconds on the CPU
SIZES = dict(width=32, seq_len=16, seeds=2, sequences=2)
CASES = (acc.AcceptanceCase("text", "pre", 0.5, 1.0, depths=(2, 3)),
         acc.AcceptanceCase("synthetic", "post", 1.4, 1.3, depths=(3,)))


@pytest.fixture
def counted(monkeypatch):
    """Count the calls of measure_case (the one function that simulates)."""
    calls = []
    original = acc.measure_case

    def measure(case, **kwargs):
        calls.append(case.key)
        return original(case, **kwargs)

    monkeypatch.setattr(acc, "measure_case", measure)
    return calls


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    directory = tmp_path_factory.mktemp("acceptance")
    report = acc.run_acceptance(directory, cases=CASES, device="cpu", **SIZES)
    assert (report.cells_computed, report.cells_reused) == (2, 0)
    return directory


def test_cases_cover_the_issue_settings():
    keys = {(c.inputs, c.norm, c.beta, c.alpha) for c in acc.ACCEPTANCE_CASES}
    assert len(acc.ACCEPTANCE_CASES) == len(keys) == 2 * 2 * 2 * 4
    assert {c.depths for c in acc.ACCEPTANCE_CASES if c.beta == 3.0} == {(12,)}
    assert {c.depths for c in acc.ACCEPTANCE_CASES if c.beta != 3.0} == {(12, 30, 60)}
    assert len({c.key for c in acc.ACCEPTANCE_CASES}) == len(acc.ACCEPTANCE_CASES)
    arch = acc.ACCEPTANCE_CASES[0].architecture(512)
    assert (arch.alpha_sa, arch.alpha_mlp, arch.seq_len) == (acc.ACCEPTANCE_CASES[0].alpha, 1.0, 512)


def test_a_deep_stack_begins_with_the_shallow_one():
    # the reason each case is simulated once at its deepest depth: the same layers, bit for bit
    deep = acc.measure_case(acc.AcceptanceCase("text", "pre", 1.0, 1.0, depths=(4,)), device="cpu", **SIZES)
    shallow = acc.measure_case(acc.AcceptanceCase("text", "pre", 1.0, 1.0, depths=(2,)), device="cpu", **SIZES)
    np.testing.assert_array_equal(shallow.cosine, deep.cosine[:, :3])
    np.testing.assert_array_equal(shallow.trace.y2, deep.trace.y2[:, :2])


def test_second_run_does_no_work_and_a_damaged_record_is_measured_again(tmp_path, counted):
    first = acc.run_acceptance(tmp_path, cases=CASES, device="cpu", **SIZES)
    assert (first.cells_computed, sorted(counted)) == (2, sorted(c.key for c in CASES))
    counted.clear()
    lines = []
    second = acc.run_acceptance(tmp_path, cases=CASES, device="cpu", progress=lines.append, **SIZES)
    assert (second.cells_computed, second.cells_reused, counted) == (0, 2, [])
    assert "2 already in" in lines[0]
    # a truncated record (a crash cannot leave one, but a disk can) and an edited number
    path = tmp_path / "cells" / f"{CASES[0].key}.json"
    path.write_text(path.read_text()[:100])
    edited = tmp_path / "cells" / f"{CASES[1].key}.json"
    record = json.loads(edited.read_text())
    record["result"]["trace"]["cosine"][0][1] += 0.01
    atomic_write_json(edited, record)
    with pytest.warns(UserWarning, match="damaged cell record"):
        third = acc.run_acceptance(tmp_path, cases=CASES, device="cpu", **SIZES)
    assert (third.cells_computed, sorted(counted)) == (2, sorted(c.key for c in CASES))
    assert not list(tmp_path.rglob("*.tmp")) and not list(tmp_path.rglob("*.claim"))


def test_a_store_of_other_sizes_is_refused(store):
    with pytest.raises(ValueError, match="width"):
        acc.run_acceptance(store, cases=CASES, device="cpu", **{**SIZES, "width": 64})


def test_rebuilt_inputs_are_the_measured_ones(store):
    records = acc.open_store(store, **SIZES).read_all()
    for case in CASES:
        measurement = acc.CaseMeasurement.from_dict(records[case.key]["result"])
        grams = acc.input_grams(case.inputs, seeds=SIZES["seeds"], sequences=SIZES["sequences"],
                                seq_len=SIZES["seq_len"], width=SIZES["width"])
        assert grams.shape == (4, 16, 16)
        n = grams.shape[-1]
        norms = np.sqrt(np.diagonal(grams, axis1=1, axis2=2))
        cosine = ((grams / (norms[:, :, None] * norms[:, None, :])).sum(axis=(1, 2)) - n) / (n * (n - 1))
        # float64 sums of the same float32 products: equal to ~1e-15
        np.testing.assert_allclose(cosine, measurement.cosine[:, 0], rtol=0, atol=1e-12)
        np.testing.assert_allclose(np.trace(grams, axis1=1, axis2=2) / n, measurement.trace.q[:, 0], rtol=1e-12)


def test_the_rule_passes_within_the_tolerance_or_two_standard_errors():
    measured = np.zeros((4, 6))  # four sequences, layers 0..5, all measuring 0
    ok = tables.acceptance_error(np.r_[0.0, 0.01, -0.019, 0.0, 0.0, 0.0], measured)
    assert ok["passed"] and ok["max_error"] == pytest.approx(0.019) and ok["layer"] == 2
    bad = tables.acceptance_error(np.r_[0.0, 0.0, 0.0, 0.03, 0.0, 0.0], measured)
    assert not bad["passed"] and (bad["layer"], bad["worst_layer"]) == (3, 3)
    assert bad["worst_ratio"] == pytest.approx(1.5)
    # beyond the layers asked for, an error does not count
    assert tables.acceptance_error(np.r_[0.0, 0.0, 0.0, 0.03, 0.0, 0.0], measured, depth=2)["passed"]
    # a noisy layer: 2 s.e. = 2 * 0.04 / sqrt(4) = 0.04 admits an error of 0.03 there
    noisy = measured.copy()
    noisy[:, 3] = [-0.04, 0.04, -0.04, 0.04]
    noisy[:, 3] *= np.sqrt(3 / 4)  # std (ddof 1) exactly 0.04
    spread = tables.acceptance_error(np.r_[0.0, 0.0, 0.0, 0.03, 0.0, 0.0], noisy)
    assert spread["passed"] and spread["two_se"] == pytest.approx(0.04)
    # the largest error passes on its noise, a smaller one at a quiet layer fails: the rule holds per layer
    mixed = tables.acceptance_error(np.r_[0.0, 0.0, 0.025, 0.035, 0.0, 0.0], noisy)
    assert not mixed["passed"] and (mixed["layer"], mixed["worst_layer"]) == (3, 2)
    with pytest.raises(ValueError, match="measured must have shape"):
        tables.acceptance_error(np.zeros(6), np.zeros((4, 5)))
    with pytest.raises(ValueError, match="depth must be <= 5"):
        tables.acceptance_error(np.zeros(6), measured, depth=6)
    with pytest.raises(ValueError, match="finite"):
        tables.acceptance_error(np.r_[0.0, np.nan, 0, 0, 0, 0], measured)


def test_the_standard_error_counts_initialisations_not_sequences():
    """Two sequences per seed share the weights: rows 0-1 and 2-3 are two seeds. Here the two
    sequences of a seed agree and the seeds differ (+-0.04): the per-seed means are -0.04 and
    +0.04, std (ddof 1) 0.0566 over sqrt(2), 2 s.e. = 0.08; counting the 4 rows as independent
    would give 2 * 0.0462 / 2 = 0.046."""
    measured = np.zeros((4, 3))
    measured[:, 1] = [-0.04, -0.04, 0.04, 0.04]
    theory = np.r_[0.0, 0.06, 0.0]
    assert not tables.acceptance_error(theory, measured)["passed"]
    clustered = tables.acceptance_error(theory, measured, sequences_per_seed=2)
    assert clustered["passed"] and clustered["two_se"] == pytest.approx(0.08)
    with pytest.raises(ValueError, match="sequences_per_seed must divide"):
        tables.acceptance_error(theory, measured, sequences_per_seed=3)


def test_table_of_the_mean_theory(store):
    rows = tables.acceptance_table(store, ("mean",), workers=0)
    # cases outside ACCEPTANCE_CASES come after those, by key
    assert [(r["key"], r["depth"]) for r in rows] == [(CASES[1].key, 3), (CASES[0].key, 2), (CASES[0].key, 3)]
    records = acc.open_store(store, **SIZES).read_all()
    for row in rows:
        case = next(c for c in CASES if c.key == row["key"])
        trace = acc.CaseMeasurement.from_dict(records[case.key]["result"]).trace
        # the theory of compare(): propagate at the simulated T from the measured mean input state
        theory = propagate(Architecture(norm=case.norm, alpha_sa=case.alpha, seq_len=SIZES["seq_len"]), case.beta,
                           case.depth, q0=trace.q[:, 0].mean(), rho0=trace.rho[:, 0].mean())
        error = np.abs(theory.rho - trace.cosine.mean(axis=0))[1:row["depth"] + 1]
        assert row["max_error"] == pytest.approx(error.max(), rel=1e-9, abs=1e-12)
        assert row["layer"] == int(np.argmax(error)) + 1 and row["samples"] == 4 and row["theory_se"] == 0.0
    # cached: a second table reads the theory records instead of computing them
    assert tables.acceptance_table(store, ("mean",), workers=0) == rows


def test_markdown_marks_failures_and_counts_passes(store):
    rows = tables.acceptance_table(store, ("mean",), workers=0)
    rows[0] = {**rows[0], "passed": False, "worst_layer": 2}
    rows[1] = {**rows[1], "passed": True}  # constructed verdicts: the writer shows what the rows say
    text = tables.acceptance_markdown(rows)
    lines = text.strip().splitlines()
    assert lines[0].startswith("| inputs | norm | beta | alpha_SA | L | theory | max error | layer | 2 s.e. | pass")
    assert len([line for line in lines if line.startswith("| text") or line.startswith("| synthetic")]) == 3
    assert "| **no** (layer 2) |" in lines[2] and "| yes |" in lines[3]
    assert lines[-1].startswith(f"mean: {sum(r['passed'] for r in rows)} of 3 pass")


def test_gram_theory_rows_and_a_refusing_theory(store, monkeypatch):
    gram_state = pytest.importorskip("remprop.theory.gram_state")
    rows = tables.acceptance_table(store, ("mean", "gram"), draws=2, workers=0)
    gram = [r for r in rows if r["theory"] == "gram"]
    # the Gram theory is the theory of real text (GRAM_INPUTS): the text case's two depths only
    assert tables.GRAM_INPUTS == ("text",)
    assert len(gram) == 2 and all(r["inputs"] == "text" for r in gram)
    assert all(r["error"] is None and np.isfinite(r["max_error"]) for r in gram)
    assert len([r for r in rows if r["theory"] == "mean"]) == 3
    assert all(r["simplex_distance"] is not None and r["simplex_distance"] > 0 for r in rows)

    def refuse(*args, **kwargs):
        raise ValueError("the Gram state is not finite after block 1")

    monkeypatch.setattr(gram_state, "propagate_gram", refuse)
    refused = tables.acceptance_table(store, ("gram",), draws=3, workers=0)  # other draws: other records
    assert all(not r["passed"] and "not finite after block 1" in r["error"] for r in refused)
    assert "theory failed" in tables.acceptance_markdown(refused)


def test_sampled_theory_rows_resume_and_unknown_theory(store, monkeypatch):
    gram_state = pytest.importorskip("remprop.theory.gram_state")
    seeds, propagate = [], gram_state.propagate_gram

    def recording(*args, **kwargs):
        seeds.append(kwargs["seed"])
        return propagate(*args, **kwargs)

    monkeypatch.setattr(gram_state, "propagate_gram", recording)
    rows = tables.acceptance_table(store, ("mean", "sampled"), draws=2, workers=0)
    # each sequence's chains draw from their own seed: the Monte Carlo errors average out
    assert sorted(seeds) == list(range(len(seeds))) and len(seeds) > 1
    sampled = [r for r in rows if r["theory"] == "sampled"]
    # text cases only (GRAM_INPUTS), like "gram": the text case's two depths
    assert len(sampled) == 2 and all(r["inputs"] == "text" for r in sampled)
    assert all(r["error"] is None and np.isfinite(r["max_error"]) and np.isfinite(r["theory_se"]) for r in sampled)
    assert "| sampled |" in tables.acceptance_markdown(rows)
    # resumes: every cell is in the theory store, a second call computes nothing
    lines = []
    again = tables.acceptance_table(store, ("mean", "sampled"), draws=2, workers=0, progress=lines.append)
    assert again == rows
    counts = re.search(r"(\d+) cells, (\d+) already in", lines[0])
    assert counts and int(counts[1]) > 0 and counts[1] == counts[2]
    from remprop.cli.commands.acceptance import theory_list

    assert theory_list("mean, sampled") == ("mean", "sampled")  # the CLI's --theory accepts it
    with pytest.raises(ValueError, match="'mean', 'gram', 'sampled'"):
        tables.acceptance_table(store, ("mean", "sampler"), draws=2, workers=0)


@pytest.mark.parametrize("argv, words", [
    (["--seeds", "0"], "--seeds"),
    (["--width", "1"], "--width"),
    (["--theory", "mean,foo"], "--theory"),
    (["--sequences", "x"], "--sequences"),
])
def test_command_line_bad_input_is_one_line_status_2(tmp_path, capsys, argv, words):
    assert main(["acceptance", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("remprop acceptance: error:") and words in err


def test_command_line_refuses_a_store_of_other_sizes(store, capsys):
    assert main(["acceptance", "--out", str(store), "--width", "8", "--seq-len", "4", "--seeds", "1"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--out: " in err and "holds a different" in err and "seeds" in err


def test_command_line_measures_and_writes_the_table(tmp_path, capsys):
    argv = ["acceptance", "--out", str(tmp_path / "store"), "--width", "8", "--seq-len", "4", "--seeds", "1",
            "--sequences", "2", "--device", "cpu", "--theory", "mean", "--workers", "0",
            "--markdown", str(tmp_path / "table.md"), "--progress"]
    assert main(argv) == 0
    out, err = capsys.readouterr()
    assert "[32/32]" in err and "wrote" in err
    table = (tmp_path / "table.md").read_text()
    # one line per case and depth: 24 cases at L = 12, 30, 60 and 8 at L = 12
    assert out == table and table.count("\n| text") + table.count("\n| synthetic") == 24 * 3 + 8
    assert main(argv) == 0  # resumes: nothing measured again
    assert "0 computed, 32 on disk" in capsys.readouterr().err
    assert main([*argv[:-1], "--no-progress"]) == 0  # the summary lines only, no line per case
    err = capsys.readouterr().err
    assert "0 computed, 32 on disk" in err and "acceptance: 32 cases" not in err and "/32]" not in err, err
