"""Issue 25, the training surfaces (``remprop train``, ``remprop trained-diagram``).

Before -> after, one test (or parametrised case) each:

* item 2, damaged checkpoints: a truncated ``checkpoint.pt`` ("unexpected OSError [Errno 22]"),
  random bytes (UnpicklingError), an empty file (EOFError), NaN weights (resumed to loss nan,
  exit 0), step 99999 > --steps (counted as finished), loaded with ``weights_only=False`` ->
  a SHA-256 sidecar and content checks, ``weights_only=True``; a damaged checkpoint is moved
  aside with one warning naming it and the run starts again, ending bit for bit where an
  undamaged run ends;
* item 3, silent NaN: ``--beta 1e300`` / ``--alpha 1e30 --norm none`` printed "final test
  loss nan" with exit 0, ``--lr 1e300`` / ``--alpha 1e200`` ended in "unexpected
  RuntimeError ... overflow", a trained diagram classified NaN cells -> the run stops at the
  step where its numbers stop being finite, says which and why (exit 2), records
  ``diverged``; the trained diagram counts the cell as "diverged";
* item 1, unbounded work: ``train --width 1000000`` (allocator errors), ``--depth 100000`` and
  ``trained-diagram`` (silent) -> refused up front with the estimate (--max-seconds /
  --max-memory);
* item 4, ``--model bert`` ignored or crashed on --norm-type, --branch-norm, --mlp gated,
  --kv-heads -> refused, naming the option;
* item 6, a refused or crashed trained grid left its manifest and locked the folder -> no manifest;
* item 7, wrong things blamed: --positions rope / --qk-norm blamed --theory-seq-len (now they
  train at --seq-len), a rerun with other --steps blamed config.eval_every (now names
  --steps), --seed 2**64 gave "Overflow when unpacking long long" (now names --seed);
* item 8, a folder in place of an output file crashed after the work -> refused first;
* item 9, ``--vocab-size 100000000`` trained 4736 tokens and recorded 1e8 (refused, naming
  the largest size), ``--out ''`` wrote into the current folder (refused), two runs on one
  folder both trained every step (the second is refused: a lock).
* issue 46, item 7: a cell with ``"final_test_loss": NaN`` blocked the grid ("Out of range float
  values are not JSON compliant") -> quarantined and trained again; item 8: a file at ``D/cells``
  (FileExistsError) -> one line naming it.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")
pytest.importorskip("tokenizers", reason="the training corpus needs Hugging Face tokenizers")

from remprop.cli import main  # noqa: E402
from remprop.theory import Architecture  # noqa: E402
from remprop.validation.backend import torch_threads  # noqa: E402
from remprop.validation.training import TrainConfig, train  # noqa: E402
from remprop.validation.training.checkpoint import (CHECKPOINT_NAME, DamagedCheckpointWarning,  # noqa: E402
                                                    folder_lock, write_checkpoint)
from remprop.validation.training.trained_diagram import DIVERGED, TrainedDiagram  # noqa: E402
from cli_checks import run_cli, assert_one_line  # noqa: E402

#: About a second a run.
TINY = dict(depth=2, width=16, seq_len=16, batch_size=4, steps=4, eval_every=2, eval_batches=1, vocab_size=1024,
            device="cpu")
TRAIN = ["train", "--depth", "2", "--width", "16", "--seq-len", "16", "--batch-size", "4", "--steps", "4",
         "--eval-every", "2", "--eval-batches", "1", "--vocab-size", "1024", "--device", "cpu", "--no-progress"]
GRID = ["trained-diagram", "--depth", "2", "--width", "16", "--seq-len", "16", "--batch-size", "4", "--steps", "4",
        "--eval-every", "2", "--vocab-size", "1024", "--device", "cpu", "--workers", "0", "--no-progress"]


@pytest.fixture(autouse=True)
def one_thread():
    with torch_threads(1):
        yield






# -- item 2: damaged checkpoints -------------------------------------------------------------
@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """An uninterrupted run (the reference numbers) and its final checkpoint's bytes and state."""
    with torch_threads(1):
        folder = tmp_path_factory.mktemp("pristine")
        result = train(TrainConfig(**TINY), out=folder)
        data = (folder / CHECKPOINT_NAME).read_bytes()
        state = torch.load(folder / CHECKPOINT_NAME, weights_only=True)
    return result, data, state


