"""Issue 46, items 1-4 and the meta-device part of 8: what ``remprop check`` reads of a model's own weights.

Before -> after, one test (or parametrised case) each:

* item 1, config sizes never held against the weight shapes: a BERT with 64-wide weights and
  ``hidden_size`` 1e9 (or 128) in its config.json exited 0 at ``d = 1e9`` (``d = 128``); a live
  model's ``config.hidden_size = 4096`` passed ``remprop.check``; a GPT-2 ``wpe`` of 10 rows was
  checked at T = 64 -> one ``ValueError`` (CLI: exit 2, one line) naming the tensor, its shape and
  the configuration's size;
* item 2, a missing per-layer tensor was accepted (beta from the other layers) -> refused, naming
  the missing tensor;
* item 3, int8 weights were read as raw integers (``beta = 862932``) -> refused, naming the dtype;
* item 4, a folder with ``pytorch_model.bin`` (or ``model.pt``) and no safetensors was checked at
  the library's default init without a word -> its state_dict is read with
  ``torch.load(weights_only=True)`` (tensors only, no code run) and measured exactly as the
  safetensors of the same weights are; a pickled module in ``model.pt`` is refused in one line;
  weights remprop does not read (``tf_model.h5``, ``weights.pt``) are refused for the folder,
  naming ``--hf-config DIR/config.json`` for the configuration's default init;
* item 8 (meta device): "Tensor.item() cannot be called on meta tensors" -> one line saying the
  weights have no values;
* item 10: ``remprop.check(model, max_depth=10**12)`` raised MemoryError -> refused from the
  estimate (``max_seconds`` / ``max_memory``, the CLI's defaults);
* item 11: NaN or zero embeddings said "q_tables must be finite and > 0" -> the table and the folder.
"""
from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

import remprop  # noqa: E402

from cli_checks import assert_one_line_error, run_cli  # noqa: E402

WIDTH, HEADS, VOCAB, T = 64, 4, 100, 64


def _bert():
    config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=2,
                                     num_attention_heads=HEADS, intermediate_size=128, max_position_embeddings=T)
    torch.manual_seed(0)
    return transformers.BertModel(config).eval()


def _gpt2():
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=WIDTH, n_layer=2, n_head=HEADS, n_positions=T,
                                     n_inner=128)
    torch.manual_seed(0)
    return transformers.GPT2Model(config).eval()


@pytest.fixture(scope="module")
def saved_bert(tmp_path_factory):
    """A tiny BERT saved as config.json + model.safetensors: (model, folder)."""
    model = _bert()
    folder = tmp_path_factory.mktemp("bert") / "ok"
    folder.mkdir()
    model.config.save_pretrained(folder)
    safetensors_torch.save_file({k: v.contiguous() for k, v in model.state_dict().items()},
                                str(folder / "model.safetensors"), metadata={"format": "pt"})
    return model, folder


def _variant(source, folder, config=None, tensors=None):
    """A copy of the saved folder with its config.json edited (dict update) and/or its tensors
    (a function of the state dict)."""
    folder.mkdir()
    settings = json.loads((source / "config.json").read_text())
    settings.update(config or {})
    (folder / "config.json").write_text(json.dumps(settings))
    state = safetensors_torch.load_file(str(source / "model.safetensors"))
    if tensors is not None:
        tensors(state)
    safetensors_torch.save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def _refused(capsys, tmp_path, folder, *names):
    """Both surfaces refuse: remprop.check raises one ValueError naming ``names``; the CLI exits 2, one line."""
    with pytest.raises(ValueError) as err:
        remprop.check(folder)
    for name in names:
        assert name in str(err.value), str(err.value)
    code, _, stderr = run_cli(capsys, "check", folder, "--no-figure", "--out", tmp_path / "out")
    assert_one_line_error(code, stderr, *names)


# -- item 1: the config's sizes against the weights' shapes -------------------------------------------
@pytest.mark.parametrize("hidden_size", [10**9, 128])
def test_config_width_disagreeing_with_the_weights_is_refused(saved_bert, tmp_path, capsys, hidden_size):
    _, source = saved_bert
    folder = _variant(source, tmp_path / "edited", config={"hidden_size": hidden_size})
    _refused(capsys, tmp_path, folder, f"d = {hidden_size}", "(64,", "disagree")


def test_config_d_ff_disagreeing_with_the_weights_is_refused(saved_bert, tmp_path, capsys):
    _, source = saved_bert
    folder = _variant(source, tmp_path / "edited", config={"intermediate_size": 256})
    _refused(capsys, tmp_path, folder, "intermediate.dense.weight", "d_ff = 256")


def test_live_model_with_an_edited_config_is_refused():
    model = _bert()
    model.config.hidden_size = 4096
    with pytest.raises(ValueError, match="d = 4096.*disagree"):
        remprop.check(model)


def test_position_table_shorter_than_T_is_refused():
    model = _gpt2()
    model.wpe = torch.nn.Embedding(10, WIDTH)  # 10 rows; config.n_positions = 64 gives T = 64
    with pytest.raises(ValueError, match=r"wpe\.weight .* 10 position rows, but T = 64"):
        remprop.check(model)
    assert remprop.check(model, seq_len=10).spec.seq_len == 10  # the rows it has are read


# -- item 2: a missing per-layer tensor ------------------------------------------------------------
def test_missing_per_layer_tensor_is_named(saved_bert, tmp_path, capsys):
    _, source = saved_bert
    name = "encoder.layer.1.attention.self.query.weight"
    folder = _variant(source, tmp_path / "missing", tensors=lambda state: state.pop(name))
    _refused(capsys, tmp_path, folder, name, "1 of 2 blocks")


