"""remprop in the training loop: :class:`~remprop.validation.integrations.RempropCallback` on a real
``transformers.Trainer`` (a 2-layer, d = 32 GPT-2, a few steps on CPU, no network) and the plain-PyTorch
equivalent ``remprop.check(model, lr=..., steps=...)``."""
from __future__ import annotations

import subprocess
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import remprop  # noqa: E402
from remprop.integrations import RempropCallback, RempropWarning, trainer_recipe  # noqa: E402

T, VOCAB = 16, 50


class _Tokens(torch.utils.data.Dataset):
    def __init__(self, n=16):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, VOCAB, (n, T), generator=generator)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _model():
    torch.manual_seed(0)
    config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=32, n_layer=2, n_head=2, n_positions=T)
    return transformers.GPT2LMHeadModel(config)


def _train(tmp_path, lr, **arguments):
    pytest.importorskip("accelerate")  # transformers' Trainer needs it (the test extra installs it)
    callback = RempropCallback(seq_len=T)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4,
                                          gradient_accumulation_steps=2, learning_rate=lr, max_steps=3,
                                          warmup_steps=1, lr_scheduler_type="cosine", adam_beta2=0.95,
                                          report_to=[], logging_steps=1, save_strategy="no", use_cpu=True,
                                          disable_tqdm=True, **arguments)
    trainer = transformers.Trainer(model=_model(), args=args, train_dataset=_Tokens(), callbacks=[callback])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer.train()
    return callback, trainer, [w for w in caught if issubclass(w.category, RempropWarning)]


def test_callback_checks_at_the_trainers_recipe(tmp_path, caplog):
    with caplog.at_level("INFO", logger="remprop"):
        callback, trainer, caught = _train(tmp_path, 1e-4)
    ceiling = callback.diagnosis.lr_ceiling
    assert ceiling["lr"] == pytest.approx(1e-4) and ceiling["steps"] == 3
    assert ceiling["recipe"] == {"warmup_steps": 1, "batch_tokens": 4 * 2 * T, "beta2": 0.95, "schedule": "cosine"}
    record = next(entry for entry in trainer.state.log_history if "remprop/phase" in entry)
    assert record["remprop/phase"] == callback.diagnosis.phase
    assert callback.figure_path.is_file() and record["remprop/figure"] == str(callback.figure_path)
    assert "lr ceiling" in caplog.text and "remprop check at the Trainer's recipe (lr 0.0001, 3 steps" in caplog.text
    # the model trained on: the callback did not disturb the loop
    assert any("loss" in entry for entry in trainer.state.log_history)
    if ceiling["verdict"] != "above" and callback.diagnosis.phase == "trainable":
        assert not caught


def test_callback_warns_in_one_line_above_the_ceiling(tmp_path):
    callback, _, caught = _train(tmp_path, 50.0)
    assert callback.diagnosis.lr_ceiling["verdict"] == "above"
    lines = [str(w.message) for w in caught if "learning rate" in str(w.message)]
    assert len(lines) == 1 and "\n" not in lines[0] and "above the predicted ceiling" in lines[0]


def test_trainer_recipe_reads_ratio_and_unknown_schedules(tmp_path):
    args = transformers.TrainingArguments(output_dir=str(tmp_path), max_steps=200, warmup_steps=0.1,
                                          lr_scheduler_type="constant", report_to=[], use_cpu=True)
    state = transformers.TrainerState(max_steps=200)
    recipe = trainer_recipe(args, state)
    assert recipe["warmup"] == 20 and recipe["batch_tokens"] is None and recipe["schedule"] == "linear"
    assert any("constant" in note for note in recipe["notes"])


def test_plain_pytorch_check_before_the_loop():
    layer = torch.nn.TransformerEncoderLayer(32, 2, 64, norm_first=True, batch_first=True)
    model = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
    diagnosis = remprop.check(model, seq_len=T, lr=3e-4, steps=500, warmup=50, batch_tokens=4096)
    assert diagnosis.lr_ceiling["lr"] == pytest.approx(3e-4) and diagnosis.lr_ceiling["steps"] == 500
    assert "at lr 0.0003" in diagnosis.report()


def test_without_transformers_the_import_names_the_extra():
    code = ("import sys; sys.modules['transformers'] = None\n"
            "try:\n    from remprop.integrations import RempropCallback\n"
            "except ImportError as err:\n    print(type(err).__name__, err)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "pip install 'remprop[validation]'" in out and out.count("\n") == 1, out
    light = "import sys, remprop.integrations; assert 'torch' not in sys.modules and 'transformers' not in sys.modules"
    subprocess.run([sys.executable, "-c", light], check=True)
