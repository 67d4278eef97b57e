"""``remprop check``: a real model's diagnosis from the command line."""
from __future__ import annotations

import json

import numpy as np
import pytest

from remprop.cli import main
from remprop.diagrams import diagnose
from remprop.theory import model_spec
from remprop.theory.models.hf_config import load_hf_config


def run_cli(capsys, *argv):
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def one_line_error(code, err, *names):
    assert code == 2, err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and "Traceback" not in err, err
    for name in names:
        assert name in lines[0], lines[0]


def test_check_json_is_the_diagnosis(capsys, tmp_path):
    code, out, err = run_cli(capsys, "check", "--hf-config", "bert-base", "--depth", "5", "--json", "--no-figure",
                             "--out", tmp_path)
    assert code == 0, err
    result = json.loads(out)
    expected = diagnose(model_spec("bert-base").with_depth(5))
    np.testing.assert_allclose(result["rho"], expected.rho)
    assert result["phase"] == expected.phase and result["alpha_star"] == pytest.approx(expected.alpha_star)
    assert result["model"]["depth"] == 5 and len(result["changes"]) == 4
    # --depth changes the answer: the file name says so (the default run keeps check-bert-base-uncased.json)
    assert json.loads((tmp_path / "check-bert-base-uncased-depth=5.json").read_text())["phase"] == expected.phase


def test_check_report_and_figure(capsys, tmp_path):
    code, out, err = run_cli(capsys, "check", "--hf-config", "gpt2", "--depth", "3", "--seq-len", "256",
                             "--out", tmp_path, "--name", "g")
    assert code == 0, err
    for text in ("beta_c", "alpha*", "rank collapse", "E|dS/dW_Q|^2", "last 50", "query/key std",
                 "LayerNorm placement", "gain-controlled", "assumptions"):
        assert text in out
    assert (tmp_path / "g.png").stat().st_size > 10_000


def test_check_reads_a_config_json(capsys, tmp_path):
    config = dict(load_hf_config("bert-base"), num_hidden_layers=2, hidden_size=128, num_attention_heads=4,
                  intermediate_size=256)
    (tmp_path / "config.json").write_text(json.dumps(config))
    code, out, err = run_cli(capsys, "check", "--hf-config", tmp_path, "--json", "--no-figure", "--out", tmp_path)
    assert code == 0, err
    assert json.loads(out)["model"]["width"] == 128


@pytest.mark.parametrize("argv, names", [
    (["--hf-config", "no-such-model"], ["--hf-config"]),
    (["--hf-config", "gpt2", "--seq-len", "5000"], ["seq_len", "--seq-len"]),
    (["--hf-config", "gpt2", "--seq-len", "1"], ["--seq-len"]),
    (["--hf-config", "bert-base", "--threshold", "1.5"], ["--threshold"]),
    (["--hf-config", "bert-base", "--depth", "0"], ["--depth"]),
    (["--hf-config", "bert-base", "--pixel-std", "-1"], ["--pixel-std"]),
    (["--hf-config", "bert-base", "--seeds", "x"], ["--seeds"]),
    ([], ["--hf-config"]),
    (["bert-base", "--hf-config", "gpt2"], ["--hf-config"]),
    (["--hf-config", "bert-base", "--rho0", "2"], ["--rho0"]),
])
def test_check_bad_input_is_one_line(capsys, tmp_path, argv, names):
    code, _, err = run_cli(capsys, "check", *argv, "--out", tmp_path)
    one_line_error(code, err, *names)


def test_check_bad_config_file_is_one_line(capsys, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "t5"}))
    code, _, err = run_cli(capsys, "check", "--hf-config", tmp_path / "config.json", "--out", tmp_path)
    one_line_error(code, err, "model_type")


def test_check_simulate_overlays_measurements(capsys, tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    config = dict(load_hf_config("bert-base"), num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                  intermediate_size=128, vocab_size=500)
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(config))
    code, out, err = run_cli(capsys, "check", "--hf-config", path, "--seq-len", "32", "--simulate", "--seeds", "2",
                             "--sequences", "1", "--json", "--out", tmp_path, "--name", "tiny")
    assert code == 0, err
    simulation = json.loads(out)["simulation"]
    assert simulation["seeds"] == [0, 1] and len(simulation["rho_mean"]) == 3
    assert simulation["max_error"] >= simulation["mean_error"] >= 0
    assert (tmp_path / "tiny.png").exists()
    assert sorted(p.name for p in (tmp_path / "tiny.simulation" / "cells").iterdir()) == ["seed-0.json", "seed-1.json"]


