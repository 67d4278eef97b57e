"""How much of a test run is numba compiling: distinct compilations and their seconds, cold and warm.

Issue 43: numba compiling was 27% of the suite's CPU time; the target is at most 5%. This script
runs a subset of the tests (``--tests``, paths under the checkout's ``tests/``) twice, each time in a
fresh process with ``pytest.main``: first on an empty numba cache (``REMPROP_CACHE_DIR`` a new folder:
a fresh clone), then on the cache the first run filled (a suite after ``remprop precompile``, or
any later run). In each it counts numba's ``"numba:compile"`` events (``numba.core.event``: one per
compilation of a dispatcher for a signature; a load from the disk cache sends none), the distinct
functions compiled, and the CPU seconds (``time.thread_time``) of the outermost compilations (a
compilation inside another, a callee's, is counted once, inside its caller), against the process's CPU time
(``time.process_time``: every thread). A ``numba.cfunc`` (a user activation's compiled functions) sends
no compile event: the CPU seconds under numba's compiler lock (``"numba:compiler_lock"``, outermost)
count it, and loads from the disk cache too, an upper bound of numba's share. Compilations in
subprocesses the tests start are not seen.

``--root`` is the checkout whose tests and ``remprop`` are run (run the script with that
checkout's Python: ``/work/main/.venv/bin/python benchmarks/bench_suite_compile.py --root /work/main``
measures the tree before a change with the same tests). numba runs on one thread
(``NUMBA_NUM_THREADS=1``) so that the CPU time is the work's; other processes may share the cores,
and the load average is recorded. Writes ``benchmarks/results/bench_suite_compile[_<label>].json``.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: A subset that reaches the engine's three sweeps, every built-in activation's moments and the
#: REM tables, and runs in a few minutes on two shared cores once compiled.
DEFAULT_TESTS = ("tests/test_kernel_tree.py", "tests/test_theory_kernels.py", "tests/test_activations_general.py",
                 "tests/test_theory_maps.py", "tests/test_edge_of_chaos.py", "tests/test_causal.py")

#: The measuring process: listens to numba's compile events, runs pytest, prints one JSON line.
_MEASURE = r"""
import json, sys, threading, time
from numba.core import event

compiled = []

class Outermost(event.Listener):  # CPU seconds of the outermost events of one kind (nested ones inside)
    def __init__(self, record=False):
        self.depth, self.seconds, self.record = threading.local(), 0.0, record

    def on_start(self, data):
        level = getattr(self.depth, "level", 0)
        self.depth.level = level + 1
        if level == 0:
            self.depth.start = time.thread_time()

    def on_end(self, data):
        self.depth.level -= 1
        if self.record:
            function = data.data["dispatcher"].py_func
            compiled.append(f"{function.__module__}.{function.__qualname__}")
        if self.depth.level == 0:
            self.seconds += time.thread_time() - self.depth.start

compiling, locked = Outermost(record=True), Outermost()
event.register("numba:compile", compiling)
event.register("numba:compiler_lock", locked)
import pytest
cpu, wall = time.process_time(), time.perf_counter()
status = pytest.main(["-q", "-p", "no:cacheprovider", *sys.argv[1:]])
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
print("MEASURED", json.dumps({"status": int(status), "cpu_seconds": cpu, "wall_seconds": wall,
                              "compile_seconds": compiling.seconds, "compiler_lock_seconds": locked.seconds,
                              "compilations": len(compiled),
                              "distinct": len(set(compiled)), "functions": sorted(set(compiled))}))
"""


def measure(root, tests, cache):
    """One fresh process running ``tests`` of ``root`` on the numba cache in ``cache``: the MEASURED dict."""
    env = {name: value for name, value in os.environ.items() if name not in ("NUMBA_CACHE_DIR",)}
    env.update(REMPROP_CACHE_DIR=str(cache), NUMBA_NUM_THREADS="1", OMP_NUM_THREADS="1")
    done = subprocess.run([sys.executable, "-c", _MEASURE, *tests], cwd=root, env=env, capture_output=True,
                          text=True)
    line = next((line for line in done.stdout.splitlines() if line.startswith("MEASURED ")), None)
    if line is None:
        raise SystemExit(f"the measuring process failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    result = json.loads(line[len("MEASURED "):])
    result["load_average_1min"] = os.getloadavg()[0]
    return result


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent,
                        help="the checkout whose tests and remprop run (default: this one)")
    parser.add_argument("--tests", nargs="+", default=list(DEFAULT_TESTS), help="test files, relative to --root")
    parser.add_argument("--label", default="", help="suffix of the JSON file (e.g. reference)")
    args = parser.parse_args(argv)
    runs = {}
    with tempfile.TemporaryDirectory(prefix="remprop-bench-compile-") as cache:
        for name in ("cold", "warm"):
            start = time.perf_counter()
            runs[name] = measure(args.root.resolve(), args.tests, cache)
            runs[name]["elapsed"] = time.perf_counter() - start
    print(f"{args.root}: {' '.join(args.tests)}")
    print(f"{'run':6s} {'status':>6s} {'compiles':>8s} {'distinct':>8s} {'compile s':>9s} {'lock s':>7s} "
          f"{'CPU s':>8s} {'share':>6s} {'lock':>6s} {'load':>5s}")
    for name, run in runs.items():
        share = run["compile_seconds"] / run["cpu_seconds"] if run["cpu_seconds"] > 0 else float("nan")
        run["compile_share"] = share
        lock = run["compiler_lock_seconds"] / run["cpu_seconds"] if run["cpu_seconds"] > 0 else float("nan")
        print(f"{name:6s} {run['status']:6d} {run['compilations']:8d} {run['distinct']:8d} "
              f"{run['compile_seconds']:9.1f} {run['compiler_lock_seconds']:7.1f} {run['cpu_seconds']:8.1f} "
              f"{share:6.1%} {lock:6.1%} {run['load_average_1min']:5.2f}")
    results = Path(__file__).resolve().parent / "results"
    results.mkdir(exist_ok=True)
    path = results / f"bench_suite_compile{'_' + args.label if args.label else ''}.json"
    path.write_text(json.dumps({"root": str(args.root), "tests": args.tests, "python": sys.version.split()[0],
                                "cpu_count": os.cpu_count(), "runs": runs}, indent=1) + "\n")
    print(f"written: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
