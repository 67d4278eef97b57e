"""The acceptance of issue 14, theory side: the theories of every measured case, the rule, the table.

For each case measured by :func:`remprop.validation.experiments.acceptance.run_acceptance`:

* ``"mean"`` -- :func:`remprop.theory.propagate` at the simulated T from the measured mean
  input state, as :func:`~remprop.validation.comparison.compare` does it
  (:func:`~remprop.validation.comparison.measured_input_theory`);
* ``"gram"`` -- :func:`remprop.theory.gram_state.propagate_gram` from each sequence's own
  input Gram matrix ``x x^T / d`` (rebuilt from (seed, sequence):
  :func:`~remprop.validation.experiments.acceptance.input_grams`), the curves averaged over the sequences;
* ``"sampled"`` -- the same with ``sampled=True``: ``draws`` single-initialisation chains
  instead of the mean Gram (docs/theory.md section 17.1); text cases only. The default
  theories are "mean" (before) and "sampled" (after).

The curves are cached, one record per cell, under ``<store>/theory/<hash>``
(:func:`compute_theories`). The rule of the issue: a case passes when at every layer
``1..L`` ``|theory - measured mean cosine| <= max(0.02, 2 s.e.)``, the standard error being
that of the mean over the initialisations (each seed's sequences averaged first: they share
its weights; :func:`~remprop.validation.agreement.acceptance_error`).
:func:`acceptance_table` gives one row per (case, depth, theory), :func:`acceptance_markdown`
the table of docs/validation.md.

Reference: docs/validation.md, "Acceptance on real text (issue 14 settings)"; issue 14.
"""
from __future__ import annotations

import hashlib
import multiprocessing
import os
import time
from pathlib import Path

import numpy as np

from remprop.theory.checks import check_choice, check_count

from .acceptance import ACCEPTANCE_CASES, ACCEPTANCE_FORMAT, AcceptanceCase, CaseMeasurement, input_grams, \
    open_existing_store
from .cell_runner import run_cells
from .cell_store import CellStore, json_sha256
from ..agreement import ACCEPTANCE_TOLERANCE, STANDARD_ERRORS, acceptance_error
from ..comparison import measured_input_theory

__all__ = ["THEORIES", "THEORY_FORMAT", "available_theories",
           "compute_theories", "acceptance_table", "acceptance_markdown"]

#: Theories :func:`acceptance_table` can set against the measurements.
THEORIES = ("mean", "gram", "sampled")
#: Inputs the Gram-matrix theory is computed for: real text. Gaussian tokens are a simplex up to
#: O(1/sqrt(d)) pair fluctuations, and their theory is the mean-cosine maps (docs/theory.md section 17).
GRAM_INPUTS = ("text",)
#: Format tag of the theory store's manifest and records ("-2": the Gram theories of sequence n
#: draw from seed n; before, every sequence drew from seed 0, so their Monte Carlo errors did not
#: average out over the sequences; other records are computed afresh).
THEORY_FORMAT = ACCEPTANCE_FORMAT + "-theory-2"


# -- the theories -------------------------------------------------------------------------
def _gram_module():
    """:mod:`remprop.theory.gram_state`, or None where it does not exist."""
    try:
        from remprop.theory import gram_state
    except ImportError as err:
        if err.name != "remprop.theory.gram_state":
            raise
        return None
    return gram_state


def available_theories() -> tuple:
    """The default theories that exist here: "mean" and "sampled" ("sampled" needs :mod:`remprop.theory.gram_state`)."""
    return ("mean", "sampled") if _gram_module() is not None else ("mean",)


def _check_theories(theories) -> tuple:
    theories = (theories,) if isinstance(theories, str) else tuple(theories)
    if not theories or len(set(theories)) != len(theories):
        raise ValueError(f"theories must name distinct theories among {', '.join(map(repr, THEORIES))}, "
                         f"got {theories!r}")
    for theory in theories:
        check_choice("theories", theory, THEORIES)
    if ("gram" in theories or "sampled" in theories) and _gram_module() is None:
        raise ValueError("theories: 'gram' and 'sampled' need remprop.theory.gram_state, which is not installed here")
    return theories


