"""Trainability-diagram throughput: 500 x 500 (beta, alpha) grid x 60 layers, post-LN ReLU.

Times ``remprop.theory.final_state`` on the whole grid (best of 3 after a warm-up call
that compiles or loads the numba kernels), and the plain scalar reference
(``tests/reference.py``, the maps one float at a time in pure Python, like the authors'
published scalar code) on a sub-grid, to estimate its cost per block update and for the
full grid. Prints the speed-up (target: >= 100x; kernel <= 0.2 s on 2 cores) and writes
``benchmarks/results/bench_diagram.json``.

Other processes may share the cores: the load average is recorded with the results.
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from _common import best_of, load_reference, machine, print_table, write_json

TARGET_SECONDS = 0.2
TARGET_SPEEDUP = 100.0


def grid(n_beta, n_alpha):
    return np.linspace(0.01, 3.0, n_beta), np.linspace(0.0, 3.0, n_alpha)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=500, help="grid points per axis (default 500)")
    parser.add_argument("--depth", type=int, default=60)
    parser.add_argument("--reference-size", type=int, default=24,
                        help="sub-grid points per axis for the scalar reference (default 24)")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)

    from remprop.theory import Architecture, final_state

    ref = load_reference()
    betas, alphas = grid(args.size, args.size)
    arch = Architecture(norm="post", attention="softmax", activation="relu", alpha_sa=alphas[:, None])
    cells = betas.size * alphas.size
    updates = cells * args.depth

    start = time.perf_counter()
    final_state(arch.replace(alpha_sa=alphas[:4, None]), betas[:4], args.depth)  # warm-up
    warm_up = time.perf_counter() - start
    kernel_best, kernel_all = best_of(lambda: final_state(arch, betas, args.depth), args.repeat)
    result = final_state(arch, betas, args.depth)

    # scalar reference on a sub-grid spread over the same ranges
    sub_betas, sub_alphas = grid(args.reference_size, args.reference_size)
    start = time.perf_counter()
    reference_rho = [[ref.final_state("post", "softmax", "relu", float(b), args.depth,
                                      alpha_sa=float(a))["rho"] for b in sub_betas]
                     for a in sub_alphas]
    reference_seconds = time.perf_counter() - start
    sub_updates = sub_betas.size * sub_alphas.size * args.depth
    per_update = reference_seconds / sub_updates
    reference_full = per_update * updates
    speedup = reference_full / kernel_best
    sub_kernel = final_state(arch.replace(alpha_sa=sub_alphas[:, None]), sub_betas, args.depth)["rho"]
    agreement = float(np.max(np.abs(sub_kernel - np.array(reference_rho))))

    rows = [
        ("grid (beta x alpha) x depth", f"{args.size} x {args.size} x {args.depth}", ""),
        ("warm-up call (compile or cache load)", warm_up, "s"),
        (f"final_state, best of {args.repeat}", kernel_best, "s"),
        ("final_state, all runs", ", ".join(f"{t:.3f}" for t in kernel_all), "s"),
        ("kernel time per block update", kernel_best / updates * 1e9, "ns"),
        ("scalar reference per block update", per_update * 1e6, "us"),
        ("scalar reference, full grid (estimate)", reference_full, "s"),
        ("speed-up over the scalar reference", speedup, "x"),
        ("max |rho kernel - rho reference| (sub-grid)", agreement, ""),
        ("target: kernel <= 0.2 s", "met" if kernel_best <= TARGET_SECONDS else "NOT met", ""),
        ("target: speed-up >= 100x", "met" if speedup >= TARGET_SPEEDUP else "NOT met", ""),
        ("load average (1 min) / numba threads",
         f"{machine()['load_average_1min']:.2f} / {machine().get('numba_threads')}", ""),
    ]
    print_table("Trainability diagram: post-LN ReLU, softmax attention", rows)
    write_json("bench_diagram", {
        "grid": [args.size, args.size], "depth": args.depth, "cells": cells,
        "warm_up_seconds": warm_up,
        "kernel_seconds_best": kernel_best, "kernel_seconds_all": kernel_all,
        "kernel_ns_per_block_update": kernel_best / updates * 1e9,
        "reference_subgrid": [args.reference_size, args.reference_size],
        "reference_seconds_subgrid": reference_seconds,
        "reference_us_per_block_update": per_update * 1e6,
        "reference_seconds_full_grid_estimate": reference_full,
        "speedup": speedup,
        "max_abs_rho_difference_subgrid": agreement,
        "final_rho_range": [float(result["rho"].min()), float(result["rho"].max())],
        "targets": {"kernel_seconds": TARGET_SECONDS, "speedup": TARGET_SPEEDUP},
    })


if __name__ == "__main__":
    main()
