"""The visual language of the remprop figures: phase colours, hatches, line styles.

Phase colours differ in lightness (CIE L* about 96, 66 and 30), so the three regions stay
apart in greyscale print; the collapsed phases are also hatched and every region carries
a text label. Curves of theory against simulation take the viridis colours of
:func:`curve_colours` (increasing lightness) and the markers of :data:`CURVE_MARKERS`,
one helper for every figure. Figures are created as :class:`matplotlib.figure.Figure`
objects (no pyplot, no global state): callers save or discard them.
"""
from __future__ import annotations

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure

from .phases import ENTROPY_COLLAPSE, PHASE_LABELS, RANK_COLLAPSE, TRAINABLE

__all__ = ["PHASE_STYLE", "LINE", "NORM_TITLES", "VARIANT_STYLE", "VARIANT_MARKERS", "CURVE_MARKERS",
           "curve_colours", "draw_phases", "new_figure"]

#: Per phase: fill colour, hatch pattern, hatch colour, label text and label colour.
PHASE_STYLE = {
    TRAINABLE: dict(color="#fbf3d5", hatch=None, hatch_color=None, text="trainable",
                    text_color="#3b3b3b"),
    RANK_COLLAPSE: dict(color="#7fa7cf", hatch="//", hatch_color="#4f7299", text="rank collapse",
                        text_color="#0d2a4a"),
    ENTROPY_COLLAPSE: dict(color="#8c2f28", hatch="\\\\", hatch_color="#b9574f",
                           text="entropy collapse", text_color="#ffffff"),
}

#: Line styles of the curves drawn over the regions.
LINE = {
    "beta_critical": dict(color="black", linestyle="--", linewidth=1.6),
    "alpha_star": dict(color="#111111", linestyle="-", linewidth=2.2),
}

#: Human-readable names of the LayerNorm placements.
NORM_TITLES = {"post": "post-LN", "pre": "pre-LN", "none": "no LN"}

#: Colours and markers of the LayerNorm-placement comparison (distinct in greyscale by
#: line style as well).
VARIANT_STYLE = {
    "post-LN": dict(color="#1f4e79", linestyle="-", marker=None),
    "pre-LN": dict(color="#c55a11", linestyle="--", marker=None),
    "post-LN, gain-controlled": dict(color="#2e7d32", linestyle="-.", marker=None),
    "pre-LN, gain-controlled": dict(color="#6a1b9a", linestyle=":", marker=None),
}

#: Marker of each LayerNorm variant's simulated points (shapes tell them apart in greyscale).
VARIANT_MARKERS = {"post-LN": "o", "pre-LN": "s", "post-LN, gain-controlled": "^", "pre-LN, gain-controlled": "D"}

#: Markers of successive simulated curves (shapes tell them apart in greyscale).
CURVE_MARKERS = ("o", "s", "^", "D", "v")


def curve_colours(n) -> list:
    """``n`` colours of increasing lightness (viridis from 0 to 0.8), distinct in greyscale too."""
    return [colormaps["viridis"](x) for x in np.linspace(0.0, 0.8, max(int(n), 1))]


def draw_phases(ax, betas, alphas, phase):
    """Fill the cells of a phase grid (axes ``(alpha, beta)``) with the colours of :data:`PHASE_STYLE`.

    Returns the phase codes in drawing order (sorted), for legends.
    """
    codes = sorted(PHASE_LABELS)
    cmap = ListedColormap([PHASE_STYLE[c]["color"] for c in codes])
    norm = BoundaryNorm(np.arange(len(codes) + 1) - 0.5, cmap.N)
    ax.pcolormesh(betas, alphas, phase, cmap=cmap, norm=norm, shading="nearest", rasterized=True)
    return codes


def new_figure(width=6.0, height=4.6, **kwargs) -> Figure:
    """A stand-alone Figure (Agg canvas on save; never registered with pyplot)."""
    return Figure(figsize=(width, height), layout="constrained", **kwargs)