def _input_statistics(grams: np.ndarray) -> tuple:
    """``(q, mean cosine)`` of each Gram matrix (as :func:`~remprop.validation.measurements.token_statistics`)."""
    n = grams.shape[-1]
    q = np.trace(grams, axis1=-2, axis2=-1) / n
    norms = np.sqrt(np.diagonal(grams, axis1=-2, axis2=-1))
    cosine = ((grams / (norms[..., :, None] * norms[..., None, :])).sum(axis=(-2, -1)) - n) / (n * (n - 1))
    return q, cosine


def _sequence_grams(case, settings, layer0, sequence=None):
    """Rebuilt input Grams of a case (all, or one ``sequence`` index), checked against the measured layer 0."""
    seeds, per_seed = settings["seeds"], settings["sequences"]
    chosen = range(len(seeds) * per_seed) if sequence is None else [sequence]
    grams = []
    for seed in dict.fromkeys(seeds[n // per_seed] for n in chosen):
        grams_of_seed = input_grams(case.inputs, seeds=[seed], sequences=per_seed, seq_len=settings["seq_len"],
                                    width=settings["width"], dtype=settings["dtype"])
        grams += [grams_of_seed[n % per_seed] for n in chosen if seeds[n // per_seed] == seed]
    grams = np.stack(grams)
    q, cosine = _input_statistics(grams)
    q_measured = np.asarray(layer0["q"], dtype=float)[list(chosen)]
    cosine_measured = np.asarray(layer0["cosine"], dtype=float)[list(chosen)]
    # both sides are float64 sums of the same float32 products (up to the summation order),
    # which agree to ~1e-12: 1e-6 flags inputs that are not the measured ones, not rounding
    if not (np.allclose(q, q_measured, rtol=1e-6, atol=0) and np.allclose(cosine, cosine_measured, rtol=0, atol=1e-6)):
        raise ValueError(f"store: the rebuilt inputs of case {case.key!r} do not reproduce its measured layer-0 "
                         "statistics (measured with another version of the inputs?); measure it again")
    return grams


def _theory_record(key, theory, case_dict, settings, layer0, sequence, draws, measurement_checksum,
                   manifest_sha256):
    """The theory store record of one (case, theory[, sequence]) (module level: run by :func:`run_cells`)."""
    case = AcceptanceCase.from_dict(case_dict)
    arch = case.architecture(settings["seq_len"])
    gram_state = _gram_module()
    distance = getattr(gram_state, "simplex_distance", None) if gram_state is not None else None
    grams = None
    if theory in ("gram", "sampled") or distance is not None:
        grams = _sequence_grams(case, settings, layer0, sequence)
    curve = se = error = None
    try:  # a theory that refuses the case (a ValueError) is a result: the table shows its message
        if theory == "mean":
            _, trajectory, _ = measured_input_theory(arch, case.beta, case.depth, float(np.mean(layer0["q"])),
                                                     float(np.mean(layer0["rho"])), settings["dtype"])
            curve, se = np.asarray(trajectory.rho, dtype=float), np.zeros(case.depth + 1)
        else:
            # seed: the sequence's index, so the sequences' Monte Carlo errors are independent and
            # the mean curve's standard error is sqrt(sum se^2) / n (theory_se)
            trajectory = gram_state.propagate_gram(arch, case.beta, grams[0], case.depth, draws=draws, seed=sequence,
                                                   sampled=theory == "sampled")
            curve = np.asarray(trajectory.mean_cosine, dtype=float)
            se = np.asarray(trajectory.mean_cosine_se, dtype=float)
        if not (np.isfinite(curve).all() and np.isfinite(se).all()):
            raise ValueError(f"not finite at layers {np.flatnonzero(~np.isfinite(curve + se)).tolist()[:5]}")
    except ValueError as err:
        curve = se = None
        error = " ".join(str(err).split())
    result = {"theory": theory, "sequence": sequence, "curve": None if curve is None else curve.tolist(),
              "se": None if se is None else se.tolist(), "error": error,
              "simplex_distance": None if distance is None else float(np.mean([distance(g) for g in grams])),
              "measurement_checksum": measurement_checksum}
    return {"format": THEORY_FORMAT, "key": key, "manifest_sha256": manifest_sha256,
            "checksum": json_sha256(result), "result": result}


def _theory_code_sha256() -> str:
    """SHA-256 of every source file of :mod:`remprop.theory`: cached theory curves of other code are not reused."""
    import remprop.theory

    digest = hashlib.sha256()
    root = Path(remprop.theory.__file__).parent
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _theory_store(store: CellStore, draws: int, current: dict) -> CellStore:
    """The theory folder ``<store>/theory/<hash>`` of these measurements, draws and theory code.

    ``current`` maps case keys to the checksum of their measurement: a theory record of an
    older measurement of its case is invalid (and computed again).
    """
    manifest = {"format": THEORY_FORMAT, "measurements": json_sha256(store.manifest), "draws": draws,
                "theory_code": _theory_code_sha256()}
    manifest_sha256 = json_sha256(manifest)

    def problem(key, record):
        if record.get("format") != THEORY_FORMAT:
            return f"format {record.get('format')!r} is not {THEORY_FORMAT!r}"
        if record.get("key") != key:
            return f"it is the record of {record.get('key')!r}"
        if record.get("manifest_sha256") != manifest_sha256:
            return "it was written for another theory manifest"
        result = record.get("result")
        if record.get("checksum") != json_sha256(result) or not isinstance(result, dict):
            return "the checksum of its result does not match"
        case_key = key.split("__")[0]
        if case_key in current and result.get("measurement_checksum") != current[case_key]:
            return "it is the theory of an older measurement of its case"
        return None

    return CellStore(store.directory / "theory" / manifest_sha256[:16], manifest, check=problem)


def _applies(theory, inputs) -> bool:
    """Whether ``theory`` is computed for cases of ``inputs`` (the Gram theory: :data:`GRAM_INPUTS`)."""
    return theory == "mean" or inputs in GRAM_INPUTS


def _theory_cells(records: dict, theories, draws, manifest_sha256) -> dict:
    cells = {}
    for case_key, record in records.items():
        result = record["result"]
        layer0 = {name: [row[0] for row in result["trace"][name]] for name in ("q", "rho", "cosine")}
        samples = len(layer0["q"])
        for theory in theories:
            if not _applies(theory, result["case"]["inputs"]):
                continue
            sequences = [None] if theory == "mean" else range(samples)
            for sequence in sequences:
                key = f"{case_key}__{theory}" + ("" if sequence is None else f"__s{sequence:03d}")
                cells[key] = (key, theory, result["case"], result["settings"], layer0, sequence, draws,
                              record["checksum"], manifest_sha256)
    return cells


def _theory_worker(directory, cells_of, theories, draws):  # pragma: no cover - runs in a child process
    """One of the processes of :func:`compute_theories` without dask: claims cells until none is left."""
    store = open_existing_store(directory)
    records = store.read_all()
    current = {key: record["checksum"] for key, record in records.items()}
    theory_store = _theory_store(store, draws, current)
    cells = _theory_cells({k: records[k] for k in cells_of}, theories, draws, json_sha256(theory_store.manifest))
    run_cells(theory_store, cells, _theory_record, workers=0)


#: Environment of the child processes of :func:`compute_theories`: one BLAS / OpenMP thread each.
SINGLE_THREAD_ENVIRONMENT = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                             "NUMBA_NUM_THREADS": "1"}


def compute_theories(store, theories=("mean", "sampled"), *, draws=8, workers=None, progress=None):
    """Compute (or reuse) the theory curves of every measured case; one record per cell.

    Cells: one per case for "mean", one per (case, sequence) for "gram" and "sampled", stored under
    ``<store>/theory/<hash>`` (the hash of the measurements' manifest, ``draws`` and the
    source of :mod:`remprop.theory`: other code gets a fresh folder), so an interrupted
    table resumes and concurrent runs share the cells.

    Parameters
    ----------
    store : CellStore, str or Path
        The acceptance folder.
    theories : sequence of {"mean", "gram", "sampled"}
    draws : int
        Monte Carlo draws per attention layer of the Gram theory.
    workers : int, optional
        Processes (default one per core; 0: this process). With dask, a LocalCluster
        (:func:`~remprop.validation.experiments.cell_runner.run_cells`); without it, ``workers`` child
        processes that share the folder's cells through its claims, one BLAS thread each.
    progress : callable, optional
        ``progress(text)``: one line at the start and one at the end.

    Returns
    -------
    CellStore
        The theory store.
    """
    from . import distributed

    theories = _check_theories(theories)
    draws = check_count("draws", draws, 1)
    if not isinstance(store, CellStore):
        store = open_existing_store(store)
    records = store.read_all()
    current = {key: record["checksum"] for key, record in records.items()}
    theory_store = _theory_store(store, draws, current)
    cells = _theory_cells(records, theories, draws, json_sha256(theory_store.manifest))
    missing = len(set(cells) - theory_store.done())
    workers = (os.cpu_count() or 1) if workers is None else check_count("workers", workers, 0)
    workers = min(workers, missing)
    say = progress if progress is not None else (lambda text: None)
    say(f"theory ({', '.join(theories)}; {draws} draws): {len(cells)} cells, {len(cells) - missing} already in "
        f"{theory_store.directory}; {workers or 'no'} worker process(es)")
    start = time.perf_counter()
    if missing and workers > 0 and not distributed.dask_installed():
        context = multiprocessing.get_context("spawn")
        saved = {name: os.environ.get(name) for name in SINGLE_THREAD_ENVIRONMENT}
        os.environ.update(SINGLE_THREAD_ENVIRONMENT)
        try:
            children = [context.Process(target=_theory_worker, args=(str(store.directory), sorted(records),
                                                                     theories, draws)) for _ in range(workers)]
            for child in children:
                child.start()
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
        for child in children:
            child.join()
        failed = [child.exitcode for child in children if child.exitcode != 0]
        if failed:
            raise RuntimeError(f"{len(failed)} theory worker process(es) failed (exit codes {failed})")
    # with dask a LocalCluster of `workers`; else this process picks up whatever the children left
    run_cells(theory_store, cells, _theory_record, workers=workers if distributed.dask_installed() else 0)
    say(f"theory: done in {time.perf_counter() - start:.1f} s")
    return theory_store


# -- the rule and the table ---------------------------------------------------------------
def acceptance_table(store, theories=("mean", "sampled"), *, draws=8, workers=None, tolerance=ACCEPTANCE_TOLERANCE,
                     standard_errors=STANDARD_ERRORS, require_all=False, progress=None) -> list:
    """Theory against the measurements of every case in a store, at each reported depth.

    Parameters
    ----------
    store : CellStore, str or Path
        The acceptance folder (:func:`~remprop.validation.experiments.acceptance.run_acceptance`), or its store.
    theories : sequence of {"mean", "gram", "sampled"}
        ``"mean"``: :func:`remprop.theory.propagate` at the simulated T from the measured
        mean input state (:func:`~remprop.validation.comparison.measured_input_theory`);
        ``"gram"``: ``remprop.theory.gram_state.propagate_gram`` from each sequence's input
        Gram (:func:`~remprop.validation.experiments.acceptance.input_grams`), the curves averaged over the sequences (needs that
        module); ``"sampled"``: the same with ``sampled=True`` (docs/theory.md section 17.1).
        Default: "mean" (before) and "sampled" (after). Computed by :func:`compute_theories`
        (reused when on disk).
    draws : int
        Monte Carlo draws per attention layer of the Gram theory.
    workers : int, optional
        Processes computing the theories (:func:`compute_theories`).
    tolerance, standard_errors
        The rule (:func:`~remprop.validation.agreement.acceptance_error`).
    require_all : bool
        A ``ValueError`` when a case of :data:`~remprop.validation.experiments.acceptance.ACCEPTANCE_CASES` is missing.
    progress : callable, optional
        ``progress(text)`` lines.

    Returns
    -------
    list of dict
        One row per (case, depth L, theory): ``key``, ``inputs``, ``norm``, ``beta``,
        ``alpha``, ``depth``, ``theory``, the fields of :func:`~remprop.validation.agreement.acceptance_error`,
        ``theory_se`` (Monte Carlo s.e. of the theory at the max-error layer; 0 for "mean"),
        ``samples``, ``device``, ``simplex_distance`` (mean over the sequences of
        ``remprop.theory.gram_state.simplex_distance`` of the input Gram; None without it)
        and ``error``: None, or the message of a theory that refused the case (its row
        fails, with None for the numbers).

    References
    ----------
    Issue 14 (acceptance); docs/validation.md, "Acceptance on real text (issue 14 settings)".
    """
    theories = _check_theories(theories)
    if not isinstance(store, CellStore):
        store = open_existing_store(store)
    records = store.read_all()
    if require_all:
        missing = [case.key for case in ACCEPTANCE_CASES if case.key not in records]
        if missing:
            raise ValueError(f"store: {len(missing)} of {len(ACCEPTANCE_CASES)} cases are not measured yet in "
                             f"{store.directory} (first: {missing[0]})")
    theory_records = compute_theories(store, theories, draws=draws, workers=workers, progress=progress).read_all()
    order = {case.key: i for i, case in enumerate(ACCEPTANCE_CASES)}
    rows = []
    for key in sorted(records, key=lambda k: (order.get(k, len(order)), k)):
        measurement = CaseMeasurement.from_dict(records[key]["result"])
        case = measurement.case
        samples = measurement.cosine.shape[0]
        for theory in theories:
            if not _applies(theory, case.inputs):
                continue
            if theory == "mean":
                parts = [theory_records[f"{key}__mean"]["result"]]
            else:
                parts = [theory_records[f"{key}__{theory}__s{n:03d}"]["result"] for n in range(samples)]
            errors = [part["error"] for part in parts if part.get("error")]
            distances = [part["simplex_distance"] for part in parts if part["simplex_distance"] is not None]
            common = {"key": key, "inputs": case.inputs, "norm": case.norm, "beta": case.beta, "alpha": case.alpha,
                      "theory": theory, "samples": samples, "device": measurement.settings["device"],
                      "simplex_distance": float(np.mean(distances)) if distances else None, "error": None}
            if errors:  # the theory refused the case: a failing row that says why
                failed = {"max_error": None, "layer": None, "two_se": None, "passed": False, "worst_layer": None,
                          "worst_ratio": None, "worst_error": None, "worst_allowed": None, "tolerance": tolerance,
                          "standard_errors": standard_errors, "seeds": None, "theory_se": None,
                          "error": f"{len(errors)} of {len(parts)} curve(s) failed: {errors[0]}"}
                rows += [{**common, "depth": depth, **failed} for depth in case.depths]
                continue
            curve = np.mean([part["curve"] for part in parts], axis=0)
            curve_se = np.sqrt(np.sum(np.square([part["se"] for part in parts]), axis=0)) / len(parts)
            for depth in case.depths:
                result = acceptance_error(curve, measurement.cosine, depth=depth, tolerance=tolerance,
                                          standard_errors=standard_errors,
                                          sequences_per_seed=int(measurement.settings["sequences"]))
                rows.append({**common, "depth": depth, **result, "theory_se": float(curve_se[result["layer"]])})
    return rows


def acceptance_markdown(table) -> str:
    """The acceptance table in Markdown: one line per (case, depth, theory), then the pass counts.

    Columns: inputs, norm, beta, alpha_SA, L, theory, max error (over layers 1..L), its
    layer, 2 s.e. of the measured mean there, pass (where not: the layer where the rule
    fails worst), and the input's simplex distance when the table has it.
    """
    table = list(table)
    with_distance = any(row.get("simplex_distance") is not None for row in table)
    head = ["inputs", "norm", "beta", "alpha_SA", "L", "theory", "max error", "layer", "2 s.e.", "pass"]
    if with_distance:
        head.append("simplex distance")
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join(" --- " for _ in head) + "|"]
    for row in table:
        cells = [row["inputs"], f"{row['norm']}-LN", f"{row['beta']:g}", f"{row['alpha']:g}", str(row["depth"]),
                 row["theory"]]
        if row.get("error"):
            cells += ["-", "-", "-", f"**no** (theory failed: {row['error'].replace('|', '/')})"]
        else:
            cells += [f"{row['max_error']:.4f}", str(row["layer"]), f"{row['two_se']:.4f}",
                      "yes" if row["passed"] else f"**no** (layer {row['worst_layer']})"]
        if with_distance:
            value = row.get("simplex_distance")
            cells.append("-" if value is None else f"{value:.3g}")
        lines.append("| " + " | ".join(cells) + " |")
    counts = {}
    for row in table:
        passed, total = counts.get(row["theory"], (0, 0))
        counts[row["theory"]] = (passed + bool(row["passed"]), total + 1)
    summary = "; ".join(f"{theory}: {p} of {n} pass" for theory, (p, n) in counts.items())
    return "\n".join(lines) + ("\n\n" + summary + "\n" if summary else "\n")
