"""The one figure pipeline (remprop.validation.experiments.paper_figures, ``remprop figures``): every
reference figure of the registry is written as a PNG with the data behind it, theory and
simulation together; without torch the theory parts are drawn and the rest is listed; the
command forwards its options."""
from __future__ import annotations

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # the test process only

import matplotlib.image as mpimg  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

import remprop.validation.experiments.figure_work as figure_work  # noqa: E402
import remprop.validation.experiments.paper_figures as paper_figures  # noqa: E402
from remprop.cli import main  # noqa: E402
from remprop.diagrams.paper_figures import PAPER_FIGURES, make_theory_figures  # noqa: E402
from remprop.validation.experiments.paper_figures import FigureSizes, make_figures, supported_figures  # noqa: E402

# Tiny simulations: every code path of every figure, in seconds.
TINY = FigureSizes(width=32, seq_len=32, seeds=1, sequences=2, depth_1d=8, depth_1e=4, attention_width=32,
                   attention_seq_len=32, attention_seeds=1, attention_sequences=2, betas_2=4, betas_5=4, ln_width=32,
                   ln_seq_len=32, ln_seeds=1, ln_sequences=2, ln_depth=12, diagram_points=12, sweep_width=32,
                   sweep_seq_len=32, sweep_seeds=1, sweep_sequences=2, sweep_depth=6, sweep_betas=(0.5, 2.0, 3),
                   sweep_alphas=(0.5, 1.5, 2), eoc_width=32, eoc_seq_len=8, eoc_seeds=2,
                   gradient_sizes=((32, 16),), gradient_seeds=1, gradient_betas=3, causal_width=32,
                   causal_seq_len=32, causal_depth=3, causal_seeds=1, causal_sequences=1, causal_last=8,
                   map_width=32, map_seq_len=32, spectrum_width=32, spectrum_seq_len=32, spectrum_seeds=2,
                   spectrum_betas=(0.5, 2.0), train_width=16, train_seq_len=16, train_batch_size=4, train_steps=3,
                   train_vocab_size=1024, train_seeds=1, train_eval_batches=1, train_lr=3e-3, depth_1f=(2, 2),
                   alphas_1f_trainable=(1.0,), alphas_1f_rank=(0.1,), betas_1f_entropy=(4.0,), betas_3=(0.5, 3.0, 3),
                   lr_3=3e-3, depth_6=2, width_6=16, lr_6=3e-3, alphas_6=(0.2,), depth_8=2, beta_8=4.0,
                   lrs_8=(3e-3, 1e-3))


def assert_picture(path):
    """A real picture: a PNG with many colours and visible contrast."""
    assert path.suffix == ".png" and path.stat().st_size > 5_000
    image = mpimg.imread(path)
    rgb = image[..., :3].reshape(-1, 3)
    assert min(image.shape[:2]) > 200
    packed = (rgb * 255).astype(np.uint32) @ np.array([1 << 16, 1 << 8, 1], dtype=np.uint32)
    assert np.unique(packed).size > 20 and rgb.std() > 0.05


def load_data(path):
    if path.suffix == ".json":
        return json.loads(path.read_text())
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


@pytest.fixture(scope="module")
def tiny_set(tmp_path_factory):
    pytest.importorskip("torch")
    return make_figures(tmp_path_factory.mktemp("figures"), sizes=TINY)


@pytest.mark.slow  # the module fixture makes every figure: this file's group starts first (tests/conftest.py)
def test_every_supported_figure_has_a_picture_and_its_data(tiny_set):
    assert set(tiny_set.files) == set(supported_figures())
    for figure_id, paths in tiny_set.files.items():
        pictures = [p for p in paths if p.suffix == ".png"]
        data = [p for p in paths if p.suffix in (".json", ".npz")]
        assert pictures and data, figure_id
        for path in pictures:
            assert_picture(path)
        for path in data:
            assert load_data(path), path
    assert figure_id not in tiny_set.skipped or "not yet" in tiny_set.skipped[figure_id]


