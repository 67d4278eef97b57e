"""One verdict line on every comparison (issue 44 item 3): ``validate`` and ``check --simulate``
end with agree / disagree by the package's one rule (:mod:`remprop.validation.agreement`), the rule
and the worst layer."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")

from remprop.cli import main  # noqa: E402
from remprop.theory import model_spec  # noqa: E402
from remprop.validation import SimulationSettings, compare  # noqa: E402
from remprop.validation.agreement import (ACCEPTANCE_TOLERANCE, acceptance_error, agreement,  # noqa: E402
                                          verdict_line)
from remprop.validation.experiments import acceptance_table  # noqa: E402
from remprop.validation.hf_models import ModelMeasurement  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))

TINY = ["--depth", "3", "--width", "32", "--sim-seq-len", "16", "--seeds", "2", "--sequences", "2", "--device", "cpu",
        "--inputs", "synthetic", "--theory", "mean", "--no-progress"]


def test_the_rule_has_one_home():
    """The acceptance table applies the very function the verdicts do (no second copy of the rule)."""
    assert acceptance_table.acceptance_error is acceptance_error
    assert acceptance_table.ACCEPTANCE_TOLERANCE == ACCEPTANCE_TOLERANCE == 0.02


def _tiny_comparison():
    sim = SimulationSettings(width=32, seq_len=16, seeds=(0, 1), sequences=2, inputs="synthetic", q0=1.0,
                             rho0=0.2, device="cpu")
    return compare(depth=3, sim=sim, theory="mean")


def _with_theory(comparison, rho):
    return dataclasses.replace(comparison, theory=dataclasses.replace(comparison.theory, cosine=np.asarray(rho)))


@pytest.fixture(scope="module")
def comparison():
    return _tiny_comparison()


def test_a_theory_on_the_measured_means_agrees(comparison):
    exact = _with_theory(comparison, comparison.mean("cosine"))
    result = exact.agreement()
    assert result["passed"] and result["worst_error"] == pytest.approx(0.0, abs=1e-12)
    line = exact.verdict()
    assert line.startswith("verdict: theory and measurement agree (rule: every layer 1..L within max(0.02, "
                           "2 standard errors over the 2 initialisations)); worst layer "), line
    assert "\n" not in line


def test_a_shifted_theory_disagrees_and_names_its_worst_layer(comparison):
    """Theory shifted by 0.05 at layer 2 only: 0.05 > 0.02, and > 2 s.e. unless the seeds scatter by
    more than that, which the shift is chosen to exceed (the s.e. of 2 seeds at d = 32 is measured, not assumed)."""
    rho = comparison.mean("cosine").copy()
    se = comparison.trace.cosine.reshape(2, 2, -1).mean(axis=1).std(axis=0, ddof=1) / np.sqrt(2)
    shift = max(0.05, 4 * se[2])  # beyond both the tolerance and the 2 s.e. the rule allows
    rho[2] += shift
    shifted = _with_theory(comparison, rho)
    result = shifted.agreement()
    assert not result["passed"] and result["worst_layer"] == 2
    assert result["worst_error"] == pytest.approx(shift)
    line = shifted.verdict()
    assert line.startswith("verdict: theory and measurement disagree (rule: ") and "worst layer 2: error" in line
    assert shifted.to_dict(per_sequence=False)["agreement"]["passed"] is False


def test_a_curve_that_is_not_finite_is_a_disagreement_that_says_why():
    result = agreement(np.r_[0.0, np.nan], np.zeros((2, 2)))
    assert result["passed"] is False and "not finite" in verdict_line(result)


def _patched_compare(monkeypatch, shift):
    """compare() as the CLI calls it, its theory replaced by the measured means (+ ``shift`` at layer 1)."""
    import remprop.validation as validation

    real = validation.compare

    def fake(*args, **kwargs):
        result = real(*args, **kwargs)
        rho = result.mean(result.observable).copy()
        rho[1] += shift
        return _with_theory(result, rho)

    monkeypatch.setattr(validation, "compare", fake)


@pytest.mark.parametrize("shift, word", [(0.0, "agree"), (0.5, "disagree")])
def test_validate_ends_with_the_verdict_line(monkeypatch, tmp_path, capsys, shift, word):
    _patched_compare(monkeypatch, shift)
    assert main(["validate", *TINY, "--out", str(tmp_path)]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith(f"verdict: theory and measurement {word} (rule: every layer 1..L within max(0.02"), last
    assert "worst layer 1: error" in last if shift else "worst layer" in last
    assert main(["validate", *TINY, "--out", str(tmp_path), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["agreement"]["passed"] is (shift == 0.0) and data["verdict"].startswith(f"verdict: theory and "
                                                                                       f"measurement {word} ")


def _measurement(shift):
    """A ModelMeasurement of 2 seeds x 2 sequences whose theory is the measured mean (+ shift at layer 2)."""
    spec = model_spec("bert-base").with_depth(3)
    rng = np.random.default_rng(0)
    rho = 0.5 + 0.001 * rng.standard_normal((2, 2, 4))
    theory = rho.mean(axis=(0, 1))
    theory[2] += shift
    return ModelMeasurement(spec, (0, 1), rho, np.ones_like(rho), rho.copy(), np.full((2, 2, 3), 0.5), None, theory)


@pytest.mark.parametrize("shift, word", [(0.0, "agree"), (0.1, "disagree")])
def test_check_simulate_verdict_of_both_outcomes(shift, word):
    from remprop.cli.commands.check import _verdict_text

    summary = _measurement(shift).summary()
    assert summary["agreement"]["passed"] is (shift == 0.0)
    line = _verdict_text(summary["agreement"])
    assert line.startswith(f"verdict: theory and measurement {word} (rule: every layer 1..L within max(0.02, "
                           "2 standard errors over the 2 initialisations)); worst layer "), line
    if shift:
        assert "worst layer 2: error 0.1000" in line


def test_check_simulate_ends_with_the_verdict_line(capsys, tmp_path):
    pytest.importorskip("transformers")
    from remprop.theory.models.hf_config import load_hf_config

    config = dict(load_hf_config("bert-base"), num_hidden_layers=2, hidden_size=64, num_attention_heads=4,
                  intermediate_size=128, vocab_size=500)
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(config))
    code = main(["check", "--hf-config", str(path), "--seq-len", "32", "--simulate", "--seeds", "2", "--sequences",
                 "1", "--no-figure", "--out", str(tmp_path), "--name", "tiny"])
    out = capsys.readouterr().out
    assert code == 0
    last = out.strip().splitlines()[-1]
    assert last.startswith("verdict: theory and measurement ") and " (rule: every layer 1..L within " in last, last
    stored = json.loads((tmp_path / "tiny.json").read_text())["simulation"]["agreement"]
    assert ("measurement agree (rule" in last) is stored["passed"]
