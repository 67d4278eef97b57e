"""A training run's checkpoint on disk: checksummed, validated on load, healed when damaged; the folder's lock.

A run with an ``out`` folder (:func:`remprop.validation.training.train`) writes, in it:

* ``checkpoint.pt`` -- the state at the last evaluation (model, optimiser, schedule, torch
  RNG, step, history), written by ``torch.save`` to a private temporary file, flushed to
  disk and renamed over the old one (atomic). It holds only tensors and plain Python
  types (dicts, lists, strings, numbers), so it is read with ``torch.load(...,
  weights_only=True)``: a checkpoint cannot run code when it is loaded.
* ``checkpoint.pt.sha256`` -- its digest (strict JSON, written atomically), written
  *before* the checkpoint is renamed into place and listing both the new checkpoint's
  SHA-256 and that of the one it replaces; so whenever a run is killed, the checkpoint on
  disk matches one of the digests listed (a truncated, altered or foreign file matches none).
* ``train.lock`` -- held (``fcntl.flock``, released by the system when the process ends,
  ``SIGKILL`` included) while a run trains in the folder: a second run on the same folder
  is refused with a ``ValueError`` naming the folder and the holder's pid, instead of
  training every step again beside the first.

Loading (:func:`read_checkpoint`) checks the digest, unpickles with ``weights_only=True``
and checks the contents: the configuration, a step in ``[0, steps]``, a history whose
lengths agree with the step, finite losses and finite tensors (a run never checkpoints
non-finite weights: it stops as diverged). A damaged checkpoint is moved aside to
``checkpoint.pt.corrupt`` (:func:`quarantine`) with one :class:`DamagedCheckpointWarning`
naming it, and the run starts again from step 0 (the run is reproducible, so it ends
with the same numbers). A sound checkpoint of another configuration is not damage: it is
a ``ValueError`` that asks for another folder.
"""
from __future__ import annotations

import contextlib
import hashlib
import io
import json
import math
import os
from pathlib import Path

import torch

from remprop._files import exclusive_lock

from ..experiments.cell_store import DamagedRecordWarning, atomic_write_json

__all__ = ["CHECKPOINT_NAME", "DIGEST_SUFFIX", "LOCK_NAME", "CORRUPT_SUFFIX", "DamagedCheckpointWarning",
           "write_checkpoint", "read_checkpoint", "quarantine", "folder_lock"]

#: File name of the checkpoint inside ``out``.
CHECKPOINT_NAME = "checkpoint.pt"
#: Suffix of the checkpoint's digest file (``checkpoint.pt.sha256``).
DIGEST_SUFFIX = ".sha256"
#: Suffix of a damaged checkpoint moved aside (``checkpoint.pt.corrupt``).
CORRUPT_SUFFIX = ".corrupt"
#: File name of the folder's lock.
LOCK_NAME = "train.lock"
_DIGEST_FORMAT = "remprop.checkpoint_digest/1"
_KEYS = ("config", "step", "model", "optimizer", "scheduler", "torch_rng", "history")


class DamagedCheckpointWarning(DamagedRecordWarning):
    """A damaged checkpoint was moved aside and the run starts again from step 0."""


def _digest_path(path: Path) -> Path:
    return path.with_name(path.name + DIGEST_SUFFIX)


