"""Trained against predicted trainability diagram, on one figure (matplotlib, no torch).

Left panel: the theory's diagram on a fine grid, drawn by
:func:`~remprop.diagrams.theory_figures.trainability_figure` (phase regions, the beta_c line
and the alpha*(L) curve), and over it one marker per trained cell: its *trained* phase by
shape and fill (the markers of :mod:`remprop.diagrams.measured_figures`; a grey cross for a
cell that did not train and shows neither collapse at init, a black star for a cell whose
training diverged); cells whose trained phase
differs from the prediction carry a thick black ring. Right panel: the trained fraction
``f`` of every cell (``cividis``, monotone in lightness, 0 to 1) with the theory's phase
boundaries drawn over it (white dashed: where the predicted phase changes) and the
contour ``f = diagram.TRAINED_FRACTION`` (solid black) that separates trainable cells. The title gives both
agreements.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333, Fig. 1(c, f).
"""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from .measured_figures import MARKERS, fine_prediction
from .style import NORM_TITLES, PHASE_STYLE
from .theory_figures import trainability_figure

__all__ = ["trained_diagram_figure", "UNTRAINED_STYLE", "DIVERGED_STYLE"]

#: Marker and colour of a cell that did not train although its initialisation shows no collapse.
UNTRAINED_STYLE = dict(marker="X", color="#9e9e9e", text="untrained (no collapse at init)")
#: Marker and colour of a cell whose training diverged (a non-finite loss or weights).
DIVERGED_STYLE = dict(marker="*", color="#212121", text="diverged (loss not finite)")


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
        Two panels: trained phases over the theory's (left), trained fraction (right).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(c, f); docs/theory.md section 6.
    """
    spec, cfg = diagram.spec, diagram.spec.config
    betas, alphas = diagram.betas, diagram.alphas
    fine_b, fine_a, fine, (b_lo, b_hi, a_lo, a_hi) = fine_prediction(diagram, fine_points)

    fig = Figure(figsize=(12.0, 5.4), layout="constrained")
    left, right = fig.subplots(1, 2)
    trainability_figure(fine, ax=left)
    left.set_title(f"background: predicted ({diagram.theory} theory); markers: trained", fontsize=10)
    size = float(np.clip(2600.0 / max(len(betas), len(alphas)) ** 1.35, 18.0, 150.0))
    styles = {code: (MARKERS[code], PHASE_STYLE[code]["color"], PHASE_STYLE[code]["text"]) for code in MARKERS}
    untrained = max(styles) + 1
    styles[untrained] = (UNTRAINED_STYLE["marker"], UNTRAINED_STYLE["color"], UNTRAINED_STYLE["text"])
    styles[untrained + 1] = (DIVERGED_STYLE["marker"], DIVERGED_STYLE["color"], DIVERGED_STYLE["text"])
    handles = []
    for code, (marker, colour, text) in styles.items():
        rows, cols = np.nonzero(diagram.phase == code)
        if rows.size:
            left.scatter(betas[cols], alphas[rows], s=size, marker=marker, facecolor=colour, edgecolor="black",
                         linewidth=0.9, zorder=5, clip_on=False)
            handles.append(Line2D([], [], linestyle="none", marker=marker, markersize=8, markerfacecolor=colour,
                                  markeredgecolor="black", label=f"trained: {text}"))
    bad_rows, bad_cols = np.nonzero(~diagram.agrees)
    if bad_rows.size:
        left.scatter(betas[bad_cols], alphas[bad_rows], s=size * 2.6, marker="o", facecolor="none",
                     edgecolor="black", linewidth=1.8, zorder=6, clip_on=False)
        handles.append(Line2D([], [], linestyle="none", marker="o", markersize=12, markerfacecolor="none",
                              markeredgecolor="black", markeredgewidth=1.8, label="trained differs from predicted"))
    left.set_xlim(b_lo, b_hi)
    left.set_ylim(a_lo, a_hi)
    fig.legend(handles=handles, loc="outside lower left", ncol=2, fontsize=8, frameon=False)

    mesh = right.pcolormesh(betas, alphas, diagram.fraction, cmap="cividis", vmin=0.0, vmax=1.0,
                            shading="nearest", rasterized=True)
    fig.colorbar(mesh, ax=right, label=r"trained fraction $f = (U - L) / (U - R)$")
    legend = []
    if len(np.unique(fine.phase)) > 1:
        right.contour(fine_b, fine_a, fine.phase.astype(float), levels=[0.5, 1.5], colors="white",
                      linestyles="--", linewidths=1.8)
        legend.append(Line2D([], [], color="white", linestyle="--", linewidth=1.8,
                             label="predicted phase boundaries"))
    level = diagram.TRAINED_FRACTION
    gap = diagram.fraction - level
    if len(betas) > 1 and len(alphas) > 1 and gap.min() < 0 < gap.max():
        right.contour(betas, alphas, gap, levels=[0.0], colors="black", linewidths=1.8)
        legend.append(Line2D([], [], color="black", linewidth=1.8, label=rf"trained $f = {level:g}$"))
    right.set_xlim(b_lo, b_hi)
    right.set_ylim(a_lo, a_hi)
    right.set_facecolor("0.35")  # shows behind a contour legend on light cells too
    right.set_xlabel(r"query/key scale $\beta$")
    right.set_ylabel(r"attention skip strength $\alpha_{SA}$")
    right.set_title(f"unigram loss U = {diagram.unigram_loss:.3g}, best cell R = {diagram.reference_loss:.3g}",
                    fontsize=10)
    if legend:
        fig.legend(handles=legend, loc="outside lower right", fontsize=8, frameon=True, facecolor="0.35",
                   labelcolor="white")
    arch = cfg.arch
    fig.suptitle(
        f"trained diagram: {NORM_TITLES.get(arch.norm, arch.norm)} {arch.attention} attention, {arch.activation} "
        f"MLP, $L = {cfg.depth}$, $d = {cfg.width}$, $T = {cfg.seq_len}$, {cfg.steps} steps, "
        f"{len(spec.seeds)} seed(s)\n"
        f"trained phase = predicted in {int(diagram.agrees.sum())}/{diagram.agrees.size} cells "
        f"({100 * diagram.agreement:.0f}%); trainable or not agrees in {int(diagram.agrees_trainable.sum())}/"
        f"{diagram.agrees.size} ({100 * diagram.agreement_trainable:.0f}%)", fontsize=11)
    return fig
