r"""A (beta, alpha_SA) grid of short training runs, trained cell by cell, resumable.

A grid is fixed by a :class:`TrainedGridSpec`: one training configuration
(``remprop.validation.training.TrainConfig``), the betas, the alphas and the seeds.
Each cell ``(alpha_sa, beta)`` is one independent job (:func:`train_cell`): one training run
per seed, with that skip strength and query/key scale, whose
``TrainResult.to_dict()`` go into the cell's record.

:func:`run_trained_grid` trains the cells that are not on disk yet and writes each record
the moment it is done, through :class:`~remprop.validation.experiments.cell_store.CellStore`: per-cell
claims (two runs on one folder train each cell once), checksummed records (a damaged one is
moved aside and trained again, :func:`trained_record_problem`), atomic files (an
interrupted grid -- an exception, Ctrl-C, ``SIGKILL`` -- resumes cell by cell). Cells run on
a dask cluster (:mod:`remprop.validation.experiments.distributed`: a LocalCluster of single-threaded
worker processes, or a running scheduler; a worker with a GPU trains on it when the
configuration's device is ``"auto"``) or in this process. :func:`run_cells` is the claim
loop of the measured sweep (:func:`remprop.validation.experiments.sweep.run_sweep`) for any cell function.

:class:`~remprop.validation.training.trained_diagram.TrainedDiagram` classifies the cells
and sets them against the theory.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333, Fig. 1(c, f) and Fig. 3.
"""
from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from pathlib import Path

from remprop._json import to_jsonable
from remprop.theory import DEFAULT_THRESHOLD, Architecture
from remprop.theory.checks import check_count, check_grid_axis, check_seeds

from ..experiments.cell_store import CELLS_FOLDER, CellStore, json_sha256
from ..experiments.cell_runner import CellGroups, SweepReport, cell_key, grid_record_problem, grid_records, run_cells

__all__ = ["TrainedGridSpec", "train_cell", "train_cells", "run_trained_grid", "run_cells", "load_trained_records",
           "trained_record_problem", "TRAINED_FORMAT"]

#: Format tag of the manifest and of every cell record.
TRAINED_FORMAT = "remprop.trained_grid/1"
#: Fields of the training configuration that each cell or run sets itself.
_PER_RUN_FIELDS = ("beta", "seed", "device")


def _training():
    """The training core (imported when first needed: it loads torch)."""
    from remprop.validation import training

    return training


