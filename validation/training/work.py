r"""How much memory and time a training run will take, before it starts.

The command line refuses a run above ``--max-memory`` / ``--max-seconds``
(:func:`remprop.cli.limits.check_work`) from these estimates; the library itself trains
whatever it is asked.

**Memory** (:func:`training_bytes`, float32, 4 bytes a number). With ``L`` blocks of width
``d``, MLP width ``f``, ``H`` heads, ``V`` tokens, ``B`` sequences of ``T`` tokens and
``n = mask_prob B T + B`` selected tokens a batch:

* the parameters ``P = L (4 d^2 + 3 d f + 4 d + 2 f) + 2 V d + T d + V`` (queries, keys,
  values and output; up to three MLP matrices; the word table, the head and the position
  table), held ten times: weights, gradients, AdamW's two moments, and the serialised
  model and optimiser of a checkpoint with its copy;
* the activations kept for the backward pass, ``L (B T (12 d + 3 f) + 3 B H T^2) + 2 B T d``
  (every block's stream, normalised copies, queries, keys, values, MLP hidden layers,
  scores and probabilities), and ``3 n V`` for the logits, their softmax and its gradient.

**Time** (:func:`training_seconds`): the floating-point operations of the run -- three
forward passes a step (forward and backward), one a held-out batch at each evaluation,
three for each of the two probes, a forward pass costing
``2 B T L (4 d^2 + 3 d f) + 4 B T^2 d L + 2 n V d`` -- divided by the matrix-multiply
rate measured on the device in the precision the training runs in (:func:`training_flop_rate`,
once per process), plus a fixed cost per block and step for the many small operations of a
step (:data:`SECONDS_PER_BLOCK_STEP`). It is a lower bound of the order of magnitude, enough to
refuse runs of hours or years. (On one H200 the depth-48 grid of docs/training.md, 18 runs of
400 steps trained as three stacked rows, took 4 min; timed with the float32 256 x 256 product
that ``flop_rate`` measures, 0.5 TFLOP/s there, it was estimated at 4.3 h.)
"""
from __future__ import annotations

import functools
import math
import time

import torch

__all__ = ["training_bytes", "training_flops", "training_seconds", "flop_rate", "training_flop_rate",
           "simulation_flop_rate", "SECONDS_PER_BLOCK_STEP", "SIMULATION_RATE_SHARE"]

#: Time of the small operations (launches, normalisations, activations) of one block in one step.
SECONDS_PER_BLOCK_STEP = 2e-3
_FLOAT_BYTES = 4


def _sizes(config, vocab_size):
    d, L, T, B = config.width, config.depth, config.seq_len, config.batch_size
    f = config.d_ff or d
    V = config.vocab_size if vocab_size is None else int(vocab_size)
    n = math.ceil(config.mask_prob * B * T) + B
    return d, f, L, T, B, V, n, config.arch.heads


def training_bytes(config, vocab_size=None) -> int:
    """Estimated peak memory (bytes) of training ``config`` (module docstring).

    ``vocab_size``: the corpus's real vocabulary (default ``config.vocab_size``).
    """
    d, f, L, T, B, V, n, H = _sizes(config, vocab_size)
    parameters = L * (4 * d * d + 3 * d * f + 4 * d + 2 * f) + 2 * V * d + T * d + V
    activations = L * (B * T * (12 * d + 3 * f) + 3 * B * H * T * T) + 2 * B * T * d + 3 * n * V
    return _FLOAT_BYTES * (10 * parameters + activations)


def training_flops(config, vocab_size=None) -> float:
    """Floating-point operations of training ``config`` (module docstring)."""
    d, f, L, T, B, V, n, _ = _sizes(config, vocab_size)
    forward = 2.0 * B * T * L * (4 * d * d + 3 * d * f) + 4.0 * B * T * T * d * L + 2.0 * n * V * d
    evaluations = config.steps // config.eval_every + 2
    return forward * (3 * config.steps + evaluations * config.eval_batches + 6 * config.eval_batches)


