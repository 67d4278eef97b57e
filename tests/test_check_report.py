"""``remprop check``'s answer (issue 26): the best causal theory, margins and a graded verdict with a
documented JSON schema, a training-length default T, what-if overrides, one route to the diagram."""
from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from remprop.diagrams import TrainabilityDiagram, diagnose, trainability_diagram
from remprop.diagrams.compared_theory import last_tokens_theory, margins_theory
from remprop.diagrams.diagnosis import COMFORTABLE_MARGINS
from remprop.theory import model_spec
from remprop.theory import gram_width
from remprop.theory.causal import last_tokens_cosine, propagate_causal_gram

from cli_checks import assert_one_line_error, run_cli

DOCS = Path(__file__).resolve().parents[1] / "docs" / "real_models.md"

#: A LLaMA-style decoder small enough for the causal Gram state in a test (2 blocks, d = 64, 2 heads of
#: 32 sharing one key/value head, SwiGLU, RoPE, RMSNorm) whose maximum context is Llama 3.2's.
TINY_LLAMA = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
              "num_key_value_heads": 1, "intermediate_size": 128, "max_position_embeddings": 131072,
              "initializer_range": 0.02, "rms_norm_eps": 1e-5, "vocab_size": 1000, "hidden_act": "silu",
              "rope_theta": 500000.0, "_name_or_path": "tiny-llama"}
#: A post-LN BERT encoder of two blocks (input cosine 1/3 from the shared token-type embedding).
TINY_BERT = {"model_type": "bert", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2,
             "intermediate_size": 128, "max_position_embeddings": 128, "vocab_size": 1000,
             "initializer_range": 0.02, "_name_or_path": "tiny-bert"}


@pytest.fixture(scope="module")
def configs(tmp_path_factory):
    folder = tmp_path_factory.mktemp("configs")
    paths = {}
    for name, config in (("llama", TINY_LLAMA), ("bert", TINY_BERT)):
        paths[name] = folder / f"{name}.json"
        paths[name].write_text(json.dumps(config))
    return paths


# -- item 1: the best causal theory affordable ---------------------------------------------------
def test_check_reports_the_causal_gram_state_of_a_decoder(capsys, tmp_path, configs):
    """Without --simulate the last tokens' cosine is the causal Gram state's (seed 0, 8 draws), not the
    per-position maps', which differ from it by far more than its Monte Carlo spread (about 4e-4 per
    layer at 8 draws, docs/real_models.md 5.4); the JSON and the text name the theory and the reason."""
    code, out, err = run_cli(capsys, "check", configs["llama"], "--seq-len", "64", "--json", "--no-figure",
                             "--out", tmp_path)
    assert code == 0, err
    result = json.loads(out)
    spec = model_spec(configs["llama"], seq_len=64)
    gram = propagate_causal_gram(spec.architecture, spec.beta, 2, 64, spec.q0, spec.rho0, last=50, draws=8, seed=0,
                                 norm_eps=spec.layer_norm_eps, width=gram_width(spec.architecture, spec.width)).rho
    maps = last_tokens_cosine(spec.architecture, spec.beta, 2, 64, 50, spec.q0, spec.rho0)
    assert result["last_tokens_theory"] == "gram" and result["last_tokens_theory_label"] == "causal Gram state"
    assert "floating-point operations" in result["last_tokens_theory_reason"] and result["gram_draws"] == 8
    np.testing.assert_allclose(result["rho_last_tokens"], gram, rtol=1e-12)
    np.testing.assert_allclose(result["rho_last_tokens_maps"], maps, rtol=1e-12)
    assert np.max(np.abs(gram - maps)) > 0.01  # the two theories are told apart at this size
    code, out, err = run_cli(capsys, "check", configs["llama"], "--seq-len", "64", "--no-figure", "--out", tmp_path)
    assert code == 0, err
    assert "by the causal Gram state (8 draws per layer)" in out and "(per-position maps " in out
    # asked for: the maps, and the report says so
    code, out, err = run_cli(capsys, "check", configs["llama"], "--seq-len", "64", "--json", "--no-figure",
                             "--causal-theory", "maps", "--out", tmp_path)
    assert code == 0, err
    np.testing.assert_allclose(json.loads(out)["rho_last_tokens"], maps, rtol=1e-12)
    assert json.loads(out)["last_tokens_theory"] == "maps"


