"""The acceptance of issue 14, measurement side: the cases, their simulation and their store.

Every case of :data:`ACCEPTANCE_CASES` (inputs, norm, beta, alpha_SA, depths) is simulated
once at ``seeds x sequences`` input sequences (:func:`measure_case`); its per-sequence,
per-layer measured mean token cosine is set against the theories by
:mod:`remprop.validation.experiments.acceptance_table`.

Depths. The weights of layer ``l`` of seed ``s`` come from their own stream ``(s, weights, l)``
(:meth:`~remprop.validation.simulator.SimulatedStack.weights`), so the first 12 or 30 layers of
a 60-layer stack *are* the 12- and 30-layer stacks; the theory's first layers do not depend
on the depth either. Each (inputs, norm, beta, alpha) is therefore simulated once, at its
deepest depth, and reported for every depth of ``AcceptanceCase.depths`` (the maximum
over layers ``1..L``).

Inputs. The input sequences are drawn on the CPU (:func:`case_inputs`; the weights on the
simulation's device), so that the table can rebuild each sequence's input Gram matrix on any
machine (:func:`input_grams`); the table checks the rebuilt inputs against the stored
layer-0 measurements.

Store. One JSON record per case in a folder (:class:`~remprop.validation.experiments.cell_store.CellStore`:
atomic files, a manifest of the sizes, claims so that concurrent runs share the work), run by
:func:`~remprop.validation.experiments.cell_runner.run_cells`; a rerun computes only the missing cases
(:func:`run_acceptance`).

Reference: docs/validation.md, "Acceptance on real text (issue 14 settings)";
Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(d, e).
"""
from __future__ import annotations

import contextlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from remprop.theory import Architecture
from remprop.theory.checks import as_float_array, check_choice, check_count, check_seeds
from remprop.theory.rem.checks import check_seq_len

from ..backend import check_positive_int, resolve_device, resolve_dtype, torch_threads
from .cell_runner import run_cells
from .cell_store import MANIFEST_NAME, CellStore, json_sha256
from ..inputs import INPUT_KINDS, input_batches
from ..settings import SimulationSettings
from ..simulator import SimulatedStack, StackTrace

__all__ = ["ACCEPTANCE_FORMAT", "ACCEPTANCE_CASES", "GAUSSIAN_Q0", "GAUSSIAN_RHO0", "AcceptanceCase",
           "CaseMeasurement", "case_inputs", "input_grams", "measure_case", "open_store", "open_existing_store",
           "run_acceptance"]

#: Format tag of the store's manifest and of every case record.
ACCEPTANCE_FORMAT = "remprop-acceptance-1"
#: Mean squared norm and cosine of the Gaussian input tokens (as :func:`~remprop.validation.comparison.compare`).
GAUSSIAN_Q0, GAUSSIAN_RHO0 = 1.0, 0.0


def _number_tag(value: float) -> str:
    return f"{value:g}".replace(".", "p").replace("-", "m").replace("+", "")


@dataclass(frozen=True)
class AcceptanceCase:
    """One simulated setting of the acceptance, reported at several depths.

    Attributes
    ----------
    inputs : {"text", "synthetic"}
        Embedded pydoc text, or Gaussian tokens with ``q0 = 1, rho0 = 0``.
    norm : {"post", "pre"}
        Block order (BERT defaults otherwise: :class:`remprop.theory.Architecture`).
    beta : float
        Query/key scale of the model.
    alpha : float
        ``alpha_sa``, the skip strength around attention (``remprop --alpha``);
        ``alpha_mlp`` stays 1.
    depths : tuple of int
        Depths L reported (increasing); the stack is simulated at the last.
    """

    inputs: str
    norm: str
    beta: float
    alpha: float
    depths: tuple = (12, 30, 60)

    def __post_init__(self):
        check_choice("inputs", self.inputs, INPUT_KINDS)
        check_choice("norm", self.norm, ("post", "pre", "none"))
        object.__setattr__(self, "beta", float(as_float_array("beta", self.beta, positive=True)))
        object.__setattr__(self, "alpha", float(as_float_array("alpha", self.alpha, nonnegative=True)))
        depths = tuple(check_count("depths", d, 1) for d in np.atleast_1d(self.depths).tolist())
        if not depths or list(depths) != sorted(set(depths)):
            raise ValueError(f"depths must be distinct increasing integers >= 1, got {self.depths!r}")
        object.__setattr__(self, "depths", depths)

    @property
    def depth(self) -> int:
        """The simulated depth (the deepest reported)."""
        return self.depths[-1]

    @property
    def key(self) -> str:
        """File stem of the case's record: ``<inputs>_<norm>_b<beta>_a<alpha>_L<depth>`` ('.' -> 'p')."""
        return f"{self.inputs}_{self.norm}_b{_number_tag(self.beta)}_a{_number_tag(self.alpha)}_L{self.depth}"

    def architecture(self, seq_len) -> Architecture:
        """The theory's architecture at the simulated T (finite-T attention maps)."""
        return Architecture(norm=self.norm, alpha_sa=self.alpha, seq_len=check_seq_len(seq_len, allow_none=False))

    def to_dict(self) -> dict:
        return {"inputs": self.inputs, "norm": self.norm, "beta": self.beta, "alpha": self.alpha,
                "depths": list(self.depths)}

    @classmethod
    def from_dict(cls, data: dict) -> "AcceptanceCase":
        return cls(data["inputs"], data["norm"], data["beta"], data["alpha"], tuple(data["depths"]))


