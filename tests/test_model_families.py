"""Every shipped family from its own weights: Phi-3, Gemma 2, OLMo 2, ViT, ``nn.TransformerEncoder``
(``norm_first`` both ways) and a user's own block with LayerScale gains.

Tiny real models (2 layers, d = 64, CPU) are initialised by hand in three ways -- the library's
default, a scaled branch (the attention output projection times 5, or the gain on a branch's
output), and muP (every matrix ``N(0, 1/fan_in)``, the query further ``/ sqrt(d_H)``) -- and the
measured theory parameters are compared with each scheme's known values, computed here from the
stds drawn (not read back from the library).

Tolerance: a sample second moment of ``n`` i.i.d. Gaussian entries has relative standard deviation
``sqrt(2/n)`` (:func:`~remprop.theory.models.measured_weights.second_moment_error`); every comparison
allows ``TOL_SIGMAS = 5`` of them for the fewest entries that enter the number (beta: one query
matrix per layer, as in tests/test_own_weights.py).
"""
from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import remprop  # noqa: E402
from remprop.theory.checks import ParameterError  # noqa: E402
from remprop.theory.models.measured_weights import second_moment_error  # noqa: E402
from remprop.validation.module_weights import BlockDescription  # noqa: E402
from remprop.validation.own_weights import own_weights_spec  # noqa: E402

TOL_SIGMAS = 5.0
WIDTH, HEADS, LAYERS, VOCAB, T = 64, 4, 2, 100, 64


def _within(measured, known, entries):
    error = TOL_SIGMAS * float(second_moment_error(entries))
    assert abs(measured / known - 1.0) < error, (measured, known, error)


def _phi3():
    return transformers.Phi3Model(transformers.Phi3Config(
        vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=2, intermediate_size=96, max_position_embeddings=T, pad_token_id=0))


def _gemma2():
    return transformers.Gemma2Model(transformers.Gemma2Config(
        vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=16, intermediate_size=96,
        max_position_embeddings=T))


def _olmo2():
    return transformers.Olmo2Model(transformers.Olmo2Config(
        vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=2, intermediate_size=96, max_position_embeddings=T))


def _vit():
    return transformers.ViTModel(transformers.ViTConfig(
        hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS, intermediate_size=96,
        image_size=32, patch_size=8))


FAMILIES = {"phi3": _phi3, "gemma2": _gemma2, "olmo2": _olmo2, "vit": _vit}
#: the test's own names of each role's modules (suffixes of nn.Linear paths)
ROLES = {"q_proj": "query", "k_proj": "key", "v_proj": "value", "o_proj": "output", "qkv_proj": "qkv",
         "gate_proj": "mlp_in", "up_proj": "mlp_in", "gate_up_proj": "mlp_in", "down_proj": "mlp_out",
         "fc1": "mlp_in", "fc2": "mlp_out"}


def _build(family):
    torch.manual_seed(0)
    return FAMILIES[family]().eval()


@torch.no_grad()
def _mup(model):
    """Every block matrix N(0, 1/fan_in), the query rows further / sqrt(d_H); returns v n per role."""
    torch.manual_seed(1)
    head_dim = model.config.head_dim if getattr(model.config, "head_dim", None) else WIDTH // HEADS
    for name, module in model.named_modules():
        role = ROLES.get(name.rsplit(".", 1)[-1])
        if role is None or not isinstance(module, torch.nn.Linear):
            continue
        module.weight.normal_(0.0, 1.0 / math.sqrt(module.in_features))
        if role == "qkv":
            module.weight[:HEADS * head_dim] /= math.sqrt(head_dim)
        elif role == "query":
            module.weight /= math.sqrt(head_dim)
    return {"query": 1.0 / head_dim, "key": 1.0, "value": 1.0, "output": 1.0, "mlp_in": 1.0, "mlp_out": 1.0}


def _default_parameters(family):
    """The configuration route's parameters (model_spec at the library's init) of a family."""
    model = _build(family)
    spec = remprop.theory.model_spec(model.config, seq_len=None)
    return model, spec


@pytest.mark.parametrize("family", list(FAMILIES))
def test_library_default_measures_the_readers_parameters(family):
    model, config = _default_parameters(family)
    measured = own_weights_spec(model)
    entries = WIDTH * WIDTH // 2 * LAYERS  # the smallest matrix: a key of 2 kv heads x 16 per layer
    if not config.architecture.qk_norm:
        _within(measured.beta, config.beta, entries / 2)
    for name in ("sigma_v2", "sigma_o2", "sigma_w2", "sigma_w2_out", "alpha_sa", "alpha_mlp", "qk_norm_gain"):
        _within(getattr(measured.architecture, name), getattr(config.architecture, name), entries)
    _within(measured.q0, config.q0, WIDTH * (VOCAB if family != "vit" else 16))
    assert measured.weights is not None


