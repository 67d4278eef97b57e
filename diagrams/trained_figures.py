"""Trained against predicted trainability diagram, on one figure (matplotlib, no torch).

Left panel: the theory's diagram on a fine grid, drawn by
:func:`~remprop.diagrams.theory_figures.trainability_figure` (phase regions, the beta_c line
and the alpha*(L) curve), and over it one marker per trained cell: its *trained* phase by
shape and fill (the markers of :mod:`remprop.diagrams.measured_figures`; a grey cross for a
cell that did not train and shows neither collapse at init, a black star for a cell whose
training diverged); cells whose trained phase differs from the prediction carry a thick
black ring. The legend shows these very markers (the scatter artists themselves, at their
size). Right panel: the trained fraction ``f`` of every cell as a table of equal cells,
one column per beta and one row per alpha of the grid (``cividis``, monotone in lightness,
0 to 1; the value written in each cell of a small grid), with the cells' own boundaries
drawn along their edges: where the predicted phase of the cells changes (white dashed) and
around the cells with ``f >= diagram.TRAINED_FRACTION`` (solid black) -- no contour interpolated through a
coarse grid. The title gives both agreements, and the agreement with the learning-rate window at the
grid's rate (:attr:`TrainedDiagram.agreement_at_rate
<remprop.validation.training.trained_diagram.TrainedDiagram.agreement_at_rate>`).

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333, Fig. 1(c, f).
"""
from __future__ import annotations

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .measured_figures import MARKERS, cell_boundaries, fine_prediction
from .style import NORM_TITLES, PHASE_STYLE, keep_labels_clear, new_figure
from .theory_figures import trainability_figure

__all__ = ["trained_diagram_figure", "UNTRAINED_STYLE", "DIVERGED_STYLE"]

#: Marker and colour of a cell that did not train although its initialisation shows no collapse.
UNTRAINED_STYLE = dict(marker="X", color="#9e9e9e", text="untrained (no collapse at init)")
#: Marker and colour of a cell whose training diverged (a non-finite loss or weights).
DIVERGED_STYLE = dict(marker="*", color="#212121", text="diverged (loss not finite)")


#: Largest grid whose trained fractions are written in the cells of the right panel.
_WRITTEN_CELLS = 64


def trained_diagram_figure(diagram, *, fine_points=120) -> Figure:
    r"""Draw a :class:`~remprop.validation.training.trained_diagram.TrainedDiagram`.

    The diagram carries its trained numbers and its prediction (``diagram.predicted``, whose
    architecture gives the fine background diagram), so drawing needs no torch.

    Parameters
    ----------
    diagram : TrainedDiagram
    fine_points : int
        Points per axis of the fine predicted diagram drawn as background.

    Returns
    -------
    matplotlib.figure.Figure
        Two panels: trained phases over the theory's (left), trained fraction per cell (right).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(c, f); docs/theory.md section 6.
    """
    spec, cfg = diagram.spec, diagram.spec.config
    betas, alphas = diagram.betas, diagram.alphas
    fine_b, fine_a, fine, (b_lo, b_hi, a_lo, a_hi) = fine_prediction(diagram, fine_points)

    fig = new_figure(12.0, 6.0)
    left, right = fig.subplots(1, 2)
    trainability_figure(fine, ax=left)
    left.set_title(f"background: predicted ({diagram.theory} theory); markers: trained", fontsize=10)
    size = float(np.clip(2600.0 / max(len(betas), len(alphas)) ** 1.35, 18.0, 150.0))
    styles = {code: (MARKERS[code], PHASE_STYLE[code]["marker_color"], PHASE_STYLE[code]["text"]) for code in MARKERS}
    untrained = max(styles) + 1
    styles[untrained] = (UNTRAINED_STYLE["marker"], UNTRAINED_STYLE["color"], UNTRAINED_STYLE["text"])
    styles[untrained + 1] = (DIVERGED_STYLE["marker"], DIVERGED_STYLE["color"], DIVERGED_STYLE["text"])
    handles = []  # the scatter artists themselves: the legend shows the plot's markers
    for code, (marker, colour, text) in styles.items():
        rows, cols = np.nonzero(diagram.phase == code)
        if rows.size:
            handles.append(left.scatter(betas[cols], alphas[rows], s=size, marker=marker, facecolor=colour,
                                        edgecolor="black", linewidth=0.9, zorder=5, label=f"trained: {text}"))
    bad_rows, bad_cols = np.nonzero(~diagram.agrees)
    if bad_rows.size:
        handles.append(left.scatter(betas[bad_cols], alphas[bad_rows], s=size * 2.6, marker="o", facecolor="none",
                                    edgecolor="black", linewidth=1.8, zorder=6,
                                    label="trained differs from predicted"))
    left.set_xlim(b_lo, b_hi)
    left.set_ylim(a_lo, a_hi)
    fig.legend(handles=handles, loc="outside lower left", ncol=2, fontsize=8, frameon=False)

    _fraction_table(fig, right, diagram)
    arch, cells = cfg.arch, diagram.agrees.size
    at_rate = diagram.agreement_at_rate
    rate = "" if at_rate is None else (f"; with the learning-rate window at lr {cfg.lr:g}: "
                                       f"{round(at_rate * cells)}/{cells} ({100 * at_rate:.0f}%)")
    fig.suptitle(
        f"trained diagram: {NORM_TITLES.get(arch.norm, arch.norm)} {arch.attention} attention, {arch.activation} "
        f"MLP, $L = {cfg.depth}$, $d = {cfg.width}$, $T = {cfg.seq_len}$, {cfg.steps} steps, "
        f"{len(spec.seeds)} seed(s)\n"
        f"trained phase = predicted in {int(diagram.agrees.sum())}/{cells} cells "
        f"({100 * diagram.agreement:.0f}%); trainable or not agrees in {int(diagram.agrees_trainable.sum())}/"
        f"{cells} ({100 * diagram.agreement_trainable:.0f}%){rate}", fontsize=11)
    return keep_labels_clear(fig)


