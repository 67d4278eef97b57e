"""From Hugging Face configurations to the engine's parameters, and the diagnosis of a model."""
import json
import math

import numpy as np
import pytest

from remprop.diagrams import classify_phases, diagnose, min_residual_strength, trainability_diagram
from remprop.diagrams.phases import PHASE_LABELS
from remprop.theory import (Architecture, key_gradient_norm, model_spec, propagate, query_gradient_norm,
                            shipped_configs)
from remprop.theory.models.hf_config import CONFIG_DIR, load_hf_config

R2 = 0.02 ** 2


def test_every_shipped_config_translates():
    names = shipped_configs()
    assert {"bert-base", "gpt2", "bert-48", "roberta-base", "vit-base"} <= set(names)
    for name in names:
        spec = model_spec(name)
        assert spec.architecture.seq_len == spec.seq_len and spec.depth >= 1


def test_bert_base_translation():
    spec = model_spec("bert-base")
    arch = spec.architecture
    assert (arch.norm, arch.attention, arch.activation, arch.heads, arch.qk_scaling) == (
        "post", "softmax", "gelu", 12, "model")
    assert (spec.depth, spec.width, spec.d_ff, spec.seq_len, spec.causal) == (12, 768, 3072, 512, False)
    # every weight N(0, r^2): variance times fan-in
    assert arch.sigma_v2 == pytest.approx(R2 * 768) and arch.sigma_w2 == pytest.approx(R2 * 768)
    assert arch.sigma_o2 == pytest.approx(R2 * 768) and arch.sigma_w2_out == pytest.approx(R2 * 3072)
    assert arch.sigma_b2 == 0.0 and arch.alpha_sa == 1.0 and arch.alpha_mlp == 1.0
    # Var(W_Q) = r^2 = beta sqrt(log T) / d
    assert spec.beta == pytest.approx(R2 * 768 / math.sqrt(math.log(512)))
    assert spec.query_key_std(spec.beta) == pytest.approx(0.02)
    # normalised word + position + shared token-type embeddings
    assert spec.q0 == 1.0 and spec.rho0 == pytest.approx((1 + 1 / 30522) / 3)
    assert Architecture.from_hf_config("bert-base").to_dict() == arch.to_dict()


def test_gpt2_translation():
    spec = model_spec("gpt2")
    arch = spec.architecture
    assert arch.norm == "pre" and spec.causal and spec.final_layer_norm and not spec.embedding_layer_norm
    assert spec.seq_len == 1024 and spec.hidden_act == "gelu_new" and arch.activation == "gelu"
    # c_proj of attention and MLP: std r / sqrt(2 n_layer)
    assert arch.sigma_o2 == pytest.approx(R2 * 768 / 24) and arch.sigma_w2_out == pytest.approx(R2 * 3072 / 24)
    assert arch.sigma_w2 == pytest.approx(R2 * 768)
    assert spec.q0 == pytest.approx(2 * R2) and spec.rho0 == pytest.approx(1 / (2 * 50257))
    assert any("gelu_new" in text for text in spec.assumptions)
    assert any("causal" in text for text in spec.assumptions)
    short = spec.with_depth(4)
    assert short.depth == 4 and short.architecture.sigma_o2 == pytest.approx(R2 * 768 / 8)


def test_vit_and_roberta_translation():
    vit = model_spec("vit-base")
    assert vit.seq_len == 14 * 14 + 1 and vit.architecture.norm == "pre"
    assert vit.q0 == pytest.approx(R2 * (3 * 16 * 16 + 1)) and vit.rho0 == 0.0
    assert model_spec("vit-base", pixel_std=2.0).q0 == pytest.approx(R2 * (3 * 256 * 4 + 1))
    roberta = model_spec("roberta-base")
    assert roberta.seq_len == 512 and roberta.architecture.norm == "post"


