r"""The measured learning-rate sweep: does a run train at its rate, and does a ceiling predict it?

The theory names a cell's phase at initialisation; whether the cell then trains depends on
the learning rate too (docs/training.md, "The learning rate as the third axis"). This
module holds the sweep that measures it and scores a predicted ceiling against it.

**The design** (:data:`LR_SWEEP_DESIGN`, fixed before any run finished; one seed, seed 0;
T 64, batch 16, 300 AdamW steps, vocabulary 4096, width 32 unless said, the default recipe
otherwise: :data:`LR_SWEEP_TRAINING`; the lead's first design, at width 64 and batch 32, was
aborted before any run finished: too slow on the shared two-core machine):

* F1: depth 24, post- and pre-LN, alpha_SA 1.2, beta 0.5, lr 1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2;
* F2: the same at depth 8, without 3e-4;
* F3: the same as F2 at depth 24 and width 16 (held out);
* F4: depth 24, post- and pre-LN, (alpha_SA, beta) = (0.3, 0.5) at lr 3e-3 and (1.2, 2) at
  lr 3e-4 (held out);
* F5 (the paper's Figs. 6 and 8 through the learning rate; held out): post-LN depth 24,
  alpha_SA 1.2, beta 0.5, gain-controlled attention at lr 3e-3 and 1e-2; and post-LN
  depth 24, alpha_SA 1.2, beta 2 (softmax) at lr 1e-4 and 1e-3.

(The first 49-run version, with 3e-4 in F2 and F3 and more F4/F5 points, was cut to these 40
while the first runs trained, for the CPU time left; no outcome was looked at to cut it.)

Each run is a one-cell trained grid
(:func:`~remprop.validation.training.trained_grid.run_trained_grid`) in its own folder
``OUT/<group>/<norm>_a<alpha>_b<beta>_<attention>_lr<lr>`` (:attr:`LRSweepRun.folder`),
exactly the folder and settings of the command ::

    remprop trained-diagram --alpha A --beta B --depth L --width D --norm N --attention ATT --lr LR \
        --seq-len 64 --batch-size 16 --steps 300 --vocab-size 4096 --seeds 1 --threads 1 \
        --workers 0 --device cpu --out OUT/<group>/<folder> --json --max-seconds 1000000 --no-progress

so :func:`run_lr_sweep`, ``remprop lr-sweep`` and that command resume each other's runs.

**The rule that reads a run** (fixed before the runs, no theory): with ``U`` the run's
unigram loss, ``L`` its final test loss and ``R`` the smallest final test loss among the
sweep's runs of its *family* (same norm placement, depth and width), its trained fraction
is ``f = (U - L) / (U - R)``
(:func:`~remprop.validation.training.trained_diagram.trained_fraction`) and it *trains at
its rate* when ``f >= 3/4``
(:data:`~remprop.validation.training.trained_diagram.TRAINED_FRACTION`, the trained
diagram's rule and its reasons); a diverged run does not train.

**Scoring a ceiling** (:func:`evaluate_ceiling`): a ceiling is any callable ``record ->
eta_max``. A run is predicted to train when the theory's phase at initialisation is
trainable (:func:`~remprop.validation.training.trained_diagram.run_verdict`) and
``lr <= eta_max``. Reported per part (fit, held-out, all): the accuracy, the AUROC of the
score ``log(eta_max / lr)`` (:func:`auroc`), the confusion table, and every run on which
prediction and outcome disagree. :func:`fit_constant` fits the one multiplicative constant
of a ceiling on the fit part only.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333, Figs. 1(f), 6 and 8; docs/theory.md
section 7 (the gradients at initialisation); docs/training.md.
"""
from __future__ import annotations

import json
import math
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from remprop.theory.checks import check_count

__all__ = ["LRSweepGroup", "LRSweepRun", "LR_SWEEP_DESIGN", "LR_SWEEP_TRAINING", "LRSweepReport", "design_runs",
           "run_lr_sweep", "pending_runs", "lr_sweep_outcomes", "save_outcomes", "evaluate_ceiling", "fit_constant", "fit_window",
           "auroc", "outcome_table_text", "load_outcomes", "FIT", "HELD_OUT", "OUTCOMES_FORMAT"]

