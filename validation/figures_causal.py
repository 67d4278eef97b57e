"""Fig. 12: causal (decoder) stack, average cosine of the last tokens, and the error by position.

:func:`figure_12` runs :func:`~remprop.validation.causal.causal_comparison` for a few
(beta, alpha_sa) settings of a post-LN BERT with a causal mask (T = 512, 50 layers by
default) and draws

* left: the mean pairwise cosine of the last 50 tokens per layer: late-token theory
  (lines; REM with t keys at the score scale of T), the encoder theory at T (dashed) and
  the simulation (dots, std error bars);
* right: the error of the theory, averaged over layers, in windows of 32 positions
  against the window's position (how the late-token prediction degrades for early tokens).

Reference: Giorlandino & Goldt, arXiv 2505.24333, Fig. 12.
"""
from __future__ import annotations

from matplotlib.figure import Figure

from remprop.theory import Architecture

from .causal import causal_comparison
from .figures import FigureResult, _colours

__all__ = ["plot_causal", "figure_12"]


def plot_causal(comparisons, labels, axes=None):
    """Draw the last-token panel and the error-by-position panel of :class:`CausalComparison` objects."""
    if axes is None:
        fig = Figure(figsize=(10.0, 3.8))
        axes = fig.subplots(1, 2)
    ax, ax_err = axes
    colours = _colours(len(comparisons))
    for c, label, colour in zip(comparisons, labels, colours):
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


def figure_12(comparisons=None, *, settings=((0.5, 1.0), (0.5, 1.3), (1.2, 1.0)), depth=50, seq_len=512,
              width=720, seeds=2, sequences=2, last=50, window=32, arch=None, inputs="synthetic", device=None,
              dtype="float32", progress=None) -> FigureResult:
    """Fig. 12: causal stack, last-token cosine per layer and the error by position.

    Parameters
    ----------
    comparisons : sequence of CausalComparison, optional
        Finished comparisons to draw (then ``settings`` and the sizes are ignored).
    settings : sequence of (beta, alpha_sa)
    depth, seq_len, width, seeds, sequences, last, window, inputs, device, dtype, progress
        As :func:`~remprop.validation.causal.causal_comparison`.
    arch : Architecture, optional
        Default BERT defaults (alpha_sa replaced by each setting's).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 12.
    """
    arch = Architecture() if arch is None else arch
    if comparisons is None:
        comparisons = [causal_comparison(arch.replace(alpha_sa=float(a)), b, depth, seq_len, width, seeds, sequences,
                                         last=last, window=window, inputs=inputs, device=device, dtype=dtype,
                                         progress=progress) for b, a in settings]
    labels = [f"beta={c.settings['beta']:g}, alpha_sa={c.settings['arch']['alpha_sa']:g}" for c in comparisons]
    ax, _ = plot_causal(comparisons, labels)
    data = {"figure": "figure_12", "comparisons": [c.to_dict() for c in comparisons],
            "max_abs_error_last": {label: c.max_abs_error for label, c in zip(labels, comparisons)}}
    return FigureResult("figure_12", ax.figure, data)
