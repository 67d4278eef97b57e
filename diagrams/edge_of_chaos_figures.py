r"""Ordered and chaotic phases of tanh stacks (docs/theory.md section 9, Fig. 9).

* :func:`edge_of_chaos_data` -- the order-to-chaos boundaries in (sigma_w2, sigma_b2)
  (deep tanh network, Poole et al. 2016: ``chi_1 = 1``; residual MLP blocks with
  LayerNorm: ``chi_MLP = 1``) and the mean cosine over depth on both sides of them;
* :func:`edge_of_chaos_figure` -- the three panels.

A tanh stack with skips, ``x <- LN(alpha x + MLP(x))``, keeps two tokens apart at any
depth when ``chi_MLP > 1`` (chaotic: the cosine settles at ``rho* < 1``) and collapses
them (``rho -> 1``) when ``chi_MLP < 1``; the skip strength alpha changes only the speed
(:mod:`remprop.theory.edge_of_chaos`).

References: B. Poole et al., NeurIPS 2016; S. Schoenholz et al., ICLR 2017;
A. Giorlandino & S. Goldt, arXiv 2505.24333 (Fig. 9).
"""
from __future__ import annotations

import numpy as np

from remprop.theory import components as C
from remprop.theory import edge_of_chaos as eoc
from remprop.theory.checks import as_float_array, check_depth

from .style import new_figure

__all__ = ["edge_of_chaos_data", "edge_of_chaos_figure"]

_ORDERED = "#7fa7cf"
_CHAOTIC = "#f2c6a0"
_SIDE_COLOURS = {"ordered": ("#08306b", "#4292c6"), "chaotic": ("#a63603", "#f16913")}


def _residual_stack(sigma_w2, sigma_b2, alpha, depth, rho0, activation):
    """Cosine over depth of x <- LN(alpha x + MLP(x)), vectorised over sigma_w2."""
    block = C.serial(C.residual(alpha, C.mlp(sigma_w2, sigma_b2, activation)), C.layer_norm())
    q = np.ones_like(sigma_w2)
    p = rho0 * q
    out = np.empty(sigma_w2.shape + (depth + 1,))
    out[..., 0] = rho0
    for layer in range(depth):
        q, p = block(q, p)
        out[..., layer + 1] = np.asarray(p) / np.asarray(q)
    return out


def edge_of_chaos_data(sigma_b2=0.05, *, depth=200, rho0=0.2, alpha=1.0, activation="tanh",
                       factors=(0.5, 0.85, 1.2, 2.0), bias_grid=None):
    r"""Boundaries and trajectories for the edge-of-chaos figure.

    Parameters
    ----------
    sigma_b2 : float
        Bias variance of the trajectories, > 0.
    depth : int
        Layers (default 200).
    rho0 : float
        Input cosine of two tokens (default 0.2).
    alpha : float
        Skip strength of the residual blocks.
    activation : str or callable
        Default tanh.
    factors : sequence of float
        Trajectories at ``sigma_w2 = factor * boundary`` (factors < 1: ordered side).
    bias_grid : array_like, optional
        sigma_b2 values for the boundary curves (default 0..1, 101 values).

    Returns
    -------
    dict
        ``bias_grid``, ``deep_boundary`` (chi_1 = 1), ``block_boundary`` (chi_MLP = 1),
        ``sigma_b2``, ``block_sigma_w2`` and ``deep_sigma_w2`` (the trajectory settings),
        ``block_rho`` and ``deep_rho`` (shape (len(factors), depth + 1)), ``factors``.

    References
    ----------
    Poole et al., NeurIPS 2016; Schoenholz et al., ICLR 2017.
    """
    depth = check_depth(depth)
    sigma_b2 = float(as_float_array("sigma_b2", sigma_b2, positive=True))
    rho0 = float(as_float_array("rho0", rho0, low=-1.0, high=1.0))
    factors = as_float_array("factors", factors, positive=True).ravel()
    bias_grid = np.linspace(0.0, 1.0, 101) if bias_grid is None else as_float_array(
        "bias_grid", bias_grid, nonnegative=True)
    deep_edge = float(eoc.chaos_boundary(sigma_b2, activation))
    block_edge = float(eoc.mlp_block_boundary(sigma_b2, activation))
    if not np.isfinite(block_edge):
        raise ValueError(f"sigma_b2 = {sigma_b2} has no order-to-chaos transition for residual "
                         f"{activation} blocks")
    block_w = factors * block_edge
    deep_w = factors * deep_edge
    return {
        "bias_grid": bias_grid,
        "deep_boundary": np.asarray(eoc.chaos_boundary(bias_grid, activation)),
        "block_boundary": np.asarray(eoc.mlp_block_boundary(bias_grid, activation)),
        "sigma_b2": sigma_b2,
        "block_sigma_w2": block_w,
        "deep_sigma_w2": deep_w,
        "block_rho": _residual_stack(block_w, sigma_b2, alpha, depth, rho0, activation),
        "deep_rho": eoc.correlation_trajectory(rho0, depth, deep_w, sigma_b2, activation),
        "factors": factors,
        "alpha": alpha,
        "activation": activation if isinstance(activation, str) else getattr(activation, "__name__", "phi"),
        "depth": depth,
        "rho0": rho0,
    }