#: The ``split`` of a run that fitting may use, and of one it may not.
FIT, HELD_OUT = "fit", "held-out"
#: Format tag of the outcome table (:func:`save_outcomes`).
OUTCOMES_FORMAT = "remprop.lr_sweep/1"
#: The training recipe of every run of the sweep, beside each group's depth and width (the
#: defaults of ``remprop trained-diagram`` but batch 16; ``eval_every`` is ``steps // 10`` as there).
LR_SWEEP_TRAINING = {"seq_len": 64, "batch_size": 16, "steps": 300, "vocab_size": 4096}
#: Further recipe fields a sweep's ``training`` may set (the :class:`TrainConfig` fields of the same
#: names; the defaults of the recipe otherwise): the recipe axes of the scale sweep
#: (:mod:`~remprop.validation.training.lr_scale`).
RECIPE_FIELDS = ("warmup_ratio", "weight_decay", "embedding_std", "beta2", "schedule")


@dataclass(frozen=True)
class LRSweepRun:
    """One run of the sweep: a one-cell trained grid at one learning rate."""

    group: str
    norm: str
    depth: int
    width: int
    alpha: float
    beta: float
    attention: str
    lr: float
    held_out: bool

    @property
    def split(self) -> str:
        """:data:`FIT` or :data:`HELD_OUT`."""
        return HELD_OUT if self.held_out else FIT

    @property
    def folder(self) -> str:
        """``<group>/<norm>_a<alpha>_b<beta>_<attention>_lr<lr>`` (numbers as ``%g``)."""
        return f"{self.group}/{self.norm}_a{self.alpha:g}_b{self.beta:g}_{self.attention}_lr{self.lr:g}"

    @property
    def family(self) -> tuple:
        """``(norm, depth, width)``: the runs sharing the reference loss ``R``."""
        return self.norm, self.depth, self.width

    def spec(self, training=None, device="auto", threads=1):
        """The :class:`~remprop.validation.training.trained_grid.TrainedGridSpec` of this run:
        the settings ``remprop trained-diagram`` writes for the same options."""
        from remprop.theory import Architecture

        from .config import TrainConfig
        from .trained_grid import TrainedGridSpec

        training = dict(LR_SWEEP_TRAINING if training is None else training)
        if not set(LR_SWEEP_TRAINING) <= set(training) <= set(LR_SWEEP_TRAINING) | set(RECIPE_FIELDS):
            raise ValueError(f"training must give {', '.join(sorted(LR_SWEEP_TRAINING))} (and optionally "
                             f"{', '.join(RECIPE_FIELDS)}), got {', '.join(sorted(training)) or 'nothing'}")
        config = TrainConfig(arch=Architecture(norm=self.norm, attention=self.attention), depth=self.depth,
                             width=self.width, lr=self.lr, eval_every=max(training["steps"] // 10, 1), device=device,
                             **training)
        return TrainedGridSpec(config, (self.beta,), (self.alpha,), 1, threads=threads)


@dataclass(frozen=True)
class LRSweepGroup:
    """A group of runs: every norm placement x (alpha_SA, beta) point x learning rate."""

    name: str
    norms: tuple
    depth: int
    width: int
    points: tuple
    lrs: tuple
    attention: str = "softmax"
    held_out: bool = False

    def runs(self) -> list:
        """The group's :class:`LRSweepRun`, norm by norm, point by point, rate by rate."""
        return [LRSweepRun(self.name, norm, self.depth, self.width, float(a), float(b), self.attention, float(lr),
                           self.held_out) for norm in self.norms for a, b in self.points for lr in self.lrs]


_RATES = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2)
#: The rates of the cheaper groups (F2, F3): 3e-4 left out when the machine's budget shrank.
_FEWER_RATES = (1e-4, 1e-3, 3e-3, 1e-2, 3e-2)
#: The design of issue 23 items 3 and 4, fixed before any run finished (module docstring): 40 runs.
#: It was cut from 49 runs to these 40 while the first runs trained, for the CPU time left to
#: the session, by dropping rates and points, never by looking at an outcome.
LR_SWEEP_DESIGN = (
    LRSweepGroup("F1", ("post", "pre"), 24, 32, ((1.2, 0.5),), _RATES),
    LRSweepGroup("F2", ("post", "pre"), 8, 32, ((1.2, 0.5),), _FEWER_RATES),
    LRSweepGroup("F3", ("post", "pre"), 24, 16, ((1.2, 0.5),), _FEWER_RATES, held_out=True),
    LRSweepGroup("F4", ("post", "pre"), 24, 32, ((0.3, 0.5),), (3e-3,), held_out=True),
    LRSweepGroup("F4", ("post", "pre"), 24, 32, ((1.2, 2.0),), (3e-4,), held_out=True),
    LRSweepGroup("F5", ("post",), 24, 32, ((1.2, 0.5),), (3e-3, 1e-2), attention="gain-controlled",
                 held_out=True),
    LRSweepGroup("F5", ("post",), 24, 32, ((1.2, 2.0),), (1e-4, 1e-3), held_out=True),
)


