"""The figure defects of issue 44 item 4, each read off the matplotlib objects (titles, legend
handles, facecolours, texts): the theory diagram's title states T; measured and trained markers
stand out from the region of their own phase, as the legend shows them; ``diagram --lr`` labels
its hatched cells by what they are; the dotted alpha* continuation has a legend entry."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # the test process only

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.collections import PathCollection  # noqa: E402
from matplotlib.colors import to_rgb  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from remprop.diagrams import TRAINABLE, trainability_diagram, trainability_figure  # noqa: E402
from remprop.diagrams.learning_rate import (LR_ABOVE_CEILING, diagram_window, draw_rate_region,  # noqa: E402
                                            phases_at_rate)
from remprop.diagrams.recipes import recipe_predictions, recipes_figure  # noqa: E402
from remprop.diagrams.style import PHASE_STYLE  # noqa: E402
from remprop.theory import Architecture  # noqa: E402

#: A marker "stands out" from the region behind it when their CIE lightness differs by this much: the
#: phase fills themselves are 29-30 apart (L* about 96, 66, 33), the gap the module docstring of
#: diagrams/style.py relies on for greyscale print; 25 is just short of that.
MIN_LIGHTNESS_GAP = 25.0


def lightness(colour) -> float:
    """CIE L* of an sRGB colour (D65)."""
    rgb = np.asarray(to_rgb(colour))
    linear = np.where(rgb <= 0.04045, rgb / 12.92, ((rgb + 0.055) / 1.055) ** 2.4)
    y = float(linear @ [0.2126, 0.7152, 0.0722])
    return 116.0 * y ** (1 / 3) - 16.0 if y > 0.008856 else 903.3 * y


def test_the_phase_fills_are_as_far_apart_as_the_rule_assumes():
    fills = sorted(lightness(style["color"]) for style in PHASE_STYLE.values())
    assert min(np.diff(fills)) >= MIN_LIGHTNESS_GAP


# -- the title states T ---------------------------------------------------------------------
@pytest.mark.parametrize("seq_len, shown", [(1024, r"$T = 1024$"), (None, r"$T \to \infty$")])
def test_theory_diagram_title_states_the_theorys_T(seq_len, shown):
    diagram = trainability_diagram(Architecture(seq_len=seq_len), np.linspace(0.2, 3.0, 6),
                                   np.linspace(0.0, 2.0, 5), 4)
    title = trainability_figure(diagram).axes[0].get_title()
    assert shown in title, title


# -- markers that agree with their region stay filled -------------------------------------------
def _points_and_fills(ax):
    """(x, y, facecolour) of every filled scatter point of ``ax``."""
    out = []
    for collection in ax.collections:
        if not isinstance(collection, PathCollection) or not len(collection.get_offsets()):
            continue
        faces = collection.get_facecolors()
        if not len(faces) or faces[0][3] == 0:  # the rings of disagreeing cells: no fill
            continue
        for (x, y), face in zip(collection.get_offsets(), np.broadcast_to(faces, (len(collection.get_offsets()), 4))):
            out.append((float(x), float(y), tuple(face[:3])))
    return out


def _assert_markers_stand_out(ax, diagram):
    """Every marker of a cell whose phase agrees with the prediction differs from that phase's region
    fill (the region behind it) by MIN_LIGHTNESS_GAP in L*: it is seen filled, not hollow."""
    points = _points_and_fills(ax)
    assert points
    checked = 0
    for i, alpha in enumerate(diagram.alphas):
        for j, beta in enumerate(diagram.betas):
            if not diagram.agrees[i, j]:
                continue
            face = [f for x, y, f in points if np.isclose(x, beta) and np.isclose(y, alpha)]
            assert len(face) == 1, (alpha, beta)
            behind = PHASE_STYLE[int(diagram.predicted.phase[i, j])]["color"]
            assert abs(lightness(face[0]) - lightness(behind)) >= MIN_LIGHTNESS_GAP, (alpha, beta, face[0], behind)
            checked += 1
    assert checked


def test_measured_markers_are_filled_as_their_legend_shows_them():
    pytest.importorskip("torch")
    from test_sweep import fake_records

    from remprop.validation.experiments.measured_diagram import MeasuredDiagram
    from remprop.validation.experiments.sweep import SweepSpec

    spec = SweepSpec(betas=(0.5, 1.2, 3.0), alphas=(0.5, 2.0), depth=3, seeds=1, sequences=2, threshold=0.9)
    q, p = [1.5, 1.0, 1.0, 1.0], [0.3, 0.9, 0.95, 0.99]
    diagram = MeasuredDiagram.from_records(spec, fake_records(spec, [[0.95, 0.5, 0.95], [0.5, 0.5, 0.2]], q, p),
                                           theory="asymptotic")
    left = diagram.figure(fine_points=20).axes[0]
    _assert_markers_stand_out(left, diagram)
    # the legend's measured markers carry the fills of the plot's markers
    fills = {f for _, _, f in _points_and_fills(left)}
    legend_fills = {tuple(to_rgb(h.get_markerfacecolor())) for h in left.get_legend().legend_handles
                    if isinstance(h, Line2D) and h.get_label().startswith("measured ")
                    and h.get_markerfacecolor() != "none"}
    assert fills and legend_fills
    for fill in fills:
        assert any(np.allclose(fill, shown) for shown in legend_fills), (fill, legend_fills)


def test_trained_markers_stand_out_from_their_region(tmp_path):
    pytest.importorskip("torch")
    from test_trained_diagram import fake_train, small_spec

    from remprop.validation.training.trained_diagram import TrainedDiagram
    from remprop.validation.training.trained_grid import run_trained_grid

    run_trained_grid(small_spec(seeds=1, betas=(0.5, 1.0, 4.0), alphas=(0.1, 0.3, 1.0)), tmp_path,
                     train=fake_train, workers=0)
    diagram = TrainedDiagram.from_folder(tmp_path)
    _assert_markers_stand_out(diagram.figure(fine_points=20).axes[0], diagram)


# -- diagram --lr: hatched cells labelled by what they are --------------------------------------
def test_cells_above_the_ceiling_are_not_labelled_trainable():
    arch = Architecture(seq_len=64)
    diagram = trainability_diagram(arch, np.linspace(0.1, 2.0, 12), np.linspace(0.0, 3.0, 10), 6)
    floor, ceiling = diagram_window(diagram, 64, 300)
    lr = 10 * float(np.max(ceiling[diagram.phase == TRAINABLE]))  # every trainable cell above its ceiling
    phase = phases_at_rate(diagram.phase, ceiling, lr, floor)
    assert (phase[diagram.phase == TRAINABLE] == LR_ABOVE_CEILING).all()
    ax = trainability_figure(diagram).axes[0]
    draw_rate_region(ax, diagram, phase, lr, 300, 64)
    texts = [t.get_text() for t in ax.texts]
    assert PHASE_STYLE[TRAINABLE]["text"] not in texts, texts  # no cell is trainable at this rate
    assert "trainable at init, lr above ceiling" in texts, texts
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(label.startswith("trainable at init, lr above ceiling") for label in labels), labels
    # the longer legend still fits in the figure's width (three columns of these labels did not: the
    # saved figure cut its edges and squeezed the axes)
    assert ax.get_legend().get_window_extent().width <= ax.figure.bbox.width


# -- the dotted alpha* continuation is in the legend -----------------------------------------------
def _dotted_entries(handles):
    return [h for h in handles if isinstance(h, Line2D) and h.get_linestyle() == ":"]


def test_trainability_figure_names_the_dotted_alpha_star():
    diagram = trainability_diagram(Architecture(), np.linspace(0.2, 3.0, 12), np.linspace(0.0, 2.0, 8), 4)
    assert (diagram.betas > diagram.beta_critical).any()  # the continuation is drawn
    ax = trainability_figure(diagram).axes[0]
    assert any(line.get_linestyle() == ":" for line in ax.get_lines())
    entries = _dotted_entries(ax.get_legend().legend_handles)
    assert len(entries) == 1 and "entropy collapse" in entries[0].get_label()


def test_recipes_legend_names_the_dotted_alpha_star():
    figure = recipes_figure(recipe_predictions(Architecture(), 0.5, depth=8, names=("base", "deepnorm")), resolution=10,
                            columns=2)
    assert any(line.get_linestyle() == ":" for ax in figure.axes for line in ax.get_lines())
    entries = _dotted_entries([h for legend in figure.legends for h in legend.legend_handles])
    assert len(entries) == 1, [h.get_label() for legend in figure.legends for h in legend.legend_handles]
    assert "entropy collapse" in entries[0].get_label()


# -- phase labels keep clear of the markers and inside their own region ----------------------------
#: Room (points) every phase label keeps from a marker's outline in the test below: less than the
#: figure's own LABEL_CLEARANCE_PT (3), more than the 1.2 pt the README's grid had when its label
#: box read as covering the ringed (beta 0.5, alpha 0.1) marker.
LABEL_ROOM_PT = 2.0


def _phase_regions(ax):
    """(beta edges, alpha edges, phase codes) of the phase fill of ``ax`` (its first QuadMesh)."""
    from matplotlib.collections import QuadMesh

    mesh = next(c for c in ax.collections if isinstance(c, QuadMesh))
    corners = mesh.get_coordinates()  # (rows + 1, columns + 1, 2) cell corners
    return corners[0, :, 0], corners[:, 0, 1], np.asarray(mesh.get_array()).reshape(corners.shape[0] - 1, -1)


def _label_phase(text):
    words = " ".join(text.get_text().split())
    return next(code for code, style in PHASE_STYLE.items() if style["text"] == words)


def _outline_radii(ax):
    """(display centre, radius with half the edge's linewidth) of every scatter marker of ``ax``."""
    scale = ax.figure.dpi / 72.0
    out = []
    for c in ax.collections:
        if isinstance(c, PathCollection) and len(c.get_offsets()):
            points = c.get_offset_transform().transform(np.asarray(c.get_offsets(), float))
            radius = 0.5 * (np.sqrt(c.get_sizes()[0]) + c.get_linewidths()[0]) * scale
            out += [(point, radius) for point in points]
    return out


@pytest.mark.parametrize("dpi", [100, 150])
def test_phase_labels_keep_clear_of_markers_and_inside_their_region(tmp_path, monkeypatch, dpi):
    """The README's trained grid (depth 10, beta 0.5 and 6, alpha 0.1 and 1) with its rank-collapsed cell
    trained, as measured (a ringed marker at beta 0.5, alpha 0.1): the narrow rank-collapse region's
    label sat across the beta_c line, its box 1.2 pt from the ring."""
    pytest.importorskip("torch")
    import test_trained_diagram
    from test_trained_diagram import fake_train

    from remprop.validation.training.config import TrainConfig
    from remprop.validation.training.trained_diagram import TrainedDiagram
    from remprop.validation.training.trained_grid import TrainedGridSpec, run_trained_grid
    from remprop.diagrams.style import label_extent

    monkeypatch.setattr(test_trained_diagram, "FAKE_ALPHA_STAR", 0.05)  # alpha 0.1 trains
    config = TrainConfig(arch=Architecture(norm="post"), depth=10, width=32, seq_len=32, steps=20, eval_every=10)
    run_trained_grid(TrainedGridSpec(config, betas=(0.5, 6.0), alphas=(0.1, 1.0), seeds=1), tmp_path,
                     train=fake_train, workers=0)
    figure = TrainedDiagram.from_folder(tmp_path).figure()
    ax = figure.axes[0]
    assert not TrainedDiagram.from_folder(tmp_path).agrees[0, 0]  # the ring is drawn
    figure.set_dpi(dpi)
    figure.draw_without_rendering()
    beta_edges, alpha_edges, phase = _phase_regions(ax)
    markers = _outline_radii(ax)
    labels = [t for t in ax.texts if t.get_bbox_patch() is not None]
    assert {_label_phase(t) for t in labels} == set(PHASE_STYLE)  # every phase keeps its label
    for text in labels:
        box = label_extent(text)
        for centre, radius in markers:
            gap = np.hypot(max(box.x0 - centre[0], 0, centre[0] - box.x1), max(box.y0 - centre[1], 0, centre[1] - box.y1))
            assert gap - radius >= LABEL_ROOM_PT * dpi / 72.0, (text.get_text(), centre, gap - radius)
        corners = ax.transData.inverted().transform([(x, y) for x in np.linspace(box.x0, box.x1, 5)
                                                     for y in np.linspace(box.y0, box.y1, 5)])
        for x, y in corners:
            i = np.searchsorted(alpha_edges, y) - 1
            j = np.searchsorted(beta_edges, x) - 1
            assert 0 <= i < phase.shape[0] and 0 <= j < phase.shape[1], (text.get_text(), x, y)
            assert phase[i, j] == _label_phase(text), (text.get_text(), x, y)


# -- recipes: each star on a cell of the recipe's own phase -----------------------------------------
def _phase_under(ax, x, y):
    beta_edges, alpha_edges, phase = _phase_regions(ax)
    return int(phase[np.searchsorted(alpha_edges, y) - 1, np.searchsorted(beta_edges, x) - 1])


def test_recipe_stars_sit_on_a_cell_of_the_recipes_own_phase():
    """ReZero and T-Fixup keep alpha_SA = 1 without LayerNorm: at depth 48 their trainable band ends at
    alpha = 1 (above it the stream's scale grows as alpha^(2L)). The shared grid had no row at 1, the
    nearest row lay in entropy collapse, and the stars sat on the drawn boundary of a cell of another
    phase than the table's."""
    from remprop.diagrams.phases import PHASE_LABELS

    codes = {label: code for code, label in PHASE_LABELS.items()}
    predictions = recipe_predictions(Architecture(), 0.5, depth=48, names=("rezero", "t-fixup", "gpt2"))
    figure = recipes_figure(predictions, columns=3)  # the size the command draws
    for ax, prediction in zip(figure.axes, predictions):
        star = next(line for line in ax.get_lines() if line.get_marker() == "*")
        (x,), (y,) = star.get_data()
        assert _phase_under(ax, x, y) == codes[prediction.phase], (prediction.recipe.name, x, y)
        assert "trainable: " in ax.get_title() and prediction.phase == "trainable", ax.get_title()
    labels = [h.get_label() for legend in figure.legends for h in legend.legend_handles]
    assert any(r"$\beta$, $\alpha_{SA}$" in label for label in labels), labels  # the legend says where a star is


# -- the measured rho_L = threshold line is a boundary, not a dash ------------------------------------
def test_measured_threshold_line_runs_along_every_cell_edge_it_separates():
    """Notebook 00's 4 x 4 sweep: with one corner cell above the threshold the contour interpolated between
    the measured points was a dash across that corner; the line must separate the cells above from the
    cells below along their whole shared edges."""
    pytest.importorskip("torch")
    from matplotlib.collections import Collection, LineCollection
    from test_sweep import fake_records

    from remprop.validation.experiments.measured_diagram import MeasuredDiagram
    from remprop.validation.experiments.sweep import SweepSpec

    spec = SweepSpec(betas=tuple(np.linspace(0.3, 2.4, 4)), alphas=tuple(np.linspace(0.8, 1.6, 4)), depth=3,
                     seeds=1, sequences=2, threshold=0.99)
    final = np.full((4, 4), 0.5)
    final[0, 0] = 0.995  # one corner cell above the threshold
    diagram = MeasuredDiagram.from_records(spec, fake_records(spec, final.tolist(), [1.0] * 4, [0.5] * 4),
                                           theory="asymptotic")
    right = diagram.figure(fine_points=20).axes[1]
    drawn = []  # the solid black lines (the measured one; the predicted one is white and dashed)
    for c in right.collections:
        if isinstance(c, Collection) and len(c.get_edgecolor()) and c.get_linestyle()[0][1] is None and \
                np.allclose(c.get_edgecolor()[0][:3], 0.0):
            # a contour (ContourSet) carries its lines as paths, a LineCollection as segments
            paths = c.get_paths()
            drawn += [path.vertices for path in paths] if type(c).__name__ != "LineCollection" else c.get_segments()
    length = sum(np.hypot(*np.diff(np.asarray(seg, float), axis=0).T).sum() for seg in drawn)
    step_b, step_a = np.diff(spec.betas)[0], np.diff(spec.alphas)[0]
    # the corner cell's two inner edges, one cell side each
    assert length == pytest.approx(step_b + step_a, rel=1e-9), (length, drawn)
    labels = [t.get_text() for t in right.get_legend().get_texts()]
    assert any(label.startswith(r"measured $\rho_L = 0.99$") for label in labels), labels


# -- diagram.plot() returns what the README says ---------------------------------------------------
def test_diagram_plot_returns_the_axes_the_readme_names(tmp_path):
    """TrainabilityDiagram.plot draws one panel and takes ``ax=``: it returns the Axes (matplotlib's
    convention for a function given an Axes), as the README's tour shows it used."""
    from pathlib import Path

    from matplotlib import pyplot
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    diagram = trainability_diagram(Architecture(), np.linspace(0.2, 3.0, 6), np.linspace(0.0, 2.0, 5), 4)
    ax = diagram.plot()
    try:
        assert isinstance(ax, Axes) and ax.figure in map(pyplot.figure, pyplot.get_fignums())
        given = ax.figure.add_subplot(2, 1, 2)
        assert diagram.plot(ax=given) is given
        assert isinstance(diagram.figure(), Figure)
    finally:
        pyplot.close("all")
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    line = next(line for line in readme.splitlines() if "diagram.plot()" in line)
    assert line.startswith("ax = diagram.plot()") and "Axes" in line, line
