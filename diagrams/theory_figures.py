"""Theory figures in the paper's visual language (matplotlib, no pyplot state).

* :func:`trainability_figure` -- phases over (beta, alpha_sa) with the beta_c line and
  the alpha*(L) curve (paper Fig. 1(c));
* :func:`attention_phase_figure` -- one attention layer: output cosine over
  (beta, input cosine) with the beta_c(rho) curve, and Y2 against beta (Fig. 2, Fig. 5);
* :func:`layernorm_placement_figure` -- mean cosine over depth for post-LN, pre-LN and
  their gain-controlled versions (Fig. 4).

Every function returns a :class:`matplotlib.figure.Figure` (the one of ``ax`` when an
Axes is passed); save it with ``fig.savefig(path)``. Nothing is registered with pyplot.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from remprop.theory.work_estimates import MAX_DRAWN_PER_AXIS, spread_indices

from .figure_data import attention_phase_data, layernorm_placement_data
from .style import (LINE, NORM_TITLES, PHASE_STYLE, VARIANT_STYLE, draw_phases, keep_labels_clear, new_figure,
                    phase_label)

__all__ = ["trainability_figure", "attention_phase_figure", "layernorm_placement_figure", "ALPHA_STAR_BEYOND_LABEL"]

#: Smallest share of the grid a phase needs to get a text label inside its region.
_LABEL_MIN_SHARE = 0.02
#: Legend entry of the dotted alpha*(L) where a column's beta exceeds its smallest beta_c (entropy
#: collapse in part of the column: ``TrainabilityDiagram.beta_critical``).
ALPHA_STAR_BEYOND_LABEL = r"$\alpha^*(L)$ where $\beta > \beta_c$ (entropy collapse in the column)"


def _theory_length(seq_len) -> str:
    r"""The theory's T in a title: ``$T = 1024$`` (finite-T maps), ``$T \to \infty$`` (None)."""
    return r"$T \to \infty$" if seq_len is None else rf"$T = {seq_len}$"