class _Runs:
    """Unpickling this runs code (what ``weights_only=False`` would allow)."""

    def __reduce__(self):
        return (print, ("code ran while loading a checkpoint",))


def _damage(kind, path, data, state):
    if kind == "truncated":
        path.write_bytes(data[:len(data) // 2])
    elif kind == "random bytes":
        path.write_bytes(np.random.default_rng(0).bytes(len(data)))
    elif kind == "empty":
        path.write_bytes(b"")
    elif kind == "no digest":
        path.write_bytes(data)
        path.with_name(path.name + ".sha256").unlink()
    else:  # sound file, checksummed, damaged contents
        state = {**state, "model": dict(state["model"]), "history": dict(state["history"])}
        if kind == "nan weights":
            name = next(iter(state["model"]))
            state["model"][name] = torch.full_like(state["model"][name], math.nan)
        elif kind == "step 99999":
            state["step"] = 99999
        elif kind == "pickled code":
            state["history"]["init"] = _Runs()
        write_checkpoint(path, state)


@pytest.mark.parametrize("kind", ["truncated", "random bytes", "empty", "no digest", "nan weights", "step 99999",
                                  "pickled code"])
def test_damaged_checkpoint_is_moved_aside_and_the_run_heals(tmp_path, pristine, kind, capsys):
    """Before: OSError / UnpicklingError / EOFError, a NaN resume with exit 0, a step past
    --steps counted as finished, unpickling of anything. After: one warning naming the file,
    the file moved to checkpoint.pt.corrupt, the run trained again from step 0 to the same
    numbers bit for bit (the run is reproducible on the CPU)."""
    reference, data, state = pristine
    train(TrainConfig(**TINY), out=tmp_path)  # a finished folder with its checkpoint and digest
    path = tmp_path / CHECKPOINT_NAME
    _damage(kind, path, data, state)
    with pytest.warns(DamagedCheckpointWarning, match=f"{path}: damaged checkpoint") as caught:
        healed = train(TrainConfig(**TINY), out=tmp_path)
    assert len([w for w in caught if issubclass(w.category, DamagedCheckpointWarning)]) == 1
    assert "\n" not in str(caught[0].message)
    assert "code ran" not in capsys.readouterr().out
    assert (tmp_path / (CHECKPOINT_NAME + ".corrupt")).exists() and path.exists()
    assert healed.diverged is None
    np.testing.assert_array_equal(healed.train_loss, reference.train_loss)
    np.testing.assert_array_equal(healed.test_loss, reference.test_loss)
    # the healed checkpoint is sound: a third run reads it without a warning
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", DamagedCheckpointWarning)
        again = train(TrainConfig(**TINY), out=tmp_path)
    np.testing.assert_array_equal(again.test_loss, reference.test_loss)


def test_damaged_checkpoint_through_the_command(tmp_path, capsys):
    """Before: "unexpected OSError: [Errno 22]" naming no file, exit 1. After: exit 0."""
    assert main([*TRAIN, "--out", str(tmp_path)]) == 0
    first = json.loads((tmp_path / "train.json").read_text())["final_test_loss"]
    path = tmp_path / CHECKPOINT_NAME
    path.write_bytes(path.read_bytes()[:100])
    capsys.readouterr()
    assert main([*TRAIN, "--out", str(tmp_path)]) == 0
    # the command line shows the DamagedCheckpointWarning as one plain line naming the file
    warned = [line for line in capsys.readouterr().err.splitlines() if "warning:" in line]
    assert len(warned) == 1 and str(path) in warned[0], warned
    assert json.loads((tmp_path / "train.json").read_text())["final_test_loss"] == first


# -- item 3: divergence ----------------------------------------------------------------------
@pytest.mark.parametrize("changes, step, reason", [
    (dict(beta=1e300), 0, "test loss is nan"),
    (dict(arch=Architecture(alpha_sa=1e30, norm="none")), 0, "test loss is nan"),
    (dict(arch=Architecture(alpha_sa=1e200)), 0, "overflows float32"),
    (dict(lr=1e300), 1, "overflows float32"),
], ids=["beta 1e300", "alpha 1e30 no LN", "alpha 1e200", "lr 1e300"])
def test_a_run_whose_numbers_leave_the_floats_stops_as_diverged(tmp_path, changes, step, reason):
    """Before: "final test loss nan" with exit 0, or "unexpected RuntimeError ... overflow".
    After: the run stops at that step and its result says so (final loss NaN); no
    checkpoint past the last finite state."""
    result = train(TrainConfig(**{**TINY, **changes}), out=tmp_path)
    assert result.diverged is not None and result.diverged["step"] == step, result.diverged
    assert reason in result.diverged["reason"]
    assert math.isnan(result.final_test_loss) and len(result.train_loss) <= step
    back = json.loads((tmp_path / "result.json").read_text())
    assert back["diverged"] == result.diverged and back["final_test_loss"] == "nan"


def test_diverged_run_through_the_command_is_one_line_and_recorded(tmp_path, capsys):
    code, out, err = run_cli(capsys, *TRAIN, "--beta", "1e300", "--out", tmp_path)
    assert_one_line(err, "diverged at initialisation", "train.json", code=code)
    assert json.loads((tmp_path / "train.json").read_text())["diverged"]["step"] == 0
    code, out, err = run_cli(capsys, *TRAIN, "--lr", "1e300", "--out", tmp_path / "lr")
    assert_one_line(err, "diverged at step 1 of 4", code=code)


def test_trained_diagram_counts_divergence_as_an_outcome(tmp_path, capsys):
    """Before: NaN cells classified as collapsed. After: a 'diverged' cell, the grid finishes
    (exit 0), its figure and files are written and read back."""
    code, out, err = run_cli(capsys, *GRID, "--beta", "0.5,1e300", "--alpha", "1", "--out", tmp_path, "--json")
    assert code == 0, err
    summary = json.loads(out)
    assert summary["trained_phase"][0][1] == DIVERGED and summary["trained_phase"][0][0] != DIVERGED
    assert math.isfinite(summary["reference_loss"])
    back = TrainedDiagram.load(tmp_path / "trained_diagram")
    assert back.grid.labels[DIVERGED] == "diverged" and back.phase[0, 1] == DIVERGED
    assert np.isnan(back.test_loss[0, 1, 1:]).all() and np.isfinite(back.test_loss[0, 0]).all()
    assert (tmp_path / "trained_diagram.png").stat().st_size > 10_000


# -- item 1 and 6: the work is estimated first; a refused grid leaves no manifest ------------
@pytest.mark.parametrize("argv", [["--width", "1000000"], ["--depth", "100000"]])
def test_train_refuses_work_past_the_limits(tmp_path, capsys, argv):
    """Before: allocator errors after minutes, or a silent run of hours. After: refused before
    any allocation, one line with the estimate."""
    code, out, err = run_cli(capsys, *TRAIN, *argv, "--out", tmp_path)
    assert_one_line(err, "would", "--max-", code=code)
    assert not (tmp_path / CHECKPOINT_NAME).exists()


def test_train_memory_limit_is_its_own_option(tmp_path, capsys):
    code, out, err = run_cli(capsys, *TRAIN, "--width", "100000", "--max-seconds", "1e12", "--out", tmp_path)
    assert_one_line(err, "max_memory", "GiB", "--max-memory", code=code)


def test_trained_diagram_refuses_work_and_leaves_no_manifest(tmp_path, capsys):
    code, out, err = run_cli(capsys, *GRID, "--width", "1000000", "--out", tmp_path)
    assert_one_line(err, "would", "--max-", code=code)
    assert not (tmp_path / "sweep.json").exists()
    code, out, err = run_cli(capsys, *GRID, "--beta", "0.5", "--alpha", "1", "--out", tmp_path)
    assert code == 0, err  # the corrected rerun is not refused as "a different sweep"


# -- item 4: BERT -----------------------------------------------------------------------------
@pytest.mark.parametrize("argv, option", [(["--norm-type", "rms"], "--norm-type"),
                                          (["--branch-norm"], "--branch-norm"),
                                          (["--mlp", "gated"], "--mlp"),
                                          (["--heads", "2", "--kv-heads", "1"], "--kv-heads")])
def test_bert_refuses_options_it_cannot_run(tmp_path, capsys, argv, option):
    """Before: bit-identical to default BERT while train.json recorded the option, or an
    AttributeError / size mismatch. After: one line naming the option, exit 2."""
    code, out, err = run_cli(capsys, *TRAIN, "--model", "bert", *argv, "--out", tmp_path)
    assert_one_line(err, option, "BertModel", code=code)


# -- item 7: the right option is named; rope and QK-norm train -------------------------------
@pytest.mark.parametrize("argv", [["--positions", "rope", "--head-dim", "16"], ["--qk-norm", "--head-dim", "16"]])
def test_rope_and_qk_norm_train_at_the_sequence_length(tmp_path, capsys, argv):
    code, out, err = run_cli(capsys, *TRAIN, *argv, "--steps", "2", "--out", tmp_path, "--json")
    assert code == 0, err
    data = json.loads(out)
    assert data["config"]["arch"]["seq_len"] == 16 and math.isfinite(data["final_test_loss"])


def test_seed_beyond_64_bits_names_the_option(tmp_path, capsys):
    code, out, err = run_cli(capsys, *TRAIN, "--seed", 2 ** 64, "--out", tmp_path)
    assert_one_line(err, "--seed", code=code)
    code, out, err = run_cli(capsys, *GRID, "--seeds", f"0,{2 ** 64}", "--out", tmp_path / "grid")
    assert_one_line(err, "--seeds", code=code)


def test_other_steps_on_an_existing_grid_names_steps(tmp_path, capsys):
    """Before: blamed config.eval_every, which the user did not set. After: names --steps."""
    at = GRID.index("--eval-every")
    grid = GRID[:at] + GRID[at + 2:]
    assert main([*grid, "--beta", "0.5", "--alpha", "1", "--out", str(tmp_path)]) == 0
    capsys.readouterr()
    code, out, err = run_cli(capsys, *grid, "--beta", "0.5", "--alpha", "1", "--steps", "30", "--out", tmp_path)
    assert_one_line(err, "--steps: stored 4, asked 30", code=code)


# -- item 8: output paths checked before the work ------------------------------------------
def test_a_folder_in_place_of_a_cell_file_is_refused_first(tmp_path, capsys):
    (tmp_path / "cells" / "a0000_b0000.json").mkdir(parents=True)
    code, out, err = run_cli(capsys, *GRID, "--beta", "0.5", "--alpha", "1", "--out", tmp_path)
    assert_one_line(err, "a0000_b0000.json is a folder", "--out", code=code)
    assert not (tmp_path / "sweep.json").exists()


@pytest.mark.parametrize("command, name", [("train", "train.json"), ("grid", "trained_diagram.png")])
def test_a_folder_in_place_of_an_output_file_is_refused_first(tmp_path, capsys, command, name):
    (tmp_path / name).mkdir()
    argv = TRAIN if command == "train" else [*GRID, "--beta", "0.5", "--alpha", "1"]
    code, out, err = run_cli(capsys, *argv, "--out", tmp_path)
    assert_one_line(err, name, "is a folder", code=code)
    assert not (tmp_path / CHECKPOINT_NAME).exists() and not (tmp_path / "sweep.json").exists()


# -- item 9 ------------------------------------------------------------------------------------
def test_vocabulary_larger_than_the_corpus_is_refused(tmp_path, capsys):
    """Before: trained 4736 tokens and recorded 100000000. After: refused, naming the largest size."""
    code, out, err = run_cli(capsys, *TRAIN, "--vocab-size", "100000000", "--out", tmp_path)
    assert_one_line(err, "vocab_size must be <=", "--vocab-size", code=code)


def test_empty_out_is_refused(capsys):
    code, out, err = run_cli(capsys, *TRAIN, "--out", "")
    assert_one_line(err, "--out", code=code)


def test_a_second_run_on_a_busy_folder_is_refused(tmp_path, capsys):
    """Before: two concurrent runs both trained every step. After: the folder is locked while
    a run trains (released by the system when the process dies, SIGKILL included); the
    second run is refused with one line naming the folder."""
    with folder_lock(tmp_path):
        with pytest.raises(ValueError, match="in use by another training run"):
            train(TrainConfig(**TINY), out=tmp_path)
        code, out, err = run_cli(capsys, *TRAIN, "--out", tmp_path)
        assert_one_line(err, "in use by another training run", "--out", code=code)
    assert train(TrainConfig(**TINY), out=tmp_path).diverged is None  # free again


def test_checkpoint_holds_only_tensors_and_plain_types(pristine):
    """weights_only=True reads every checkpoint written (no numpy arrays or objects inside)."""
    _, data, state = pristine
    assert state["step"] == TINY["steps"] and isinstance(state["history"]["init"]["token_cosine"], list)


# -- issue 46, items 7 and 8 -------------------------------------------------------------------------
def test_a_nan_in_a_trained_cell_is_quarantined_and_recomputed(tmp_path, capsys):
    """Before: every rerun exited 2 with "Out of range float values are not JSON compliant",
    naming no file. After: the record (strict JSON is never written with a NaN) is moved aside
    with one warning naming it, the cell is trained again and the grid is the untouched one's."""
    argv = [*GRID, "--beta", "0.5", "--alpha", "1", "--out", tmp_path, "--json"]
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    reference = json.loads(out)
    cell = tmp_path / "cells" / "a0000_b0000.json"
    record = json.loads(cell.read_text())
    record["results"][0]["final_test_loss"] = float("nan")
    cell.write_text(json.dumps(record))  # Python's json writes the bare NaN
    code, out, err = run_cli(capsys, *argv)
    assert code == 0, err
    warned = [line for line in err.splitlines() if "damaged" in line]
    assert len(warned) == 1 and str(cell) in warned[0] and "NaN" in warned[0], err
    assert cell.with_name(cell.name + ".corrupt").exists()
    again = json.loads(out)
    assert again["trained_phase"] == reference["trained_phase"]
    assert again["reference_loss"] == reference["reference_loss"]  # seeded training: the same numbers


def test_a_file_in_place_of_the_cells_folder_is_one_line(tmp_path, capsys):
    """Before: FileExistsError. After: exit 2, one line naming the file and --out."""
    (tmp_path / "cells").write_text("")
    code, out, err = run_cli(capsys, *GRID, "--beta", "0.5", "--alpha", "1", "--out", tmp_path)
    assert_one_line(err, f"{tmp_path / 'cells'} is a file", "--out", code=code)


def test_random_bytes_in_the_digest_file_are_named_as_such(tmp_path):
    """Before: random bytes in checkpoint.pt.sha256 were reported as "its digest file is missing".
    After: the warning says the digest file is damaged (and the run still heals)."""
    train(TrainConfig(**TINY), out=tmp_path)
    digest = tmp_path / (CHECKPOINT_NAME + ".sha256")
    digest.write_bytes(np.random.default_rng(1).bytes(200))
    with pytest.warns(DamagedCheckpointWarning, match=r"checkpoint\.pt\.sha256 is damaged \(not readable JSON\)"):
        healed = train(TrainConfig(**TINY), out=tmp_path)
    assert healed.diverged is None
    (tmp_path / (CHECKPOINT_NAME + ".corrupt")).unlink()
    digest.unlink()
    with pytest.warns(DamagedCheckpointWarning, match="its digest file is missing"):  # the missing case stays
        train(TrainConfig(**TINY), out=tmp_path)
