"""Issue 15, items 5, 7 and 8: degenerate inputs give a defined answer or one clear error.

Every case of the issue is reproduced through :func:`remprop.cli.main` (one line on
stderr naming the right parameter, exit status 2) or the Python API, and the categories
of inputs a demanding user tries (NaN, infinities, negatives, zero, strings, extremes)
are run over the numeric options of the fast commands: each gives exit 0 with finite
output (or the documented note of an undefined cosine) or exit 2 with one line naming
the flag.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from remprop.theory import Architecture, activation_moments, model_spec, propagate, register_activation
from remprop.theory.models.hf_config import load_hf_config
from cli_checks import run_cli, assert_one_line_error  # noqa: E402


# -- item 5: silent NaN ------------------------------------------------------------------
def test_vanished_stream_is_reported_as_a_defined_state(capsys):
    code, out, err = run_cli(capsys, "propagate", "--depth", 3, "--alpha", 0, "--sigma-v2", 0, "--sigma-b2", 0)
    assert code == 0 and err == ""
    assert "note: rho is undefined (nan) from layer 1 on: the stream vanished" in out
    assert "--alpha 0" in out
    code, out, _ = run_cli(capsys, "propagate", "--depth", 3, "--alpha", 0, "--sigma-v2", 0, "--sigma-b2", 0,
                           "--json")
    data = json.loads(out)
    assert code == 0 and data["undefined_from_layer"] == 1 and "vanished" in data["note"]
    # a healthy stack has no note
    code, out, _ = run_cli(capsys, "propagate", "--depth", 3, "--json")
    data = json.loads(out)
    assert data["undefined_from_layer"] is None and data["note"] is None
    assert all(math.isfinite(float(r)) for r in data["rho"])


def _nan_activation(x):
    return math.nan


def _raises_above_3(x):
    if x > 3.0:
        raise ValueError("out of range")
    return math.tanh(x)


def _raises_above_100(x):
    if x > 100.0:
        raise ValueError("out of range")
    return math.tanh(x)


def test_register_activation_rejects_nan_and_raising_functions():
    with pytest.raises(ValueError, match=r"function '_nan_activation' of activation 'rel-nan' must be finite"):
        register_activation("rel-nan", _nan_activation)
    with pytest.raises(ValueError, match=r"'_raises_above_3' of activation 'rel-raise3' must be defined on "
                                         r"\[-32, 32\]: at x = 3.1 it raised ValueError"):
        register_activation("rel-raise3", _raises_above_3)


def test_quadrature_surfaces_a_failure_beyond_the_probe_grid():
    name = register_activation("rel-raise100", _raises_above_100, parity="odd", replace=True)
    m2, m11 = activation_moments(1.0, 0.5, name)  # nodes within |x| <= 8 sqrt(2): fine
    assert math.isfinite(m2) and math.isfinite(m11)
    # q1 = 1000: nodes reach 8 sqrt(2000) = 358 > 100
    with pytest.raises(ValueError, match=r"activation 'rel-raise100' raised or returned a non-finite value "
                                         r"at an input in \[-358, 358\]"):
        activation_moments(1000.0, 0.5, name)


# -- item 7: a valid setting accepted ----------------------------------------------------
def test_measured_cosine_is_clipped_onto_the_theory_floor_within_rounding():
    torch = pytest.importorskip("torch")
    from remprop.validation.comparison import MEASURED_ROUNDING_EPS, measured_cosine_on_floor

    tolerance = MEASURED_ROUNDING_EPS * float(torch.finfo(torch.float32).eps)
    assert measured_cosine_on_floor(-3.6e-9, None, torch.float32) == (0.0, tolerance)  # the value
    assert measured_cosine_on_floor(0.25, None, torch.float32)[0] == 0.25
    assert measured_cosine_on_floor(-0.01, None, torch.float32)[0] == -0.01  # a real violation stays
    assert measured_cosine_on_floor(-1 / 7 - 1e-8, 8, torch.float32)[0] == -1 / 7


def test_validate_accepts_synthetic_inputs_at_rho0_zero(capsys, tmp_path):
    pytest.importorskip("torch")
    code, out, err = run_cli(capsys, "validate", "--depth", 2, "--width", 8, "--sim-seq-len", 8, "--inputs",
                             "synthetic", "--seeds", 1, "--sequences", 1, "--device", "cpu", "--out", tmp_path,
                             "--json")
    assert code == 0, err
    settings = json.loads(out)["settings"]
    assert settings["rho0"] >= 0.0 and abs(settings["rho0_measured"]) <= settings["rho0_clip_tolerance"]


# -- item 8: messages that blame the right thing -----------------------------------------
@pytest.mark.parametrize("field, value, named", [
    ("initializer_range", 1e200, "config.initializer_range"),
    ("initializer_range", 1e-300, "config.initializer_range"),
    ("max_position_embeddings", 1, "config.max_position_embeddings"),
])
def test_check_blames_the_config_field(capsys, tmp_path, field, value, named):
    config = load_hf_config("bert-base")
    config[field] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    code, _, err = run_cli(capsys, "check", path, "--out", tmp_path, "--no-figure", "--max-depth", 50)
    assert_one_line_error(code, err, named, absent=("--sigma-w2", "--beta", "--seq-len"))
    with pytest.raises(ValueError, match=named):
        model_spec(config)


def test_check_says_what_it_expected_of_a_binary_file_or_a_folder(capsys, tmp_path):
    binary = tmp_path / "model.bin"
    binary.write_bytes(bytes(range(256)))
    code, _, err = run_cli(capsys, "check", binary, "--out", tmp_path)
    assert_one_line_error(code, err, "expected a Hugging Face config.json")
    folder = tmp_path / "empty"
    folder.mkdir()
    code, _, err = run_cli(capsys, "check", folder, "--out", tmp_path)
    assert_one_line_error(code, err, "holds no config.json")


@pytest.mark.parametrize("argv, flag", [
    (("min-alpha", "--beta", "-1:1:3"), "--beta"),
    (("diagram", "--beta", "-1,1", "--alpha", "1", "--depth", 2), "--beta"),
    (("propagate", "--q0", "-1e5"), "--q0"),
    (("propagate", "--beta", "-inf"), "--beta"),
])
def test_a_leading_minus_reaches_the_converter(capsys, tmp_path, argv, flag):
    code, _, err = run_cli(capsys, *argv, *(("--out", tmp_path) if argv[0] == "diagram" else ()))
    assert_one_line_error(code, err, f"argument {flag}:", absent=("expected one argument",))


@pytest.mark.parametrize("name", ["", ".", "..", "nodir/x", "a\\b"])
@pytest.mark.parametrize("command", [("diagram", "--beta", "0.5", "--alpha", "1", "--depth", 2),
                                     ("check", "bert-base", "--max-depth", 50, "--no-figure")])
def test_name_is_a_plain_file_stem_checked_up_front(capsys, tmp_path, command, name):
    code, _, err = run_cli(capsys, *command, "--out", tmp_path, "--name", name)
    assert_one_line_error(code, err, "argument --name:", "plain file name stem")
    assert not any(tmp_path.iterdir())  # refused before anything was computed or written


def test_simulated_overflow_names_the_swept_skip_strength(capsys, tmp_path):
    pytest.importorskip("torch")
    code, _, err = run_cli(capsys, "sweep", "--alpha", "1e200", "--beta", "0.5", "--norm", "none", "--depth", 2,
                           "--width", 8, "--seq-len", 8, "--seeds", 1, "--sequences", 1, "--workers", 0,
                           "--device", "cpu", "--out", tmp_path)
    assert_one_line_error(code, err, "alpha_sa", "not finite", "(option --alpha)")


# -- the categories of bad inputs, over the numeric options of the fast commands ----------
VALUES = ["nan", "inf", "-inf", "-1", "0", "abc", "1e308", "1e-320", "1e-300", "3.5"]
PROPAGATE_OPTIONS = ["--beta", "--depth", "--q0", "--rho0", "--sigma-w2", "--sigma-b2", "--sigma-v2",
                     "--alpha", "--alpha-mlp", "--sigma-o2", "--sigma-w2-out", "--heads", "--seq-len"]


def _finite(values):
    return all(math.isfinite(float(v)) for v in np.ravel(values))


@pytest.mark.parametrize("option", PROPAGATE_OPTIONS)
@pytest.mark.parametrize("value", VALUES)
def test_propagate_option_gives_a_finite_answer_or_names_the_flag(capsys, option, value):
    argv = ["propagate", "--depth", 2, "--json", option, value]
    if option == "--depth":
        argv = ["propagate", "--json", option, value]
    code, out, err = run_cli(capsys, *argv)
    if code == 2:
        assert_one_line_error(code, err, option)
        return
    assert code == 0, err
    data = json.loads(out)
    if data["undefined_from_layer"] is None:
        assert _finite(data["q"]) and _finite(data["p"]) and _finite(data["rho"])
    else:
        assert "rho is undefined" in data["note"]  # the documented vanished/overflowed state


@pytest.mark.parametrize("option", ["--beta", "--threshold", "--q0", "--rho0"])
@pytest.mark.parametrize("value", ["nan", "-inf", "-1", "0", "abc", "1e308", "-1:2:3", "1:nan:3", "0.1:1:0"])
def test_min_alpha_option_gives_a_finite_answer_or_names_the_flag(capsys, option, value):
    code, out, err = run_cli(capsys, "min-alpha", "--depth", 2, "--json", option, value)
    if code == 2:
        assert_one_line_error(code, err, option)
        return
    assert code == 0, err
    alpha_star = json.loads(out)["alpha_star"]
    assert all(float(a) >= 0 for a in np.ravel(alpha_star))  # a number or "inf" (documented)


def test_vanished_stream_in_the_python_api_is_nan_from_that_layer():
    trajectory = propagate(Architecture(norm="none", alpha_sa=0.0, sigma_v2=0.0, sigma_b2=0.0), 0.5, 3)
    assert math.isfinite(trajectory.rho[0]) and np.isnan(trajectory.rho[1:]).all()


# -- issue 46, item 9: a default that follows T ------------------------------------------------------
def test_causal_gram_and_last_tokens_defaults_follow_T():
    """Before: ``propagate_causal_gram(Architecture(norm="pre"), 0.5, 2, 16)`` refused its own
    default ``last = 50 > T``. After: the default is ``compared_last_tokens(T)`` (T - 1 = 15 here),
    the tokens the diagnosis and the measurement average: the same numbers as passing it."""
    from remprop.theory.causal import compared_last_tokens, last_tokens_cosine, propagate_causal_gram

    arch = Architecture(norm="pre")
    assert compared_last_tokens(16) == 15
    default = propagate_causal_gram(arch, 0.5, 2, 16)
    explicit = propagate_causal_gram(arch, 0.5, 2, 16, last=15)
    np.testing.assert_array_equal(default.rho, explicit.rho)  # same draws (seed), same tokens: identical
    np.testing.assert_array_equal(last_tokens_cosine(arch, 0.5, 2, 16), last_tokens_cosine(arch, 0.5, 2, 16, 15))
    long = propagate_causal_gram(arch, 0.5, 2, 64)  # above 50 tokens the default stays LAST_TOKENS
    np.testing.assert_array_equal(long.rho, propagate_causal_gram(arch, 0.5, 2, 64, last=50).rho)


# -- issue 46, item 11: messages -----------------------------------------------------------------------
def test_learning_rate_ceiling_names_unbroadcastable_inputs_and_refuses_bools():
    """Before: numpy's "operands could not be broadcast together" for beta of 3 and q0 of 2, and
    ``beta=True`` taken as 1 (while ``steps=True`` was refused). After: one ParameterError each."""
    from remprop.theory import learning_rate_ceiling
    from remprop.theory.checks import ParameterError

    arch = Architecture(seq_len=64)
    with pytest.raises(ParameterError, match=r"^beta: .*broadcast together, got shapes beta \(3,\), q0 \(2,\)"):
        learning_rate_ceiling(arch, [0.5, 1.0, 2.0], depth=4, width=64, steps=100, q0=[1.0, 2.0])
    for name, kwargs in (("beta", dict(beta=True)), ("q0", dict(beta=0.5, q0=True)),
                         ("beta", dict(beta=np.array([True, False])))):
        with pytest.raises(ParameterError, match=f"^{name} must be a real number") as err:
            learning_rate_ceiling(arch, depth=4, width=64, steps=100, **kwargs)
        assert err.value.parameter == name


@pytest.mark.parametrize("argv, option", [
    (["diagram", "--steps", "500"], "--steps"), (["diagram", "--width", "128"], "--width"),
    (["min-alpha", "--steps", "500"], "--steps"),
])
def test_learning_rate_options_without_lr_are_refused(capsys, tmp_path, argv, option):
    """Before: ``diagram --steps`` without ``--lr`` was silently ignored. After: exit 2, one line."""
    out = ["--out", tmp_path] if argv[0] == "diagram" else []
    code, _, err = run_cli(capsys, *argv, "--depth", 2, "--seq-len", 16, *out)
    assert_one_line_error(code, err, option, "--lr")
    assert not list(tmp_path.iterdir())  # refused before anything was written


def test_gram_draws_with_the_maps_theory_is_refused(capsys, tmp_path):
    """Before: ``check --causal-theory maps --gram-draws 5`` ignored --gram-draws. After: exit 2, one line."""
    code, _, err = run_cli(capsys, "check", "smollm2-135m", "--depth", 2, "--causal-theory", "maps", "--gram-draws", 5,
                           "--no-figure", "--out", tmp_path)
    assert_one_line_error(code, err, "--gram-draws", "maps")


def test_the_learning_rate_walk_warns_nothing():
    """Before: every training run printed numpy's "future versions will not create a writeable array
    from broadcast_array" (a broadcast view handed to a compiled table lookup). After: silent."""
    import warnings

    from remprop.theory import learning_rate_ceiling

    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        ceiling = learning_rate_ceiling(Architecture(seq_len=16, alpha_sa=np.array([[1.0]])), np.array([[0.5]]),
                                        depth=2, width=16, steps=4)  # a trained diagram's one-cell window
    assert np.isfinite(ceiling.ceiling).all()
