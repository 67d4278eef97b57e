"""Peak memory of a 2000 x 2000 (beta, alpha) grid x 60 layers (post-LN ReLU).

Each measurement runs in a fresh subprocess: imports and a warm-up call on a small grid
first (the baseline), then one call on the full grid. The cost of the call is the rise
of the process's peak resident set size, ``resource.getrusage(...).ru_maxrss`` after
minus before. Measured for ``remprop.theory.final_state`` and, when available,
``remprop.diagrams.trainability_diagram``. Target: < 500 MB (the kernels keep no
grid x depth trajectories). Writes ``benchmarks/results/bench_memory.json``.
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

from _common import print_table, write_json

TARGET_MB = 500.0

CHILD = r"""
import json, resource, sys, time
import numpy as np

def peak_mb():
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes / KiB

what, size, depth = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
from remprop.theory import Architecture, final_state
arch = Architecture(norm="post", attention="softmax", activation="relu")
betas, alphas = np.linspace(0.01, 3.0, size), np.linspace(0.0, 3.0, size)
if what == "final_state":
    def call(b, a):
        return final_state(arch.replace(alpha_sa=a[:, None]), b, depth)
else:
    from remprop.diagrams import trainability_diagram
    def call(b, a):
        return trainability_diagram(arch, b, a, depth)
call(betas[:8], alphas[:8])  # warm-up: compile or load the kernels
baseline = peak_mb()
start = time.perf_counter()
result = call(betas, alphas)
seconds = time.perf_counter() - start
peak = peak_mb()
print(json.dumps({"baseline_mb": baseline, "peak_mb": peak, "rise_mb": peak - baseline,
                  "seconds": seconds}))
"""


def measure(what, size, depth):
    done = subprocess.run([sys.executable, "-c", CHILD, what, str(size), str(depth)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else
                f"exit status {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=2000, help="grid points per axis (default 2000)")
    parser.add_argument("--depth", type=int, default=60)
    args = parser.parse_args(argv)

    results = {}
    rows = [("grid (beta x alpha) x depth", f"{args.size} x {args.size} x {args.depth}", "")]
    for what in ("final_state", "trainability_diagram"):
        result = measure(what, args.size, args.depth)
        results[what] = result
        if "error" in result:
            rows.append((what, f"not measured: {result['error'][:60]}", ""))
            continue
        rows += [
            (f"{what}: baseline peak RSS", result["baseline_mb"], "MB"),
            (f"{what}: peak RSS rise of the call", result["rise_mb"], "MB"),
            (f"{what}: wall-clock of the call", result["seconds"], "s"),
            (f"{what}: target < {TARGET_MB:.0f} MB",
             "met" if result["rise_mb"] < TARGET_MB else "NOT met", ""),
        ]
    cells = args.size * args.size
    rows.append(("for scale: one float64 per cell", cells * 8 / 2**20, "MB"))
    print_table("Peak memory of a full diagram", rows)
    write_json("bench_memory", {"grid": [args.size, args.size], "depth": args.depth,
                                "target_mb": TARGET_MB, "results": results})


if __name__ == "__main__":
    main()
