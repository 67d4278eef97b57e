"""Cold starts: the first call of a command in a fresh environment, against the same call warm.

Each command runs in a fresh process: with empty caches (``NUMBA_CACHE_DIR`` and
``REMPROP_CACHE_DIR`` pointing at new folders: every kernel specialisation the call needs is
compiled and every finite-T table built, as on a fresh clone), then twice more with those caches
filled (the kernels load from disk). The warm run is the plain reference of the same run:
``cold - warm`` is what compilation costs, ``warm`` what import, work and output cost. Then,
with new empty caches, ``remprop precompile PART`` (the part that covers the command, as
``make install`` runs it) is timed, and the command's first call after it: the first call in a
fresh environment set up by ``make install``. A last figure, ``python -c "import remprop.theory"``,
is the import floor.

Targets (issue 27): the first ``remprop diagram`` <= 5 s, the first ``remprop check bert-base``
<= 10 s; issue 43: after ``remprop precompile`` (the engine, once per install), the first call of
any command on any architecture <= 3 s.

``--reference PYTHON`` times another checkout's ``remprop`` (e.g. the tree before a change, with its own
environment; ``--part NAME=PART`` where its precompile parts are named otherwise) into
``bench_cold_start_reference.json``. Writes ``benchmarks/results/bench_cold_start.json``. Other processes may share the cores: the
load average is recorded with the numbers.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

from _common import print_table, remprop_executable, write_json

#: (name, arguments of the CLI, target for the first call in seconds or None, its precompile part)
COMMANDS = (
    ("diagram", ["diagram", "--out", "{tmp}/diagram"], 5.0, "engine"),
    ("min-alpha", ["min-alpha", "--depth", "60", "--beta", "0.5"], None, "engine"),
    ("propagate", ["propagate", "--depth", "60", "--beta", "0.5"], None, "engine"),
    ("check bert-base", ["check", "bert-base", "--out", "{tmp}/check"], 10.0, "engine"),
    # decoders: since the one engine (issue 43), every architecture runs in the same compiled sweeps
    ("check llama-3.2-1b", ["check", "llama-3.2-1b", "--out", "{tmp}/check"], None, "engine"),
    ("check qwen2.5-0.5b", ["check", "qwen2.5-0.5b", "--out", "{tmp}/check"], None, "engine"),
)


def timed(command, env):
    """(seconds, returncode, stderr tail) of one fresh process."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    return time.perf_counter() - start, done.returncode, done.stderr.strip()[-300:]


def fresh_caches(tmp):
    """The environment of a fresh install: new, empty numba and remprop caches."""
    return dict(os.environ, NUMBA_CACHE_DIR=tempfile.mkdtemp(dir=tmp), REMPROP_CACHE_DIR=tempfile.mkdtemp(dir=tmp))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=None, help="comma-separated command names (default: all)")
    parser.add_argument("--reference", default=None, metavar="PYTHON",
                        help="time the remprop of another checkout (the console script beside PYTHON) instead")
    parser.add_argument("--part", action="append", default=[], metavar="NAME=PART",
                        help="the precompile part of command NAME there (a checkout whose parts are named otherwise)")
    args = parser.parse_args()
    python = args.reference or sys.executable
    exe = remprop_executable(python)
    if exe is None:
        sys.exit(f"bench_cold_start: no remprop executable beside {python}")
    wanted = None if args.only is None else set(args.only.split(","))
    parts = dict(item.split("=", 1) for item in args.part)
    results, rows = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        importing, _, _ = timed([python, "-c", "import remprop.theory"], os.environ.copy())
        rows.append(("import remprop.theory (warm files)", importing, "s"))
        for name, argv, target, part in COMMANDS:
            if wanted is not None and name not in wanted:
                continue
            part = parts.get(name, part)
            env = fresh_caches(tmp)
            command = [str(exe)] + [a.format(tmp=tmp) for a in argv]
            cold, code, err = timed(command, env)
            warm = min(timed(command, env)[0] for _ in range(2))
            env = fresh_caches(tmp)
            precompile, _, _ = timed([str(exe), "precompile", part], env)
            first, code_after, _ = timed(command, env)
            results[name] = {"command": " ".join(command[1:]), "cold_s": cold, "warm_s": warm,
                             "compile_s": cold - warm, "returncode": code, "stderr": err, "target_s": target,
                             "precompile_part": part, "precompile_s": precompile, "after_precompile_s": first}
            rows += [(f"{name}: cold", cold, "s"), (f"{name}: warm", warm, "s"),
                     (f"{name}: cold / warm", cold / warm, "x"),
                     (f"{name}: remprop precompile {part}", precompile, "s"),
                     (f"{name}: first call after it", first, "s")]
            if target is not None:
                rows.append((f"{name}: target first call <= {target:g} s", "cold " + ("met" if cold <= target else "NOT met")
                             + ", after precompile " + ("met" if first <= target else "NOT met"), ""))
            if code != 0 or code_after != 0:
                rows.append((f"{name}: exit status", f"{code}, {code_after}", ""))
    print_table("Cold starts (fresh process, empty numba cache) against the same call warm", rows)
    write_json("bench_cold_start" + ("_reference" if args.reference else ""),
               {"import_s": importing, "commands": results, "python": python})


if __name__ == "__main__":
    main()
