"""The figure of one masked-LM training run (``remprop train``).

Drawn from :meth:`remprop.validation.training.TrainResult.to_dict` (plain numbers, no
torch): four panels,

1. training loss per step and test loss at the evaluation steps, with the unigram
   baseline (the loss of a model that learned the token frequencies only);
2. per-layer query/key gradient norm ``sqrt(|dL/dW_Q|^2 + |dL/dW_K|^2)`` at
   initialisation and at the end (vanishing in the rank-collapsed phase, docs/theory.md
   section 7);
3. per-layer mean attention entropy (near 0 in the entropy-collapsed phase, section 3);
4. mean token cosine of the residual stream, input (layer 0) and after each block (near 1
   in the rank-collapsed phase, section 1).

Reference: Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(f).
"""
from __future__ import annotations

import numpy as np
from matplotlib.ticker import MaxNLocator

from .style import curve_colours, new_figure

__all__ = ["training_figure"]


def _floats(values):
    return np.asarray([float(v) for v in values], dtype=float)


def training_figure(result: dict, title: str | None = None):
    """The four-panel figure of a training run.

    Parameters
    ----------
    result : dict
        ``TrainResult.to_dict()`` (or the JSON it was saved as).
    title : str, optional
        Default: the block order, alpha_SA, beta, depth and width of ``result["config"]``.

    Returns
    -------
    matplotlib.figure.Figure
    """
    config = result["config"]
    arch = config["arch"]
    figure = new_figure(11.0, 7.5)
    axes = figure.subplots(2, 2)
    early, late = curve_colours(2)

    ax = axes[0, 0]
    train = _floats(result["train_loss"])
    ax.plot(np.arange(1, train.size + 1), train, color=late, alpha=0.6, linewidth=1.0, label="train")
    ax.plot(_floats(result["eval_steps"]), _floats(result["test_loss"]), "o-", color=early, label="test (held out)")
    ax.axhline(float(result["unigram_loss"]), color="black", linestyle="--", linewidth=1.2, label="unigram baseline")
    ax.set_xlabel("step")
    ax.set_ylabel("masked-LM loss (nats / token)")
    ax.legend(frameon=False)

    panels = ((axes[0, 1], "qk_grad_norm", "query/key gradient norm", 1, True),
              (axes[1, 0], "attention_entropy", "attention entropy (nats)", 1, False),
              (axes[1, 1], "token_cosine", "mean token cosine", 0, False))
    for ax, name, label, first, log in panels:
        for key, colour, marker, text in (("init", early, "o", "at init"), ("final", late, "s", "after training")):
            values = _floats(result[key][name])
            ax.plot(np.arange(first, first + values.size), values, marker=marker, color=colour, label=text)
        if log and all(np.all(_floats(result[k][name]) > 0) for k in ("init", "final")):
            ax.set_yscale("log")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("layer" if first else "layer (0 = embedded input)")
        ax.set_ylabel(label)
        ax.legend(frameon=False)
    axes[1, 1].set_ylim(-0.05, 1.05)
    axes[1, 0].axhline(np.log(config["seq_len"]), color="grey", linestyle=":", linewidth=1.0,
                       label="ln T (uniform attention)")
    axes[1, 0].legend(frameon=False)

    if title is None:
        title = (f"{arch['norm']}-LN, {arch['attention']} attention, alpha_SA = {arch['alpha_sa']:g}, "
                 f"beta = {config['beta']:g}, depth {config['depth']}, d = {config['width']}, "
                 f"T = {config['seq_len']}, {config['steps']} steps, seed {config['seed']}")
    figure.suptitle(title)
    return figure