def edge_of_chaos_figure(data=None, simulated=None, **settings):
    r"""Edge of chaos of tanh stacks: phase boundaries and the cosine over depth.

    (a) The order-to-chaos boundaries in the (sigma_w2, sigma_b2) plane: the deep tanh
    network (``chi_1 = sigma_w2 E[phi'(u)^2] = 1`` at the length fixed point, Poole et al.)
    and residual tanh MLP blocks with LayerNorm (``chi_MLP = 1``); the markers are the
    settings of (b) and (c). (b) Mean cosine of two tokens over 200 residual blocks
    ``x <- LN(alpha x + MLP(x))`` from ``rho_0 = 0.2``, on both sides of ``chi_MLP = 1``.
    (c) The same for the deep network without skips (correlation map at ``q*``).

    Parameters
    ----------
    data : dict, optional
        From :func:`edge_of_chaos_data`; computed with ``settings`` otherwise.
    simulated : dict, optional
        From :func:`remprop.validation.experiments.edge_of_chaos_simulation.simulate_edge_of_chaos` at
        the settings of ``data``: drawn over (b) and (c) as open markers with std bars.
    **settings
        Keyword arguments of :func:`edge_of_chaos_data`, used when ``data`` is None.

    Returns
    -------
    matplotlib.figure.Figure

    References
    ----------
    Poole et al., NeurIPS 2016, Fig. 2; Giorlandino & Goldt, arXiv 2505.24333, Fig. 9.
    """
    if data is None:
        data = edge_of_chaos_data(**settings)
    fig = new_figure(14.0, 4.3)
    phase, block_ax, deep_ax = fig.subplots(1, 3, width_ratios=[1.0, 1.15, 1.15])
    bias = data["bias_grid"]
    top = 1.15 * float(np.nanmax(np.concatenate([data["deep_boundary"], data["block_sigma_w2"],
                                                  data["deep_sigma_w2"]])))
    phase.plot(data["deep_boundary"], bias, color="black", linewidth=2.0,
               label=r"deep net: $\chi_1 = 1$")
    phase.plot(data["block_boundary"], bias, color="black", linestyle="--", linewidth=2.0,
               label=r"residual MLP + LN: $\chi_{MLP} = 1$")
    phase.fill_betweenx(bias, 0.0, data["deep_boundary"], color=_ORDERED, alpha=0.35, linewidth=0)
    phase.fill_betweenx(bias, data["deep_boundary"], top, color=_CHAOTIC, alpha=0.45, linewidth=0)
    phase.text(0.05, 0.93, "ordered (deep net)", transform=phase.transAxes, fontsize=9, color="#0d2a4a")
    phase.text(0.62, 0.16, "chaotic (deep net)", transform=phase.transAxes, fontsize=9, color="#7a2d00")
    for w, f in zip(data["block_sigma_w2"], data["factors"]):
        phase.plot(w, data["sigma_b2"], marker="o", color=_side_colour(f, 0), markersize=6)
    for w, f in zip(data["deep_sigma_w2"], data["factors"]):
        phase.plot(w, data["sigma_b2"], marker="s", color=_side_colour(f, 1), markersize=6,
                   markerfacecolor="none")
    phase.set_xlim(0.0, top)
    phase.set_ylim(bias.min(), bias.max())
    phase.set_xlabel(r"weight variance $\sigma_w^2$")
    phase.set_ylabel(r"bias variance $\sigma_b^2$")
    phase.set_title(f"(a) {data['activation']}: order-to-chaos boundaries", fontsize=10)
    phase.plot([], [], marker="o", color="grey", linestyle="none", label="settings of (b)")
    phase.plot([], [], marker="s", color="grey", markerfacecolor="none", linestyle="none",
               label="settings of (c)")
    phase.legend(fontsize=8, loc="upper left", bbox_to_anchor=(0.0, 0.88))
    layers = np.arange(data["depth"] + 1)
    every = max(1, int(data["depth"]) // 20)
    for ax, stack, rho, widths, name in (
            (block_ax, "block", data["block_rho"], data["block_sigma_w2"],
             rf"(b) residual blocks $x \leftarrow LN(\alpha x + MLP(x))$, $\alpha = {data['alpha']:g}$"),
            (deep_ax, "deep", data["deep_rho"], data["deep_sigma_w2"], "(c) deep network, no skips")):
        for k, (w, f) in enumerate(zip(widths, data["factors"])):
            side = "ordered" if f < 1 else "chaotic"
            ax.plot(layers, rho[k], color=_side_colour(f, 0), linestyle="-" if f < 1 else "--",
                    linewidth=1.8, label=rf"$\sigma_w^2 = {w:.3g}$ ({side}, {f:g}$\times$ edge)")
            if simulated is not None:
                ax.errorbar(layers[::every], simulated[f"{stack}_mean"][k][::every],
                            yerr=simulated[f"{stack}_std"][k][::every], fmt="o", ms=3.5, color=_side_colour(f, 0),
                            markerfacecolor="white", elinewidth=0.8, capsize=1.5)
        if simulated is not None:
            ax.plot([], [], color="0.3", marker="o", markerfacecolor="white", linestyle="none",
                    label=f"simulation, $d = {simulated['width']}$, $T = {simulated['seq_len']}$ (mean $\\pm$ std)")
        ax.set_xlim(0, data["depth"])
        ax.set_ylim(0.0, 1.02)
        ax.set_xlabel("layer")
        ax.set_ylabel(r"mean cosine $\rho$")
        ax.set_title(name + rf", $\sigma_b^2 = {data['sigma_b2']:g}$", fontsize=9)
        ax.axhline(1.0, color="grey", linewidth=0.8)
        ax.legend(fontsize=7, loc="center right")
    return fig


def _side_colour(factor, shade):
    return _SIDE_COLOURS["ordered" if factor < 1 else "chaotic"][0 if abs(np.log(factor)) > 0.4 else 1]
