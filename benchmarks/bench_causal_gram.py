"""Causal Gram state with rotary positions (docs/theory.md section 8): the cost of RoPE's draws.

``propagate_causal_gram`` of one block of an OLMo-2-like decoder (pre-RMSNorm, SwiGLU, head
dimension 128, rope base 5e5: 42 of its 64 frequencies turn by more than 0.05 over T = 256)
against the same block with absolute positions (one score draw per layer and draw), in the same
run: the ratio is the price of the rotary draws, free of the machine's speed. Before the rotary
scores were drawn as real products (stop 33) each rotating frequency cost a complex ``L Z_f L``;
run this script at an earlier commit for the "before" ratio.

One BLAS thread (``OMP_NUM_THREADS=1`` etc. before numpy loads). Writes
``benchmarks/results/bench_causal_gram.json``; other processes may share the cores: the load
average is recorded with the results.
"""
from __future__ import annotations

import argparse
import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

from _common import best_of, machine, print_table, write_json  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=256)
    parser.add_argument("--draws", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    from remprop.theory import Architecture
    from remprop.theory.causal import causal_gram_flops, propagate_causal_gram

    rope = Architecture(norm="pre", attention="softmax", activation="silu", sigma_w2=0.02, sigma_b2=0.0,
                        sigma_v2=0.02, sigma_o2=0.02, sigma_w2_out=0.08, norm_type="rms", mlp="gated",
                        positions="rope", rope_base=5e5, head_dim=128, heads=16, seq_len=args.seq_len)
    plain = rope.replace(positions="absolute")

    def run(arch):
        return propagate_causal_gram(arch, 1.0, 1, args.seq_len, 1.0, 0.0, draws=args.draws, seed=0)

    run(rope), run(plain)  # compile / load the kernels
    rope_best, rope_all = best_of(lambda: run(rope), args.repeat)
    plain_best, plain_all = best_of(lambda: run(plain), args.repeat)
    ratio = rope_best / plain_best
    flops = {name: causal_gram_flops(arch, 1, args.seq_len, args.draws) for name, arch in
             (("rope", rope), ("absolute", plain))}
    rows = [
        ("T, draws", f"{args.seq_len}, {args.draws}", ""),
        (f"one block, absolute positions, best of {args.repeat}", plain_best, "s"),
        (f"one block, RoPE (head dim 128, base 5e5), best of {args.repeat}", rope_best, "s"),
        ("RoPE / absolute", ratio, "x"),
        ("counted work RoPE / absolute (causal_gram_flops)", flops["rope"] / flops["absolute"], "x"),
        ("load average (1 min)", f"{machine()['load_average_1min']:.2f}", ""),
    ]
    print_table("Causal Gram state: the price of rotary positions", rows)
    write_json("bench_causal_gram", {"seq_len": args.seq_len, "draws": args.draws,
                                     "absolute_seconds_best": plain_best, "absolute_seconds_all": plain_all,
                                     "rope_seconds_best": rope_best, "rope_seconds_all": rope_all,
                                     "ratio": ratio, "counted_work_ratio": flops["rope"] / flops["absolute"]})


if __name__ == "__main__":
    main()
