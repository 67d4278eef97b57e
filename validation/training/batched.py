r"""Many training runs of one shape trained as one stacked model.

A trained diagram is many identical-shape small models: the cells ``(alpha_SA, beta)`` of a
grid times their seeds. :func:`train_batched` trains a group of such runs together, so that
small models reach the machine's matmul rate instead of its per-operation overhead:

* **One model, one home.** Each run's model is the one :func:`~remprop.validation.training.train`
  builds (:func:`~remprop.validation.training.build_model`: the simulator's weight draws of
  its own ``beta`` and ``seed``); their parameters are stacked along a leading cell axis
  (``torch.func.stack_module_state``) and the forward is the single model's own forward,
  mapped over that axis (``torch.func.vmap`` of ``torch.func.functional_call``): every
  matmul of every block becomes one batched matmul over the cells, and no layer is written
  a second time.
* **One optimiser step.** One AdamW over the stacked parameters
  (:func:`~remprop.validation.training.loop.optimiser` with ``cell_axes=1``): AdamW is
  elementwise, so each cell is updated as its own optimiser would update it; the schedule
  is shared (the runs share ``lr``, ``steps`` and the warm-up). The loss that is
  differentiated is the sum of the cells' losses, whose gradient with respect to one cell's
  parameters is that cell's own gradient (the cells share no parameter). Gradient clipping
  is ``torch.nn.utils.clip_grad_norm_``'s rule applied to each cell on its own:
  ``g_c <- g_c min(1, C / (||g_c|| + 10^{-6}))``, ``||g_c||`` the 2-norm of the per-tensor
  2-norms of cell c.
* **Own data.** Run c reads training batch ``s`` of its own seed
  (``MaskedLMCorpus.train_batch(seed=c.seed, step=s)``), as in its single run; the
  selected positions of the cells' batches are padded to the largest count and weighted
  out of the loss. The held-out batches are the same for every run.
* **Own outcome.** Test losses, divergence (a non-finite loss or weight stops that cell at
  that step, as in its single run) and the probes at init and at the end are per run; the
  results are the :class:`~remprop.validation.training.TrainResult` the single runs give,
  with ``run["batched"]`` the number of runs trained together (``run["seconds"]`` is the
  group's wall time).

The losses equal the one-at-a-time runs' to float rounding (batched matmuls add in
another order); ``tests/test_batched_training.py`` checks it. Which runs may share a
stacked model: :func:`batch_key`.

Reference: ``torch.func`` (model ensembling); docs/training.md, "Batched training".
"""
from __future__ import annotations

import json
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

from ..backend import resolve_device
from .config import TrainConfig
from .data import masked_lm_corpus
from .loop import (_Diverged, _autocast, _nan_probe, _result, _start, _to_device, build_model, optimiser, probe,
                   train)

__all__ = ["batch_key", "train_batched"]


def batch_key(config: TrainConfig):
    """What runs trained as one stacked model must share (None: the run is trained alone).

    Runs with equal keys build models that differ only in their weights, so one forward
    serves them all: every field of the configuration but the initialisation and data
    ``seed``, and but ``beta``, which sets only the query/key weights' variance, unless the
    architecture has QK-norm (its scores are multiplied by ``beta`` in the forward,
    :class:`~remprop.validation.layers.QKNorm`). ``model="bert"`` is trained alone.
    """
    if not isinstance(config, TrainConfig):
        raise ValueError(f"config must be a TrainConfig, got {type(config).__name__}")
    if config.model != "remprop":
        return None
    shared = {"seed": 0} if config.arch.qk_norm else {"seed": 0, "beta": 1.0}
    return json.dumps(config.replace(**shared).to_dict(), sort_keys=True)


def _check_group(configs):
    configs = list(configs)
    if not configs:
        raise ValueError("configs must hold at least one TrainConfig")
    keys = [batch_key(config) for config in configs]
    if keys[0] is None or any(key != keys[0] for key in keys):
        raise ValueError("configs must differ only in seed (and in beta without QK-norm) and train "
                         "model='remprop' to be trained as one stacked model (see batch_key)")
    return configs


def _clip_per_cell(params, max_norm):
    """``clip_grad_norm_``'s rule for each cell (leading axis) of the stacked gradients."""
    grads = [p.grad for p in params if p.grad is not None]
    norms = torch.stack([torch.linalg.vector_norm(g.flatten(1), dim=1) for g in grads])  # (tensors, cells)
    total = torch.linalg.vector_norm(norms, dim=0)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coef.view(-1, *([1] * (g.ndim - 1))).to(g.dtype))


def _explicit_attention(layer, hidden, probs):
    """A no-op observer, so that the stacked forward keeps the explicit attention path: torch has no
    vmap rule for its CPU fused attention kernel and would loop over the cells, slower than the
    explicit path's batched matmuls. The single runs' fused path equals it to rounding
    (:func:`~remprop.validation.layers.fused_attention`)."""


