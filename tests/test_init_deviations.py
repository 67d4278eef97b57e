"""What a model's own weights change against the library's default init; zero inits; --simulate on own weights.

Tiny real ``transformers`` models (BERT, GPT-2, LLaMA; 2-4 layers, d = 64) initialised three
ways -- the library default, a scaled branch (GPT-2's ``c_proj`` times 5), muP's zero query and
DeepNorm's down-scaled branches -- are held against the default-init table
(:mod:`remprop.theory.models.default_init`).

Tolerances: a sample mean square of ``n`` i.i.d. Gaussian entries has relative standard
deviation ``sqrt(2/n)`` (``second_moment_error``); a measured ratio is within ``TOL_SIGMAS = 5``
of them of the scheme's, and the table flags at ``SIGNIFICANCE = 5``: a default draw is
flagged with probability below 1e-6 per tensor, and a factor-5 scaling (ratio^2 - 1 = 24) is
hundreds of errors away even for a 64 x 64 matrix (error 0.022).
"""
from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import remprop  # noqa: E402
from remprop.theory import participation_moment, propagate  # noqa: E402
from remprop.theory.models.default_init import default_scales, init_deviations  # noqa: E402
from remprop.theory.models.measured_weights import ZERO_BETA, second_moment_error  # noqa: E402

from cli_checks import assert_one_line_error, run_cli  # noqa: E402
from test_own_weights import T, WIDTH, _bert, _gpt2, _llama  # noqa: E402  (the same tiny models)

TOL_SIGMAS = 5.0
VOCAB = 100  # test_own_weights' tiny models
MAX_DEPTH = 200  # the collapse search of these 2-4 layer models; keeps each check under a second


def _rows(diagnosis):
    return {row.role: row for row in diagnosis.init.rows}


@pytest.mark.parametrize("build", [_bert, _gpt2, _llama], ids=["bert", "gpt2", "llama"])
def test_library_default_is_within_its_sampling_error(build):
    """Every tensor of a default-initialised model is its family's default draw: no flag, and each
    measured mean square within 5 sampling errors of the table's (gains exactly 1)."""
    diagnosis = remprop.check(build(), max_depth=MAX_DEPTH)
    assert diagnosis.init is not None and not diagnosis.init.flagged and not diagnosis.init.effects
    for row in diagnosis.init.rows:
        if row.error:
            assert abs(row.ratio ** 2 - 1) < TOL_SIGMAS * row.error, row
        else:
            assert row.measured_std == row.default_std, row
    assert "within its sampling error of the library's default" in diagnosis.report()
    assert not diagnosis.changes[0].action.startswith("the attention branch")


def test_gpt2_default_table_has_the_depth_scaled_projections():
    """GPT-2's _init_weights draws attn.c_proj and mlp.c_proj with r / sqrt(2 n_layer)."""
    spec = remprop.theory.model_spec(_gpt2(layers=4).config)
    scales = default_scales(spec)
    assert math.sqrt(scales["output"]) == pytest.approx(0.02 / math.sqrt(8))
    assert math.sqrt(scales["mlp_out"]) == pytest.approx(0.02 / math.sqrt(8))
    assert scales["query"] == scales["value"] == scales["mlp_in"] == pytest.approx(0.02 ** 2)
    assert scales["word"] == pytest.approx(0.02 ** 2)  # GPT-2's wte has no padding row
    bert = default_scales(remprop.theory.model_spec(_bert().config))  # pad_token_id 0: one zero row of V
    assert bert["word"] == pytest.approx(0.02 ** 2 * (1 - 1 / VOCAB))


