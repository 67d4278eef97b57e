r"""Figures of one attention layer at initialisation: its maps (Fig. 1(a, b)) and spectrum (Fig. 7).

* :func:`attention_maps_figure` -- the ``T x T`` attention matrices at a small and a large
  beta, the predicted and measured participation ratio in the titles;
* :func:`bulk_radius_data` and :func:`bulk_radius_figure` -- the theory of Fig. 7: the
  predicted outer radius of the non-Perron eigenvalues against beta
  (:func:`remprop.theory.attention_bulk_radius`, docs/theory.md section 13);
* :func:`attention_spectrum_figure` -- Fig. 7 with the simulation: eigenvalues in the
  complex plane per beta with the predicted circles, and the measured radius against
  beta over the theory.

The data come from :mod:`remprop.validation.attention_maps` (simulation) or
:func:`bulk_radius_data` (theory); nothing here imports torch.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333, Figs. 1(a, b) and 7.
"""
from __future__ import annotations

import numpy as np

from remprop.theory import attention_bulk_radius, beta_critical
from remprop.theory.checks import check_grid_axis

from .style import CURVE_MARKERS, curve_colours, new_figure

__all__ = ["attention_maps_figure", "map_norm", "MAP_PERCENTILES", "bulk_radius_data", "bulk_radius_figure", "attention_spectrum_figure"]

_CIRCLE = np.exp(2j * np.pi * np.linspace(0.0, 1.0, 361))


def _phase_word(beta, beta_c):
    return "below" if beta < beta_c else "above"


#: Percentiles of ``T A_ij`` at the ends of each map's logarithmic colour scale.
MAP_PERCENTILES = (1.0, 99.9)


def map_norm(matrix):
    """The colour scale of one attention map: logarithmic in ``T A_ij`` (attention relative to
    the uniform ``1/T``), from its 1st to its 99.9th percentile (:data:`MAP_PERCENTILES`).

    A linear scale up to the largest weight shows a near-uniform map (small beta, every
    ``A_ij`` close to ``1/T``) or a localised one (large beta, a few weights near 1, the rest
    near 0) as an almost uniformly dark square; on this scale the fluctuations around
    ``1/T`` and the spread over many decades both show.
    """
    from matplotlib.colors import LogNorm

    relative = np.asarray(matrix, dtype=float) * np.shape(matrix)[-1]
    positive = relative[relative > 0]
    if positive.size == 0:
        return LogNorm(vmin=0.5, vmax=2.0)
    low, high = np.percentile(positive, MAP_PERCENTILES)
    if not high > low:
        low, high = low / 2, high * 2
    return LogNorm(vmin=low, vmax=high)


def attention_maps_figure(data):
    """Fig. 1(a, b): attention matrices side by side, one per beta.

    Each map shows ``T A_ij`` (attention relative to the uniform ``1/T``) on its own
    logarithmic colour scale (:func:`map_norm`), so the structure of a near-uniform map and
    of a localised one both show.

    Parameters
    ----------
    data : dict
        As :func:`remprop.validation.attention_maps.attention_map_data`: ``betas``,
        ``matrices``, ``y2_theory``, ``y2_measured``, ``beta_critical``, ``settings``.

    Returns
    -------
    matplotlib.figure.Figure
    """
    count = len(data["betas"])
    fig = new_figure(4.6 * count, 4.6)
    axes = np.atleast_1d(fig.subplots(1, count))
    for ax, beta, matrix, theory, measured in zip(axes, data["betas"], data["matrices"], data["y2_theory"],
                                                  data["y2_measured"]):
        matrix = np.asarray(matrix, dtype=float)
        relative = matrix * matrix.shape[-1]
        image = ax.imshow(np.where(relative > 0, relative, np.nan), cmap="viridis", norm=map_norm(matrix),
                          interpolation="nearest")
        fig.colorbar(image, ax=ax, shrink=0.8, label=r"$T A_{ij}$ (1 = uniform attention)", extend="both")
        beta_c = data["beta_critical"]
        ax.set_title(f"$\\beta = {beta:g}$ ({_phase_word(beta, beta_c)} $\\beta_c = {beta_c:.2f}$)\n"
                     f"$Y_2$: theory {theory:.3f}, measured {measured:.3f}", fontsize=10)
        ax.set_xlabel("key $j$")
        ax.set_ylabel("query $i$")
    s = data["settings"]
    fig.suptitle(f"attention at initialisation, $T = {s['seq_len']}$, $d = {s['width']}$", fontsize=11)
    return fig


def bulk_radius_data(betas=None, seq_lens=(64, 256, 1024), width=None, q=1.0, p=0.0) -> dict:
    r"""The predicted bulk radius against beta for several sequence lengths and ``T -> infinity``.

    :func:`remprop.theory.attention_bulk_radius` on a grid (``d -> infinity`` unless
    ``width``), with the radius ``1/sqrt(T)`` of a random stochastic matrix.

    Parameters
    ----------
    betas : array_like, optional
        Grid of query/key scales (default 200 points in [0, 4]).
    seq_lens : sequence of int
        Sequence lengths T >= 2.
    width : float, optional
        Model width d for the finite-width term.
    q, p : float
        Token order parameters.

    Returns
    -------
    dict
        ``betas``, ``seq_lens``, ``radius`` (T x beta), ``radius_infinite_t``,
        ``random_stochastic_radius`` (per T), ``beta_critical``, ``width``.
    """
    betas = check_grid_axis("betas", np.linspace(0.0, 4.0, 200) if betas is None else betas, nonnegative=True)
    seq_lens = [int(t) for t in seq_lens]
    radius = np.asarray(attention_bulk_radius(betas[None, :], q, p, np.asarray(seq_lens)[:, None], width))
    return {"betas": betas, "seq_lens": seq_lens, "radius": radius,
            "radius_infinite_t": np.asarray(attention_bulk_radius(betas, q, p)),
            "random_stochastic_radius": [1.0 / np.sqrt(t) for t in seq_lens],
            "beta_critical": float(beta_critical(q, p)), "width": width}


