"""Simulated trainability diagrams: sweep a (beta, alpha_sa) grid, one cell at a time.

A sweep is fixed by a :class:`SweepSpec` (architecture, grid, depth, seeds, sizes). Each
cell ``(alpha_sa, beta)`` is one independent job (:func:`simulate_cell`): for every
seed, a :class:`~remprop.validation.simulator.SimulatedStack` with that skip strength and
query/key scale pushes ``sequences`` input sequences through ``depth`` blocks and the
per-layer token and attention statistics are kept (means over the ``seeds x sequences``
samples, and each sample's final cosine).

:func:`run_sweep` computes the cells that are not on disk yet and writes each record the
moment it finishes (:class:`~remprop.validation.experiments.cell_store.CellStore`: one JSON file per
cell, atomic temporary-file-and-rename), so an interrupted sweep -- an exception, Ctrl-C,
``SIGKILL``, a lost cluster -- resumes where it stopped, without recomputing or
duplicating a cell. Several runs may share one folder at once: each cell is claimed by
one of them, the others wait for it. Every record carries its cell's coordinates, a hash
of the manifest and a checksum of its result; a damaged one is moved aside and
recomputed (:func:`record_problem`). Cells run

* on a ``dask.distributed`` cluster (:mod:`remprop.validation.experiments.distributed`): a
  ``LocalCluster`` with one single-threaded worker process per core by default, or an
  existing cluster given by its scheduler address; each worker simulates on CUDA when it
  has a GPU;
* or in this process, one after another (``workers=0``, or when dask is not installed).

Both run the same :func:`simulate_cell` with a fixed number of torch threads
(``SweepSpec.threads``, default 1), so a cell's numbers do not depend on where or when
it ran: on one device a seeded cell is bitwise reproducible, which makes interrupted and
uninterrupted sweeps identical. (A CUDA run draws other weights than a CPU run of the
same seed: generators live on their device. Each record notes its device.)

:class:`~remprop.validation.experiments.measured_diagram.MeasuredDiagram` classifies the cells and
sets them against the theory.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333, Fig. 1(c) (trainability diagram).
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from remprop.theory import DEFAULT_THRESHOLD, Architecture, RunSettings
from remprop.theory.checks import check_choice, check_count, check_grid_axis, check_seeds
from remprop.theory.rem.checks import check_seq_len
from remprop.theory.architecture import NUMERIC_FIELDS, OPTIONAL_FIELDS

from .cell_runner import SweepReport, cell_key, grid_record_problem, grid_records, run_cells
from .cell_store import CellStore, json_sha256

__all__ = ["SweepSpec", "SweepReport", "simulate_cell", "run_sweep", "load_records", "cell_key",
           "record_problem", "SWEEP_FORMAT", "INPUT_KINDS", "DTYPE_NAMES"]

#: Format tag of the manifest and of every cell record.
SWEEP_FORMAT = "remprop.sweep/1"
#: Input kinds (see :func:`remprop.validation.inputs.input_batches`).
INPUT_KINDS = ("synthetic", "text")
#: Simulation precisions.
DTYPE_NAMES = ("float32", "float64")


@dataclass(frozen=True)
class SweepSpec:
    """Everything that decides the numbers of a simulated (beta, alpha_sa) sweep.

    Parameters
    ----------
    arch : Architecture
        Block order, attention, activation, variances (scalars). Its ``alpha_sa`` is
        replaced by each grid value (stored as 1.0) and its ``seq_len`` (finite-T
        theory, where the theory has it) by None: the simulation's length is
        ``seq_len`` below, the theory's choice belongs to the diagram.
    betas : array_like
        Query/key scales, > 0 (``s_qk^2 = beta sqrt(log T) / d``).
    alphas : array_like
        Attention skip strengths, >= 0 (``x -> alpha x + SA(x)``).
    depth : int
        Number of blocks L.
    seeds : int or sequence of int
        A count (seeds 0..n-1) or the seeds: one initialisation each.
    sequences : int
        Input sequences per seed.
    width, seq_len : int
        Model width d >= 2 and tokens T >= 2.
    d_ff : int, optional
        MLP hidden width (default d).
    threshold : float
        Rank-collapse threshold on the final mean token cosine, in (0, 1).
    q0, rho0 : float
        Input state of synthetic sequences.
    inputs : {"synthetic", "text"}
        Gaussian tokens with exactly ``q0``, ``rho0``, or embedded pydoc text.
    dtype : {"float32", "float64"}
    threads : int
        torch CPU threads while a cell is simulated (fixed so that results do not depend
        on the machine's core count; 1 suits one worker per core).
    """

    arch: Architecture = field(default_factory=Architecture)
    betas: tuple = (0.5,)
    alphas: tuple = (1.0,)
    depth: int = 12
    seeds: tuple = (0, 1)
    sequences: int = 2
    width: int = 128
    seq_len: int = 128
    d_ff: int | None = None
    threshold: float = DEFAULT_THRESHOLD
    q0: float = 1.0
    rho0: float = 0.0
    inputs: str = "synthetic"
    dtype: str = "float32"
    threads: int = 1

    def __post_init__(self):
        arch = self.arch
        if not isinstance(arch, Architecture):
            raise ValueError(f"arch must be a remprop.theory.Architecture, got {type(arch).__name__}")
        for name in NUMERIC_FIELDS + OPTIONAL_FIELDS:
            if name != "alpha_sa" and np.ndim(getattr(arch, name)) != 0:
                raise ValueError(f"arch.{name} must be a scalar for a sweep")
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_("seq_len", check_seq_len(self.seq_len, allow_none=False))
        # the theory's part, validated once (rho0 against the floor of the simulated T)
        run = RunSettings(arch.replace(alpha_sa=1.0, seq_len=self.seq_len),
                          check_grid_axis("betas", self.betas, allow_scalar=True, positive=True),
                          self.depth, self.q0, self.rho0, self.threshold)
        set_("arch", run.arch.replace(seq_len=None))
        set_("betas", tuple(float(b) for b in run.beta))
        set_("alphas", tuple(float(a) for a in check_grid_axis("alphas", self.alphas, allow_scalar=True,
                                                                 nonnegative=True)))
        set_("depth", run.depth)
        set_("threshold", run.threshold)
        set_("q0", run.q0)
        set_("rho0", run.rho0)
        set_("seeds", check_seeds(self.seeds))
        set_("sequences", check_count("sequences", self.sequences))
        set_("width", check_count("width", self.width, 2))
        if self.d_ff is not None:
            set_("d_ff", check_count("d_ff", self.d_ff))
        check_choice("inputs", self.inputs, INPUT_KINDS)
        check_choice("dtype", self.dtype, DTYPE_NAMES)
        set_("threads", check_count("threads", self.threads))

    @property
    def settings(self) -> RunSettings:
        """The theory's run bundle of this sweep: architecture (finite-T maps at the simulated T),
        betas, depth, input state and threshold."""
        return RunSettings(self.arch.replace(seq_len=self.seq_len), np.asarray(self.betas), self.depth, self.q0,
                           self.rho0, self.threshold)

    # -- the grid ---------------------------------------------------------------------
    @property
    def shape(self) -> tuple:
        """``(len(alphas), len(betas))``: rows are alphas, columns betas."""
        return len(self.alphas), len(self.betas)

    @property
    def samples(self) -> int:
        """Sequences per cell: seeds x sequences."""
        return len(self.seeds) * self.sequences

    def cells(self) -> list:
        """``(alpha_index, beta_index)`` of every cell, row by row."""
        return [(a, b) for a in range(len(self.alphas)) for b in range(len(self.betas))]

    def manifest(self) -> dict:
        """JSON-ready settings (the sweep folder's ``sweep.json``)."""
        arch = self.arch.to_dict()
        arch.pop("alpha_sa", None)
        arch.pop("seq_len", None)
        return {"format": SWEEP_FORMAT, "arch": arch, "betas": list(self.betas), "alphas": list(self.alphas),
                "depth": self.depth, "seeds": list(self.seeds), "sequences": self.sequences,
                "width": self.width, "seq_len": self.seq_len, "d_ff": self.d_ff, "threshold": self.threshold,
                "q0": self.q0, "rho0": self.rho0, "inputs": self.inputs, "dtype": self.dtype,
                "threads": self.threads}

    @classmethod
    def from_manifest(cls, manifest: dict) -> "SweepSpec":
        """The spec a manifest was written from (inverse of :meth:`manifest`)."""
        if manifest.get("format") != SWEEP_FORMAT:
            raise ValueError(f"manifest is not a remprop sweep manifest ({SWEEP_FORMAT})")
        fields_ = {k: v for k, v in manifest.items() if k not in ("format", "arch")}
        return cls(arch=Architecture(**manifest["arch"]), **fields_)


# -- one cell -------------------------------------------------------------------------------
def simulate_cell(spec: SweepSpec, alpha_index: int, beta_index: int, device=None) -> dict:
    r"""Simulate one grid cell and return its record.

    For each seed a stack with ``alpha_sa = alphas[alpha_index]`` and
    ``beta = betas[beta_index]`` processes the seed's ``sequences`` inputs; every layer
    is measured (:class:`~remprop.validation.simulator.StackTrace`).

    Parameters
    ----------
    spec : SweepSpec
    alpha_index, beta_index : int
        Position in the grid.
    device : str or torch.device, optional
        Default CUDA when available, else the CPU.

    Returns
    -------
    dict
        ``key``, ``alpha_index``, ``beta_index``, ``alpha``, ``beta``, ``format``;
        ``result`` (deterministic for a given device): per layer ``l = 0..L`` the sample
        means ``layer_q``, ``layer_p``, ``layer_cosine`` (mean pairwise cosine) and, per
        attention layer, ``layer_y2``; per sample (seed-major) ``final_cosine``;
        ``checksum`` (SHA-256 of the result's canonical JSON) and ``manifest_sha256`` (of
        the spec's manifest), checked whenever the record is read
        (:func:`record_problem`); and ``run``: ``device``, ``elapsed_s``, ``pid``.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(c, d, e).
    """
    import torch

    from ..settings import SimulationSettings
    from ..simulator import SimulatedStack, StackTrace
    from ..backend import torch_threads

    alpha_index = check_count("alpha_index", alpha_index, 0)
    beta_index = check_count("beta_index", beta_index, 0)
    if alpha_index >= len(spec.alphas) or beta_index >= len(spec.betas):
        raise ValueError(f"cell ({alpha_index}, {beta_index}) lies outside the {spec.shape} grid")
    alpha, beta = spec.alphas[alpha_index], spec.betas[beta_index]
    sim = SimulationSettings(width=spec.width, seq_len=spec.seq_len, d_ff=spec.d_ff, dtype=spec.dtype,
                             device=device, seeds=spec.seeds, sequences=spec.sequences, inputs=spec.inputs,
                             q0=spec.q0, rho0=spec.rho0)
    device = sim.device
    arch = spec.arch.replace(alpha_sa=alpha)
    start = time.perf_counter()
    traces = []
    with torch_threads(spec.threads), torch.no_grad():
        for seed in spec.seeds:
            stack = SimulatedStack(arch, beta, spec.depth, sim=sim, seed=seed)
            for batch in sim.input_batches(seed):
                traces.append(stack.trace(batch.tokens, batch.mask))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    trace = StackTrace.concatenate(traces)
    result = {
        "layer_q": trace.q.mean(axis=0).tolist(),
        "layer_p": trace.p.mean(axis=0).tolist(),
        "layer_cosine": trace.cosine.mean(axis=0).tolist(),
        "layer_y2": trace.y2.mean(axis=0).tolist(),
        "final_cosine": trace.cosine[:, -1].tolist(),
    }
    result = _finite_or_string(result)
    return {"format": SWEEP_FORMAT, "key": cell_key(alpha_index, beta_index), "alpha_index": alpha_index,
            "beta_index": beta_index, "alpha": alpha, "beta": beta, "result": result,
            "checksum": json_sha256(result), "manifest_sha256": json_sha256(spec.manifest()),
            "run": {"device": str(device), "elapsed_s": time.perf_counter() - start, "pid": os.getpid()}}


def _finite_or_string(result):
    """Strict JSON: non-finite numbers (a vanished or overflowed stream) as "nan"/"inf"."""
    from remprop._json import to_jsonable

    return to_jsonable(result)


# -- the sweep ------------------------------------------------------------------------------
def run_sweep(spec: SweepSpec, out, *, workers=None, scheduler=None, client=None, device=None, progress=False,
              on_cell=None, poll_s=0.1) -> SweepReport:
    """Compute every cell of ``spec`` that is not yet in ``out``, writing each as it finishes.

    Several runs (processes, dask clusters) may share one folder: each takes a cell through
    a claim before computing it (:meth:`~remprop.validation.experiments.cell_store.CellStore.claim`), so
    a cell is computed once; cells claimed by another live run are waited for, and taken
    over when their claim goes stale (its process died on this host, or it is older than
    :data:`~remprop.validation.experiments.cell_store.CLAIM_STALE_AFTER_S`). A damaged record (unreadable, of
    another cell or sweep, or whose checksum fails: :func:`record_problem`) is moved aside
    as ``<key>.json.corrupt`` with a warning naming it, and its cell computed again. The
    call returns when every cell of the grid is on disk. A run that fails before any cell
    is on disk takes back the manifest it wrote
    (:meth:`~remprop.validation.experiments.cell_store.CellStore.discard_if_unused`), so that the
    corrected rerun may use the folder.

    Parameters
    ----------
    spec : SweepSpec
    out : str or Path
        Sweep folder. A folder that holds another sweep's manifest is refused.
    workers : int, optional
        ``0``: compute in this process. ``n >= 1``: a dask ``LocalCluster`` with ``n``
        worker processes of one thread each. ``None`` (default): a LocalCluster with one
        worker per core (at most one per missing cell), or this process when
        ``dask.distributed`` is not installed.
    scheduler : str, optional
        Address of a running dask scheduler (``tcp://host:8786``); its workers need
        remprop installed. Overrides ``workers``.
    client : dask.distributed.Client, optional
        A client to use as it is (left open); overrides ``scheduler`` and ``workers``.
    device : str, optional
        ``None``/``"auto"``: CUDA when the worker has it (worker k takes GPU k mod the
        GPU count), else the CPU; or ``"cpu"``/``"cuda[:n]"`` for every worker.
    progress : bool
        Progress over the cells on stderr (:func:`remprop.progress.progress_bar`: a bar on a
        terminal, timestamped lines with the ETA in a log).
    on_cell : callable, optional
        ``on_cell(key, record)`` after each computed cell is on disk (an exception
        raised there stops the sweep; the cells on disk stay).
    poll_s : float
        First wait (seconds, doubling up to 2 s) before looking again at cells that
        another run is computing.

    Returns
    -------
    SweepReport

    Raises
    ------
    ValueError
        Bad settings, a folder of another sweep, ``scheduler`` unreachable or dask
        missing for it.
    """
    if not isinstance(spec, SweepSpec):
        raise ValueError(f"spec must be a SweepSpec, got {type(spec).__name__}")
    if workers is not None:
        workers = check_count("workers", workers, 0)
    if device not in (None, "auto"):
        from ..backend import resolve_device

        device = str(resolve_device(device))  # fail early, here, on a bad name
    from . import distributed

    if scheduler is not None and not distributed.dask_installed():
        raise ValueError(f"scheduler: dask.distributed is not installed ({distributed.INSTALL_HINT})")
    store = _open_store(spec, out)
    cells = {cell_key(a, b): (spec, a, b, device) for a, b in spec.cells()}
    try:
        return run_cells(store, cells, simulate_cell_on_worker, workers=workers, scheduler=scheduler,
                         client=client, progress=progress and "sweep", on_cell=on_cell, poll_s=poll_s)
    except BaseException:
        store.discard_if_unused()  # refused or failed before any cell: the folder is not pinned to it
        raise


def simulate_cell_on_worker(spec, alpha_index, beta_index, device=None):
    """:func:`simulate_cell` on a dask worker, on the worker's own device (see :func:`run_sweep`)."""
    from . import distributed

    return simulate_cell(spec, alpha_index, beta_index, device=distributed.worker_device(device))


def record_problem(spec: SweepSpec, key: str, record: dict, manifest_sha256=None):
    """Why ``record`` is not a valid record of cell ``key`` of ``spec`` (None when it is).

    A valid record carries the sweep's format tag, its own cell's coordinates (``key``,
    ``alpha_index``, ``beta_index``, ``alpha``, ``beta``: a record copied under another
    cell's name fails), the hash of the spec's manifest (a record of another sweep fails),
    a ``result`` with ``depth + 1`` layers and ``seeds x sequences`` samples, and the
    SHA-256 of that result (an edited or damaged number fails).
    """
    problem = grid_record_problem(record, key, format=SWEEP_FORMAT, alphas=spec.alphas, betas=spec.betas,
                                  manifest_sha256=manifest_sha256 or json_sha256(spec.manifest()), payload="result")
    if problem is not None:
        return problem
    result = record["result"]
    if not isinstance(result, dict):
        return "its result is not a JSON object"
    sizes = {"layer_q": spec.depth + 1, "layer_p": spec.depth + 1, "layer_cosine": spec.depth + 1,
             "final_cosine": spec.samples}
    for name, size in sizes.items():
        if not isinstance(result.get(name), list) or len(result[name]) != size:
            return f"result {name} does not hold {size} values"
    return None


def _open_store(spec: SweepSpec, out, *, create=True) -> CellStore:
    """The sweep folder, every record checked by :func:`record_problem`."""
    manifest_sha256 = json_sha256(spec.manifest())
    return CellStore(out, spec.manifest(), create=create,
                     check=lambda key, record: record_problem(spec, key, record, manifest_sha256))


def load_records(spec: SweepSpec, out, *, require_all=True) -> dict:
    """The cell records of a sweep folder, keyed by :func:`cell_key`.

    Every record is checked (:func:`record_problem`).

    Parameters
    ----------
    spec : SweepSpec
        Must match the folder's manifest.
    out : str or Path
        Sweep folder.
    require_all : bool
        Raise ``ValueError`` when cells are missing (naming the count) or damaged (naming
        the first damaged file); when False, return the valid records only.
    """
    return grid_records(_open_store(spec, out, create=False), len(spec.cells()), require_all=require_all,
                        verb="computed")