def test_config_sources_agree(tmp_path):
    transformers = pytest.importorskip("transformers")
    as_dict = load_hf_config("bert-base")
    (tmp_path / "config.json").write_text(json.dumps(as_dict))
    sources = [as_dict, tmp_path / "config.json", str(tmp_path), CONFIG_DIR / "bert-base.json",
               transformers.BertConfig(**{k: v for k, v in as_dict.items() if k not in ("model_type", "_name_or_path")}),
               "bert-base-uncased"]
    reference = model_spec("bert-base")
    for source in sources:
        spec = model_spec(source)
        assert spec.architecture.to_dict() == reference.architecture.to_dict()
        assert (spec.beta, spec.q0, spec.rho0, spec.depth) == (reference.beta, reference.q0, reference.rho0,
                                                               reference.depth)


BAD = [
    (lambda: model_spec("no-such-model"), "config"),
    (lambda: model_spec({"model_type": "t5"}), "model_type"),
    (lambda: model_spec(dict(load_hf_config("bert-base"), hidden_act="mish")), "hidden_act"),
    (lambda: model_spec(dict(load_hf_config("bert-base"), hidden_size=None)), "hidden_size"),
    (lambda: model_spec(dict(load_hf_config("bert-base"), num_attention_heads=5)), "heads"),
    (lambda: model_spec(dict(load_hf_config("bert-base"), initializer_range=-0.1)), "initializer_range"),
    (lambda: model_spec(dict(load_hf_config("bert-base"), initializer_range=float("nan"))), "initializer_range"),
    (lambda: model_spec("gpt2", seq_len=4096), "seq_len"),
    (lambda: model_spec("gpt2", seq_len=1), "seq_len"),
    (lambda: model_spec("vit-base", seq_len=100), "seq_len"),
    (lambda: model_spec("vit-base", pixel_std=0.0), "pixel_std"),
    (lambda: model_spec(3.5), "config"),
    (lambda: model_spec("gpt2").with_depth(0), "depth"),
]


@pytest.mark.parametrize("case", range(len(BAD)))
def test_bad_configs_are_named(case):
    call, name = BAD[case]
    with pytest.raises(ValueError, match=name):
        call()


