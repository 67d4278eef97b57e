r"""Theory against simulation, drawn in one visual language (matplotlib, no pyplot, no torch).

Theory is drawn as lines (``T -> infinity`` solid, the exact finite-T theory at the
simulated T thin dashed), simulation as open markers with one-standard-deviation error
bars, one colour of :func:`~remprop.diagrams.style.curve_colours` per curve. The
functions take the result objects of :mod:`remprop.validation` (``Comparison``,
``AttentionSweep``, ``CausalComparison``, ``GradientSweep``) or plain arrays and only
draw: the simulations that fill them live in :mod:`remprop.validation`.

* :func:`plot_layer_comparisons` -- cosine per layer (Fig. 1(d, e), ``remprop validate``);
* :func:`plot_attention_sweep` -- one attention layer against beta (Fig. 2, Fig. 5);
* :func:`plot_layernorm_comparison` -- the four LayerNorm placements over depth (Fig. 4);
* :func:`plot_gradient_collapse` -- query gradient norms collapsed over (T, d) (Fig. 3(c));
* :func:`plot_causal` -- last-token cosine of a causal stack, error by position (Fig. 12).

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333; docs/theory.md section 9.
"""
from __future__ import annotations

import numpy as np
from matplotlib.lines import Line2D

from remprop.theory import Architecture, beta_critical
from remprop.theory.gradients import scaled_query_gradient_norm

from .style import CURVE_MARKERS, VARIANT_MARKERS, VARIANT_STYLE, curve_colours, new_figure

__all__ = ["theory_and_simulation", "comparison_theory_label", "plot_layer_comparisons", "plot_attention_sweep", "plot_layernorm_comparison",
           "plot_gradient_collapse", "plot_causal"]

_SIMULATION_LABEL = r"simulation (mean $\pm$ std)"


def theory_and_simulation(ax, x_fine, curves, x_points, finite_label=None, every=1, theory_label=None) -> list:
    """Draw, per curve, the theory line, the finite-T theory (dashed) and the simulated points.

    Parameters
    ----------
    ax : matplotlib.axes.Axes
    x_fine : array_like
        Abscissae of the theory lines.
    curves : list of dict
        Each with ``label``, ``theory`` (on ``x_fine``), ``finite`` (on ``x_fine``, or None),
        ``mean`` and ``std`` (on ``x_points``).
    x_points : array_like
        Abscissae of the simulated points.
    finite_label : str, optional
        Legend entry of the dashed finite-T lines (shown when a curve has one).
    every : int
        Draw every ``every``-th simulated point (deep stacks stay readable).
    theory_label : str, optional
        Legend entry of the solid theory lines (default ``theory, T -> infinity``).

    Returns
    -------
    list of Line2D
        Legend handles: one per curve, then the line kinds.
    """
    handles = []
    shown = slice(None, None, max(1, int(every)))
    for k, (curve, colour) in enumerate(zip(curves, curve_colours(len(curves)))):
        marker = CURVE_MARKERS[k % len(CURVE_MARKERS)]
        ax.plot(x_fine, curve["theory"], "-", color=colour, linewidth=1.8)
        if curve.get("finite") is not None:
            ax.plot(x_fine, curve["finite"], "--", color=colour, linewidth=1.1)
        ax.errorbar(np.asarray(x_points)[shown], np.asarray(curve["mean"])[shown],
                    yerr=np.asarray(curve["std"])[shown], fmt=marker, ms=4, color=colour,
                    markerfacecolor="white", markeredgewidth=1.1, elinewidth=0.8, capsize=1.5)
        handles.append(Line2D([], [], color=colour, marker=marker, markerfacecolor="white", linewidth=1.8,
                              label=curve["label"]))
    handles.append(Line2D([], [], color="0.2", linewidth=1.8, label=theory_label or r"theory, $T \to \infty$"))
    if any(curve.get("finite") is not None for curve in curves):
        handles.append(Line2D([], [], color="0.2", linestyle="--", linewidth=1.1,
                              label=finite_label or "theory, finite $T$"))
    handles.append(Line2D([], [], color="0.2", marker="o", markerfacecolor="white", linestyle="none",
                          label=_SIMULATION_LABEL))
    return handles


def _axes(ax):
    return new_figure(6.6, 4.4).add_subplot() if ax is None else ax


def _legend_right(ax, handles):
    ax.legend(handles=handles, fontsize=7.5, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)


