"""``remprop check``'s verdict from the theory it compares: a decoder's phase, final cosine, alpha*,
collapse depth and what-if table come from its last tokens' theory (the causal Gram state where it
runs, else the per-position maps), the layer maps beside them; one work bound, stated alike in the
help, the report and the docs."""
from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from remprop.diagrams.compared_theory import COLLAPSE_SEARCH_RATIO, CausalVerdictTheory
from remprop.diagrams.diagnosis import COMFORTABLE_MARGINS
from remprop.theory import gram_width, model_spec
from remprop.theory.causal import AUTO_GRAM_FLOPS, last_tokens_cosine, propagate_causal_gram

from cli_checks import run_cli
from test_check_report import TINY_LLAMA

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    path = tmp_path_factory.mktemp("configs") / "llama.json"
    path.write_text(json.dumps(TINY_LLAMA))
    return path


def _gram(spec, alpha=None, depth=None):
    arch = spec.architecture if alpha is None else spec.architecture.replace(alpha_sa=alpha)
    return propagate_causal_gram(arch, spec.beta, spec.depth if depth is None else depth, spec.seq_len, spec.q0,
                                 spec.rho0, last=50, draws=8, seed=0, norm_eps=spec.layer_norm_eps,
                                 width=gram_width(arch, spec.width)).rho   # at the model's width (theory.md 8.2)


def test_headline_and_json_are_the_gram_states(capsys, tmp_path, llama):
    """A causal RoPE decoder at small d and T (6 blocks, d 64, T 64), where the layer maps' final cosine
    differs from the Gram state's by far more than the Gram state's Monte Carlo spread (about 4e-4 at
    8 draws, docs/real_models.md 5.4): the headline, the JSON's phase, final cosine, alpha* and collapse
    depth are the Gram state's, recomputed here directly; the layer maps stand beside them."""
    code, out, err = run_cli(capsys, "check", llama, "--seq-len", "64", "--depth", "6", "--json", "--no-figure",
                             "--out", tmp_path)
    assert code == 0, err
    result = json.loads(out)
    spec = model_spec(llama, seq_len=64).with_depth(6)
    deep = _gram(spec, depth=COLLAPSE_SEARCH_RATIO * spec.depth)
    assert result["theory"] == "causal Gram state"
    assert result["final_rho"] == pytest.approx(deep[spec.depth], rel=1e-12)
    assert result["layer_maps"]["final_rho"] == pytest.approx(result["rho"][-1], rel=1e-12)
    assert abs(result["final_rho"] - result["layer_maps"]["final_rho"]) > 0.01   # told apart at this size
    above = np.flatnonzero(deep[1:] > result["threshold"])
    assert result["collapse_depth"] == (int(above[0]) + 1 if above.size else None)
    assert result["max_depth"] == COLLAPSE_SEARCH_RATIO * spec.depth
    assert result["phase"] == ("rank-collapse" if result["final_rho"] > result["threshold"] else "trainable")
    # alpha*: the Gram state's final cosine crosses the threshold there (monotone in alpha_SA; the same
    # seed in every run), bracketed within the search's last step (and at least 1e-3, far above rounding)
    alpha, step = result["alpha_star"], max(10 * result["alpha_star_error"], 1e-3)
    assert 0 < alpha < 1 and result["margins"]["alpha_ratio"] == pytest.approx(1.0 / alpha)
    assert _gram(spec, alpha - step)[-1] > result["threshold"] > _gram(spec, alpha + step)[-1]
    assert abs(alpha - result["layer_maps"]["alpha_star"]) > step  # not the layer maps' alpha*
    # the changes by the Gram state (gain-controlled attention: no causal map, labelled)
    by = {c["name"]: c["theory"] for c in result["changes"]}
    assert by["query/key std"] == "causal Gram state" and by["gain-controlled attention"] == "layer maps"


def test_the_what_if_table_is_the_compared_theorys(capsys, tmp_path, llama):
    """--alpha 0.5: the before/after summaries are the Gram state's (the after at alpha_SA = 0.5), the
    layer maps' final cosine beside them."""
    code, out, err = run_cli(capsys, "check", llama, "--seq-len", "64", "--alpha", "0.5", "--json", "--no-figure",
                             "--out", tmp_path)
    assert code == 0, err
    what_if = json.loads(out)["what_if"]
    spec = model_spec(llama, seq_len=64)
    assert what_if["before"]["theory"] == what_if["after"]["theory"] == "causal Gram state"
    assert what_if["before"]["final_rho"] == pytest.approx(_gram(spec)[-1], rel=1e-12)
    assert what_if["after"]["final_rho"] == pytest.approx(_gram(spec, 0.5)[-1], rel=1e-12)
    assert what_if["after"]["final_rho_layer_maps"] != pytest.approx(what_if["after"]["final_rho"], abs=0.01)
    # the text's headline: the Gram state's final cosine, the layer maps' beside it
    code, text, err = run_cli(capsys, "check", llama, "--seq-len", "64", "--no-figure", "--out", tmp_path)
    assert code == 0, err
    before = what_if["before"]
    assert f"phase            {before['phase']} (final cosine {before['final_rho']:.4f}, threshold" in text
    assert re.search(rf"\(layer maps: [a-z-]+, {before['final_rho_layer_maps']:.4f}\)", text)