def test_theory_and_simulation_are_together_in_the_data(tiny_set):
    out = tiny_set.directory
    fig1d = load_data(out / "fig1d_cosine_per_layer.json")
    for comparison in fig1d["comparisons"]:
        table = comparison["table"]
        assert len(table) == TINY.depth_1d + 1
        assert {"theory_rho", "measured_mean", "measured_std"} <= set(table[0])
    fig4 = load_data(out / "fig4_layernorm_placement.json")
    assert set(fig4["theory_rho"]) == set(fig4["measured_cosine_mean"]) and len(fig4["theory_rho"]) == 4
    assert all(len(v) == TINY.ln_depth + 1 for v in fig4["measured_cosine_mean"].values())
    fig5 = load_data(out / "fig5_participation_ratio.json")
    assert len(fig5["measured"]["y2"][0]) == TINY.betas_5 and len(fig5["theory"]["y2"][0]) == TINY.betas_5
    measured = load_data(out / "fig1c_measured_vs_predicted.json")
    notes = tiny_set.notes["1c"]
    values = measured["values"]
    assert values["cells"] == notes["cells"] == 6 and values["agreement"] == notes["agreement"]
    assert np.mean(np.array(measured["arrays"]["phase"]) == np.array(measured["predicted"]["arrays"]["phase"])) \
        == values["agreement"]


def test_index_lists_the_files_of_every_figure(tiny_set):
    index = json.loads(tiny_set.index.read_text())
    assert index["sizes"] == "custom"
    # every reference figure of docs/theory.md section 9 is drawn, nothing is skipped with torch
    assert index["skipped"] == {} and "not_yet_supported" not in index
    assert set(index["figures"]) == {"1ab", "1c", "1d", "1e", "1f", "2", "3", "3c", "4", "5", "6", "7", "8",
                                       "9", "12"}
    for figure_id, entry in index["figures"].items():
        assert [Path(p) for p in entry["files"]] == tiny_set.files[figure_id]
        assert entry["elapsed_s"] >= 0


def test_a_second_run_reuses_the_sweep_cells(tmp_path):
    pytest.importorskip("torch")
    first = make_figures(tmp_path, sizes=TINY, only=["1c"])
    second = make_figures(tmp_path, sizes=TINY, only="1c")
    assert first.notes["1c"]["cells_computed"] == 6 and second.notes["1c"]["cells_computed"] == 0
    assert second.notes["1c"]["cells_reused"] == 6 and second.notes["1c"]["agreement"] == first.notes["1c"]["agreement"]


def test_without_torch_only_the_theory_parts_are_drawn(tmp_path, monkeypatch):
    monkeypatch.setattr(paper_figures, "_torch_available", lambda: False)
    result = make_figures(tmp_path, sizes=TINY, only="1c,2,4,5,9")
    assert [p.name for p in result.files["1c"] if p.suffix == ".png"] == ["fig1c_theory_bert_L60.png"]
    assert result.files["5"] == [] and "validation extra" in result.skipped["5"]
    assert "validation extra" in result.skipped["1c"] and "validation extra" in result.skipped["4"]
    for figure_id in ("1c", "2", "4", "9"):
        assert_picture(result.files[figure_id][0])
    # the theory parts are the files make_theory_figures writes, and only those
    theory = make_theory_figures(tmp_path / "theory", sizes=TINY, only="1c,2,4,5,9")
    assert [p.name for p in theory] == [p.name for k in ("1c", "2", "4", "9") for p in result.files[k]]
    index = json.loads(result.index.read_text())
    assert set(index["skipped"]) == {"1c", "2", "4", "5", "9"} and index["figures"]["5"]["files"] == []


def test_registry_names_a_simulated_part_that_exists():
    """Every dotted name in the registry resolves (the simulated parts are looked up by name)."""
    for figure_id, figure in PAPER_FIGURES.items():
        assert figure.theory is not None or figure.simulation is not None, figure_id
        if figure.simulation is not None:
            module, _, name = figure.simulation.rpartition(".")
            assert module == "remprop.validation.experiments.paper_figures" and callable(getattr(paper_figures, name)), figure_id


