"""Training throughput of the masked-LM stack against the machine's own matmul rate.

Measured in one run on one device:

1. the matmul rate of a plain ``torch.matmul`` of the training's largest shape,
   ``(batch T, d) @ (d, d_ff)`` (best of several; float32 on the CPU, bf16 on CUDA, the
   precision the autocast training runs in), timed between the training steps so that a busy
   spell of a shared machine hits both alike;
2. full training steps of :func:`remprop.validation.training.train`'s loop pieces (data,
   forward, backward, clipping, AdamW, schedule), each fast-path piece switched on in turn so
   the gain of each shows:

   * ``before``: attention through its explicit probabilities (the path the probes keep),
     AdamW with torch's default kernels (a loop over the tensors on the CPU, ``foreach`` on
     CUDA), eager;
   * ``+sdpa``: attention through ``scaled_dot_product_attention``
     (:func:`remprop.validation.layers.fused_attention`), as :func:`train` does;
   * ``+adamw``: AdamW fused on CUDA, ``foreach`` elsewhere
     (:func:`remprop.validation.training.loop.adamw_implementation`), as :func:`train` does;
   * ``+compile``: the blocks through ``torch.compile`` (``TrainConfig(compile=True)``; on CUDA
     by default, on the CPU only with ``--compile``: inductor's C++ build takes minutes there);
   * ``+compile-stack``: the whole stack as one compiled graph
     (``MaskedLMStack.compile_blocks(whole_stack=True)``; not what :func:`train` does yet: the
     candidate for CUDA, where one CUDA graph per block misses the graph trees' fast path).

Matmul FLOPs of one step (forward + backward = 3 x forward):

* per block and sequence: Q, K, V projections ``3 * 2 T d^2``; scores and weighted values
  ``2 * 2 T^2 d``; MLP ``2 * 2 T d d_ff`` (and ``2 T d^2`` with an output projection);
* the head: ``2 d V`` for each masked token only (the head runs at the selected positions).

It prints training tokens per second and the achieved FLOP/s as a fraction of the matmul
rate. Sizes: ``--size default`` (d 256, d_ff 1024, L 4, T 128, B 16, 1 head), ``bert-base``
(d 768, d_ff 3072, L 12, T 128, B 64, 12 heads), ``deep`` (d 256, d_ff 1024, L 48, T 128,
B 64, 4 heads); ``--device cuda`` with no ``--size`` runs ``bert-base`` and ``deep`` and writes
``docs/data/bench-training-cuda.json``. Targets (issue 27): >= 80% kept on the CPU at the
default size; on CUDA >= 50% at bert-base and >= 25% at deep. Writes
``benchmarks/results/bench_training.json``. Without torch the script says so and exits 0.

Usage::

    python benchmarks/bench_training.py [--device cpu] [--size default] [--threads 1] [--json]
    python benchmarks/bench_training.py --device cuda          # one command on a GPU machine
"""
from __future__ import annotations

import argparse
import json
import sys
import time

from _common import REPO, machine, print_table, write_json

#: Fraction of the same-run matmul rate, per device type and size (issue 27).
TARGETS = {("cpu", "default"): 0.8, ("cuda", "bert-base"): 0.5, ("cuda", "deep"): 0.25}
#: Benchmark sizes: width, d_ff, depth, seq_len, batch, heads.
SIZES = {"default": dict(width=256, d_ff=1024, depth=4, seq_len=128, batch=16, heads=1),
         "bert-base": dict(width=768, d_ff=3072, depth=12, seq_len=128, batch=64, heads=12),
         "deep": dict(width=256, d_ff=1024, depth=48, seq_len=128, batch=64, heads=4)}
VARIANTS = ("before", "+sdpa", "+adamw", "+compile", "+compile-stack")
CUDA_JSON = REPO / "docs" / "data" / "bench-training-cuda.json"


def step_flops(width, d_ff, seq_len, depth, batch, masked, vocab, output_projection=False):
    """Matmul FLOPs of one training step (forward + backward)."""
    block = 3 * 2 * seq_len * width ** 2 + 2 * 2 * seq_len ** 2 * width + 2 * 2 * seq_len * width * d_ff
    if output_projection:
        block += 2 * seq_len * width ** 2
    forward = depth * batch * block + 2 * width * vocab * masked
    return 3 * forward


def _observed(torch, model):
    """``model`` with a no-op observer: every block computes its attention probabilities (the
    explicit path the probes take), the parameters are the model's."""

    class Observed(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, ids, positions, observe=None):
            return self.model(ids, positions, lambda layer, hidden, probs: None)

    return Observed()