@pytest.mark.parametrize("family", list(FAMILIES))
def test_mup_scheme_is_measured(family):
    model = _build(family)
    known = _mup(model)
    spec = own_weights_spec(model)
    arch = spec.architecture
    head_dim = arch.head_dim or WIDTH // HEADS
    entries = WIDTH * WIDTH // 2 * LAYERS
    if arch.qk_norm:  # OLMo 2: the query/key matrices drop out; the normalised scores keep beta = 1
        assert spec.beta == 1.0 and arch.qk_norm_gain == pytest.approx(1.0)
    else:
        scalar = getattr(model.config, "query_pre_attn_scalar", None) or head_dim
        beta = math.sqrt(known["query"] * known["key"]) * math.sqrt(head_dim / scalar) / math.sqrt(math.log(T if family != "vit" else 17))
        _within(spec.beta, beta, entries / 2)
    for name, role in (("sigma_v2", "value"), ("sigma_o2", "output"), ("sigma_w2", "mlp_in"),
                       ("sigma_w2_out", "mlp_out")):
        _within(getattr(arch, name), known[role], entries)


@torch.no_grad()
def test_scaled_attention_output_is_a_stronger_branch():
    """Phi-3 with every o_proj times 5: sigma_o2 25x the default's (within sampling error)."""
    base = own_weights_spec(_build("phi3")).architecture.sigma_o2
    model = _build("phi3")
    for layer in model.layers:
        layer.self_attn.o_proj.weight *= 5.0
    _within(own_weights_spec(model).architecture.sigma_o2, 25.0 * base, 1e9)  # the same draw, scaled: exact


@torch.no_grad()
@pytest.mark.parametrize("family", ["gemma2", "olmo2"])
def test_branch_norm_gains_become_the_skips(family):
    """A gain of 2 after every attention branch's norm (Gemma 2: stored as w = 1, its RMSNorm scales by
    1 + w; OLMo 2: w = 2): x + 2 N(A(x)); x + N(M(x)) is the engine's alpha_sa = 1/2, alpha_mlp = 2."""
    model = _build(family)
    for layer in model.layers:
        layer.post_attention_layernorm.weight.fill_(1.0 if family == "gemma2" else 2.0)
    spec = own_weights_spec(model)
    assert spec.architecture.alpha_sa == pytest.approx(0.5)
    assert spec.architecture.alpha_mlp == pytest.approx(2.0)
    assert any("branch gains" in note for note in spec.assumptions)


@torch.no_grad()
def test_olmo2_qk_norm_gains_give_the_scores_scale():
    model = _build("olmo2")
    for layer in model.layers:
        layer.self_attn.q_norm.weight.fill_(2.0)
        layer.self_attn.k_norm.weight.fill_(0.5)
    assert own_weights_spec(model).architecture.qk_norm_gain == pytest.approx(1.0)  # (4 x 0.25)^(1/4)
    for layer in model.layers:
        layer.self_attn.k_norm.weight.fill_(2.0)
    assert own_weights_spec(model).architecture.qk_norm_gain == pytest.approx(2.0)


def test_saved_gemma2_folder_matches_the_model(tmp_path, capsys):
    model = _build("gemma2")
    model.save_pretrained(tmp_path, safe_serialization=True)
    capsys.readouterr()
    live, folder = own_weights_spec(model), own_weights_spec(tmp_path)
    assert folder.beta == live.beta and repr(folder.architecture) == repr(live.architecture) and folder.q0 == live.q0


# -- plain PyTorch ---------------------------------------------------------------------------------


