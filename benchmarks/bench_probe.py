"""Cost of diagnosing a real model: the probe's hooks against a plain forward, and the theory.

Measured in one run, on one device:

1. a plain ``model(input_ids)`` forward of a Hugging Face model at random init (its default
   attention implementation, no hooks, ``torch.no_grad``) -- the reference;
2. ``remprop.validation.probe(model, input_ids)``: the same forward with hooks on every
   block, the eager attention implementation (it materialises the T x T probabilities that
   the fused default does not) and the per-layer statistics;
3. ``model(input_ids, output_hidden_states=True)`` with eager attention and the same
   statistics computed afterwards from the returned hidden states -- what one would write by
   hand; the probe should cost no more than this;
4. ``remprop.diagrams.diagnose`` of the same configuration (theory only), warm.

Prints the ratios probe / plain forward and probe / by-hand, writes
``benchmarks/results/bench_probe.json``. Without torch or transformers it says so and exits 0.

Usage::

    python benchmarks/bench_probe.py [--model bert-base] [--depth 4] [--seq-len 256] [--batch 2] [--rounds 3]
"""
from __future__ import annotations

import argparse
import sys
import time

from _common import best_of, print_table, write_json


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default="bert-base")
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError:
        print("torch and transformers are needed (pip install 'remprop[validation]'): skipped")
        return 0
    from remprop.diagrams import diagnose
    from remprop.theory import model_spec
    from remprop.validation import build_model, model_inputs, probe
    from remprop.validation.measurements import token_statistics

    torch.set_num_threads(min(2, torch.get_num_threads()))
    spec = model_spec(args.model, seq_len=args.seq_len if args.model != "vit-base" else None).with_depth(args.depth)
    model = build_model(spec, seed=0)
    inputs = model_inputs(spec, args.batch, seed=0)
    key = "pixel_values" if spec.family == "vit" else "input_ids"
    default_impl = model.config._attn_implementation

    def plain():
        with torch.no_grad():
            model(**{key: inputs})

    def probed():
        probe(model, inputs)

    def by_hand():
        model.set_attn_implementation("eager")
        try:
            with torch.no_grad():
                out = model(**{key: inputs}, output_hidden_states=True, output_attentions=True)
            for h in out.hidden_states:
                token_statistics(h)
            for a in out.attentions:
                (a ** 2).sum(-1).mean()
        finally:
            model.set_attn_implementation(default_impl)

    plain()  # warm-up (allocations, first kernels)
    probed()
    times = {"plain": [], "probe": [], "by_hand": []}
    for _ in range(args.rounds):  # interleaved, so a busy spell of a shared machine hits all alike
        for name, fn in (("plain", plain), ("probe", probed), ("by_hand", by_hand)):
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    best = {name: min(values) for name, values in times.items()}
    diagnose(spec)  # warm: compiles and caches the kernels of this architecture
    theory, _ = best_of(lambda: diagnose(spec), repeat=args.rounds)

    rows = [("model", f"{spec.name}, {spec.depth} layers, T = {spec.seq_len}, batch {args.batch}", ""),
            ("plain forward", best["plain"], "s"),
            ("probe (hooks + eager attention + statistics)", best["probe"], "s"),
            ("by hand (output_hidden_states/attentions)", best["by_hand"], "s"),
            ("probe / plain forward", best["probe"] / best["plain"], "x"),
            ("probe / by hand", best["probe"] / best["by_hand"], "x"),
            ("diagnose (theory, warm)", theory, "s")]
    print_table("probe overhead and theory time", rows)
    write_json("bench_probe", {"model": spec.name, "depth": spec.depth, "seq_len": spec.seq_len,
                               "batch": args.batch, "seconds": best, "all_seconds": times,
                               "probe_over_plain": best["probe"] / best["plain"],
                               "probe_over_by_hand": best["probe"] / best["by_hand"],
                               "diagnose_seconds": theory})
    return 0


if __name__ == "__main__":
    sys.exit(main())