def _fraction_table(fig, ax, diagram):
    """The trained fraction per cell on equal cells (column j = beta_j, row i = alpha_i), with the
    predicted-phase boundaries and the ``f >= diagram.TRAINED_FRACTION`` boundary along the cells' edges."""
    betas, alphas, fraction = diagram.betas, diagram.alphas, diagram.fraction
    rows, cols = fraction.shape
    mesh = ax.pcolormesh(np.arange(cols + 1) - 0.5, np.arange(rows + 1) - 0.5, fraction, cmap="cividis",
                         vmin=0.0, vmax=1.0, rasterized=True)
    fig.colorbar(mesh, ax=ax, label=r"trained fraction $f = (U - L) / (U - R)$")
    if fraction.size <= _WRITTEN_CELLS:
        for (i, j), value in np.ndenumerate(fraction):
            text = "n/a" if not np.isfinite(value) else f"{value:.2f}"
            ax.text(j, i, text, ha="center", va="center", fontsize=9,
                    color="black" if np.isfinite(value) and value > 0.55 else "white")
    legend = []
    predicted = diagram.predicted.phase
    segments = cell_boundaries(predicted)
    if segments:
        ax.add_collection(LineCollection(segments, colors="white", linestyles="--", linewidths=2.2, zorder=4))
        legend.append(Line2D([], [], color="white", linestyle="--", linewidth=2.2,
                             label="predicted phase changes"))
    level = diagram.TRAINED_FRACTION
    segments = cell_boundaries(np.nan_to_num(fraction, nan=0.0) >= level)
    if segments:
        ax.add_collection(LineCollection(segments, colors="black", linewidths=2.2, zorder=3))
        legend.append(Line2D([], [], color="black", linewidth=2.2, label=rf"edge of the cells with $f \geq {level:g}$"))
    ax.set_xticks(np.arange(cols), [f"{b:.3g}" for b in betas])
    ax.set_yticks(np.arange(rows), [f"{a:.3g}" for a in alphas])
    ax.set_xlim(-0.5, cols - 0.5)
    ax.set_ylim(-0.5, rows - 0.5)
    ax.set_xlabel(r"query/key scale $\beta$ (one column per grid value)")
    ax.set_ylabel(r"attention skip strength $\alpha_{SA}$ (one row per grid value)")
    ax.set_title(f"unigram loss U = {diagram.unigram_loss:.3g}, best cell R = {diagram.reference_loss:.3g}",
                 fontsize=10)
    if legend:
        fig.legend(handles=legend, loc="outside lower right", fontsize=8, frameon=True, facecolor="0.55",
                   labelcolor="white")