def test_scaled_residual_branch_is_flagged_with_its_effect():
    """Every c_proj x5 (the attention output and the MLP's second layer): both flagged at ratio 5 within
    the sampling error, nothing else flagged; the effects name the branch amplitude as alpha / 5, and
    the skip advice is no longer "none needed"."""
    model = _gpt2(layers=4)
    with torch.no_grad():
        for block in model.h:
            block.attn.c_proj.weight.mul_(5.0)
            block.mlp.c_proj.weight.mul_(5.0)
    diagnosis = remprop.check(model, max_depth=MAX_DEPTH)
    rows = _rows(diagnosis)
    assert {row.role for row in diagnosis.init.flagged} == {"output", "mlp_out"}
    for role in ("output", "mlp_out"):
        assert abs(rows[role].ratio ** 2 / 25 - 1) < TOL_SIGMAS * rows[role].error, rows[role]
    effects = {e.group: e for e in diagnosis.init.effects}
    assert set(effects) == {"value/output", "MLP", "all flagged"}
    for group in ("value/output", "MLP"):
        # the amplitude is the variance product's: sigma_v2 sigma_o2 / default, the measured sigma_v2 kept
        assert effects[group].amplitude == pytest.approx(rows["output" if group == "value/output" else "mlp_out"].ratio,
                                                         rel=1e-9)
        assert effects[group].effective_alpha == pytest.approx(1 / effects[group].amplitude)
    both = effects["all flagged"]
    assert both.default["final_rho"] < both.model["final_rho"]  # the scaled branches raise the cosine
    assert "rank collapse" in both.toward
    assert both.equivalent_depth > diagnosis.spec.depth  # its 4 layers are as aligned as more default ones
    skip = diagnosis.changes[0]
    assert skip.name == "skip scaling" and not skip.action.startswith("none needed")
    assert "attention branch 5" in skip.action and skip.final_rho == pytest.approx(both.default["final_rho"])
    report = diagnosis.report()
    assert "DEVIATES" in report and "attention branch x5" in report
    data = json.loads(json.dumps(remprop._json.to_jsonable(diagnosis.to_dict())))
    assert {r["role"] for r in data["init_deviations"]["rows"] if r["flagged"]} == {"output", "mlp_out"}


def test_deepnorm_branches_are_flagged_down():
    """DeepNorm's W_V, W_O and MLP times (8L)^(-1/4) of the default std: flagged at that ratio, the queries not."""
    layers = 4
    model = _llama(layers)
    down = (8 * layers) ** -0.25
    with torch.no_grad():
        for layer in model.model.layers:
            for linear in (layer.self_attn.v_proj, layer.self_attn.o_proj, layer.mlp.gate_proj, layer.mlp.up_proj,
                           layer.mlp.down_proj):
                linear.weight.mul_(down)
    diagnosis = remprop.check(model, max_depth=MAX_DEPTH)
    rows = _rows(diagnosis)
    assert {row.role for row in diagnosis.init.flagged} == {"value", "output", "mlp_in", "mlp_out"}
    for role in ("value", "output", "mlp_in", "mlp_out"):
        assert abs(rows[role].ratio ** 2 / down ** 2 - 1) < TOL_SIGMAS * rows[role].error, rows[role]
    effects = {e.group: e for e in diagnosis.init.effects}
    assert effects["value/output"].amplitude == pytest.approx(down ** 2, rel=TOL_SIGMAS * 2 * rows["value"].error)
    assert effects["value/output"].effective_alpha > 1  # a weaker branch: a stronger skip against it


def test_zero_query_is_uniform_attention():
    """muP's zero query: beta = 0, run as the maps' beta -> 0 limit; the first layer's participation ratio
    is the uniform rows' 1/T; W_Q flagged at ratio 0; the report says why."""
    model = _bert()
    with torch.no_grad():
        for layer in model.encoder.layer:
            layer.attention.self.query.weight.zero_()
    diagnosis = remprop.check(model, max_depth=MAX_DEPTH)
    assert diagnosis.spec.beta == ZERO_BETA
    assert diagnosis.y2_first == pytest.approx(1 / T, rel=1e-12)
    assert _rows(diagnosis)["query"].flagged and _rows(diagnosis)["query"].ratio == 0
    assert np.all(np.isfinite(diagnosis.rho)) and diagnosis.phase == "trainable"
    assert any("uniform attention" in note for note in diagnosis.spec.assumptions)