def _cases():
    cases = []
    for inputs in ("text", "synthetic"):
        for norm in ("post", "pre"):
            for alpha in (1.0, 1.3):
                cases += [AcceptanceCase(inputs, norm, beta, alpha) for beta in (0.5, 1.0, 1.4)]
                cases.append(AcceptanceCase(inputs, norm, 3.0, alpha, depths=(12,)))
    return tuple(cases)


#: The settings of issue 14: text and Gaussian inputs, post- and pre-LN, alpha_sa in {1, 1.3},
#: beta in {0.5, 1, 1.4} at depths 12, 30, 60 (one 60-layer simulation each) and beta 3 at 12.
ACCEPTANCE_CASES = _cases()


def _case_of(case) -> AcceptanceCase:
    if isinstance(case, AcceptanceCase):
        return case
    if isinstance(case, dict):
        return AcceptanceCase.from_dict(case)
    raise ValueError(f"case must be an AcceptanceCase, got {type(case).__name__}")


# -- inputs -------------------------------------------------------------------------------
def case_inputs(inputs, seed, *, sequences, seq_len, width, dtype="float32") -> torch.Tensor:
    """The ``sequences`` input sequences of ``seed``, drawn on the CPU: shape (sequences, T, d).

    :func:`~remprop.validation.inputs.input_batches` on the CPU (text windows through the
    seed's embedding tables, or Gaussian tokens with ``q0 = 1, rho0 = 0``): the same numbers
    on every machine, whatever device the stack runs on.
    """
    batches = input_batches(inputs, seed=seed, sequences=sequences, seq_len=seq_len, width=width,
                            q0=GAUSSIAN_Q0, rho0=GAUSSIAN_RHO0, dtype=dtype, device="cpu")
    return torch.cat([batch.tokens for batch in batches])


def input_grams(inputs, *, seeds, sequences, seq_len, width, dtype="float32") -> np.ndarray:
    r"""Input Gram matrices ``G = x x^T / d`` (float64) of every sequence, seed-major.

    .. math:: G_{ij} = \frac{1}{d} \sum_k x_{ik} x_{jk}

    Parameters
    ----------
    inputs : {"text", "synthetic"}
    seeds : int or sequence of int
    sequences, seq_len, width : int
    dtype : {"float32", "float64"}
        Precision the tokens are drawn in (as the simulation's).

    Returns
    -------
    ndarray, shape (len(seeds) * sequences, T, T)

    References
    ----------
    docs/theory.md section 2 (order parameters q, p of the Gram matrix).
    """
    grams = []
    for seed in check_seeds(seeds):
        x = case_inputs(inputs, seed, sequences=sequences, seq_len=seq_len, width=width,
                        dtype=dtype).to(torch.float64)
        grams.append((x @ x.transpose(1, 2) / width).numpy())
    return np.concatenate(grams)


