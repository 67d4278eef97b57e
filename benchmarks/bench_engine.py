"""The one engine against the per-tree kernels it replaced: the warm 500 x 500 x 60 diagram, in one run.

Issue 43 lowered every block tree to a program that one compiled interpreter runs
(``remprop.theory.kernels``). This benchmark times the warm trainability-diagram grid (``final_state``
of post-LN ReLU over 500 x 500 (beta, alpha) cells and 60 layers, the best of five calls after a warm-up
call) in this checkout and, with ``--reference PYTHON``, in the interpreter of another checkout (e.g. a
worktree of the commit before the engine, with its own environment), alternating the two ``--rounds``
times so that both see the same load. Per side: the wall time with all numba threads and the CPU time
of one thread, the asymptotic and the finite-T (T = 512) grid, and the sum of the final cosines (equal
when the results are bit-identical).

Writes ``benchmarks/results/bench_engine.json``; the load average is recorded with the numbers.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from _common import machine, print_table, write_json

CHILD = r"""
import json, sys, time
import numpy as np
from remprop.theory import Architecture, final_state
clock = time.process_time if sys.argv[2] == "cpu" else time.perf_counter
betas, alphas = np.linspace(0.01, 3.0, 500), np.linspace(0.0, 3.0, 500)
seq = None if sys.argv[1] == "inf" else int(sys.argv[1])
arch = Architecture(norm="post", alpha_sa=alphas[:, None], seq_len=seq)
final_state(arch.replace(alpha_sa=alphas[:4, None]), betas[:4], 60)
best = float("inf")
for _ in range(5):
    start = clock(); result = final_state(arch, betas, 60); best = min(best, clock() - start)
print(json.dumps({"seconds": best, "rho_sum": float(np.nansum(result["rho"]))}))
"""


def one(python, seq_len, clock):
    env = dict(os.environ)
    if clock == "cpu":
        env["NUMBA_NUM_THREADS"] = "1"
    done = subprocess.run([python, "-c", CHILD, seq_len, clock], capture_output=True, text=True, env=env, timeout=1800)
    if done.returncode != 0:
        sys.exit(f"bench_engine: {python} failed: {done.stderr.strip()[-500:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reference", default=None, metavar="PYTHON",
                        help="the Python of a checkout to compare with (default: this one only)")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    sides = {"engine": sys.executable} | ({"reference": args.reference} if args.reference else {})
    results = {name: {} for name in sides}
    for _ in range(args.rounds):
        for name, python in sides.items():
            for seq_len in ("inf", "512"):
                for clock in ("wall", "cpu"):
                    out = one(python, seq_len, clock)
                    key = f"T={seq_len} {clock}"
                    best = results[name].get(key)
                    if best is None or out["seconds"] < best["seconds"]:
                        results[name][key] = out
    rows = []
    for key in results["engine"]:
        engine = results["engine"][key]
        rows.append((f"{key}: engine", engine["seconds"], "s"))
        if "reference" in results:
            reference = results["reference"][key]
            same = reference["rho_sum"] == engine["rho_sum"]
            rows.append((f"{key}: reference", reference["seconds"], "s"))
            rows.append((f"{key}: reference / engine", reference["seconds"] / engine["seconds"],
                         "x (sum of final cosines " + ("equal)" if same else "differs)")))
    rows.append(("load average (1 min)", f"{machine()['load_average_1min']:.2f}", ""))
    print_table("warm 500 x 500 x 60 post-LN diagram (wall: all numba threads; cpu: one thread)", rows)
    write_json("bench_engine", {"results": results, "reference": args.reference})


if __name__ == "__main__":
    main()
