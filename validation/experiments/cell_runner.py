"""Run the cells of a grid into a :class:`~remprop.validation.experiments.cell_store.CellStore`: claims, resume, dask.

One claim loop for every grid of the project: the measured sweep
(:func:`remprop.validation.experiments.sweep.run_sweep`) and the trained diagram
(:func:`remprop.validation.training.trained_grid.run_trained_grid`) hand it their store, their
cells and a module-level cell function. A cell is claimed before it is computed (so
concurrent runs on one folder compute it once), a damaged record is moved aside and
recomputed, cells claimed by another live run are waited for and taken over when their
claim goes stale.
"""
from __future__ import annotations

import contextlib
import functools
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from remprop._deprecation import warn_renamed
from remprop.theory.checks import check_count

from .cell_store import CellStore, json_sha256

__all__ = ["SweepReport", "CellGroups", "run_cells", "cell_key", "grid_record_problem", "grid_records"]


def cell_key(alpha_index: int, beta_index: int) -> str:
    """File stem of a cell of an (alpha, beta) grid: ``a<alpha index>_b<beta index>`` (zero-padded to 4 digits)."""
    return f"a{int(alpha_index):04d}_b{int(beta_index):04d}"


def grid_record_problem(record, key: str, *, format: str, alphas, betas, manifest_sha256: str, payload: str):
    """Why ``record`` is not the record of cell ``key`` of an (alpha, beta) grid (None when it is).

    The checks every grid store makes: a JSON object with the grid's ``format`` tag, its own
    cell's coordinates (``key``, ``alpha_index``, ``beta_index``, ``alpha``, ``beta``: a record
    copied under another cell's name fails), the hash of the grid's manifest (a record of
    another grid fails) and the SHA-256 of ``record[payload]`` under ``checksum`` (an edited
    or damaged number fails). Each grid then checks its payload's own shape.
    """
    if not isinstance(record, dict):
        return f"not a JSON object but a {type(record).__name__}"
    if record.get("format") != format:
        return f"format {record.get('format')!r} is not {format!r}"
    if record.get("key") != key:
        return f"it is the record of cell {record.get('key')!r}"
    a, b = record.get("alpha_index"), record.get("beta_index")
    if not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in (a, b)) or cell_key(a, b) != key:
        return f"alpha_index {a!r} and beta_index {b!r} are not those of cell {key!r}"
    if a >= len(alphas) or b >= len(betas):
        return f"cell {key!r} lies outside the {len(alphas)} x {len(betas)} grid"
    if record.get("alpha") != alphas[a] or record.get("beta") != betas[b]:
        return (f"alpha {record.get('alpha')!r}, beta {record.get('beta')!r} are not the grid's "
                f"{alphas[a]!r}, {betas[b]!r}")
    if record.get("manifest_sha256") != manifest_sha256:
        return "it was written for another grid's manifest"
    if record.get("checksum") != json_sha256(record.get(payload)):
        return f"the checksum of its {payload} does not match"
    return None


def grid_records(store: CellStore, cells_total: int, *, require_all=True, verb="computed") -> dict:
    """The records of a grid store, keyed by cell; every record checked by the store.

    ``require_all``: a missing cell (naming the count) or a damaged record (naming the file)
    is a ``ValueError``; when False, the valid records only.
    """
    if not require_all:
        return store.scan()[0]
    records = store.read_all()
    missing = cells_total - len(records)
    if missing:
        raise ValueError(f"out: {missing} of {cells_total} cells are not {verb} yet in {store.directory}")
    return records


@dataclass(frozen=True)
class SweepReport:
    """What a call of :func:`~remprop.validation.experiments.cell_runner.run_cells` (a sweep, a trained grid) did.

    Attributes
    ----------
    directory : Path
        The sweep folder.
    backend : str
        ``"dask"`` (with the cluster's description), ``"serial"``, or ``"none"`` when
        every cell was already on disk.
    cells_total, cells_reused, cells_computed : int
        Grid size; cells this call did not compute (found on disk, or written meanwhile
        by another run on the same folder); cells computed by this call.
    workers : int
        Worker processes used (0 in this process).
    elapsed_s : float
        Wall-clock seconds of this call.
    """

    directory: Path
    backend: str
    cells_total: int
    cells_reused: int
    cells_computed: int
    workers: int
    elapsed_s: float

    @property
    def cells_per_minute(self) -> float:
        return 60.0 * self.cells_computed / self.elapsed_s if self.elapsed_s > 0 else float("nan")


@dataclass(frozen=True)
class CellGroups:
    """Cells that :func:`run_cells` computes together: ``by(key)`` labels each cell, and the claimed
    cells of one label are one job ``compute(*args(keys))``, which returns their records (a list)."""

    by: Callable
    args: Callable