def _accepted_digests(path: Path) -> tuple:
    """``(digests, problem)``: the SHA-256 digests the digest file of ``path`` lists, and why
    there are none (None when it lists some): missing, damaged, or not a remprop digest file."""
    digest_file = _digest_path(path)
    try:
        data = json.loads(digest_file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return [], "its digest file is missing"
    except (OSError, ValueError):  # random bytes, truncated JSON, not UTF-8 (UnicodeDecodeError is a ValueError)
        return [], f"its digest file {digest_file.name} is damaged (not readable JSON)"
    if not isinstance(data, dict) or data.get("format") != _DIGEST_FORMAT or not isinstance(data.get("sha256"), list):
        return [], f"its digest file {digest_file.name} is not a remprop checkpoint digest"
    digests = [d for d in data["sha256"] if isinstance(d, str)]
    return digests, None if digests else f"its digest file {digest_file.name} lists no digest"


def write_checkpoint(path, state: dict, previous=None) -> str:
    """Write ``state`` to ``path`` atomically with its digest file; return its SHA-256.

    ``previous``: the digest of the checkpoint being replaced (listed too, so that a run
    killed between the two renames leaves a matching pair).
    """
    path = Path(path)
    buffer = io.BytesIO()
    torch.save(state, buffer)
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    temporary = path.with_name(f".{path.name}.{os.getpid()}.{digest[:12]}.tmp")
    try:
        with open(temporary, "wb") as stream:
            stream.write(data)
            stream.flush()
            os.fsync(stream.fileno())
        atomic_write_json(_digest_path(path), {"format": _DIGEST_FORMAT,
                                               "sha256": [digest] + ([previous] if previous else [])})
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    return digest


def _finite_tensors(value) -> bool:
    if isinstance(value, torch.Tensor):
        return not value.is_floating_point() or bool(torch.isfinite(value).all())
    if isinstance(value, dict):
        return all(_finite_tensors(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return all(_finite_tensors(v) for v in value)
    return True


def _finite_numbers(values) -> bool:
    return isinstance(values, list) and all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)


def _problem(state, config_key: str, steps: int):
    """Why a loaded ``state`` is not a sound checkpoint of ``steps`` steps (None when it is)."""
    if not isinstance(state, dict):
        return f"it holds a {type(state).__name__}, not a training checkpoint"
    missing = [key for key in _KEYS if key not in state]
    if missing:
        return f"it is not a training checkpoint (it lacks {', '.join(missing)})"
    if not isinstance(state["config"], str):
        return "its configuration is not a string"
    if state["config"] != config_key:
        return None  # sound but foreign: the caller refuses it
    step, history = state["step"], state["history"]
    if isinstance(step, bool) or not isinstance(step, int) or not 0 <= step <= steps:
        return f"its step {step!r} is not one of 0..{steps}"
    if not isinstance(history, dict) or not all(k in history for k in ("train_loss", "eval_steps", "test_loss",
                                                                        "init", "seconds")):
        return "its history is incomplete"
    if not _finite_numbers(history["train_loss"]) or len(history["train_loss"]) != step:
        return f"its training losses are not {step} finite numbers"
    evals, losses = history["eval_steps"], history["test_loss"]
    if not _finite_numbers(losses) or not isinstance(evals, list) or len(evals) != len(losses) or not evals \
            or evals[0] != 0 or evals[-1] != step or any(not isinstance(e, int) or e > step for e in evals):
        return "its test losses do not match its evaluation steps"
    if not isinstance(history["init"], dict) or not all(isinstance(v, list) for v in history["init"].values()):
        return "its measurements at initialisation are not lists of numbers"
    if not isinstance(state["torch_rng"], torch.Tensor) or state["torch_rng"].dtype != torch.uint8:
        return "its torch RNG state is not a byte tensor"
    if not _finite_tensors(state["model"]) or not _finite_tensors(state["optimizer"]):
        return "it holds weights or optimiser states that are not finite"
    return None


def quarantine(path, reason: str) -> Path:
    """Move the damaged checkpoint ``path`` aside to ``<name>.corrupt`` (its digest file is
    removed) with one :class:`DamagedCheckpointWarning` naming it; return the new path."""
    import warnings

    path = Path(path)
    aside = path.with_name(path.name + CORRUPT_SUFFIX)
    with contextlib.suppress(FileNotFoundError):
        os.replace(path, aside)
    _digest_path(path).unlink(missing_ok=True)
    warnings.warn(f"{path}: damaged checkpoint ({reason}); moved to {aside.name}, training starts again from "
                  "step 0", DamagedCheckpointWarning, stacklevel=2)
    return aside


def read_checkpoint(path, config_key: str, steps: int):
    """The sound checkpoint at ``path`` as ``(state, digest)``, or ``(None, None)``.

    None when there is none, and when it is damaged (then it is moved aside with a
    warning, :func:`quarantine`).

    Raises
    ------
    ValueError
        The checkpoint is sound but of another configuration (``config_key``, the JSON of
        the run's configuration), naming the file.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None, None
    except OSError as err:
        quarantine(path, f"unreadable: {err.strerror or err}")
        return None, None
    digest = hashlib.sha256(data).hexdigest()
    accepted, problem = _accepted_digests(path)
    if digest not in accepted:
        why = problem or "it does not match its SHA-256"
        quarantine(path, f"{why}: truncated, altered or not written by remprop")
        return None, None
    try:
        state = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any unpickling failure is damage
        quarantine(path, f"not a readable torch file: {type(err).__name__}")
        return None, None
    problem = _problem(state, config_key, steps)
    if problem is not None:
        quarantine(path, problem)
        return None, None
    if state["config"] != config_key:
        raise ValueError(f"out holds a checkpoint of another configuration ({path}); use another folder")
    return state, digest


@contextlib.contextmanager
def folder_lock(directory):
    """Hold ``directory/train.lock`` while the block runs; ``ValueError`` when another process holds it.

    The lock is ``remprop._files.exclusive_lock`` (not waiting); the file holds the holder's pid.
    Where ``fcntl`` is missing (not POSIX) nothing is locked.
    """
    path = Path(directory) / LOCK_NAME
    with contextlib.ExitStack() as held:
        try:
            descriptor = held.enter_context(exclusive_lock(path, wait=False))
        except BlockingIOError:
            try:
                holder = path.read_text(encoding="utf-8").strip() or "?"
            except OSError:
                holder = "?"
            raise ValueError(f"out: {directory} is in use by another training run (pid {holder}); wait for it to "
                             "finish or use another folder") from None
        if descriptor is not None:
            os.ftruncate(descriptor, 0)
            os.pwrite(descriptor, str(os.getpid()).encode("ascii"), 0)
        yield