# -- measurements -------------------------------------------------------------------------
@dataclass(frozen=True)
class CaseMeasurement:
    """The simulated stacks of one case: per-sequence statistics of every layer.

    Attributes
    ----------
    case : AcceptanceCase
    settings : dict
        ``width``, ``seq_len``, ``seeds`` (list), ``sequences``, ``dtype``, ``device``.
    trace : StackTrace
        ``len(seeds) * sequences`` rows (seed-major), ``case.depth + 1`` layers.
    elapsed : float
        Seconds spent simulating.
    """

    case: AcceptanceCase
    settings: dict
    trace: StackTrace
    elapsed: float = 0.0

    @property
    def cosine(self) -> np.ndarray:
        """Measured mean pairwise token cosine, shape (sequences, depth + 1)."""
        return self.trace.cosine

    def to_dict(self) -> dict:
        return {"case": self.case.to_dict(), "settings": self.settings, "elapsed_s": self.elapsed,
                "trace": {k: np.asarray(v).tolist() for k, v in self.trace.as_dict().items()}}

    @classmethod
    def from_dict(cls, data: dict) -> "CaseMeasurement":
        trace = StackTrace(**{k: np.asarray(v, dtype=float) for k, v in data["trace"].items()})
        return cls(AcceptanceCase.from_dict(data["case"]), dict(data["settings"]), trace,
                   float(data.get("elapsed_s", 0.0)))


def _sizes(width, seq_len, seeds, sequences, dtype) -> dict:
    return {"width": check_positive_int("width", width, 2), "seq_len": check_seq_len(seq_len, allow_none=False),
            "seeds": list(check_seeds(seeds)), "sequences": check_positive_int("sequences", sequences),
            "dtype": str(resolve_dtype(dtype)).replace("torch.", "")}


def measure_case(case, *, width=720, seq_len=512, seeds=4, sequences=2, device=None,
                 dtype="float32") -> CaseMeasurement:
    """Simulate one case: ``seeds`` initialisations, ``sequences`` inputs each, ``case.depth`` blocks.

    The sequences of a seed go through its stack in one batch (:func:`case_inputs`, drawn on
    the CPU and moved to ``device``), under ``torch.no_grad``; every layer's token and
    attention statistics are measured (:func:`~remprop.validation.simulator.trace_stack`).

    Parameters
    ----------
    case : AcceptanceCase
    width, seq_len : int
        Model width d and tokens T.
    seeds : int or sequence of int
        A count (seeds 0..n-1) or the seeds.
    sequences : int
        Input sequences per seed.
    device : str or torch.device, optional
        Default CUDA when available.
    dtype : {"float32", "float64"}

    Returns
    -------
    CaseMeasurement

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(d, e) (the measured mean cosine).
    """
    case = _case_of(case)
    sizes = _sizes(width, seq_len, seeds, sequences, dtype)
    sim = SimulationSettings(width=sizes["width"], seq_len=sizes["seq_len"], dtype=sizes["dtype"], device=device)
    device = sim.device
    arch = case.architecture(sizes["seq_len"])
    start = time.perf_counter()
    traces = []
    for seed in sizes["seeds"]:
        stack = SimulatedStack(arch, case.beta, case.depth, sim=sim, seed=seed)
        x = case_inputs(case.inputs, seed, sequences=sizes["sequences"], seq_len=sizes["seq_len"],
                        width=sizes["width"], dtype=sizes["dtype"])
        traces.append(stack.trace(x))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - start
    return CaseMeasurement(case, {**sizes, "device": str(device)}, StackTrace.concatenate(traces), elapsed)


# -- the store ----------------------------------------------------------------------------
def _manifest(sizes: dict) -> dict:
    return {"format": ACCEPTANCE_FORMAT, **sizes, "gaussian_q0": GAUSSIAN_Q0, "gaussian_rho0": GAUSSIAN_RHO0,
            "inputs_drawn_on": "cpu"}


def _record_problem(key, record, manifest_sha256, cases_by_key):
    """Why ``record`` is not a valid record of case ``key`` of this store (None when it is)."""
    if record.get("format") != ACCEPTANCE_FORMAT:
        return f"format {record.get('format')!r} is not {ACCEPTANCE_FORMAT!r}"
    if record.get("key") != key:
        return f"it is the record of case {record.get('key')!r}"
    if record.get("manifest_sha256") != manifest_sha256:
        return "it was written for another store's manifest"
    if record.get("checksum") != json_sha256(record.get("result")):
        return "the checksum of its result does not match"
    try:
        measurement = CaseMeasurement.from_dict(record["result"])
    except (KeyError, TypeError, ValueError) as err:
        return f"its result is not a case measurement ({err})"
    if measurement.case.key != key or (key in cases_by_key and cases_by_key[key] != measurement.case):
        return f"its case {measurement.case.key!r} is not {key!r}"
    rows = len(measurement.settings.get("seeds", ())) * measurement.settings.get("sequences", 0)
    if measurement.cosine.shape != (rows, measurement.case.depth + 1):
        return f"its cosines have shape {measurement.cosine.shape}, not {(rows, measurement.case.depth + 1)}"
    return None