def comparison_theory_label(settings) -> str:
    """Legend entry of a comparison's theory line, from its settings: which theory, at which T.

    ``settings["theory"]`` "gram" / "sampled": the Gram state (docs/theory.md sections 17,
    17.1) at the simulated T; "mean" (or absent): the mean-cosine maps at the architecture's
    T (``arch["seq_len"]``; None: T -> infinity).
    """
    kind = settings.get("theory", "mean")
    if kind == "sampled":
        return f"theory: Gram chains, $T = {settings['seq_len']}$"
    if kind == "gram":
        return f"theory: mean Gram state, $T = {settings['seq_len']}$"
    seq_len = settings.get("arch", {}).get("seq_len")
    return r"theory, $T \to \infty$" if seq_len is None else f"theory, $T = {seq_len}$"


def plot_layer_comparisons(comparisons, labels=None, *, finite=None, finite_label=None, every=None, ax=None,
                           title=None):
    r"""Mean token cosine per layer: theory lines and simulated points of ``Comparison`` objects.

    Parameters
    ----------
    comparisons : sequence of Comparison
        From :func:`remprop.validation.compare`; each gives ``theory.rho`` and the measured
        mean and std of its observable per layer. The theory lines' legend entry says which
        theory they are (:func:`comparison_theory_label`; "theory" where they differ).
    labels : sequence of str, optional
        One per comparison (default ``alpha_SA = ...``).
    finite : sequence of array_like or None, optional
        The finite-T theory per comparison (dashed).
    finite_label : str, optional
        Its legend entry.
    every : int, optional
        Simulated points every ``every`` layers (default: about 30 points).
    ax : matplotlib.axes.Axes, optional
        A new Figure's when None.
    title : str, optional

    Returns
    -------
    matplotlib.axes.Axes

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(d, e).
    """
    comparisons = list(comparisons)
    ax = _axes(ax)
    labels = labels or [rf"$\alpha_{{SA}} = {c.settings['arch']['alpha_sa']:g}$" for c in comparisons]
    finite = list(finite) if finite is not None else [None] * len(comparisons)
    curves = [{"label": label, "theory": c.theory.rho, "finite": f, "mean": c.mean(c.observable),
               "std": c.std(c.observable)} for c, label, f in zip(comparisons, labels, finite)]
    layers = comparisons[0].layers
    depth = int(layers[-1])
    kinds = {comparison_theory_label(c.settings) for c in comparisons}
    handles = theory_and_simulation(ax, layers, curves, layers, finite_label, every=every or max(1, depth // 30),
                                    theory_label=kinds.pop() if len(kinds) == 1 else "theory")
    ax.set_xlim(-0.02 * depth, 1.02 * depth)  # whole markers at both ends
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(r"layer $\ell$")
    ax.set_ylabel(r"mean token cosine $\rho_\ell$")
    if title:
        ax.set_title(title, fontsize=9)
    _legend_right(ax, handles)
    ax.grid(alpha=0.3)
    return ax


def plot_attention_sweep(sweep, quantity="cosine", *, finite=None, finite_label=None, ax=None, title=None):
    r"""One attention layer against beta: theory lines and simulated points of an ``AttentionSweep``.

    ``quantity="cosine"``: the output cosine :math:`p_A / q_A`, one curve per input cosine
    (Fig. 2). ``quantity="y2"``: the participation ratio
    :math:`Y_2 = \max(0, 1 - \beta_c / \beta)` (Fig. 5), with the critical beta marked when
    the sweep has one input cosine.

    Parameters
    ----------
    sweep : AttentionSweep
        From :func:`remprop.validation.attention_sweep`.
    quantity : {"cosine", "y2"}
    finite : array_like, optional
        The finite-T theory on ``finite_betas(sweep)``, shape (input cosines, 300) (dashed).
    finite_label, ax, title
        As :func:`plot_layer_comparisons`.

    Returns
    -------
    matplotlib.axes.Axes

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 2 and Fig. 5; docs/theory.md section 3.
    """
    if quantity not in ("cosine", "y2"):
        raise ValueError(f"quantity must be 'cosine' or 'y2', got {quantity!r}")
    ax = _axes(ax)
    fine = finite_betas(sweep)
    theory = sweep.theory_curve(quantity, fine)
    curves = [{"label": f"input cosine {rho:g}", "theory": theory[k],
               "finite": None if finite is None else np.asarray(finite)[k],
               "mean": sweep.measured[quantity][k], "std": sweep.spread[quantity][k]}
              for k, rho in enumerate(sweep.input_cosines)]
    handles = theory_and_simulation(ax, fine, curves, sweep.betas, finite_label)
    if quantity == "y2" and len(sweep.input_cosines) == 1:
        q0 = sweep.settings["q0"]
        arch = Architecture(**sweep.settings["arch"])
        per_head = beta_critical(q0, q0 * sweep.input_cosines[0])  # one layer: first = smallest
        beta_c = float(arch.beta_critical(first=per_head, smallest=per_head))  # on the model's beta axis
        ax.axvline(beta_c, color="black", linestyle=":", linewidth=1.0)
        handles.append(Line2D([], [], color="black", linestyle=":", linewidth=1.0,
                              label=rf"$\beta_c = {beta_c:.3g}$"))
    ax.set_xlim(0, fine.max() * 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(r"query/key scale $\beta$")
    ax.set_ylabel(r"output cosine $p_A / q_A$" if quantity == "cosine"
                  else r"participation ratio $Y_2 = \langle \sum_j a_{ij}^2 \rangle$")
    if title:
        ax.set_title(title, fontsize=9)
    _legend_right(ax, handles)
    ax.grid(alpha=0.3)
    return ax


def finite_betas(sweep) -> np.ndarray:
    """The 300 betas on which :func:`plot_attention_sweep` draws its theory lines."""
    return np.linspace(sweep.betas.min(), sweep.betas.max(), 300)


def plot_layernorm_comparison(layers, theory, measured, spread, *, finite=None, finite_label=None, every=None,
                              ax=None, title=None):
    r"""Mean token cosine over depth for the four LayerNorm placements, theory and simulation.

    Parameters
    ----------
    layers : array_like
        0..depth.
    theory, measured, spread : dict
        Variant name (keys of :data:`~remprop.diagrams.style.VARIANT_STYLE`) -> cosine per
        layer: ``T -> infinity`` theory, simulated mean and standard deviation.
    finite, finite_label : dict and str, optional
        Variant -> finite-T theory (thin dotted), and its legend entry.
    every : int, optional
        Simulated points every ``every`` layers (default: about 25 points).
    ax, title : matplotlib.axes.Axes and str, optional
        Axes to draw into (a new Figure's when None); the title (sizes and settings).

    Returns
    -------
    matplotlib.axes.Axes
        With the legend in its lower right corner.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 4; docs/theory.md section 5.
    """
    ax = new_figure(6.8, 4.8).add_subplot() if ax is None else ax
    layers = np.asarray(layers)
    depth = int(layers[-1])
    every = every or max(1, depth // 25)
    for name in theory:
        style = VARIANT_STYLE[name]
        ax.plot(layers, theory[name], color=style["color"], linestyle=style["linestyle"], linewidth=1.8,
                label=f"{name}: theory, " + r"$T\to\infty$")
        if finite is not None:
            ax.plot(layers, finite[name], color=style["color"], linestyle=":", linewidth=1.0)
        ax.errorbar(layers[::every], np.asarray(measured[name])[::every], yerr=np.asarray(spread[name])[::every],
                    fmt=VARIANT_MARKERS[name], ms=4, color=style["color"], markerfacecolor="white",
                    elinewidth=0.8, capsize=1.5, label=f"{name}: simulation")
    if finite is not None:
        ax.plot([], [], color="0.3", linestyle=":", linewidth=1.0, label=finite_label or "theory, finite $T$")
    ax.set_xlim(-0.02 * depth, 1.02 * depth)  # whole markers at both ends
    ax.set_ylim(0.0, 1.02)
    ax.set_xlabel(r"layer $\ell$")
    ax.set_ylabel(r"mean token cosine $\rho_\ell$")
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, ncol=2, loc="lower right", framealpha=0.9)
    ax.grid(alpha=0.3)
    return ax


def plot_gradient_collapse(sweep, axes=None):
    r"""Query gradient norms of one attention layer, collapsed over (T, d), and measured / theory.

    Left: ``|dL/dW_Q|^2 T / (d^2 sqrt(log T))`` against beta, measured (dots, std bars) and
    the finite-T, finite-width theory
    (:func:`remprop.theory.gradients.scaled_query_gradient_norm`) per (T, d); dashed, the
    ``T, d -> infinity`` law ``q sigma_v^2 beta (q - p)^2 m (1 - m) / 3`` with
    ``m = beta_c / beta`` (0 below beta_c). Right: measured / theory with a 10 % band.

    Parameters
    ----------
    sweep : GradientSweep
        From :func:`remprop.validation.gradient_sweep`.
    axes : pair of Axes, optional

    Returns
    -------
    (ax_collapse, ax_ratio)

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 3(c); docs/theory.md section 7.
    """
    if axes is None:
        axes = new_figure(10.0, 3.8).subplots(1, 2)
    ax, ax_ratio = axes
    settings = sweep.settings
    q0, p0, sigma_v2 = settings["q0"], settings["q0"] * settings["rho0"], settings["sigma_v2"]
    scale = sweep.scale()
    fine = np.linspace(sweep.betas.min(), sweep.betas.max(), 60)
    for s, ((t, d), colour) in enumerate(zip(sweep.sizes, curve_colours(len(sweep.sizes)))):
        line = scaled_query_gradient_norm(fine, q0, p0, d, t, sigma_v2=sigma_v2)
        ax.plot(fine, line, "-", color=colour, lw=1.3, label=f"T={t}, d={d}")
        ax.errorbar(sweep.betas, sweep.mean()[s] / scale[s, 0], yerr=sweep.std()[s] / scale[s, 0], fmt="o", ms=3.5,
                    color=colour, elinewidth=0.8, capsize=1.5)
        ax_ratio.errorbar(sweep.betas, sweep.ratio()[s], yerr=sweep.std()[s] / sweep.theory["full"][s], fmt="o-",
                          ms=3, lw=0.8, color=colour, elinewidth=0.8, capsize=1.5, label=f"T={t}, d={d}")
    beta_c = float(beta_critical(q0, p0))
    m = np.clip(beta_c / fine, 0.0, 1.0)
    ax.plot(fine, q0 * sigma_v2 * fine * (q0 - p0) ** 2 * m * (1.0 - m) / 3.0, "k--", lw=1.0,
            label=r"$T, d\to\infty$: $\beta\,m(1-m)/3$")
    for a in (ax, ax_ratio):
        a.axvline(beta_c, color="0.6", lw=0.7, ls=":")
        a.axvline(beta_c / 2, color="0.8", lw=0.7, ls=":")
        a.set_xlabel(r"$\beta$")
    ax.set_ylabel(r"$|\partial \mathcal{L}/\partial W_Q|^2\, T / (d^2 \sqrt{\log T})$")
    ax.set_title("lines: theory (finite T, finite d); dots: autograd (mean, std)", fontsize=8)
    ax.legend(fontsize=7, frameon=False)
    ax_ratio.axhspan(0.9, 1.1, color="0.92")
    ax_ratio.axhline(1.0, color="k", lw=0.7)
    ax_ratio.set_ylabel("measured / theory")
    ax_ratio.set_title(r"dotted: $\beta_c/2$, $\beta_c$; band: $\pm 10\%$", fontsize=8)
    ax_ratio.legend(fontsize=7, frameon=False)
    return ax, ax_ratio


def plot_causal(comparisons, labels, axes=None):
    """Last-token cosine per layer and the error by position of ``CausalComparison`` objects.

    Left: the mean pairwise cosine of the last tokens per layer, late-token theory (lines),
    encoder theory at T (dashed) and simulation (dots, std bars). Right: the error of the
    theory in windows of positions, mean over layers (dots) and maximum (crosses).

    Parameters
    ----------
    comparisons : sequence of CausalComparison
        From :func:`remprop.validation.causal_comparison`.
    labels : sequence of str
    axes : pair of Axes, optional

    Returns
    -------
    (ax, ax_error)

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 12; docs/theory.md section 8.
    """
    if axes is None:
        axes = new_figure(10.0, 3.8).subplots(1, 2)
    ax, ax_err = axes
    for c, label, colour in zip(comparisons, labels, curve_colours(len(comparisons))):
        layers = range(c.depth + 1)
        ax.plot(layers, c.theory_last, "-", color=colour, lw=1.5, label=label)
        ax.plot(layers, c.theory_encoder, "--", color=colour, lw=0.8)
        ax.errorbar(layers, c.mean_last(), yerr=c.std_last(), fmt="o", ms=2.5, color=colour, elinewidth=0.6,
                    capsize=1.0)
        centres = c.windows.mean(axis=1) + 0.5
        ax_err.plot(centres, c.window_errors, "o-", ms=3, color=colour, lw=1.0, label=f"{label} (mean over layers)")
        ax_err.plot(centres, c.window_max_errors, "x:", ms=3, color=colour, lw=0.8, label=f"{label} (max)")
    s = comparisons[0].settings
    ax.set_xlabel("layer")
    ax.set_ylabel(f"average cosine, last {s['last']} tokens")
    ax.set_title(f"causal post-LN, T={s['seq_len']}, d={s['width']}; lines: late-token theory, "
                 "dashed: encoder theory", fontsize=7)
    ax.set_ylim(-0.02, 1.02)
    ax.legend(fontsize=7, frameon=False)
    ax_err.set_xlabel(f"position (centre of a window of {s['window']} tokens)")
    ax_err.set_ylabel("|theory - measured| cosine in the window")
    ax_err.set_title("error of the late-token theory against position", fontsize=8)
    ax_err.legend(fontsize=6, frameon=False)
    return ax, ax_err
