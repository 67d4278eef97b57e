"""Trainability diagrams: the phase of a depth-L stack over a (beta, alpha_sa) grid."""
from __future__ import annotations

import json
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from remprop._json import to_jsonable
from remprop.theory import DEFAULT_THRESHOLD, Architecture, RunSettings, final_state, propagate_at_layers
from remprop.theory.checks import as_float_array, check_grid_axis
from remprop.theory.architecture import BETA_CRITICAL_RULES, NUMERIC_FIELDS, OPTIONAL_FIELDS
from remprop.theory.propagation import CHUNK_ROWS
from remprop.theory.work_estimates import segment_layers

from .phases import PHASE_LABELS, classify_phases
from .residual_strength import ALPHA_MAX, min_residual_strength

__all__ = ["TrainabilityDiagram", "trainability_diagram", "BETA_CRITICAL_RULES"]

_FORMAT = "remprop.trainability_diagram/1"


@dataclass(frozen=True, eq=False)
class TrainabilityDiagram:
    r"""Phases of a depth-L stack over a grid of query/key scales and skip strengths.

    Array axes are ``(alpha, beta)``: row ``i`` is ``alphas[i]``, column ``j`` is
    ``betas[j]``.

    Attributes
    ----------
    settings : RunSettings
        The run: architecture, ``beta`` = the grid's query/key scales (columns), depth,
        input state and threshold. ``arch``, ``betas``, ``depth``, ``q0``, ``rho0`` and
        ``threshold`` read through to it. The architecture's ``alpha_sa`` is replaced by
        the grid's ``alphas``; a cell is rank-collapsed when the mean cosine of two tokens
        after the last block, ``rho_L = p_L / q_L``, is above the threshold.
    alphas : ndarray
        Attention skip strengths (rows).
    phase : ndarray of int8, shape (len(alphas), len(betas))
        :data:`~remprop.diagrams.TRAINABLE`, :data:`~remprop.diagrams.RANK_COLLAPSE` or
        :data:`~remprop.diagrams.ENTROPY_COLLAPSE` (labels in
        :data:`~remprop.diagrams.PHASE_LABELS`).
    rho_final : ndarray, shape (len(alphas), len(betas))
        ``rho_L`` of each cell.
    beta_critical_cells : ndarray, shape (len(alphas), len(betas))
        The critical beta that decides entropy collapse in each cell
        (:meth:`~remprop.theory.Architecture.critical_beta`): that of the first attention layer for post-LN
        (``sqrt(2 / (q0 (q0 - p0)))``, the same in every cell), the smallest over the layers
        for pre-LN and no-LN (it depends on the cell, since the stream's state does). It is
        on the axis of ``betas``: divided by ``heads`` under ``qk_scaling="head"``, where
        each head runs at ``heads * beta``.
    beta_critical : ndarray, shape (len(betas),)
        Per beta, the smallest critical beta over the column (for post-LN simply the
        first layer's): ``betas[j] > beta_critical[j]`` means that at least one alpha of
        the column is entropy-collapsed.
    alpha_star : ndarray, shape (len(betas),)
        Minimum residual strength per beta (:func:`~remprop.diagrams.min_residual_strength`, same
        threshold); ``inf`` when no alpha up to ``alpha_max`` avoids rank collapse.
    alpha_max : float
        Upper bound of the alpha* search.
    """

    settings: RunSettings
    alphas: np.ndarray
    phase: np.ndarray
    rho_final: np.ndarray
    beta_critical_cells: np.ndarray
    beta_critical: np.ndarray
    alpha_star: np.ndarray
    alpha_max: float = ALPHA_MAX

    # -- the run's settings ---------------------------------------------------------------
    arch = property(lambda self: self.settings.arch, doc="The architecture (of the :class:`~remprop.theory.RunSettings`).")
    betas = property(lambda self: self.settings.beta, doc="Query/key scales of the columns.")
    depth = property(lambda self: self.settings.depth, doc="Number of blocks L.")
    threshold = property(lambda self: self.settings.threshold, doc="Rank-collapse threshold.")
    q0 = property(lambda self: self.settings.q0, doc="Input mean squared norm.")
    rho0 = property(lambda self: self.settings.rho0, doc="Input mean cosine.")

    @property
    def beta_critical_rule(self) -> str:
        """How the critical beta is chosen for this LayerNorm placement."""
        return self.arch.beta_critical_rule

    def fractions(self) -> dict:
        """Fraction of grid cells in each phase, keyed by label."""
        counts = np.bincount(self.phase.ravel(), minlength=len(PHASE_LABELS))
        return {label: counts[code] / self.phase.size for code, label in PHASE_LABELS.items()}

    def plot(self, ax=None):
        """Draw the diagram (see :func:`remprop.diagrams.trainability_figure`).

        Returns the matplotlib Axes drawn into (a new Figure's when ``ax`` is None).
        """
        from .theory_figures import trainability_figure

        figure = trainability_figure(self, ax=ax)
        return ax if ax is not None else figure.axes[0]

    # -- files --------------------------------------------------------------------
    def save(self, path):
        """Write ``<path>.npz`` (all arrays) and ``<path>.json`` (a readable summary).

        A trailing ``.npz`` or ``.json`` on ``path`` is dropped. JSON has no infinity:
        the string ``"inf"`` in ``alpha_star`` or ``beta_critical`` stands for ``+inf`` (no
        alpha up to ``alpha_max`` avoids rank collapse; collapsed input tokens) and
        ``"nan"`` for an undefined value (a vanished stream), as everywhere in remprop
        (``remprop._json``). The JSON holds the
        architecture (``Architecture.to_dict()``), depth, threshold, input state, the
        grid, the phase codes (rows = alphas, columns = betas) with their labels,
        ``alpha_star`` and ``beta_critical``; the final cosines are in the npz only.

        Returns
        -------
        (Path, Path)
            The npz and json paths written.
        """
        base = _base_path(path)
        base.parent.mkdir(parents=True, exist_ok=True)
        npz_path, json_path = base.with_name(base.name + ".npz"), base.with_name(base.name + ".json")
        arch_json = json.dumps(self.arch.to_dict())
        with open(npz_path, "wb") as handle:
            np.savez(handle, betas=self.betas, alphas=self.alphas, depth=self.depth,
                     threshold=self.threshold, q0=self.q0, rho0=self.rho0, phase=self.phase,
                     rho_final=self.rho_final, beta_critical_cells=self.beta_critical_cells,
                     beta_critical=self.beta_critical, alpha_star=self.alpha_star,
                     alpha_max=self.alpha_max, arch_json=np.array(arch_json), format=np.array(_FORMAT))
        summary = {
            "format": _FORMAT,
            "arch": self.arch.to_dict(),
            "depth": self.depth,
            "threshold": self.threshold,
            "threshold_meaning": "rank collapse: mean cosine of two tokens after the last block > threshold",
            "q0": self.q0,
            "rho0": self.rho0,
            "betas": self.betas.tolist(),
            "alphas": self.alphas.tolist(),
            "phase": {
                "axes": ["alpha", "beta"],
                "labels": {str(code): label for code, label in PHASE_LABELS.items()},
                "codes": self.phase.tolist(),
            },
            "alpha_star": to_jsonable(self.alpha_star),
            "alpha_max": self.alpha_max,
            "beta_critical": to_jsonable(self.beta_critical),
            "beta_critical_rule": self.beta_critical_rule,
        }
        with open(json_path, "w", encoding="utf-8") as handle:
            json.dump(summary, handle, allow_nan=False)
        return npz_path, json_path

    @classmethod
    def load(cls, path) -> "TrainabilityDiagram":
        """Read a diagram written by :meth:`save` (from ``<path>.npz``).

        Every field is checked again: the format tag, the architecture and the run
        settings (through :class:`~remprop.theory.RunSettings`), the grids, and the shapes of
        the arrays against ``(len(alphas), len(betas))``.

        Raises
        ------
        ValueError
            One line naming the file, for any damage: truncated, not a NumPy zip, missing
            arrays, another format, invalid settings or shapes that disagree.
        FileNotFoundError
            No such file.
        """
        base = _base_path(path)
        npz_path = base.with_name(base.name + ".npz")
        try:
            return cls._from_arrays(_read_npz(npz_path))
        except ValueError as err:
            raise ValueError(f"path: {npz_path} is not a valid saved trainability diagram ({err})") from None

    @classmethod
    def _from_arrays(cls, data: dict) -> "TrainabilityDiagram":
        """The diagram of the arrays of a saved file, every field validated."""
        if _text(data, "format") != _FORMAT:
            raise ValueError(f"format {_text(data, 'format')!r} is not {_FORMAT!r}")
        try:
            arch = Architecture(**json.loads(_text(data, "arch_json")))
        except (TypeError, ValueError) as err:
            raise ValueError(f"arch_json: {err}") from None
        settings = RunSettings(arch, check_grid_axis("betas", data["betas"], positive=True), _scalar(data, "depth"),
                               _scalar(data, "q0"), _scalar(data, "rho0"), _scalar(data, "threshold"))
        alphas = check_grid_axis("alphas", data["alphas"], nonnegative=True)
        grid, columns = (alphas.size, settings.beta.size), (settings.beta.size,)
        for name, shape in (("phase", grid), ("rho_final", grid), ("beta_critical_cells", grid),
                            ("beta_critical", columns), ("alpha_star", columns)):
            if data[name].shape != shape or data[name].dtype.kind not in "iuf":
                raise ValueError(f"{name} has shape {data[name].shape} (dtype {data[name].dtype}), expected numbers "
                                 f"of shape {shape} for {alphas.size} alphas x {settings.beta.size} betas")
        if not np.isin(data["phase"], list(PHASE_LABELS)).all():
            raise ValueError(f"phase holds codes outside {sorted(PHASE_LABELS)}")
        alpha_max = float(as_float_array("alpha_max", _scalar(data, "alpha_max"), positive=True))
        return cls(settings=settings, alphas=alphas, phase=data["phase"].astype(np.int8, copy=False),
                   rho_final=data["rho_final"], beta_critical_cells=data["beta_critical_cells"],
                   beta_critical=data["beta_critical"], alpha_star=data["alpha_star"], alpha_max=alpha_max)

