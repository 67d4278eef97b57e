"""Issue 25, items 1, 7, 8 and 9 on ``check``, ``recipes``, ``acceptance``, ``validate`` and
``propagate --positions rope``: bounded work, the right thing blamed, outputs checked first.

Before: ``recipes --depth 1000000000`` filled 23 GB (whole trajectories) until the kernel
killed it; ``check`` estimated nothing (a million printed layers, ``--max-depth 1e12`` a
7.28 TiB MemoryError, ``--simulate`` on a 1e9-wide config a 196 TB allocation, a 1e9-wide
rotary head 300 s in ``rope_mean_correlation``); ``acceptance --width 1e9`` and ``--draws
1e9`` failed in the allocator, the latter after all the measurements; ``validate --gram-draws
1e9`` asked for 67 GiB past ``--max-memory``; ``propagate --head-dim 1e9`` died after 21 s.
``check --simulate --seq-len 16`` on a decoder failed on an internal ``last ... got 50``;
``num_key_value_heads 0`` and ``rope_theta 1e-300`` blamed ``config.initializer_range``,
``intermediate_size 0`` was reported as ``config.n_inner``; ``--hf-config ''`` said "got
NoneType"; ``acceptance --markdown DIR`` failed with IsADirectoryError after the
measurements; a LLaMA config without ``intermediate_size`` used ``4 d``; ``--only
deepnorm,deepnorm`` listed the recipe twice.

After: each command estimates its time and memory from its inputs before it starts and
refuses past ``--max-seconds`` / ``--max-memory`` with one line and the estimate (exit 2);
the recipes keep the final state alone, the rotary sum runs in bounded memory, the check
report prints at most 1001 layers; every output path is checked first; the config's own
field is named.
"""
from __future__ import annotations

import json
import math
import resource
import subprocess
import sys
import time

import numpy as np
import pytest

from remprop.theory import Architecture, model_spec, propagate
from remprop.theory.models.hf_config import LIBRARY_D_FF, load_hf_config
from remprop.theory.rem import rope_mean_correlation
from cli_checks import run_cli, assert_one_line_error  # noqa: E402


def write_config(tmp_path, base="smollm2-135m", **changes):
    """A shipped config with fields changed (None: removed), written to tmp_path/config.json."""
    config = {key: value for key, value in {**load_hf_config(base), **changes}.items() if value is not None}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


def limited_run(code, *, memory=2 * 2 ** 30, timeout=60):
    """Run ``python -c code`` under an address-space limit and a timeout: (status, stdout, stderr)."""
    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (memory, memory))

    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout,
                          preexec_fn=limit)
    return done.returncode, done.stdout, done.stderr


# -- item 1: recipes -----------------------------------------------------------------------
@pytest.mark.parametrize("argv", [("--depth", 1_000_000_000), ("--depth", 10_000_000, "--max-seconds", 30)])
def test_recipes_refuses_a_run_past_the_time_limit_up_front(capsys, tmp_path, argv):
    start = time.perf_counter()
    code, out, err = run_cli(capsys, "recipes", *argv, "--only", "deepnorm", "--no-figure", "--out", tmp_path)
    assert_one_line_error(code, err, "max_seconds", "--max-seconds", f"depth {argv[1]}")
    assert out == "" and not (tmp_path / "recipes.json").exists()
    # the estimate, not the run: estimating compiles and times the recipe's kernel (about 16 s cold on
    # two loaded cores), the run itself would take 7.5 min at depth 1e7 and hours at 1e9
    assert time.perf_counter() - start < 120


def test_recipe_predictions_keep_the_final_state_alone():
    """The predictions from the final state (constant memory at any depth) equal the whole trajectory's
    last layer: the same kernels, so to round-off (1e-12 relative)."""
    from remprop.diagrams.recipes import recipe_predictions

    for row in recipe_predictions(Architecture(), 0.5, depth=24, names=["deepnorm", "rezero"], rho0=0.2):
        traj = propagate(row.run)
        assert math.isclose(row.rho_final, traj.rho[-1], rel_tol=1e-12, abs_tol=1e-15)
        assert math.isclose(row.q_final, traj.q[-1], rel_tol=1e-12)
        assert math.isclose(row.beta_critical, row.arch.beta_critical(traj.beta_critical), rel_tol=1e-12)


def test_deep_recipe_runs_in_bounded_memory():
    """30 million blocks, whose trajectory alone took 1.9 GB, run under a 1.5 GiB address-space
    limit (ReZero: no alpha* search, one kernel call of a second or two)."""
    code = ("from remprop.diagrams.recipes import recipe_predictions; from remprop.theory import Architecture\n"
            "row, = recipe_predictions(Architecture(), 0.5, depth=30_000_000, names=['rezero'], rho0=0.3)\n"
            "print(row.rho_final)")
    status, out, err = limited_run(code, memory=int(1.5 * 2 ** 30), timeout=120)
    assert status == 0, err
    assert math.isclose(float(out), 0.3, rel_tol=1e-9)  # zero branches: the input cosine, exactly


