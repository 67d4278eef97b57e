"""``make run`` from a fresh copy of the repository, against the plain recipe it replaces.

Two fresh copies of the working tree (no ``.venv``, no ``__pycache__``: no compiled kernel,
table or bytecode) are set up in one run:

1. **plain** -- the recipe ``make run`` had before issue 27: ``python -m venv`` (pip from
   ensurepip), ``pip install -e .`` (byte-compiling every installed module), ``remprop diagram``;
2. **make run** -- ``make run`` itself: a venv without ensurepip (pip from the interpreter's
   own pip), ``pip install --no-compile -e .``, ``remprop diagram`` (which writes the bytecode of
   the modules it imports), then
   ``remprop precompile`` (the engine) started in the background (not waited for).

Each step is timed; the ratio plain / ``make run`` is the speed-up. Target (issue 27):
``make run`` <= 20 s. Both install from the package registries pip is configured with, so
the figures depend on them. Writes ``benchmarks/results/bench_make_run.json``.

Usage: ``python benchmarks/bench_make_run.py [--python python3.11]``
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import REPO, print_table, write_json

TARGET_SECONDS = 20.0
#: What a fresh copy leaves out: anything built or cached.
IGNORED = shutil.ignore_patterns(".venv", "__pycache__", "*.egg-info", "remprop-*", "build", "dist", ".git",
                                 "benchmarks", "docs", "notebooks", ".pytest_cache", ".hypothesis")


def step(command, cwd, env):
    """Seconds of one shell command (its output discarded; a failure stops the benchmark)."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, shell=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True)
    if done.returncode != 0:
        sys.exit(f"bench_make_run: {command!r} failed: {done.stderr.strip()[-500:]}")
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--python", default=None, help="interpreter for the venvs (default: the Makefile's choice)")
    args = parser.parse_args()
    rows, results = [], {}
    with tempfile.TemporaryDirectory(prefix="remprop-make-run-") as tmp:
        env = {name: value for name, value in os.environ.items() if not name.startswith(("VIRTUAL_ENV", "NUMBA_CACHE",
                                                                                          "REMPROP_CACHE"))}
        plain, fast = Path(tmp) / "plain", Path(tmp) / "make-run"
        for folder in (plain, fast):
            shutil.copytree(REPO, folder, ignore=IGNORED)
        python = args.python or subprocess.run(["make", "-s", "-f", "Makefile", "--eval", "print-python:\n\t@echo $(PYTHON)",
                                                "print-python"], cwd=fast, capture_output=True, text=True).stdout.strip()
        python = python or "python3"
        plain_steps = {
            "venv (ensurepip)": f"{python} -m venv .venv",
            "pip install -e .": ".venv/bin/python -m pip install -q -e .",
            "remprop diagram (cold)": ".venv/bin/remprop diagram --out remprop-diagram",
        }
        timings = {name: step(command, plain, env) for name, command in plain_steps.items()}
        results["plain"] = {"steps": timings, "total_s": sum(timings.values())}
        total = step(f"make run PYTHON={python}", fast, env)
        results["make_run"] = {"total_s": total}
        # the background precompile is not part of make run's time; wait for it, so the folder can go
        while subprocess.run(["pgrep", "-f", f"{fast}/.venv/bin/python -m remprop precompile"],
                             capture_output=True).returncode == 0:
            time.sleep(2)
    for name, seconds in timings.items():
        rows.append((f"plain: {name}", seconds, "s"))
    rows += [("plain: total", results["plain"]["total_s"], "s"),
             ("make run: total", total, "s"),
             ("plain / make run", results["plain"]["total_s"] / total, "x"),
             (f"target make run <= {TARGET_SECONDS:g} s", "met" if total <= TARGET_SECONDS else "NOT met", "")]
    print_table("A fresh copy: the plain recipe against make run (one run each)", rows)
    write_json("bench_make_run", {"python": python, "target_s": TARGET_SECONDS, **results})


if __name__ == "__main__":
    main()