class _Stack:
    """The stacked parameters of several runs and the single model's forward mapped over them."""

    def __init__(self, models, device):
        self.base, self.device = models[0], device
        self.params, self.buffers = torch.func.stack_module_state(models)
        self.cells = len(models)

        def logits(params, buffers, ids, positions):
            return torch.func.functional_call(self.base, (params, buffers), (ids, positions, _explicit_attention))

        self._train = torch.func.vmap(logits, in_dims=(0, 0, 0, 0))
        self._shared = torch.func.vmap(logits, in_dims=(0, 0, None, None))

    def losses(self, batches) -> torch.Tensor:
        """Each cell's mean cross-entropy on its own batch, shape (cells,)."""
        ids = torch.stack([torch.as_tensor(b.inputs, device=self.device) for b in batches])
        counts = [int(b.targets.size) for b in batches]
        width = max(counts)
        positions = torch.zeros(self.cells, width, 2, dtype=torch.int64, device=self.device)
        targets = torch.zeros(self.cells, width, dtype=torch.int64, device=self.device)
        for c, b in enumerate(batches):  # padded with position (0, 0), weighted out below
            positions[c, :counts[c]] = torch.as_tensor(b.positions, device=self.device)
            targets[c, :counts[c]] = torch.as_tensor(b.targets, device=self.device)
        with _autocast(self.device):
            logits = self._train(self.params, self.buffers, ids, positions)
        per_token = F.cross_entropy(logits.float().flatten(0, 1), targets.flatten(), reduction="none")
        per_token = per_token.view(self.cells, width)
        counts = torch.as_tensor(counts, device=self.device)
        kept = torch.arange(width, device=self.device)[None, :] < counts[:, None]
        return torch.where(kept, per_token, 0.0).sum(dim=1) / counts

    def evaluate(self, batches) -> list:
        """Each cell's mean cross-entropy over every selected token of the shared ``batches``."""
        total, count = np.zeros(self.cells), 0
        with torch.no_grad():
            for batch in batches:
                ids, positions, targets = _to_device(batch, self.device)
                with _autocast(self.device):
                    logits = self._shared(self.params, self.buffers, ids, positions)
                per_cell = F.cross_entropy(logits.float().flatten(0, 1), targets.repeat(self.cells),
                                           reduction="none").view(self.cells, -1).mean(dim=1)
                total += per_cell.double().cpu().numpy() * targets.numel()
                count += targets.numel()
        return (total / count).tolist()

    def finite_weights(self) -> list:
        """Per cell: every weight finite."""
        with torch.no_grad():
            return torch.stack([torch.isfinite(p).flatten(1).all(dim=1) for p in self.params.values()]).all(
                dim=0).tolist()

    def load(self, cell, model):
        """Copy cell ``cell``'s stacked parameters into ``model`` (one run's model)."""
        with torch.no_grad():
            for name, parameter in model.named_parameters():
                parameter.copy_(self.params[name][cell])


def train_batched(configs, progress=None) -> list:
    """Train the runs ``configs`` as one stacked model (see the module docstring).

    Parameters
    ----------
    configs : sequence of TrainConfig
        Runs with one :func:`batch_key`: they differ only in ``seed`` (and ``beta`` without
        QK-norm).
    progress : callable, optional
        Called as ``progress(step, steps)`` after every step of the group.

    Returns
    -------
    list of TrainResult
        One per configuration, in order; each equals ``train(config)`` to float rounding.

    Raises
    ------
    ValueError
        ``configs`` is empty or its runs cannot share a stacked model.
    """
    configs = _check_group(configs)
    if len(configs) == 1:
        return [train(configs[0], progress=progress)]
    first = configs[0]
    device = resolve_device(first.device)
    corpus = masked_lm_corpus(first.vocab_size)
    test = corpus.test_batches(count=first.eval_batches, batch_size=first.batch_size, seq_len=first.seq_len,
                               mask_prob=first.mask_prob)
    models = [build_model(config, corpus.vocab_size, device) for config in configs]
    started = time.perf_counter()
    histories, diverged = map(list, zip(*(_start(config, model, test, device)
                                          for config, model in zip(configs, models))))
    stack = _Stack(models, device)
    params = list(stack.params.values())
    optimizer, scheduler = optimiser(params, first, cell_axes=1)
    steps = [0] * len(configs)
    for step in range(first.steps):
        live = [d is None for d in diverged]
        if not any(live):
            break
        batches = [corpus.train_batch(seed=config.seed, step=step, batch_size=first.batch_size,
                                      seq_len=first.seq_len, mask_prob=first.mask_prob) for config in configs]
        try:
            losses = stack.losses(batches)
            optimizer.zero_grad(set_to_none=True)
            losses.sum().backward()
            if math.isfinite(first.grad_clip):
                _clip_per_cell(params, first.grad_clip)
            optimizer.step()
            scheduler.step()
        except RuntimeError as err:
            if "overflow" not in str(err):
                raise
            return [train(config) for config in configs]  # one at a time: each run says where it overflowed
        done = step + 1
        for c, loss in enumerate(losses.detach().tolist()):
            if live[c]:
                steps[c] = done
                histories[c]["train_loss"].append(loss)
                if not math.isfinite(loss):
                    diverged[c] = _Diverged(done, f"the training loss is {loss}")
        if done % first.eval_every == 0 or done == first.steps:
            live = [d is None for d in diverged]
            test_loss, finite = stack.evaluate(test), stack.finite_weights()
            for c in (c for c in range(len(configs)) if live[c]):
                history = histories[c]
                history["eval_steps"].append(done)
                history["test_loss"].append(test_loss[c])
                history["seconds"] = time.perf_counter() - started
                if not math.isfinite(test_loss[c]):
                    diverged[c] = _Diverged(done, f"the test loss is {test_loss[c]}")
                elif not finite[c]:
                    diverged[c] = _Diverged(done, "a weight is not finite after the update")
        if progress is not None:
            progress(done, first.steps)
    results = []
    for c, (config, model) in enumerate(zip(configs, models)):
        if diverged[c] is None:
            stack.load(c, model)
            final = probe(model, test, device)
        else:
            final = _nan_probe(config.depth)
        seconds = time.perf_counter() - started
        results.append(_result(config, corpus, test, device, histories[c], final, steps[c], seconds, diverged[c],
                               batched=len(configs)))
    return results
