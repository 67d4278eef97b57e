"""From Hugging Face configurations to the engine's parameters, and the diagnosis of a model."""
import json
import math

import numpy as np
import pytest

from remprop.diagrams import classify_phases, diagnose, alpha_star, trainability_diagram
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


def test_one_table_names_the_reader_of_every_model_type():
    """Issue 43: the readers are one dict literal (``readers.READERS``), not registered at import; every
    shipped configuration is read by its model type's reader, and an unknown type is refused with the
    types read (the refused Gemma 3 not among them)."""
    from remprop.theory.models import readers

    for name in shipped_configs():
        assert load_hf_config(name)["model_type"] in readers.READERS, name
    assert readers.FAMILIES == ("bert", "roberta", "gpt2", "vit", "llama", "mistral", "qwen2", "phi3", "gemma2",
                                "olmo2", "gpt_neox")
    assert set(readers.READERS) == set(readers.FAMILIES) | {"gemma3_text"}
    with pytest.raises(ValueError, match="config.model_type must be one of bert, roberta, .*gpt_neox, got 'nope'"):
        model_spec({"model_type": "nope"})
    # a family reached through the table reads as it did through model_spec
    spec = model_spec("pythia-70m")
    assert spec.family == "gpt_neox" and repr(model_spec("EleutherAI/pythia-70m").settings) == repr(spec.settings)


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
    assert model_spec("bert-base").architecture.to_dict() == arch.to_dict()


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
    assert d.alpha_star == alpha_star(spec.architecture, depth=spec.depth, beta=spec.beta, q0=spec.q0, rho0=spec.rho0)
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
    d = diagnose(model_spec("gpt2").with_depth(3), causal_theory="maps")
    assert d.rho_last_tokens is not None and d.rho_last_tokens.shape == (4,) and d.last_tokens_theory == "maps"
    # late tokens see ~T keys: the per-position maps of the late tokens are close to the encoder maps
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
    d = diagnose(decoder.with_depth(2), causal_theory="maps")  # the flags, not the theory, are tested here
    assert d.rho_last_tokens is not None


