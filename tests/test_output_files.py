"""Outputs that must not overwrite each other (issue 44 item 5, issue 46 case 6): ``check``'s file
names carry every option that changes the answer, and one run's files are written as a set."""
from __future__ import annotations

import json
import threading
import time

import pytest

from remprop._files import OutputSet, exclusive_lock, output_set
from remprop.cli import build_parser, main
from remprop.cli.commands import check as check_command


def stem_of(*argv):
    """The default stem ``check`` gives to ``argv`` (the model read, nothing computed)."""
    args = build_parser().parse_args(["check", *argv])
    spec, length = check_command._model_spec(args)
    _, overrides = check_command._what_if(spec, args)
    return check_command.output_stem(args, spec, length, overrides)


def test_the_default_run_keeps_its_name_and_every_answer_option_is_in_the_stem():
    assert stem_of("llama-3.2-1b") == "check-meta-llama_Llama-3.2-1B"
    assert stem_of("llama-3.2-1b", "--depth", "64") == "check-meta-llama_Llama-3.2-1B-depth=64"
    assert stem_of("llama-3.2-1b", "--seq-len", "256", "--depth", "4", "--threshold", "0.9", "--steps", "300",
                   "--max-depth", "100") == ("check-meta-llama_Llama-3.2-1B-seq-len=256-depth=4-threshold=0.9-"
                                             "max-depth=100-steps=300")
    # --seq-len at the default T gives the default run's answer, and its name
    assert stem_of("bert-base", "--seq-len", "512") == "check-bert-base-uncased"
    # a what-if override, and --simulate's sizes (only with --simulate)
    assert stem_of("bert-base", "--alpha", "2", "--beta", "0.5") == "check-bert-base-uncased-alpha=2-beta=0.5"
    assert stem_of("bert-base", "--seeds", "8") == "check-bert-base-uncased"
    assert stem_of("bert-base", "--simulate", "--seeds", "8", "--sequences", "3") == (
        "check-bert-base-uncased-seeds=8-sequences=3")
    assert stem_of("bert-base", "--simulate", "--seeds", "3,5") == "check-bert-base-uncased-seeds=3_5"
    # --heads of a reduced model is named once (it is check's own option, not a what-if override)
    assert stem_of("bert-base", "--width", "64", "--heads", "2") == "check-bert-base-uncased-width=64-heads=2"


def test_every_option_that_changes_the_answer_changes_the_stem():
    """Each option of ANSWER_OPTIONS at a value other than its default gives a stem of its own."""
    values = {"--depth": "3", "--width": "128", "--heads": "2", "--pixel-std": "0.5", "--rho0": "0.2",
              "--threshold": "0.9", "--max-depth": "50", "--steps": "100", "--causal-theory": "maps",
              "--gram-draws": "4", "--lr": "1e-4", "--warmup": "7", "--batch-tokens": "4096", "--beta2": "0.95",
              "--schedule": "cosine"}
    assert set(values) == {option for _, option in check_command.ANSWER_OPTIONS}
    stems = {stem_of("bert-base", option, value) for option, value in values.items()}
    assert len(stems) == len(values) and "check-bert-base-uncased" not in stems


def test_check_at_another_depth_keeps_the_default_runs_files(capsys, tmp_path):
    assert main(["check", "bert-base", "--out", str(tmp_path), "--no-figure", "--max-depth", "100"]) == 0
    assert main(["check", "bert-base", "--depth", "5", "--out", str(tmp_path), "--no-figure",
                 "--max-depth", "100"]) == 0
    capsys.readouterr()
    default = json.loads((tmp_path / "check-bert-base-uncased-max-depth=100.json").read_text())
    shallow = json.loads((tmp_path / "check-bert-base-uncased-depth=5-max-depth=100.json").read_text())
    assert default["model"]["depth"] == 12 and shallow["model"]["depth"] == 5


def test_a_run_interleaved_with_another_leaves_one_set(monkeypatch, capsys, tmp_path):
    """Run A writes its diagram, then (inside its figure) run B runs whole with the same --out and
    --name, then A finishes: before, A's JSON and PNG sat beside B's diagram files. Written as a set,
    every file is A's (the last to commit)."""
    import remprop.diagrams as diagrams

    real = diagrams.model_figure
    calls = []

    def figure_that_lets_b_run(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:  # inside run A: run B now
            assert main(["check", "bert-base", "--depth", "3", "--diagram", "--max-depth", "50",
                         "--out", str(tmp_path), "--name", "same"]) == 0
        return real(*args, **kwargs)

    monkeypatch.setattr(diagrams, "model_figure", figure_that_lets_b_run)
    assert main(["check", "bert-base", "--depth", "4", "--diagram", "--max-depth", "50",
                 "--out", str(tmp_path), "--name", "same"]) == 0
    capsys.readouterr()
    assert len(calls) == 2
    report = json.loads((tmp_path / "same.json").read_text())
    diagram = json.loads((tmp_path / "same.diagram.json").read_text())
    assert report["model"]["depth"] == 4 and diagram["settings"]["depth"] == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == ["same.diagram.json", "same.diagram.npz", "same.json",
                                                           "same.png"]  # no staging folder left


def test_a_commit_waits_for_the_folders_lock(tmp_path):
    outputs = OutputSet(tmp_path)
    outputs.path("run.json").write_text("{}")
    held, released = threading.Event(), []

    def hold():
        with exclusive_lock(tmp_path):
            held.set()
            time.sleep(0.3)
            released.append(time.monotonic())

    thread = threading.Thread(target=hold)
    thread.start()
    held.wait(5)
    assert not (tmp_path / "run.json").exists()  # nothing under its final name before the commit
    outputs.commit()
    committed = time.monotonic()
    thread.join()
    outputs.discard()
    assert released and committed >= released[0]  # it waited for the other holder
    assert (tmp_path / "run.json").read_text() == "{}"
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_an_interrupted_run_leaves_the_previous_outputs(tmp_path):
    (tmp_path / "run.json").write_text("old")
    with pytest.raises(KeyboardInterrupt):
        with output_set(tmp_path) as outputs:
            outputs.path("run.json").write_text("new")
            raise KeyboardInterrupt
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"] and (tmp_path / "run.json").read_text() == "old"


def test_a_lock_not_waited_for_is_refused_while_held(tmp_path):
    with exclusive_lock(tmp_path / "x.lock"):
        with pytest.raises(BlockingIOError):
            with exclusive_lock(tmp_path / "x.lock", wait=False):
                pass
    with exclusive_lock(tmp_path / "x.lock", wait=False):  # free again
        pass