def design_runs(design=LR_SWEEP_DESIGN) -> list:
    """Every run of ``design`` (a sequence of :class:`LRSweepGroup`), group by group; two runs
    with one folder are a ``ValueError``."""
    if isinstance(design, LRSweepGroup) or not all(isinstance(g, LRSweepGroup) for g in design):
        raise ValueError("design must be a sequence of LRSweepGroup")
    runs = [run for group in design for run in group.runs()]
    folders = [run.folder for run in runs]
    twice = sorted({f for f in folders if folders.count(f) > 1})
    if twice:
        raise ValueError(f"design: runs share the folder(s) {', '.join(twice)}")
    if not runs:
        raise ValueError("design holds no run")
    return runs


# -- running ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class LRSweepReport:
    """What :func:`run_lr_sweep` did: runs trained now, runs found on disk, wall seconds, backend."""

    runs_total: int
    runs_computed: int
    runs_reused: int
    elapsed_s: float
    backend: str


def run_lr_sweep(out, design=LR_SWEEP_DESIGN, *, training=None, threads=1, workers=0, scheduler=None,
                 progress=False, on_run=None, train=None) -> LRSweepReport:
    """Train (or resume) every run of ``design`` under folder ``out``.

    Each run is :func:`~remprop.validation.training.trained_grid.run_trained_grid` of its
    one-cell grid (:meth:`LRSweepRun.spec`) in ``out/<run.folder>``: a run on disk is reused,
    an interrupted sweep resumes run by run, and a folder holding other settings is a
    ``ValueError``.

    Parameters
    ----------
    out : path
        The sweep folder.
    design : sequence of LRSweepGroup
    training : dict, optional
        ``seq_len``, ``batch_size``, ``steps``, ``vocab_size`` (default :data:`LR_SWEEP_TRAINING`).
    threads : int
        torch CPU threads per run (recorded in each run's settings: the design's runs used 1).
    workers : int
        0: every run in this process, one after another; N >= 1: a dask LocalCluster of N
        single-threaded workers (or the running ``scheduler``) trains up to N runs at once.
    scheduler : str, optional
        Address of a running dask scheduler to send the runs to instead of a local cluster.
    progress : bool
        Progress over the runs on stderr (:func:`remprop.progress.progress_bar`).
    on_run : callable, optional
        ``on_run(run, report)`` after each run is on disk (its grid's ``SweepReport``).
    train : callable, optional
        ``train(config) -> TrainResult`` of every run (default the training core's; a
        module-level function when runs go to dask).
    """
    from concurrent.futures import ThreadPoolExecutor

    from remprop.progress import progress_bar

    from ..experiments import distributed
    from .trained_grid import run_trained_grid

    runs = design_runs(design)
    workers = check_count("workers", workers, 0)
    specs = [(run, run.spec(training, threads=threads)) for run in runs]  # all checked before any folder
    start = time.perf_counter()
    reports = []
    with progress_bar(len(runs), enabled=bool(progress), desc="lr sweep", unit="run") as bar:
        def one(run, spec, client=None):
            report = run_trained_grid(spec, Path(out) / run.folder, workers=0 if client is None else None,
                                      client=client, train=train)
            reports.append(report)
            bar.update(1)
            if on_run is not None:
                on_run(run, report)
            return report

        if (workers == 0 and scheduler is None) or not distributed.dask_installed():
            backend = "serial"
            for run, spec in specs:
                one(run, spec)
        else:
            with distributed.dask_client(scheduler=scheduler, workers=max(workers, 1)) as client:
                backend = f"dask ({distributed.describe(client, scheduler)})"
                with ThreadPoolExecutor(max(workers, distributed.worker_count(client), 1)) as pool:
                    for future in [pool.submit(one, run, spec, client) for run, spec in specs]:
                        future.result()
    computed = sum(r.cells_computed for r in reports)
    return LRSweepReport(len(runs), computed, len(runs) - computed, time.perf_counter() - start,
                         backend if computed else "none")