def test_zero_beta_is_the_limit_of_the_maps():
    """The engine at ZERO_BETA equals the engine at 1e-12 and 1e-100 to the last bit (its beta -> 0
    limit: the corrections are O(beta^2) relative), and the participation ratio is 1/T."""
    spec = remprop.theory.model_spec(_bert().config)
    runs = [propagate(spec.settings.replace(beta=b)) for b in (ZERO_BETA, 1e-100, 1e-12)]
    for other in runs[1:]:
        np.testing.assert_array_equal(runs[0].rho, other.rho)
        np.testing.assert_array_equal(runs[0].q, other.q)
    assert float(participation_moment(ZERO_BETA, 1.0, 0.3, T)) == pytest.approx(1 / T, rel=1e-14)


def test_zero_output_projections_leave_the_embedding():
    """Zero-initialised residual branches (W_O and the MLP's second layer): post-LN only renormalises
    the embedding, so every layer's predicted cosine is rho0; measured on the model itself too."""
    from remprop.validation.own_simulation import simulate_own_weights

    model = _bert()
    with torch.no_grad():
        for layer in model.encoder.layer:
            layer.attention.output.dense.weight.zero_()
            layer.output.dense.weight.zero_()
    diagnosis = remprop.check(model, max_depth=MAX_DEPTH)
    np.testing.assert_allclose(diagnosis.rho, diagnosis.spec.rho0, rtol=1e-12)
    assert any("zero-initialised residual branch" in note for note in diagnosis.spec.assumptions)
    assert all(math.isinf(e.effective_alpha) for e in diagnosis.init.effects if e.amplitude is not None)
    measured = simulate_own_weights(model, spec=diagnosis.spec, seeds=(0,), sequences=2, theory=diagnosis.rho)
    # the user's weights ran: the cosine is the embedding's at every layer (float32 rounding);
    # a fresh init would move it
    np.testing.assert_allclose(measured.rho[0, :, 1:] - measured.rho[0, :, :1], 0.0, atol=1e-5)
    assert model.training is False


@pytest.mark.parametrize("bad", [math.nan, math.inf], ids=["nan", "inf"])
def test_bad_weights_stay_refused(bad):
    model = _bert()
    with torch.no_grad():
        model.encoder.layer[0].attention.self.query.weight[0, 0] = bad
    with pytest.raises(ValueError, match="query weights of BertModel have mean square"):
        remprop.check(model)


def test_table_rows_match_the_measurement():
    """The theory side alone: init_deviations of the measured weights, one row per measured role."""
    diagnosis = remprop.check(_gpt2(layers=4), max_depth=MAX_DEPTH)
    rows = init_deviations(diagnosis.spec, diagnosis.spec.weights)
    assert [r.role for r in rows] == [r.role for r in diagnosis.init.rows]
    query = next(r for r in rows if r.role == "query")
    assert query.error == pytest.approx(float(second_moment_error(WIDTH * WIDTH * 4)))


