"""``remprop precompile``: compile the kernels of the built-in commands before their first call.

The theory's depth kernels are numba functions compiled for each block structure the first
time a process runs them, and then kept on disk (``cache=True``, in the package's
``__pycache__`` folders or ``$NUMBA_CACHE_DIR``); the finite-T tables, the kernels' timings
(:func:`remprop.theory.work_estimates.kernel_speed`) and matplotlib's font list are kept on
disk too. In a fresh environment the first call of a command therefore pays for all of it:
measured on two cores (benchmarks/bench_cold_start.py, a quiet and a busy machine), the first
``remprop diagram`` 4-9 s against 1.6-4 s warm, the first ``remprop check bert-base`` 14-30 s
against 2.7-5 s warm.

This command runs the commands of each part of :data:`PARTS` once, quietly, each part in its
own process and up to ``--jobs`` parts side by side (numba compiles on one core per
process), so that the first real call loads everything from disk.

Python's bytecode is written first, even under ``PYTHONDONTWRITEBYTECODE``: remprop's modules
all (:func:`write_bytecode`), and the parts write that of every module they import. This
matters twice. numba keys its disk cache on the compiled closures, and those of a module
loaded from its bytecode file key differently from those of the same module compiled from
source (measured: a run after the one that wrote the bytecode compiled every kernel again),
so the kernels must be compiled by processes that load remprop as every later process will,
from bytecode. And an install without bytecode (``pip install --no-compile``, as ``make
install`` does, half a minute quicker) then costs nothing later: without it every process
would compile numba's and scipy's modules again on import (about 1.2 s). ``make install``
runs this command (README, "Quick start"). Parts:

* ``diagram`` -- ``remprop diagram``, ``min-alpha`` and ``propagate`` with their defaults;
* ``check`` -- ``remprop check`` of ``bert-base`` and ``gpt2`` (an encoder and a decoder);
* ``decoders`` -- ``remprop check`` of ``llama-3.2-1b``, a decoder with RoPE, RMSNorm and a
  SwiGLU MLP: its kernels are those of every shipped decoder of that form (Llama, Qwen2.5,
  Mistral, Phi-3, SmolLM2), whose first check then takes about 3 s instead of 18-20 s;
* ``suite`` -- the default stacks at finite T and with every norm placement, small grids:
  what most of the test suite runs (``make test`` runs ``diagram``, ``check`` and ``suite``:
  its one check of such a decoder compiles in less time than ``decoders`` takes).

``--background`` starts the parts in a detached process and returns at once (its output goes
to ``precompile.log`` in the theory's cache folder); a command started meanwhile compiles what
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

__all__ = ["DEFAULT_PARTS", "PARTS", "add_precompile_parser", "run_precompile", "precompile_parts", "write_bytecode"]

#: Part -> the ``remprop`` command lines it runs ("{out}" is a temporary folder).
PARTS = {
    "diagram": (("diagram", "--out", "{out}"), ("min-alpha",), ("propagate",)),
    "check": (("check", "bert-base", "--out", "{out}"), ("check", "gpt2", "--out", "{out}")),
    "decoders": (("check", "llama-3.2-1b", "--out", "{out}"),),
    "suite": tuple(("diagram", "--depth", "4", "--beta", "0.5,2", "--alpha", "0.5,1.5", "--out", "{out}", *options)
                   for options in ((), ("--seq-len", "64"), ("--norm", "pre"), ("--norm", "none"),
                                   ("--norm", "pre", "--seq-len", "64"))),
}
#: The parts compiled when none is named: those of the commands users run first.
DEFAULT_PARTS = ("diagram", "check", "decoders")


def part_name(text: str) -> str:
    """Converter of the PART words: a name of :data:`PARTS`."""
    import argparse

    if text not in PARTS:
        raise argparse.ArgumentTypeError(f"must be one of {', '.join(PARTS)}, got {text!r}")
    return text


def add_precompile_parser(commands):
    from ..options import add_command, add_threads_option

    precompile = add_command(commands, "precompile", run_precompile,
                             help="compile the kernels of the built-in commands (diagram; check of an encoder and "
                                  "of decoders) so that their first call is quick")
    precompile.add_argument("parts", nargs="*", type=part_name, metavar="PART",
                            help=f"what to compile: {', '.join(PARTS)} (default: {' '.join(DEFAULT_PARTS)})")
    precompile.add_argument("--jobs", type=count(1), default=None, metavar="N",
                            help="parts compiled side by side, one process each (default: the cores)")
    precompile.add_argument("--background", action="store_true",
                            help="run in a detached process and return at once "
                                 "(output: precompile.log in the theory's cache folder)")
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
    write_bytecode()
    environment = {name: value for name, value in os.environ.items() if name != "PYTHONDONTWRITEBYTECODE"}

    def run(part, out):
        start = time.perf_counter()
        for line in PARTS[part]:
            words = [word.format(out=out) for word in line] + ([] if threads is None else ["--threads", str(threads)])
            done = subprocess.run([sys.executable, "-m", "remprop", *words],
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                  text=True, env=environment)
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


def write_bytecode():
    """Byte-compile every module of remprop (its sub-packages may sit in separate folders: an
    editable install), where the files are missing or stale; unwritable folders are skipped."""
    import compileall
    import importlib.util

    folders = set()
    for name in ("remprop", "remprop.theory", "remprop.diagrams", "remprop.validation"):
        spec = importlib.util.find_spec(name)
        folders.update(spec.submodule_search_locations or () if spec is not None else ())
    for folder in sorted(folders):
        compileall.compile_dir(folder, quiet=2, workers=1)


def run_precompile(args) -> int:
    """Compile the kernels of the named parts (by default those of the commands users run first); 0 when every
    part ran."""
    from remprop.theory.rem.disk_cache import cache_directory

    parts = list(args.parts) or list(DEFAULT_PARTS)
    if args.background:
        write_bytecode()  # before returning: a command started meanwhile loads remprop from bytecode, as the parts do
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
    results = precompile_parts(parts, args.jobs, threads=args.threads)
    return 0 if all(status == 0 for _, status in results.values()) else 1