# -- reading ------------------------------------------------------------------------------------
def _run_record(run: LRSweepRun, spec, result: dict, theory: str) -> dict:
    """The outcome fields of one finished run (the family's reference comes later)."""
    from .result import TrainResult
    from .trained_diagram import run_verdict

    verdict = run_verdict(TrainResult.from_dict(result), theory=theory)
    init = result["init"]
    entropy = [float(v) for v in init["attention_entropy"]]
    cosine = [float(v) for v in init["token_cosine"]]
    return {"group": run.group, "folder": run.folder, "split": run.split, "norm": run.norm, "depth": run.depth,
            "width": run.width, "alpha": run.alpha, "beta": run.beta, "attention": run.attention, "lr": run.lr,
            "seq_len": spec.config.seq_len, "steps": spec.config.steps, "batch_size": spec.config.batch_size,
            "warmup_ratio": spec.config.warmup_ratio, "weight_decay": spec.config.weight_decay,
            "q0": 1.0 if spec.config.embedding_std is None else 2.0 * spec.config.embedding_std ** 2,
            "final_test_loss": verdict["final_test_loss"], "unigram_loss": verdict["unigram_loss"],
            "diverged": verdict["diverged"], "theory_phase": verdict["theory_phase"], "theory": verdict["theory"],
            "init_entropy_min": min(entropy) if entropy else math.nan,
            "init_cosine_final": cosine[-1] if cosine else math.nan,
            "arch": spec.run_config(0, 0, 0).arch.to_dict()}


def pending_runs(out, design=LR_SWEEP_DESIGN, *, training=None, threads=1) -> list:
    """``(run, spec)`` of every run of ``design`` without a valid record under ``out`` yet
    (a folder of other settings counts as pending: training it is refused by name)."""
    pending = []
    for run in design_runs(design):
        spec = run.spec(training, threads=threads)
        try:
            done = bool(_finished_cells(spec, Path(out) / run.folder))
        except ValueError:
            done = False
        if not done:
            pending.append((run, spec))
    return pending


def _finished_cells(spec, folder) -> dict:
    """The trained records of the run's one-cell grid in ``folder`` (empty when it has none yet; a
    folder of other settings is a ``ValueError``)."""
    from ..experiments.cell_store import MANIFEST_NAME
    from .trained_grid import load_trained_records

    return load_trained_records(spec, folder, require_all=False) if (folder / MANIFEST_NAME).is_file() else {}


def lr_sweep_outcomes(out, design=LR_SWEEP_DESIGN, *, training=None, threads=1, require_all=True,
                      theory="auto") -> list:
    """The outcome records of the sweep in folder ``out``, one per run, in design order.

    Each record (a JSON-ready dict): ``group``, ``folder``, ``split`` (:data:`FIT` or
    :data:`HELD_OUT`), ``norm``, ``depth``, ``width``, ``alpha``, ``beta``, ``attention``,
    ``lr``, ``seq_len``, ``steps``, ``final_test_loss`` ``L`` (NaN when diverged),
    ``unigram_loss`` ``U``, ``reference_loss`` ``R`` (the family's best), ``fraction``
    ``f = (U - L) / (U - R)``, ``trains`` (``f >= TRAINED_FRACTION`` and not diverged: the
    module's rule), ``diverged``; and for a ceiling to use, never for the label:
    ``theory_phase`` (the theory's phase at init, ``run_verdict``), ``theory``,
    ``init_entropy_min``, ``init_cosine_final`` (measured at init) and ``arch``
    (``Architecture.to_dict()`` with the run's alpha_SA).

    ``require_all``: a run not finished yet is a ``ValueError`` naming how many; when False
    the finished runs only (the references ``R`` then come from those).
    """
    from .trained_diagram import TRAINED_FRACTION, trained_fraction

    records, missing = [], []
    for run in design_runs(design):
        spec = run.spec(training, threads=threads)
        cells = _finished_cells(spec, Path(out) / run.folder)
        if not cells:
            missing.append(run.folder)
            continue
        (cell,) = cells.values()
        records.append(_run_record(run, spec, cell["results"][0], theory))
    if missing and require_all:
        raise ValueError(f"out: {len(missing)} of {len(records) + len(missing)} runs are not trained yet in {out} "
                         f"(first: {missing[0]})")
    families = {}
    for record in records:
        families.setdefault((record["norm"], record["depth"], record["width"]), []).append(record)
    for members in families.values():
        losses = np.asarray([r["final_test_loss"] for r in members], dtype=float)
        finite = losses[np.isfinite(losses)]
        reference = float(finite.min()) if finite.size else math.nan
        for record, loss in zip(members, losses):
            f = float(trained_fraction(loss, record["unigram_loss"], reference))
            record.update(reference_loss=reference, fraction=f,
                          trains=bool(f >= TRAINED_FRACTION and not record["diverged"]))
    return records