def test_check_dir_flags_the_scaled_branch_and_simulates_own_weights(tmp_path, capsys):
    """``remprop check DIR``: the JSON's init_deviations flags c_proj x5; ``--simulate`` runs the folder's
    weights (``simulation.weights == "own"``) with the same verdict line as ``check NAME --simulate``."""
    model = _gpt2(layers=2)
    with torch.no_grad():
        for block in model.h:
            block.attn.c_proj.weight.mul_(5.0)
    folder = tmp_path / "gpt2-x5"
    model.save_pretrained(folder, safe_serialization=True)
    capsys.readouterr()
    code, out, err = run_cli(capsys, "check", folder, "--json", "--no-figure", "--simulate", "--seeds", "2",
                             "--max-depth", MAX_DEPTH, "--causal-theory", "maps", "--out", tmp_path / "out")
    assert code == 0, err
    result = json.loads(out)
    assert [r["role"] for r in result["init_deviations"]["rows"] if r["flagged"]] == ["output"]
    simulation = result["simulation"]
    assert simulation["weights"] == "own" and simulation["seeds"] == [0, 1]
    assert isinstance(simulation["agreement"]["passed"], bool) and len(simulation["rho_mean"]) == 3
    code, out, err = run_cli(capsys, "check", folder, "--no-figure", "--simulate", "--seeds", "1",
                             "--max-depth", MAX_DEPTH, "--causal-theory", "maps", "--out", tmp_path / "out")
    assert code == 0, err
    assert "simulated on its own weights" in out and out.strip().splitlines()[-1].startswith("verdict:")
    # --width still redraws: refused on a folder of weights, one line
    code, _, err = run_cli(capsys, "check", folder, "--width", "32", "--no-figure", "--out", tmp_path / "out")
    assert_one_line_error(code, err, "--width")


def test_docs_deviation_example_runs():
    """docs/real_models.md section 6.4's example, run as written (its asserts are the test)."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "real_models.md").read_text()
    block = text[text.index("<!-- deviation-example -->"):text.index("<!-- /deviation-example -->")]
    code = re.search(r"```python\n(.*?)```", block, re.DOTALL).group(1)
    exec(compile(code, "docs/real_models.md", "exec"), {})


def test_norm_gain_is_flagged_exactly_and_moves_beta():
    """GPT-2's attention-input LayerNorm gains at 2 (default exactly 1): flagged beyond rounding, and
    beta -- which carries g_A^2 in a pre-LN block -- is 4x the default's: toward entropy collapse."""
    model = _gpt2(layers=2)
    with torch.no_grad():
        for block in model.h:
            block.ln_1.weight.fill_(2.0)
    diagnosis = remprop.check(model, max_depth=MAX_DEPTH)
    assert [row.role for row in diagnosis.init.flagged] == ["attention_norm"]
    assert _rows(diagnosis)["attention_norm"].ratio == 2.0 and _rows(diagnosis)["attention_norm"].error == 0
    (effect,) = diagnosis.init.effects
    assert effect.parameters["beta"] == pytest.approx(4 * effect.default_parameters["beta"], rel=1e-12)
    assert "entropy collapse" in effect.toward


def test_simulate_refuses_a_folder_that_would_be_completed_at_random(tmp_path, capsys):
    """A tensor the measurement does not read (the embedding norm's shift) missing from the folder:
    transformers would draw it, so the run would not be the folder's weights -- one error naming it."""
    from safetensors.torch import load_file, save_file

    from remprop.validation.own_simulation import simulate_own_weights

    folder = tmp_path / "bert"
    _bert().save_pretrained(folder, safe_serialization=True)
    capsys.readouterr()
    path = next(folder.glob("*.safetensors"))
    tensors = load_file(str(path))
    name = next(k for k in tensors if k.endswith("embeddings.LayerNorm.bias"))
    save_file({k: v for k, v in tensors.items() if k != name}, str(path), metadata={"format": "pt"})
    spec = remprop.check(folder, max_depth=MAX_DEPTH).spec  # the measurement does not need it
    with pytest.raises(ValueError, match="LayerNorm.bias"):
        simulate_own_weights(folder, spec=spec, seeds=(0,), theory=np.zeros(spec.depth + 1))


