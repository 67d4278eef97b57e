"""Throughput of the simulated transformer stack against the machine's own matmul rate.

The physical limit of the simulation is dense float32 matrix multiplication. This script
measures, in one run on one device,

1. the float32 matmul rate: ``torch.matmul`` of two n x n matrices (best of several);
2. the stack forward at the paper's size (post-LN BERT defaults, d = 720, T = 512):
   ``SimulatedStack.forward`` over a batch of sequences, weights drawn on the fly
   (included in the time), with and without the per-layer measurements of ``trace``;

and prints the achieved FLOP/s of the stack as a fraction of the matmul rate. FLOPs of a
block per sequence: Q, K, V projections 3 * 2 T d^2, scores and weighted values
2 * 2 T^2 d, MLP 2 * 2 T d d_ff (elementwise work and weight drawing not counted).

Target: >= 50% of the matmul rate. Writes ``benchmarks/results/bench_simulation.json``.
Other processes may share the cores: the three timings are interleaved and each keeps
its best. Without torch (the validation extra) the script says so and exits 0.

Usage::

    python benchmarks/bench_simulation.py [--device cpu] [--depth 8] [--batch 4] [--rounds 5] [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from _common import print_table, write_json

TARGET_RATIO = 0.5


def _sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _timer(torch, device, fn):
    def timed():
        _sync(torch, device)
        start = time.perf_counter()
        fn()
        _sync(torch, device)
        return time.perf_counter() - start
    return timed


def block_flops(width, d_ff, seq_len):
    """Matmul FLOPs of one block for one sequence."""
    return 3 * 2 * seq_len * width ** 2 + 2 * 2 * seq_len ** 2 * width + 2 * 2 * seq_len * width * d_ff


def measure(torch, device, *, n, width, seq_len, depth, batch, rounds):
    """Best times of the matmul, the stack forward and the stack trace, measured in turn.

    The three are interleaved round by round so that a busy spell of a shared machine
    hits them alike; each keeps its best time.
    """
    from remprop.theory import Architecture
    from remprop.validation import SimulatedStack, SimulationSettings, gaussian_tokens

    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(n, n, generator=gen, device=device)
    b = torch.randn(n, n, generator=gen, device=device)
    stack = SimulatedStack(Architecture(), 0.5, depth, sim=SimulationSettings(width=width, seq_len=seq_len, device=device))
    x = gaussian_tokens(1.0, 0.0, count=batch, seq_len=seq_len, width=width, device=device).tokens
    timers = {"matmul": _timer(torch, device, lambda: a @ b),
              "forward": _timer(torch, device, lambda: stack.forward(x)),
              "trace": _timer(torch, device, lambda: stack.trace(x))}
    for timed in timers.values():  # warm-up
        timed()
    best = {name: float("inf") for name in timers}
    for _ in range(rounds):
        for name, timed in timers.items():
            best[name] = min(best[name], timed())
    return best


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda (default: auto)")
    parser.add_argument("--width", type=int, default=720)
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--depth", type=int, default=8, help="blocks timed (default: 8)")
    parser.add_argument("--batch", type=int, default=4, help="sequences per forward (default: 4)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved timing rounds, best kept (default: 5)")
    parser.add_argument("--matmul-n", type=int, default=None, help="matmul size (default 2048 CPU, 8192 GPU)")
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)

    try:
        import torch
    except ImportError:
        print("bench_simulation: skipped, torch is not installed (pip install 'remprop[validation]')")
        return 0
    from remprop.validation.backend import resolve_device

    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    n = args.matmul_n or (8192 if device.type == "cuda" else 2048)
    best = measure(torch, device, n=n, width=args.width, seq_len=args.seq_len, depth=args.depth,
                   batch=args.batch, rounds=args.rounds)
    peak = 2.0 * n ** 3 / best["matmul"]
    work = args.depth * args.batch * block_flops(args.width, args.width, args.seq_len)
    forward, traced = work / best["forward"], work / best["trace"]
    result = {
        "device": str(device), "threads": torch.get_num_threads(), "matmul_n": n,
        "matmul_gflops": peak / 1e9, "width": args.width, "seq_len": args.seq_len, "depth": args.depth,
        "batch": args.batch, "rounds": args.rounds, "forward_s": best["forward"], "forward_gflops": forward / 1e9,
        "forward_ratio": forward / peak, "trace_s": best["trace"], "trace_gflops": traced / 1e9,
        "trace_ratio": traced / peak,
        "seconds_per_sequence_layer": best["trace"] / (args.depth * args.batch),
    }
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_table(f"Simulated stack on {result['device']} ({result['threads']} threads), post-LN BERT "
                    f"d={args.width} T={args.seq_len}, {args.depth} blocks x {args.batch} sequences", [
                        (f"float32 matmul {n}x{n}", result["matmul_gflops"], "GFLOP/s"),
                        ("stack forward", result["forward_gflops"], "GFLOP/s"),
                        ("  fraction of matmul", result["forward_ratio"], f"(target >= {TARGET_RATIO})"),
                        ("stack trace (with measurements)", result["trace_gflops"], "GFLOP/s"),
                        ("  fraction of matmul", result["trace_ratio"], ""),
                        ("time per sequence and block", 1e3 * result["seconds_per_sequence_layer"], "ms"),
                    ])
    write_json("bench_simulation", {**result, "target_ratio": TARGET_RATIO})
    return 0


if __name__ == "__main__":
    sys.exit(main())