def test_missing_gated_half_of_a_llama_mlp_is_named():
    """LLaMA's MLP first layer is two tensors per block (gate and up): one missing is a short block."""
    config = transformers.LlamaConfig(vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=2,
                                      num_attention_heads=HEADS, num_key_value_heads=2, intermediate_size=96,
                                      max_position_embeddings=T)
    torch.manual_seed(0)
    model = transformers.LlamaModel(config).eval()
    del model.layers[0].mlp.gate_proj  # its state dict lacks layers.0.mlp.gate_proj.weight
    with pytest.raises(ValueError, match=r"lacks layers\.0\.mlp\.\S+\.weight .*2 per block"):
        remprop.check(model)


# -- item 3: integer weights --------------------------------------------------------------------------
def test_int8_weights_are_refused(saved_bert, tmp_path, capsys):
    _, source = saved_bert

    def quantise(state):
        for key, value in state.items():
            state[key] = (value * 100).to(torch.int8)

    folder = _variant(source, tmp_path / "int8", tensors=quantise)
    _refused(capsys, tmp_path, folder, "dtype int8", "floating-point")


# -- item 4: PyTorch weight files without safetensors ---------------------------------------------------
@pytest.mark.parametrize("file_name", ["pytorch_model.bin", "model.pt"])
def test_torch_weight_files_are_read_safely_and_measured(saved_bert, tmp_path, capsys, file_name):
    model, source = saved_bert
    folder = tmp_path / "torch"
    folder.mkdir()
    (folder / "config.json").write_text((source / "config.json").read_text())
    torch.save(model.state_dict(), folder / file_name)
    reference = remprop.check(source).to_dict()
    measured = remprop.check(folder).to_dict()
    # the same tensors: the same float64 sums, so the same numbers exactly
    assert measured["beta"] == reference["beta"]
    assert measured["model"]["weights"] == {**reference["model"]["weights"], "source": str(folder)}
    code, out, err = run_cli(capsys, "check", folder, "--json", "--no-figure", "--out", tmp_path / "out")
    assert code == 0, err
    assert json.loads(out)["beta"] == pytest.approx(reference["beta"], rel=1e-12)
    assert json.loads(out)["model"]["weights"] is not None  # not the library's default init


def test_pickled_module_in_model_pt_is_refused_without_running_it(saved_bert, tmp_path, capsys):
    model, source = saved_bert
    folder = tmp_path / "pickled"
    folder.mkdir()
    (folder / "config.json").write_text((source / "config.json").read_text())
    torch.save(model, folder / "model.pt")  # a whole module: unpickling it would run its classes' code
    _refused(capsys, tmp_path, folder, "model.pt", "weights_only=True")


# -- item 8: a model on the meta device ---------------------------------------------------------------
def test_model_on_the_meta_device_is_one_line():
    with torch.device("meta"):
        model = transformers.BertModel(_bert().config)
    with pytest.raises(ValueError, match="meta device"):
        remprop.check(model)


# -- item 10: remprop.check's work is estimated first ------------------------------------------------
def test_check_refuses_an_unbounded_collapse_search_with_limits_to_raise():
    """Before: ``remprop.check(model, max_depth=10**12)`` raised MemoryError (7.28 TiB). After: a
    ValueError with the estimate, naming max_seconds (then max_memory once that is raised), as
    ``remprop check --max-depth 1e12`` refuses it."""
    import math

    model = _bert()
    with pytest.raises(ValueError, match=r"^max_seconds: the diagnosis of BertModel .*max_depth 1000000000000"):
        remprop.check(model, max_depth=10**12)
    with pytest.raises(ValueError, match=r"^max_memory: .*TiB of memory"):
        remprop.check(model, max_depth=10**12, max_seconds=math.inf)
    with pytest.raises(ValueError, match="^max_memory must be a number > 0"):
        remprop.check(model, max_memory=-1)
    assert remprop.check(model, max_depth=100).max_depth == 100


# -- item 11: a NaN or zero embedding table is named --------------------------------------------------
@pytest.mark.parametrize("value", [float("nan"), 0.0])
def test_nan_or_zero_embeddings_name_the_table_and_the_folder(saved_bert, tmp_path, capsys, value):
    """Before: "q_tables must be finite and > 0, got [nan, ...]". After: the table and the folder."""
    _, source = saved_bert

    def fill(state):
        state["embeddings.word_embeddings.weight"] = torch.full_like(state["embeddings.word_embeddings.weight"], value)

    folder = _variant(source, tmp_path / "embeddings", tensors=fill)
    _refused(capsys, tmp_path, folder, "word embedding table", str(folder))


@pytest.mark.parametrize("file_name", ["tf_model.h5", "weights.pt", "flax_model.msgpack"])
def test_folder_with_weights_remprop_does_not_read_is_not_checked_at_the_default_init(saved_bert, tmp_path, capsys,
                                                                                       file_name):
    """Item 4's other half: weights of a format or name remprop does not read are not silently
    ignored for the configuration's default init; --hf-config DIR/config.json still checks that."""
    _, source = saved_bert
    folder = tmp_path / "foreign"
    folder.mkdir()
    (folder / "config.json").write_text((source / "config.json").read_text())
    (folder / file_name).write_bytes(b"weights in a format remprop does not read")
    code, _, err = run_cli(capsys, "check", folder, "--no-figure", "--out", tmp_path / "out")
    assert_one_line_error(code, err, file_name, "--hf-config")
    code, out, err = run_cli(capsys, "check", "--hf-config", folder / "config.json", "--json", "--no-figure",
                             "--out", tmp_path / "out")
    assert code == 0, err
    assert json.loads(out)["model"]["weights"] is None  # the configuration, at its default init, as asked