def test_own_weights_verdict_names_input_draws(tmp_path, capsys):
    """``check DIR --simulate``: one set of weights, the seeds draw its inputs -- the verdict line and the
    JSON's agreement say "input draws", never "initialisations"; ``check NAME`` keeps "initialisations"."""
    from remprop.validation.agreement import agreement_rule

    folder = tmp_path / "bert"
    _bert().save_pretrained(folder, safe_serialization=True)
    capsys.readouterr()
    args = ("--no-figure", "--simulate", "--seeds", "2", "--max-depth", MAX_DEPTH, "--out", tmp_path / "out")
    code, out, err = run_cli(capsys, "check", folder, "--json", *args)
    assert code == 0, err
    simulation = json.loads(out)["simulation"]
    assert simulation["seed_draws"] == simulation["agreement"]["seed_draws"] == "input draws"
    code, out, err = run_cli(capsys, "check", folder, *args)
    assert code == 0, err
    verdict = out.strip().splitlines()[-1]
    assert verdict.startswith("verdict:") and "over the 2 input draws" in verdict and "initialisation" not in verdict
    kept = sorted((tmp_path / "out").glob("*.simulation/weights-*"))  # the second run read the first's seeds there
    assert len(kept) == 1 and sorted(p.name for p in kept[0].rglob("seed-*.json")) == ["seed-0.json", "seed-1.json"]
    rule = {"tolerance": 0.02, "standard_errors": 2.0, "seeds": 1}
    assert "(one initialisation: no standard error)" in agreement_rule(rule)
    assert "(one input draw: no standard error)" in agreement_rule({**rule, "seed_draws": "input draws"})


def test_own_weights_simulation_resumes_and_never_mixes_weights(tmp_path, monkeypatch):
    """The store of simulate_own_weights: a rerun on the same weights measures nothing (the kept seeds
    are read back bit for bit), a new seed is the only one measured; weights changed by one entry get
    their own subfolder and are measured afresh; a damaged record is measured again, with a warning."""
    from remprop.validation import own_simulation
    from remprop.validation.experiments.cell_store import DamagedRecordWarning

    calls = []
    measure = own_simulation.measure_inputs

    def counted(spec, module, seed, sequences, advance=None):
        calls.append(seed)
        return measure(spec, module, seed, sequences, advance=advance)

    monkeypatch.setattr(own_simulation, "measure_inputs", counted)
    model = _bert()
    spec = remprop.check(model, max_depth=MAX_DEPTH).spec
    theory = np.zeros(spec.depth + 1)

    def run(weights, seeds):
        return own_simulation.simulate_own_weights(weights, spec=spec, seeds=seeds, sequences=2, theory=theory,
                                                   store=tmp_path / "store")

    first = run(model, (0, 1))
    assert calls == [0, 1]
    again = run(model, (0, 1, 2))
    assert calls == [0, 1, 2]  # only the new seed
    np.testing.assert_array_equal(again.rho[:2], first.rho)
    assert again.summary()["agreement"]["seed_draws"] == "input draws"
    folders = sorted(p.name for p in (tmp_path / "store").iterdir())
    assert folders == [f"weights-{own_simulation.weights_digest(model)[:16]}"]
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.encoder.layer[0].attention.self.query.weight[0, 0] += 1e-3
    run(other, (0,))
    assert calls == [0, 1, 2, 0]  # other weights: not the kept seed 0
    assert len(list((tmp_path / "store").iterdir())) == 2
    record = next((tmp_path / "store" / folders[0]).rglob("seed-1.json"))
    record.write_text(record.read_text().replace("0.", "0.5", 1))  # an edited number: its checksum fails
    with pytest.warns(DamagedRecordWarning):
        run(model, (0, 1))
    assert calls[4:] == [1]


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="named pipes need os.mkfifo (POSIX)")
def test_weights_digest_of_a_folder_follows_its_files(tmp_path, capsys):
    """A folder's digest changes with its weights, and a named pipe among them is refused by name unopened."""
    import os

    from remprop.validation.own_simulation import weights_digest

    folder = tmp_path / "bert"
    _bert().save_pretrained(folder, safe_serialization=True)
    capsys.readouterr()
    before = weights_digest(folder)
    assert weights_digest(folder) == before
    path = next(folder.glob("*.safetensors"))
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    assert weights_digest(folder) != before
    os.mkfifo(folder / "extra.safetensors")
    with pytest.raises(ValueError, match="extra.safetensors"):
        weights_digest(folder)
