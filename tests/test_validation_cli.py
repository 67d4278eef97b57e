"""`remprop validate` end to end, and the paper-figure functions at tiny sizes."""
import argparse
import json
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")

from remprop.validation import cli as validation_cli  # noqa: E402
from remprop.validation.figures import FIGURES, FigureResult, figure_1d, figure_1e, figure_2, figure_5  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))

TINY = ["--depth", "3", "--width", "32", "--seq-len", "16", "--seeds", "2", "--sequences", "2", "--device", "cpu"]


def test_cli_module_imports_no_torch():
    code = ("import sys, argparse; import remprop.validation.cli as c; "
            "c.add_arguments(argparse.ArgumentParser()); print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_run_with_a_namespace_writes_png_and_json(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    validation_cli.add_arguments(parser)
    args = parser.parse_args(TINY + ["--out", str(tmp_path), "--alpha", "1.3", "--inputs", "synthetic",
                                     "--rho0", "0.2", "--no-progress"])
    assert validation_cli.run(args) == 0
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
    from remprop.cli import main

    status = main(["validate", *TINY, "--out", str(tmp_path / "run"), "--name", "tiny", "--json",
                   "--norm", "pre", "--attention", "gain-controlled"])
    captured = capsys.readouterr()
    assert status == 0, captured.err
    summary = json.loads(captured.out)
    assert summary["settings"]["arch"]["norm"] == "pre"
    assert summary["settings"]["arch"]["attention"] == "gain-controlled"
    assert (tmp_path / "run" / "tiny.png").exists() and (tmp_path / "run" / "tiny.json").exists()
    assert np.isfinite(summary["max_abs_error"])


@pytest.mark.parametrize("argv, name", [
    (["--seeds", "0"], "seeds"), (["--beta", "-1"], "beta"), (["--heads", "5"], "heads"),
    (["--inputs", "synthetic", "--rho0", "3"], "rho0"), (["--device", "tpu"], "device"),
    (["--threads", "0"], "threads"), (["--name", "a/b"], "name"),
])
def test_bad_input_is_one_line_with_status_2(argv, name, tmp_path, capsys):
    from remprop.cli import main

    status = main(["validate", *TINY, "--out", str(tmp_path), *argv])
    err = capsys.readouterr().err
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and name in err and "Traceback" not in err


def test_unwritable_output_directory_is_reported(tmp_path, capsys):
    from remprop.cli import main

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    status = main(["validate", *TINY, "--out", str(blocker)])
    err = capsys.readouterr().err
    assert status == 2 and "out" in err and len(err.strip().splitlines()) == 1


def test_paper_figures_at_tiny_sizes(tmp_path):
    small = dict(width=32, seq_len=16, seeds=1, sequences=2, device="cpu")
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
