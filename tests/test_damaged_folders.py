"""``remprop check DIR`` and ``remprop.check`` on damaged model folders: one line naming the tensor or file.

A probe of a tiny BERT saved with ``save_pretrained`` and then edited found a query weight
reshaped to 1-D ("unexpected IndexError"), position embeddings cut to one row ("unexpected
ZeroDivisionError") and a named pipe in place of ``model.safetensors`` (``check DIR`` waited until
killed). Each damage here must give, on the command line, exit status 2 and one line naming the
tensor or file, and from the library a ``ValueError`` naming it; no read may block on a special file.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
safetensors_torch = pytest.importorskip("safetensors.torch")

import remprop  # noqa: E402

from cli_checks import assert_one_line_error, run_cli  # noqa: E402

fifo_only = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes need os.mkfifo (POSIX)")

QUERY = "encoder.layer.0.attention.self.query.weight"
POSITION = "embeddings.position_embeddings.weight"
#: Seconds a refusal of a special file may take in a fresh interpreter: it reads no data, so the
#: bound is only the start and the imports (a few seconds, more on a loaded machine); a read
#: blocked on a named pipe never ends.
BOUNDED_SECONDS = 120


def _config():
    return transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                                   vocab_size=100, max_position_embeddings=64)


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A tiny BERT saved with save_pretrained: config.json and model.safetensors."""
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("bert") / "saved"
    transformers.BertModel(_config()).save_pretrained(folder)
    assert (folder / "model.safetensors").is_file()
    return folder


def _damaged(saved, folder, edit):
    """A copy of ``saved`` whose tensors ``edit`` (a function of the state dict) changed."""
    shutil.copytree(saved, folder)
    state = safetensors_torch.load_file(str(folder / "model.safetensors"))
    edit(state)
    safetensors_torch.save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    return folder


def _drop(*fragments):
    def edit(state):
        for name in [n for n in state if any(f in n for f in fragments)]:
            del state[name]
    return edit


def _refused(capsys, tmp_path, folder, *names):
    """remprop.check raises a ValueError naming ``names``; the CLI exits 2 with one line naming them."""
    with pytest.raises(ValueError) as err:
        remprop.check(folder)
    message = str(err.value)
    assert "\n" not in message, message
    for name in names:
        assert name in message, message
    code, _, stderr = run_cli(capsys, "check", folder, "--no-figure", "--out", tmp_path / "out")
    assert_one_line_error(code, stderr, *names)
    return message


def test_the_undamaged_folder_is_checked(saved):
    """The control: the same folder before any damage is measured (so each refusal below is the damage's)."""
    diagnosis = remprop.check(saved)
    assert diagnosis.spec.weights is not None and diagnosis.spec.depth == 2


def test_query_weight_reshaped_to_1d_names_the_tensor_and_its_shape(saved, tmp_path, capsys):
    def flatten(state):
        state[QUERY] = state[QUERY].reshape(-1)

    folder = _damaged(saved, tmp_path / "flat", flatten)
    _refused(capsys, tmp_path, folder, QUERY, "(1024,)", "2-d")


def test_position_table_cut_to_one_row_names_the_table(saved, tmp_path, capsys):
    def cut(state):
        state[POSITION] = state[POSITION][:1].clone()

    folder = _damaged(saved, tmp_path / "one_row", cut)
    _refused(capsys, tmp_path, folder, POSITION, "1 position rows")


def test_position_table_of_one_row_with_a_config_of_one_position_names_the_length(saved, tmp_path, capsys):
    """Config and table agree on one position: T = 1 has no pair of tokens (the overlap would divide by zero)."""
    def cut(state):
        state[POSITION] = state[POSITION][:1].clone()

    folder = _damaged(saved, tmp_path / "one_position", cut)
    config = transformers.BertConfig.from_pretrained(folder)
    config.max_position_embeddings = 1
    config.save_pretrained(folder)
    _refused(capsys, tmp_path, folder, "max_position_embeddings", "got 1")


def test_tensor_with_no_entries_names_the_tensor(saved, tmp_path, capsys):
    def empty(state):
        state[QUERY] = torch.zeros(0, 32)

    folder = _damaged(saved, tmp_path / "empty", empty)
    _refused(capsys, tmp_path, folder, QUERY, "no entries")


@pytest.mark.parametrize("dropped, named", [
    (("encoder.layer.1.attention.self.key.weight",), "encoder.layer.1.attention.self.key.weight"),
    (("word_embeddings",), "embeddings.word_embeddings.weight"),
    (("attention.output.LayerNorm.weight",), "attention.output.LayerNorm.weight"),
    ((".attention.",), "query, key, value, output"),
], ids=["one-block-key", "word-table", "every-attention-norm-gain", "no-attention"])
def test_missing_tensors_are_named(saved, tmp_path, capsys, dropped, named):
    folder = _damaged(saved, tmp_path / "missing", _drop(*dropped))
    _refused(capsys, tmp_path, folder, named)