def trainability_figure(diagram, ax=None):
    r"""Draw a trainability diagram: phases over (beta, alpha_sa).

    Regions are filled by phase (colours of distinct lightness, collapsed phases hatched)
    and labelled in place; the dashed line is the critical beta (a vertical line at the
    first layer's :math:`\beta_c = \sqrt{2 / (q_0 (q_0 - p_0))}` for post-LN, the
    contour :math:`\beta = \beta_c` of the smallest per-layer value for pre-LN and no
    LN); the solid curve is the minimum residual strength :math:`\alpha^*(L)` per beta.
    The title states the stack, the depth, the theory's sequence length T (``arch.seq_len``;
    :math:`T \to \infty` when None) and the collapse threshold (rank collapse: final mean
    cosine of two tokens above it). The dotted continuation of alpha*(L) where beta exceeds
    beta_c (inside entropy collapse) has its own legend entry.

    A figure cannot show more cells than its pixels: a grid with more than
    :data:`~remprop.theory.work_estimates.MAX_DRAWN_PER_AXIS` (1000) betas or alphas is drawn
    from that many evenly spread columns or rows, ends included, so that drawing stays
    within a bounded memory and time; the diagram itself (and the npz and JSON files it
    saves) keeps the full grid, and the alpha* curve is drawn at every beta.

    Parameters
    ----------
    diagram : TrainabilityDiagram
        From :func:`remprop.diagrams.trainability_diagram`.
    ax : matplotlib.axes.Axes, optional
        Axes to draw into; a new Figure is made when omitted.

    Returns
    -------
    matplotlib.figure.Figure

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(c).
    """
    alone = ax is None
    if alone:
        ax = new_figure(6.4, 4.8).add_subplot()
    # at most MAX_DRAWN_PER_AXIS rows and columns: no more than a figure's pixels
    rows = spread_indices(len(diagram.alphas), MAX_DRAWN_PER_AXIS)
    columns = spread_indices(len(diagram.betas), MAX_DRAWN_PER_AXIS)
    betas, alphas = diagram.betas[columns], diagram.alphas[rows]
    phase = diagram.phase[np.ix_(rows, columns)]
    codes = draw_phases(ax, betas, alphas, phase)
    two_d = len(betas) > 1 and len(alphas) > 1
    for code in codes:
        style = PHASE_STYLE[code]
        mask = phase == code
        if style["hatch"] and two_d and mask.any():
            hatched = ax.contourf(betas, alphas, mask.astype(float), levels=[0.5, 1.5], colors="none",
                                  hatches=[style["hatch"]])
            hatched.set_edgecolor(style["hatch_color"])
            hatched.set_linewidth(0.0)
        if mask.mean() >= _LABEL_MIN_SHARE:
            phase_label(ax, betas, alphas, mask, code)
    handles = [Patch(facecolor=PHASE_STYLE[c]["color"], hatch=PHASE_STYLE[c]["hatch"],
                     edgecolor=PHASE_STYLE[c]["hatch_color"] or "0.5", label=PHASE_STYLE[c]["text"])
               for c in codes]
    # beta_c: one value for post-LN (first layer), a contour for pre-LN / no LN.
    beta_c_cells = diagram.beta_critical_cells[np.ix_(rows, columns)]
    rule = diagram.beta_critical_rule.replace("attention ", "")  # "first layer" / "smallest over layers"
    beta_c_label = rf"$\beta_c$ ({rule})"
    finite_bc = beta_c_cells[np.isfinite(beta_c_cells)]
    # one value over the grid (post-LN: the input decides) is a line, otherwise a contour
    if finite_bc.size and np.ptp(finite_bc) <= 1e-12 * finite_bc.max():
        if betas.min() <= finite_bc[0] <= betas.max():
            ax.axvline(finite_bc[0], **LINE["beta_critical"])
        handles.append(Line2D([], [], label=rf"$\beta_c = {finite_bc[0]:.3g}$ ({rule})",
                              **LINE["beta_critical"]))
    elif two_d:
        with np.errstate(invalid="ignore"):
            gap = betas[None, :] - beta_c_cells
        if np.isfinite(gap).any() and np.nanmin(gap) < 0 < np.nanmax(gap):  # all nan: no contour, no warning
            ax.contour(betas, alphas, gap, levels=[0.0], colors=LINE["beta_critical"]["color"],
                       linestyles=LINE["beta_critical"]["linestyle"],
                       linewidths=LINE["beta_critical"]["linewidth"])
        handles.append(Line2D([], [], label=beta_c_label, **LINE["beta_critical"]))
    # alpha*(L): solid where the column's beta is below beta_c, dotted inside entropy collapse.
    alpha_star = np.where(np.isfinite(diagram.alpha_star), diagram.alpha_star, np.nan)
    below = diagram.betas <= diagram.beta_critical
    ax.plot(diagram.betas, np.where(below, alpha_star, np.nan), **LINE["alpha_star"])
    beyond = ~below | np.r_[~below[1:], False]  # overlap one point so the curve stays joined
    ax.plot(diagram.betas, np.where(beyond, alpha_star, np.nan), **LINE["alpha_star_beyond"])
    handles.append(Line2D([], [], label=rf"$\alpha^*(L)$, $L = {diagram.depth}$", **LINE["alpha_star"]))
    if np.isfinite(alpha_star[~below]).any():  # the dotted continuation is drawn: the legend names it
        handles.append(Line2D([], [], label=ALPHA_STAR_BEYOND_LABEL, **LINE["alpha_star_beyond"]))
    ax.set_xlim(*_span(betas))
    ax.set_ylim(*_span(alphas))
    ax.set_xlabel(r"query/key scale $\beta$")
    ax.set_ylabel(r"attention skip strength $\alpha_{SA}$")
    arch = diagram.arch
    heads = "" if arch.heads == 1 else (f"{arch.heads} heads" + (r" ($\beta$ per head $\times$" f" {arch.heads})"
                                                                   if arch.head_factor > 1 else "") + ", ")
    ax.set_title(f"{NORM_TITLES[arch.norm]} {arch.attention} attention, {heads}{arch.activation} MLP, "
                 rf"$L = {diagram.depth}$, {_theory_length(arch.seq_len)}" "\n"
                 rf"rank collapse: $\rho_L > {diagram.threshold:g}$ (final mean token cosine)",
                 fontsize=10)
    ax.legend(handles=handles, **_BELOW_AXES)
    if alone:  # a caller that passes its axes draws more and keeps the labels clear itself
        keep_labels_clear(ax.figure)
    return ax.figure


