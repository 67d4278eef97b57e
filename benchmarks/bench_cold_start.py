"""Cold starts: the first call of a command in a fresh environment, against the same call warm.

Each command runs in a fresh process three times: with an empty numba cache (``NUMBA_CACHE_DIR``
pointing at a new folder: every kernel specialisation the call needs is compiled, as on a fresh
clone), then twice more with that cache filled (the kernels load from disk). The warm run is the
plain reference of the same run: ``cold - warm`` is what compilation costs, ``warm`` what import,
work and output cost. A fourth figure, ``python -c "import remprop.theory"``, is the import floor.

Targets (issue 27): the first ``remprop diagram`` <= 5 s, the first ``remprop check bert-base``
<= 10 s.

Writes ``benchmarks/results/bench_cold_start.json``. Other processes may share the cores: the
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

#: (name, arguments of the CLI, target for the cold run in seconds or None)
COMMANDS = (
    ("diagram", ["diagram", "--out", "{tmp}/diagram"], 5.0),
    ("min-alpha", ["min-alpha", "--depth", "60", "--beta", "0.5"], None),
    ("propagate", ["propagate", "--depth", "60", "--beta", "0.5"], None),
    ("check bert-base", ["check", "bert-base", "--out", "{tmp}/check"], 10.0),
)


def timed(command, env):
    """(seconds, returncode, stderr tail) of one fresh process."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    return time.perf_counter() - start, done.returncode, done.stderr.strip()[-300:]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", default=None, help="comma-separated command names (default: all)")
    args = parser.parse_args()
    exe = remprop_executable()
    if exe is None:
        sys.exit("bench_cold_start: the remprop executable is not installed in this environment")
    wanted = None if args.only is None else set(args.only.split(","))
    results, rows = {}, []
    with tempfile.TemporaryDirectory() as tmp:
        importing, _, _ = timed([sys.executable, "-c", "import remprop.theory"], os.environ.copy())
        rows.append(("import remprop.theory (warm files)", importing, "s"))
        for name, argv, target in COMMANDS:
            if wanted is not None and name not in wanted:
                continue
            cache = tempfile.mkdtemp(dir=tmp)
            env = dict(os.environ, NUMBA_CACHE_DIR=cache)
            command = [str(exe)] + [a.format(tmp=tmp) for a in argv]
            cold, code, err = timed(command, env)
            warm = min(timed(command, env)[0] for _ in range(2))
            results[name] = {"command": " ".join(command[1:]), "cold_s": cold, "warm_s": warm,
                             "compile_s": cold - warm, "returncode": code, "stderr": err, "target_s": target}
            rows += [(f"{name}: cold", cold, "s"), (f"{name}: warm", warm, "s"),
                     (f"{name}: cold / warm", cold / warm, "x")]
            if target is not None:
                rows.append((f"{name}: target cold <= {target:g} s", "met" if cold <= target else "NOT met", ""))
            if code != 0:
                rows.append((f"{name}: exit status", code, ""))
    print_table("Cold starts (fresh process, empty numba cache) against the same call warm", rows)
    write_json("bench_cold_start", {"import_s": importing, "commands": results})


if __name__ == "__main__":
    main()