@dataclass(frozen=True)
class TrainedGridSpec:
    """Everything that decides the numbers of a trained (beta, alpha_sa) grid.

    Parameters
    ----------
    config : TrainConfig
        The training run of every cell; its ``beta``, ``arch.alpha_sa`` and ``seed`` are
        replaced per cell and seed (``alpha_sa`` stored as 1.0), its ``device`` is where
        the cells run (``"auto"``: each dask worker's own GPU, else the CPU).
    betas : array_like
        Query/key scales, > 0.
    alphas : array_like
        Attention skip strengths, >= 0.
    seeds : int or sequence of int
        A count (seeds 0..n-1) or the seeds: one training run each per cell.
    threshold : float
        Rank-collapse threshold on the final mean token cosine at init, in (0, 1).
    threads : int
        torch CPU threads while a cell trains (fixed: results must not depend on the machine).
    """

    config: object
    betas: tuple = (0.5,)
    alphas: tuple = (1.0,)
    seeds: tuple = (0,)
    threshold: float = DEFAULT_THRESHOLD
    threads: int = 1

    def __post_init__(self):
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        arch = getattr(self.config, "arch", None)
        if not hasattr(self.config, "to_dict") or not isinstance(arch, Architecture):
            raise ValueError(f"config must be a TrainConfig (with an Architecture), got {type(self.config).__name__}")
        set_("config", dataclasses.replace(self.config, arch=arch.replace(alpha_sa=1.0)))
        set_("betas", tuple(float(b) for b in check_grid_axis("betas", self.betas, allow_scalar=True,
                                                               positive=True)))
        set_("alphas", tuple(float(a) for a in check_grid_axis("alphas", self.alphas, allow_scalar=True,
                                                                nonnegative=True)))
        set_("seeds", check_seeds(self.seeds))
        try:  # the largest seed through the training configuration's own check (torch takes 64-bit seeds)
            dataclasses.replace(self.config, seed=max(self.seeds))
        except ValueError as err:
            raise ValueError(f"seeds: {err}") from None
        threshold = float(self.threshold)
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"threshold must lie in (0, 1), got {self.threshold!r}")
        set_("threshold", threshold)
        set_("threads", check_count("threads", self.threads))

    @property
    def shape(self) -> tuple:
        """``(len(alphas), len(betas))``: rows are alphas, columns betas."""
        return len(self.alphas), len(self.betas)

    def cells(self) -> list:
        """``(alpha_index, beta_index)`` of every cell, row by row."""
        return [(a, b) for a in range(len(self.alphas)) for b in range(len(self.betas))]

    def run_config(self, alpha_index: int, beta_index: int, seed: int, device=None):
        """The training configuration of one run of cell ``(alpha_index, beta_index)``."""
        cfg = self.config
        changes = dict(beta=self.betas[beta_index], arch=cfg.arch.replace(alpha_sa=self.alphas[alpha_index]),
                       seed=int(seed))
        if device is not None:
            changes["device"] = device
        return dataclasses.replace(cfg, **changes)

    def manifest(self) -> dict:
        """JSON-ready settings (the grid folder's ``sweep.json``)."""
        config = {k: v for k, v in self.config.to_dict().items() if k not in _PER_RUN_FIELDS}
        config["arch"].pop("alpha_sa", None)
        return to_jsonable({"format": TRAINED_FORMAT, "config": config, "betas": list(self.betas),
                            "alphas": list(self.alphas), "seeds": list(self.seeds), "threshold": self.threshold,
                            "threads": self.threads})

    @classmethod
    def from_manifest(cls, manifest: dict, *, device="auto") -> "TrainedGridSpec":
        """The spec a manifest was written from (inverse of :meth:`manifest`)."""
        if not isinstance(manifest, dict) or manifest.get("format") != TRAINED_FORMAT:
            raise ValueError(f"manifest is not a remprop trained-grid manifest ({TRAINED_FORMAT})")
        config = dict(manifest["config"], beta=1.0, seed=0, device=device)
        config = _training().TrainConfig.from_dict(config)
        return cls(config, manifest["betas"], manifest["alphas"], manifest["seeds"], manifest["threshold"],
                   manifest["threads"])


# -- one cell -------------------------------------------------------------------------------
def train_cell(spec: TrainedGridSpec, alpha_index: int, beta_index: int, device=None, train=None) -> dict:
    """Train cell ``(alpha_index, beta_index)`` once per seed and return its record.

    Parameters
    ----------
    spec : TrainedGridSpec
    alpha_index, beta_index : int
        Position in the grid.
    device : str, optional
        Overrides ``spec.config.device``.
    train : callable, optional
        ``train(config) -> TrainResult``; default ``remprop.validation.training.train``.

    Returns
    -------
    dict
        ``format``, ``key``, ``alpha_index``, ``beta_index``, ``alpha``, ``beta``;
        ``results``: one ``TrainResult.to_dict()`` per seed (seed order); ``checksum``
        (SHA-256 of ``results``) and ``manifest_sha256``, checked whenever the record is read
        (:func:`trained_record_problem`); ``run``: ``device``, ``elapsed_s``, ``pid``.
    """
    from ..backend import torch_threads

    if train is None:
        train = _training().train
    alpha_index, beta_index = check_count("alpha_index", alpha_index, 0), check_count("beta_index", beta_index, 0)
    if alpha_index >= len(spec.alphas) or beta_index >= len(spec.betas):
        raise ValueError(f"cell ({alpha_index}, {beta_index}) lies outside the {spec.shape} grid")
    start = time.perf_counter()
    with torch_threads(spec.threads):
        results = [train(spec.run_config(alpha_index, beta_index, seed, device)) for seed in spec.seeds]
    return _cell_record(spec, alpha_index, beta_index, results, device, time.perf_counter() - start)