#: Where :func:`trainability_figure` puts its legend: below the axes, under the beta label.
_BELOW_AXES = dict(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=3, fontsize=8, frameon=False)


def add_to_legend(ax, handles):
    """Append ``handles`` (artists or proxy artists with labels) to the legend that
    :func:`trainability_figure` put below ``ax`` (a new one there when it has none), in as many of its
    columns as fit in the figure's width."""
    legend = ax.get_legend()
    old = list(legend.legend_handles) if legend is not None else []
    labels = [text.get_text() for text in legend.get_texts()] if legend is not None else []
    handles = list(handles)
    figure = ax.figure
    for columns in range(_BELOW_AXES["ncol"], 0, -1):  # fewer columns where long labels would overflow
        legend = ax.legend(handles=old + handles, labels=labels + [h.get_label() for h in handles],
                           **dict(_BELOW_AXES, ncol=columns))
        if legend.get_window_extent().width <= figure.bbox.width:
            break


def attention_phase_figure(betas=None, input_cosines=None, *, sigma_v2=1.0, sigma_b2=0.0, q=1.0,
                           y2_cosines=(0.0, 0.5, 0.8, 0.95), data=None):
    r"""One attention layer: output cosine over (beta, input cosine), and Y2 against beta.

    Left: the output cosine :math:`p_A / q_A` of softmax attention alone (no skip, no
    LayerNorm, T -> infinity) as a colour map over the query/key scale and the input
    cosine, with the REM transition :math:`\beta_c(\rho) = \sqrt{2 / (q^2 (1 - \rho))}`
    (dashed). Left of it attention is spread (output tokens all equal the mean, cosine 1:
    the rank-collapse side); right of it rows localise (entropy collapse). Right: the
    participation ratio :math:`Y_2 = \max(0, 1 - \beta_c / \beta)` against beta for a few
    input cosines. Defaults: ``sigma_v2 = 1``, ``sigma_b2 = 0``, ``q = 1``; the numbers
    come from :func:`remprop.diagrams.attention_phase_data` (pass ``data`` to reuse them).

    Returns
    -------
    matplotlib.figure.Figure

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 2 and Fig. 5.
    """
    if data is None:
        data = attention_phase_data(betas, input_cosines, sigma_v2=sigma_v2, sigma_b2=sigma_b2, q=q,
                                    y2_cosines=y2_cosines)
    fig = new_figure(10.0, 4.2)
    left, right = fig.subplots(1, 2, width_ratios=[1.25, 1.0])
    betas, cosines = data["betas"], data["input_cosines"]
    mesh = left.pcolormesh(betas, cosines, data["output_cosine"], cmap="viridis", vmin=0.0, vmax=1.0,
                           shading="nearest", rasterized=True)
    fig.colorbar(mesh, ax=left, label=r"output cosine $p_A / q_A$")
    inside = np.isfinite(data["beta_critical"]) & (data["beta_critical"] <= betas.max())
    left.plot(data["beta_critical"][inside], cosines[inside], color="white", linestyle="--", linewidth=2.0,
              label=r"$\beta_c(\rho) = \sqrt{2 / (q^2 (1 - \rho))}$")
    left.set_xlim(*_span(betas))
    left.set_ylim(*_span(cosines))
    left.set_xlabel(r"query/key scale $\beta$")
    left.set_ylabel(r"input cosine $\rho$")
    left.set_title("one attention layer: output cosine", fontsize=10)
    left.text(0.04, 0.5, "spread\n(rank-collapse side)", transform=left.transAxes, color="black",
              fontsize=9, va="center", bbox=dict(boxstyle="round,pad=0.2", facecolor="white", alpha=0.8,
                                                 edgecolor="none"))
    left.text(0.96, 0.08, "localised\n(entropy-collapse side)", transform=left.transAxes, ha="right",
              color="white", fontsize=9)
    left.legend(loc="upper right", fontsize=8, framealpha=0.85)
    styles = ["-", "--", "-.", ":"]
    for k, (rho, y2) in enumerate(zip(data["y2_cosines"], data["y2"])):
        right.plot(betas, y2, linestyle=styles[k % len(styles)], linewidth=1.8,
                           label=rf"$\rho = {rho:g}$ ($\beta_c = {data['y2_beta_critical'][k]:.3g}$)")
    right.set_xlim(*_span(betas))
    right.set_ylim(-0.02, 1.0)
    right.set_xlabel(r"query/key scale $\beta$")
    right.set_ylabel(r"participation ratio $Y_2$")
    right.set_title(r"$Y_2 = \max(0,\, 1 - \beta_c/\beta)$, $T \to \infty$", fontsize=10)
    right.legend(loc="upper left", fontsize=8, title="input cosine", title_fontsize=8)
    fig.suptitle(rf"Attention as a Random Energy Model ($\sigma_v^2 = {data['sigma_v2']:g}$, "
                 rf"$\sigma_b^2 = {data['sigma_b2']:g}$, $q = {data['q']:g}$)", fontsize=11)
    return fig


