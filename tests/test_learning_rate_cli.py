"""The learning-rate ceiling on the command line: ``diagram --lr``, ``min-alpha --lr``, ``check``'s
``lr_ceiling`` (docs/theory.md section 20)."""
import json

import numpy as np
import pytest

from remprop.diagrams import TRAINABLE
from remprop.diagrams.learning_rate import LR_ABOVE_CEILING, LR_BELOW_FLOOR, alpha_star_at_rate
from remprop.theory import Architecture, RunSettings, learning_rate_ceiling, model_spec

from cli_checks import assert_one_line_error, run_cli

BETAS, ALPHAS = np.linspace(0.1, 2.0, 7), np.linspace(0.0, 3.0, 6)
DEPTH, WIDTH, STEPS, SEQ_LEN = 6, 64, 300, 64


def ceilings(alphas, betas, **changes):
    arch = Architecture(seq_len=SEQ_LEN, alpha_sa=np.asarray(alphas)[:, None], **changes)
    return learning_rate_ceiling(arch, np.asarray(betas)[None, :], depth=DEPTH, width=WIDTH, steps=STEPS).ceiling


def test_diagram_lr_marks_trainable_cells_above_the_ceiling(capsys, tmp_path):
    grid = ceilings(ALPHAS, BETAS)
    lr = float(np.median(grid[grid > 0]))       # some trainable cells above it, some below
    code, out, err = run_cli(capsys, "diagram", "--depth", DEPTH, "--seq-len", SEQ_LEN, "--beta", "0.1:2:7",
                             "--alpha", "0:3:6", "--lr", lr, "--width", WIDTH, "--steps", STEPS, "--json",
                             "--out", tmp_path)
    assert code == 0, err
    result = json.loads(out)["lr"]
    saved = json.loads((tmp_path / "trainability.lr.json").read_text())
    phase, theory_phase = np.array(saved["phase"]), np.load(tmp_path / "trainability.npz")["phase"]
    expected = (theory_phase == TRAINABLE) & (grid < lr)
    np.testing.assert_array_equal(phase == LR_ABOVE_CEILING, expected)
    floors = learning_rate_ceiling(Architecture(seq_len=SEQ_LEN, alpha_sa=np.asarray(ALPHAS)[:, None]),
                                   np.asarray(BETAS)[None, :], depth=DEPTH, width=WIDTH, steps=STEPS).floor
    slow = (theory_phase == TRAINABLE) & (floors > lr) & ~expected
    np.testing.assert_array_equal(phase == LR_BELOW_FLOOR, slow)
    assert result["below_floor"] == slow.sum()
    trainable = theory_phase == TRAINABLE
    assert result["ceiling_range"] == pytest.approx([grid[trainable].min(), grid[trainable].max()], rel=1e-12)
    assert "learning-rate ceiling over the trainable cells" in run_cli(
        capsys, "diagram", "--depth", DEPTH, "--seq-len", SEQ_LEN, "--beta", "0.1:2:7", "--alpha", "0:3:6", "--lr", lr,
        "--width", WIDTH, "--steps", STEPS, "--out", tmp_path)[1]
    np.testing.assert_allclose(saved["floor"], floors, rtol=1e-12)
    rest = ~expected & ~slow
    np.testing.assert_array_equal(phase[rest], theory_phase[rest])   # the rest keep their phase
    assert 0 < result["above_ceiling"] == expected.sum() < result["trainable_at_init"]
    assert result["labels"][str(LR_ABOVE_CEILING)] == "lr above ceiling"
    np.testing.assert_allclose(saved["ceiling"], grid, rtol=1e-12)
    code, out, err = run_cli(capsys, "diagram", "--depth", DEPTH, "--seq-len", SEQ_LEN, "--beta", "0.1:2:7",
                             "--alpha", "0:3:6", "--lr", lr, "--width", WIDTH, "--steps", STEPS, "--out", tmp_path)
    assert code == 0, err
    assert f"{expected.sum()} of {result['trainable_at_init']} cells trainable at initialisation" in out


@pytest.mark.parametrize("value", ["0", "-1e-3", "nan", "inf", "fast"])
@pytest.mark.parametrize("command", ["diagram", "min-alpha"])
def test_bad_lr_is_one_line(capsys, tmp_path, command, value):
    out_dir = ["--out", tmp_path] if command == "diagram" else []
    code, out, err = run_cli(capsys, command, "--seq-len", SEQ_LEN, "--depth", 2, f"--lr={value}", *out_dir)
    assert_one_line_error(code, err, "--lr")