def test_the_maps_verdict_where_they_are_compared(capsys, tmp_path, llama):
    """--causal-theory maps: the verdict is the per-position maps' (their alpha* by Brent's root to 1e-9)."""
    code, out, err = run_cli(capsys, "check", llama, "--seq-len", "64", "--causal-theory", "maps", "--max-depth", "300",
                             "--json", "--no-figure", "--out", tmp_path)
    assert code == 0, err
    result = json.loads(out)
    spec = model_spec(llama, seq_len=64)
    assert result["theory"] == "per-position maps" and result["alpha_star_error"] == 0
    maps = last_tokens_cosine(spec.architecture, spec.beta, 300, 64, 50, spec.q0, spec.rho0)
    assert result["final_rho"] == pytest.approx(maps[spec.depth], rel=1e-12)
    above = np.flatnonzero(maps[1:] > result["threshold"])
    assert result["collapse_depth"] == (int(above[0]) + 1 if above.size else None) and result["max_depth"] == 300
    theory = CausalVerdictTheory("maps", spec)
    run = spec.settings
    at = lambda alpha: theory.cosine(run.replace(arch=run.arch.replace(alpha_sa=alpha)))[-1]  # noqa: E731
    assert at(result["alpha_star"] - 1e-6) > result["threshold"] >= at(result["alpha_star"] + 1e-6)


def test_one_work_bound_in_help_report_and_docs(capsys, tmp_path, llama):
    """The bound of auto is AUTO_GRAM_FLOPS alone: the help, the report's reason and docs/real_models.md
    state the same number, and the collapse search of the Gram state is the margin's own ratio."""
    assert COLLAPSE_SEARCH_RATIO == COMFORTABLE_MARGINS["collapse_depth_ratio"]
    code, out, err = run_cli(capsys, "check", "--help")
    help_text = " ".join(out.split())
    stated = re.findall(r"at most (\S+) floating-point operations", help_text)
    assert [float(v) for v in stated] == [AUTO_GRAM_FLOPS]
    code, out, err = run_cli(capsys, "check", llama, "--seq-len", "64", "--json", "--no-figure", "--out", tmp_path)
    reason = json.loads(out)["last_tokens_theory_reason"]
    assert [float(v) for v in re.findall(r"auto takes it up to (\S+?)[;)]", reason)] == [AUTO_GRAM_FLOPS]
    docs = " ".join((ROOT / "docs" / "real_models.md").read_text().split())
    bounds = re.findall(r"at most (\S+) floating-point operations", docs)
    assert bounds and all(float(v) == AUTO_GRAM_FLOPS for v in bounds)
    for folder in ("src", "diagrams", "theory", "docs"):  # no second constant left anywhere
        for path in (ROOT / folder).rglob("*.*"):
            if path.suffix in (".py", ".md"):
                assert "DIAGNOSIS_GRAM_FLOPS" not in path.read_text(), path
    assert math.isfinite(AUTO_GRAM_FLOPS)


def test_headline_by_the_gram_state_margins_by_the_maps_where_only_the_headline_fits(monkeypatch, llama):
    """Where the bound covers the headline's Gram state (the model to twice its depth) but not the whole
    verdict (with alpha* and the changes, 9 x the depth), auto gives the headline by the Gram state and
    alpha* and the changes by the per-position maps, says so in the report and the JSON, and counts only
    the headline's layers in the estimate. The bound is set between the two counts of this small model
    (4 and 18 layers at T 64), so the rule, not a size, is what is tested."""
    import remprop.diagrams.compared_theory as compared
    from remprop.diagrams import diagnose
    from remprop.diagrams.diagnosis_work import gram_layers
    from remprop.theory.causal import causal_gram_flops

    spec = model_spec(llama, seq_len=64)
    arch = spec.architecture
    per_layer = causal_gram_flops(arch, 1, 64, 8, width=gram_width(arch, spec.width))
    monkeypatch.setattr(compared, "AUTO_GRAM_FLOPS", 10 * per_layer)   # 4 <= 10 < 18 layers
    assert compared.headline_gram_layers(spec.depth, 4) == 4 and compared.verdict_gram_layers(spec.depth, 4) == 18
    split = diagnose(spec, max_depth=4)
    assert (split.last_tokens_theory, split.margins_theory) == ("gram", "maps")
    assert "whole verdict" in split.margins_reason and "18 layers" in split.margins_reason
    assert gram_layers(spec, max_depth=4) == 4
    gram, maps = diagnose(spec, max_depth=4, causal_theory="gram"), diagnose(spec, max_depth=4, causal_theory="maps")
    assert gram.margins_theory == "gram" and maps.margins_theory == "maps"
    assert gram_layers(spec, "gram", max_depth=4) == 18
    # the headline is the Gram state's (the same seed: equal to rounding), alpha* and the changes the maps'
    np.testing.assert_allclose(split.rho_last_tokens, gram.rho_last_tokens, rtol=1e-12)
    assert split.phase == gram.phase and split.collapse_depth == gram.collapse_depth
    assert split.alpha_star == maps.alpha_star
    by, by_maps = {c.name: c for c in split.changes}, {c.name: c for c in maps.changes}
    assert by["gain-controlled attention"].theory == "layer maps"
    for name in ("query/key std", "LayerNorm placement"):
        assert by[name].theory == "per-position maps" and by[name].final_rho == by_maps[name].final_rho
    report = split.report()
    assert "alpha* and changes by the per-position maps" in report
    assert "phase, collapse depth by the causal Gram" in report
    assert split.to_dict()["margins_theory"] == "maps" and gram.to_dict()["margins_theory"] == "gram"