def save_outcomes(records, path, *, design=None, extra=None) -> Path:
    """Write the outcome table as strict JSON and return the path: format
    :data:`OUTCOMES_FORMAT`, the rule, ``runs`` (the records) and ``extra`` merged in; with
    ``design``, also ``runs_designed``, ``complete`` and ``missing`` (the folders of the
    design's runs that the records lack: a partial sweep's references ``R`` may still fall)."""
    from remprop._json import to_jsonable

    from ..experiments.cell_store import atomic_write_json
    from .trained_diagram import TRAINED_FRACTION

    records = list(records)
    table = {"format": OUTCOMES_FORMAT,
             "rule": f"trains when f = (U - L) / (U - R) >= {TRAINED_FRACTION} and not diverged; R = the smallest "
                     "final test loss of the sweep's runs of the same norm, depth and width",
             "runs": records}
    if design is not None:
        have = {r["folder"] for r in records}
        folders = [run.folder for run in design_runs(design)]
        missing = [f for f in folders if f not in have]
        table.update(runs_designed=len(folders), complete=not missing, missing=missing)
    table.update(extra or {})
    path = Path(path)
    atomic_write_json(path, to_jsonable(table))
    return path


# -- scoring a ceiling --------------------------------------------------------------------------
def auroc(score, label) -> float:
    """Area under the ROC curve of ``score`` for the boolean ``label``: the probability that a
    random positive scores above a random negative, ties counting one half.

    Computed as the Mann-Whitney rank statistic
    ``(sum of the positives' ranks - n+ (n+ + 1) / 2) / (n+ n-)`` with tied scores given
    their average rank (``-inf`` and ``inf`` are scores like any other). NaN when one class
    is empty; a NaN score is a ``ValueError``.
    """
    score = np.asarray(score, dtype=float).ravel()
    label = np.asarray(label, dtype=bool).ravel()
    if score.shape != label.shape:
        raise ValueError(f"score and label must have one length, got {score.size} and {label.size}")
    if np.isnan(score).any():
        raise ValueError("score must not hold NaN")
    positives, negatives = int(label.sum()), int((~label).sum())
    if positives == 0 or negatives == 0:
        return math.nan
    values, inverse, counts = np.unique(score, return_inverse=True, return_counts=True)
    below = np.cumsum(counts) - counts  # scores strictly smaller than each distinct value
    ranks = (below + (counts + 1) / 2.0)[inverse]  # 1-based average ranks
    return float((ranks[label].sum() - positives * (positives + 1) / 2.0) / (positives * negatives))


def _ceilings(records, ceiling) -> np.ndarray:
    """``ceiling(record)`` for each record, checked: a number > 0 (``inf`` allowed)."""
    if not callable(ceiling):
        raise ValueError(f"ceiling must be a callable record -> eta_max, got {type(ceiling).__name__}")
    out = []
    for record in records:
        value = ceiling(record)
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"ceiling returned {value!r} for run {record.get('folder')!r}, not a number") from None
        if not value > 0:  # NaN too
            raise ValueError(f"ceiling returned {value!r} for run {record.get('folder')!r}; eta_max must be > 0")
        out.append(value)
    return np.asarray(out, dtype=float)


def _phase_trainable(records) -> np.ndarray:
    from remprop.diagrams import PHASE_LABELS, TRAINABLE

    return np.asarray([r["theory_phase"] == PHASE_LABELS[TRAINABLE] for r in records], dtype=bool)