def _cell_record(spec, alpha_index, beta_index, results, device, elapsed_s, cells=1) -> dict:
    """The record of one cell from its runs' TrainResults (seed order)."""
    results = [to_jsonable(result.to_dict()) for result in results]
    used = device if device is not None else spec.config.device
    run = {"device": str(used), "elapsed_s": elapsed_s, "pid": os.getpid()}
    if cells > 1:
        run["cells_trained_together"] = cells
    return {"format": TRAINED_FORMAT, "key": cell_key(alpha_index, beta_index), "alpha_index": alpha_index,
            "beta_index": beta_index, "alpha": spec.alphas[alpha_index], "beta": spec.betas[beta_index],
            "results": results, "checksum": json_sha256(results), "manifest_sha256": json_sha256(spec.manifest()),
            "run": run}


def train_cells(spec: TrainedGridSpec, cells, device=None, train=None) -> list:
    """Train several cells at once and return their records (those of :func:`train_cell`).

    The runs (every cell, every seed) whose configurations share a
    :func:`~remprop.validation.training.batched.batch_key` are trained as one stacked model
    (:func:`~remprop.validation.training.batched.train_batched`: each run's losses are its
    one-at-a-time run's to float rounding); a run that shares none is trained alone. With
    ``train`` given, every run is ``train(config)``, one at a time. ``elapsed_s`` of each
    record is the wall time of all the cells together (``run["cells_trained_together"]``).

    Parameters
    ----------
    spec : TrainedGridSpec
    cells : sequence of (alpha_index, beta_index)
    device : str, optional
        Overrides ``spec.config.device``.
    train : callable, optional
        ``train(config) -> TrainResult``; default: batched training.
    """
    from ..backend import torch_threads

    cells = [(check_count("alpha_index", a, 0), check_count("beta_index", b, 0)) for a, b in cells]
    for a, b in cells:
        if a >= len(spec.alphas) or b >= len(spec.betas):
            raise ValueError(f"cell ({a}, {b}) lies outside the {spec.shape} grid")
    runs = [(cell, seed) for cell in cells for seed in spec.seeds]
    configs = {run: spec.run_config(*run[0], run[1], device) for run in runs}
    start = time.perf_counter()
    results = {}
    with torch_threads(spec.threads):
        if train is not None:
            results = {run: train(config) for run, config in configs.items()}
        else:
            from .batched import batch_key, train_batched

            groups = {}
            for run, config in configs.items():
                key = batch_key(config)
                groups.setdefault(run if key is None else key, []).append(run)
            for members in groups.values():
                results.update(zip(members, train_batched([configs[run] for run in members])))
    elapsed = time.perf_counter() - start
    return [_cell_record(spec, a, b, [results[((a, b), seed)] for seed in spec.seeds], device, elapsed, len(cells))
            for a, b in cells]


def train_cells_on_worker(spec, cells, train=None):
    """:func:`train_cells` on a dask worker, on the worker's own device (``config.device`` "auto")."""
    from ..experiments import distributed

    return train_cells(spec, cells, distributed.worker_device(spec.config.device), train)


def train_cell_on_worker(spec, alpha_index, beta_index, train=None):
    """:func:`train_cell` on a dask worker, on the worker's own device (``config.device`` "auto")."""
    from ..experiments import distributed

    return train_cell(spec, alpha_index, beta_index, distributed.worker_device(spec.config.device), train)


def trained_record_problem(spec: TrainedGridSpec, key: str, record: dict, manifest_sha256=None):
    """Why ``record`` is not a valid record of cell ``key`` of ``spec`` (None when it is).

    A valid record carries the grid's format tag, its own cell's coordinates, the hash of
    the spec's manifest, one result per seed with a final test loss, and the SHA-256 of the
    results (an edited or damaged number fails).
    """
    problem = grid_record_problem(record, key, format=TRAINED_FORMAT, alphas=spec.alphas, betas=spec.betas,
                                  manifest_sha256=manifest_sha256 or json_sha256(spec.manifest()), payload="results")
    if problem is not None:
        return problem
    results = record["results"]
    if not isinstance(results, list):
        return "its results are not a JSON list"
    if len(results) != len(spec.seeds) or not all(isinstance(r, dict) and "final_test_loss" in r for r in results):
        return f"it does not hold one training result per seed ({len(spec.seeds)})"
    return None