def _old_keywords(function):
    """``desc=`` and ``group_by=``/``group_args=`` of :func:`run_cells`, deprecated for one release for
    ``progress=LABEL`` and ``groups=CellGroups(by, args)``."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        if "desc" in kwargs:
            warn_renamed("run_cells(desc=...)", "run_cells(progress=LABEL)")
            desc = kwargs.pop("desc")
            kwargs["progress"] = desc if kwargs.get("progress") else False
        if "group_by" in kwargs or "group_args" in kwargs:
            warn_renamed("run_cells(group_by=..., group_args=...)", "run_cells(groups=CellGroups(by, args))")
            by, group_args = kwargs.pop("group_by", None), kwargs.pop("group_args", None)
            kwargs["groups"] = None if by is None else CellGroups(by, group_args)
        return function(*args, **kwargs)

    return wrapper


@_old_keywords
def run_cells(store: CellStore, cells: dict, compute, *, workers=None, scheduler=None, client=None,
              progress=False, on_cell=None, poll_s=0.1, groups: CellGroups | None = None) -> SweepReport:
    """Compute the cells of ``store`` that are not on disk yet, writing each as it finishes.

    A cell is claimed before it is computed (so concurrent runs on one folder compute it
    once), a damaged record is moved aside and recomputed, cells claimed by another live
    run are waited for (and taken over when their claim goes stale). Returns when every
    cell is on disk.

    Parameters
    ----------
    store : CellStore
    cells : dict
        ``key -> args``: ``compute(*args)`` returns the record of cell ``key``.
    compute : callable
        A module-level function (it is pickled to dask workers).
    workers, scheduler, client
        Where cells run: ``workers=0``
        (or without dask) in this process, else a LocalCluster of ``workers`` processes
        (default one per core), a running scheduler, or a given client.
    progress : str or bool
        Progress over the cells on stderr (:func:`remprop.progress.progress_bar`: a bar on a
        terminal, timestamped lines with the ETA in a log), labelled by this string (True: "cells");
        False: none.
    on_cell : callable, optional
        ``on_cell(key, record)`` after each computed cell is on disk.
    poll_s : float
        First wait (seconds, doubling up to 2 s) for cells held by another run.
    groups : CellGroups, optional
        Cells computed together, one job per group. Each cell is still claimed, checked and written
        on its own, so a grid resumes cell by cell; in this process one group's cells are claimed at
        a time.
    """
    from remprop.progress import progress_bar

    from . import distributed

    if workers is not None:
        workers = check_count("workers", workers, 0)
    if scheduler is not None and not distributed.dask_installed():
        raise ValueError(f"scheduler: dask.distributed is not installed ({distributed.INSTALL_HINT})")
    start = time.perf_counter()
    done = store.done()
    waiting = [key for key in cells if key not in done]
    bar = progress_bar(len(cells), initial=len(cells) - len(waiting), enabled=bool(progress),
                       desc=progress if isinstance(progress, str) else "cells", unit="cell")
    computed = []

    def finished(result):
        for record in (result if isinstance(result, list) else [result]):
            one_finished(record)

    def one_finished(record):
        problem = store.check(record["key"], record) if store.check is not None else None
        if problem is not None:
            raise RuntimeError(f"cell record {record.get('key')!r} does not belong to this grid ({problem})")
        store.write(record["key"], record)
        store.release(record["key"])
        computed.append(record["key"])
        bar.update(1)
        if on_cell is not None:
            on_cell(record["key"], record)

    on_cluster = client is not None or scheduler is not None or (workers != 0 and distributed.dask_installed())
    batch = len(cells) if on_cluster else 1  # in this process: one claim at a time, so runs share the grid
    backend, n_workers, run = "none", 0, None
    try:
        with contextlib.ExitStack() as resources:
            delay = poll_s
            while waiting:
                mine, later = [], []
                for key in waiting:
                    full = len(mine) >= batch if groups is None or on_cluster else \
                        bool(mine) and groups.by(key) != groups.by(mine[0])
                    if full or not store.claim(key):
                        later.append(key)
                        continue
                    record, problem = store.inspect(key)
                    if record is not None:  # another run finished it meanwhile
                        store.release(key)
                        bar.update(1)
                        continue
                    if problem is not None:
                        store.quarantine(key, problem)
                    mine.append(key)
                if mine:
                    if run is None:
                        backend, n_workers, run = resources.enter_context(
                            _runner(compute, len(waiting), workers, scheduler, client, on_cluster))
                    run(_jobs(mine, cells, groups), finished)
                    delay = poll_s
                elif later:
                    elsewhere = {key for key in later if store.inspect(key)[0] is not None}
                    bar.update(len(elsewhere))
                    later = [key for key in later if key not in elsewhere]
                    if later:
                        time.sleep(delay)
                        delay = min(2 * delay, 2.0)
                waiting = later
    finally:
        store.release_all()
        bar.close()
    return SweepReport(store.directory, backend, len(cells), len(cells) - len(computed), len(computed), n_workers,
                       time.perf_counter() - start)


def _jobs(keys, cells, groups) -> list:
    """The argument tuples of the jobs computing ``keys``: one per cell, or one per group."""
    if groups is None:
        return [cells[key] for key in keys]
    members = {}
    for key in keys:
        members.setdefault(groups.by(key), []).append(key)
    return [groups.args(keys_of_one) for keys_of_one in members.values()]


@contextlib.contextmanager
def _runner(compute, missing, workers, scheduler, client, on_cluster):
    """``(backend, workers, run)``; ``run(arg_tuples, finished)`` computes cells and hands on records."""
    from . import distributed

    def on(client_):
        return lambda args, finished: distributed.map_cells(client_, compute, args, finished)

    if client is not None:
        yield f"dask ({distributed.describe(client)})", distributed.worker_count(client), on(client)
    elif on_cluster:
        n_workers = 0 if scheduler is not None else min(workers or (os.cpu_count() or 1), missing)
        with distributed.dask_client(scheduler=scheduler, workers=n_workers) as client_:
            yield f"dask ({distributed.describe(client_, scheduler)})", distributed.worker_count(client_), on(client_)
    else:
        def in_process(args, finished):
            for arg in args:
                finished(compute(*arg))

        yield "serial" if workers == 0 else "serial (dask.distributed is not installed)", 0, in_process
