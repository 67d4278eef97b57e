r"""The paper's training figures, drawn from plain numbers (no torch).

The data come from :mod:`remprop.validation.training.paper_runs` (dicts of numbers, or
the JSON they were saved as):

* :func:`loss_curves_figure` -- Figs. 1(f), 6 and 8: the held-out masked-LM loss over
  training, mean over seeds with a band of one standard deviation, one curve per setting
  (colour and line style per setting, the label naming the theory's phase at
  initialisation), the unigram baseline dashed; beside it the final test loss of every
  setting with its seed-to-seed spread;
* :func:`beta_sweep_figure` -- Fig. 3: the final test loss of a one-layer, one-head
  transformer against ``beta``, per seed and mean, with the theory's ``beta_c``
  (:meth:`remprop.theory.Architecture.beta_critical`, computed by the caller) as a dashed
  vertical line (docs/theory.md sections 3 and 6).

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333, Figs. 1(f), 3, 6 and 8.
"""
from __future__ import annotations

import numpy as np

from .style import CURVE_MARKERS, LINE, curve_colours, new_figure

__all__ = ["loss_curves_figure", "beta_sweep_figure"]

_LINESTYLES = ("-", "--", "-.", ":")


def _floats(values):
    return np.asarray([float(v) for v in np.ravel(values)], dtype=float).reshape(np.shape(values))


def _unigram(ax, value):
    ax.axhline(float(value), color="black", linestyle="--", linewidth=1.2, label="unigram baseline")


def loss_curves_figure(data: dict, title: str | None = None):
    """Test-loss curves of several training settings and their final losses.

    Parameters
    ----------
    data : dict
        ``settings`` (each with ``label``, ``theory_phase``, ``eval_steps``,
        ``test_loss_mean``, ``test_loss_std``, ``final_test_loss``, ``final_mean``,
        ``final_std``) and ``unigram_loss``, as
        :func:`remprop.validation.training.paper_runs.loss_curves_1f` returns them.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    settings = data["settings"]
    figure = new_figure(12.0, 4.8)
    curves, finals = figure.subplots(1, 2, width_ratios=(3, 2))
    colours = curve_colours(len(settings))
    names = []
    for i, (setting, colour) in enumerate(zip(settings, colours)):
        steps = _floats(setting["eval_steps"])
        mean, std = _floats(setting["test_loss_mean"]), _floats(setting["test_loss_std"])
        name = f"{setting['label']} (theory: {setting['theory_phase']})"
        names.append(name)
        marker = CURVE_MARKERS[i % len(CURVE_MARKERS)]
        curves.plot(steps, mean, linestyle=_LINESTYLES[i % len(_LINESTYLES)], marker=marker, markersize=4,
                    color=colour, label=name)
        curves.fill_between(steps, mean - std, mean + std, color=colour, alpha=0.2, linewidth=0)
        per_seed = _floats(setting["final_test_loss"])
        finals.plot(np.full(per_seed.size, i), per_seed, ".", color=colour, alpha=0.6)
        finals.errorbar([i], [float(setting["final_mean"])], yerr=[float(setting["final_std"])],
                        marker=marker, color=colour, capsize=4)
    for ax in (curves, finals):
        _unigram(ax, data["unigram_loss"])
    curves.set_xlabel("step")
    curves.set_ylabel("held-out masked-LM loss (nats / token)")
    curves.legend(frameon=False, fontsize=8)
    top = max(float(np.max(_floats(s["final_test_loss"]))) for s in settings)
    curves.set_ylim(min(float(np.min(_floats(s["test_loss_mean"]))) for s in settings) - 0.05,
                    max(top, float(data["unigram_loss"])) + 0.6)
    finals.set_xticks(range(len(settings)), [s["label"] for s in settings], rotation=30, ha="right", fontsize=8)
    finals.set_ylabel("final test loss (seeds and mean ± std)")
    if title is not None:
        figure.suptitle(title)
    return figure


def beta_sweep_figure(data: dict, title: str | None = None):
    """Final test loss against beta, with the theory's beta_c.

    Parameters
    ----------
    data : dict
        ``betas``, ``final_test_loss`` (betas, seeds), ``final_mean``, ``final_std``,
        ``beta_critical``, ``unigram_loss``, as
        :func:`remprop.validation.training.paper_runs.beta_sweep_3` returns them.
    title : str, optional

    Returns
    -------
    matplotlib.figure.Figure
    """
    betas = _floats(data["betas"])
    per_seed = _floats(data["final_test_loss"])
    figure = new_figure(6.4, 4.6)
    ax = figure.subplots()
    seed_colour, mean_colour = curve_colours(2)[::-1]
    for column in per_seed.T:
        ax.plot(betas, column, ".", color=seed_colour, alpha=0.6)
    ax.errorbar(betas, _floats(data["final_mean"]), yerr=_floats(data["final_std"]), marker="o", color=mean_colour,
                capsize=3, label="final test loss (mean ± std over seeds)")
    beta_c = float(data["beta_critical"])
    ax.axvline(beta_c, **LINE["beta_critical"], label=rf"$\beta_c$ = {beta_c:.3g} (theory)")
    _unigram(ax, data["unigram_loss"])
    ax.set_xlabel(r"$\beta$ (query/key scale at init)")
    ax.set_ylabel("held-out masked-LM loss after training")
    ax.legend(frameon=False, fontsize=8)
    ax.set_title(title or "one layer, one head")
    return figure
