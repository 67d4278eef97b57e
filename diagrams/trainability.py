"""Trainability diagrams: the phase of a depth-L stack over a (beta, alpha_sa) grid."""
from __future__ import annotations

import json
from dataclasses import dataclass

import numpy as np

from remprop.theory import DEFAULT_THRESHOLD, Architecture, ModelSpec, RunSettings, final_state, propagate_at_layers
from remprop.theory.checks import as_float_array, check_grid_axis, check_real_scalar
from remprop.theory.architecture import BETA_CRITICAL_RULES, NUMERIC_FIELDS, OPTIONAL_FIELDS
from remprop.theory.propagation import CHUNK_ROWS
from remprop.theory.work_estimates import segment_layers

from .grid_result import CELL_AXES, GridResult, GridView, cell_array, check_arrays, require, scalar_member, text_member
from .phases import ENTROPY_COLLAPSE, PHASE_LABELS, classify_phases
from . import residual_strength
from .residual_strength import ALPHA_MAX

__all__ = ["TrainabilityDiagram", "trainability_diagram", "BETA_CRITICAL_RULES"]

#: The arrays of a theory grid and their axes.
_ARRAYS = {"phase": CELL_AXES, "rho_final": CELL_AXES, "beta_critical_cells": CELL_AXES,
           "beta_critical": ("beta",), "alpha_star": ("beta",)}
#: The arrays its JSON summary lists (the final cosines stay in the npz).
_SUMMARY = ("phase", "alpha_star", "beta_critical")
#: The format of the files this type wrote before :data:`~remprop.diagrams.grid_result.GRID_FORMAT`, still read.
_FORMAT_V1 = "remprop.trainability_diagram/1"