def _encoder(norm_first):
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(WIDTH, HEADS, 96, dropout=0.0, norm_first=norm_first, batch_first=True)
    return torch.nn.TransformerEncoder(layer, LAYERS, norm=torch.nn.LayerNorm(WIDTH) if norm_first else None,
                                       enable_nested_tensor=False).eval()


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre", "post"])
def test_transformer_encoder_default_init(norm_first):
    """torch's own init: in_proj_weight Xavier-uniform over its fused (3d, d) shape (v n = d / (2d) = 1/2),
    out_proj and linear1/linear2 kaiming-uniform(a = sqrt 5) (v n = 1/3), linear biases U(+-1/sqrt(fan_in))."""
    spec = own_weights_spec(_encoder(norm_first), seq_len=T)
    arch = spec.architecture
    assert arch.norm == ("pre" if norm_first else "post") and arch.final_norm == norm_first
    # every layer is a deepcopy of one: the entries of one layer are the sample
    entries = WIDTH * WIDTH
    _within(spec.beta, 0.5 / math.sqrt(math.log(T)), entries / 2)
    _within(arch.sigma_v2, 0.5, entries)
    for name in ("sigma_o2", "sigma_w2", "sigma_w2_out"):
        _within(getattr(arch, name), 1.0 / 3.0, entries)
    _within(arch.sigma_b2, 1.0 / (3 * WIDTH), 96)
    assert (spec.q0, spec.rho0, spec.width, spec.d_ff, spec.depth, spec.heads) == (1.0, 0.0, WIDTH, 96, LAYERS, HEADS)


@torch.no_grad()
def test_transformer_encoder_mup_and_scaled_output():
    model = _encoder(True)
    torch.manual_seed(2)
    head_dim = WIDTH // HEADS
    for layer in model.layers:
        attention = layer.self_attn
        attention.in_proj_weight.normal_(0.0, 1.0 / math.sqrt(WIDTH))
        attention.in_proj_weight[:WIDTH] /= math.sqrt(head_dim)
        attention.out_proj.weight.normal_(0.0, 5.0 / math.sqrt(WIDTH))  # a branch 5x
        for linear in (layer.linear1, layer.linear2):
            linear.weight.normal_(0.0, 1.0 / math.sqrt(linear.in_features))
    diagnosis = remprop.check(model, seq_len=T, q0=2.0, rho0=0.25)
    spec = diagnosis.spec
    entries = WIDTH * WIDTH * LAYERS
    _within(spec.beta, 1.0 / math.sqrt(head_dim) / math.sqrt(math.log(T)), entries / 2)
    _within(spec.architecture.sigma_o2, 25.0, entries)
    _within(spec.architecture.sigma_w2_out, 1.0, entries)
    assert (spec.q0, spec.rho0) == (2.0, 0.25)
    assert "TransformerEncoder" in diagnosis.report()


class _Block(torch.nn.Module):
    """A user's own pre-LN block with LayerScale gains on both branches."""

    def __init__(self, width, heads, scale):
        super().__init__()
        self.norm1, self.norm2 = torch.nn.LayerNorm(width), torch.nn.LayerNorm(width)
        self.wq, self.wk, self.wv, self.wo = (torch.nn.Linear(width, width, bias=False) for _ in range(4))
        self.up, self.down = torch.nn.Linear(width, 96), torch.nn.Linear(96, width)
        self.gamma1 = torch.nn.Parameter(torch.full((width,), scale[0]))
        self.gamma2 = torch.nn.Parameter(torch.full((width,), scale[1]))
        self.heads = heads


class _Net(torch.nn.Module):
    def __init__(self, scale=(1.0, 1.0)):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(_Block(WIDTH, HEADS, scale) for _ in range(LAYERS))


USER_BLOCK = BlockDescription(
    roles={"query": "blocks.{layer}.wq", "key": "blocks.{layer}.wk", "value": "blocks.{layer}.wv",
           "output": "blocks.{layer}.wo", "mlp_in": "blocks.{layer}.up", "mlp_out": "blocks.{layer}.down",
           "attention_norm": "blocks.{layer}.norm1", "mlp_norm": "blocks.{layer}.norm2",
           "attention_scale": "blocks.{layer}.gamma1", "mlp_scale": "blocks.{layer}.gamma2",
           "mlp_bias": "blocks.{layer}.up"},
    heads=HEADS, norm="pre", activation="gelu")


def test_user_block_with_layerscale_gains():
    """LayerScale 0.1 on the attention, 0.5 on the MLP: the branches' output variances times 0.01 and 0.25."""
    plain = own_weights_spec(_Net(), block=USER_BLOCK, seq_len=T).architecture
    scaled = own_weights_spec(_Net((0.1, 0.5)), block=USER_BLOCK, seq_len=T).architecture
    assert scaled.sigma_o2 == pytest.approx(0.01 * plain.sigma_o2)
    assert scaled.sigma_w2_out == pytest.approx(0.25 * plain.sigma_w2_out)
    assert scaled.sigma_v2 == plain.sigma_v2 and scaled.sigma_w2 == plain.sigma_w2
    _within(plain.sigma_o2, 1.0 / 3.0, WIDTH * WIDTH * LAYERS)  # nn.Linear's kaiming-uniform(a = sqrt 5)


