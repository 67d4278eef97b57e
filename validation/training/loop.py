"""Masked-LM training (our stack or BERT at its init): AdamW, linear warm-up and decay, clipping, resumable.

The recipe of the reference experiments (Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(f)
and 3): AdamW with decoupled weight decay on the matrices (not on biases), learning rate
``lr * min(s / s_w, (S - s) / (S - s_w))`` at step s of S with ``s_w = warmup_ratio S``
warm-up steps (the schedule of Hugging Face's ``get_linear_schedule_with_warmup``),
gradient-norm clipping, no dropout. On CUDA the forward runs under bf16 autocast (the
weights and the optimiser stay float32); on the CPU everything is float32.

Reproducible: the weights are the simulator's draws of ``seed``, batch ``s`` comes from
``numpy.random.default_rng([seed, s])`` (:meth:`remprop.validation.training.data.MaskedLMCorpus.train_batch`), and with
``out`` every evaluation writes a checkpoint (model, optimiser, schedule, torch RNG, step,
history) atomically with its SHA-256 (:mod:`~remprop.validation.training.checkpoint`); a later
call with the same ``out`` and configuration resumes from it and, on the CPU, gives the same
losses as an uninterrupted run. A damaged checkpoint is moved aside with a warning and the
run starts again; two runs on one folder are refused (a lock).

Divergence: a run whose training loss, test loss or weights stop being finite (or whose
numbers overflow float32 inside torch) stops at that step; its result says where and why
(``TrainResult.diverged``) and its final test loss is NaN. No checkpoint is written past
the last finite state.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..backend import resolve_device
from ..measurements import attention_statistics, token_statistics
from .checkpoint import CHECKPOINT_NAME, folder_lock, read_checkpoint, write_checkpoint
from .config import TrainConfig
from .data import MaskedLMCorpus, masked_lm_corpus
from .model import MaskedLMStack
from .result import TrainResult

__all__ = ["train", "build_model", "optimiser", "adamw_implementation", "compile_options", "train_step",
           "evaluate", "probe", "CHECKPOINT_NAME", "RESULT_NAME"]

#: File name of the result inside ``out`` (the checkpoint's is
#: :data:`~remprop.validation.training.checkpoint.CHECKPOINT_NAME`).
RESULT_NAME = "result.json"


def build_model(config: TrainConfig, vocab_size: int, device) -> torch.nn.Module:
    """The model ``config.model`` at its initialisation, on ``device``.

    ``"remprop"``: :class:`~remprop.validation.training.MaskedLMStack`; ``"bert"``: :class:`~.hf_model.BertMaskedLM`, a
    ``transformers.BertForMaskedLM`` holding the same weights (raises ``ValueError`` unless
    ``config.arch.norm == "post"``).
    """
    if config.model == "bert":
        from .hf_model import BertMaskedLM

        return BertMaskedLM(config, vocab_size, device)
    return MaskedLMStack(config, vocab_size, device)


def _to_device(batch, device):
    return (torch.as_tensor(batch.inputs, device=device), torch.as_tensor(batch.positions, device=device),
            torch.as_tensor(batch.targets, device=device))


def _autocast(device):
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def _loss(model, batch, device, observe=None):
    ids, positions, targets = _to_device(batch, device)
    with _autocast(device):
        logits = model(ids, positions, observe)
    return F.cross_entropy(logits.float(), targets)


def evaluate(model, batches, device) -> float:
    """Mean cross-entropy over every selected token of ``batches``."""
    total, count = 0.0, 0
    with torch.no_grad():
        for batch in batches:
            n = batch.targets.size
            total += float(_loss(model, batch, device)) * n
            count += n
    return total / count


def probe(model, batches, device) -> dict:
    """Per-layer ``qk_grad_norm``, ``attention_entropy``, ``token_cosine`` on ``batches`` (see TrainResult).

    The gradient is that of the mean loss over the batches; the model's own gradients are
    cleared before and after.
    """
    depth = len(model.query_key_parameters())
    entropy, cosine = np.zeros(depth), np.zeros(depth + 1)

    def observe(layer, hidden, probs):
        cosine[layer] += float(token_statistics(hidden.detach().float())["cosine"].mean())
        if probs is not None:
            entropy[layer - 1] += float(attention_statistics(probs.detach().float())["entropy"].mean())

    model.zero_grad(set_to_none=True)
    for batch in batches:
        (_loss(model, batch, device, observe) / len(batches)).backward()
    norms = np.array([math.sqrt(float(q.grad.square().sum()) + float(k.grad.square().sum()))
                      for q, k in model.query_key_parameters()])
    model.zero_grad(set_to_none=True)
    return {"qk_grad_norm": norms, "attention_entropy": entropy / len(batches),
            "token_cosine": cosine / len(batches)}


def optimiser(model, config: TrainConfig, *, cell_axes: int = 0):
    """AdamW (weight decay on the matrices only; ``betas = (0.9, config.beta2)``, torch's 0.999 by default)
    and its warm-up / decay schedule.

    Learning rate at step s of S: ``lr * s / s_w`` for ``s < s_w``, then ``lr * u`` with
    ``u = (S - s) / (S - s_w)`` (``config.schedule`` "linear", the default) or ``lr * (1 - cos(pi u)) / 2``
    ("cosine") (``s_w = config.warmup_steps``). Returns ``(optimizer, scheduler)``.

    ``model`` is a module or an iterable of parameters; ``cell_axes`` leading axes of every
    parameter stack the runs of several cells (:mod:`~remprop.validation.training.batched`):
    a matrix is a parameter with at least ``2 + cell_axes`` axes. AdamW's update is elementwise,
    so one optimiser over stacked parameters updates each cell as its own optimiser would.

    The update runs as few kernels as the device allows (:func:`adamw_implementation`): fused
    on CUDA, one ``foreach`` pass over all tensors elsewhere; the arithmetic is AdamW's either way.
    """
    params = list(model.parameters() if hasattr(model, "parameters") else model)
    decay = [p for p in params if p.ndim >= 2 + cell_axes]
    rest = [p for p in params if p.ndim < 2 + cell_axes]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                   {"params": rest, "weight_decay": 0.0}], lr=config.lr,
                                  betas=(0.9, 0.999 if config.beta2 is None else config.beta2),
                                  **adamw_implementation({p.device.type for p in params}))
    warm, total, cosine = config.warmup_steps, config.steps, config.schedule == "cosine"

    def factor(step):
        if step < warm:
            return step / max(1, warm)
        left = max(0.0, (total - step) / max(1, total - warm))
        return 0.5 * (1.0 - math.cos(math.pi * left)) if cosine else left

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


def adamw_implementation(device_types) -> dict:
    """The keyword of ``torch.optim.AdamW`` choosing its kernels for parameters on ``device_types``.

    ``{"fused": True}`` (one kernel for every tensor's update) when every parameter is on CUDA,
    else ``{"foreach": True}`` (one multi-tensor pass per operation; torch's default on the CPU
    is a loop over the tensors). All three compute the same AdamW update (to float rounding).

    Parameters
    ----------
    device_types : str or iterable of str
        ``torch.device.type`` of the parameters, e.g. ``{"cuda"}``.
    """
    types = {device_types} if isinstance(device_types, str) else set(device_types)
    return {"fused": True} if types == {"cuda"} else {"foreach": True}


def train_step(model, batch, optimizer, scheduler, config: TrainConfig, device) -> torch.Tensor:
    """One update on ``batch``: loss, backward, gradient clipping, AdamW, schedule; returns the loss."""
    loss = _loss(model, batch, device)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    if math.isfinite(config.grad_clip):
        torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
    optimizer.step()
    scheduler.step()
    return loss.detach()


def _config_key(config: TrainConfig) -> str:
    return json.dumps(config.to_dict(), sort_keys=True)


class _Diverged(Exception):
    """The run's numbers left the floats: ``step`` and ``reason``."""

    def __init__(self, step, reason):
        super().__init__(f"diverged at step {step}: {reason}")
        self.step, self.reason = step, reason


def _overflow(err: RuntimeError, step, what):
    """An overflow inside torch (a scalar beyond float32) as a divergence; anything else re-raised."""
    if "overflow" not in str(err):
        raise err
    return _Diverged(step, f"{what} overflows float32 ({str(err).splitlines()[0]})")


def _finite_weights(model) -> bool:
    return all(bool(torch.isfinite(p).all()) for p in model.parameters())


def _nan_probe(depth) -> dict:
    return {"qk_grad_norm": [math.nan] * depth, "attention_entropy": [math.nan] * depth,
            "token_cosine": [math.nan] * (depth + 1)}


def _start(config, model, test, device):
    """The history at step 0 (seeds torch's RNG); raises _Diverged when the initialisation is not finite."""
    torch.manual_seed(config.seed)
    history = {"train_loss": [], "eval_steps": [0], "test_loss": [], "init": _nan_probe(config.depth),
               "seconds": 0.0}
    try:
        history["test_loss"].append(evaluate(model, test, device))
        history["init"] = {name: np.asarray(value, dtype=float).tolist()
                           for name, value in probe(model, test, device).items()}
    except RuntimeError as err:
        history["test_loss"] = [math.nan]
        return history, _overflow(err, 0, "the forward pass")
    if not math.isfinite(history["test_loss"][0]):
        return history, _Diverged(0, f"the test loss is {history['test_loss'][0]}")
    return history, None


def train(config: TrainConfig, out=None, progress=None) -> TrainResult:
    """Train ``config.model`` with a masked-LM loss on the pydoc corpus.

    Parameters
    ----------
    config : TrainConfig
    out : str or Path, optional
        Folder for ``checkpoint.pt`` (written at every evaluation) and ``result.json``
        (at the end). A checkpoint of the same configuration found there is resumed; a
        damaged one is moved aside (a
        :class:`~remprop.validation.training.checkpoint.DamagedCheckpointWarning`) and the
        run starts from step 0. The folder is locked while the run trains.
    progress : callable, optional
        Called as ``progress(step, steps)`` after every step (and once at the resumed step).

    Returns
    -------
    TrainResult

    Raises
    ------
    ValueError
        ``config`` is not a TrainConfig, ``out`` holds another configuration's
        checkpoint or is in use by another run, or ``model="bert"`` with a block order
        other than post-LN.
    """
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    if out is None:
        return _train(config, None, progress)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with folder_lock(out):
        return _train(config, out, progress)


def compile_options(config: TrainConfig, device) -> dict | None:
    """The ``torch.compile`` keywords of ``config.compile`` on ``device`` (None: not compiled).

    True means mode "reduce-overhead" on CUDA (inductor's kernels replayed as a CUDA graph: the
    per-operation launch cost of deep narrow stacks goes) and "default" elsewhere; shapes are
    static (a step's sequences have one shape). Raises ``ValueError`` naming ``compile`` where
    this platform cannot compile: torch.compile unsupported here, no Triton for CUDA, or no C++
    compiler for the CPU.
    """
    if config.compile is False:
        return None
    import shutil

    import torch._dynamo

    if not torch._dynamo.is_dynamo_supported():
        raise ValueError(f"compile is not available: torch {torch.__version__} cannot compile on this platform")
    if device.type == "cuda":
        from torch.utils._triton import has_triton

        if not has_triton():
            raise ValueError("compile on CUDA needs Triton (pip install triton), which is not installed")
    elif not any(shutil.which(name) for name in ("g++", "c++", "clang++")):
        raise ValueError(f"compile on {device.type} needs a C++ compiler (g++ or clang++) on the PATH")
    mode = config.compile if isinstance(config.compile, str) else (
        "reduce-overhead" if device.type == "cuda" else "default")
    return {"mode": mode, "dynamic": False}


def _fresh(config, vocab_size, device):
    model = build_model(config, vocab_size, device)
    options = compile_options(config, device)
    if options is not None:
        model.compile_blocks(**options)
    return (model, *optimiser(model, config))


def _train(config, out, progress):
    device = resolve_device(config.device)
    corpus: MaskedLMCorpus = masked_lm_corpus(config.vocab_size)
    test = corpus.test_batches(count=config.eval_batches, batch_size=config.batch_size, seq_len=config.seq_len,
                               mask_prob=config.mask_prob)
    model, optimizer, scheduler = _fresh(config, corpus.vocab_size, device)
    checkpoint = None if out is None else out / CHECKPOINT_NAME
    step, history, digest, diverged = 0, None, None, None
    if checkpoint is not None:
        state, digest = read_checkpoint(checkpoint, _config_key(config), config.steps)
        if state is not None:
            try:
                model.load_state_dict(state["model"])
                optimizer.load_state_dict(state["optimizer"])
                scheduler.load_state_dict(state["scheduler"])
                torch.set_rng_state(state["torch_rng"])
                step, history = state["step"], state["history"]
            except (RuntimeError, ValueError, KeyError, TypeError, IndexError) as err:
                from .checkpoint import quarantine

                quarantine(checkpoint, f"it does not fit the model: {type(err).__name__}")
                model, optimizer, scheduler = _fresh(config, corpus.vocab_size, device)
                digest = None
    if history is None:
        history, diverged = _start(config, model, test, device)
        if checkpoint is not None and diverged is None:
            digest = _save(checkpoint, config, step, model, optimizer, scheduler, history, digest)
    if progress is not None:
        progress(step, config.steps)

    model.train()
    started = time.perf_counter()
    seconds_before = history["seconds"]
    while step < config.steps and diverged is None:
        batch = corpus.train_batch(seed=config.seed, step=step, batch_size=config.batch_size,
                                   seq_len=config.seq_len, mask_prob=config.mask_prob)
        try:
            loss = float(train_step(model, batch, optimizer, scheduler, config, device))
        except RuntimeError as err:
            diverged = _overflow(err, step + 1, "the update")
            break
        step += 1
        history["train_loss"].append(loss)
        if not math.isfinite(loss):
            diverged = _Diverged(step, f"the training loss is {loss}")
            break
        if step % config.eval_every == 0 or step == config.steps:
            history["eval_steps"].append(step)
            history["test_loss"].append(evaluate(model, test, device))
            history["seconds"] = seconds_before + time.perf_counter() - started
            if not math.isfinite(history["test_loss"][-1]):
                diverged = _Diverged(step, f"the test loss is {history['test_loss'][-1]}")
            elif not _finite_weights(model):
                diverged = _Diverged(step, "a weight is not finite after the update")
            elif checkpoint is not None:
                digest = _save(checkpoint, config, step, model, optimizer, scheduler, history, digest)
        if progress is not None:
            progress(step, config.steps)

    final = _nan_probe(config.depth) if diverged is not None else probe(model, test, device)
    seconds = history["seconds"] if diverged is None else seconds_before + time.perf_counter() - started
    result = _result(config, corpus, test, device, history, final, step, seconds, diverged)
    if out is not None:
        result.save(out / RESULT_NAME)
    return result


def _result(config, corpus, test, device, history, final, step, seconds, diverged, **run) -> TrainResult:
    """The TrainResult of a run at ``step`` (``run``: more entries of ``TrainResult.run``)."""
    tokens = step * config.batch_size * config.seq_len
    return TrainResult(config=config, eval_steps=np.asarray(history["eval_steps"], dtype=np.int64),
                       train_loss=np.asarray(history["train_loss"]), test_loss=np.asarray(history["test_loss"]),
                       unigram_loss=corpus.unigram_loss(test),
                       init={name: np.asarray(value, dtype=float) for name, value in history["init"].items()},
                       final={name: np.asarray(value, dtype=float) for name, value in final.items()},
                       corpus=corpus.description,
                       run={"device": str(device), "autocast": "bfloat16" if device.type == "cuda" else None,
                            "compiled": compile_options(config, device) is not None,
                            "torch": torch.__version__, "threads": torch.get_num_threads(),
                            "seconds": seconds, "tokens_per_second": tokens / seconds if seconds > 0 else None,
                            **run},
                       diverged=None if diverged is None else {"step": diverged.step, "reason": diverged.reason})


def _save(path, config, step, model, optimizer, scheduler, history, previous):
    """Checkpoint (tensors and plain types only); returns its digest."""
    return write_checkpoint(path, {"config": _config_key(config), "step": step, "model": model.state_dict(),
                                   "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                                   "torch_rng": torch.get_rng_state(), "history": history}, previous)
