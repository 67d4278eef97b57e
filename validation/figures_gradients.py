"""Fig. 3(c): query/key gradient norms of one attention layer, collapsed over (T, d).

:func:`figure_3c` measures ``|dL/dW_Q|^2`` with autograd
(:func:`~remprop.validation.gradients.gradient_sweep`) and draws it on the collapse
scale ``|dL/dW_Q|^2 T / (d^2 sqrt(log T))`` of the token-averaged readout
``L = (1/T) sum_ia R_ia S_ia`` (that is, ``|dS/dW_Q|^2 / (T d^2 sqrt(log T))``) against
beta: measured dots with std error bars, the finite-T, finite-width theory of
:func:`remprop.theory.gradients.query_gradient_norm` as one line per (T, d), and the
``T, d -> infinity`` law ``q s_v^2 beta (q - p)^2 m (1 - m) / 3`` (``m = beta_c/beta``,
0 below beta_c) dashed. A second panel shows measured / theory with a 10 % band.

Reference: Giorlandino & Goldt, arXiv 2505.24333, Fig. 3(c).
"""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from remprop.theory.gradients import scaled_query_gradient_norm

from .figures import FigureResult, _colours
from .gradients import GradientSweep, gradient_sweep

__all__ = ["DEFAULT_GRADIENT_BETAS", "plot_gradient_collapse", "figure_3c"]

#: beta grid of Fig. 3(c) (0.05 to 3).
DEFAULT_GRADIENT_BETAS = np.array([0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.1, 1.3, 1.5, 1.75, 2.0, 2.5, 3.0])


def plot_gradient_collapse(sweep: GradientSweep, axes=None):
    """Draw the collapse panel and the ratio panel of a :class:`GradientSweep`.

    Returns
    -------
    (ax_collapse, ax_ratio)
    """
    if axes is None:
        fig = Figure(figsize=(10.0, 3.8))
        axes = fig.subplots(1, 2)
    ax, ax_ratio = axes
    settings = sweep.settings
    q0, p0, sigma_v2 = settings["q0"], settings["q0"] * settings["rho0"], settings["sigma_v2"]
    scale = sweep.scale()
    colours = _colours(len(sweep.sizes))
    fine = np.linspace(sweep.betas.min(), sweep.betas.max(), 60)
    for s, ((t, d), colour) in enumerate(zip(sweep.sizes, colours)):
        line = scaled_query_gradient_norm(fine, q0, p0, d, t, sigma_v2=sigma_v2)
        ax.plot(fine, line, "-", color=colour, lw=1.3, label=f"T={t}, d={d}")
        ax.errorbar(sweep.betas, sweep.mean()[s] / scale[s, 0], yerr=sweep.std()[s] / scale[s, 0], fmt="o", ms=3.5,
                    color=colour, elinewidth=0.8, capsize=1.5)
        ax_ratio.errorbar(sweep.betas, sweep.ratio()[s], yerr=sweep.std()[s] / sweep.theory["full"][s], fmt="o-",
                          ms=3, lw=0.8, color=colour, elinewidth=0.8, capsize=1.5, label=f"T={t}, d={d}")
    beta_c = np.sqrt(2.0 / (q0 * (q0 - p0)))
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


def figure_3c(sweep: GradientSweep | None = None, *, betas=DEFAULT_GRADIENT_BETAS,
              sizes=((256, 128), (256, 256), (1024, 128), (1024, 256)), seeds=3, readouts=2, q0=1.0, rho0=0.0,
              sigma_v2=1.0, device=None, dtype="float64", progress=None) -> FigureResult:
    """Fig. 3(c): gradient norms against beta for several (T, d), collapsed, with the theory.

    Parameters
    ----------
    sweep : GradientSweep, optional
        A finished sweep to draw (then the other arguments are ignored).
    betas, sizes, seeds, readouts, q0, rho0, sigma_v2, device, dtype, progress
        As :func:`~remprop.validation.gradients.gradient_sweep`.

    Returns
    -------
    FigureResult
        ``data`` holds the sweep's table and the largest relative error over the points
        above 1e-3 of their size's maximum.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 3(c).
    """
    if sweep is None:
        sweep = gradient_sweep(betas, sizes, seeds=seeds, readouts=readouts, q0=q0, rho0=rho0, sigma_v2=sigma_v2,
                               device=device, dtype=dtype, progress=progress)
    ax, _ = plot_gradient_collapse(sweep)
    return FigureResult("figure_3c", ax.figure, {"figure": "figure_3c", **sweep.to_dict()})