# -- what cannot be mapped: one line naming it ----------------------------------------------------


def test_encoder_with_a_foreign_layer_names_its_path():
    model = _encoder(True)
    model.layers[1] = torch.nn.Linear(WIDTH, WIDTH)
    with pytest.raises(ParameterError, match=r"layers\.1 is a Linear"):
        own_weights_spec(model, seq_len=T)


def test_user_block_naming_a_missing_module_is_refused():
    wrong = BlockDescription(roles={**USER_BLOCK.roles, "query": "blocks.{layer}.attn.q"}, heads=HEADS)
    with pytest.raises(ParameterError, match=r"roles\['query'\] = 'blocks.\{layer\}.attn.q'"):
        own_weights_spec(_Net(), block=wrong, seq_len=T)


def test_a_model_without_attention_is_refused():
    model = torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())
    with pytest.raises(ParameterError, match="holds no torch.nn.TransformerEncoder"):
        own_weights_spec(model, seq_len=T)
    no_attention = BlockDescription(roles={k: v for k, v in USER_BLOCK.roles.items() if k not in
                                           ("query", "key", "value", "output")}, heads=HEADS)
    with pytest.raises(ParameterError, match="names no query"):
        own_weights_spec(_Net(), block=no_attention, seq_len=T)


def test_plain_module_needs_seq_len_and_a_hf_model_refuses_q0():
    with pytest.raises(ParameterError, match="seq_len"):
        own_weights_spec(_encoder(True))
    with pytest.raises(ParameterError, match="q0"):
        own_weights_spec(_build("phi3"), q0=1.0)


def test_phi3_qkv_of_the_wrong_rows_names_the_tensor():
    state = _build("phi3").state_dict()
    state["layers.0.self_attn.qkv_proj.weight"] = state["layers.0.self_attn.qkv_proj.weight"][:-16]
    model = _build("phi3")
    model.layers[0].self_attn.qkv_proj.weight = torch.nn.Parameter(state["layers.0.self_attn.qkv_proj.weight"])
    with pytest.raises(ValueError, match=r"layers\.0\.self_attn\.qkv_proj\.weight .* should be \(128, 64\)"):
        own_weights_spec(model)


def test_the_examples_of_docs_section_6_run():
    """Every Python block of docs/real_models.md sections 6.1-6.3 runs as written."""
    import re
    from pathlib import Path

    pytest.importorskip("accelerate")  # the Trainer's example
    text = (Path(__file__).resolve().parents[1] / "docs" / "real_models.md").read_text()
    section = text[text.index("### 6.1 Every family"):text.index("### 6.4 ")]
    blocks = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    assert len(blocks) == 4
    for block in blocks:
        exec(compile(block, "docs/real_models.md", "exec"), {})


@pytest.mark.parametrize("family", ["phi3", "gemma2", "olmo2", "vit"])
def test_default_init_of_the_new_families_is_not_flagged_and_a_scaled_branch_is(family):
    """The deviation table (docs/real_models.md section 6.4) of Phi-3, Gemma 2, OLMo 2 and ViT: at the
    library's default every group within SIGNIFICANCE sampling errors (gains exactly 1, QK-norm and
    branch-norm gains included); every o_proj x5 flags W_O alone, at ratio 5 within 5 errors of its
    mean square (sqrt(2/n), n = the entries of all layers' o_proj)."""
    model = _build(family)
    diagnosis = remprop.check(model, max_depth=200)
    assert diagnosis.init is not None and not diagnosis.init.flagged
    gains = {row.role for row in diagnosis.init.rows if row.group == "norm gains"}
    # OLMo 2 normalises only the branches' outputs (and its queries/keys); the others their inputs
    expected = {"olmo2": {"query_norm", "key_norm", "attention_branch", "mlp_branch"},
                "gemma2": {"attention_norm", "mlp_norm", "attention_branch", "mlp_branch"}}
    assert expected.get(family, {"attention_norm", "mlp_norm"}) <= gains
    for row in diagnosis.init.rows:  # each drawn tensor within 5 errors of its default's mean square
        assert row.error == 0 or abs(row.ratio ** 2 - 1) < TOL_SIGMAS * row.error, row
    if family == "vit":  # its patch projection (N(0, r^2) over C P^2 = 192 inputs) and positions are in the table
        rows = {row.role: row for row in diagnosis.init.rows}
        assert rows["patch"].default_std == pytest.approx(0.02 * math.sqrt(3 * 8 * 8))
        assert rows["position"].default_std == pytest.approx(0.02)  # truncated at +-2 = 100 r: untouched
    with torch.no_grad():
        for name, module in model.named_modules():
            if name.endswith("o_proj"):
                module.weight.mul_(5.0)
    flagged = remprop.check(model, max_depth=200).init.flagged
    assert [row.role for row in flagged] == ["output"]
    _within(flagged[0].ratio ** 2, 25.0, LAYERS * WIDTH * WIDTH)


