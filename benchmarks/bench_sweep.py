"""Throughput of measured-diagram sweeps: cells per minute, single process against dask.

One grid of sweep cells (:class:`remprop.validation.experiments.sweep.SweepSpec`) is computed from
scratch, in one run of this script, by

1. the single-process loop (``run_sweep(workers=0)``) with one torch thread per cell --
   the same per-cell work as one dask worker does;
2. the same loop with ``--threads`` torch threads per cell (all cores inside one process);
3. a dask ``LocalCluster`` with 1 worker, and 4. with 2 workers (one thread each).

The clusters are started and warmed up (torch imported on every worker) before timing,
so the rates measure the steady state; the start-up time is reported beside them. The
modes are interleaved round by round (``--rounds``) and each keeps its best time: the
machine may be shared with other work, which the load average in the JSON records.
Every mode must produce the same cells bit for bit (checked).

Writes ``benchmarks/results/bench_sweep.json``. Without torch or dask the script says
what it skips and exits 0.

Usage::

    python benchmarks/bench_sweep.py [--width 128] [--seq-len 128] [--depth 60] [--cells 24] [--rounds 2]
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import logging
import os
import shutil
import sys
import tempfile
import time

from _common import print_table, write_json


def _spec(args, threads):
    import numpy as np

    from remprop.validation.experiments.sweep import SweepSpec

    n_beta = max(1, args.cells // 4)
    n_alpha = max(1, args.cells // n_beta)
    return SweepSpec(betas=np.linspace(0.3, 2.4, n_beta), alphas=np.linspace(0.8, 1.6, n_alpha), depth=args.depth,
                     seeds=args.seeds, sequences=args.sequences, width=args.width, seq_len=args.seq_len,
                     threads=threads)


def _timed(spec, root, **where):
    """(wall seconds, cell results, mean compute seconds inside a cell) of one fresh sweep."""
    from remprop.validation.experiments.sweep import load_records, run_sweep

    out = tempfile.mkdtemp(dir=root)
    start = time.perf_counter()
    report = run_sweep(spec, out, device="cpu", **where)
    seconds = time.perf_counter() - start
    records = load_records(spec, out)
    shutil.rmtree(out)
    assert report.cells_computed == len(spec.cells())
    inside = sum(r["run"]["elapsed_s"] for r in records.values()) / len(records)
    return seconds, {k: r["result"] for k, r in records.items()}, inside


@contextlib.contextmanager
def _cluster(workers, spec, root):
    """A warm LocalCluster client (torch imported on every worker) and its start-up seconds."""
    from dask.distributed import Client, LocalCluster

    start = time.perf_counter()
    with LocalCluster(n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        _timed(dataclasses.replace(spec, betas=(1.0,), alphas=tuple(1.0 + 0.1 * k for k in range(workers))), root,
               client=client)
        yield client, time.perf_counter() - start


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--depth", type=int, default=60)
    parser.add_argument("--seeds", type=int, default=2)
    parser.add_argument("--sequences", type=int, default=2)
    parser.add_argument("--cells", type=int, default=24, help="grid cells (default: 24)")
    parser.add_argument("--rounds", type=int, default=2, help="interleaved rounds, best kept (default: 2)")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1,
                        help="torch threads of the multi-threaded single-process run (default: all cores)")
    args = parser.parse_args(argv)
    if importlib.util.find_spec("torch") is None:
        print("bench_sweep: skipped, torch is not installed (pip install 'remprop[validation]')")
        return 0
    have_dask = importlib.util.find_spec("distributed") is not None
    if not have_dask:
        print("bench_sweep: dask is not installed (pip install 'remprop[distributed]'): single process only")

    one_thread, many_threads = _spec(args, 1), _spec(args, args.threads)
    cells = len(one_thread.cells())
    root = tempfile.mkdtemp(prefix="bench-sweep-")
    best, inside, startup, reference = {}, {}, {}, None

    def record(name, spec, seconds, records, per_cell):
        nonlocal reference
        best[name] = min(best.get(name, float("inf")), seconds)
        inside[name] = min(inside.get(name, float("inf")), per_cell)
        if spec is one_thread:
            reference = reference or records
            assert records == reference, f"{name}: cells differ from the single-process run"

    try:
        _timed(one_thread, root, workers=0)  # warm-up of this process
        for _ in range(args.rounds):  # one cluster alive at a time, modes interleaved
            record("single process, 1 thread", one_thread, *_timed(one_thread, root, workers=0))
            record(f"single process, {args.threads} threads", many_threads, *_timed(many_threads, root, workers=0))
            for n in ((1, 2) if have_dask else ()):
                with _cluster(n, one_thread, root) as (client, seconds):
                    startup[n] = min(startup.get(n, float("inf")), seconds)
                    record(f"LocalCluster, {n} worker{'s' if n > 1 else ''}", one_thread,
                           *_timed(one_thread, root, client=client))
    finally:
        shutil.rmtree(root, ignore_errors=True)

    rates = {name: 60.0 * cells / seconds for name, seconds in best.items()}
    base = rates["single process, 1 thread"]
    rows = [(name, rate, f"cells/min  ({rate / base:.2f}x; {inside[name]:.3f} s computing per cell)")
            for name, rate in rates.items()]
    rows += [(f"LocalCluster start + warm-up, {n} worker(s)", s, "s") for n, s in startup.items()]
    print_table(f"Sweep of {cells} cells (post-LN BERT, d={args.width}, T={args.seq_len}, L={args.depth}, "
                f"{args.seeds} seeds x {args.sequences} sequences per cell), CPU, best of {args.rounds}", rows)
    write_json("bench_sweep", {"cells": cells, "width": args.width, "seq_len": args.seq_len, "depth": args.depth,
                               "seeds": args.seeds, "sequences": args.sequences, "rounds": args.rounds,
                               "seconds": best, "cells_per_minute": rates, "compute_s_per_cell": inside,
                               "cluster_startup_s": {str(n): s for n, s in startup.items()},
                               "note": "machine shared with other processes: compare runs made under similar load"})
    return 0


if __name__ == "__main__":
    sys.exit(main())