def trainability_diagram(arch: Architecture, betas, alphas, depth: int, threshold=DEFAULT_THRESHOLD, *,
                         q0=1.0, rho0=0.0, progress=False, segment=None) -> TrainabilityDiagram:
    r"""Phase of a depth-L stack on a grid of query/key scales and attention skip strengths.

    Each cell ``(alpha, beta)`` is propagated through ``depth`` blocks of ``arch`` with
    ``alpha_sa = alpha`` (asymptotic REM attention, docs/theory.md sections 3-5) and classified:

    * entropy collapse if :math:`\beta > \beta_c`, the critical beta
      :math:`\beta_c = \sqrt{2 / (q (q - p))}` of the first attention layer's input for
      post-LN, the smallest over all layers for pre-LN and no-LN;
    * else rank collapse if the final mean cosine :math:`\rho_L = p_L / q_L` of two tokens
      exceeds ``threshold`` (the tokens have nearly aligned);
    * else trainable.

    Cells that meet both criteria are entropy-collapsed (see
    :mod:`remprop.diagrams.phases`). Only final states are kept (no grid x depth
    trajectories); a 2000 x 2000 x 60 grid stays well under 500 MB
    (:func:`remprop.theory.work_estimates.diagram_bytes` estimates any grid). A long run
    (estimated above :data:`~remprop.theory.work_estimates.SEGMENTED_ABOVE_SECONDS`) advances
    the cells in segments of blocks (:func:`~remprop.theory.propagate_at_layers`, the same
    numbers), so that Ctrl-C stops it between segments.

    Parameters
    ----------
    arch : Architecture
        Block order, attention, activation and variances. Numeric fields must be scalars;
        ``alpha_sa`` is ignored (the grid's ``alphas`` replace it).
    betas : array_like
        1-d, non-empty, > 0: query/key scales (``s_qk^2 = beta sqrt(log T) / d``).
    alphas : array_like
        1-d, non-empty, >= 0: attention skip strengths (``x -> alpha x + SA(x)``).
    depth : int
        Number of blocks L, >= 1.
    threshold : float
        Collapse threshold on the final mean cosine, in (0, 1); default 0.99.
    q0, rho0 : float
        Input mean squared norm (> 0) and mean cosine (in [-1, 1]).
    progress : bool
        Show a tqdm progress bar over the grid cells.
    segment : int, optional
        Blocks per kernel call (default: one call for a short run, calls of about a quarter
        second for a long one, :func:`~remprop.theory.work_estimates.segment_layers`); the
        result does not depend on it.

    Returns
    -------
    TrainabilityDiagram

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(c) (60-layer post-LN BERT);
    docs/theory.md section 6.

    Examples
    --------
    >>> import numpy as np
    >>> from remprop.theory import Architecture
    >>> d = trainability_diagram(Architecture(), np.linspace(0.1, 3, 5), np.linspace(0, 3, 4), 60)
    >>> d.phase.shape
    (4, 5)
    """
    # the door: everything is checked here, once; the functions below trust the run
    run = RunSettings(arch, check_grid_axis("betas", betas, positive=True), depth, q0, rho0, threshold)
    for name in NUMERIC_FIELDS + OPTIONAL_FIELDS:
        if name != "alpha_sa" and np.ndim(getattr(arch, name)) != 0:
            raise ValueError(f"arch.{name} must be a scalar for a trainability diagram")
    cells = run.over_alphas(alphas)
    alphas, betas = np.asarray(cells.arch.alpha_sa)[:, 0], run.beta

    state = _final_states(cells, progress, segment)
    # on the betas axis: a cell is entropy-collapsed when beta > this (the heads' factor applied)
    beta_critical_cells = np.array(arch.critical_beta(first=state["beta_critical_first"],
                                                      smallest=state["beta_critical_min"]))
    rho_final = state["rho"]
    del state
    phase = classify_phases(cells.beta, beta_critical_cells, rho_final, run.threshold)
    alpha_star = np.asarray(min_residual_strength(run, segment=segment), dtype=np.float64)
    return TrainabilityDiagram(
        settings=run, alphas=alphas, phase=phase, rho_final=rho_final, beta_critical_cells=beta_critical_cells,
        beta_critical=beta_critical_cells.min(axis=0), alpha_star=alpha_star.reshape(betas.shape),
        alpha_max=ALPHA_MAX)


