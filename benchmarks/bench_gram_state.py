"""Gram state of a real sequence (docs/theory.md section 17): cost per layer at T = 512.

1. ``propagate_gram(..., sampled=True)`` (the single-initialisation chains that the text
   comparisons use) against the mean Gram state (``sampled=False``) at the same number of
   draws, in the same run: seconds per layer and draw, and their ratio.
2. The factor of ``G`` each chain draws its score field through, per layer and chain:
   the Cholesky factor against the symmetric square root by eigendecomposition (what the
   chains used before; the mean Gram state still needs it for its control variate).

Input: the Gram matrix ``x x^T / d`` of Gaussian tokens at d = 720 with one repeated word
(every 8th token, each with its own position vector), pre-LN BERT defaults, beta = 1 at ``seq_len = T``. One BLAS
thread (``OMP_NUM_THREADS=1`` etc. before numpy loads), as the acceptance's theory workers
run. Writes ``benchmarks/results/bench_gram_state.json``; other processes may share the
cores: the load average is recorded with the results.
"""
from __future__ import annotations

import argparse
import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

import numpy as np  # noqa: E402

from _common import best_of, print_table, write_json  # noqa: E402


def sequence_gram(seq_len, width, seed=0):
    """Gram matrix of Gaussian word vectors, one word repeated at every 8th position, plus a
    Gaussian position vector of half the variance per token (as embedded text: a repeated
    word is a close token, not the same one)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((seq_len, width))
    x[::8] = x[0]
    x += np.sqrt(0.5) * rng.standard_normal((seq_len, width))
    return x @ x.T / width


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--depth", type=int, default=4)
    parser.add_argument("--draws", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    from remprop.theory import Architecture
    from remprop.theory.gram_state import propagate_gram

    g = sequence_gram(args.seq_len, 720)
    arch = Architecture(norm="pre", seq_len=args.seq_len)
    per = args.depth * args.draws
    propagate_gram(arch, 1.0, g, 1, draws=1, sampled=True)  # warm: numba kernels of the MLP
    chains, chain_times = best_of(lambda: propagate_gram(arch, 1.0, g, args.depth, draws=args.draws, sampled=True),
                                  args.repeat)
    mean, mean_times = best_of(lambda: propagate_gram(arch, 1.0, g, args.depth, draws=args.draws), args.repeat)

    def symmetric_root():
        lam, u = np.linalg.eigh(g)
        return (u * np.sqrt(np.maximum(lam, 0.0))) @ u.T

    root, _ = best_of(symmetric_root, 5)
    cholesky, _ = best_of(lambda: np.linalg.cholesky(g), 5)
    rows = [
        ("sampled chains, s per layer and chain", chains / per, "s"),
        ("mean Gram state, s per layer and draw", mean / per, "s"),
        ("chains / mean Gram", chains / mean, "x"),
        ("symmetric root (eigh), s", root, "s"),
        ("Cholesky factor, s", cholesky, "s"),
        ("root / Cholesky", root / cholesky, "x"),
    ]
    print_table(f"Gram state at T = {args.seq_len}, d = 720, pre-LN, beta 1, {args.depth} layers x "
                f"{args.draws} draws (best of {args.repeat})", rows)
    write_json("bench_gram_state", {
        "settings": vars(args),
        "sampled_s_per_layer_chain": chains / per, "mean_gram_s_per_layer_draw": mean / per,
        "ratio_chains_to_mean_gram": chains / mean, "chain_times_s": chain_times, "mean_times_s": mean_times,
        "symmetric_root_s": root, "cholesky_s": cholesky, "ratio_root_to_cholesky": root / cholesky,
    })
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
