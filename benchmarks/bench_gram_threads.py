"""The fast causal Gram state's BLAS threads: one (the default, ``remprop.theory.gram_threads.BLAS_THREADS``)
against all cores.

``check NAME``'s headline runs the causal Gram state at the model's width (docs/theory.md section 8.2). Its
attention layer is many thin float32 products (chunks of ``GRAM_ROW_CHUNK`` query rows, factors of ``d_H``
columns) beside numba's own threads (the masked softmax, the pair maps). This script times the same stack
(Llama 3.2 1B at full size, ``--layers`` layers at T = ``--seq-len``, 8 draws, seed 0) with the attention's
BLAS limited to one thread and to ``--threads``, alternately, ``--repeat`` times each, and prints the ratio
of the best times; the cosines must agree to float32 rounding (the same draws). Writes
``benchmarks/results/bench_gram_threads.json`` with the load average (other processes may share the cores).
"""
from __future__ import annotations

import argparse
import os

from _common import machine, print_table, write_json


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="llama-3.2-1b")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2, help="the other BLAS thread count")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    import time

    import numpy as np

    from remprop.theory import gram_threads
    from remprop.theory import gram_width, model_spec
    from remprop.theory.causal import compared_last_tokens, propagate_causal_gram

    spec = model_spec(args.model, seq_len=args.seq_len)
    arch, t = spec.architecture, args.seq_len

    def run():
        return propagate_causal_gram(arch, spec.beta, args.layers, t, spec.q0, spec.rho0, last=compared_last_tokens(t),
                                     draws=8, seed=0, norm_eps=spec.layer_norm_eps,
                                     window=spec.attention_windows or None, width=gram_width(arch, spec.width)).rho

    default = gram_threads.BLAS_THREADS
    times = {1: [], args.threads: []}
    rho = {}
    run()  # compile and load
    for _ in range(args.repeat):
        for threads in times:
            gram_threads.BLAS_THREADS = threads
            start = time.perf_counter()
            rho[threads] = run()
            times[threads].append(time.perf_counter() - start)
    gram_threads.BLAS_THREADS = default
    best = {k: min(v) for k, v in times.items()}
    difference = float(np.max(np.abs(rho[1] - rho[args.threads])))
    print_table(f"Causal Gram state, {spec.name}, {args.layers} layers, T = {t}, model's width, 8 draws", [
        ("BLAS threads 1, best", best[1], "s"),
        (f"BLAS threads {args.threads}, best", best[args.threads], "s"),
        (f"{args.threads} threads / 1 thread", best[args.threads] / best[1], "x"),
        ("largest cosine difference", difference, ""),
    ])
    write_json("bench_gram_threads", {"machine": machine(), "args": vars(args),
                                      "times": {str(k): v for k, v in times.items()},
                                      "best": {str(k): v for k, v in best.items()}, "max_cosine_difference": difference})


if __name__ == "__main__":
    main()
