"""The ``remprop`` command line: outputs, JSON, exit codes and every bad-input path.

Most cases call :func:`remprop.cli.main` in-process (fast); a few run the installed
``remprop`` script and ``python -m remprop`` in a subprocess to check the real entry
points, exit statuses and that no traceback ever reaches the user.
"""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import remprop
from remprop.cli import COMMANDS, add_architecture_arguments, architecture_from_args, build_parser, main
from remprop.theory import (ACTIVATIONS, ATTENTIONS, BLOCK_FORMS, MLPS, NORM_TYPES, NORMS, POSITIONS, QK_SCALINGS, Architecture,
                            propagate)

# Small problems keep the suite fast; the CLI adds no numerics of its own.
DEPTH = 8


def run_cli(capsys, *argv):
    """main(argv) -> (exit status, stdout, stderr); SystemExit is folded into the status."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exit_:  # main should return, but accept an exit too
        code = exit_.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line_error(code, err, *names, status=2):
    """Exit status ``status``, exactly one line on stderr naming every ``names``, no traceback."""
    assert code == status, err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for name in names:
        assert name in lines[0], lines[0]


def json_float(value):
    """Numbers of the JSON outputs: non-finite ones are the strings "inf", "-inf", "nan"."""
    return float(value)


# -- help, version, no command -----------------------------------------------------------
def test_help_lists_every_command_and_the_json_convention(capsys):
    code, out, err = run_cli(capsys, "--help")
    assert code == 0 and err == ""
    for command in COMMANDS:
        assert command in out
    assert '"inf"' in out  # the documented JSON spelling of infinity


@pytest.mark.parametrize("command", COMMANDS)
def test_each_command_has_help(capsys, command):
    """Every command, validate included, shows its help without the validation extra."""
    code, out, _ = run_cli(capsys, command, "--help")
    assert code == 0
    assert out.startswith(f"usage: remprop {command}")


def test_version_is_the_package_version(capsys):
    code, out, _ = run_cli(capsys, "--version")
    assert code == 0
    assert out.strip() == f"remprop {remprop.__version__}"


def test_missing_command_is_a_one_line_usage_error(capsys):
    code, out, err = run_cli(capsys)
    assert_one_line_error(code, err, "command")
    assert out == ""


# -- architecture options -----------------------------------------------------------------
def test_architecture_choices_come_from_the_theory_package():
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices["propagate"]
    choices = {a.dest: tuple(a.choices) for a in sub._actions if a.choices}
    assert choices == {"norm": tuple(NORMS), "attention": tuple(ATTENTIONS), "activation": tuple(ACTIVATIONS),
                       "qk_scaling": tuple(QK_SCALINGS), "norm_type": tuple(NORM_TYPES), "mlp": tuple(MLPS),
                       "positions": tuple(POSITIONS), "block_form": tuple(BLOCK_FORMS)}


def test_architecture_helpers_round_trip_every_field():
    import argparse

    parser = argparse.ArgumentParser()
    add_architecture_arguments(parser)
    args = parser.parse_args(["--norm", "pre", "--attention", "gain-controlled", "--activation", "linear",
                              "--sigma-w2", "0.3", "--sigma-b2", "0.01", "--sigma-v2", "0.4",
                              "--alpha", "0.7", "--alpha-mlp", "0.9", "--heads", "4", "--qk-scaling", "head",
                              "--seq-len", "64"])
    arch = architecture_from_args(args)
    assert arch.to_dict() == Architecture(norm="pre", attention="gain-controlled", activation="linear",
                                          sigma_w2=0.3, sigma_b2=0.01, sigma_v2=0.4, alpha_sa=0.7,
                                          alpha_mlp=0.9, heads=4, qk_scaling="head", seq_len=64).to_dict()
    # no options: the class defaults (BERT)
    assert architecture_from_args(parser.parse_args([])).to_dict() == Architecture().to_dict()
    # the output projection and the second MLP layer's variance
    args = parser.parse_args(["--sigma-o2", "0.3", "--sigma-w2-out", "1.2"])
    assert architecture_from_args(args).to_dict() == Architecture(sigma_o2=0.3, sigma_w2_out=1.2).to_dict()


def test_propagate_with_output_projection_and_second_layer_variance(capsys):
    code, out, err = run_cli(capsys, "propagate", "--depth", "4", "--sigma-o2", "0.3", "--sigma-w2-out", "1.2",
                             "--activation", "gelu", "--json")
    assert code == 0, err
    expected = propagate(Architecture(sigma_o2=0.3, sigma_w2_out=1.2, activation="gelu"), 0.5, 4)
    np.testing.assert_allclose(json.loads(out)["rho"], expected.rho, rtol=1e-12)


# -- propagate ---------------------------------------------------------------------------
NON_DEFAULT = ["--norm", "pre", "--attention", "gain-controlled", "--sigma-w2", "0.3", "--sigma-b2", "0.01",
               "--sigma-v2", "0.4", "--alpha", "0.7", "--alpha-mlp", "0.9", "--q0", "2", "--rho0", "0.1"]


def test_propagate_json_forwards_every_option(capsys):
    """Each option must reach the library: the JSON equals a direct call with the same inputs."""
    code, out, err = run_cli(capsys, "propagate", "--beta", "0.8", "--depth", DEPTH, "--json", *NON_DEFAULT)
    assert code == 0, err
    data = json.loads(out)
    arch = Architecture(norm="pre", attention="gain-controlled", sigma_w2=0.3, sigma_b2=0.01, sigma_v2=0.4,
                        alpha_sa=0.7, alpha_mlp=0.9)
    expected = propagate(arch, 0.8, DEPTH, q0=2.0, rho0=0.1)
    assert data["layer"] == list(range(DEPTH + 1))
    # JSON round-trips doubles exactly (repr), so equality is exact
    np.testing.assert_array_equal([json_float(v) for v in data["q"]], expected.q)
    np.testing.assert_array_equal([json_float(v) for v in data["p"]], expected.p)
    np.testing.assert_array_equal([json_float(v) for v in data["rho"]], expected.rho)
    np.testing.assert_array_equal([json_float(v) for v in data["beta_critical"]], expected.beta_critical)
    assert data["architecture"] == arch.to_dict()
    assert (data["beta"], data["depth"], data["q0"], data["rho0"]) == (0.8, DEPTH, 2.0, 0.1)


def test_propagate_table_has_one_row_per_layer(capsys):
    code, out, _ = run_cli(capsys, "propagate", "--beta", "0.5", "--depth", DEPTH)
    assert code == 0
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:4] == ["layer", "q", "p", "rho"])
    rows = [line.split() for line in lines[start + 2:start + 3 + DEPTH]]
    assert [int(r[0]) for r in rows] == list(range(DEPTH + 1))
    expected = propagate(Architecture(), 0.5, DEPTH).rho
    # the table prints 8 significant digits
    np.testing.assert_allclose([float(r[3]) for r in rows], expected, rtol=1e-7, atol=1e-12)


# -- min-alpha ---------------------------------------------------------------------------
def final_rho(capsys, alpha, beta, depth, *extra):
    code, out, err = run_cli(capsys, "propagate", "--beta", beta, "--alpha", repr(alpha), "--depth", depth,
                             "--json", *extra)
    assert code == 0, err
    return json_float(json.loads(out)["rho"][-1])


@pytest.mark.parametrize("extra", [[], ["--norm", "pre", "--sigma-w2", "0.3"]])
def test_min_alpha_json_is_the_smallest_trainable_alpha(capsys, extra):
    """alpha* from `min-alpha` sits on the threshold of the rho that `propagate` reports.

    The library bisects to 1e-8 in alpha; final rho decreases with alpha_SA (a larger
    identity path keeps more of the input's decorrelation), so alpha* (1 + 1e-5) must be
    trainable and alpha* (1 - 1e-5) rank-collapsed.
    """
    threshold = 0.9
    code, out, err = run_cli(capsys, "min-alpha", "--depth", DEPTH, "--beta", "0.5", "--threshold", threshold,
                             "--json", *extra)
    assert code == 0, err
    data = json.loads(out)
    alpha_star = json_float(data["alpha_star"])
    assert math.isfinite(alpha_star) and alpha_star > 0
    assert data["beta"] == 0.5 and data["depth"] == DEPTH and data["threshold"] == threshold
    assert final_rho(capsys, alpha_star * (1 + 1e-5), 0.5, DEPTH, *extra) <= threshold
    assert final_rho(capsys, alpha_star * (1 - 1e-5), 0.5, DEPTH, *extra) > threshold


def test_min_alpha_several_betas_give_a_list(capsys):
    code, out, err = run_cli(capsys, "min-alpha", "--depth", DEPTH, "--beta", "0.2,0.5,1", "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["beta"] == [0.2, 0.5, 1.0]
    assert isinstance(data["alpha_star"], list) and len(data["alpha_star"]) == 3
    # a range spec gives the same numbers as a comma list
    code, out2, _ = run_cli(capsys, "min-alpha", "--depth", DEPTH, "--beta", "0.2:1:5", "--json")
    data2 = json.loads(out2)
    assert data2["beta"] == pytest.approx([0.2, 0.4, 0.6, 0.8, 1.0], rel=1e-15)
    # both ends of a range are exact, so beta = 0.2 and beta = 1 give identical answers
    assert data2["alpha_star"][0] == data["alpha_star"][0]
    assert data2["alpha_star"][-1] == data["alpha_star"][-1]


def test_min_alpha_impossible_is_the_string_inf(capsys):
    """No skip strength gets below the input cosine: every map here raises rho.

    With beta < beta_c the attention output is fully correlated, ReLU's kernel satisfies
    f(c) >= c and biases add overlap, so final rho >= rho0 = 0.5 > 0.4 for every alpha.
    """
    code, out, err = run_cli(capsys, "min-alpha", "--depth", DEPTH, "--beta", "0.5", "--rho0", "0.5",
                             "--threshold", "0.4", "--json")
    assert code == 0, err
    assert json.loads(out)["alpha_star"] == "inf"
    code, out, _ = run_cli(capsys, "min-alpha", "--depth", DEPTH, "--beta", "0.5", "--rho0", "0.5",
                           "--threshold", "0.4")
    assert code == 0 and "inf" in out


def test_min_alpha_table_is_readable(capsys):
    code, out, _ = run_cli(capsys, "min-alpha", "--depth", DEPTH, "--beta", "0.3,0.6")
    assert code == 0
    header = next(line for line in out.splitlines() if "alpha*" in line and "beta" in line)
    rows = out.splitlines()[out.splitlines().index(header) + 2:][:2]
    assert [float(r.split()[0]) for r in rows] == [0.3, 0.6]


# -- diagram -----------------------------------------------------------------------------
SMALL_GRID = ["--beta", "0.5:2:4", "--alpha", "0:2:3", "--depth", DEPTH]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def test_diagram_writes_png_npz_json_and_prints_beta_c(capsys, tmp_path):
    out_dir = tmp_path / "new" / "dir"  # created on demand
    code, out, err = run_cli(capsys, "diagram", *SMALL_GRID, "--out", out_dir, "--no-progress")
    assert code == 0, err
    png, npz, meta = (out_dir / f"trainability.{ext}" for ext in ("png", "npz", "json"))
    assert png.read_bytes()[:8] == PNG_SIGNATURE
    with np.load(npz) as data:
        arrays = dict(data)
    assert any(a.shape == (3, 4) for a in arrays.values())  # (len(alphas), len(betas))
    json.loads(meta.read_text())
    # post-LN with orthogonal inputs: beta_c = sqrt(2) (docs/theory.md section 3), printed to 6 digits
    assert f"beta_c = {math.sqrt(2):.6g}" in out
    assert "alpha*" in out and str(png) in out


def test_diagram_json_summary(capsys, tmp_path):
    code, out, err = run_cli(capsys, "diagram", *SMALL_GRID, "--out", tmp_path, "--name", "small", "--json",
                             "--norm", "pre", "--threshold", "0.9")
    assert code == 0, err
    data = json.loads(out)
    assert data["beta"] == [0.5, 1.0, 1.5, 2.0] and data["alpha"] == [0.0, 1.0, 2.0]
    assert len(data["alpha_star"]) == 4 and len(data["beta_critical"]) == 4
    assert data["architecture"]["norm"] == "pre" and data["threshold"] == 0.9
    assert sorted(Path(f).name for f in data["files"]) == ["small.json", "small.npz", "small.png"]
    assert all(Path(f).exists() for f in data["files"])


def test_diagram_refuses_an_unwritable_output_directory(capsys, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    code, out, err = run_cli(capsys, "diagram", *SMALL_GRID, "--out", blocker / "sub")
    assert_one_line_error(code, err, "--out")
    assert out == ""


# -- figures: forwarding of the options is tested in tests/test_all_figures.py ----------


# -- validate ---------------------------------------------------------------------------
def test_validate_and_sweep_without_torch_are_one_line_and_status_2(tmp_path):
    """Without torch the parsers still build; running validate or sweep is one line, status 2."""
    code = ("import sys\n"
            "sys.modules['torch'] = None  # import torch now raises ModuleNotFoundError, as without the extra\n"
            "from remprop.cli import main\n"
            "codes = [main(['validate', '--depth', '2', '--out', sys.argv[1] + '/v']),\n"
            "         main(['sweep', '--depth', '2', '--out', sys.argv[1] + '/s']),\n"
            "         main(['propagate', '--depth', '2', '--json'])]\n"
            "heavy = 'torch' in sys.modules and sys.modules['torch'] is not None\n"
            "print(codes, heavy, file=sys.stderr)\n")
    result = run_process(sys.executable, "-c", code, tmp_path, jit=False)
    lines = result.stderr.strip().splitlines()
    assert lines[-1] == "[2, 2, 0] False", result.stderr
    assert len(lines) == 3 and "Traceback" not in result.stderr
    for prog, line in zip(("remprop validate", "remprop sweep"), lines):
        assert line.startswith(f"{prog}: error: the validation extra is needed") and "torch" in line, line


def test_validate_missing_torch_at_run_time_is_one_line_and_status_2(capsys, monkeypatch, tmp_path):
    """An ImportError of torch while the simulation runs is reported the same way; an ImportError
    inside remprop is a bug, reported as unexpected (status 1), never as a missing extra."""
    pytest.importorskip("torch")
    import remprop.validation as validation

    def compare(*args, **kwargs):
        raise ModuleNotFoundError("No module named 'torch'", name="torch")

    monkeypatch.setattr(validation, "compare", compare)
    code, out, err = run_cli(capsys, "validate", "--depth", "2", "--out", tmp_path, "--no-progress")
    assert_one_line_error(code, err, "remprop validate", "validation extra", "torch")

    def broken(*args, **kwargs):
        raise ImportError("cannot import name 'x' from 'remprop.validation.y'", name="remprop.validation.y")

    monkeypatch.setattr(validation, "compare", broken)
    code, out, err = run_cli(capsys, "validate", "--depth", "2", "--out", tmp_path, "--no-progress")
    assert_one_line_error(code, err, "unexpected ImportError", "remprop.validation.y", status=1)
    assert "validation extra" not in err


def test_validate_simulates_on_one_thread_per_free_core_unless_told(capsys, monkeypatch, tmp_path):
    """Without --threads, torch simulates on the cores the load average leaves free (2 at load 0.2 on two
    cores, 1 at load 1 or 6); --threads N is kept whatever the load."""
    torch = pytest.importorskip("torch")
    import remprop.validation as validation

    seen = []

    def compare(*args, **kwargs):
        seen.append(torch.get_num_threads())
        raise ValueError("stopped before simulating")

    monkeypatch.setattr(validation, "compare", compare)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    for load, extra in ((0.2, ()), (1.0, ()), (6.0, ()), (6.0, ("--threads", "2"))):
        monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
        code, _, err = run_cli(capsys, "validate", "--depth", "2", "--out", tmp_path, "--no-progress", *extra)
        assert code == 2 and "stopped before simulating" in err, err
    assert seen == [2, 1, 1, 2]


def test_validate_keeps_the_two_sequence_lengths_as_overrides_of_seq_len(capsys):
    """validate has both T's (simulated, theory): --seq-len sets both, the two others one each;
    sweep has only the simulated one, --seq-len."""
    code, out, _ = run_cli(capsys, "validate", "--help")
    assert code == 0 and "--sim-seq-len" in out and "--theory-seq-len" in out and "--seq-len T" in out
    code, out, _ = run_cli(capsys, "sweep", "--help")
    assert code == 0 and "--seq-len T" in out and "--sim-seq-len" not in out and "--theory-seq-len" not in out


# -- bad input: one line, status 2, names the parameter --------------------------------------
BAD_INPUTS = [
    (["min-alpha", "--depth", "0"], "--depth"),
    (["min-alpha", "--depth", "2.5"], "--depth"),
    (["min-alpha", "--depth"], "--depth"),
    (["min-alpha", "--beta", "-1"], "--beta"),
    (["min-alpha", "--beta", "0"], "--beta"),
    (["min-alpha", "--beta", "nan"], "--beta"),
    (["min-alpha", "--beta", "inf"], "--beta"),
    (["min-alpha", "--beta", "0.5,abc"], "--beta"),
    (["min-alpha", "--beta", "0.5,-0.1"], "--beta"),
    (["min-alpha", "--threshold", "1"], "--threshold"),
    (["min-alpha", "--threshold", "0"], "--threshold"),
    (["min-alpha", "--threshold", "1.5"], "--threshold"),
    (["min-alpha", "--threshold", "nan"], "--threshold"),
    (["min-alpha", "--sigma-w2", "-0.1"], "--sigma-w2"),
    (["min-alpha", "--sigma-b2", "-1e-4"], "--sigma-b2"),
    (["min-alpha", "--sigma-v2", "nan"], "--sigma-v2"),
    (["min-alpha", "--alpha-mlp", "-1"], "--alpha-mlp"),
    (["min-alpha", "--activation", "swish-like"], "--activation"),
    (["min-alpha", "--seq-len", "1"], "--seq-len"),
    (["min-alpha", "--seq-len", "12.5"], "--seq-len"),
    (["min-alpha", "--theory-seq-len", "128"], "--seq-len"),  # renamed: the theory's T is --seq-len
    (["propagate", "--sim-seq-len", "128"], "--seq-len"),  # nothing is simulated here
    (["min-alpha", "--heads", "0"], "--heads"),
    (["min-alpha", "--heads", "2.5"], "--heads"),
    (["min-alpha", "--qk-scaling", "layer"], "--qk-scaling"),
    (["sweep", "--theory-seq-len", "64"], "--seq-len"),  # sweep's theory T is set by --theory
    (["sweep", "--seq-len", "1"], "--seq-len"),
    (["sweep", "--heads", "0"], "--heads"),
    (["validate", "--sim-seq-len", "1"], "--sim-seq-len"),
    (["validate", "--theory-seq-len", "1"], "--theory-seq-len"),
    (["validate", "--seeds", "0"], "--seeds"),
    (["validate", "--threads", "0"], "--threads"),
    (["min-alpha", "--norm", "middle"], "--norm"),
    (["min-alpha", "--attention", "linear"], "--attention"),
    (["min-alpha", "--alpha", "1"], "--alpha"),  # solved for, not an option here
    (["min-alpha", "--q0", "0"], "--q0"),
    (["min-alpha", "--rho0", "1.5"], "--rho0"),
    (["min-alpha", "--no-such-option"], "--no-such-option"),
    (["propagate", "--alpha", "-1"], "--alpha"),
    (["propagate", "--alpha", "abc"], "--alpha"),
    (["propagate", "--alpha-mlp", "inf"], "--alpha-mlp"),
    (["propagate", "--beta", "0.5,1"], "--beta"),
    (["propagate", "--depth", "-3"], "--depth"),
    (["diagram", "--beta", "0:3:10"], "--beta"),  # contains beta = 0
    (["diagram", "--beta", "1:2"], "--beta"),
    (["diagram", "--beta", "1:2:x"], "--beta"),
    (["diagram", "--alpha", "1:2:0"], "--alpha"),
    (["diagram", "--alpha", "-1,1"], "--alpha"),
    (["diagram", "--threshold", "2"], "--threshold"),
    (["no-such-command"], "no-such-command"),
]


@pytest.mark.parametrize("argv, option", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_naming_the_option(capsys, argv, option):
    code, out, err = run_cli(capsys, *argv)
    assert_one_line_error(code, err, option)
    assert out == ""


def test_library_value_error_is_one_line_status_2(capsys, monkeypatch):
    """A ValueError raised by the library (here injected) becomes one line and status 2."""
    import remprop.theory

    def reject(*args, **kwargs):
        raise ValueError("beta must be > 0,\n got something odd")

    monkeypatch.setattr(remprop.theory, "propagate", reject)
    code, out, err = run_cli(capsys, "propagate")
    assert_one_line_error(code, err, "remprop propagate", "beta must be > 0", "--beta")


def test_unexpected_error_is_one_line_status_1_and_debug_shows_it(capsys, monkeypatch):
    import remprop.theory

    def crash(*args, **kwargs):
        raise RuntimeError("boom\nsecond line")

    monkeypatch.setattr(remprop.theory, "propagate", crash)
    monkeypatch.delenv("REMPROP_DEBUG", raising=False)
    code, out, err = run_cli(capsys, "propagate")
    assert_one_line_error(code, err, "RuntimeError", "boom", "REMPROP_DEBUG", status=1)
    monkeypatch.setenv("REMPROP_DEBUG", "1")
    with pytest.raises(RuntimeError, match="boom"):
        main(["propagate"])


# -- real entry points (subprocesses) ------------------------------------------------------
SCRIPT = Path(sys.executable).with_name("remprop")


def run_process(*argv, jit=True):
    """Run a command; ``jit=False`` runs the numba kernels as Python (no compilation).

    The kernels have their own tests; here only the entry points and the imports matter,
    so the subprocesses need not pay for compiling in a fresh process.
    """
    env = {k: v for k, v in os.environ.items() if k != "REMPROP_DEBUG"}
    if not jit:
        env["NUMBA_DISABLE_JIT"] = "1"
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.skipif(not SCRIPT.exists(), reason="the remprop console script is not installed in this environment")
def test_console_script_help_and_bad_input():
    result = run_process(SCRIPT, "--help")
    assert result.returncode == 0 and result.stdout.startswith("usage: remprop"), result.stderr
    result = run_process(SCRIPT, "min-alpha", "--beta", "nan")
    assert_one_line_error(result.returncode, result.stderr, "--beta")
    assert result.stdout == ""


def test_python_m_remprop():
    result = run_process(sys.executable, "-m", "remprop", "min-alpha", "--depth", "5", "--beta", "0.5,1", "--json",
                         jit=False)
    assert result.returncode == 0, result.stderr
    assert len(json.loads(result.stdout)["alpha_star"]) == 2
    result = run_process(sys.executable, "-m", "remprop", "propagate", "--threshold", "0.5")
    assert_one_line_error(result.returncode, result.stderr, "--threshold")


def test_light_imports():
    """`import remprop`, `remprop --help` and `remprop min-alpha` load neither torch nor matplotlib."""
    code = ("import sys, remprop\n"
            "from remprop.cli import main\n"
            "assert main(['--help']) == 0\n"
            "assert main(['min-alpha', '--depth', '3', '--json']) == 0\n"
            "heavy = sorted(m for m in ('torch', 'matplotlib', 'transformers') if m in sys.modules)\n"
            "assert not heavy, heavy\n")
    result = run_process(sys.executable, "-c", code, jit=False)
    assert result.returncode == 0, result.stderr


def test_min_alpha_theory_seq_len_uses_finite_t_theory(capsys):
    # Finite T makes alpha* depend on beta below beta_c (the asymptotic theory does not):
    # the CLI must hand --seq-len to the Architecture.
    import json as _json

    from remprop.diagrams import alpha_star
    from remprop.theory import Architecture

    assert main(["min-alpha", "--depth", "12", "--beta", "0.3,1.0", "--seq-len", "128", "--json"]) == 0
    reported = _json.loads(capsys.readouterr().out)["alpha_star"]
    expected = alpha_star(Architecture(seq_len=128), [0.3, 1.0], 12)
    assert reported == pytest.approx(list(expected), rel=0, abs=0)
    assert reported[0] != reported[1]


# -- heads ---------------------------------------------------------------------------------
# With qk_scaling="head" each of H heads runs at H beta (docs/theory.md section 3), so a
# command at beta with H heads must print exactly what it prints at H beta with one head.
# H = 4 is a power of two: 4 * beta is exact in floating point, so equality is exact.
HEADS_ARCHITECTURES = [[], ["--norm", "pre"], ["--attention", "gain-controlled", "--norm", "none"]]


def json_out(capsys, *argv):
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("extra", HEADS_ARCHITECTURES, ids=["post-LN", "pre-LN", "gain-controlled no-LN"])
def test_min_alpha_with_head_scaled_heads_is_one_head_at_h_beta(capsys, extra):
    many = json_out(capsys, "min-alpha", "--depth", DEPTH, "--heads", "4", "--qk-scaling", "head",
                    "--beta", "0.05,0.3,0.5", *extra)
    one = json_out(capsys, "min-alpha", "--depth", DEPTH, "--beta", "0.2,1.2,2", *extra)
    assert many["alpha_star"] == one["alpha_star"]
    assert many["architecture"]["heads"] == 4 and many["architecture"]["qk_scaling"] == "head"


@pytest.mark.parametrize("extra", HEADS_ARCHITECTURES, ids=["post-LN", "pre-LN", "gain-controlled no-LN"])
def test_propagate_with_heads_reaches_the_theory(capsys, extra):
    many = json_out(capsys, "propagate", "--depth", DEPTH, "--heads", "4", "--qk-scaling", "head", "--beta", "0.3",
                    *extra)
    one = json_out(capsys, "propagate", "--depth", DEPTH, "--beta", "1.2", *extra)
    assert many["rho"] == one["rho"] and many["q"] == one["q"]
    # model scaling: each head at beta, as one head
    model = json_out(capsys, "propagate", "--depth", DEPTH, "--heads", "4", "--qk-scaling", "model", "--beta", "1.2",
                     *extra)
    assert model["rho"] == one["rho"]


def test_diagram_with_heads_is_one_head_on_a_scaled_beta_axis(capsys, tmp_path):
    """The phases too: beta = 0.5 with four head-scaled heads is beta = 2 > sqrt 2, entropy-collapsed."""
    grid = ["--alpha", "0:2:3", "--depth", DEPTH, "--no-progress", "--out", tmp_path]
    many = json_out(capsys, "diagram", "--beta", "0.05,0.125,0.25,0.5", "--heads", "4", "--qk-scaling", "head",
                    "--name", "many", *grid)
    one = json_out(capsys, "diagram", "--beta", "0.2,0.5,1,2", "--name", "one", *grid)
    assert many["alpha_star"] == one["alpha_star"]
    with np.load(tmp_path / "many.npz") as a, np.load(tmp_path / "one.npz") as b:
        np.testing.assert_array_equal(a["phase"], b["phase"])