@pytest.mark.parametrize("only, message", [("99", "unknown figure"), (",", "at least one")])
def test_only_refuses_figures_that_are_not_drawn(tmp_path, only, message):
    with pytest.raises(ValueError, match=f"^only: .*{message}"):
        make_figures(tmp_path, sizes=TINY, only=only)


# -- the command ---------------------------------------------------------------------------------
def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_figures_command_forwards_its_options(capsys, tmp_path, monkeypatch):
    """`figures` is a thin wrapper around make_figures: check what it hands over and prints."""
    calls = []

    def fake_make_figures(out_dir, **kwargs):
        calls.append((Path(out_dir), kwargs))
        files = {"1c": [Path(out_dir) / "a.png", Path(out_dir) / "a.json"]}
        return paper_figures.FigureSet(Path(out_dir), files, {"3c": "simulation: needs the validation extra"},
                                       {"1c": {"agreement": 0.75, "cells": 4, "cells_agreeing": 3,
                                               "theory": "finite-T"}},
                                       {"1c": 1.0}, Path(out_dir) / "figures.json")

    estimated = []

    def fake_seconds(**kwargs):
        estimated.append(kwargs)
        return {"1c": 1.0}

    monkeypatch.setattr(paper_figures, "make_figures", fake_make_figures)
    monkeypatch.setattr(figure_work, "figures_seconds", fake_seconds)
    monkeypatch.setattr(figure_work, "figures_bytes", lambda **kwargs: 1)
    code, out, err = run_cli(capsys, "figures", "--out", tmp_path / "figs", "--quick", "--no-progress",
                             "--only", "1c", "--workers", "2", "--device", "cpu")
    assert code == 0, err
    assert calls == [(tmp_path / "figs", dict(quick=True, progress=False, only="1c", device="cpu", workers=2,
                                              threads=None))]
    # the estimate (remprop.validation.experiments.paper_figures.figures_seconds) sees the same settings
    assert estimated == [dict(quick=True, only="1c", device="cpu", workers=2, threads=None)]
    lines = out.splitlines()
    assert f"  {tmp_path / 'figs' / 'a.png'}" in lines and f"  {tmp_path / 'figs' / 'a.json'}" in lines
    assert "3/4 cells agree (75.0%)" in out and "figure 3c: simulation: needs the validation extra" in out
    code, out, _ = run_cli(capsys, "figures", "--out", tmp_path, "--progress", "--json", "--threads", "3")
    assert calls[-1] == (tmp_path, dict(quick=False, progress=True, only=None, device=None, workers=0, threads=3))
    assert estimated[-1] == dict(quick=False, only=None, device=None, workers=0, threads=3)
    summary = json.loads(out)
    assert summary["files"] == [str(tmp_path / "a.png"), str(tmp_path / "a.json"), str(tmp_path / "figures.json")]
    assert summary["notes"]["1c"]["agreement"] == 0.75 and "3c" in summary["skipped"]


def test_figures_help_lists_every_figure(capsys):
    code, out, _ = run_cli(capsys, "figures", "--help")
    assert code == 0 and "not yet supported" not in out
    for figure_id, description in supported_figures().items():
        assert f"  {figure_id:>3}  {description[:30]}" in out
    assert set(supported_figures()) == set(PAPER_FIGURES) and {"3c", "12"} <= set(supported_figures())


@pytest.mark.parametrize("argv, option", [(["--only", "99"], "--only"), (["--workers", "-1"], "--workers")])
def test_figures_command_bad_input_is_one_line(capsys, tmp_path, argv, option):
    code, out, err = run_cli(capsys, "figures", "--out", tmp_path, *argv)
    assert code == 2 and len(err.strip().splitlines()) == 1 and option in err and out == ""