def _part(trains, predicted, score) -> dict:
    n = int(trains.size)
    table = {f"predicted {p}": {"trains": int(np.sum((predicted == pv) & trains)),
                                "fails": int(np.sum((predicted == pv) & ~trains))}
             for p, pv in (("trains", True), ("fails", False))}
    return {"runs": n, "correct": int(np.sum(predicted == trains)),
            "accuracy": float(np.mean(predicted == trains)) if n else math.nan,
            "auroc": auroc(score, trains) if n else math.nan, "confusion": table}


def evaluate_ceiling(records, ceiling, floor=None) -> dict:
    """Score a predicted learning-rate ceiling against the measured outcomes.

    A run is predicted to train when the theory's phase at initialisation is trainable
    (``record["theory_phase"]``) and ``lr <= eta_max``, ``eta_max = ceiling(record)`` (and
    ``lr >= eta_min = floor(record)`` when a floor is given: a window of rates). Its score is
    ``log(eta_max / lr)`` (with a floor, the smaller of that and ``log(lr / eta_min)``: the
    distance to the nearer edge) where the phase is trainable and ``-inf`` where it is not, so
    that "score >= 0" is the prediction. Nothing is fitted here (:func:`fit_constant`,
    :func:`fit_window`).

    Parameters
    ----------
    records : list of dict
        :func:`lr_sweep_outcomes`.
    ceiling : callable
        ``record -> eta_max`` (> 0; ``inf``: no ceiling).
    floor : callable, optional
        ``record -> eta_min`` (> 0): the smallest rate that trains within the run's budget.

    Returns
    -------
    dict
        ``fit``, ``held-out``, ``all``: ``runs``, ``correct``, ``accuracy``, ``auroc`` (of the
        score for ``trains``, :func:`auroc`; NaN when one class is missing) and ``confusion``
        (``{"predicted trains": {"trains": n, "fails": n}, "predicted fails": {...}}``);
        ``disagreements``: every run whose prediction is wrong, its record with ``eta_max``,
        ``score`` and ``predicted`` added.
    """
    records = list(records)
    if not records:
        raise ValueError("records: no run to score")
    eta = _ceilings(records, ceiling)
    lr = np.asarray([r["lr"] for r in records], dtype=float)
    phase_ok = _phase_trainable(records)
    with np.errstate(divide="ignore"):
        margin = np.log(eta / lr)
        if floor is not None:
            margin = np.minimum(margin, np.log(lr / _ceilings(records, floor)))
        score = np.where(phase_ok, margin, -np.inf)
    predicted = score >= 0
    trains = np.asarray([bool(r["trains"]) for r in records])
    split = np.asarray([r["split"] for r in records])
    out = {name: _part(trains[mask], predicted[mask], score[mask])
           for name, mask in ((FIT, split == FIT), (HELD_OUT, split == HELD_OUT), ("all", np.ones_like(trains)))}
    out["disagreements"] = [dict(r, eta_max=float(e), score=float(s), predicted=bool(p))
                            for r, e, s, p, t in zip(records, eta, score, predicted, trains) if p != t]
    return out


def fit_constant(records, ceiling, *, margin=math.log(10.0)) -> dict:
    r"""The multiplicative constant ``c`` of a ceiling that maximises the accuracy on the fit part.

    Run ``i`` (fit part, phase trainable) is predicted to train under ``c eta_max`` when
    ``log c >= b_i = log(lr_i / eta_max_i)``: the accuracy is a step function of ``log c``
    that changes only at the ``b_i``, so the search over ``log c`` is exact on the intervals
    between them. The maximising intervals are merged where they touch; of the widest merged
    range (an unbounded end clamped ``margin`` beyond the outermost ``b_i``, one decade by
    default) the geometric middle is returned: ties between constants go to the middle.
    Held-out runs are never read.

    Returns
    -------
    dict
        ``constant`` ``c``, ``log_range`` ``(lo, hi)`` of the chosen range (``-inf``/``inf``
        when unbounded), ``fit_correct``, ``fit_runs``, ``fit_accuracy``.
    """
    fit = [r for r in records if r["split"] == FIT]
    if not fit:
        raise ValueError("records: no run of the fit part")
    eta = _ceilings(fit, ceiling)
    lr = np.asarray([r["lr"] for r in fit], dtype=float)
    phase_ok = _phase_trainable(fit)
    trains = np.asarray([bool(r["trains"]) for r in fit])
    with np.errstate(divide="ignore"):
        steps = np.where(phase_ok, np.log(lr / eta), np.inf)  # predicted trains when log c >= step
    cuts = np.unique(steps[np.isfinite(steps)])
    # interval k: [cuts[k-1], cuts[k]) with cuts[-1] = -inf and cuts[m] = inf
    lows = np.concatenate([[-np.inf], cuts])
    highs = np.concatenate([cuts, [np.inf]])
    correct = np.asarray([int(np.sum((steps <= low) == trains)) for low in lows])
    best = correct.max()
    ranges = []
    for k in np.flatnonzero(correct == best):
        if ranges and ranges[-1][1] == lows[k]:
            ranges[-1][1] = highs[k]
        else:
            ranges.append([lows[k], highs[k]])
    if cuts.size == 0:
        lo, hi, mid = -math.inf, math.inf, 0.0
    else:
        clamp = lambda v: min(max(v, cuts[0] - margin), cuts[-1] + margin)  # noqa: E731
        lo, hi = max(ranges, key=lambda r: clamp(r[1]) - clamp(r[0]))
        mid = 0.5 * (clamp(lo) + clamp(hi))
    return {"constant": float(math.exp(mid)), "log_range": (float(lo), float(hi)), "fit_correct": int(best),
            "fit_runs": len(fit), "fit_accuracy": float(best / len(fit))}