def run_size(torch, device, size, variants, steps, vocab_size, sync):
    """Time ``variants`` at ``size`` (a key of SIZES); returns the size's record."""
    from remprop.theory import Architecture
    from remprop.validation.training import TrainConfig, build_model, masked_lm_corpus
    from remprop.validation.training.loop import compile_options, optimiser, train_step

    s = SIZES[size]
    config = TrainConfig(arch=Architecture(heads=s["heads"]), depth=s["depth"], width=s["width"], d_ff=s["d_ff"],
                         seq_len=s["seq_len"], batch_size=s["batch"], steps=10 ** 6, vocab_size=vocab_size,
                         device=str(device))
    corpus = masked_lm_corpus(config.vocab_size)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    a = torch.randn(s["batch"] * s["seq_len"], s["width"], device=device, dtype=dtype)
    b = torch.randn(s["width"], s["d_ff"], device=device, dtype=dtype)
    best_matmul, records = float("inf"), {}
    for variant in variants:
        level = VARIANTS.index(variant)
        torch.manual_seed(0)
        model = build_model(config, corpus.vocab_size, device)
        if level >= 3:
            model.compile_blocks(**compile_options(config.replace(compile=True), device),
                                 whole_stack=variant == "+compile-stack")
        optimizer, scheduler = optimiser(model, config)
        if level < 2:  # torch's default AdamW kernels, as before the fast path
            for group in optimizer.param_groups:
                group["foreach"], group["fused"] = None, None
        stepped = model if level >= 1 else _observed(torch, model)

        def step(k):
            batch = corpus.train_batch(seed=0, step=k, batch_size=config.batch_size, seq_len=config.seq_len,
                                       mask_prob=config.mask_prob)
            train_step(stepped, batch, optimizer, scheduler, config, device)
            return int(batch.targets.size)

        start = time.perf_counter()
        for k in range(3 if level >= 3 else 1):  # warm-up (compiling, CUDA graph capture)
            step(k)
        sync()
        warm_up = time.perf_counter() - start
        best_step, masked = float("inf"), []
        for k in range(steps):
            sync()
            start = time.perf_counter()
            for _ in range(10):
                a @ b
            sync()
            best_matmul = min(best_matmul, (time.perf_counter() - start) / 10)
            start = time.perf_counter()
            masked.append(step(100 + k))
            sync()
            best_step = min(best_step, time.perf_counter() - start)
        mean_masked = sum(masked) / len(masked)
        work = step_flops(s["width"], s["d_ff"], s["seq_len"], s["depth"], s["batch"], mean_masked,
                          corpus.vocab_size)
        records[variant] = {"step_s": best_step, "warm_up_s": warm_up,
                            "tokens_per_s": s["batch"] * s["seq_len"] / best_step,
                            "train_gflops": work / best_step / 1e9, "masked_tokens_per_step": mean_masked}
        del model, optimizer, scheduler, stepped
        if device.type == "cuda":
            torch.cuda.empty_cache()
    peak = 2.0 * a.shape[0] * s["width"] * s["d_ff"] / best_matmul
    for record in records.values():
        record["ratio"] = record["train_gflops"] * 1e9 / peak
    return {**s, "vocab_size": corpus.vocab_size, "matmul_gflops": peak / 1e9,
            "matmul_dtype": str(dtype).replace("torch.", ""), "target_ratio": TARGETS.get((device.type, size)),
            "variants": records}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cpu", help="auto, cpu or cuda (default: cpu)")
    parser.add_argument("--size", action="append", choices=tuple(SIZES),
                        help="benchmark size, repeatable (default: 'default' on the CPU, bert-base and deep on CUDA)")
    parser.add_argument("--variants", default=None,
                        help=f"comma-separated subset of {','.join(VARIANTS)} (default: all but the +compile ones "
                             "on the CPU, all on CUDA)")
    parser.add_argument("--compile", action="store_true", help="also time +compile and +compile-stack on the CPU")
    parser.add_argument("--vocab-size", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=8, help="timed steps per variant (default: 8; best kept)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: 1)")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)

    try:
        import torch
    except ImportError:
        print("bench_training: skipped, torch is not installed (pip install 'remprop[validation]')")
        return 0
    from remprop.validation.backend import resolve_device

    torch.set_num_threads(args.threads)
    device = resolve_device(args.device)
    cuda = device.type == "cuda"
    sync = (lambda: torch.cuda.synchronize(device)) if cuda else (lambda: None)
    sizes = args.size or (["bert-base", "deep"] if cuda else ["default"])
    if args.variants:
        variants = [v.strip() for v in args.variants.split(",")]
        unknown = [v for v in variants if v not in VARIANTS]
        if unknown:
            parser.error(f"--variants: unknown {unknown[0]!r} (choose from {', '.join(VARIANTS)})")
    else:
        variants = [v for v in VARIANTS if not v.startswith("+compile") or cuda or args.compile]
    result = {"device": str(device), "device_name": torch.cuda.get_device_name(device) if cuda else None,
              "threads": torch.get_num_threads(), "torch": torch.__version__,
              "autocast": "bfloat16" if cuda else None, "machine": machine(), "sizes": {}}
    for size in sizes:
        record = run_size(torch, device, size, variants, args.steps, args.vocab_size, sync)
        result["sizes"][size] = record
        if not args.json:
            s = record
            print_table(f"Masked-LM training on {result['device_name'] or result['device']} "
                        f"({result['threads']} threads), post-LN {size}: d={s['width']} d_ff={s['d_ff']} "
                        f"T={s['seq_len']} L={s['depth']} B={s['batch']} H={s['heads']}", [
                            (f"matmul ({s['batch'] * s['seq_len']}x{s['width']}) @ ({s['width']}x{s['d_ff']}) "
                             f"{s['matmul_dtype']}", s["matmul_gflops"], "GFLOP/s"),
                            *[(f"{variant}: tokens/s, GFLOP/s, fraction of matmul",
                               f"{r['tokens_per_s']:.4g}  {r['train_gflops']:.4g}  {r['ratio']:.3f}",
                               f"(step {1e3 * r['step_s']:.1f} ms)") for variant, r in s["variants"].items()],
                            ("target fraction", s["target_ratio"], ""),
                        ])
    if args.json:
        print(json.dumps(result, indent=1))
    write_json("bench_training", result)
    if cuda:
        CUDA_JSON.parent.mkdir(parents=True, exist_ok=True)
        CUDA_JSON.write_text(json.dumps({"benchmark": "bench_training", **result}, indent=2, default=float) + "\n")
        print(f"results written to {CUDA_JSON.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
