"""A real model on its trainability diagram, and its per-layer cosine.

:func:`model_figure` draws two panels for a :class:`~remprop.diagrams.Diagnosis`:

* left: the trainability diagram of the model's own architecture (its widths, output
  projection, init variances, T) over (beta, alpha_sa), with the model marked at
  ``(beta, alpha_sa = 1)`` and the recommended query/key scale ``beta_c / 2`` as a ring;
* right: the predicted mean cosine per layer, with measured values (mean and spread over
  initialisations) overlaid when given.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333, Fig. 1(c), 1(d).
"""
from __future__ import annotations

import numpy as np

from .theory_figures import trainability_figure
from .style import new_figure
from .trainability import trainability_diagram

__all__ = ["model_figure", "model_diagram", "MODEL_DIAGRAM_RESOLUTION"]

#: Grid points per axis of :func:`model_diagram` (both axes).
MODEL_DIAGRAM_RESOLUTION = 120


def model_diagram(diagnosis, *, resolution=MODEL_DIAGRAM_RESOLUTION, depth=None):
    """The trainability diagram around a diagnosed model.

    The beta axis spans ``(0, 1.5 max(beta, beta_c))`` (``beta_c = inf``: ``max(2 beta, sqrt 2)``
    in its place), the alpha axis
    ``[0, max(2, 1.5 alpha*, 1.25 alpha_SA)]``.

    Parameters
    ----------
    diagnosis : Diagnosis
    resolution : int
        Grid points per axis.
    depth : int, optional
        Default: the model's depth.
    """
    spec = diagnosis.spec
    # collapsed input tokens have beta_c = inf: span twice the model's beta (at least sqrt 2)
    beta_c = diagnosis.beta_critical if np.isfinite(diagnosis.beta_critical) else max(2 * spec.beta, np.sqrt(2))
    beta_max = 1.5 * max(spec.beta, beta_c)
    alpha_max = max(2.0, 1.5 * diagnosis.alpha_star) if np.isfinite(diagnosis.alpha_star) else 3.0
    alpha_max = max(alpha_max, 1.25 * diagnosis.alpha_sa)  # the model's own alpha_SA (check --alpha) inside
    betas = np.linspace(beta_max / resolution, beta_max, resolution)
    alphas = np.linspace(0.0, alpha_max, resolution)
    return trainability_diagram(spec, betas, alphas, depth, diagnosis.threshold)


def model_figure(diagnosis, measured=None, *, diagram=None, resolution=MODEL_DIAGRAM_RESOLUTION):
    """Draw a diagnosed model on its trainability diagram and its per-layer cosine.

    Parameters
    ----------
    diagnosis : Diagnosis
        From :func:`remprop.diagrams.diagnose`.
    measured : dict, optional
        Measured cosines: ``{"rho_mean": (depth + 1,), "rho_std": (depth + 1,)}`` (causal
        models: of the last tokens), e.g. from
        :func:`remprop.validation.simulate_model`; with ``"theory"`` (and ``"theory_label"``) the
        curve drawn is that compared theory (``remprop check --causal-theory``) instead of the
        diagnosis' own.
    diagram : TrainabilityDiagram, optional
        Precomputed :func:`model_diagram`.
    resolution : int
        Grid points per axis of the diagram when it is computed here.

    Returns
    -------
    matplotlib.figure.Figure
    """
    spec = diagnosis.spec
    figure = new_figure(12.0, 4.8)
    left, right = figure.subplots(1, 2, gridspec_kw={"width_ratios": [1.15, 1.0]})
    diagram = model_diagram(diagnosis, resolution=resolution) if diagram is None else diagram
    trainability_figure(diagram, ax=left)
    left.plot([spec.beta], [diagnosis.alpha_sa], marker="*", markersize=17, color="#f2c200", markeredgecolor="black",
              linestyle="none", label=f"{spec.name} at init", zorder=5)
    if np.isfinite(diagnosis.beta_critical):
        left.plot([0.5 * diagnosis.beta_critical], [diagnosis.alpha_sa], marker="o", markersize=11, markerfacecolor="none",
                  markeredgecolor="black", markeredgewidth=1.6, linestyle="none",
                  label=r"query/key std at $\beta_c/2$", zorder=5)
    left.legend(loc="upper right", fontsize=8, framealpha=0.9)
    left.set_title(f"{spec.name}: {diagnosis.phase} (L = {spec.depth}, T = {spec.seq_len})", fontsize=10)

    layers = np.arange(spec.depth + 1)
    causal = diagnosis.rho_last_tokens is not None
    theory = diagnosis.compared_rho
    label = "theory" + (" (last 50 tokens)" if causal else "")
    if measured is not None and "theory" in measured:  # the theory the measurement was compared with
        theory = np.asarray(measured["theory"], dtype=float)
        if measured.get("theory_label"):
            label = f"theory: {measured['theory_label']}" + (" (last 50 tokens)" if causal else "")
    right.plot(layers, theory, color="#1f4e79", linewidth=2.0, label=label)
    if measured is not None:
        mean = np.asarray(measured["rho_mean"], dtype=float)
        std = np.asarray(measured.get("rho_std", np.zeros_like(mean)), dtype=float)
        label = "simulated at random init"
        if "seeds" in measured:
            label += f" ({len(measured['seeds'])} inits, mean $\\pm$ std)"
        right.errorbar(layers, mean, yerr=std, fmt="o", markersize=4, color="#c55a11", capsize=2,
                       label=measured.get("label", label))
    right.axhline(diagnosis.threshold, color="black", linestyle=":", linewidth=1.0,
                  label=f"rank-collapse threshold {diagnosis.threshold:g}")
    right.set_xlabel("layer")
    right.set_ylabel(r"mean cosine of two tokens $\rho = p/q$")
    right.set_ylim(min(0.0, float(np.nanmin(theory)) - 0.05), 1.02)
    right.set_xlim(-0.5, spec.depth + 0.5)
    right.grid(alpha=0.3)
    right.legend(loc="best", fontsize=8)  # where it hides the fewest points (a curve near 0 or near 1)
    right.set_title(f"per-layer cosine ({spec.architecture.norm}-LN, beta = {spec.beta:.3f})", fontsize=10)
    return figure