def _final_states(run, progress, segment):
    """Final cosine and critical betas of every cell of the run of a grid (:meth:`RunSettings.over_alphas`):
    one kernel call per chunk of cells for a short run, segments of blocks for a long one
    (:func:`propagate_at_layers`)."""
    arch, depth = run.arch, run.depth
    cells = run.beta.size * np.size(arch.alpha_sa)
    if segment is None:
        segment = segment_layers(arch, min(cells, CHUNK_ROWS), depth, -(-cells // CHUNK_ROWS))
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=cells, unit="cell", desc=f"diagram L={depth}")
    try:
        if segment >= depth:
            return final_state(run, progress=None if bar is None else bar.update)
        sampled = propagate_at_layers(arch, run.beta, [depth], run.q0, run.rho0, segment=segment,
                                      progress=None if bar is None else (lambda steps: bar.update(steps / depth)))
        return {"rho": sampled.rho[..., 0], "beta_critical_first": sampled.beta_critical_first,
                "beta_critical_min": sampled.beta_critical_min[..., 0]}
    finally:
        if bar is not None:
            bar.close()


#: Arrays of a saved diagram's npz file.
_NPZ_KEYS = ("betas", "alphas", "depth", "threshold", "q0", "rho0", "phase", "rho_final", "beta_critical_cells",
             "beta_critical", "alpha_star", "alpha_max", "arch_json", "format")


def _read_npz(npz_path) -> dict:
    """Every array of a saved diagram; ``ValueError`` (without the file name) for a damaged file."""
    unreadable = (OSError, EOFError, ValueError, KeyError, zipfile.BadZipFile, zlib.error)
    try:
        data = np.load(npz_path, allow_pickle=False)
    except FileNotFoundError:
        raise
    except unreadable as err:  # truncated, or not an npz file at all
        raise ValueError(f"not a NumPy npz archive ({type(err).__name__})") from None
    if not hasattr(data, "files"):
        raise ValueError("a single .npy array, not an npz archive")
    with data:
        missing = [name for name in _NPZ_KEYS if name not in data.files]
        if missing:
            raise ValueError(f"missing arrays {', '.join(missing)}")
        try:
            return {name: data[name] for name in _NPZ_KEYS}
        except unreadable as err:  # a damaged member
            raise ValueError(f"unreadable arrays ({type(err).__name__}: {err})") from None


def _text(data: dict, name: str) -> str:
    value = data[name]
    if value.ndim != 0 or value.dtype.kind != "U":
        raise ValueError(f"{name} must be a string, got an array of dtype {value.dtype} and shape {value.shape}")
    return str(value)


def _scalar(data: dict, name: str):
    value = data[name]
    if value.ndim != 0:
        raise ValueError(f"{name} must be a scalar, got shape {value.shape}")
    return value[()]


def _base_path(path) -> Path:
    path = Path(path)
    return path.with_suffix("") if path.suffix in (".npz", ".json") else path