def open_store(directory, *, width=720, seq_len=512, seeds=4, sequences=2, dtype="float32", create=True,
               cases=ACCEPTANCE_CASES) -> CellStore:
    """The acceptance folder for these sizes: a :class:`~remprop.validation.experiments.cell_store.CellStore`.

    Its manifest pins the sizes (width, T, seeds, sequences, dtype): a folder holding another
    size is refused (``ValueError`` naming the first setting that differs). Records are
    checked on reading (format, key, manifest hash, checksum, shape).
    """
    manifest = _manifest(_sizes(width, seq_len, seeds, sequences, dtype))
    manifest_sha256 = json_sha256(json.loads(json.dumps(manifest, sort_keys=True)))
    by_key = {case.key: case for case in cases}
    return CellStore(directory, manifest, create=create,
                     check=lambda key, record: _record_problem(key, record, manifest_sha256, by_key))


def open_existing_store(directory) -> CellStore:
    """The acceptance store in ``directory``, opened with its own manifest (``ValueError`` when there is none)."""
    path = Path(directory) / MANIFEST_NAME
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        raise ValueError(f"store: {directory} holds no acceptance measurements (no readable {MANIFEST_NAME})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != ACCEPTANCE_FORMAT:
        raise ValueError(f"store: {path} is not an acceptance manifest ({ACCEPTANCE_FORMAT})")
    sizes = {k: manifest[k] for k in ("width", "seq_len", "seeds", "sequences", "dtype")}
    return open_store(directory, create=False, cases=(), **sizes)


def _measure_record(case_dict, sizes, device, manifest_sha256):
    """The store record of one case (module level: the function :func:`run_cells` calls)."""
    case = AcceptanceCase.from_dict(case_dict)
    measurement = measure_case(case, device=device, **sizes)
    result = measurement.to_dict()
    return {"format": ACCEPTANCE_FORMAT, "key": case.key, "manifest_sha256": manifest_sha256,
            "checksum": json_sha256(result), "result": result}


def run_acceptance(directory, *, cases=ACCEPTANCE_CASES, width=720, seq_len=512, seeds=4, sequences=2,
                   device=None, dtype="float32", threads=None, progress=None):
    """Measure every case not yet in the folder ``directory``, one record per case.

    Concurrent runs on one folder share the cases (claims); a rerun computes only the
    missing or damaged ones (:func:`~remprop.validation.experiments.cell_runner.run_cells`, in this
    process).

    Parameters
    ----------
    directory : str or Path
        The store (created if missing; one with other sizes is refused).
    cases : sequence of AcceptanceCase
        Default :data:`ACCEPTANCE_CASES`.
    width, seq_len, seeds, sequences, device, dtype
        As :func:`measure_case`.
    threads : int, optional
        torch (and numba) CPU threads while simulating (default: torch's own).
    progress : callable, optional
        ``progress(text)`` with one line per case: at the start (how many are on disk) and
        after each measured case (its key, seconds, device); given, the progress over the
        cases with its ETA is shown too (:func:`remprop.progress.progress_bar`).

    Returns
    -------
    remprop.validation.experiments.cell_runner.SweepReport
    """
    cases = tuple(_case_of(c) for c in cases)
    if len({c.key for c in cases}) != len(cases):
        raise ValueError("cases must have distinct keys (inputs, norm, beta, alpha, depth)")
    sizes = _sizes(width, seq_len, seeds, sequences, dtype)
    device = str(resolve_device(device))
    store = open_store(directory, cases=cases, **sizes)
    manifest_sha256 = json_sha256(store.manifest)
    cells = {case.key: (case.to_dict(), sizes, device, manifest_sha256) for case in cases}
    done = store.done() & set(cells)
    say = progress if progress is not None else (lambda text: None)
    say(f"acceptance: {len(cells)} cases, {len(done)} already in {store.directory}; "
        f"d={sizes['width']}, T={sizes['seq_len']}, {len(sizes['seeds'])} seeds x {sizes['sequences']} "
        f"sequences on {device}")
    finished = [len(done)]

    def on_cell(key, record):
        finished[0] += 1
        say(f"[{finished[0]}/{len(cells)}] {key}: {record['result']['elapsed_s']:.1f} s on "
            f"{record['result']['settings']['device']}")

    threads_context = contextlib.nullcontext() if threads is None else torch_threads(
        check_positive_int("threads", threads))
    with threads_context:
        return run_cells(store, cells, _measure_record, workers=0, on_cell=on_cell,
                         progress="acceptance" if progress is not None else False)
