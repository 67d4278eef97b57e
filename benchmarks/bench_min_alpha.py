"""Minimum residual strength alpha*(L): time per beta, and the CLI from a cold process.

* ``remprop.diagrams.alpha_star(arch, beta, 60)`` after a warm-up call: one
  scalar beta per call (best of several), and an array of betas in one call (time per
  beta). Target: <= 1 ms per beta.
* ``remprop min-alpha --depth 60 --beta 0.5`` in a fresh process, run twice: the second
  run finds the numba cache warm. Target: <= 3 s.

Writes ``benchmarks/results/bench_min_alpha.json``. Other processes may share the cores.
"""
from __future__ import annotations

import argparse
import subprocess
import time

import numba
import numpy as np

from _common import best_of, machine, print_table, remprop_executable, write_json

TARGET_PER_BETA = 1e-3
TARGET_CLI = 3.0


def time_cli(args):
    """Wall-clock seconds of two successive cold runs of the CLI, and the last output."""
    exe = remprop_executable()
    if exe is None:
        return None
    command = [str(exe), "min-alpha", "--depth", str(args.depth), "--beta", "0.5"]
    runs = []
    for _ in range(2):
        start = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True)
        runs.append(time.perf_counter() - start)
    return {"command": " ".join(command[1:]), "seconds": runs, "returncode": done.returncode,
            "stdout": done.stdout.strip(), "stderr": done.stderr.strip()[-500:]}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depth", type=int, default=60)
    parser.add_argument("--betas", type=int, default=200, help="betas in the array call")
    parser.add_argument("--repeat", type=int, default=200, help="repeats of the scalar call")
    args = parser.parse_args(argv)

    from remprop.diagrams import alpha_star
    from remprop.theory import Architecture

    name = "remprop.diagrams.alpha_star"
    arch = Architecture()
    start = time.perf_counter()
    warm_value = alpha_star(arch, 0.5, args.depth)
    warm_up = time.perf_counter() - start
    scalar_best, scalar_all = best_of(lambda: alpha_star(arch, 0.5, args.depth), args.repeat)
    scalar_median = float(np.median(scalar_all))
    # A parallel region waits for every numba thread: on cores shared with other work a
    # scalar call can stall for a scheduler time slice. One thread shows the call's own cost.
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    one_thread_best, one_thread_all = best_of(lambda: alpha_star(arch, 0.5, args.depth), args.repeat)
    numba.set_num_threads(threads)
    betas = np.linspace(0.05, 1.4, args.betas)
    array_best, _ = best_of(lambda: alpha_star(arch, betas, args.depth), 3)
    per_beta = array_best / betas.size
    stars = np.asarray(alpha_star(arch, betas, args.depth))
    cli = time_cli(args)

    rows = [
        ("implementation", name, ""),
        ("architecture / depth", f"post-LN ReLU softmax / {args.depth}", ""),
        ("alpha* at beta = 0.5", float(warm_value), ""),
        ("warm-up call (compile or cache load)", warm_up, "s"),
        (f"one scalar beta per call, best of {args.repeat}", scalar_best * 1e3, "ms"),
        ("one scalar beta per call, median", scalar_median * 1e3, "ms"),
        ("same, numba limited to 1 thread, best", one_thread_best * 1e3, "ms"),
        (f"array of {betas.size} betas, per beta", per_beta * 1e3, "ms"),
        ("target <= 1 ms per beta (scalar call)",
         "met" if scalar_best <= TARGET_PER_BETA else "NOT met", ""),
    ]
    if cli is None:
        rows.append(("remprop min-alpha (cold process)", "CLI not installed", ""))
    else:
        rows += [
            ("remprop min-alpha, 1st cold run", cli["seconds"][0], "s"),
            ("remprop min-alpha, 2nd cold run (warm cache)", cli["seconds"][1], "s"),
            ("CLI exit status", cli["returncode"], ""),
            ("target <= 3 s (2nd run)", "met" if cli["seconds"][1] <= TARGET_CLI else "NOT met", ""),
        ]
    rows.append(("load average (1 min)", machine()["load_average_1min"], ""))
    print_table("Minimum residual strength alpha*(L)", rows)
    if cli is not None:
        print("CLI output:", cli["stdout"] or cli["stderr"])
    write_json("bench_min_alpha", {
        "implementation": name, "depth": args.depth,
        "alpha_star_beta_0.5": float(warm_value),
        "warm_up_seconds": warm_up,
        "scalar_call_seconds_best": scalar_best, "scalar_call_seconds_median": scalar_median,
        "scalar_call_one_thread_seconds_best": one_thread_best,
        "scalar_call_one_thread_seconds_median": float(np.median(one_thread_all)),
        "array_betas": int(betas.size), "array_call_seconds_best": array_best,
        "seconds_per_beta_array": per_beta,
        "alpha_star_range": [float(np.min(stars)), float(np.max(stars))],
        "cli": cli,
        "targets": {"seconds_per_beta": TARGET_PER_BETA, "cli_seconds": TARGET_CLI},
    })


if __name__ == "__main__":
    main()