def test_lr_needs_a_sequence_length(capsys, tmp_path):
    for command, out_dir in (("diagram", ["--out", tmp_path]), ("min-alpha", [])):
        code, out, err = run_cli(capsys, command, "--depth", 2, "--lr", "1e-3", *out_dir)
        assert_one_line_error(code, err, "--lr", "--seq-len")


def test_min_alpha_at_rate(capsys):
    """alpha* at lr is alpha*(L) where the ceiling there is already >= lr, else the alpha_SA at which the
    ceiling reaches lr (it grows with alpha_SA); inf where no alpha_SA up to alpha_max reaches it.
    At depth 24, d = 256, the stack ceiling binds at alpha_SA = 1.5; at beta 1.414, just below beta_c, the
    attention ceiling is below it at every alpha_SA."""
    depth, width = 24, 256

    def ceiling(alpha, beta):
        arch = Architecture(seq_len=SEQ_LEN, alpha_sa=alpha)
        return float(learning_rate_ceiling(arch, beta, depth=depth, width=width, steps=STEPS).ceiling)

    lr = ceiling(1.5, 0.5)
    code, out, err = run_cli(capsys, "min-alpha", "--depth", depth, "--seq-len", SEQ_LEN, "--beta", "0.5,0.3,1.414",
                             "--lr", lr, "--width", width, "--steps", STEPS, "--json")
    assert code == 0, err
    result = json.loads(out)
    at_lr, star = result["alpha_star_at_lr"], result["alpha_star"]
    assert at_lr[0] == pytest.approx(1.5, rel=1e-6) and at_lr[0] > star[0]
    assert ceiling(at_lr[1], 0.3) >= lr > ceiling(at_lr[1] * (1 - 1e-6), 0.3)
    # near beta_c the attention ceiling (the same at every alpha_SA for post-LN) is below lr: none reaches it
    assert at_lr[2] == "inf" and ceiling(1e3, 1.414) < lr
    # the command passes its own alpha*(L); the function computing it gives the same answer
    run = RunSettings(Architecture(seq_len=SEQ_LEN), np.array([0.5, 0.3]), depth)
    python = alpha_star_at_rate(run, lr, width, STEPS)
    assert list(python) == pytest.approx(at_lr[:2], rel=1e-12)
    code, out, err = run_cli(capsys, "min-alpha", "--depth", DEPTH, "--seq-len", SEQ_LEN, "--lr", 1.0, "--json")
    assert code == 0, err
    assert json.loads(out)["alpha_star_at_lr"] == "inf"
    small = float(ceilings([0.0], [0.5])[0, 0]) / 2   # below the ceiling everywhere: alpha*(L) itself
    code, out, err = run_cli(capsys, "min-alpha", "--depth", DEPTH, "--seq-len", SEQ_LEN, "--lr", small,
                             "--width", WIDTH, "--steps", STEPS, "--json")
    assert json.loads(out)["alpha_star_at_lr"] == json.loads(out)["alpha_star"]


TINY_BERT = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
             "intermediate_size": 128, "max_position_embeddings": 128, "vocab_size": 1000,
             "initializer_range": 0.02, "_name_or_path": "tiny-bert"}


def test_check_reports_the_ceiling(capsys, tmp_path):
    config = tmp_path / "bert.json"
    config.write_text(json.dumps(TINY_BERT))
    spec = model_spec(config)
    run = spec.settings
    expected = learning_rate_ceiling(run.arch, run.beta, depth=run.depth, width=spec.width, steps=2000, q0=run.q0,
                                     rho0=run.rho0, seq_len=spec.seq_len)
    code, out, err = run_cli(capsys, "check", config, "--steps", 2000, "--max-depth", 20, "--json", "--no-figure",
                             "--out", tmp_path)
    assert code == 0, err
    result = json.loads(out)["lr_ceiling"]
    assert result["value"] == pytest.approx(float(expected.ceiling), rel=1e-12)
    assert result["binding"] == str(expected.binding) and result["steps"] == 2000 and result["width"] == 64
    code, out, err = run_cli(capsys, "check", config, "--max-depth", 20, "--no-figure", "--out", tmp_path)
    assert code == 0, err
    assert "lr ceiling       eta_max = " in out and "over 10000 steps at d = 64" in out


