"""OpenMP's wait policy under load: a remprop command with idle threads sleeping (remprop's default,
``remprop.OPENMP_DEFAULTS``: ``OMP_WAIT_POLICY=PASSIVE``) against spinning (``ACTIVE``), alternately.

numba's parallel kernels (the causal Gram state's pair maps, the pair moments) run on OpenMP threads.
A spinning thread that finished its share waits for the next parallel region on its core; where other
processes share the cores it takes them from the thread that still works. This runs ``--command`` (default
``check gpt2 --seq-len 256 --json --no-figure``, warm: run once first) ``--repeat`` times each way and prints
the best wall-clock seconds and their ratio, with the load average (the effect needs other work on the
machine). Writes ``benchmarks/results/bench_omp_wait.json``.
"""
from __future__ import annotations

import argparse
import os
import shlex
import subprocess
import tempfile
import time

from _common import machine, print_table, remprop_executable, write_json


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--command", default="check gpt2 --seq-len 256 --json --no-figure")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    exe = remprop_executable()
    times = {"PASSIVE": [], "ACTIVE": []}
    with tempfile.TemporaryDirectory() as out:
        command = [exe, *shlex.split(args.command), "--out", out]
        subprocess.run(command, check=True, capture_output=True)   # compile and cache first
        for _ in range(args.repeat):
            for policy in times:
                env = dict(os.environ, OMP_WAIT_POLICY=policy)
                start = time.perf_counter()
                subprocess.run(command, check=True, capture_output=True, env=env)
                times[policy].append(time.perf_counter() - start)
    best = {k: min(v) for k, v in times.items()}
    print_table(f"remprop {args.command}: OpenMP wait policy (load {os.getloadavg()[0]:.2f})", [
        ("PASSIVE (remprop's default), best", best["PASSIVE"], "s"),
        ("ACTIVE, best", best["ACTIVE"], "s"),
        ("ACTIVE / PASSIVE", best["ACTIVE"] / best["PASSIVE"], "x"),
    ])
    write_json("bench_omp_wait", {"machine": machine(), "args": vars(args), "times": times, "best": best})


if __name__ == "__main__":
    main()
