"""``remprop precompile``: compile the theory's engine, once per install, before the first command needs it.

The theory's depth kernels are one interpreter of lowered block trees (:mod:`remprop.theory.kernels`):
three numba sweeps (trajectories, final states, the minimum-alpha bisection) that run every
architecture, compiled the first time a process needs each and then kept on disk (numba's
cache). A fresh install pays for them once, in whichever command comes first (about 10-25 s a
sweep on two cores); this command pays it ahead. No architecture compiles anything of its own
afterwards.

The parts (:data:`PARTS`), each run in its own process, up to ``--jobs`` side by side:

* ``engine`` -- the three sweeps (``propagate``, ``min-alpha`` and a finite-T ``diagram`` at tiny
  sizes), the default;
* ``check`` -- ``remprop check`` of ``bert-base`` and ``gpt2``: what a check compiles beside the
  engine (the causal Gram state's loops) and the tables and font list it reads.

The engine's disk cache does not depend on how remprop was loaded: its sweeps are module-level
functions without closures, which numba keys on their file's text and bytecode, the same from the
source or a ``.pyc`` (tests/test_cold_start.py). Python's own bytecode is written by the first process
that imports a module, as usual.

``--background`` starts the parts in a detached process and returns at once (its output goes
to ``precompile.log`` in remprop's cache folder, :func:`remprop.cache.cache_directory`); a command started meanwhile compiles what
it needs itself, as it would without this command.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

from ..converters import count
from ..errors import CommandLineError

__all__ = ["DEFAULT_PARTS", "PARTS", "PART_SECONDS", "add_precompile_parser", "run_precompile", "precompile_parts"]

#: Part -> the ``remprop`` command lines it runs ("{out}" is a temporary folder).
PARTS = {
    "engine": (("propagate", "--depth", "2"), ("min-alpha", "--depth", "2"),
               ("diagram", "--depth", "2", "--beta", "0.5,2", "--alpha", "0.5,1.5", "--seq-len", "64", "--out",
                "{out}")),
    "check": (("check", "bert-base", "--out", "{out}"), ("check", "gpt2", "--out", "{out}")),
}
#: The parts compiled when none is named: the engine.
DEFAULT_PARTS = ("engine",)
#: Seconds of a part on a quiet machine beside compiling the engine's sweeps
#: (:data:`~remprop.cli.output.COMPILE_SECONDS_PER_SWEEP` each, those numba's cache lacks): its command lines'
#: start-up -- the engine's three tiny commands, about 1 s of CPU time each; ``check bert-base`` (3.5 s of CPU
#: time warm) and ``check gpt2`` (6 s), and the functions beside the engine they compile
#: (:data:`~remprop.cli.output.COMPILE_SECONDS_OTHER` each).
PART_SECONDS = {"engine": 3.0, "check": 15.0}


def part_name(text: str) -> str:
    """Converter of the PART words: a name of :data:`PARTS`."""
    import argparse

    if text not in PARTS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(PARTS)}, got {text!r}")
    return text


def add_precompile_parser(commands):
    from ..options import add_command, add_threads_option

    precompile = add_command(commands, "precompile", run_precompile,
                             help="compile the theory's engine (once per install) so that the first command "
                                  "does not")
    precompile.add_argument("parts", nargs="*", type=part_name, metavar="PART",
                            help=f"what to compile: {', '.join(PARTS)} (default: {' '.join(DEFAULT_PARTS)})")
    precompile.add_argument("--jobs", type=count(1), default=None, metavar="N",
                            help="parts compiled side by side, one process each (default: the cores)")
    precompile.add_argument("--background", action="store_true",
                            help="run in a detached process and return at once "
                                 "(output: precompile.log in remprop's cache folder)")
    add_threads_option(precompile)


def precompile_parts(parts, jobs=None, log=sys.stderr, threads=None):
    """Run the command lines of ``parts`` (names of :data:`PARTS`), each part in its own process.

    Parameters
    ----------
    parts : sequence of str
    jobs : int, optional
        Parts run side by side (default: ``os.cpu_count()``).
    log : file, optional
        Where a line per finished part goes (None: nowhere).
    threads : int, optional
        The ``--threads`` of every command line (default: theirs, all cores).

    Returns
    -------
    dict
        ``{part: (seconds, exit status)}``: the first failing command line of a part ends that
        part (its stderr's last line goes to the log); the other parts go on.
    """
    from concurrent.futures import ThreadPoolExecutor

    parts = list(dict.fromkeys(parts))
    unknown = [part for part in parts if part not in PARTS]
    if unknown:
        raise ValueError(f"parts must be among {', '.join(PARTS)}, got {', '.join(map(repr, unknown))}")
    jobs = max(1, int(jobs or os.cpu_count() or 1))

    def run(part, out):
        start = time.perf_counter()
        for line in PARTS[part]:
            words = [word.format(out=out) for word in line] + ([] if threads is None else ["--threads", str(threads)])
            done = subprocess.run([sys.executable, "-m", "remprop", *words],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True)
            if done.returncode != 0:
                error = done.stderr.strip().splitlines()
                status = f"failed: remprop {' '.join(line[:2])}: {error[-1] if error else done.returncode}"
                break
        else:
            status = "done"
        seconds = time.perf_counter() - start
        if log is not None:
            print(f"remprop precompile: {part}: {status} in {seconds:.1f} s", file=log, flush=True)
        return seconds, done.returncode

    with tempfile.TemporaryDirectory(prefix="remprop-precompile-") as out, ThreadPoolExecutor(jobs) as pool:
        futures = {part: pool.submit(run, part, out) for part in parts}
        return {part: future.result() for part, future in futures.items()}


def run_precompile(args) -> int:
    """Compile the kernels of the named parts (by default those of the commands users run first); 0 when every
    part ran."""
    from remprop.cache import cache_directory

    parts = list(args.parts) or list(DEFAULT_PARTS)
    if args.background:
        folder = cache_directory()
        log = folder / "precompile.log"
        command = [sys.executable, "-m", "remprop", "precompile", *parts]
        for option, value in (("--jobs", args.jobs), ("--threads", args.threads)):
            if value is not None:
                command += [option, str(value)]
        try:
            folder.mkdir(parents=True, exist_ok=True)
            handle = open(log, "w")
        except OSError as err:  # REMPROP_CACHE_DIR a file, a read-only folder or install
            reason = err.strerror or type(err).__name__
            raise CommandLineError(f"--background: cannot write its log {str(log)!r} ({reason}); set "
                                   "REMPROP_CACHE_DIR to a writable folder") from None
        with handle:
            subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=handle, stderr=handle, start_new_session=True)
        print(f"remprop precompile: compiling {', '.join(parts)} in the background (log: {log})")
        return 0
    _announce(args, parts)
    results = precompile_parts(parts, args.jobs, threads=args.threads)
    return 0 if all(status == 0 for _, status in results.values()) else 1


def _announce(args, parts) -> None:
    """The estimate line of a precompile in this process (:func:`remprop.cli.output.estimate_announcer`): the
    engine's sweeps numba's cache lacks and :data:`PART_SECONDS`, the parts side by side ``--jobs`` at a time."""
    from remprop.theory.kernels import sweeps_to_compile

    from ..output import COMPILE_SECONDS_PER_SWEEP, estimate_announcer

    cold = sweeps_to_compile()
    jobs = max(1, min(len(parts), int(args.jobs or os.cpu_count() or 1)))
    seconds = [PART_SECONDS[part] + COMPILE_SECONDS_PER_SWEEP * len(cold) for part in parts]
    what = f"{len(cold)} sweep(s) of the engine to compile: {', '.join(cold)}" if cold else "the engine on disk"
    estimate_announcer(args)(f"precompile {' '.join(parts)} ({what})", max(max(seconds), sum(seconds) / jobs), None)
