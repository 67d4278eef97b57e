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

from .style import keep_labels_clear, new_figure
from .theory_figures import add_to_legend, trainability_figure
from .trainability import trainability_diagram

__all__ = ["model_figure", "model_diagram", "MODEL_DIAGRAM_RESOLUTION"]

#: Grid points per axis of :func:`model_diagram` (both axes).
MODEL_DIAGRAM_RESOLUTION = 120

#: A model's beta below this share of the beta axis puts the axis on a log scale (the star
#: would sit on the left edge of a linear one).
_LOG_BELOW = 0.05


def model_diagram(diagnosis, *, resolution=MODEL_DIAGRAM_RESOLUTION, depth=None):
    """The trainability diagram around a diagnosed model.

    The beta axis ends at ``1.5 max(beta, beta_c)`` (``beta_c = inf``: ``max(2 beta, sqrt 2)``
    in its place) and starts at ``1/resolution`` of that, evenly spaced; a model whose beta
    lies below 5% of the axis gets a geometric axis from ``beta / 4`` instead, so that it
    sits well inside the figure (:func:`model_figure` draws that axis logarithmic). The
    alpha axis spans ``[0, max(2, 1.5 alpha*, 1.25 alpha_SA)]``.

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
    if spec.beta < _LOG_BELOW * beta_max:
        betas = np.geomspace(spec.beta / 4, beta_max, resolution)
    else:
        betas = np.linspace(beta_max / resolution, beta_max, resolution)
    alphas = np.linspace(0.0, alpha_max, resolution)
    return trainability_diagram(spec, betas, alphas, depth, diagnosis.threshold)


def model_title(spec) -> str:
    """The model's name and its size; a resized model (:attr:`~remprop.theory.ModelSpec.full_size`)
    says so and gives the configuration's own size."""
    size = spec.size()
    text = f"{spec.name}, L = {size['depth']}, d = {size['width']}"
    full = spec.full_size
    if full is not None and full != size:
        text = (f"{spec.name} resized to L = {size['depth']}, d = {size['width']} "
                f"(the configuration's L = {full['depth']}, d = {full['width']})")
    return text


def model_figure(diagnosis, measured=None, *, diagram=None, resolution=MODEL_DIAGRAM_RESOLUTION):
    """Draw a diagnosed model on its trainability diagram and its per-layer cosine.

    The title names the model with the size drawn (a model resized for a quick check or a
    reduced simulation says so, with the configuration's own size); both legends sit below their panels,
    clear of the data, and the phase labels keep clear of the markers
    (:func:`~remprop.diagrams.style.keep_labels_clear`).

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
    figure = new_figure(12.0, 5.6)
    left, right = figure.subplots(1, 2, gridspec_kw={"width_ratios": [1.15, 1.0]})
    diagram = model_diagram(diagnosis, resolution=resolution) if diagram is None else diagram
    trainability_figure(diagram, ax=left)
    betas = diagram.betas
    if len(betas) > 2 and betas[-1] > 0 and betas[0] > 0 and np.allclose(np.diff(np.log(betas)),
                                                                           np.log(betas[1] / betas[0])):
        left.set_xscale("log")  # a geometric grid (a small beta): equal cells on the page
    marks = left.plot([spec.beta], [diagnosis.alpha_sa], marker="*", markersize=17, color="#f2c200", markeredgecolor="black",
                      linestyle="none", label="the model at init", zorder=5)
    if np.isfinite(diagnosis.beta_critical):
        marks += left.plot([0.5 * diagnosis.beta_critical], [diagnosis.alpha_sa], marker="o", markersize=11,
                           markerfacecolor="none", markeredgecolor="black", markeredgewidth=1.6,
                           linestyle="none", label=r"query/key std at $\beta_c/2$", zorder=5)
    add_to_legend(left, marks)
    left.set_title(f"{diagnosis.phase} (T = {spec.seq_len})", fontsize=10)

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
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.14), ncol=2, fontsize=8, frameon=False)
    right.set_title(f"per-layer cosine ({spec.architecture.norm}-LN, beta = {spec.beta:.3g})", fontsize=10)
    figure.suptitle(model_title(spec), fontsize=11)
    return keep_labels_clear(figure)
