"""`remprop validate` end to end, and the paper-figure functions at tiny sizes."""
import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")

from remprop.cli import main  # noqa: E402
from remprop.validation import (FIGURES, FigureResult, SimulationSettings, figure_1d, figure_1e, figure_2,  # noqa: E402
                                figure_5)

torch.set_num_threads(min(2, torch.get_num_threads()))

TINY = ["--depth", "3", "--width", "32", "--sim-seq-len", "16", "--seeds", "2", "--sequences", "2", "--device", "cpu"]


def test_validate_parser_imports_no_torch():
    code = ("import sys; from remprop.cli import build_parser; "
            "build_parser().parse_args(['validate', '--heads', '2', '--sim-seq-len', '8']); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_validate_writes_png_and_json(tmp_path, capsys):
    assert main(["validate", *TINY, "--out", str(tmp_path), "--alpha", "1.3", "--inputs", "synthetic",
                 "--rho0", "0.2", "--no-progress"]) == 0
    png, js = tmp_path / "validate.png", tmp_path / "validate.json"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    data = json.loads(js.read_text())
    assert data["settings"]["arch"]["alpha_sa"] == 1.3 and data["settings"]["inputs"] == "synthetic"
    assert len(data["table"]) == 4 and len(data["per_sequence"]["cosine"]) == 4
    errors = [row["error"] for row in data["table"][1:]]
    assert data["max_abs_error"] == pytest.approx(max(errors))
    out = capsys.readouterr().out
    assert "max |theory - measured cosine|" in out and str(png) in out


def test_remprop_validate_json_through_the_main_command_line(tmp_path, capsys):
    status = main(["validate", *TINY, "--out", str(tmp_path / "run"), "--name", "tiny", "--json",
                   "--norm", "pre", "--attention", "gain-controlled"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["settings"]["arch"]["norm"] == "pre"
    assert summary["settings"]["arch"]["attention"] == "gain-controlled"
    assert (tmp_path / "run" / "tiny.png").exists() and (tmp_path / "run" / "tiny.json").exists()
    assert np.isfinite(summary["max_abs_error"])


def test_validate_simulates_the_heads_of_the_architecture(tmp_path, capsys):
    """--heads and --qk-scaling reach the simulation through the Architecture (the stack takes its heads
    from it: --heads 5 with width 32 is refused by the stack, see the bad inputs below)."""
    status = main(["validate", *TINY, "--out", str(tmp_path), "--json", "--heads", "4", "--qk-scaling", "head",
                   "--inputs", "synthetic", "--no-progress"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    settings = json.loads(captured.out)["settings"]
    assert settings["arch"]["heads"] == 4 and settings["arch"]["qk_scaling"] == "head"


def test_validate_theory_option_and_the_simplex_distance(tmp_path, capsys):
    """--theory picks the compared theory; the report says it and how far the inputs are from a simplex."""
    status = main(["validate", *TINY, "--out", str(tmp_path), "--theory", "mean", "--no-progress"])
    out = capsys.readouterr().out
    assert status == 0 and "theory: mean-cosine maps" in out and "from a simplex" in out
    assert json.loads((tmp_path / "validate.json").read_text())["settings"]["theory"] == "mean"
    status = main(["validate", *TINY, "--out", str(tmp_path), "--theory", "sampled", "--gram-draws", "2", "--json"])
    settings = json.loads(capsys.readouterr().out)["settings"]
    assert status == 0 and settings["theory"] == "sampled" and settings["gram_draws"] == 2
    assert settings["simplex_distance"] > 0  # text inputs (the default) are not a simplex


@pytest.mark.parametrize("argv, name", [
    (["--theory", "gram", "--attention", "gain-controlled"], "--theory"), (["--gram-draws", "0"], "--gram-draws"),
    (["--seeds", "0"], "seeds"), (["--beta", "-1"], "beta"), (["--heads", "5"], "--heads"),
    (["--inputs", "synthetic", "--rho0", "3"], "rho0"), (["--device", "tpu"], "device"),
    (["--threads", "0"], "threads"), (["--name", "a/b"], "name"),
    (["--sim-seq-len", "1"], "--sim-seq-len"), (["--theory-seq-len", "1"], "--theory-seq-len"),
    (["--seq-len", "1"], "--seq-len"),
])
def test_bad_input_is_one_line_with_status_2(argv, name, tmp_path, capsys):
    status = main(["validate", *TINY, "--out", str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and name in err and "Traceback" not in err


def test_unwritable_output_directory_is_reported(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    status = main(["validate", *TINY, "--out", str(blocker)])
    err = capsys.readouterr().err
    assert status == 2 and "out" in err and len(err.strip().splitlines()) == 1


def test_paper_figures_at_tiny_sizes(tmp_path):
    small = dict(sim=SimulationSettings(width=32, seq_len=16, seeds=1, sequences=2, device="cpu"))
    results = [
        figure_1d(depth=3, **small), figure_1e(depth=2, **small),
        figure_2(betas=[0.5, 2.0, 4.0], input_cosines=(0.2, 0.7), **small),
        figure_5(betas=[0.5, 1.0, 3.0], **small),
    ]
    assert set(FIGURES) == {"1d", "1e", "2", "5"}
    for result in results:
        assert isinstance(result, FigureResult)
        paths = result.save(tmp_path)
        assert open(paths["png"], "rb").read(4) == b"\x89PNG"
        data = json.loads(open(paths["json"]).read())
        assert data["figure"] == result.name
        assert np.isfinite(data["max_abs_error"] if not isinstance(data["max_abs_error"], dict)
                           else list(data["max_abs_error"].values())).all()
    fig1d = results[0].data
    assert set(fig1d["max_abs_error"]) == {"1", "1.3"} and len(fig1d["comparisons"][0]["table"]) == 4
    fig2 = results[2].data
    assert np.shape(fig2["measured"]["cosine"]) == (2, 3) and np.shape(fig2["theory"]["cosine"]) == (2, 3)
    # theory of Fig. 5 is the asymptotic REM participation ratio max(0, 1 - sqrt(2)/beta)
    np.testing.assert_allclose(results[3].data["theory"]["y2"][0], [0.0, 0.0, 1 - np.sqrt(2) / 3])
