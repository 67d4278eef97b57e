"""The visual language of the remprop figures: phase colours, hatches, line styles.

Phase colours differ in lightness (CIE L* about 96, 66 and 30), so the three regions stay
apart in greyscale print; the collapsed phases are also hatched and every region carries
a text label. Curves of theory against simulation take the viridis colours of
:func:`curve_colours` (increasing lightness) and the markers of :data:`CURVE_MARKERS`,
one helper for every figure. Figures are created by :func:`new_figure`: stand-alone
:class:`matplotlib.figure.Figure` objects (no pyplot, no global state; the command line
saves them through the Agg canvas), or, inside :func:`pyplot_figures` (the ``.plot()``
methods of the result objects), through ``pyplot.figure`` so that Jupyter shows them.
"""
from __future__ import annotations

import contextlib
import contextvars
import weakref

import numpy as np
from matplotlib import colormaps
from matplotlib.colors import BoundaryNorm, ListedColormap
from matplotlib.figure import Figure
from matplotlib.patheffects import Normal, Stroke
from scipy import ndimage

from remprop.theory.work_estimates import spread_indices

from .phases import ENTROPY_COLLAPSE, PHASE_LABELS, RANK_COLLAPSE, TRAINABLE

__all__ = ["PHASE_STYLE", "LINE", "NORM_TITLES", "VARIANT_STYLE", "VARIANT_MARKERS", "CURVE_MARKERS",
           "curve_colours", "draw_phases", "new_figure", "pyplot_figures", "phase_label", "keep_labels_clear",
           "marker_extents"]

#: Per phase: fill colour, hatch pattern, hatch colour, label text and label colour, and the fill of
#: a marker of a measured or trained cell in that phase (``marker_color``): it differs from the
#: region's fill by at least 25 in CIE L*, so a marker that agrees with the region behind it still
#: reads as a filled marker, as the legend shows it (not a hollow ring in the background colour).
PHASE_STYLE = {
    TRAINABLE: dict(color="#fbf3d5", hatch=None, hatch_color=None, text="trainable",
                    text_color="#3b3b3b", marker_color="#d9a21b"),
    RANK_COLLAPSE: dict(color="#7fa7cf", hatch="//", hatch_color="#4f7299", text="rank collapse",
                        text_color="#0d2a4a", marker_color="#1f3f66"),
    ENTROPY_COLLAPSE: dict(color="#8c2f28", hatch="\\\\", hatch_color="#b9574f",
                           text="entropy collapse", text_color="#ffffff", marker_color="#f4b5ad"),
}

