"""Part of the test suite on xdist workers, with the libraries' thread defaults and with the suite's.

``tests/conftest.py`` keeps idle threads from spinning: OpenMP threads (numba's threading layer,
torch) sleep (``OMP_WAIT_POLICY=PASSIVE``, ``KMP_BLOCKTIME=0``) and each xdist worker runs one
OpenBLAS thread. With the defaults, a thread that finishes its share of a parallel operation
spins, waiting for the next one, and on a machine with as many workers as cores those spinning
threads take the cores from the other workers' tests.

This script runs the same test files twice per repeat, alternating, in one run: **defaults**
(``REMPROP_SUITE_THREAD_DEFAULTS=1``: conftest leaves the environment alone; since ``import remprop``
sets ``remprop.OPENMP_DEFAULTS`` in every process, OpenMP's threads sleep both ways and the two differ in
OpenBLAS's threads only) and **quiet** (the
suite's settings), each ``pytest FILES -n WORKERS --dist loadfile``. It records the wall-clock
seconds and the CPU seconds of pytest and its workers (``getrusage`` of the waited-for children);
the ratios defaults / quiet are the gain. Writes ``benchmarks/results/bench_suite_threads.json``.

Usage: ``python benchmarks/bench_suite_threads.py [--workers 2] [--repeat 1] [FILE ...]``
"""
from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time

from _common import REPO, print_table, write_json

#: Simulation files that mix numba kernels, numpy BLAS and torch (96 tests, about a minute each way).
DEFAULT_FILES = ("tests/test_gram_state.py", "tests/test_causal_decoders.py", "tests/test_decoder_blocks_sim.py",
                 "tests/test_validation_stack.py", "tests/test_causal_rope.py")
#: The variables the suite sets, removed for the defaults run.
THREAD_VARIABLES = ("OMP_WAIT_POLICY", "KMP_BLOCKTIME", "OPENBLAS_NUM_THREADS")


def run_part(files, workers, defaults):
    """(wall seconds, CPU seconds) of one pytest run of ``files``; a failing run stops the benchmark."""
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env["REMPROP_SUITE_THREAD_DEFAULTS"] = "1" if defaults else "0"
    command = [sys.executable, "-m", "pytest", *files, "-q", "-p", "no:cacheprovider", "-n", str(workers),
               "--dist", "loadfile"]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        sys.exit(f"bench_suite_threads: pytest failed:\n{done.stdout[-2000:]}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("files", nargs="*", default=list(DEFAULT_FILES),
                        help="test files (default: five simulation files)")
    parser.add_argument("--workers", type=int, default=2, help="xdist workers (default 2)")
    parser.add_argument("--repeat", type=int, default=1, help="pairs of runs, alternating (default 1)")
    args = parser.parse_args()
    runs = {"defaults": [], "quiet": []}
    for index in range(args.repeat):
        order = ("defaults", "quiet") if index % 2 == 0 else ("quiet", "defaults")
        for name in order:
            wall, cpu = run_part(args.files, args.workers, defaults=name == "defaults")
            runs[name].append({"wall_s": wall, "cpu_s": cpu})
            print(f"{name:>8}: {wall:6.1f} s wall, {cpu:6.1f} CPU-s", flush=True)
    best = {name: {key: min(r[key] for r in records) for key in ("wall_s", "cpu_s")} for name, records in runs.items()}
    ratios = {key: best["defaults"][key] / best["quiet"][key] for key in ("wall_s", "cpu_s")}
    print_table(f"{len(args.files)} test files, {args.workers} workers (best of {args.repeat})", [
        ("defaults, wall", best["defaults"]["wall_s"], "s"), ("quiet, wall", best["quiet"]["wall_s"], "s"),
        ("defaults, CPU", best["defaults"]["cpu_s"], "s"), ("quiet, CPU", best["quiet"]["cpu_s"], "s"),
        ("wall ratio defaults / quiet", ratios["wall_s"], "x"), ("CPU ratio defaults / quiet", ratios["cpu_s"], "x")])
    write_json("bench_suite_threads", {"files": list(args.files), "workers": args.workers, "runs": runs,
                                       "best": best, "ratio_defaults_over_quiet": ratios})


if __name__ == "__main__":
    main()
