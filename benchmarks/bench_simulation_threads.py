"""The simulating commands on one torch thread against two, on the machine as it is and beside a busy process.

Each README command that simulates (``validate --depth 8 --width 128 --seq-len 128``, ``check bert-48
--simulate``) runs in a fresh process with ``--threads 1`` and ``--threads 2`` (torch's and numba's threads),
alternating (the order swapped every round), each into its own new output folder, after one untimed run of
each command (which fills the caches of a first run: the finite-T tables, the tokenizer); then the same with ``--busy`` processes of this script
spinning on a core each (another user's one-thread work). Recorded: wall and CPU seconds of each run, the
ratio of two threads' wall time to one's (the plain reference is the one-thread run of the same round), and
the load average. The default of ``--threads`` on these commands follows from these numbers
(:func:`remprop.cli.output.simulation_threads`; docs/data/bench-simulation-threads.json).

``python benchmarks/bench_simulation_threads.py [--only NAME,...] [--rounds N] [--busy N]`` writes
``benchmarks/results/bench_simulation_threads.json``.
"""
from __future__ import annotations

import argparse
import contextlib
import os
import resource
import subprocess
import sys
import tempfile
import time

from _common import print_table, write_json

#: (name, remprop arguments; "{out}" is a new folder for each run). No name holds a comma (``--only`` splits on them).
COMMANDS = (
    ("validate (README)", ["validate", "--depth", "8", "--width", "128", "--seq-len", "128", "--out", "{out}"]),
    ("check bert-48 --simulate (README)", ["check", "bert-48", "--simulate", "--out", "{out}"]),
)


def run(argv, threads, tmp) -> dict:
    """Wall and CPU seconds of ``remprop ARGV --threads THREADS --no-progress`` in a fresh process."""
    out = tempfile.mkdtemp(dir=tmp)
    command = [sys.executable, "-m", "remprop", *[word.replace("{out}", out) for word in argv],
               "--threads", str(threads), "--no-progress"]
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"threads": threads, "wall_s": wall, "cpu_s": cpu, "load_average_1min": load,
            "returncode": done.returncode, "stderr_tail": done.stderr.strip()[-300:] if done.returncode else ""}


@contextlib.contextmanager
def busy(count):
    """``count`` processes spinning on a core each while the block runs."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(count)]
    try:
        time.sleep(1.0 if spinners else 0.0)  # let them start
        yield
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=None, help="comma-separated command names (default: all)")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each thread count per condition (default 1)")
    parser.add_argument("--busy", type=int, default=1, help="spinning processes of the busy condition (default 1)")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else {name for name, _ in COMMANDS}
    results, rows = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        for name, argv in COMMANDS:
            if name in only:
                run(argv, 1, tmp)  # untimed: what a first run builds and keeps is not the threads' doing
        for condition, spinners in (("as is", 0), (f"{args.busy} busy", args.busy)):
            with busy(spinners):
                for name, argv in COMMANDS:
                    if name not in only:
                        continue
                    runs = [run(argv, threads, tmp) for k in range(args.rounds) for threads in ((1, 2), (2, 1))[k % 2]]
                    one = min(r["wall_s"] for r in runs if r["threads"] == 1)
                    two = min(r["wall_s"] for r in runs if r["threads"] == 2)
                    results.setdefault(name, {})[condition] = {"runs": runs, "one_thread_s": one,
                                                               "two_threads_s": two, "ratio": two / one}
                    loads = ", ".join(f"{r['load_average_1min']:.1f}" for r in runs)
                    rows += [(f"{name}, {condition}: 1 thread", one, "s"), (f"{name}, {condition}: 2 threads", two, "s"),
                             (f"{name}, {condition}: 2 / 1 (loads {loads})", two / one, "x")]
                    for r in runs:
                        print(f"{name:36s} {condition:7s} threads {r['threads']}: {r['wall_s']:6.1f} s wall, "
                              f"{r['cpu_s']:6.1f} s CPU, load {r['load_average_1min']:.1f}, exit {r['returncode']} "
                              f"{r['stderr_tail']}", flush=True)
    print_table("torch threads 2 against 1 (wall time, best of the rounds)", rows)
    write_json("bench_simulation_threads", {"commands": results, "busy_processes": args.busy})


if __name__ == "__main__":
    main()
