"""A model's own weights (issue 26 item 5): ``remprop.check(model)`` and ``remprop check DIR``.

Tiny real ``transformers`` models (BERT, GPT-2, LLaMA; 2-12 layers, d = 32-64) are
initialised by hand in several schemes -- the library default, muP (every matrix
``N(0, 1/fan_in)``, the query further ``/ sqrt(d_H)`` so that the scores are over ``d_H``),
DeepNorm (Xavier-normal weights, ``W_V``, ``W_O`` and the MLP times ``(8L)^(-1/4)``) and a
user's own query/key std -- and the measured theory parameters are compared with each
scheme's known values.

Tolerances: a sample second moment of ``n`` i.i.d. Gaussian entries has relative standard
deviation ``sqrt(2/n)`` (:func:`~remprop.theory.models.measured_weights.second_moment_error`);
every comparison allows ``TOL_SIGMAS = 5`` of them for the smallest matrix that enters the
number (beta: the query and key matrices, ``sqrt(v_Q v_K)`` has about ``1/sqrt(2)`` of one
matrix's error; the input cosine: the ``d`` coordinates of the shared rows).
"""
from __future__ import annotations

import json
import math
import subprocess
import sys

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import remprop  # noqa: E402
from remprop.theory.models.measured_weights import (NormGains, input_state, second_moment_error,  # noqa: E402
                                                    weight_parameters)

from cli_checks import assert_one_line_error, run_cli  # noqa: E402

TOL_SIGMAS = 5.0
WIDTH, HEADS, VOCAB, T = 64, 4, 100, 64


def _bert(layers=2, width=WIDTH, d_ff=128):
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=width, num_hidden_layers=layers,
                                     num_attention_heads=HEADS, intermediate_size=d_ff, max_position_embeddings=T,
                                     hidden_act="gelu")
    torch.manual_seed(0)
    return transformers.BertModel(config).eval()


def _gpt2(layers=2):
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=WIDTH, n_layer=layers, n_head=HEADS, n_positions=T,
                                     n_inner=128)
    torch.manual_seed(0)
    return transformers.GPT2Model(config).eval()


def _llama(layers=2):
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=layers,
                                      num_attention_heads=HEADS, num_key_value_heads=2, intermediate_size=96,
                                      max_position_embeddings=T)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def _linears(model):
    """(role, nn.Linear) of the blocks of a BERT or LLaMA model."""
    roles = {"query": "query", "key": "key", "value": "value", "attention.output.dense": "output",
             "intermediate.dense": "mlp_in", "output.dense": "mlp_out", "q_proj": "query", "k_proj": "key",
             "v_proj": "value", "o_proj": "output", "gate_proj": "mlp_in", "up_proj": "mlp_in",
             "down_proj": "mlp_out"}
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Linear):
            role = next((r for key, r in roles.items() if name.endswith(key)), None)
            if role is not None:
                yield role, module


@torch.no_grad()
def _scheme(model, stds, embedding_std):
    """Redraw every block matrix of ``model`` as N(0, stds[role](fan_in)^2), zero biases, the
    embeddings N(0, embedding_std^2); returns the known variance times fan-in of each role."""
    torch.manual_seed(1)
    known = {}
    for role, linear in _linears(model):
        fan_in = linear.in_features
        std = stds[role](fan_in, linear.out_features)
        linear.weight.normal_(0.0, std)
        if linear.bias is not None:
            linear.bias.zero_()
        known[role] = std * std * fan_in
    for module in model.modules():
        if isinstance(module, torch.nn.Embedding):
            module.weight.normal_(0.0, embedding_std)
    return known


def _mup(fan_in, fan_out):
    return 1.0 / math.sqrt(fan_in)