def _open_store(spec: TrainedGridSpec, out, *, create=True) -> CellStore:
    manifest_sha256 = json_sha256(spec.manifest())
    return CellStore(out, spec.manifest(), create=create,
                     check=lambda key, record: trained_record_problem(spec, key, record, manifest_sha256))


def load_trained_records(spec: TrainedGridSpec, out, *, require_all=True) -> dict:
    """The cell records of a trained-grid folder, keyed by cell; every record checked.

    ``require_all``: a missing cell (naming the count) or a damaged record (naming the file)
    is a ``ValueError``; when False, the valid records only.
    """
    return grid_records(_open_store(spec, out, create=False), len(spec.cells()), require_all=require_all,
                        verb="trained")


# -- running the grid -----------------------------------------------------------------------
def run_trained_grid(spec: TrainedGridSpec, out, *, train=None, workers=None, scheduler=None, client=None,
                     progress=False, on_cell=None, poll_s=0.1, batch=1) -> SweepReport:
    """Train every cell of ``spec`` not yet in folder ``out`` (see :func:`run_cells`).

    ``train`` (default the training core's ``train``) must be a module-level function when
    cells run on dask. ``batch`` > 1: up to ``batch`` cells whose runs can share one stacked
    model (one alpha_SA row, :func:`~remprop.validation.training.batched.batch_key`) are
    trained together with all their seeds (:func:`train_cells`); each cell is still claimed
    and written on its own, so the grid resumes cell by cell. A folder holding another grid's
    manifest, or a device that is not there (checked here unless the cells run on a remote
    cluster), is a ``ValueError``.
    """
    if not isinstance(spec, TrainedGridSpec):
        raise ValueError(f"spec must be a TrainedGridSpec, got {type(spec).__name__}")
    batch = check_count("batch", batch)
    if spec.config.device != "auto" and scheduler is None and client is None:
        from ..backend import resolve_device

        resolve_device(spec.config.device)  # fail here, on a bad name, not in every cell
    folder = Path(out)
    records = {folder / CELLS_FOLDER / f"{cell_key(a, b)}.json" for a, b in spec.cells()}
    for record in sorted(records | set((folder / CELLS_FOLDER).glob("*.json"))):
        if record.exists() and not record.is_file():
            raise ValueError(f"out: {record} is a folder, not a cell record; move it away or use another folder")
    store = _open_store(spec, out)
    cells = {cell_key(a, b): (spec, a, b, train) for a, b in spec.cells()}
    groups = None if batch == 1 else CellGroups(_batch_groups(spec, batch).__getitem__,
                                                lambda keys: (spec, tuple(cells[k][1:3] for k in keys), train))
    try:
        if batch == 1:
            return run_cells(store, cells, train_cell_on_worker, workers=workers, scheduler=scheduler,
                             client=client, progress=progress and "trained grid", on_cell=on_cell, poll_s=poll_s)
        return run_cells(store, cells, train_cells_on_worker, workers=workers, scheduler=scheduler, client=client,
                         progress=progress and "trained grid", on_cell=on_cell, poll_s=poll_s, groups=groups)
    except BaseException:
        store.discard_if_unused()  # failed before any cell: the folder is not pinned to this grid
        raise



def _batch_groups(spec: TrainedGridSpec, batch: int) -> dict:
    """Cell key -> its group: cells whose runs share a batch key, in row order, ``batch`` at a time."""
    from .batched import batch_key

    members, label = {}, {}
    for a, b in spec.cells():
        key = batch_key(spec.run_config(a, b, spec.seeds[0]))
        shared = members.setdefault(cell_key(a, b) if key is None else key, [])
        label[cell_key(a, b)] = (key, len(shared) // batch) if key is not None else cell_key(a, b)
        shared.append(cell_key(a, b))
    return label
