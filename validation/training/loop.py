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
history) atomically; a later call with the same ``out`` and configuration resumes from it
and, on the CPU, gives the same losses as an uninterrupted run.
"""
from __future__ import annotations

import json
import math
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..backend import resolve_device
from ..measurements import attention_statistics, token_statistics
from .config import TrainConfig
from .data import MaskedLMCorpus, masked_lm_corpus
from .model import MaskedLMStack
from .result import TrainResult

__all__ = ["train", "build_model", "optimiser", "train_step", "evaluate", "probe", "CHECKPOINT_NAME", "RESULT_NAME"]

#: File names inside ``out``.
CHECKPOINT_NAME = "checkpoint.pt"
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


def optimiser(model, config: TrainConfig):
    """AdamW (weight decay on the matrices only) and its linear warm-up / decay schedule.

    Learning rate at step s of S: ``lr * s / s_w`` for ``s < s_w``, then
    ``lr * (S - s) / (S - s_w)`` (``s_w = config.warmup_steps``). Returns ``(optimizer, scheduler)``.
    """
    decay = [p for p in model.parameters() if p.ndim >= 2]
    rest = [p for p in model.parameters() if p.ndim < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": config.weight_decay},
                                   {"params": rest, "weight_decay": 0.0}], lr=config.lr)
    warm, total = config.warmup_steps, config.steps

    def factor(step):
        if step < warm:
            return step / max(1, warm)
        return max(0.0, (total - step) / max(1, total - warm))

    return optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


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


def _save_checkpoint(path: Path, state: dict):
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(handle, "wb") as stream:
            torch.save(state, stream)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _load_checkpoint(path: Path, config: TrainConfig, model, optimizer, scheduler):
    state = torch.load(path, map_location="cpu", weights_only=False)
    if state.get("config") != _config_key(config):
        raise ValueError(f"out holds a checkpoint of another configuration ({path}); use another folder")
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    scheduler.load_state_dict(state["scheduler"])
    torch.set_rng_state(state["torch_rng"])
    return state["step"], state["history"]


def train(config: TrainConfig, out=None, progress=None) -> TrainResult:
    """Train ``config.model`` with a masked-LM loss on the pydoc corpus.

    Parameters
    ----------
    config : TrainConfig
    out : str or Path, optional
        Folder for ``checkpoint.pt`` (written at every evaluation) and ``result.json``
        (at the end). A checkpoint of the same configuration found there is resumed.
    progress : callable, optional
        Called as ``progress(step, steps)`` after every step (and once at the resumed step).

    Returns
    -------
    TrainResult

    Raises
    ------
    ValueError
        ``config`` is not a TrainConfig, ``out`` holds another configuration's
        checkpoint, or ``model="bert"`` with a block order other than post-LN.
    """
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    device = resolve_device(config.device)
    corpus: MaskedLMCorpus = masked_lm_corpus(config.vocab_size)
    test = corpus.test_batches(count=config.eval_batches, batch_size=config.batch_size, seq_len=config.seq_len,
                               mask_prob=config.mask_prob)
    model = build_model(config, corpus.vocab_size, device)
    optimizer, scheduler = optimiser(model, config)
    checkpoint = None
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        checkpoint = out / CHECKPOINT_NAME
    step, history = 0, None
    if checkpoint is not None and checkpoint.exists():
        step, history = _load_checkpoint(checkpoint, config, model, optimizer, scheduler)
    if history is None:
        torch.manual_seed(config.seed)
        history = {"train_loss": [], "eval_steps": [0], "test_loss": [evaluate(model, test, device)],
                   "init": probe(model, test, device), "seconds": 0.0}
        if checkpoint is not None:
            _save(checkpoint, config, step, model, optimizer, scheduler, history)
    if progress is not None:
        progress(step, config.steps)

    model.train()
    started = time.perf_counter()
    seconds_before = history["seconds"]
    while step < config.steps:
        batch = corpus.train_batch(seed=config.seed, step=step, batch_size=config.batch_size,
                                   seq_len=config.seq_len, mask_prob=config.mask_prob)
        loss = train_step(model, batch, optimizer, scheduler, config, device)
        step += 1
        history["train_loss"].append(float(loss))
        if step % config.eval_every == 0 or step == config.steps:
            history["eval_steps"].append(step)
            history["test_loss"].append(evaluate(model, test, device))
            history["seconds"] = seconds_before + time.perf_counter() - started
            if checkpoint is not None:
                _save(checkpoint, config, step, model, optimizer, scheduler, history)
        if progress is not None:
            progress(step, config.steps)

    final = probe(model, test, device)
    seconds = history["seconds"]
    tokens = config.steps * config.batch_size * config.seq_len
    result = TrainResult(config=config, eval_steps=np.asarray(history["eval_steps"], dtype=np.int64),
                         train_loss=np.asarray(history["train_loss"]), test_loss=np.asarray(history["test_loss"]),
                         unigram_loss=corpus.unigram_loss(test), init=history["init"], final=final,
                         corpus=corpus.description,
                         run={"device": str(device), "autocast": "bfloat16" if device.type == "cuda" else None,
                              "torch": torch.__version__, "threads": torch.get_num_threads(),
                              "seconds": seconds, "tokens_per_second": tokens / seconds if seconds > 0 else None})
    if out is not None:
        result.save(out / RESULT_NAME)
    return result


def _save(path, config, step, model, optimizer, scheduler, history):
    _save_checkpoint(path, {"config": _config_key(config), "step": step, "model": model.state_dict(),
                            "optimizer": optimizer.state_dict(), "scheduler": scheduler.state_dict(),
                            "torch_rng": torch.get_rng_state(), "history": history})