def test_the_maps_where_the_gram_state_is_not_affordable(configs):
    """Past the Gram state's T (8192) or its work bound the maps are used, with the reason stated."""
    name, reason = last_tokens_theory(model_spec(configs["llama"], seq_len=16384))
    assert name == "maps" and "8192" in reason
    # the fast Gram state runs the 2-layer model at T 1024 within the bound, its whole verdict too (18 layers);
    # 64 layers at T 4096 pass the bound (the headline, 128 layers, 1.1e13 operations)
    assert last_tokens_theory(model_spec(configs["llama"], seq_len=1024))[0] == "gram"
    assert margins_theory(model_spec(configs["llama"], seq_len=1024))[0] == "gram"
    deep = model_spec(dict(TINY_LLAMA, num_hidden_layers=64), seq_len=4096)
    name, reason = last_tokens_theory(deep)
    assert name == "maps" and "floating-point operations" in reason and "headline" in reason
    assert margins_theory(deep) == (name, reason)
    assert last_tokens_theory(model_spec(configs["bert"])) is None  # an encoder has no last tokens
    with pytest.raises(ValueError, match="causal_theory"):
        last_tokens_theory(model_spec(configs["bert"]), "gram")


# -- item 3: margins, graded verdict, JSON schema, default T -----------------------------------------
def test_margins_and_graded_verdict():
    """BERT-base is comfortably trainable; its 48-layer version (alpha_SA = 1.13 alpha*, the query gradient
    falling about 470x, docs/real_models.md section 3) is trainable but marginal, and says why."""
    base, deep = diagnose("bert-base"), diagnose("bert-48")
    for d in (base, deep):
        m = d.margins
        assert m["alpha_ratio"] == pytest.approx(1.0 / d.alpha_star)
        assert m["beta_ratio"] == pytest.approx(d.spec.beta / d.beta_critical)
        assert m["gradient_decay"] == pytest.approx(d.gradient_first / d.gradient_last)
        assert m["collapse_depth_ratio"] == pytest.approx(d.collapse_depth / d.spec.depth)
        assert d.phase == "trainable"
    assert base.verdict["grade"] == "comfortable" and base.verdict["thin"] == []
    assert deep.verdict["grade"] == "marginal"
    assert deep.margins["alpha_ratio"] < COMFORTABLE_MARGINS["alpha_ratio"]
    assert deep.margins["gradient_decay"] > 100
    assert any("alpha_SA / alpha*(L = 48)" in t for t in deep.verdict["thin"])
    assert any("query gradient falls" in t for t in deep.verdict["thin"])
    assert "trainable, marginal (skip margin alpha_SA / alpha*(L = 48) = 1.13, under the comfortable 1.5" \
        in deep.report()


def test_a_marginal_verdict_names_its_margin_bound_and_threshold():
    """``check llama-3.2-1b --depth 64``: trainable, no rank collapse within the search depth, but its skip
    is 1.498 alpha*(64) by its last tokens, under the comfortable 1.5: the verdict names that margin, its
    ratio, the bound and the skip it stands for, and no other margin."""
    from remprop.theory import model_spec

    d = diagnose(model_spec("llama-3.2-1b").with_depth(64))
    assert d.phase == "trainable" and d.verdict["grade"] == "marginal"
    (thin,) = d.verdict["thin"]
    ratio, bound = d.margins["alpha_ratio"], COMFORTABLE_MARGINS["alpha_ratio"]
    assert 1.0 < ratio < bound
    assert f"alpha_SA / alpha*(L = 64) = {ratio:.3g}" in thin
    assert f"under the comfortable {bound:g}" in thin
    assert f"alpha_SA >= {bound:g} alpha* = {bound * d.alpha_star:.3g}" in thin
    assert thin in d.report()


