"""Run every benchmark script ``benchmarks/bench_*.py`` in turn and print its results.

Each script runs in its own process (cold imports, its own numba threads) with this
interpreter; its table is printed as it runs and its JSON lands in
``benchmarks/results/``. Exit status: 0 when every script succeeded, 1 otherwise.
``make bench`` calls this script. Timings are wall-clock on whatever else the machine
is running: compare them only with runs made under a similar load.
"""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent


def main(argv=None):
    names = set(sys.argv[1:] if argv is None else argv)
    scripts = sorted(BENCHMARKS.glob("bench_*.py"))
    if names:
        scripts = [s for s in scripts if s.stem in names or s.name in names]
    failures = []
    summary = []
    for script in scripts:
        print(f"=== {script.name} ===", flush=True)
        start = time.perf_counter()
        status = subprocess.run([sys.executable, str(script)], cwd=BENCHMARKS).returncode
        seconds = time.perf_counter() - start
        summary.append((script.name, status, seconds))
        if status != 0:
            failures.append(script.name)
        print(flush=True)
    print("=== summary ===")
    for name, status, seconds in summary:
        print(f"  {name:<28} {'ok' if status == 0 else f'FAILED ({status})':<12} {seconds:7.1f} s")
    if not scripts:
        print("  no benchmark scripts found")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