def test_unreadable_json_is_named(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("{not json")
    with pytest.raises(ValueError, match="config"):
        model_spec(path)


# -- diagnosis ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bert_diagnosis():
    return diagnose("bert-base")


def test_diagnosis_agrees_with_the_engine(bert_diagnosis):
    d, spec = bert_diagnosis, bert_diagnosis.spec
    traj = propagate(spec.architecture, spec.beta, spec.depth, spec.q0, spec.rho0)
    np.testing.assert_array_equal(d.rho, traj.rho)
    assert d.beta_critical == pytest.approx(math.sqrt(2 / (1 - spec.rho0)))  # post-LN: q = 1, p = rho0
    assert d.alpha_star == min_residual_strength(spec.architecture, depth=spec.depth, beta=spec.beta,
                                                 q0=spec.q0, rho0=spec.rho0)
    code = int(classify_phases(spec.beta, d.beta_critical, d.rho[-1], d.threshold))
    assert d.phase == PHASE_LABELS[code] == "trainable"
    # the onset of rank collapse is the first depth whose final cosine passes the threshold
    deep = propagate(spec.architecture, spec.beta, d.collapse_depth, spec.q0, spec.rho0).rho
    assert deep[-1] > d.threshold >= deep[-2]
    # post-LN: the first attention layer sees the normalised embeddings (q = 1, p = rho0)
    args = dict(sigma_v2=spec.architecture.sigma_v2, norm_variance=0.0)
    assert d.gradient_first == pytest.approx(query_gradient_norm(spec.beta, 1.0, spec.rho0, 768, 512, **args))
    assert d.key_gradient_last == pytest.approx(key_gradient_norm(spec.beta, traj.q[-2], traj.p[-2], 768, 512,
                                                                  **args))
    assert d.gradient_last < d.gradient_first  # Result 2: the gradient falls as the tokens align
    report = d.report()
    for text in ("beta_c", "alpha*", "collapse", "E|dS/dW_Q|^2", "E|dS/dW_K|^2", "assumptions"):
        assert text in report


def test_diagnosis_sits_where_the_diagram_says(bert_diagnosis):
    spec = bert_diagnosis.spec
    diagram = trainability_diagram(spec.architecture, [spec.beta], [1.0], spec.depth, q0=spec.q0, rho0=spec.rho0)
    assert PHASE_LABELS[int(diagram.phase[0, 0])] == bert_diagnosis.phase


def test_changes_are_predicted_by_the_engine(bert_diagnosis):
    spec = bert_diagnosis.spec
    changes = {c.name: c for c in bert_diagnosis.changes}
    qk = changes["query/key std"]
    assert qk.values["beta"] == pytest.approx(bert_diagnosis.beta_critical / 2)
    assert spec.query_key_std(qk.values["beta"]) == pytest.approx(qk.values["query_key_std"])
    rho = propagate(spec.architecture, qk.values["beta"], spec.depth, spec.q0, spec.rho0).rho[-1]
    assert qk.final_rho == pytest.approx(rho) and qk.values["gradient_factor"] > 1
    pre = propagate(spec.architecture.replace(norm="pre"), spec.beta, spec.depth, spec.q0, spec.rho0).rho[-1]
    assert changes["LayerNorm placement"].final_rho == pytest.approx(pre)
    gain = propagate(spec.architecture.replace(attention="gain-controlled"), spec.beta, spec.depth, spec.q0,
                     spec.rho0).rho[-1]
    assert changes["gain-controlled attention"].final_rho == pytest.approx(gain)


def test_rank_collapsed_model_gets_a_skip_strength_that_fixes_it():
    # BERT-base with 120 layers: the cosine passes 0.99 at layer 62 (see the collapse depth)
    spec = model_spec("bert-base").with_depth(120)
    d = diagnose(spec)
    assert d.phase == "rank-collapse" and d.collapse_depth < 120
    skip = next(c for c in d.changes if c.name == "skip scaling")
    assert skip.values["alpha_sa"] > d.alpha_star > 1.0
    assert skip.phase == "trainable" and skip.final_rho <= d.threshold


def test_entropy_collapsed_model_gets_a_smaller_query_key_std():
    config = dict(load_hf_config("bert-base"), initializer_range=0.1)  # beta = 3.07 > beta_c
    d = diagnose(config)
    assert d.phase == "entropy-collapse" and d.spec.beta > d.beta_critical
    qk = next(c for c in d.changes if c.name == "query/key std")
    assert qk.values["query_key_std"] < 0.1 and qk.phase != "entropy-collapse"
    assert "lower" in qk.action


def test_diagnosis_rejects_bad_threshold():
    with pytest.raises(ValueError, match="threshold"):
        diagnose("bert-base", threshold=1.5)
    with pytest.raises(ValueError, match="max_depth"):
        diagnose("bert-base", max_depth=0)


def test_causal_model_reports_last_tokens():
    d = diagnose(model_spec("gpt2").with_depth(3))
    assert d.rho_last_tokens is not None and d.rho_last_tokens.shape == (4,)
    # late tokens see ~T keys: the late-token theory is close to the encoder maps
    np.testing.assert_allclose(d.rho_last_tokens, d.rho, atol=2e-3)


def test_model_figure_marks_the_model(tmp_path, bert_diagnosis):
    pytest.importorskip("matplotlib")
    from remprop.diagrams import model_figure

    d = diagnose(model_spec("bert-base").with_depth(3))
    measured = {"rho_mean": d.rho + 0.01, "rho_std": np.full(4, 0.01)}
    figure = model_figure(d, measured, resolution=12)
    figure.savefig(tmp_path / "model.png")
    assert (tmp_path / "model.png").stat().st_size > 10_000
    star = [line for line in figure.axes[0].lines if line.get_marker() == "*"]
    assert star and star[0].get_xdata()[0] == pytest.approx(d.spec.beta)


def test_bert_decoder_and_relative_positions_are_flagged():
    base = load_hf_config("bert-base")
    decoder = model_spec(dict(base, is_decoder=True))
    assert decoder.causal and any("causal" in text for text in decoder.assumptions)
    assert not model_spec(base).causal
    relative = model_spec(dict(base, position_embedding_type="relative_key"))
    assert any("relative_key" in text for text in relative.assumptions)
    d = diagnose(decoder.with_depth(2))
    assert d.rho_last_tokens is not None