def _schema():
    """The JSON schema of ``remprop check --json`` as docs/real_models.md writes it: rows
    ``| `key` | type | meaning |`` of its schema table (dotted keys for nested objects)."""
    text = DOCS.read_text()
    start = text.index("<!-- check-json-schema -->")
    rows = re.findall(r"^\| `([a-z0-9_.]+)` \| ([a-z |,]+?) \|", text[start:text.index("<!-- /check-json-schema -->")],
                      re.MULTILINE)
    return {key: {t.strip() for t in types.split(",")} for key, types in rows}


_TYPES = {"number": (int, float), "integer": (int,), "string": (str,), "array": (list,), "object": (dict,),
          "boolean": (bool,), "null": (type(None),)}


def _check_against(schema, result):
    """Every key of ``result`` documented, every documented key present (unless its types say
    "absent"), each value of a documented type (JSON's "inf" / "nan" strings stand for numbers)."""
    def value_at(key):
        value = result
        for part in key.split("."):
            value = value[part]
        return value

    top = {key for key in schema if "." not in key}
    optional = {key for key in top if "absent" in schema[key]}
    assert set(result) - {"files"} <= top, f"undocumented keys: {set(result) - {'files'} - top}"
    assert top - optional <= set(result), f"missing keys: {top - optional - set(result)}"
    schema = {key: types - {"absent"} for key, types in schema.items() if key.split(".")[0] in result}
    for key, types in schema.items():
        value = value_at(key)
        ok = any(isinstance(value, _TYPES[t]) and not (t in ("number", "integer") and isinstance(value, bool))
                 for t in types)
        assert ok or (value in ("inf", "nan") and "number" in types), (key, value, types)
    for parent in {key.rsplit(".", 1)[0] for key in schema if "." in key}:
        documented = {key[len(parent) + 1:] for key in schema  # its direct children only
                      if key.startswith(parent + ".") and "." not in key[len(parent) + 1:]}
        if isinstance(value_at(parent), dict):
            assert set(value_at(parent)) == documented, parent


def test_check_json_follows_the_documented_schema(capsys, tmp_path, configs):
    schema = _schema()
    assert {"margins.alpha_ratio", "verdict.grade", "seq_len_choice.source", "last_tokens_theory"} <= set(schema)
    for argv in ([configs["bert"]], [configs["llama"], "--seq-len", "64"]):
        code, out, err = run_cli(capsys, "check", *argv, "--json", "--no-figure", "--out", tmp_path)
        assert code == 0, err
        _check_against(schema, json.loads(out))


def test_check_default_length_is_a_training_length(capsys, tmp_path, configs):
    """Llama 3.2's 131072 positions are its maximum context, not the T it trains at: check takes 2048."""
    code, out, err = run_cli(capsys, "check", configs["llama"], "--json", "--no-figure", "--out", tmp_path)
    assert code == 0, err
    result = json.loads(out)
    assert result["model"]["seq_len"] == 2048
    assert result["seq_len_choice"] == {"seq_len": 2048, "max_seq_len": 131072, "source": "default"}
    assert result["model"]["beta"] == pytest.approx(model_spec(configs["llama"], seq_len=2048).beta)
    code, out, err = run_cli(capsys, "check", configs["llama"], "--no-figure", "--out", tmp_path,
                             "--causal-theory", "maps")
    assert code == 0, err
    assert out.startswith("sequence length  T = 2048 (default: the smaller of the model's maximum context 131072")


# -- item 4: what-if overrides ---------------------------------------------------------------------
def test_check_what_if_overrides_show_before_and_after(capsys, tmp_path, configs):
    code, out, err = run_cli(capsys, "check", configs["bert"], "--alpha", "0.3", "--norm", "pre", "--beta", "0.5",
                             "--json", "--no-figure", "--out", tmp_path)
    assert code == 0, err
    result = json.loads(out)
    spec = model_spec(configs["bert"])
    after = diagnose(spec.with_settings(arch=spec.architecture.replace(alpha_sa=0.3, norm="pre"), beta=0.5))
    assert result["what_if"]["overrides"] == {"--alpha": 0.3, "--norm": "pre", "--beta": 0.5}
    assert result["what_if"]["before"] == json.loads(json.dumps(diagnose(spec).summary()))
    assert result["what_if"]["after"] == json.loads(json.dumps(after.summary()))
    assert result["alpha_sa"] == 0.3 and result["beta"] == 0.5 and result["model"]["architecture"]["norm"] == "pre"
    assert result["what_if"]["before"]["alpha_sa"] == 1.0
    code, out, err = run_cli(capsys, "check", configs["bert"], "--alpha", "0.3", "--no-figure", "--out", tmp_path)
    assert code == 0, err
    assert "what-if: the model as its config builds it, and with --alpha 0.3" in out
    assert re.search(r"alpha_sa\s+1\s+0\.3", out), out