#: The product :func:`training_flop_rate` times on CUDA: bf16 (the training's autocast), large
#: enough that one product is not launch-bound.
_CUDA_TRAINING_PRODUCT = (4096, "bfloat16")


@functools.lru_cache(maxsize=8)
def _measured_rate(device: str, threads: int, size: int = 256, dtype: str = "float32") -> float:
    repeats, trials = 8, 7
    a = torch.randn(size, size, device=device, dtype=getattr(torch, dtype))
    (a @ a).sum().item()  # warm up
    best = math.inf
    for _ in range(trials):  # the fastest of several: other work on the machine only ever slows a trial
        start = time.perf_counter()
        for _ in range(repeats):
            b = a @ a
        b.sum().item()
        best = min(best, time.perf_counter() - start)
    return 2.0 * size ** 3 * repeats / max(best, 1e-6)


def flop_rate(device) -> float:
    """Floating-point operations per second of a float32 matrix product on ``device``
    (measured once per process, device and torch thread count: the fastest of seven timed trials, so that
    a moment of other work on the machine does not read as a slow device; one trial alone put the
    reference lr-sweep at 38 min where it takes about 13)."""
    return _measured_rate(str(torch.device(device)), torch.get_num_threads())


def training_flop_rate(device) -> float:
    """The rate (floating-point operations per second) at which a training run's time is estimated
    on ``device``: on CUDA a bf16 product of 4096 x 4096 matrices, the precision of the training's
    autocast (:mod:`remprop.validation.training.loop`); elsewhere :func:`flop_rate` (float32, the
    precision the CPU trains in). Measured once per process."""
    device = torch.device(device)
    if device.type == "cuda":
        size, dtype = _CUDA_TRAINING_PRODUCT
        return _measured_rate(str(device), torch.get_num_threads(), size, dtype)
    return flop_rate(device)


#: The share of one thread's float32 product rate (:func:`flop_rate` on one torch thread) at which a simulated
#: stack's blocks run on a CPU, its counted operations
#: (:func:`~remprop.theory.work_estimates.simulation_flops`) against the time of :func:`simulate_model
#: <remprop.validation.hf_models.simulate_model>`: bert-48 blocks at d = 768, T = 512 and d = 384, T = 256 ran
#: at 0.28 and 0.24 of it on one thread (4.3e10 and 3.6e10 against 1.5e11 FLOP/s, the shared two-core machine at
#: load 5, both timings on one thread and so slowed alike). One thread is counted whatever the thread count:
#: on two threads the same blocks ran 2.5x and 8x slower than on one at that load (the two threads wait for each
#: other at every operation while other processes hold a core), on a quiet machine up to 2x faster.
SIMULATION_RATE_SHARE = 0.25


def simulation_flop_rate(device) -> float:
    """The rate (floating-point operations per second) at which a simulation's time is estimated on
    ``device``: on a CPU :data:`SIMULATION_RATE_SHARE` of :func:`flop_rate` timed on one torch thread
    (on two threads of a busy machine the short product reads 30-60x slower than on one, the fastest
    of its trials as slow as the rest: the two threads wait for each other while other work holds a core);
    elsewhere :func:`flop_rate`; at least :data:`~remprop.theory.work_estimates.FLOPS_PER_SECOND` (the CPU's:
    that share of it), so that a timing spoilt by other work does not refuse a simulation."""
    from remprop.theory.work_estimates import FLOPS_PER_SECOND

    device = torch.device(device)
    if device.type != "cpu":
        return max(flop_rate(device), FLOPS_PER_SECOND)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        return SIMULATION_RATE_SHARE * max(flop_rate(device), FLOPS_PER_SECOND)
    finally:
        torch.set_num_threads(threads)


def training_seconds(config, vocab_size=None, device="cpu") -> float:
    """Estimated seconds to train ``config`` on ``device`` (module docstring)."""
    evaluations = config.steps // config.eval_every + 2
    small = SECONDS_PER_BLOCK_STEP * config.depth * (config.steps + evaluations * config.eval_batches)
    return training_flops(config, vocab_size) / training_flop_rate(device) + small
