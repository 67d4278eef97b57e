"""Figures in the paper's style: theory as lines, simulation as dots with std error bars.

The ``figure_*`` functions reproduce the simulated panels of Giorlandino & Goldt
(arXiv 2505.24333) at the paper's sizes by default (d = 720, T = 512, BERT defaults):

* :func:`figure_1d`: per-layer cosine of a 60-layer post-LN BERT, beta = 0.5,
  alpha_sa = 1 (rank collapse) and a trainable alpha_sa (1.3);
* :func:`figure_1e`: the same at beta = 3 (above beta_c: entropy collapse), 12 layers;
* :func:`figure_2`: one attention layer, output cosine against beta and the input cosine;
* :func:`figure_5`: participation ratio Y2 against beta, asymptotic theory overlaid.

Each returns a :class:`FigureResult` (a matplotlib ``Figure`` and JSON-ready data);
:meth:`FigureResult.save` writes ``<name>.png`` and ``<name>.json``. Plots use the
object-oriented matplotlib API (no pyplot, no global backend).
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np
from matplotlib import colormaps
from matplotlib.figure import Figure
from matplotlib.lines import Line2D

from remprop.theory import Architecture

from .comparison import AttentionSweep, Comparison, attention_sweep, compare

__all__ = ["FigureResult", "FIGURES", "plot_layer_comparisons", "plot_attention_sweep",
           "figure_1d", "figure_1e", "figure_2", "figure_5"]


@dataclass
class FigureResult:
    """A drawn figure and the numbers behind it.

    Attributes
    ----------
    name : str
        File stem.
    figure : matplotlib.figure.Figure
    data : dict
        JSON-ready data (settings, theory, measured means and stds, errors, timings).
    """

    name: str
    figure: Figure
    data: dict

    def save(self, out_dir) -> dict:
        """Write ``<out_dir>/<name>.png`` and ``.json``; return their paths."""
        os.makedirs(out_dir, exist_ok=True)
        png = os.path.join(out_dir, f"{self.name}.png")
        js = os.path.join(out_dir, f"{self.name}.json")
        self.figure.savefig(png, dpi=150, bbox_inches="tight")
        with open(js, "w") as fh:
            json.dump(self.data, fh, indent=1)
        return {"png": png, "json": js}


def _colours(n):
    return [colormaps["viridis"](x) for x in np.linspace(0.0, 0.85, max(n, 1))]


def _legend(ax, labels, colours, title):
    """One entry per curve (line and dot in its colour), outside the axes on the right."""
    handles = [Line2D([], [], color=c, marker="o", ms=3, lw=1.5) for c in colours]
    ax.legend(handles, labels, title=title, fontsize=7, title_fontsize=7, frameon=False,
              loc="upper left", bbox_to_anchor=(1.01, 1.0))


def plot_layer_comparisons(comparisons, labels=None, ax=None, title=None):
    """Per-layer cosine: theory lines and measured dots with std error bars.

    Parameters
    ----------
    comparisons : sequence of Comparison
    labels : sequence of str, optional
        Legend labels (default ``alpha_sa = ...``).
    ax : matplotlib Axes, optional
        Drawn into a new figure when None.

    Returns
    -------
    matplotlib Axes
    """
    comparisons = list(comparisons)
    if ax is None:
        ax = Figure(figsize=(5.0, 3.6)).add_subplot()
    labels = labels or [f"$\\alpha_{{SA}}$ = {c.settings['arch']['alpha_sa']:g}" for c in comparisons]
    colours = _colours(len(comparisons))
    for comparison, colour in zip(comparisons, colours):
        ax.plot(comparison.layers, comparison.theory.rho, "-", color=colour, lw=1.5)
        ax.errorbar(comparison.layers, comparison.mean(comparison.observable),
                    yerr=comparison.std(comparison.observable), fmt="o", ms=3, color=colour, ecolor=colour,
                    elinewidth=0.8, capsize=1.5)
    ax.set_xlabel("layer")
    ax.set_ylabel("average cosine similarity")
    ax.set_ylim(-0.02, 1.02)
    _legend(ax, labels, colours, "lines: theory\ndots: simulation (mean, std)")
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def plot_attention_sweep(sweep: AttentionSweep, quantity="cosine", ax=None, title=None):
    """One attention layer against beta: theory lines and measured dots (std error bars).

    Parameters
    ----------
    sweep : AttentionSweep
    quantity : {"cosine", "y2"}
        Output cosine (one curve per input cosine) or participation ratio.
    """
    if quantity not in ("cosine", "y2"):
        raise ValueError(f"quantity must be 'cosine' or 'y2', got {quantity!r}")
    if ax is None:
        ax = Figure(figsize=(5.0, 3.6)).add_subplot()
    fine = np.linspace(sweep.betas.min(), sweep.betas.max(), 400)
    colours = _colours(len(sweep.input_cosines))
    for r_index, colour in enumerate(colours):
        ax.plot(fine, sweep.theory_curve(quantity, fine)[r_index], "-", color=colour, lw=1.5)
        ax.errorbar(sweep.betas, sweep.measured[quantity][r_index], yerr=sweep.spread[quantity][r_index],
                    fmt="o", ms=3, color=colour, elinewidth=0.8, capsize=1.5)
    ax.set_xlabel(r"$\beta$")
    ax.set_ylabel("output cosine similarity" if quantity == "cosine" else r"participation ratio $Y_2$")
    theory_name = "theory (T -> inf)" if quantity == "y2" else "theory"
    _legend(ax, [f"input cosine {rho:g}" for rho in sweep.input_cosines], colours,
            f"lines: {theory_name}\ndots: simulation (mean, std)")
    if title:
        ax.set_title(title, fontsize=9)
    return ax


def _layer_figure(name, title, alphas, beta, depth, width, seq_len, seeds, sequences, arch, inputs, device,
                  dtype, progress):
    arch = Architecture() if arch is None else arch
    comparisons = [compare(arch.replace(alpha_sa=float(a)), beta, depth, seq_len, width, seeds, sequences,
                           inputs=inputs, device=device, dtype=dtype, progress=progress) for a in alphas]
    ax = plot_layer_comparisons(comparisons, title=title.format(beta=beta, depth=depth, d=width, T=seq_len,
                                                                n=comparisons[0].samples))
    data = {"figure": name, "comparisons": [c.to_dict(per_sequence=False) for c in comparisons],
            "max_abs_error": {f"{a:g}": c.max_abs_error for a, c in zip(alphas, comparisons)},
            "elapsed_s": sum(c.elapsed for c in comparisons)}
    return FigureResult(name, ax.figure, data)


def figure_1d(*, alphas=(1.0, 1.3), beta=0.5, depth=60, width=720, seq_len=512, seeds=2, sequences=2, arch=None,
              inputs="text", device=None, dtype="float32", progress=None) -> FigureResult:
    """Fig. 1(d): cosine per layer of a deep post-LN BERT below beta_c, theory vs simulation.

    Parameters
    ----------
    alphas : sequence of float
        Skip strengths alpha_sa (1.0 collapses; 1.3 stays trainable at 60 layers).
    beta, depth, width, seq_len, seeds, sequences, inputs, device, dtype, progress
        As :func:`~remprop.validation.comparison.compare`.
    arch : Architecture, optional
        Default BERT defaults (alpha_sa replaced by each of ``alphas``).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(d).
    """
    return _layer_figure("figure_1d", r"post-LN BERT, $\beta$={beta:g}, d={d}, T={T}, {n} sequences",
                         alphas, beta, depth, width, seq_len, seeds, sequences, arch, inputs, device, dtype,
                         progress)


def figure_1e(*, alphas=(1.0, 1.3), beta=3.0, depth=12, width=720, seq_len=512, seeds=2, sequences=2, arch=None,
              inputs="text", device=None, dtype="float32", progress=None) -> FigureResult:
    """Fig. 1(e): as :func:`figure_1d` above beta_c (beta = 3, 12 layers; entropy collapse).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(e).
    """
    return _layer_figure("figure_1e", r"post-LN BERT, $\beta$={beta:g}, d={d}, T={T}, {n} sequences",
                         alphas, beta, depth, width, seq_len, seeds, sequences, arch, inputs, device, dtype,
                         progress)


def figure_2(*, betas=np.linspace(0.25, 4.0, 16), input_cosines=(0.1, 0.3, 0.5, 0.7, 0.9), width=720,
             seq_len=512, seeds=2, sequences=2, arch=None, device=None, dtype="float32",
             progress=None) -> FigureResult:
    """Fig. 2: output cosine of one softmax attention layer against beta and the input cosine.

    Inputs are Gaussian tokens with q = 1 and the given cosines; the layer has values
    ``sigma_v2`` and value bias ``sigma_b2`` of ``arch`` and no skip or LayerNorm. Theory:
    ``p_A / q_A`` of :func:`remprop.theory.softmax_attention_map`.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 2.
    """
    sweep = attention_sweep(betas, input_cosines, arch=arch, width=width, seq_len=seq_len, seeds=seeds,
                            sequences=sequences, device=device, dtype=dtype, progress=progress)
    n = len(sweep.settings["seeds"]) * sweep.settings["sequences"]
    ax = plot_attention_sweep(sweep, "cosine", title=f"one attention layer, d={width}, T={seq_len}, {n} sequences")
    err = np.abs(sweep.theory["cosine"] - sweep.measured["cosine"])
    data = {"figure": "figure_2", **sweep.to_dict(), "max_abs_error": float(err.max()),
            "max_abs_error_per_input_cosine": err.max(axis=1).tolist()}
    return FigureResult("figure_2", ax.figure, data)


def figure_5(*, betas=np.linspace(0.2, 5.0, 25), width=720, seq_len=512, seeds=2, sequences=2, q0=1.0, rho0=0.0,
             arch=None, device=None, dtype="float32", progress=None) -> FigureResult:
    """Fig. 5: participation ratio Y2 of attention rows against beta, asymptotic theory overlaid.

    Theory: ``Y2 = max(0, 1 - beta_c / beta)``, ``beta_c = sqrt(2 / (q (q - p)))``
    (T -> infinity); at finite T the simulation lies above it near and below beta_c.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 5.
    """
    sweep = attention_sweep(betas, (rho0,), arch=arch, q0=q0, width=width, seq_len=seq_len, seeds=seeds,
                            sequences=sequences, device=device, dtype=dtype, progress=progress)
    n = len(sweep.settings["seeds"]) * sweep.settings["sequences"]
    ax = plot_attention_sweep(sweep, "y2", title=f"attention participation ratio, d={width}, T={seq_len}, "
                                                 f"{n} sequences")
    err = np.abs(sweep.theory["y2"] - sweep.measured["y2"])[0]
    data = {"figure": "figure_5", **sweep.to_dict(), "abs_error_y2": err.tolist(), "max_abs_error": float(err.max())}
    return FigureResult("figure_5", ax.figure, data)


#: Figure name -> function, for a ``figures`` command.
FIGURES = {"1d": figure_1d, "1e": figure_1e, "2": figure_2, "5": figure_5}