# -- the shipped decoder configurations against their published config.json ---------------------
#: The published values of every field the shipped files carry (and the reader reads), copied from
#: the model's config.json on the Hugging Face hub as quoted in public repositories:
PUBLISHED = {
    # meta-llama/Meta-Llama-3-8B: the copy in aijianiula0601/Qwen2-Audio, meta-llama/Meta-Llama-3-8B/config.json
    # (re-saved by transformers 4.52.4, which adds head_dim 128 and mlp_bias false; the original file,
    # transformers_version 4.40.0.dev0, is quoted with the same values by fine-tunes' configs on the hub)
    "llama-3-8b": dict(
        model_type="llama", vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, hidden_act="silu", max_position_embeddings=8192,
        initializer_range=0.02, rms_norm_eps=1e-05, rope_theta=500000.0, rope_scaling=None, attention_bias=False,
        tie_word_embeddings=False),
    # meta-llama/Llama-3.2-1B: MatthewGoldsberry/LLM-Projects, Llama-3.2-1B/config.json
    # (transformers_version 4.45.0.dev0)
    "llama-3.2-1b": dict(
        model_type="llama", vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16,
        num_attention_heads=32, num_key_value_heads=8, head_dim=64, hidden_act="silu",
        max_position_embeddings=131072, initializer_range=0.02, rms_norm_eps=1e-05, rope_theta=500000.0,
        rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 8192, "rope_type": "llama3"},
        attention_bias=False, mlp_bias=False, tie_word_embeddings=True),
    # mistralai/Mistral-7B-v0.1: tanganke/fusion_bench, docs/algorithms/depth_upscaling.md, which quotes
    # https://huggingface.co/mistralai/Mistral-7B-v0.1/resolve/main/config.json (transformers_version 4.34.0.dev0)
    "mistral-7b": dict(
        model_type="mistral", vocab_size=32000, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=8, hidden_act="silu", max_position_embeddings=32768,
        initializer_range=0.02, rms_norm_eps=1e-05, rope_theta=10000.0, sliding_window=4096,
        tie_word_embeddings=False),
    # Qwen/Qwen2.5-0.5B at hub revision 060db6499f32faf8b98477b0a26969ef7d8b9987: chtho-like/rosellm,
    # rosellm/models/pretrained_config.py (transformers_version 4.40.1)
    "qwen2.5-0.5b": dict(
        model_type="qwen2", vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24,
        num_attention_heads=14, num_key_value_heads=2, hidden_act="silu", max_position_embeddings=32768,
        max_window_layers=24, initializer_range=0.02, rms_norm_eps=1e-06, rope_theta=1000000.0,
        sliding_window=32768, use_sliding_window=False, tie_word_embeddings=True),
    # microsoft/Phi-3-mini-4k-instruct: NVIDIA/TensorRT-LLM, tests/unittest/_torch/modeling/test_modeling_phi3.py
    # (PHI3_MINI_4K_CONFIG, transformers_version 4.40.2)
    "phi-3-mini": dict(
        model_type="phi3", vocab_size=32064, hidden_size=3072, intermediate_size=8192, num_hidden_layers=32,
        num_attention_heads=32, num_key_value_heads=32, hidden_act="silu", max_position_embeddings=4096,
        original_max_position_embeddings=4096, initializer_range=0.02, rms_norm_eps=1e-05, rope_theta=10000.0,
        rope_scaling=None, sliding_window=2047, attention_bias=False, tie_word_embeddings=False),
}
#: The hub model each shipped file names (``_name_or_path``, and the start of its ``_source``).
HUB_IDS = {"llama-3-8b": "meta-llama/Meta-Llama-3-8B", "llama-3.2-1b": "meta-llama/Llama-3.2-1B",
           "mistral-7b": "mistralai/Mistral-7B-v0.1", "qwen2.5-0.5b": "Qwen/Qwen2.5-0.5B",
           "phi-3-mini": "microsoft/Phi-3-mini-4k-instruct"}


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shipped_decoder_config_has_the_published_values(name):
    cfg = load_hf_config(name)
    published = PUBLISHED[name]
    for key, value in published.items():
        assert (key in cfg or value is None) and cfg.get(key) == value, key
    # every size or init field the shipped file carries is a published one
    assert {k for k in cfg if not k.startswith("_")} <= set(published)
    assert cfg["_name_or_path"] == HUB_IDS[name] and cfg["_source"].startswith(HUB_IDS[name] + " config.json")
    assert model_spec(HUB_IDS[name]).name == HUB_IDS[name]  # the hub id is an alias of the shipped file


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_shipped_decoder_config_reads_into_its_architecture(name):
    """The engine's parameters follow from the published numbers alone (hf_config's table)."""
    c = PUBLISHED[name]
    spec = model_spec(name)
    arch = spec.architecture
    d, d_ff, heads, r2 = c["hidden_size"], c["intermediate_size"], c["num_attention_heads"], c["initializer_range"] ** 2
    seq_len = c["max_position_embeddings"]
    assert spec.family == c["model_type"] and spec.causal and spec.final_layer_norm
    assert (spec.width, spec.d_ff, spec.depth, spec.seq_len) == (d, d_ff, c["num_hidden_layers"], seq_len)
    head_dim = c.get("head_dim", d // heads)
    assert (arch.heads, arch.kv_heads, arch.head_dim) == (heads, c["num_key_value_heads"], head_dim)
    assert (arch.positions, arch.rope_base) == ("rope", c["rope_theta"])
    assert (arch.norm, arch.norm_type, arch.mlp, arch.activation) == ("pre", "rms", "gated", c["hidden_act"])
    assert spec.layer_norm_eps == c["rms_norm_eps"] and spec.init_range == c["initializer_range"]
    # every weight N(0, r^2): variance times fan-in (gate/up and q/k/v/o fan-in d, down fan-in d_ff)
    assert arch.sigma_w2 == arch.sigma_v2 == arch.sigma_o2 == pytest.approx(r2 * d, rel=1e-12)
    assert arch.sigma_w2_out == pytest.approx(r2 * d_ff, rel=1e-12) and arch.sigma_b2 == 0.0
    assert spec.beta == pytest.approx(r2 * d / math.sqrt(math.log(seq_len)), rel=1e-12)
    assert spec.query_key_std(spec.beta) == pytest.approx(c["initializer_range"], rel=1e-12)
    # word embeddings only: q0 = r^2, rho0 = 1/V
    assert spec.q0 == pytest.approx(r2, rel=1e-12) and spec.rho0 == pytest.approx(1 / c["vocab_size"], rel=1e-12)
    notes = " | ".join(spec.assumptions)
    window = c.get("sliding_window")
    assert (f"sliding_window = {window} <" in notes) == bool(window and c.get("use_sliding_window", True)
                                                             and window < seq_len)
    assert ("rope_scaling (llama3) is ignored" in notes) == bool(c.get("rope_scaling"))
    grouped = c["num_key_value_heads"] < heads
    assert (f"num_key_value_heads = {c['num_key_value_heads']} < {heads}" in notes) == grouped


def _transformers5_form(cfg):
    """``cfg`` as ``transformers`` >= 5 writes it: ``rope_theta`` and ``rope_scaling`` in ``rope_parameters``."""
    cfg = dict(cfg)
    scaling = cfg.pop("rope_scaling", None) or {}
    cfg["rope_parameters"] = dict(scaling, rope_type=scaling.get("rope_type", "default"),
                                  rope_theta=cfg.pop("rope_theta"))
    return cfg


@pytest.mark.parametrize("name", sorted(PUBLISHED))
def test_rope_parameters_form_reads_the_same(name):
    """A config saved by transformers >= 5 (no top-level rope_theta) keeps its rotary base and notes."""
    reference = model_spec(name)
    spec = model_spec(_transformers5_form(load_hf_config(name)))
    assert spec.architecture.to_dict() == reference.architecture.to_dict()
    assert (spec.beta, spec.q0, spec.rho0, spec.depth) == (reference.beta, reference.q0, reference.rho0,
                                                           reference.depth)
    assert spec.assumptions == reference.assumptions


def test_transformers_config_objects_read_like_the_shipped_files():
    """The installed transformers' config objects (>= 5: rope_parameters) read like the files."""
    transformers = pytest.importorskip("transformers")
    for name in sorted(PUBLISHED) + ["smollm2-135m", "gemma-2-2b", "olmo-2-1b"]:
        cfg = load_hf_config(name)
        config = transformers.AutoConfig.for_model(
            cfg["model_type"], **{k: v for k, v in cfg.items() if k not in ("model_type", "_name_or_path")})
        spec, reference = model_spec(config), model_spec(name)
        assert spec.architecture.to_dict() == reference.architecture.to_dict(), name
        assert (spec.beta, spec.q0, spec.rho0, spec.depth) == (reference.beta, reference.q0, reference.rho0,
                                                               reference.depth), name
        assert spec.assumptions == reference.assumptions, name


ROPE_BAD = [
    (dict(load_hf_config("llama-3-8b"), rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
     "rope_theta .500000. disagrees"),
    (dict(_transformers5_form(load_hf_config("llama-3-8b")),
          rope_parameters={"full_attention": {"rope_theta": 1e6}, "sliding_attention": {"rope_theta": 1e4}}),
     "rope_parameters gives layers different rope_theta"),
    (dict(_transformers5_form(load_hf_config("llama-3-8b")), rope_parameters=[500000.0]), "rope_parameters"),
    (dict(_transformers5_form(load_hf_config("llama-3-8b")), rope_parameters={"rope_theta": -1.0}), "rope_theta"),
]


@pytest.mark.parametrize("case", range(len(ROPE_BAD)))
def test_inconsistent_rope_parameters_are_named(case):
    cfg, message = ROPE_BAD[case]
    with pytest.raises(ValueError, match=message):
        model_spec(cfg)