def _draw_radius_curves(ax, data):
    colours = curve_colours(len(data["seq_lens"]))
    for colour, t, radius, reference in zip(colours, data["seq_lens"], data["radius"],
                                            data["random_stochastic_radius"]):
        ax.plot(data["betas"], radius, color=colour, label=f"$T = {t}$")
        ax.axhline(reference, color=colour, linestyle=":", linewidth=1.0)
    ax.plot(data["betas"], data["radius_infinite_t"], color="black", linestyle="--", label=r"$T \to \infty$")
    ax.axvline(data["beta_critical"], color="grey", linewidth=0.8)
    ax.set_xlabel(r"$\beta$")
    ax.set_ylabel(r"bulk radius $\sqrt{Y_2 - 1/T}$")
    ax.set_ylim(0.0, 1.0)


def bulk_radius_figure(data):
    """Fig. 7, theory: the predicted bulk radius against beta (dotted: ``1/sqrt(T)``).

    Parameters
    ----------
    data : dict
        As :func:`bulk_radius_data`.

    Returns
    -------
    matplotlib.figure.Figure
    """
    fig = new_figure(5.6, 4.2)
    ax = fig.subplots()
    _draw_radius_curves(ax, data)
    ax.set_title("eigenvalue bulk of the attention matrix (theory)\n"
                 r"dotted: $1/\sqrt{T}$, a random stochastic matrix", fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    return fig


def attention_spectrum_figure(data):
    """Fig. 7: eigenvalues of attention matrices per beta, and the radius against beta.

    One complex-plane panel per beta (the eigenvalues of every seed, the Perron one
    left out) with the predicted radius at the simulated width (solid), at
    ``d -> infinity`` (dashed) and ``1/sqrt(T)`` (dotted); a last panel with the measured
    radius (mean and std over seeds) over the predicted curves.

    Parameters
    ----------
    data : dict
        As :func:`remprop.validation.attention_maps.attention_spectrum_data`.

    Returns
    -------
    matplotlib.figure.Figure
    """
    betas = np.asarray(data["betas"])
    s = data["settings"]
    fig = new_figure(3.3 * (len(betas) + 1), 3.6)
    axes = np.atleast_1d(fig.subplots(1, len(betas) + 1))
    reference = data["random_stochastic_radius"]
    for ax, beta, values, width_radius, radius in zip(axes, betas, data["eigenvalues"], data["radius_theory_width"],
                                                      data["radius_theory"]):
        values = np.asarray(values).ravel()
        ax.scatter(values.real, values.imag, s=2, color="#1f4e79", alpha=0.5, linewidths=0, rasterized=True)
        ax.plot(width_radius * _CIRCLE.real, width_radius * _CIRCLE.imag, color="#c55a11", label=f"$d = {s['width']}$")
        ax.plot(radius * _CIRCLE.real, radius * _CIRCLE.imag, color="#c55a11", linestyle="--",
                label=r"$d \to \infty$")
        ax.plot(reference * _CIRCLE.real, reference * _CIRCLE.imag, color="grey", linestyle=":",
                label=r"$1/\sqrt{T}$")
        edge = 1.15 * max(width_radius, float(np.abs(values).max()), reference)
        ax.set_xlim(-edge, edge)
        ax.set_ylim(-edge, edge)
        ax.set_aspect("equal")
        ax.set_title(f"$\\beta = {beta:g}$ ({_phase_word(beta, data['beta_critical'])} $\\beta_c$)", fontsize=10)
        ax.set_xlabel(r"Re $\lambda$")
    axes[0].set_ylabel(r"Im $\lambda$")
    axes[0].legend(fontsize=7, loc="upper right")
    ax = axes[-1]
    fine = np.linspace(0.0, max(4.0, float(betas.max())), 120)
    theory = bulk_radius_data(fine, (s["seq_len"],), q=s["q0"], p=s["q0"] * s["rho0"])
    widths = bulk_radius_data(fine, (s["seq_len"],), width=s["width"], q=s["q0"], p=s["q0"] * s["rho0"])
    colour = curve_colours(1)[0]
    ax.plot(fine, widths["radius"][0], color="#c55a11", label=f"theory, $d = {s['width']}$")
    ax.plot(fine, theory["radius"][0], color="#c55a11", linestyle="--", label=r"theory, $d \to \infty$")
    ax.errorbar(betas, data["radius_mean"], yerr=data["radius_std"], color=colour, marker=CURVE_MARKERS[0],
                linestyle="none", capsize=2, label=f"measured ({s['quantile']:g} quantile)")
    ax.axvline(data["beta_critical"], color="grey", linewidth=0.8)
    ax.set_xlabel(r"$\beta$")
    ax.set_ylabel("bulk radius")
    ax.set_ylim(0.0, 1.0)
    ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(f"spectrum of the attention matrix at initialisation, $T = {s['seq_len']}$, $d = {s['width']}$, "
                 f"{len(s['seeds'])} seeds", fontsize=11)
    return fig
