"""Trainability diagrams: the phase of a depth-L stack over a (beta, alpha_sa) grid."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from remprop._json import to_jsonable
from remprop.theory import Architecture, final_state
from remprop.theory.checks import (
    as_float_array,
    check_depth,
    check_open_unit,
    check_real_scalar,
)
from remprop.theory.architecture import NUMERIC_FIELDS, OPTIONAL_FIELDS

from .phases import PHASE_LABELS, classify_phases
from .residual_strength import ALPHA_MAX, DEFAULT_THRESHOLD, min_residual_strength

__all__ = ["TrainabilityDiagram", "trainability_diagram", "BETA_CRITICAL_RULES"]

#: Which critical beta decides entropy collapse, per LayerNorm placement.
BETA_CRITICAL_RULES = {
    "post": "first attention layer",
    "pre": "smallest over layers",
    "none": "smallest over layers",
}
_FORMAT = "remprop.trainability_diagram/1"


@dataclass(frozen=True, eq=False)
class TrainabilityDiagram:
    r"""Phases of a depth-L stack over a grid of query/key scales and skip strengths.

    Array axes are ``(alpha, beta)``: row ``i`` is ``alphas[i]``, column ``j`` is
    ``betas[j]``.

    Attributes
    ----------
    arch : Architecture
        The stack; its ``alpha_sa`` is replaced by the grid's ``alphas``.
    betas, alphas : ndarray
        Query/key scales (columns) and attention skip strengths (rows).
    depth : int
        Number of blocks L.
    threshold : float
        Collapse threshold t: a cell is rank-collapsed when the mean cosine of two tokens
        after the last block, ``rho_L = p_L / q_L``, is above t.
    q0, rho0 : float
        Input state.
    phase : ndarray of int8, shape (len(alphas), len(betas))
        :data:`~remprop.diagrams.TRAINABLE`, :data:`~remprop.diagrams.RANK_COLLAPSE` or
        :data:`~remprop.diagrams.ENTROPY_COLLAPSE` (labels in
        :data:`~remprop.diagrams.PHASE_LABELS`).
    rho_final : ndarray, shape (len(alphas), len(betas))
        ``rho_L`` of each cell.
    beta_critical_cells : ndarray, shape (len(alphas), len(betas))
        The critical beta that decides entropy collapse in each cell: that of the first
        attention layer for post-LN (``sqrt(2 / (q0 (q0 - p0)))``, the same in every
        cell), the smallest over the layers for pre-LN and no-LN (it depends on the
        cell, since the stream's state does).
    beta_critical : ndarray, shape (len(betas),)
        Per beta, the smallest critical beta over the column (for post-LN simply the
        first layer's): ``betas[j] > beta_critical[j]`` means that at least one alpha of
        the column is entropy-collapsed.
    alpha_star : ndarray, shape (len(betas),)
        Minimum residual strength per beta (:func:`min_residual_strength`, same
        threshold); ``inf`` when no alpha up to ``alpha_max`` avoids rank collapse.
    alpha_max : float
        Upper bound of the alpha* search.
    """

    arch: Architecture
    betas: np.ndarray
    alphas: np.ndarray
    depth: int
    threshold: float
    q0: float
    rho0: float
    phase: np.ndarray
    rho_final: np.ndarray
    beta_critical_cells: np.ndarray
    beta_critical: np.ndarray
    alpha_star: np.ndarray
    alpha_max: float = ALPHA_MAX

    @property
    def beta_critical_rule(self) -> str:
        """How the critical beta is chosen for this LayerNorm placement."""
        return BETA_CRITICAL_RULES[self.arch.norm]

    def fractions(self) -> dict:
        """Fraction of grid cells in each phase, keyed by label."""
        counts = np.bincount(self.phase.ravel(), minlength=len(PHASE_LABELS))
        return {label: counts[code] / self.phase.size for code, label in PHASE_LABELS.items()}

    def plot(self, ax=None):
        """Draw the diagram (see :func:`remprop.diagrams.trainability_figure`).

        Returns the matplotlib Axes drawn into (a new Figure's when ``ax`` is None).
        """
        from .figures import trainability_figure

        figure = trainability_figure(self, ax=ax)
        return ax if ax is not None else figure.axes[0]

    # -- files --------------------------------------------------------------------
    def save(self, path):
        """Write ``<path>.npz`` (all arrays) and ``<path>.json`` (a readable summary).

        A trailing ``.npz`` or ``.json`` on ``path`` is dropped. JSON has no infinity:
        the string ``"inf"`` in ``alpha_star`` or ``beta_critical`` stands for ``+inf`` (no
        alpha up to ``alpha_max`` avoids rank collapse; collapsed input tokens) and
        ``"nan"`` for an undefined value (a vanished stream), as everywhere in remprop
        (:mod:`remprop._json`). The JSON holds the
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
        """Read a diagram written by :meth:`save` (from ``<path>.npz``)."""
        base = _base_path(path)
        with np.load(base.with_name(base.name + ".npz"), allow_pickle=False) as data:
            if str(data["format"]) != _FORMAT:
                raise ValueError(f"path is not a saved trainability diagram: {path}")
            arch = Architecture(**json.loads(str(data["arch_json"])))
            return cls(arch=arch, betas=data["betas"], alphas=data["alphas"],
                       depth=int(data["depth"]), threshold=float(data["threshold"]),
                       q0=float(data["q0"]), rho0=float(data["rho0"]), phase=data["phase"],
                       rho_final=data["rho_final"], beta_critical_cells=data["beta_critical_cells"],
                       beta_critical=data["beta_critical"], alpha_star=data["alpha_star"],
                       alpha_max=float(data["alpha_max"]))


def trainability_diagram(arch: Architecture, betas, alphas, depth: int, threshold=DEFAULT_THRESHOLD, *,
                         q0=1.0, rho0=0.0, progress=False) -> TrainabilityDiagram:
    r"""Phase of a depth-L stack on a grid of query/key scales and attention skip strengths.

    Each cell ``(alpha, beta)`` is propagated through ``depth`` blocks of ``arch`` with
    ``alpha_sa = alpha`` (asymptotic REM attention, THEORY.md sections 3-5) and classified:

    * entropy collapse if :math:`\beta > \beta_c`, the critical beta
      :math:`\beta_c = \sqrt{2 / (q (q - p))}` of the first attention layer's input for
      post-LN, the smallest over all layers for pre-LN and no-LN;
    * else rank collapse if the final mean cosine :math:`\rho_L = p_L / q_L` of two tokens
      exceeds ``threshold`` (the tokens have nearly aligned);
    * else trainable.

    Cells that meet both criteria are entropy-collapsed (see
    :mod:`remprop.diagrams.phases`). Only final states are kept (no grid x depth
    trajectories); a 2000 x 2000 x 60 grid stays well under 500 MB.

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

    Returns
    -------
    TrainabilityDiagram

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(c) (60-layer post-LN BERT);
    THEORY.md section 6.

    Examples
    --------
    >>> import numpy as np
    >>> from remprop.theory import Architecture
    >>> d = trainability_diagram(Architecture(), np.linspace(0.1, 3, 5), np.linspace(0, 3, 4), 60)
    >>> d.phase.shape
    (4, 5)
    """
    if not isinstance(arch, Architecture):
        raise ValueError(f"arch must be a remprop.theory.Architecture, got {type(arch).__name__}")
    for name in NUMERIC_FIELDS + OPTIONAL_FIELDS:
        if name != "alpha_sa" and np.ndim(getattr(arch, name)) != 0:
            raise ValueError(f"arch.{name} must be a scalar for a trainability diagram")
    betas = _grid_axis("betas", betas, positive=True)
    alphas = _grid_axis("alphas", alphas, nonnegative=True)
    depth = check_depth(depth)
    threshold = check_open_unit("threshold", threshold)
    q0 = check_real_scalar("q0", q0)
    rho0 = check_real_scalar("rho0", rho0)
    if not q0 > 0:
        raise ValueError(f"q0 must be > 0, got {q0!r}")
    if not -1.0 <= rho0 <= 1.0:
        raise ValueError(f"rho0 must lie in [-1, 1], got {rho0!r}")

    state = _final_states(arch.replace(alpha_sa=alphas[:, None]), betas[None, :], depth, q0, rho0,
                          progress)
    rule_key = "beta_critical_first" if arch.norm == "post" else "beta_critical_min"
    beta_critical_cells = np.array(state[rule_key])  # own copy: frees the kernel's buffer
    rho_final = state["rho"]
    del state
    phase = classify_phases(betas[None, :], beta_critical_cells, rho_final, threshold)
    alpha_star = np.asarray(min_residual_strength(arch, depth, betas, threshold, q0=q0, rho0=rho0),
                            dtype=np.float64)
    return TrainabilityDiagram(
        arch=arch, betas=betas, alphas=alphas, depth=depth, threshold=threshold, q0=q0, rho0=rho0,
        phase=phase, rho_final=rho_final, beta_critical_cells=beta_critical_cells,
        beta_critical=beta_critical_cells.min(axis=0), alpha_star=alpha_star.reshape(betas.shape),
        alpha_max=ALPHA_MAX)


def _grid_axis(name, values, **checks):
    arr = as_float_array(name, values, **checks)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be a 1-d sequence, got shape {arr.shape}")
    if arr.size == 0:
        raise ValueError(f"{name} must not be empty")
    return arr


def _final_states(arch, betas, depth, q0, rho0, progress):
    if not progress:
        return final_state(arch, betas, depth, q0, rho0)
    from tqdm.auto import tqdm

    total = betas.size * np.size(arch.alpha_sa)
    with tqdm(total=total, unit="cell", desc=f"diagram L={depth}") as bar:
        return final_state(arch, betas, depth, q0, rho0, progress=bar.update)


def _base_path(path) -> Path:
    path = Path(path)
    return path.with_suffix("") if path.suffix in (".npz", ".json") else path
