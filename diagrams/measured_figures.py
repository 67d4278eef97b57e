"""Measured against predicted trainability diagram, on one figure (matplotlib, no pyplot).

Left panel: the predicted phases on a fine grid (filled regions in the colours of
:mod:`remprop.diagrams.style`, which differ in lightness) and, on top, one marker per
simulated cell: its *measured* phase by shape and fill (circle trainable, square rank
collapse, triangle entropy collapse; the fill is the phase's ``marker_color``, which stands out
from the region of the same phase, as the legend shows it); cells whose measured phase differs from the
prediction carry a thick black ring. Right panel: the measured final mean token cosine
per cell (``cividis``, monotone in lightness; the scale starts at the smallest value rounded down to 0.1) with the predicted rank-collapse boundary
(theory's final cosine = threshold, dashed) and the measured one (solid, along the edges of the cells
measured above the threshold: a coarse grid draws no dash). The title
gives the agreement.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333, Fig. 1(c).
"""
from __future__ import annotations

import numpy as np
from matplotlib.collections import LineCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.patheffects import Normal, Stroke

from .phases import ENTROPY_COLLAPSE, RANK_COLLAPSE, TRAINABLE
from .style import NORM_TITLES, PHASE_STYLE, draw_phases, new_figure
from .trainability import trainability_diagram

__all__ = ["measured_diagram_figure", "fine_prediction", "cell_boundaries", "cell_edges", "edges_in_data", "MARKERS"]

#: Marker of each measured phase.
MARKERS = {TRAINABLE: "o", RANK_COLLAPSE: "s", ENTROPY_COLLAPSE: "^"}
#: A white line drawn over a black one: readable on light and dark cells alike.
_OUTLINE = [Stroke(linewidth=3.6, foreground="black"), Normal()]


def _edges(values):
    """Half-step margins around grid values (a single value gets +-10%)."""
    values = np.asarray(values, dtype=float)
    if values.size == 1:
        pad = 0.1 * max(abs(values[0]), 1e-3)
        return values[0] - pad, values[0] + pad
    step = np.diff(values).min() / 2
    return values.min() - step, values.max() + step


def cell_boundaries(values) -> list:
    """Segments, in cell-index coordinates (cell ``(i, j)`` spans ``j +- 1/2``, ``i +- 1/2``), of the
    edges between neighbouring cells of ``values`` (a 2-d array) that differ."""
    values = np.asarray(values)
    segments = []
    for i, j in zip(*np.nonzero(values[:, 1:] != values[:, :-1])):  # vertical edges
        segments.append([(j + 0.5, i - 0.5), (j + 0.5, i + 0.5)])
    for i, j in zip(*np.nonzero(values[1:, :] != values[:-1, :])):  # horizontal edges
        segments.append([(j - 0.5, i + 0.5), (j + 0.5, i + 0.5)])
    return segments


def cell_edges(values) -> np.ndarray:
    """The edges of the cells that ``pcolormesh(..., shading="nearest")`` draws around grid values:
    the midpoints between neighbours and half a step beyond each end (``_edges``)."""
    values = np.asarray(values, dtype=float)
    low, high = _edges(values)
    return np.r_[low, 0.5 * (values[1:] + values[:-1]), high]


def edges_in_data(segments, xs, ys) -> list:
    """:func:`cell_boundaries` segments (cell-index coordinates) in the data coordinates of a grid drawn
    over ``xs`` (columns) and ``ys`` (rows) with ``shading="nearest"`` (:func:`cell_edges`)."""
    x_edges, y_edges = cell_edges(xs), cell_edges(ys)
    return [[(x_edges[int(round(x + 0.5))], y_edges[int(round(y + 0.5))]) for x, y in segment]
            for segment in segments]


def fine_prediction(diagram, fine_points):
    """The theory's diagram behind a measured or trained one, on a fine grid over the same range.

    Drawn from ``diagram.predicted`` (a :class:`~remprop.diagrams.TrainabilityDiagram`): its
    architecture (finite-T or T -> infinity, as the diagram chose), depth, threshold and input
    state. Returns ``(fine_betas, fine_alphas, fine_diagram, (b_lo, b_hi, a_lo, a_hi))``, the
    last the axis limits: half a step around the grid, betas above 0 and alphas from 0.
    """
    predicted = diagram.predicted
    (b_lo, b_hi), (a_lo, a_hi) = _edges(diagram.betas), _edges(diagram.alphas)
    b_lo, a_lo = max(b_lo, 1e-3), max(a_lo, 0.0)
    fine_b, fine_a = np.linspace(b_lo, b_hi, fine_points), np.linspace(a_lo, a_hi, fine_points)
    fine = trainability_diagram(predicted.arch, fine_b, fine_a, predicted.depth, predicted.threshold,
                                q0=predicted.q0, rho0=predicted.rho0)
    return fine_b, fine_a, fine, (b_lo, b_hi, a_lo, a_hi)