def test_live_model_without_attention_in_a_block_names_the_missing_query():
    torch.manual_seed(0)
    model = transformers.BertModel(_config())
    model.encoder.layer[1].attention = torch.nn.Identity()
    with pytest.raises(ValueError, match=r"encoder\.layer\.1\.attention\.self\.query\.weight"):
        remprop.check(model)


def test_half_loaded_model_on_the_meta_device_names_a_tensor_without_values():
    """Only the embeddings loaded into a model built on the meta device: the first block's tensors have no values."""
    torch.manual_seed(0)
    loaded = transformers.BertModel(_config()).state_dict()
    with torch.device("meta"):
        model = transformers.BertModel(_config())
    embeddings = {k: v for k, v in loaded.items() if k.startswith("embeddings.")}
    model.load_state_dict(embeddings, strict=False, assign=True)
    on_meta = {name for name, tensor in model.state_dict().items() if tensor.device.type == "meta"}
    assert on_meta and not any(name.startswith("embeddings.") for name in on_meta)
    with pytest.raises(ValueError, match="meta device") as err:
        remprop.check(model)
    named = str(err.value).split(" ")[1]
    assert named in on_meta, str(err.value)


#: remprop.check in its own interpreter: the exception's class (its MRO) and message, on stdout as JSON.
_LIBRARY_CHECK = """
import json, sys
import remprop
try:
    remprop.check(sys.argv[1])
except Exception as err:
    print(json.dumps({"classes": [c.__name__ for c in type(err).__mro__], "message": str(err)}))
else:
    print(json.dumps(None))
"""


def _bounded(argv):
    """Run ``argv`` killed after BOUNDED_SECONDS (a read blocked on a named pipe may hold the GIL, so a
    thread could not time it out): (exit status, stdout, stderr)."""
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=BOUNDED_SECONDS)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(argv[-4:])} still running after {BOUNDED_SECONDS} s: blocked on a special file")
    return done.returncode, done.stdout, done.stderr


def _library_error(folder):
    """What remprop.check(folder) raised, from a bounded subprocess: (class names, message)."""
    code, stdout, stderr = _bounded([sys.executable, "-c", _LIBRARY_CHECK, str(folder)])
    assert code == 0, stderr
    raised = json.loads(stdout.strip().splitlines()[-1])
    assert raised is not None, "the special file was not refused"
    return raised["classes"], raised["message"]


def _cli_in_a_subprocess(folder, tmp_path):
    """``remprop check DIR`` in its own interpreter, killed after BOUNDED_SECONDS."""
    code, _, stderr = _bounded([sys.executable, "-m", "remprop", "check", str(folder), "--no-figure", "--out",
                                str(tmp_path / "out")])
    return code, stderr


@fifo_only
@pytest.mark.parametrize("replaced", ["model.safetensors", "config.json"])
def test_named_pipe_in_place_of_a_file_is_refused_without_reading_it(saved, tmp_path, replaced):
    folder = tmp_path / "pipe"
    shutil.copytree(saved, folder)
    (folder / replaced).unlink()
    os.mkfifo(folder / replaced)
    classes, message = _library_error(folder)
    assert "ValueError" in classes and str(folder / replaced) in message and "named pipe" in message, message
    code, stderr = _cli_in_a_subprocess(folder, tmp_path)
    assert_one_line_error(code, stderr, str(folder / replaced), "named pipe")


@fifo_only
def test_named_pipe_as_the_pytorch_weight_file_is_refused_not_skipped(saved, tmp_path):
    """Without safetensors the folder's pytorch_model.bin is read: a pipe there is named, not passed over
    (skipped, the folder would have been checked at the library's default init)."""
    folder = tmp_path / "pipe_bin"
    shutil.copytree(saved, folder)
    (folder / "model.safetensors").unlink()
    os.mkfifo(folder / "pytorch_model.bin")
    classes, message = _library_error(folder)
    assert "ValueError" in classes and str(folder / "pytorch_model.bin") in message, message
    assert "named pipe" in message, message


def test_folder_in_place_of_the_weight_file_is_named(saved, tmp_path, capsys):
    folder = tmp_path / "nested"
    shutil.copytree(saved, folder)
    (folder / "model.safetensors").unlink()
    (folder / "model.safetensors").mkdir()
    _refused(capsys, tmp_path, folder, str(folder / "model.safetensors"), "a folder")