def layernorm_placement_figure(run=None, *, sigma_bv2=0.0, data=None, ax=None):
    r"""Mean token cosine over depth for post-LN, pre-LN and their gain-controlled versions.

    Numbers from :func:`remprop.diagrams.layernorm_placement_data` of ``run`` and
    ``sigma_bv2`` (pass ``data`` to reuse them). The default run is the reference figure's
    (:data:`~remprop.diagrams.figure_data.LAYERNORM_REFERENCE_RUN`: ``sigma_w2 = 0.2``,
    ``sigma_b2 = 0.02**2`` on the MLP biases, no value bias, ``sigma_v2 = 1``, alphas 1,
    ``beta = 0.1``, ``rho0 = 0.2``, ``q0 = 1``, 100 blocks); the legend states them.

    Returns
    -------
    matplotlib.figure.Figure

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 4.
    """
    if data is None:
        data = layernorm_placement_data(run, sigma_bv2=sigma_bv2)
    if ax is None:
        ax = new_figure(6.4, 4.4).add_subplot()
    for name, rho in data["rho"].items():
        ax.plot(data["layers"], rho, linewidth=2.0, label=name, **VARIANT_STYLE[name])
    s = data["settings"]
    ax.set_xlim(0, data["layers"][-1])
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel(r"layer $\ell$")
    ax.set_ylabel(r"mean token cosine $\rho_\ell$")
    ax.set_title("LayerNorm placement and gain control", fontsize=10)
    note = (rf"$\beta = {s['beta']:g}$, $\sigma_w^2 = {s['sigma_w2']:g}$, "
            rf"$\sigma_v^2 = {s['sigma_v2']:g}$, $\sigma_b^2 = {s['sigma_b2']:g}$ (MLP), "
            rf"$\sigma_{{b,V}}^2 = {s['sigma_bv2']:g}$ (values)" "\n"
            rf"$\alpha_{{SA}} = {s['alpha_sa']:g}$, $\alpha_{{MLP}} = {s['alpha_mlp']:g}$, "
            rf"$\rho_0 = {s['rho0']:g}$, $q_0 = {s['q0']:g}$, {s['activation']}, $T \to \infty$")
    ax.legend(loc="lower right", fontsize=8, title=note, title_fontsize=7, framealpha=0.9)
    ax.grid(alpha=0.3)
    return ax.figure


def _span(values):
    """Axis limits of a grid axis: its smallest and largest value, widened by 5% of the value
    (or 0.05 at zero) on each side when the axis holds one value (matplotlib warns on equal limits)."""
    low, high = float(np.min(values)), float(np.max(values))
    if low == high:
        pad = 0.05 * abs(low) if low else 0.05
        return low - pad, high + pad
    return low, high