MUP = {"query": lambda n, m: 1.0 / math.sqrt(n) / math.sqrt(WIDTH // HEADS), "key": _mup, "value": _mup,
       "output": _mup, "mlp_in": _mup, "mlp_out": _mup}


def _xavier(fan_in, fan_out):
    return math.sqrt(2.0 / (fan_in + fan_out))


def _deepnorm(layers):
    """DeepNet's encoder init (Wang et al. 2022): Xavier normal, W_V, W_O and the MLP times (8L)^(-1/4)."""
    down = (8 * layers) ** -0.25
    scaled = lambda n, m: down * _xavier(n, m)  # noqa: E731
    return {"query": _xavier, "key": _xavier, "value": scaled, "output": scaled, "mlp_in": scaled, "mlp_out": scaled}


def _save(model, folder, capsys):
    """``save_pretrained`` as safetensors, its progress bar taken off the captured stderr."""
    model.save_pretrained(folder, safe_serialization=True)
    capsys.readouterr()


def _within(measured, known, entries, sigmas=TOL_SIGMAS):
    """|measured / known - 1| within ``sigmas`` relative sampling errors of ``entries`` entries."""
    error = sigmas * float(second_moment_error(entries))
    assert abs(measured / known - 1.0) < error, (measured, known, error)


# -- (a) the measured parameters are the scheme's ---------------------------------------------------


def test_library_default_measures_the_configs_own_parameters():
    """At the library's default init the measured route reproduces the config route
    (model_spec: r^2 d, beta = r^2 d / sqrt(log T)) within sampling error."""
    model = _bert()
    measured = remprop.check(model).spec
    config = remprop.theory.model_spec(model.config)
    entries = WIDTH * WIDTH * 2  # one query matrix per layer, 2 layers
    _within(measured.beta, config.beta, entries / 2)  # sqrt(v_Q v_K): each factor's error, halved
    for field in ("sigma_v2", "sigma_o2", "sigma_w2", "sigma_w2_out"):
        _within(getattr(measured.architecture, field), getattr(config.architecture, field), entries)
    assert measured.q0 == pytest.approx(config.q0, rel=TOL_SIGMAS * second_moment_error(WIDTH))  # LN gain 1
    assert measured.rho0 == pytest.approx(config.rho0, rel=TOL_SIGMAS * second_moment_error(WIDTH))
    assert measured.weights is not None and config.weights is None
    assert "measured on the weights of BertModel" in remprop.check(model).report()


@pytest.mark.parametrize("build", [_bert, _llama], ids=["bert", "llama"])
def test_mup_scheme_is_measured(build):
    """muP: every matrix N(0, 1/fan_in), the query / sqrt(d_H): beta = 1 / sqrt(d_H log T),
    sigma_v2 = sigma_o2 = sigma_w2 = sigma_w2_out = 1 (pre-LN gains 1)."""
    model = build()
    known = _scheme(model, MUP, embedding_std=1.0)
    spec = remprop.check(model).spec
    head_dim = WIDTH // HEADS
    expected = weight_parameters(known["query"], known["key"], known["value"], known["output"], known["mlp_in"],
                                 known["mlp_out"], seq_len=T)
    assert expected["beta"] == pytest.approx(1.0 / math.sqrt(head_dim * math.log(T)))
    kv_entries = WIDTH * WIDTH // (2 if build is _llama else 1) * 2  # LLaMA: 2 key/value heads of 4
    _within(spec.beta, expected["beta"], kv_entries / 2)
    for field in ("sigma_v2", "sigma_o2", "sigma_w2", "sigma_w2_out"):
        _within(getattr(spec.architecture, field), expected[field], kv_entries)
        assert expected[field] == pytest.approx(1.0)
    if build is _llama:  # word embeddings only, N(0, 1): q0 = 1, rho0 = 1/V
        _within(spec.q0, 1.0, VOCAB * WIDTH)
        assert spec.rho0 == pytest.approx(1.0 / VOCAB, rel=TOL_SIGMAS * second_moment_error(WIDTH))


def test_deepnorm_scheme_is_measured():
    layers = 12
    model = _bert(layers=layers, width=32, d_ff=64)
    known = _scheme(model, _deepnorm(layers), embedding_std=0.02)
    spec = remprop.check(model).spec
    down2 = (8 * layers) ** -0.5
    # Xavier normal: variance 2 / (fan_in + fan_out), times fan_in
    assert known["value"] == pytest.approx(down2 * 2 * 32 / 64)
    assert known["mlp_out"] == pytest.approx(down2 * 2 * 64 / 96)
    expected = weight_parameters(*(known[r] for r in ("query", "key", "value", "output", "mlp_in", "mlp_out")),
                                 seq_len=T, gains=NormGains(post_norm=True))
    entries = 32 * 32 * layers
    _within(spec.beta, expected["beta"], entries / 2)
    for field in ("sigma_v2", "sigma_o2", "sigma_w2", "sigma_w2_out"):
        _within(getattr(spec.architecture, field), expected[field], entries)


def test_gpt2_fused_qkv_and_embeddings():
    """GPT-2's Conv1D c_attn is split into query, key, value; q0 = q_wte + q_wpe."""
    model = _gpt2()
    spec = remprop.check(model).spec
    r2 = model.config.initializer_range ** 2
    config = remprop.theory.model_spec(model.config)
    _within(spec.beta, config.beta, WIDTH * WIDTH)
    _within(spec.architecture.sigma_o2, config.architecture.sigma_o2, WIDTH * WIDTH * 2)  # r^2 d / (2L)
    _within(spec.q0, 2 * r2, T * WIDTH)
    w = spec.weights
    assert w.matrices["query"].fan_in == WIDTH and w.matrices["mlp_out"].fan_in == 128


def test_layer_norm_gain_folds_into_beta():
    """A pre-LN gain gamma multiplies what W_Q and W_K read: beta scales by mean(gamma^2)."""
    model = _gpt2()
    before = remprop.check(model).spec.beta
    with torch.no_grad():
        for block in model.h:
            block.ln_1.weight.fill_(2.0)
    after = remprop.check(model).spec
    assert after.beta == pytest.approx(4.0 * before, rel=1e-9)
    assert after.architecture.sigma_v2 == pytest.approx(4.0 * remprop.theory.model_spec(model.config).architecture.sigma_v2,
                                                        rel=TOL_SIGMAS * second_moment_error(2 * WIDTH * WIDTH))


def test_input_state_and_weight_parameters_are_the_config_route():
    """One rule: the config route's numbers are weight_parameters / input_state at r^2."""
    spec = remprop.theory.model_spec("bert-base")
    r2, d = spec.init_range ** 2, spec.width
    p = weight_parameters(r2 * d, r2 * d, r2 * d, r2 * d, r2 * d, r2 * spec.d_ff, seq_len=spec.seq_len)
    assert p["beta"] == pytest.approx(spec.beta, rel=1e-12)
    assert p["sigma_w2_out"] == pytest.approx(spec.architecture.sigma_w2_out, rel=1e-12)
    assert input_state([r2] * 3, [r2 / 30522, 0.0, r2], norm_gain2=1.0) == pytest.approx((spec.q0, spec.rho0))
    # arrays broadcast
    grid = weight_parameters(np.array([1.0, 4.0]), 1.0, 1.0, 1.0, 1.0, 1.0, seq_len=100)
    assert grid["beta"] == pytest.approx(np.array([1.0, 2.0]) / math.sqrt(math.log(100)))


# -- (b) the diagnosis moves the way the theory says -------------------------------------------------


def test_user_query_key_std_crosses_beta_critical():
    """Default: beta << beta_c; the user's query/key std 2.5/sqrt(d) (beta = 6.25 / sqrt(log T)
    = 3.1): beta > beta_c, entropy collapse; the report says so."""
    model = _bert()
    default = remprop.check(model)
    assert default.spec.beta < 0.1 * default.beta_critical
    assert default.phase != "entropy-collapse"
    big = lambda n, m: 2.5 / math.sqrt(n)  # noqa: E731
    _scheme(model, dict(MUP, query=big, key=big), embedding_std=0.02)
    user = remprop.check(model)
    assert user.spec.beta > user.beta_critical
    assert user.phase == "entropy-collapse"
    assert "entropy-collapse" in user.report()


def test_deepnorm_down_scaling_lowers_alpha_star():
    """DeepNorm's down-scaled branches need a weaker skip than the same Xavier init unscaled:
    alpha* drops below alpha_SA = 1 (the theory's map of the measured variances), and the
    12-layer post-LN stack leaves rank collapse."""
    layers = 12
    model = _bert(layers=layers, width=32, d_ff=64)
    xavier = {role: _xavier for role in MUP}
    _scheme(model, xavier, embedding_std=0.02)
    plain = remprop.check(model)
    _scheme(model, _deepnorm(layers), embedding_std=0.02)
    deep = remprop.check(model)
    # measured: alpha* 1.32 (Xavier, rank collapse at alpha_SA = 1) against 0.136 (DeepNorm)
    assert plain.alpha_star > 1.0 and plain.phase == "rank-collapse"
    assert deep.alpha_star < 0.5 and deep.phase == "trainable"
    assert deep.rho[-1] < plain.rho[-1]


# -- (c) the folder and the object give the same diagnosis -------------------------------------------


@pytest.mark.parametrize("build", [_bert, _llama], ids=["bert", "llama"])
def test_saved_folder_matches_the_model(build, tmp_path, capsys):
    model = build()
    _scheme(model, MUP, embedding_std=1.0)
    folder = tmp_path / "weights"
    _save(model, folder, capsys)
    direct = remprop.check(model).to_dict()
    assert remprop.check(folder).to_dict()["beta"] == direct["beta"]
    code, out, err = run_cli(capsys, "check", folder, "--json", "--no-figure", "--out", tmp_path / "out")
    assert code == 0, err
    cli = json.loads(out)
    for key in ("beta", "beta_critical", "alpha_star", "phase", "collapse_depth"):
        assert cli[key] == (pytest.approx(direct[key], rel=1e-12) if isinstance(direct[key], float) else direct[key]), key
    assert cli["rho"] == pytest.approx(direct["rho"], rel=1e-12)
    assert cli["model"]["weights"]["matrices"]["query"]["mean_square"] == pytest.approx(
        direct["model"]["weights"]["matrices"]["query"]["mean_square"], rel=1e-12)
    code, out, err = run_cli(capsys, "check", folder, "--no-figure", "--out", tmp_path / "out")
    assert code == 0 and f"measured on the weights of {folder}" in out


# -- (d) bad input --------------------------------------------------------------------------------


def test_bad_input_is_one_line(tmp_path, capsys):
    with pytest.raises(ValueError, match="model must be a transformers model"):
        remprop.check(object())
    with pytest.raises(ValueError, match="holds no torch.nn.TransformerEncoder"):
        remprop.check(torch.nn.Linear(2, 2), seq_len=8)
    with pytest.raises(ValueError, match="holds no \\*.safetensors"):
        remprop.check(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    code, _, err = run_cli(capsys, "check", empty, "--no-figure", "--out", tmp_path / "out")
    assert_one_line_error(code, err, "config.json")
    # weights without a config.json
    model = _gpt2()
    folder = tmp_path / "noconfig"
    _save(model, folder, capsys)
    (folder / "config.json").unlink()
    code, _, err = run_cli(capsys, "check", folder, "--no-figure", "--out", tmp_path / "out")
    assert_one_line_error(code, err, "config.json")
    # a damaged weights file
    broken = tmp_path / "broken"
    _save(model, broken, capsys)
    next(broken.glob("*.safetensors")).write_bytes(b"not a safetensors file")
    code, _, err = run_cli(capsys, "check", broken, "--no-figure", "--out", tmp_path / "out")
    assert_one_line_error(code, err, "safetensors")
    # options that resize the model
    _save(model, folder, capsys)
    for option in (["--depth", "3"], ["--width", "32"]):
        code, _, err = run_cli(capsys, "check", folder, *option, "--no-figure", "--out", tmp_path / "out")
        assert_one_line_error(code, err, option[0])


def test_unread_family_is_refused():
    config = transformers.GPTNeoXConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                        intermediate_size=64, max_position_embeddings=T)
    with pytest.raises(ValueError, match="model_type"):
        remprop.check(transformers.GPTNeoXModel(config))


def test_import_remprop_stays_torch_free():
    """``remprop.check`` is listed but imported on first use (torch with it)."""
    code = "import sys, remprop; assert 'torch' not in sys.modules; assert 'check' in dir(remprop)"
    subprocess.run([sys.executable, "-c", code], check=True)
    from remprop.validation.own_weights import check

    assert remprop.check is check


def test_depth_dependent_init_is_averaged_and_noted():
    """W_O drawn with std r / sqrt(l + 1) in layer l: the engine takes the mean over layers, and
    the report names the spread (far beyond the sampling error 5 sqrt(2/(d^2)) of one layer)."""
    model = _bert(layers=4)
    r = model.config.initializer_range
    with torch.no_grad():
        for index, layer in enumerate(model.encoder.layer):
            layer.attention.output.dense.weight.normal_(0.0, r / math.sqrt(index + 1))
    spec = remprop.check(model, max_depth=50).spec
    mean = np.mean([r * r / (index + 1) for index in range(4)])
    _within(spec.architecture.sigma_o2, mean * WIDTH, 4 * WIDTH * WIDTH)
    note = next(n for n in spec.assumptions if n.startswith("W_O: layers differ"))
    assert "factor 4" in note or "factor 3.9" in note or "factor 4.1" in note, note


def test_measured_weights_doctests():
    import doctest

    from remprop.theory.models import measured_weights

    assert doctest.testmod(measured_weights).failed == 0


def test_a_long_context_folder_is_measured_once_at_the_default_length(tmp_path, capsys, monkeypatch):
    """A folder whose model allows more than the default T (here 4096 positions) is checked at
    T = 2048, its maximum read from config.json alone: the weights are read and measured once,
    and the result equals the Python route at that T."""
    from remprop.cli.commands import check as check_command
    from remprop.validation import own_weights

    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=2,
                                      num_attention_heads=HEADS, num_key_value_heads=2, intermediate_size=96,
                                      max_position_embeddings=4096)
    torch.manual_seed(0)
    folder = tmp_path / "weights"
    _save(transformers.LlamaForCausalLM(config).eval(), folder, capsys)
    calls = []
    measure = own_weights.own_weights_spec
    monkeypatch.setattr(own_weights, "own_weights_spec", lambda *a, **k: calls.append(k) or measure(*a, **k))
    code, out, err = run_cli(capsys, "check", folder, "--json", "--no-figure", "--out", tmp_path / "out")
    assert code == 0, err
    result = json.loads(out)
    assert calls == [{"seq_len": check_command.DEFAULT_SEQ_LEN}]
    assert result["seq_len_choice"] == {"seq_len": 2048, "max_seq_len": 4096, "source": "default"}
    assert result["beta"] == pytest.approx(measure(folder, seq_len=2048).beta, rel=1e-12)


def test_norm_gains_fold_as_the_module_says():
    """NormGains: pre-LN gains multiply the branch's first layers (beta and sigma_v2 by g_A^2, sigma_w2 by
    g_M^2); post-LN they also divide the branch outputs (sigma_o2, sigma_w2_out); anything else is refused."""
    plain = weight_parameters(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, seq_len=100)
    pre = weight_parameters(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, seq_len=100, gains=NormGains(4.0, 2.0))
    post = weight_parameters(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, seq_len=100, gains=NormGains(4.0, 2.0, post_norm=True))
    assert pre["beta"] == pytest.approx(4.0 * plain["beta"]) and pre["sigma_v2"] == pytest.approx(4.0)
    assert pre["sigma_w2"] == pytest.approx(2.0) and pre["sigma_o2"] == pre["sigma_w2_out"] == pytest.approx(1.0)
    assert post["sigma_o2"] == pytest.approx(0.25) and post["sigma_w2_out"] == pytest.approx(0.5)
    with pytest.raises(ValueError, match="gains must be a NormGains"):
        weight_parameters(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, seq_len=100, gains=(4.0, 2.0))
    with pytest.raises(ValueError, match="attention2"):
        weight_parameters(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, seq_len=100, gains=NormGains(-1.0))