@pytest.mark.parametrize("argv, names", [
    (["--alpha", "-1"], ["--alpha"]),
    (["--beta", "0"], ["--beta"]),
    (["--alpha", "0.5", "--simulate"], ["--alpha", "--simulate"]),
])
def test_check_what_if_bad_input_is_one_line(capsys, tmp_path, configs, argv, names):
    code, _, err = run_cli(capsys, "check", configs["bert"], *argv, "--no-figure", "--out", tmp_path)
    assert_one_line_error(code, err, *names)


# -- item 6: one route from a model to its diagram ---------------------------------------------------
def test_a_model_spec_diagram_starts_from_the_models_input_state(configs):
    """trainability_diagram(ModelSpec) takes the model's depth and input state (BERT: rho0 = 1/3), so its
    alpha*(L) at the model's beta is check's; the bare architecture starts from rho0 = 0 and differs."""
    spec = model_spec(configs["bert"])
    betas = np.array([0.5 * spec.beta, spec.beta, 2 * spec.beta])
    alphas = np.linspace(0.0, 2.0, 3)
    diagram = trainability_diagram(spec, betas, alphas)
    check = diagnose(spec)
    assert diagram.alpha_star[1] == pytest.approx(check.alpha_star, rel=1e-12)
    bare = trainability_diagram(spec.architecture, betas, alphas, spec.depth)
    assert abs(bare.alpha_star[1] - check.alpha_star) > 1e-3
    with pytest.raises(ValueError, match="depth"):
        trainability_diagram(spec.architecture, betas, alphas)


def test_check_diagram_is_the_models_diagram(capsys, tmp_path, configs):
    code, out, err = run_cli(capsys, "check", configs["bert"], "--diagram", "--json", "--out", tmp_path,
                             "--name", "m")
    assert code == 0, err
    result = json.loads(out)
    spec = model_spec(configs["bert"])
    diagram = TrainabilityDiagram.load(tmp_path / "m.diagram")
    assert diagram.q0 == spec.q0 and diagram.rho0 == pytest.approx(spec.rho0) and diagram.depth == spec.depth
    # alpha*(beta) between grid betas: off the exact value by at most one grid step's change of alpha*
    step = np.max(np.abs(np.diff(np.asarray(diagram.alpha_star, dtype=float))))
    assert abs(result["diagram"]["alpha_star"] - result["alpha_star"]) <= step + 1e-12
    assert (tmp_path / "m.png").exists() and str(tmp_path / "m.diagram.npz") in result["files"]


def test_check_takes_threads(capsys, tmp_path, configs):
    """--threads sets the theory's kernel threads (the same diagnosis); 0 is one line naming it."""
    import numba

    before = numba.get_num_threads()
    asked = []
    set_threads = numba.set_num_threads
    try:
        numba.set_num_threads = lambda n: (asked.append(n), set_threads(n))
        code, out, err = run_cli(capsys, "check", configs["bert"], "--threads", "1", "--json", "--no-figure",
                                 "--out", tmp_path)
    finally:
        numba.set_num_threads = set_threads
        set_threads(before)
    assert code == 0, err
    assert asked and asked[0] == 1  # the command ran on one thread ...
    assert asked[-1] == before  # ... and gave the caller's count back
    assert json.loads(out)["alpha_star"] == pytest.approx(diagnose(model_spec(configs["bert"])).alpha_star)
    code, _, err = run_cli(capsys, "check", configs["bert"], "--threads", "0", "--no-figure", "--out", tmp_path)
    assert_one_line_error(code, err, "--threads")