def measured_diagram_figure(diagram, *, fine_points=160) -> Figure:
    r"""Draw a :class:`~remprop.validation.experiments.measured_diagram.MeasuredDiagram`.

    Drawing needs no torch: the diagram carries its simulated numbers and its prediction
    (``diagram.predicted``, whose architecture gives the fine background diagram).

    Parameters
    ----------
    diagram : MeasuredDiagram
    fine_points : int
        Points per axis of the fine predicted diagram drawn as background.

    Returns
    -------
    matplotlib.figure.Figure
        Two panels: phases (left), measured final cosine (right).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(c); docs/theory.md section 6.
    """
    spec = diagram.spec
    betas, alphas = diagram.betas, diagram.alphas
    fine_b, fine_a, fine, (b_lo, b_hi, a_lo, a_hi) = fine_prediction(diagram, fine_points)

    fig = new_figure(11.5, 5.2)
    left, right = fig.subplots(1, 2)
    codes = draw_phases(left, fine_b, fine_a, fine.phase)
    agrees = diagram.agrees
    size = float(np.clip(2600.0 / max(len(betas), len(alphas)) ** 1.35, 18.0, 150.0))
    for code in codes:
        for ok in (True, False):
            rows, cols = np.nonzero((diagram.phase == code) & (agrees == ok))
            if rows.size:
                left.scatter(betas[cols], alphas[rows], s=size, marker=MARKERS[code],
                             facecolor=PHASE_STYLE[code]["marker_color"], edgecolor="black",
                             linewidth=0.8 if ok else 1.6, zorder=3, clip_on=False)
    bad_rows, bad_cols = np.nonzero(~agrees)
    if bad_rows.size:
        left.scatter(betas[bad_cols], alphas[bad_rows], s=size * 2.6, marker="o", facecolor="none",
                     edgecolor="black", linewidth=1.8, zorder=4, clip_on=False)
    beta_c = _single_beta_c(diagram)
    if beta_c is not None and b_lo <= beta_c <= b_hi:
        for ax in (left, right):
            ax.axvline(beta_c, color="black", linestyle="--", linewidth=1.3)
    left.set_xlim(b_lo, b_hi)
    left.set_ylim(a_lo, a_hi)
    left.set_xlabel(r"query/key scale $\beta$")
    left.set_ylabel(r"attention skip strength $\alpha_{SA}$")
    left.set_title(f"background: predicted ({diagram.theory} theory); markers: measured", fontsize=10)
    handles = [Patch(facecolor=PHASE_STYLE[c]["color"], edgecolor="0.4", label=f"predicted {PHASE_STYLE[c]['text']}")
               for c in codes]
    handles += [Line2D([], [], linestyle="none", marker=MARKERS[c], markersize=8,
                       markerfacecolor=PHASE_STYLE[c]["marker_color"],
                       markeredgecolor="black", label=f"measured {PHASE_STYLE[c]['text']}") for c in codes]
    handles.append(Line2D([], [], linestyle="none", marker="o", markersize=12, markerfacecolor="none",
                          markeredgecolor="black", markeredgewidth=1.8, label="measured differs from predicted"))
    if beta_c is not None:
        handles.append(Line2D([], [], color="black", linestyle="--", linewidth=1.3,
                              label=rf"$\beta_c = {beta_c:.3g}$ (first attention layer)"))
    left.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3, fontsize=7.5,
                frameon=False)

    finite = diagram.cosine_final[np.isfinite(diagram.cosine_final)]
    low = float(np.clip(np.floor(10 * finite.min()) / 10, 0.0, 0.9)) if finite.size else 0.0
    mesh = right.pcolormesh(betas, alphas, diagram.cosine_final, cmap="cividis", vmin=low, vmax=1.0,
                            shading="nearest", rasterized=True)
    fig.colorbar(mesh, ax=right, label="measured final mean token cosine")
    legend = []
    with np.errstate(invalid="ignore"):
        predicted_gap = np.where(np.isfinite(fine.rho_final), fine.rho_final, 1.0) - spec.threshold
        if np.nanmin(predicted_gap) < 0 < np.nanmax(predicted_gap):
            contour = right.contour(fine_b, fine_a, predicted_gap, levels=[0.0], colors="white", linestyles="--",
                                    linewidths=2.0)
            contour.set(path_effects=_OUTLINE)
            legend.append(Line2D([], [], color="white", linestyle="--", linewidth=2.0, path_effects=_OUTLINE,
                                 label=rf"predicted $\rho_L = {spec.threshold:g}$"))
        # the measured line runs along the edges of the cells above the threshold: a contour interpolated
        # between the few measured points of a coarse grid is a dash at a corner (one cell above)
        above = np.where(np.isfinite(diagram.cosine_final), diagram.cosine_final, 1.0) > spec.threshold
        segments = edges_in_data(cell_boundaries(above), betas, alphas)
        if segments:
            right.add_collection(LineCollection(segments, colors="black", linestyles="-", linewidths=1.8, zorder=3))
            legend.append(Line2D([], [], color="black", linestyle="-", linewidth=1.8,
                                 label=rf"measured $\rho_L = {spec.threshold:g}$ (edge of the cells above)"))
    right.set_xlim(b_lo, b_hi)
    right.set_ylim(a_lo, a_hi)
    right.set_xlabel(r"query/key scale $\beta$")
    right.set_ylabel(r"attention skip strength $\alpha_{SA}$")
    right.set_title(f"measured final cosine ({spec.samples} samples per cell)", fontsize=10)
    if legend:
        right.legend(handles=legend, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2, fontsize=8,
                     frameon=False)
    arch = spec.arch
    fig.suptitle(
        f"{NORM_TITLES.get(arch.norm, arch.norm)} {arch.attention} attention, {arch.activation} MLP, "
        f"$L = {spec.depth}$, $d = {spec.width}$, $T = {spec.seq_len}$; rank collapse: final cosine "
        f"> {spec.threshold:g}\n"
        f"measured phase = predicted phase in {int(agrees.sum())}/{agrees.size} cells "
        f"({100 * diagram.agreement:.1f}%)", fontsize=11)
    return fig


def _single_beta_c(diagram):
    """The measured first-layer beta_c when it is one value over the grid (post-LN), else None."""
    if not diagram.spec.arch.norm.normalises_stream:
        return None
    values = diagram.beta_critical_cells[np.isfinite(diagram.beta_critical_cells)]
    if values.size and np.ptp(values) <= 1e-6 * values.max():
        return float(values.mean())
    return None
