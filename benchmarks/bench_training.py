"""Training throughput of the masked-LM stack against the machine's own matmul rate.

Measured in one run on one device:

1. the float32 matmul rate of a plain ``torch.matmul`` of the training's largest shape,
   ``(batch T, d) @ (d, d_ff)`` (best of several; on CUDA the bf16 rate, the precision the
   autocast training runs in);
2. full training steps of :func:`remprop.validation.training.train`'s loop pieces (data,
   forward, backward, clipping, AdamW, schedule) at the benchmark size.

Matmul FLOPs of one step (forward + backward = 3 x forward):

* per block and sequence: Q, K, V projections ``3 * 2 T d^2``; scores and weighted values
  ``2 * 2 T^2 d``; MLP ``2 * 2 T d d_ff`` (and ``2 T d^2`` with an output projection);
* the head: ``2 d V`` for each masked token only (the head runs at the selected positions).

It prints training tokens per second and the achieved FLOP/s as a fraction of the matmul
rate. Target on the CPU: >= 40% at the default size. Writes
``benchmarks/results/bench_training.json``. Without torch the script says so and exits 0.

Usage::

    python benchmarks/bench_training.py [--device cpu] [--width 256] [--depth 4] [--threads 1] [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from _common import print_table, write_json

TARGET_RATIO = 0.4


def step_flops(width, d_ff, seq_len, depth, batch, masked, vocab, output_projection=False):
    """Matmul FLOPs of one training step (forward + backward)."""
    block = 3 * 2 * seq_len * width ** 2 + 2 * 2 * seq_len ** 2 * width + 2 * 2 * seq_len * width * d_ff
    if output_projection:
        block += 2 * seq_len * width ** 2
    forward = depth * batch * block + 2 * width * vocab * masked
    return 3 * forward


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="auto, cpu or cuda (default: cpu)")
    parser.add_argument("--width", type=int, default=256)
    parser.add_argument("--d-ff", type=int, default=1024)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=8, help="timed steps (default: 8; best of them kept)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)

    try:
        import torch
    except ImportError:
        print("bench_training: skipped, torch is not installed (pip install 'remprop[validation]')")
        return 0
    from remprop.validation.backend import resolve_device
    from remprop.validation.training import TrainConfig, build_model, masked_lm_corpus
    from remprop.validation.training.loop import optimiser, train_step

    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    sync = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    config = TrainConfig(depth=args.depth, width=args.width, d_ff=args.d_ff, seq_len=args.seq_len,
                         batch_size=args.batch, steps=10 ** 6, vocab_size=args.vocab_size, device=str(device))
    corpus = masked_lm_corpus(config.vocab_size)
    model = build_model(config, corpus.vocab_size, device)
    optimizer, scheduler = optimiser(model, config)

    def step(k):
        batch = corpus.train_batch(seed=0, step=k, batch_size=config.batch_size, seq_len=config.seq_len,
                                   mask_prob=config.mask_prob)
        train_step(model, batch, optimizer, scheduler, config, device)
        return int(batch.targets.size)

    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(args.batch * args.seq_len, args.width, device=device, dtype=dtype)
    b = torch.randn(args.width, args.d_ff, device=device, dtype=dtype)
    step(0)  # warm-up
    best_step, best_matmul, masked = float("inf"), float("inf"), []
    for k in range(1, args.steps + 1):  # interleaved: a busy spell of a shared machine hits both alike
        sync()
        start = time.perf_counter()
        for _ in range(10):
            a @ b
        sync()
        best_matmul = min(best_matmul, (time.perf_counter() - start) / 10)
        start = time.perf_counter()
        masked.append(step(k))
        sync()
        best_step = min(best_step, time.perf_counter() - start)
    peak = 2.0 * a.shape[0] * args.width * args.d_ff / best_matmul
    mean_masked = sum(masked) / len(masked)
    work = step_flops(args.width, args.d_ff, args.seq_len, args.depth, args.batch, mean_masked, corpus.vocab_size)
    achieved = work / best_step
    result = {"device": str(device), "threads": torch.get_num_threads(), "torch": torch.__version__,
              "width": args.width, "d_ff": args.d_ff, "seq_len": args.seq_len, "depth": args.depth,
              "batch": args.batch, "vocab_size": corpus.vocab_size, "masked_tokens_per_step": mean_masked,
              "step_s": best_step, "tokens_per_s": args.batch * args.seq_len / best_step,
              "matmul_gflops": peak / 1e9, "train_gflops": achieved / 1e9, "ratio": achieved / peak}
    if args.json:
        print(json.dumps(result, indent=1))
    else:
        print_table(f"Masked-LM training on {result['device']} ({result['threads']} threads), post-LN "
                    f"d={args.width} d_ff={args.d_ff} T={args.seq_len} L={args.depth} B={args.batch}", [
                        ("training tokens", result["tokens_per_s"], "tokens/s"),
                        (f"matmul ({a.shape[0]}x{args.width}) @ ({args.width}x{args.d_ff})",
                         result["matmul_gflops"], "GFLOP/s"),
                        ("training step (forward + backward + AdamW)", result["train_gflops"], "GFLOP/s"),
                        ("  fraction of matmul", result["ratio"], f"(target >= {TARGET_RATIO})"),
                    ])
    write_json("bench_training", {**result, "target_ratio": TARGET_RATIO})
    return 0


if __name__ == "__main__":
    sys.exit(main())