#: Line styles of the curves drawn over the regions.
LINE = {
    "beta_critical": dict(color="black", linestyle="--", linewidth=1.6),
    "alpha_star": dict(color="#111111", linestyle="-", linewidth=2.2),
    # alpha*(L) continued where beta > beta_c (entropy collapse): light dots on a dark outline,
    # readable on the dark red region and on a white legend alike
    "alpha_star_beyond": dict(color="0.85", linestyle=":", linewidth=2.2,
                              path_effects=[Stroke(linewidth=3.6, foreground="0.25"), Normal()]),
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


#: True inside :func:`pyplot_figures`: :func:`new_figure` draws through pyplot.
_THROUGH_PYPLOT = contextvars.ContextVar("remprop_figures_through_pyplot", default=False)


@contextlib.contextmanager
def pyplot_figures():
    """Within this context :func:`new_figure` creates its figures with ``pyplot.figure``.

    Figures pyplot knows are shown by Jupyter (``%matplotlib inline`` or a widget backend)
    at the end of the cell and by ``pyplot.show()`` in a script; the ``.plot()`` methods of
    the result objects draw in this context. Everywhere else (the command line writing
    files, the results' ``save``) figures stay stand-alone: nothing accumulates in pyplot's list of
    open figures.
    """
    token = _THROUGH_PYPLOT.set(True)
    try:
        yield
    finally:
        _THROUGH_PYPLOT.reset(token)


def new_figure(width=6.0, height=4.6, **kwargs) -> Figure:
    """A new Figure with a constrained layout, ``width x height`` inches.

    Stand-alone (Agg canvas on save; never registered with pyplot), or inside
    :func:`pyplot_figures` made by ``pyplot.figure`` (registered, shown by Jupyter).
    """
    if _THROUGH_PYPLOT.get():
        from matplotlib import pyplot

        return pyplot.figure(figsize=(width, height), layout="constrained", **kwargs)
    return Figure(figsize=(width, height), layout="constrained", **kwargs)


# -- phase labels that keep clear of the data ---------------------------------------------
#: Candidate positions (data coordinates, best first) of each phase label drawn by
#: :func:`phase_label`; :func:`keep_labels_clear` moves a label along them.
_LABEL_CANDIDATES = weakref.WeakKeyDictionary()
#: Most candidate positions kept per label (evenly spread over the ranked cells).
_MAX_CANDIDATES = 400
#: Room (points) a phase label keeps from every data marker, beyond the marker's outline: a label box
#: that touches a marker reads as covering it.
LABEL_CLEARANCE_PT = 3.0
#: Font sizes a phase label tries, as fractions of its own, when at its own size it fits inside its
#: region nowhere (a narrow region), each on one line and then broken at its spaces: the smaller one
#: still reads at the figures' sizes (8 pt of 11).
_LABEL_SHRINK = (1.0, 0.75)


def phase_label(ax, xs, ys, mask, code, fontsize=11, text=None):
    """Write the name of phase ``code`` (or ``text``, in its colours) inside its region ``mask``
    (rows = ``ys``, columns = ``xs``).

    The label goes to the cell farthest from the region's edge (among equally deep cells
    the one nearest its centroid); the other cells of the region, deepest first, are kept
    as fall-back positions for :func:`keep_labels_clear`, with the region itself (a label
    box should lie inside it, not across a phase boundary). The label takes no part in the
    layout (``in_layout=False``). Returns the Text.
    """
    style = PHASE_STYLE[code]
    padded = np.pad(mask, 1, constant_values=False)
    depth = ndimage.distance_transform_edt(padded)[1:-1, 1:-1]
    rows, cols = np.nonzero(mask)
    centre = np.array([rows.mean(), cols.mean()])
    # deepest first; ties broken by the distance to the centroid
    order = np.lexsort(((rows - centre[0]) ** 2 + (cols - centre[1]) ** 2, -np.round(depth[rows, cols] * 2) / 2))
    order = order[spread_indices(order.size, _MAX_CANDIDATES)]
    candidates = [(float(xs[cols[k]]), float(ys[rows[k]])) for k in order]
    x, y = candidates[0]
    region = (np.asarray(xs, dtype=float), np.asarray(ys, dtype=float), np.asarray(mask, dtype=bool))
    text = ax.text(x, y, style["text"] if text is None else text, ha="center", va="center", fontsize=fontsize,
                   fontweight="bold",
                   color=style["text_color"],
                   bbox=dict(boxstyle="round,pad=0.25", facecolor=style["color"], edgecolor="none", alpha=0.9))
    text.set_in_layout(False)
    _LABEL_CANDIDATES[text] = candidates, region
    return text


def marker_extents(ax) -> list:
    """Display-space boxes of every data marker of ``ax`` (lines drawn with markers, scatter
    points, error-bar points): one ``matplotlib.transforms.Bbox`` per point, its
    half-width the marker's radius and half its outline (line markers: ``markersize / 2``
    points plus half ``markeredgewidth``; scatter points: ``sqrt(size) / 2`` points plus half
    the edge's linewidth)."""
    from matplotlib.collections import PathCollection
    from matplotlib.lines import Line2D
    from matplotlib.transforms import Bbox

    scale = ax.figure.dpi / 72.0
    boxes = []

    def add(points, radii):
        for (x, y), r in zip(points, radii):
            if np.isfinite(x) and np.isfinite(y):
                boxes.append(Bbox.from_extents(x - r, y - r, x + r, y + r))

    for line in ax.get_lines():
        if not line.get_visible() or line.get_marker() in (None, "None", "none", "", " "):
            continue
        points = line.get_transform().transform(np.column_stack(line.get_data()).astype(float))
        add(points, np.full(len(points), 0.5 * (line.get_markersize() + line.get_markeredgewidth()) * scale))
    for collection in ax.collections:
        if isinstance(collection, PathCollection) and collection.get_visible() and len(collection.get_offsets()):
            points = collection.get_offset_transform().transform(np.asarray(collection.get_offsets(), float))
            sizes = np.broadcast_to(np.asarray(collection.get_sizes(), float), (len(points),))
            edges = np.asarray(collection.get_linewidths(), float)
            edges = np.broadcast_to(edges if edges.size else np.zeros(1), (len(points),))
            add(points, 0.5 * (np.sqrt(sizes) + edges) * scale)
    return boxes


def label_extent(text):
    """Display-space box of a Text with its bbox patch (the box drawn around it), if any."""
    from matplotlib.transforms import Bbox

    box = text.get_window_extent()
    patch = text.get_bbox_patch()
    if patch is None:
        return box
    # the patch follows the text when it is drawn: after a change of text or size, place it now
    text.update_bbox_position_size(text.figure._get_renderer())
    return Bbox.union([box, patch.get_window_extent()])


def _inside_region(ax, box, region) -> bool:
    """Whether the display box ``box`` lies inside the phase region ``(xs, ys, mask)`` of ``ax``: its
    corners, edge midpoints and centre each fall on a cell of the region (cells drawn as
    ``shading="nearest"``: the grid value nearest the point)."""
    xs, ys, mask = region
    u = np.linspace(box.x0, box.x1, 3)
    v = np.linspace(box.y0, box.y1, 3)
    points = ax.transData.inverted().transform(np.array([(a, b) for a in u for b in v]))
    for x, y in points:
        if not (xs.min() <= x <= xs.max() and ys.min() <= y <= ys.max()):
            return False
        if not mask[np.abs(ys - y).argmin(), np.abs(xs - x).argmin()]:
            return False
    return True


def keep_labels_clear(figure):
    """Move the phase labels of ``figure`` (:func:`phase_label`) off its data markers and legends.

    The figure is laid out first (``draw_without_rendering``: constrained layout fixes
    the axes), then every phase label goes to the first of its positions where its box stays
    inside its axes, at least ``LABEL_CLEARANCE_PT`` points from every marker's outline
    (:func:`marker_extents`) and off the legends of its axes; of those, a position where the
    box also lies inside its own region is taken first, at its own font size and then at the
    smaller sizes of ``_LABEL_SHRINK`` (a narrow region), each on one line and then one word a
    line, and only then one across a phase boundary. A label with no such position is removed (the legend still names the phase).
    Returns the figure.
    """
    figure.draw_without_rendering()
    pad = LABEL_CLEARANCE_PT * figure.dpi / 72.0
    for ax in figure.axes:
        labels = [text for text in ax.texts if text in _LABEL_CANDIDATES]
        if not labels:
            continue
        frame = ax.get_window_extent()
        obstacles = [box.expanded(1.0, 1.0).padded(pad) for box in marker_extents(ax)]
        obstacles += [legend.get_window_extent() for legend in (ax.get_legend(),) if legend is not None]
        for text in labels:
            candidates, region = _LABEL_CANDIDATES[text]
            size = text.get_fontsize()
            # A label moves rigidly with its anchor in display space: its box is measured once per font
            # size (a text layout each time, most of this function's cost) and translated to each position.
            positions = [text.get_position(), *candidates]
            anchors = text.get_transform().transform(np.asarray(positions, dtype=float))

            def clear(start, inside):
                for (x, y), anchor in zip(positions, anchors):
                    box = start.translated(*(anchor - anchors[0]))
                    if not (box.x0 >= frame.x0 and box.x1 <= frame.x1 and box.y0 >= frame.y0 and box.y1 <= frame.y1):
                        continue
                    if any(box.overlaps(other) for other in obstacles):
                        continue
                    if inside and not _inside_region(ax, box, region):
                        continue
                    return (x, y), box
                return None

            found, words = None, text.get_text()
            tries = [(True, factor, lines) for factor in _LABEL_SHRINK for lines in (words, words.replace(" ", "\n"))]
            for inside, shrink, lines in tries + [(False, 1.0, words)]:
                text.set_fontsize(size * shrink)
                text.set_text(lines)
                found = clear(label_extent(text), inside)
                if found is not None:
                    break
            if found is None:
                text.remove()
                continue
            text.set_position(found[0])
            obstacles.append(found[1])  # the next label keeps clear of this one too
    return figure