def test_check_gives_the_band_the_measured_range_and_a_verdict_at_the_users_rate(capsys, tmp_path):
    """The ceiling comes with its measured band, says in the line and the JSON where the model lies
    outside the range it was checked in, and with --lr gives below / near / above by the band."""
    from remprop.theory.learning_rate import CEILING_BAND, VALIDATED_RANGE

    config = tmp_path / "bert.json"
    config.write_text(json.dumps(TINY_BERT))      # d = 64, inside the measured widths
    verdicts = {}
    for factor in (0.5 * CEILING_BAND[0], 1.0, 2.0 * CEILING_BAND[1]):
        code, out, err = run_cli(capsys, "check", config, "--steps", 1000, "--max-depth", 20, "--json", "--no-figure",
                                 "--out", tmp_path, "--name", "probe")
        value = json.loads(out)["lr_ceiling"]["value"]
        code, out, err = run_cli(capsys, "check", config, "--steps", 1000, "--max-depth", 20, "--json", "--no-figure",
                                 "--lr", factor * value, "--out", tmp_path, "--name", "probe")
        assert code == 0, err
        result = json.loads(out)["lr_ceiling"]
        assert result["band"] == pytest.approx([CEILING_BAND[0] * value, CEILING_BAND[1] * value], rel=1e-12)
        assert result["validated"] and result["outside"] == [] and result["lr"] == pytest.approx(factor * value)
        verdicts[factor] = result["verdict"]
    assert list(verdicts.values()) == ["below", "near", "above"]
    # 10^5 steps and a width past the widest measured: not validated, and the line says why
    code, out, err = run_cli(capsys, "check", config, "--steps", 100000, "--width", 2048, "--heads", 2,
                             "--max-depth", 20, "--no-figure", "--lr", 1e-4, "--out", tmp_path)
    assert code == 0, err
    line = next(line for line in out.splitlines() if line.startswith("lr ceiling"))
    assert "NOT validated" in line and f"above the widest measured, {VALIDATED_RANGE['width'][1]}" in line
    assert "steps 100000 above the largest measured" in line and "at lr 0.0001: " in line


@pytest.mark.parametrize("value", ["0", "-1e-3", "nan", "inf", "fast"])
def test_check_refuses_a_bad_lr_in_one_line(capsys, tmp_path, value):
    config = tmp_path / "bert.json"
    config.write_text(json.dumps(TINY_BERT))
    code, out, err = run_cli(capsys, "check", config, "--lr", value, "--no-figure", "--out", tmp_path)
    assert_one_line_error(code, err, "--lr")


def test_check_reports_the_recipe_it_assumes_and_names_where_it_differs_from_the_measured_runs(capsys, tmp_path):
    """--warmup, --batch-tokens, --beta2 and --schedule are the recipe of the ceiling: printed in the
    line and the JSON, and each one unlike the measured runs' makes the ceiling an extrapolation."""
    config = tmp_path / "bert.json"
    config.write_text(json.dumps(TINY_BERT))
    code, out, err = run_cli(capsys, "check", config, "--steps", 1000, "--max-depth", 20, "--json", "--no-figure",
                             "--out", tmp_path)
    default = json.loads(out)["lr_ceiling"]
    assert default["recipe"] == {"warmup_steps": 50, "batch_tokens": None, "beta2": 0.999, "schedule": "linear"}
    assert default["validated"]
    code, out, err = run_cli(capsys, "check", config, "--steps", 1000, "--warmup", 10, "--batch-tokens", 4096,
                             "--beta2", 0.9, "--schedule", "cosine", "--max-depth", 20, "--json", "--no-figure",
                             "--out", tmp_path)
    assert code == 0, err
    result = json.loads(out)["lr_ceiling"]
    assert result["recipe"] == {"warmup_steps": 10, "batch_tokens": 4096, "beta2": 0.9, "schedule": "cosine"}
    assert result["value"] == default["value"]       # not terms of the ceiling: reported, not modelled
    # warm-up, batch and beta2 lie outside the measured runs; the cosine decay was measured (no move)
    assert not result["validated"] and len(result["outside"]) == 3, result["outside"]
    assert not any("cosine" in reason for reason in result["outside"])


@pytest.mark.parametrize("options, option", [(("--steps", 100, "--warmup", 200), "--warmup"),
                                             (("--beta2", 1.0), "--beta2"), (("--beta2", 0), "--beta2"),
                                             (("--batch-tokens", -5), "--batch-tokens"),
                                             (("--schedule", "step"), "--schedule")])
def test_check_refuses_a_bad_recipe_in_one_line(capsys, tmp_path, options, option):
    config = tmp_path / "bert.json"
    config.write_text(json.dumps(TINY_BERT))
    code, out, err = run_cli(capsys, "check", config, *options, "--no-figure", "--out", tmp_path)
    assert_one_line_error(code, err, option)
