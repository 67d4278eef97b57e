"""Smaller friction of a first walk-through (issue 44 item 6): the library's own install hint
without torch, "did you mean" for a model name and an option, what is wrong with ``--steps 1e30``,
no numpy FutureWarning from the theory's table lookups, and the unit of a gradient norm."""
from __future__ import annotations

import subprocess
import sys
import warnings

import numpy as np
import pytest

from remprop.cli import main
from remprop.theory import query_gradient_norm
from remprop.theory.checks import did_you_mean

from cli_checks import assert_one_line_error, run_cli


# -- the library says how to install torch ------------------------------------------------------
def test_a_validation_name_without_torch_names_the_extra():
    """torch blocked (``sys.modules["torch"] = None``: ``import torch`` fails as if not installed)."""
    code = ("import sys; sys.modules['torch'] = None\n"
            "try:\n"
            "    from remprop.validation import probe\n"
            "except ModuleNotFoundError as err:\n"
            "    print(err.name); print(err)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    name, message = out.stdout.strip().splitlines()
    assert name == "torch"  # still the missing module's error, which the command line reports as the extra
    assert message == ("remprop.validation.probe needs torch, which is not installed: the validation extra is "
                       "needed: pip install 'remprop[validation]'")


def test_the_command_line_says_the_hint_once_without_torch():
    code = ("import sys; sys.modules['torch'] = None\n"
            "from remprop.cli import main\n"
            "sys.exit(main(['validate', '--depth', '2', '--width', '32', '--seq-len', '16']))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert out.stderr.count("pip install 'remprop[validation]'") == 1, out.stderr


# -- did you mean ------------------------------------------------------------------------------
def test_did_you_mean_prefers_the_same_name_in_another_case():
    assert did_you_mean("llama-3.2-1B", ["llama-3-8b", "llama-3.2-1b"]) == " (did you mean 'llama-3.2-1b'?)"
    assert did_you_mean("--seqlen", ["--seq-len", "--seeds"]) == " (did you mean '--seq-len'?)"
    assert did_you_mean("foo", ["bert-base", "gpt2"]) == ""


def test_an_unknown_model_name_suggests_the_shipped_one(capsys, tmp_path):
    code, out, err = run_cli(capsys, "check", "llama-3.2-1B", "--out", tmp_path)
    assert_one_line_error(code, err, "no shipped configuration", "(did you mean 'llama-3.2-1b'?)")


def test_an_unknown_option_suggests_the_commands_own(capsys):
    code, out, err = run_cli(capsys, "check", "llama-3.2-1b", "--seqlen", "64")
    assert_one_line_error(code, err, "unrecognized arguments: --seqlen 64 (did you mean --seq-len?)")
    code, out, err = run_cli(capsys, "check", "llama-3.2-1b", "--zzz")
    assert_one_line_error(code, err, "unrecognized arguments: --zzz")
    assert "did you mean" not in err


# -- an integer option says what is wrong with its value -------------------------------------------
@pytest.mark.parametrize("value, why", [
    ("1e30", "floating-point notation (1e+30), where an integer in digits is expected; at 1e+30 it would also "
             "be far too large to run"),
    ("1e3", "floating-point notation (1000), where an integer in digits is expected"),
    ("2.5", "not a whole number"), ("fast", "not a number"), ("inf", "not finite")])
def test_steps_that_are_not_an_integer_say_why(capsys, tmp_path, value, why):
    code, out, err = run_cli(capsys, "train", "--steps", value, "--out", tmp_path)
    assert_one_line_error(code, err, "--steps", f"must be an integer >= 1, got {value!r}: {why}")
    assert err.strip().endswith(why)


# -- no numpy FutureWarning from the theory --------------------------------------------------------
def test_the_learning_rate_window_of_a_training_verdict_warns_nothing(monkeypatch):
    """The lookup that ``train``'s verdict reaches (diagram_window -> learning_rate_ceiling -> the
    finite-T cross-overlap table): before, numba, compiling the lookup for a new signature, read the
    writeable flag of a np.broadcast_arrays view, which numpy answers with a FutureWarning. The
    compiled lookup is wrapped here to read that flag on every call, as numba's compile does."""
    import importlib

    from remprop.diagrams import trainability_diagram
    from remprop.diagrams.learning_rate import diagram_window
    from remprop.theory import Architecture

    # the module itself (the package remprop.theory.rem also has a function called cross_overlap)
    cross_overlap = importlib.import_module("remprop.theory.rem.cross_overlap")
    lookup = cross_overlap._lookup_many

    def reading_the_flags(*arrays):
        assert all(array.flags.writeable for array in arrays[1:])  # numba: readonly = not writeable
        return lookup(*arrays)

    monkeypatch.setattr(cross_overlap, "_lookup_many", reading_the_flags)
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        table = cross_overlap.cross_overlap_table(16)
        full = table(np.array([[0.5, 1.0], [2.0, 3.0]]), 0.3)   # an array and a scalar
        assert full.shape == (2, 2) and np.isfinite(full).all()
        assert table(0.5, np.array([0.1, 0.3])).shape == (2,)
        diagram = trainability_diagram(Architecture(seq_len=16), np.array([0.5]), np.array([1.0]), 2)
        floor, ceiling = diagram_window(diagram, 32, 4)
    assert np.isfinite(ceiling).all()


# -- a gradient norm with its meaning --------------------------------------------------------------
def test_the_query_gradient_norm_example_states_its_meaning_and_its_numbers():
    doc = query_gradient_norm.__doc__
    example = doc[doc.index("Examples"):]
    assert "summed over every output entry" in example and "T d^2" in example
    g = float(query_gradient_norm(1.5, 1.0, 0.0, width=128, seq_len=256, sigma_v2=1.0))
    assert f"{g:.1f}"[:9] in example                 # 1386350.6...
    assert f"{g / (256 * 128 ** 2):.4f}" in example   # 0.3305...


def test_the_readme_quotes_the_gradient_norm_it_computes():
    from pathlib import Path

    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    line = next(text for text in readme.splitlines() if text.startswith("query_gradient_norm(1.0, 1.0, 0.0"))
    g = float(query_gradient_norm(1.0, 1.0, 0.0, width=256, seq_len=1024, sigma_v2=1.0))
    assert round(g / 1e6, 1) == 8.7 and "8.7e6" in line
    assert round(g / (1024 * 256 ** 2), 2) == 0.13 and "0.13 T d^2" in readme
