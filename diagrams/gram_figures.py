"""Per-pair figures of the Gram-matrix state: token-pair cosines, theory against simulation.

The Gram-matrix theory (:mod:`remprop.theory.gram_state`, docs/theory.md section 17)
predicts the cosine of every token pair, not only their mean. This figure draws, per
layer, the distribution of the pair cosines of the theory
(:meth:`GramTrajectory.cosines <remprop.theory.gram_state.GramTrajectory.cosines>`) and of
a simulation, split into pairs of repeated words and the rest (a boolean pair mask
from the caller). It takes NumPy arrays only (no torch).
"""
from __future__ import annotations

import numpy as np

from .style import curve_colours, new_figure

__all__ = ["plot_pair_cosines", "repeated_pair_mask"]


def repeated_pair_mask(ids) -> np.ndarray:
    """True for the pairs ``i < j`` of a sequence whose token ids are equal.

    Order of ``numpy.triu_indices`` (that of
    :func:`~remprop.theory.gram_state.pair_cosines`). ``ids``: a 1-d integer array of T >= 2
    token ids.
    """
    ids = np.asarray(ids)
    if ids.ndim != 1 or ids.size < 2 or not np.issubdtype(ids.dtype, np.integer):
        raise ValueError(f"ids must be a 1-d integer array of T >= 2 token ids, got shape {ids.shape}, "
                         f"dtype {ids.dtype}")
    i, j = np.triu_indices(ids.size, 1)
    return ids[i] == ids[j]


def _check_pairs(name, values, size):
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size != size:
        raise ValueError(f"{name} must be a 1-d array of {size} pair cosines, got shape {arr.shape}")
    if not np.isfinite(arr).all():
        raise ValueError(f"{name} must be finite")
    return arr


def plot_pair_cosines(theory, measured, repeated, *, bins=40, axes=None, title=None):
    r"""Histograms of token-pair cosines per layer: theory (lines) against simulation (filled).

    Parameters
    ----------
    theory, measured : dict of int -> array_like
        Per layer, the cosines :math:`G_{ij}/\sqrt{G_{ii}G_{jj}}` of the pairs ``i < j``
        (``numpy.triu_indices`` order; e.g. ``GramTrajectory.cosines(layer)`` and the same
        statistic of a simulated hidden state). The layers drawn are those of ``theory``;
        ``measured`` must have them too.
    repeated : array_like of bool
        True for repeated-word pairs (:func:`repeated_pair_mask`), same length.
    bins : int
        Histogram bins per layer (density), over the range of that layer's cosines (theory and
        simulation together, widened by 5 % on each side and clipped to [-1, 1]).
    axes : sequence of matplotlib.axes.Axes, optional
        One per layer; a new Figure's row of axes when None.
    title : str, optional
        Figure title (suptitle of a new Figure).

    Returns
    -------
    list of matplotlib.axes.Axes

    References
    ----------
    docs/theory.md section 17.
    """
    if not isinstance(theory, dict) or not isinstance(measured, dict) or not theory:
        raise ValueError("theory and measured must be non-empty dicts layer -> pair cosines")
    layers = sorted(theory)
    missing = [layer for layer in layers if layer not in measured]
    if missing:
        raise ValueError(f"measured must have every layer of theory, missing {missing}")
    repeated = np.asarray(repeated)
    if repeated.dtype != bool or repeated.ndim != 1:
        raise ValueError(f"repeated must be a 1-d bool array, got dtype {repeated.dtype}, shape {repeated.shape}")
    if isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 2:
        raise ValueError(f"bins must be an integer >= 2, got {bins!r}")
    if axes is None:
        fig = new_figure(width=3.0 * len(layers), height=3.0)
        axes = fig.subplots(1, len(layers), squeeze=False)[0]
        if title:
            fig.suptitle(title, fontsize=9)
    axes = list(axes)
    if len(axes) != len(layers):
        raise ValueError(f"axes must have one Axes per layer ({len(layers)}), got {len(axes)}")
    colours = dict(zip(("rest", "repeated"), curve_colours(2)))
    for ax, layer in zip(axes, layers):
        th = _check_pairs(f"theory[{layer}]", theory[layer], repeated.size)
        me = _check_pairs(f"measured[{layer}]", measured[layer], repeated.size)
        low, high = min(th.min(), me.min()), max(th.max(), me.max())
        pad = 0.05 * max(high - low, 1e-3)
        edges = np.linspace(max(low - pad, -1.0), min(high + pad, 1.0), int(bins) + 1)
        for group, mask in (("rest", ~repeated), ("repeated", repeated)):
            if not mask.any():
                continue
            colour = colours[group]
            label = "repeated words" if group == "repeated" else "other pairs"
            ax.hist(me[mask], bins=edges, density=True, color=colour, alpha=0.35,
                    label=f"{label}, simulated")
            ax.hist(th[mask], bins=edges, density=True, histtype="step", color=colour, linewidth=1.6,
                    label=f"{label}, theory")
        ax.set_title(f"layer {layer}", fontsize=9)
        ax.set_xlabel("pair cosine")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("density")
    axes[-1].legend(fontsize=7, loc="upper left")
    return axes
