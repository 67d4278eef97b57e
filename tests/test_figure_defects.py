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