def _torch_rows(diagnosis):
    return {row.role: row for row in diagnosis.init.rows}


@pytest.mark.parametrize("norm_first", [True, False], ids=["pre", "post"])
def test_transformer_encoder_deviation_table(norm_first):
    """nn.TransformerEncoder against PyTorch's own init: at its default nothing is flagged and every
    drawn tensor is within 5 errors of the default's mean square (one layer's entries -- the layers are
    deep copies -- of a uniform draw, sqrt(4 / (5 n))); out_proj x5 flags W_O alone, at ratio 5."""
    model = _encoder(norm_first)
    diagnosis = remprop.check(model, seq_len=T, max_depth=200)
    assert diagnosis.init is not None and not diagnosis.init.flagged
    assert "PyTorch's own init of nn.TransformerEncoder" in diagnosis.report()
    rows = _torch_rows(diagnosis)
    defaults = {"query": 1 / (2 * WIDTH), "value": 1 / (2 * WIDTH), "output": 1 / (3 * WIDTH),
                "mlp_in": 1 / (3 * WIDTH), "mlp_out": 1 / (3 * 96), "mlp_bias": 1 / (3 * WIDTH)}
    for role, variance in defaults.items():
        assert rows[role].default_std == pytest.approx(math.sqrt(variance))
    assert rows["value"].error == pytest.approx(float(second_moment_error(WIDTH * WIDTH, 9 / 5)))
    for row in rows.values():
        assert row.error == 0 or abs(row.ratio ** 2 - 1) < TOL_SIGMAS * row.error, row
    with torch.no_grad():
        for layer in model.layers:
            layer.self_attn.out_proj.weight.mul_(5.0)
    flagged = remprop.check(model, seq_len=T, max_depth=200).init.flagged
    assert [row.role for row in flagged] == ["output"]
    assert flagged[0].ratio == pytest.approx(5.0 * rows["output"].ratio, rel=1e-6)  # the same draw, scaled


def test_transformer_encoder_mup_is_flagged_at_its_ratios():
    """muP on an nn.TransformerEncoder (every matrix N(0, 1/fan_in), the query / sqrt(d_H)): all six
    matrices flagged, each at the scheme's variance over PyTorch's (query 2 / d_H, key and value 2, W_O and
    the MLP 3), within 5 errors of a Gaussian draw over all layers' entries (the redraw is per layer)."""
    model = _encoder(True)
    torch.manual_seed(3)
    head_dim = WIDTH // HEADS
    with torch.no_grad():
        for layer in model.layers:
            layer.self_attn.in_proj_weight.normal_(0.0, 1.0 / math.sqrt(WIDTH))
            layer.self_attn.in_proj_weight[:WIDTH] /= math.sqrt(head_dim)
            for linear in (layer.self_attn.out_proj, layer.linear1, layer.linear2):
                linear.weight.normal_(0.0, 1.0 / math.sqrt(linear.in_features))
    rows = _torch_rows(remprop.check(model, seq_len=T, max_depth=200))
    known = {"query": 2 / head_dim, "key": 2.0, "value": 2.0, "output": 3.0, "mlp_in": 3.0, "mlp_out": 3.0}
    for role, ratio2 in known.items():
        assert rows[role].flagged, rows[role]
        entries = LAYERS * WIDTH * (96 if role.startswith("mlp") else WIDTH)  # linear1 (96, 64), linear2 (64, 96)
        _within(rows[role].ratio ** 2, ratio2, entries)
    assert not rows["mlp_bias"].flagged and not rows["attention_norm"].flagged


def test_user_block_has_no_deviation_table():
    """A user's own block names no default init: no table (never a guess), the check still runs."""
    diagnosis = remprop.check(_Net(), block=USER_BLOCK, seq_len=T, max_depth=200)
    assert diagnosis.init is None and "initialisation against the library's default" not in diagnosis.report()