def fit_window(records, scale) -> dict:
    r"""The window of rates ``c_lo scale <= lr <= c_hi scale`` that maximises the accuracy on the fit part.

    ``scale(record)`` is a rate the theory computes for the run (e.g. the stack part of
    :func:`remprop.theory.learning_rate_ceiling`); run ``i`` (fit part, phase trainable) sits at
    ``b_i = log(lr_i / scale_i)`` and is predicted to train when ``log c_lo <= b_i <= log c_hi``.
    The accuracy changes only where an edge crosses a ``b_i``, so every window with edges half-way
    between neighbouring ``b_i`` (or open) is tried: an exact search. Ties go to the narrowest
    window. Held-out runs are never read.

    Returns
    -------
    dict
        ``low``, ``high`` (``c_lo``, ``c_hi``; 0 and ``inf`` when open), ``fit_correct``, ``fit_runs``,
        ``fit_accuracy``.
    """
    fit = [r for r in records if r["split"] == FIT]
    if not fit:
        raise ValueError("records: no run of the fit part")
    b = np.log(np.asarray([r["lr"] for r in fit], dtype=float) / _ceilings(fit, scale))
    phase_ok = _phase_trainable(fit)
    trains = np.asarray([bool(r["trains"]) for r in fit])
    points = np.unique(b[phase_ok])
    edges = np.concatenate([[-np.inf], 0.5 * (points[1:] + points[:-1]), [np.inf]])
    best = None
    for i, lo in enumerate(edges):
        for hi in edges[i + 1:]:
            correct = int(np.sum((phase_ok & (b >= lo) & (b <= hi)) == trains))
            key = (correct, -(hi - lo))
            if best is None or key > best[0]:
                best = (key, lo, hi)
    (correct, _), lo, hi = best
    return {"low": float(np.exp(lo)), "high": float(np.exp(hi)), "fit_correct": correct, "fit_runs": len(fit),
            "fit_accuracy": correct / len(fit)}


def outcome_table_text(records) -> list:
    """The outcome table as text lines (one per run)."""
    lines = [f"{'run':<44} {'split':<8} {'L':>7} {'U':>7} {'R':>7} {'f':>6}  trains  theory at init"]
    for r in records:
        loss = "diverged" if r["diverged"] else f"{r['final_test_loss']:7.4f}"
        lines.append(f"{r['folder']:<44} {r['split']:<8} {loss:>7} {r['unigram_loss']:7.4f} "
                     f"{r['reference_loss']:7.4f} {r['fraction']:6.3f}  {'yes' if r['trains'] else 'no':<6}  "
                     f"{r['theory_phase']}")
    return lines


def load_outcomes(path) -> list:
    """The records of an outcome table written by :func:`save_outcomes`."""
    table = json.loads(Path(path).read_text(encoding="utf-8"))
    if not isinstance(table, dict) or table.get("format") != OUTCOMES_FORMAT:
        raise ValueError(f"path: {path} is not a learning-rate sweep outcome table ({OUTCOMES_FORMAT})")
    return [{k: (float(v) if isinstance(v, str) and v in ("nan", "inf", "-inf") else v) for k, v in r.items()}
            for r in table["runs"]]
