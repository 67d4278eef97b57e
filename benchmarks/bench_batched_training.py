"""Trained-grid throughput: runs trained one at a time against the same runs as one stacked model.

In one process, on one device, with the same torch threads, the same ``--runs`` training
runs (one alpha_SA row of a grid: ``--runs`` betas between 0.25 and 1, seeds 0 and 1 in
turn; post-LN) are trained

1. one at a time with :func:`remprop.validation.training.train` (what
   ``run_trained_grid(batch=1)`` does per cell), then
2. together with :func:`remprop.validation.training.train_batched` (``batch > 1``),

each run from its initialisation probe to its final probe, ``--steps`` steps, one test loss
at the end. Prints the runs (a cell with one seed) per hour of both and their ratio (goal:
>= 5x), at each size asked (``--sizes``, ``depth:width:seq_len:batch`` each, default the
trained diagram's depth-24 size and a small one), and the largest difference of a final test
loss between a batched run and its single run (float rounding; the strict check is
``tests/test_batched_training.py``). Beside the runs per hour it prints the FLOP rate each
reaches (:func:`remprop.validation.training.work.training_flops` per second) as a fraction of
the device's float32 matmul rate measured in the same run
(:func:`remprop.validation.training.work.flop_rate`): batching removes per-operation overhead,
so its speed-up is bounded by the matmul rate over the single runs' rate (1 / their fraction);
where single runs already reach most of it, no stacking can reach 5x. The betas stay below entropy collapse: a deep
entropy-collapsed run amplifies rounding (a one-ulp change of its initialisation moves its loss
by 0.1 nats within a few steps, one run at a time too), which would hide a real difference.
Writes ``benchmarks/results/bench_batched_training.json``.
Without torch the script says so and exits 0.

Usage::

    python benchmarks/bench_batched_training.py [--runs 8] [--steps 20] [--threads 1]
        [--sizes 24:64:64:32,4:32:32:16] [--device cpu] [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from _common import machine, print_table, write_json

TARGET_SPEEDUP = 5.0


def _size(text):
    try:
        depth, width, seq_len, batch = (int(v) for v in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a size is depth:width:seq_len:batch, got {text!r}") from None
    return depth, width, seq_len, batch


def measure(size, runs, steps, device, vocab_size):
    """Seconds of ``runs`` runs one at a time and batched, and the largest final-loss difference."""
    import numpy as np

    from remprop.theory import Architecture
    from remprop.validation.training import TrainConfig, masked_lm_corpus, train, train_batched
    from remprop.validation.training.work import training_flops

    depth, width, seq_len, batch = size
    base = TrainConfig(arch=Architecture(norm="post"), depth=depth, width=width, seq_len=seq_len, batch_size=batch,
                       steps=steps, eval_every=steps, vocab_size=vocab_size, device=device)
    corpus = masked_lm_corpus(vocab_size)  # built once, outside the timings
    betas = np.geomspace(0.25, 1.0, runs)
    configs = [base.replace(beta=float(beta), seed=k % 2) for k, beta in enumerate(betas)]
    start = time.perf_counter()
    single = [train(config) for config in configs]
    one_at_a_time = time.perf_counter() - start
    start = time.perf_counter()
    batched = train_batched(configs)
    together = time.perf_counter() - start
    gap = max(abs(a.final_test_loss - b.final_test_loss) for a, b in zip(single, batched))
    flops = sum(training_flops(config, corpus.vocab_size) for config in configs)
    return one_at_a_time, together, gap, flops


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=8, help="training runs (default: 8)")
    parser.add_argument("--steps", type=int, default=20, help="optimiser steps per run (default: 20)")
    parser.add_argument("--sizes", default="24:64:64:32,4:32:32:16",
                        help="depth:width:seq_len:batch, comma-separated (default: %(default)s)")
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1)")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (default: cpu)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)
    sizes = [_size(text) for text in args.sizes.split(",")]
    try:
        import torch
    except ImportError:
        print("bench_batched_training: skipped, torch is not installed (pip install 'remprop[validation]')")
        return 0
    torch.set_num_threads(args.threads)
    from remprop.validation.training.work import flop_rate

    matmul = flop_rate(args.device)
    rows, results = [(f"float32 matmul rate (256 x 256, {torch.get_num_threads()} threads)", matmul / 1e9, "GFLOP/s")], []
    for size in sizes:
        single, batched, gap, flops = measure(size, args.runs, args.steps, args.device, args.vocab_size)
        result = {"depth": size[0], "width": size[1], "seq_len": size[2], "batch": size[3], "runs": args.runs,
                  "steps": args.steps, "single_s": single, "batched_s": batched,
                  "single_runs_per_hour": 3600 * args.runs / single, "batched_runs_per_hour": 3600 * args.runs / batched,
                  "speedup": single / batched, "final_loss_gap": gap, "training_flops": flops,
                  "single_matmul_fraction": flops / single / matmul, "batched_matmul_fraction": flops / batched / matmul,
                  "speedup_bound": single * matmul / flops}
        results.append(result)
        label = f"L={size[0]} d={size[1]} T={size[2]} B={size[3]}"
        rows += [(f"{label}: one at a time", result["single_runs_per_hour"], "runs/h"),
                 (f"{label}: batched ({args.runs} runs)", result["batched_runs_per_hour"], "runs/h"),
                 (f"{label}: speed-up", result["speedup"], f"x (goal >= {TARGET_SPEEDUP:g})"),
                 (f"{label}: one at a time, of the matmul rate", result["single_matmul_fraction"], ""),
                 (f"{label}: batched, of the matmul rate", result["batched_matmul_fraction"], ""),
                 (f"{label}: speed-up bound (matmul rate / single rate)", result["speedup_bound"], "x"),
                 (f"{label}: largest final-loss difference", gap, "nats")]
    summary = {"device": args.device, "threads": torch.get_num_threads(), "torch": torch.__version__,
               "machine": machine(), "matmul_flops_per_second": matmul, "vocab_size": args.vocab_size, "target_speedup": TARGET_SPEEDUP,
               "sizes": results}
    if args.json:
        print(json.dumps(summary, indent=1))
    else:
        print_table(f"Trained-grid runs per hour on {args.device} ({summary['threads']} threads), post-LN, "
                    f"{args.steps} steps per run", rows)
    write_json("bench_batched_training", summary)
    return 0


if __name__ == "__main__":
    sys.exit(main())