@dataclass(frozen=True, eq=False)
class TrainabilityDiagram(GridView):
    r"""Phases of a depth-L stack over a grid of query/key scales and skip strengths.

    A view on a :class:`~remprop.diagrams.grid_result.GridResult` of kind ``"theory"``
    (the one result type of the theory's, the measured and the trained diagrams).
    Array axes are ``(alpha, beta)``: row ``i`` is ``alphas[i]``, column ``j`` is
    ``betas[j]``.

    Attributes
    ----------
    grid : GridResult
        The numbers, the settings (JSON) and the files (:meth:`save`, :meth:`load`).
    settings : RunSettings
        The run: architecture, ``beta`` = the grid's query/key scales (columns), depth,
        input state and threshold. ``arch``, ``depth``, ``q0``, ``rho0`` and
        ``threshold`` read through to it. The architecture's ``alpha_sa`` is replaced by
        the grid's ``alphas``; a cell is rank-collapsed when the mean cosine of two tokens
        after the last block, ``rho_L = p_L / q_L``, is above the threshold.
    alphas : ndarray
        Attention skip strengths (rows).
    betas : ndarray
        Query/key scales (columns).
    phase : ndarray of int8, shape (len(alphas), len(betas))
        :data:`~remprop.diagrams.TRAINABLE`, :data:`~remprop.diagrams.RANK_COLLAPSE` or
        :data:`~remprop.diagrams.ENTROPY_COLLAPSE` (labels in
        :data:`~remprop.diagrams.PHASE_LABELS`).
    rho_final : ndarray, shape (len(alphas), len(betas))
        ``rho_L`` of each cell.
    beta_critical_cells : ndarray, shape (len(alphas), len(betas))
        The critical beta that decides entropy collapse in each cell
        (:meth:`~remprop.theory.Architecture.beta_critical`): that of the first attention layer for post-LN
        (``sqrt(2 / (q0 (q0 - p0)))``, the same in every cell), the smallest over the layers
        for pre-LN and no-LN (it depends on the cell, since the stream's state does). It is
        on the axis of ``betas``: divided by ``heads`` under ``qk_scaling="head"``, where
        each head runs at ``heads * beta``.
    beta_critical : ndarray, shape (len(betas),)
        Per beta, the smallest critical beta over the column (for post-LN simply the
        first layer's): ``betas[j] > beta_critical[j]`` means that at least one alpha of
        the column is entropy-collapsed.
    alpha_star : ndarray, shape (len(betas),)
        Minimum residual strength per beta (:func:`~remprop.diagrams.alpha_star`, same
        threshold); ``inf`` when no alpha up to ``alpha_max`` avoids rank collapse.
    alpha_max : float
        Upper bound of the alpha* search.
    """

    grid: GridResult
    settings: RunSettings

    KIND = "theory"

    rho_final = cell_array("rho_final", "Final mean cosine ``rho_L`` of each cell.")
    beta_critical_cells = cell_array("beta_critical_cells", "The critical beta deciding entropy collapse, per cell.")
    beta_critical = cell_array("beta_critical", "Per beta, the smallest critical beta over the column.")
    alpha_star = cell_array("alpha_star", "Minimum residual strength per beta.")
    alpha_max = property(lambda self: float(self.grid.settings["alpha_max"]), doc="Upper bound of the alpha* search.")

    # -- the run's settings ---------------------------------------------------------------
    arch = property(lambda self: self.settings.arch, doc="The architecture (of the :class:`~remprop.theory.RunSettings`).")
    depth = property(lambda self: self.settings.depth, doc="Number of blocks L.")
    threshold = property(lambda self: self.settings.threshold, doc="Rank-collapse threshold.")
    q0 = property(lambda self: self.settings.q0, doc="Input mean squared norm.")
    rho0 = property(lambda self: self.settings.rho0, doc="Input mean cosine.")

    @property
    def beta_critical_rule(self) -> str:
        """How the critical beta is chosen for this LayerNorm placement."""
        return self.arch.beta_critical_rule

    @classmethod
    def from_arrays(cls, run: RunSettings, alphas, *, alpha_max=ALPHA_MAX, **arrays) -> "TrainabilityDiagram":
        """The diagram of a run (its ``beta`` the columns) and the arrays of its cells
        (``phase``, ``rho_final``, ``beta_critical_cells``, ``beta_critical``, ``alpha_star``)."""
        settings = {**{k: v for k, v in run.to_dict().items() if k != "beta"}, "alpha_max": alpha_max,
                    "rules": {"rank_collapse": "mean cosine of two tokens after the last block > threshold",
                              "entropy_collapse": f"beta > critical beta ({run.arch.beta_critical_rule})",
                              "both": "entropy collapse"}}
        grid = GridResult("theory", alphas, run.beta, arrays, dict(_ARRAYS), PHASE_LABELS, settings,
                          summary=_SUMMARY)
        return cls(grid, run)

    @classmethod
    def from_grid(cls, grid: GridResult) -> "TrainabilityDiagram":
        """The diagram of a theory grid: its architecture and run settings checked again
        (:class:`~remprop.theory.RunSettings`), and its arrays."""
        check_arrays(grid, _ARRAYS)
        s = grid.settings
        try:
            arch = Architecture(**s["arch"])
        except (TypeError, ValueError) as err:
            raise ValueError(f"settings.arch: {err}") from None
        run = RunSettings(arch, grid.betas, s["depth"], s["q0"], s["rho0"], s["threshold"])
        as_float_array("alpha_max", check_real_scalar("alpha_max", s["alpha_max"]), positive=True)
        _check_phases(grid, run.threshold)
        return cls(grid, run)

    @classmethod
    def _older(cls, data: dict):
        """A grid of the previous theory format (``remprop.trainability_diagram/1``), or None."""
        if "format" not in data or text_member(data, "format") != _FORMAT_V1:
            return None
        require(data, ("betas", "alphas", "depth", "threshold", "q0", "rho0", *_ARRAYS, "alpha_max", "arch_json"))
        try:
            arch = json.loads(text_member(data, "arch_json"))
        except json.JSONDecodeError:
            raise ValueError("arch_json is not JSON text") from None
        settings = {"arch": arch, "alpha_max": scalar_member(data, "alpha_max"),
                    **{name: scalar_member(data, name) for name in ("depth", "threshold", "q0", "rho0")}}
        return GridResult("theory", data["alphas"], data["betas"], {name: data[name] for name in _ARRAYS},
                          dict(_ARRAYS), PHASE_LABELS, settings, summary=_SUMMARY)

    # -- drawing --------------------------------------------------------------------------
    def figure(self):
        """The diagram drawn on a new figure (:func:`remprop.diagrams.trainability_figure`)."""
        from .theory_figures import trainability_figure

        return trainability_figure(self)

    def plot(self, ax=None):
        """Draw the diagram (see :func:`remprop.diagrams.trainability_figure`).

        Without ``ax`` the figure is made by ``pyplot.figure``, so Jupyter shows it (and
        ``pyplot.show()`` in a script); :meth:`figure` and :meth:`save` draw off pyplot.

        Returns the matplotlib Axes drawn into (a new Figure's when ``ax`` is None).
        """
        from .style import pyplot_figures
        from .theory_figures import trainability_figure

        with pyplot_figures():
            figure = trainability_figure(self, ax=ax)
        return ax if ax is not None else figure.axes[0]

    def save(self, path, *, figure=False) -> list:
        """Write ``<path>.npz`` (all arrays) and ``<path>.json`` (a readable summary), and with
        ``figure`` ``<path>.png``; return the paths written, npz first.

        The one format of every grid result (:mod:`remprop.diagrams.grid_result`); a trailing
        ``.npz`` or ``.json`` on ``path`` is dropped. JSON has no infinity: the string
        ``"inf"`` in ``alpha_star`` or ``beta_critical`` stands for ``+inf`` (no alpha up to
        ``alpha_max`` avoids rank collapse; collapsed input tokens) and ``"nan"`` for an
        undefined value (a vanished stream), as everywhere in remprop (``remprop._json``).
        The JSON's ``settings`` hold the architecture (``Architecture.to_dict()``), depth,
        threshold, input state and ``alpha_max``; its ``arrays`` the phase codes (rows =
        alphas, columns = betas, labels in ``labels``), ``alpha_star`` and
        ``beta_critical``; the final cosines and per-cell critical betas are in the npz only.
        """
        return super().save(path, figure=figure)

    @classmethod
    def load(cls, path) -> "TrainabilityDiagram":
        """Read a diagram written by :meth:`save` (from ``<path>.npz``), or one in the
        previous format (``remprop.trainability_diagram/1``).

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
        return super().load(path)

def trainability_diagram(arch: Architecture, betas, alphas, depth: int | None = None, threshold=DEFAULT_THRESHOLD, *,
                         q0=None, rho0=None, progress=False, segment=None) -> TrainabilityDiagram:
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
    arch : Architecture or ModelSpec
        Block order, attention, activation and variances. Numeric fields must be scalars;
        ``alpha_sa`` is ignored (the grid's ``alphas`` replace it). A real model's
        :class:`~remprop.theory.ModelSpec` (:func:`~remprop.theory.model_spec` of a Hugging Face
        config) gives its architecture, and its depth and input state ``(q0, rho0)`` as the
        defaults: the diagram ``remprop check`` places the model on (one route from a model to
        its diagram).
    betas : array_like
        1-d, non-empty, > 0: query/key scales (``s_qk^2 = beta sqrt(log T) / d``).
    alphas : array_like
        1-d, non-empty, >= 0: attention skip strengths (``x -> alpha x + SA(x)``).
    depth : int
        Number of blocks L, >= 1 (default: a ModelSpec's depth; required with an Architecture).
    threshold : float
        Collapse threshold on the final mean cosine, in (0, 1); default 0.99.
    q0, rho0 : float
        Input mean squared norm (> 0) and mean cosine (in [-1, 1]) (default: a ModelSpec's input
        state, else 1 and 0).
    progress : bool
        Show the progress over the grid cells on stderr (:func:`remprop.progress.progress_bar`:
        a bar on a terminal, timestamped lines with the ETA in a log).
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
    if isinstance(arch, ModelSpec):  # a real model: its architecture, depth and input state
        spec, arch = arch, arch.architecture
        depth = spec.depth if depth is None else depth
        q0, rho0 = (spec.q0 if q0 is None else q0), (spec.rho0 if rho0 is None else rho0)
    elif depth is None:
        raise ValueError("depth must be given with an Architecture (a ModelSpec brings its own)")
    q0, rho0 = (1.0 if q0 is None else q0), (0.0 if rho0 is None else rho0)
    run = RunSettings(arch, check_grid_axis("betas", betas, positive=True), depth, q0, rho0, threshold)
    for name in NUMERIC_FIELDS + OPTIONAL_FIELDS:
        if name != "alpha_sa" and np.ndim(getattr(arch, name)) != 0:
            raise ValueError(f"arch.{name} must be a scalar for a trainability diagram")
    cells = run.over_alphas(alphas)
    alphas, betas = np.asarray(cells.arch.alpha_sa)[:, 0], run.beta

    state = _final_states(cells, progress, segment)
    # on the betas axis: a cell is entropy-collapsed when beta > this (the heads' factor applied)
    beta_critical_cells = np.array(arch.beta_critical(first=state["beta_critical_first"],
                                                      smallest=state["beta_critical_min"]))
    rho_final = state["rho"]
    del state
    phase = classify_phases(cells.beta, beta_critical_cells, rho_final, run.threshold)
    alpha_star = np.asarray(residual_strength.alpha_star(run, segment=segment), dtype=np.float64)
    return TrainabilityDiagram.from_arrays(
        run, alphas, phase=phase, rho_final=rho_final, beta_critical_cells=beta_critical_cells,
        beta_critical=beta_critical_cells.min(axis=0), alpha_star=alpha_star.reshape(betas.shape), alpha_max=ALPHA_MAX)


def _check_phases(grid, threshold):
    """``ValueError`` naming ``rho_final`` (or ``beta_critical_cells``) unless the stored phases are
    the ones :func:`~remprop.diagrams.phases.classify_phases` gives from the stored final cosines and
    critical betas: a damaged array (all ``nan``, cosines outside [-1, 1]) would otherwise be read as
    the diagram it disagrees with."""
    arrays = grid.arrays
    for name in ("rho_final", "beta_critical_cells"):
        values = np.asarray(arrays[name])
        if values.dtype.kind != "f":
            raise ValueError(f"{name}: holds {values.dtype} values, not floats")
    rho = np.asarray(arrays["rho_final"], dtype=np.float64)
    with np.errstate(invalid="ignore"):
        outside = np.abs(rho) > 1.0 + 1e-9
    if outside.any():
        raise ValueError(f"rho_final: a final cosine must lie in [-1, 1], got {rho[outside].flat[0]!r}")
    expected = classify_phases(grid.betas[None, :], arrays["beta_critical_cells"], rho, threshold)
    wrong = np.asarray(arrays["phase"]) != expected
    if wrong.any():
        i, j = np.argwhere(wrong)[0]
        stored_entropy = arrays["phase"][i, j] == ENTROPY_COLLAPSE
        culprit = "beta_critical_cells" if stored_entropy != (expected[i, j] == ENTROPY_COLLAPSE) else "rho_final"
        raise ValueError(f"{culprit}: {int(wrong.sum())} of {wrong.size} cells disagree with the stored phase "
                         f"(first at alpha {grid.alphas[i]:g}, beta {grid.betas[j]:g}: rho_final "
                         f"{float(rho[i, j])!r}, beta_critical_cells {float(arrays['beta_critical_cells'][i, j])!r})")


def _whole_cells(bar, depth):
    """The ``progress(steps)`` of a segmented run (``steps``: cell-blocks done) reporting whole cells to
    ``bar``: a bar counts cells, not shares of one (no ``416.7/40000 cell``)."""
    done = [0, 0]  # cell-blocks so far, cells reported

    def progress(steps):
        done[0] += steps
        cells = done[0] // depth
        if cells > done[1]:
            bar.update(cells - done[1])
            done[1] = cells

    return progress


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
        from remprop.progress import progress_bar

        bar = progress_bar(cells, unit="cell", desc=f"diagram L={depth}")
    try:
        if segment >= depth:
            return final_state(run, progress=None if bar is None else bar.update)
        sampled = propagate_at_layers(arch, run.beta, [depth], run.q0, run.rho0, segment=segment,
                                      progress=None if bar is None else _whole_cells(bar, depth))
        return {"rho": sampled.rho[..., 0], "beta_critical_first": sampled.beta_critical_first,
                "beta_critical_min": sampled.beta_critical_min[..., 0]}
    finally:
        if bar is not None:
            bar.close()