def test_check_takes_the_model_as_a_positional_name_and_rho0(capsys, tmp_path):
    code, out, err = run_cli(capsys, "check", "vit-base", "--depth", "2", "--rho0", "0.3", "--json", "--no-figure",
                             "--out", tmp_path)
    assert code == 0, err
    result = json.loads(out)
    assert result["model"]["family"] == "vit" and result["rho"][0] == pytest.approx(0.3)


@pytest.mark.parametrize("option", ["--sigma-o2", "--sigma-w2-out"])
def test_new_architecture_options_reject_negative_values(capsys, option):
    code, _, err = run_cli(capsys, "propagate", "--depth", "2", option, "-1")
    one_line_error(code, err, option)


def test_check_with_collapsed_input_tokens(capsys, tmp_path):
    """rho0 = 1: beta_c = inf, zero query gradients; the report and figure still come out."""
    code, out, err = run_cli(capsys, "check", "bert-base", "--depth", "3", "--rho0", "1", "--out", tmp_path)
    assert code == 0, err
    assert "beta_c = inf" in out and "none helps" in out and "rank collapse sets in at layer 1" in out
    assert (tmp_path / "check-bert-base-uncased-depth=3-rho0=1.png").exists()


def test_check_simulate_compares_a_decoder_with_the_causal_gram_state(capsys, tmp_path):
    """--causal-theory gram / maps on a tiny reduced decoder (2 blocks, d = 64, one head, T = 64):
    the JSON names the theory and holds exactly the theory's numbers; a second run with the other
    theory resumes the stored simulation (no seed recomputed) and compares the same measurements."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from remprop.theory.causal import propagate_causal_gram
    from remprop.validation.hf_models import reduced_spec

    base = ["check", "smollm2-135m", "--seq-len", "64", "--depth", "2", "--width", "64", "--simulate", "--seeds",
            "2", "--sequences", "1", "--device", "cpu", "--json", "--out", tmp_path, "--name", "tiny"]
    code, out, err = run_cli(capsys, *base, "--causal-theory", "gram", "--gram-draws", "3")
    assert code == 0, err
    gram = json.loads(out)["simulation"]
    spec = reduced_spec(model_spec("smollm2-135m", seq_len=64), depth=2, width=64)
    expected = propagate_causal_gram(spec.architecture, spec.beta, 2, 64, spec.q0, spec.rho0, last=50, draws=3,
                                     norm_eps=spec.layer_norm_eps).rho
    assert gram["causal_theory"] == "gram" and gram["gram_draws"] == 3 and gram["theory_label"] == "causal Gram state"
    np.testing.assert_allclose(gram["theory"], expected, rtol=1e-12)
    cells = tmp_path / "tiny.simulation" / "cells"
    stamps = {p.name: p.stat().st_mtime_ns for p in cells.iterdir()}
    code, out, err = run_cli(capsys, *base, "--causal-theory", "maps", "--no-figure")
    assert code == 0, err
    maps = json.loads(out)["simulation"]
    assert maps["causal_theory"] == "maps" and maps["rho_mean"] == gram["rho_mean"]
    np.testing.assert_allclose(maps["theory"], json.loads(out)["rho_last_tokens"])
    assert {p.name: p.stat().st_mtime_ns for p in cells.iterdir()} == stamps
    # auto: the Gram state at this size (far below the work bound); the text report names it
    code, out, err = run_cli(capsys, *[a for a in base if a != "--json"], "--no-figure")
    assert code == 0, err
    assert "theory compared: causal Gram state" in out and "max |z|" in out


@pytest.mark.parametrize("argv, names", [
    (["bert-base", "--depth", "2", "--causal-theory", "gram"], ["--causal-theory", "not a causal"]),
    (["llama-3.2-1b", "--depth", "2", "--seq-len", "16384", "--causal-theory", "gram"], ["--causal-theory", "seq_len"]),
    (["bert-base", "--depth", "2", "--simulate", "--causal-theory", "gram"], ["--causal-theory", "not a causal"]),
    (["llama-3.2-1b", "--depth", "2", "--seq-len", "16384", "--simulate", "--causal-theory", "gram"],
     ["--causal-theory", "seq_len"]),
    (["smollm2-135m", "--depth", "2", "--simulate", "--causal-theory", "exact"], ["--causal-theory"]),
    (["smollm2-135m", "--depth", "2", "--simulate", "--gram-draws", "0"], ["--gram-draws"]),
])
def test_check_causal_theory_bad_combinations_are_one_line(capsys, tmp_path, argv, names):
    # refused before any diagnosis or simulation starts (T = 16384 is above the Gram state's 8192)
    code, _, err = run_cli(capsys, "check", *argv, "--out", tmp_path, "--no-figure")
    one_line_error(code, err, *names)
    assert not list(tmp_path.glob("*.simulation"))