def test_recipe_named_twice_is_refused(capsys, tmp_path):
    code, out, err = run_cli(capsys, "recipes", "--only", "deepnorm,deepnorm", "--no-figure", "--out", tmp_path)
    assert_one_line_error(code, err, "--only", "deepnorm", "once")


# -- item 1: rotary heads ------------------------------------------------------------------
def test_rotary_mean_correlation_sums_in_chunks_to_the_one_formula():
    """Three chunks of frequencies give the Fejer formula of the whole array to round-off (1e-12)."""
    head_dim = 2 * (2 * 2 ** 20 + 5)
    theta = 1e5 ** (-2.0 * np.arange(head_dim // 2) / head_dim)
    t = 512.0
    fejer = (np.sin(0.5 * t * theta) / np.sin(0.5 * theta)) ** 2
    expected = np.mean(np.where(t * theta < 1e-4, 1 - theta ** 2 * t * (t + 1) / 12, (fejer - t) / (t * (t - 1))))
    assert math.isclose(rope_mean_correlation(512, head_dim, 1e5), expected, rel_tol=1e-12)
    assert math.isclose(rope_mean_correlation(512, 128), 0.41392175500337935, rel_tol=1e-12)


def test_wide_rotary_head_runs_in_bounded_memory():
    """d_H = 1e8: 5e7 frequencies (400 MB an array, several alive before) under a 1 GiB limit."""
    code = "from remprop.theory.rem import rope_mean_correlation; print(rope_mean_correlation(8192, 10**8, 1e5))"
    status, out, err = limited_run(code, memory=2 ** 30)
    assert status == 0, err
    assert math.isclose(float(out), 0.2974125, rel_tol=1e-5)  # the d_H -> infinity value, reached to 1e-6


def test_propagate_refuses_a_rotary_head_past_the_time_limit(capsys):
    start = time.perf_counter()
    code, out, err = run_cli(capsys, "propagate", "--positions", "rope", "--head-dim", 10 ** 11,
                             "--seq-len", 512, "--depth", 3)
    assert_one_line_error(code, err, "--head-dim", "--max-seconds")
    assert time.perf_counter() - start < 60  # an estimate of seconds, on a loaded machine; the sum takes about 35 min


# -- item 1: check ---------------------------------------------------------------------------
def test_check_refuses_a_huge_max_depth_up_front(capsys, tmp_path):
    code, out, err = run_cli(capsys, "check", "bert-base", "--max-depth", 10 ** 12, "--out", tmp_path, "--no-figure")
    assert_one_line_error(code, err, "--max-depth 1000000000000", "--max-")


def test_check_refuses_a_million_layers_past_a_time_limit(capsys, tmp_path):
    path = write_config(tmp_path, "bert-base", num_hidden_layers=10 ** 6)
    code, out, err = run_cli(capsys, "check", path, "--max-seconds", 5, "--out", tmp_path, "--no-figure")
    assert_one_line_error(code, err, "1000000 layers", "--max-seconds")


def test_check_report_prints_at_most_1001_layers():
    """A 1500-layer diagnosis prints 1001 evenly spread layers, both ends included; to_dict keeps all."""
    import dataclasses

    from remprop.diagrams import diagnose

    small = diagnose("bert-base", max_depth=20)
    deep = dataclasses.replace(small, spec=small.spec.with_depth(1500), q=np.ones(1501), rho=np.linspace(0, 1, 1501))
    report = deep.report()
    layers = [line for line in report.splitlines() if line.strip().startswith("layer ")]
    assert len(layers) == 1001 and layers[0].split()[1] == "0" and layers[-1].split()[1] == "1500"
    assert "1001 of 1501 layers shown" in report
    assert len(deep.to_dict()["rho"]) == 1501


@pytest.mark.parametrize("changes", [dict(hidden_size=9 * 10 ** 8, head_dim=10 ** 8), dict(intermediate_size=10 ** 9)])
def test_check_simulate_of_a_huge_model_is_refused_before_torch(capsys, tmp_path, changes):
    path = write_config(tmp_path, **changes)
    # no time bound: the memory bound alone refuses it (the time estimate, years, would too)
    code, out, err = run_cli(capsys, "check", path, "--simulate", "--out", tmp_path, "--no-figure",
                             "--max-seconds", "1e30")
    assert_one_line_error(code, err, "max_memory", "--max-memory")


def test_check_refuses_gram_draws_past_the_time_limit(capsys, tmp_path):
    pytest.importorskip("torch")
    code, out, err = run_cli(capsys, "check", "smollm2-135m", "--simulate", "--width", 64, "--depth", 2,
                             "--seq-len", 16, "--causal-theory", "gram", "--gram-draws", 10 ** 9,
                             "--out", tmp_path, "--no-figure")
    assert_one_line_error(code, err, "--gram-draws", "--max-seconds")
    assert not list(tmp_path.glob("*.simulation"))  # refused before any simulation store


# -- item 7: check on valid inputs, the right field blamed -----------------------------------------
def test_check_simulates_a_short_decoder(capsys, tmp_path):
    """T = 16 < 50: the last T - 1 tokens are compared (theory, Gram state and measurement alike)."""
    pytest.importorskip("transformers")
    code, out, err = run_cli(capsys, "check", "--hf-config", "smollm2-135m", "--simulate", "--width", 64, "--depth", 2,
                             "--seq-len", 16, "--seeds", 1, "--sequences", 1, "--device", "cpu", "--json",
                             "--out", tmp_path, "--no-figure")
    assert code == 0, err
    result = json.loads(out)
    assert len(result["rho_last_tokens"]) == 3 and result["simulation"]["compared"] == "last 15 tokens"
    assert all(math.isfinite(v) for v in result["simulation"]["rho_mean"] + result["simulation"]["theory"])


@pytest.mark.parametrize("changes, named", [
    (dict(num_key_value_heads=0), "config.num_key_value_heads"),
    (dict(rope_theta=1e-300), "config.rope_theta"),
    (dict(rope_theta=None, rope_parameters={"rope_theta": 0.5}), "config.rope_parameters.rope_theta"),
    (dict(intermediate_size=0), "config.intermediate_size"),
])
def test_check_blames_the_config_field(capsys, tmp_path, changes, named):
    path = write_config(tmp_path, **changes)
    code, _, err = run_cli(capsys, "check", path, "--out", tmp_path, "--no-figure")
    assert_one_line_error(code, err, named, absent=("initializer_range", "rope_base", "n_inner"))


@pytest.mark.parametrize("value", ["", " "])
def test_check_with_an_empty_config_name_says_so(capsys, tmp_path, value):
    code, _, err = run_cli(capsys, "check", "--hf-config", value, "--out", tmp_path)
    assert_one_line_error(code, err, "--hf-config", "empty", absent=("NoneType",))


# -- item 9: a config without intermediate_size ---------------------------------------------------
@pytest.mark.parametrize("family", ["llama", "mistral", "qwen2", "phi3", "gemma2", "olmo2"])
def test_missing_intermediate_size_takes_the_library_default(family):
    config = {**load_hf_config("smollm2-135m"), "model_type": family}
    del config["intermediate_size"]
    spec = model_spec(config)
    assert spec.d_ff == LIBRARY_D_FF[family] != 4 * spec.width
    assert any("intermediate_size is not in the config" in note for note in spec.assumptions)


def test_library_defaults_are_those_of_the_installed_transformers():
    transformers = pytest.importorskip("transformers")
    classes = {"bert": "BertConfig", "roberta": "RobertaConfig", "vit": "ViTConfig", "llama": "LlamaConfig",
               "mistral": "MistralConfig", "qwen2": "Qwen2Config", "phi3": "Phi3Config", "gemma2": "Gemma2Config",
               "olmo2": "Olmo2Config"}
    for family, name in classes.items():
        assert getattr(transformers, name)().intermediate_size == LIBRARY_D_FF[family], family


# -- items 1, 7, 8: acceptance and validate --------------------------------------------------------
@pytest.mark.parametrize("argv, names", [
    (("--width", 10 ** 9), ("max_memory", "--width", "--max-memory")),
    (("--draws", 10 ** 9), ("max_memory", "--draws", "--max-memory")),
    (("--seq-len", 10 ** 9), ("--seq-len", "corpus")),
    (("--markdown", ""), ("--markdown",)),
    (("--markdown", "FOLDER"), ("--markdown", "folder")),
])
def test_acceptance_is_refused_before_any_measurement(capsys, tmp_path, argv, names):
    pytest.importorskip("torch")
    (tmp_path / "FOLDER").mkdir()
    argv = [str(tmp_path / "FOLDER") if a == "FOLDER" else a for a in argv]
    store = tmp_path / "store"
    start = time.perf_counter()
    code, out, err = run_cli(capsys, "acceptance", "--quick", *argv, "--out", store)
    assert_one_line_error(code, err, *names)
    assert not (store / "cells").exists() or not any((store / "cells").iterdir())
    assert time.perf_counter() - start < 60  # refused before the measurements (minutes), on a loaded machine


def test_validate_counts_the_gram_draws_in_its_memory(capsys, tmp_path):
    code, out, err = run_cli(capsys, "validate", "--theory", "sampled", "--gram-draws", 10 ** 9, "--width", 16,
                             "--sim-seq-len", 8, "--depth", 2, "--out", tmp_path)
    assert_one_line_error(code, err, "--gram-draws", "--max-memory")


def test_writable_file_refuses_folders_and_empty_names(tmp_path):
    from remprop.cli.errors import CommandLineError
    from remprop.cli.output import writable_file

    kept = tmp_path / "kept.md"
    kept.write_text("content")
    assert writable_file(kept, "--markdown") == kept and kept.read_text() == "content"
    assert writable_file(tmp_path / "new" / "table.md", "--markdown").parent.is_dir()
    for bad in ("", tmp_path):
        with pytest.raises(CommandLineError, match="--markdown"):
            writable_file(bad, "--markdown")
