"""The main figures as a reader sees them (issue 26, item 9): measured on the rendered page.

Each figure is drawn on an Agg canvas and its artists' window extents (display pixels, from
the renderer) are checked: every legend and every text lies inside the figure, every text
label written inside an axes (phase names, cell values) lies inside that axes, no legend and
no such label covers a data marker, and every marker lies wholly inside its axes (no star
cut by the edge). The marker boxes are computed here from the artists' data and sizes,
independently of the library's own helper. Also: recipe panels share their ranges, the
trained-fraction cells are equal and their boundaries follow the cell edges, the legend
shows the plot's own markers, the attention maps spread over their colour scale, a resized
model's title says its size, and output files carry one extension. Small grids throughout.
"""
from __future__ import annotations

import json

import matplotlib

matplotlib.use("Agg")  # the test process only

import numpy as np  # noqa: E402
import pytest  # noqa: E402
from matplotlib.backends.backend_agg import FigureCanvasAgg  # noqa: E402
from matplotlib.collections import LineCollection, PathCollection  # noqa: E402
from matplotlib.transforms import Bbox  # noqa: E402

from remprop.diagrams import diagnose, model_figure, trainability_diagram, trainability_figure  # noqa: E402
from remprop.diagrams.recipes import recipe_predictions, recipes_figure  # noqa: E402
from remprop.theory import Architecture, load_hf_config, model_spec  # noqa: E402

#: Pixels of slack for antialiasing and rounding of the extents.
SLACK = 1.0


def rendered(figure):
    """The figure drawn on an Agg canvas, and the renderer that drew it."""
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return canvas.get_renderer()


def inside(box, frame, slack=SLACK):
    return (box.x0 >= frame.x0 - slack and box.x1 <= frame.x1 + slack and box.y0 >= frame.y0 - slack
            and box.y1 <= frame.y1 + slack)


def marker_boxes(ax):
    """(box, description) of every drawn data marker of ``ax``: lines with a marker (error-bar
    points included) and scatter points, the box's half-width the marker radius."""
    scale = ax.figure.dpi / 72.0
    boxes = []
    for line in ax.get_lines():
        if not line.get_visible() or str(line.get_marker()) in ("None", "none", "", " "):
            continue
        xy = line.get_transform().transform(np.column_stack(line.get_data()).astype(float))
        r = line.get_markersize() / 2 * scale
        boxes += [(Bbox.from_extents(x - r, y - r, x + r, y + r), f"{line.get_marker()} at {x:.0f},{y:.0f}")
                  for x, y in xy if np.isfinite(x) and np.isfinite(y)]
    for artist in ax.collections:
        if isinstance(artist, PathCollection) and artist.get_visible() and len(artist.get_offsets()):
            xy = artist.get_offset_transform().transform(np.asarray(artist.get_offsets(), float))
            radii = np.broadcast_to(np.sqrt(artist.get_sizes()) / 2 * scale, (len(xy),))
            boxes += [(Bbox.from_extents(x - r, y - r, x + r, y + r), f"scatter at {x:.0f},{y:.0f}")
                      for (x, y), r in zip(xy, radii)]
    frame = ax.get_window_extent()
    # a marker whose centre lies outside the view is not drawn (clipped away)
    return [(box, what) for box, what in boxes
            if frame.x0 <= (box.x0 + box.x1) / 2 <= frame.x1 and frame.y0 <= (box.y0 + box.y1) / 2 <= frame.y1]


def label_box(text, renderer):
    box = text.get_window_extent(renderer)
    patch = text.get_bbox_patch()
    return Bbox.union([box, patch.get_window_extent(renderer)]) if patch is not None else box


def check_layout(figure):
    """Every legend and text inside the figure, labels inside their axes, markers inside their
    axes, and no legend or label over a marker; returns the renderer."""
    renderer = rendered(figure)
    page = figure.bbox
    axes = [ax for ax in figure.axes if ax.get_visible()]
    legends = list(figure.legends) + [ax.get_legend() for ax in axes if ax.get_legend() is not None]
    markers = [(box, what) for ax in axes for box, what in marker_boxes(ax)]
    for ax in axes:
        frame = ax.get_window_extent(renderer)
        for box, what in marker_boxes(ax):
            assert inside(box, frame), f"marker {what} cut by the edge of axes {ax.get_title()!r}"
    for legend in legends:
        box = legend.get_window_extent(renderer)
        assert inside(box, page), f"legend {[t.get_text() for t in legend.get_texts()]} leaves the figure"
        for marker, what in markers:
            assert not box.overlaps(marker), f"legend covers the marker {what}"
    # titles, axis and tick labels, colour bars: each axes with all it draws, and the figure's texts
    for ax in axes:
        assert inside(ax.get_tightbbox(renderer), page), f"axes {ax.get_title()!r} or its labels leave the figure"
    for text in [figure._suptitle, *figure.texts]:
        if text is not None and text.get_visible() and text.get_text().strip():
            assert inside(text.get_window_extent(renderer), page), f"text {text.get_text()!r} leaves the figure"
    for ax in axes:
        frame = ax.get_window_extent(renderer)
        for text in ax.texts:
            if not text.get_visible() or not text.get_text().strip():
                continue
            box = label_box(text, renderer)
            assert inside(box, frame), f"label {text.get_text()!r} leaves its axes"
            for marker, what in markers:
                assert not box.overlaps(marker), f"label {text.get_text()!r} covers the marker {what}"
    return renderer


# -- the trainability diagram and the recipes ----------------------------------------------
def test_trainability_figure_layout():
    diagram = trainability_diagram(Architecture(), np.linspace(0.05, 3.0, 24), np.linspace(0.0, 3.0, 20), 12)
    figure = trainability_figure(diagram)
    check_layout(figure)
    assert {t.get_text() for t in figure.axes[0].texts} >= {"trainable", "rank collapse"}


@pytest.fixture(scope="module")
def recipes():
    return recipe_predictions(Architecture(), 0.5, depth=8, names=("base", "deepnorm", "mup", "inverse-sqrt-depth"))


def test_recipes_share_ranges_and_keep_labels_off_the_stars(recipes):
    figure = recipes_figure(recipes, resolution=14, columns=2)
    check_layout(figure)
    panels = [ax for ax in figure.axes if ax.get_visible()]
    assert len(panels) == 4
    assert len({ax.get_xlim() for ax in panels}) == 1 and len({ax.get_ylim() for ax in panels}) == 1
    # one legend for the panels, naming the star
    assert len(figure.legends) == 1 and not any(ax.get_legend() for ax in panels)
    assert r"the recipe (its $\beta$, $\alpha_{SA}$)" in [t.get_text() for t in figure.legends[0].get_texts()]
    stars = [line for ax in panels for line in ax.lines if line.get_marker() == "*"]
    assert len(stars) == 4


# -- a model on its diagram (remprop check) ------------------------------------------------
@pytest.fixture(scope="module")
def small_beta_diagnosis():
    """BERT-base at 3 layers with a query/key scale far below the axis' end."""
    spec = model_spec("bert-base").with_depth(3)
    return diagnose(spec.with_settings(beta=0.002), max_depth=20)


def test_check_figure_keeps_a_small_beta_inside(small_beta_diagnosis):
    d = small_beta_diagnosis
    figure = model_figure(d, {"rho_mean": d.rho + 0.01, "rho_std": np.full(4, 0.01), "seeds": [0, 1]}, resolution=16)
    check_layout(figure)
    left = figure.axes[0]
    star = [line for line in left.lines if line.get_marker() == "*"][0]
    assert star.get_xdata()[0] == pytest.approx(0.002)
    star_x = left.transData.transform((0.002, 1.0))[0]
    frame = left.get_window_extent()
    assert star_x - frame.x0 > 0.1 * frame.width  # well inside, not on the edge
    # a spec with fewer layers than its configuration says so in the title
    title = figure.get_suptitle()
    assert "resized to L = 3" in title and "L = 12" in title, title


# -- the trained diagram -------------------------------------------------------------------
@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    pytest.importorskip("torch")
    from test_trained_diagram import fake_train, small_spec

    from remprop.validation.training.trained_diagram import TrainedDiagram
    from remprop.validation.training.trained_grid import run_trained_grid

    folder = tmp_path_factory.mktemp("trained")
    spec = small_spec(seeds=1, betas=(0.5, 1.0, 4.0), alphas=(0.1, 0.3, 1.0))
    run_trained_grid(spec, folder, train=fake_train, workers=0)
    return TrainedDiagram.from_folder(folder)


def test_trained_figure_cells_boundaries_and_legend(trained):
    figure = trained.figure(fine_points=30)
    check_layout(figure)
    left, right = figure.axes[:2]
    # the trained fraction: one equal cell per grid value (betas 0.5, 1, 4 are unevenly spaced)
    mesh = right.collections[0]
    corners = mesh.get_coordinates()
    np.testing.assert_allclose(np.diff(corners[0, :, 0]), 1.0)
    np.testing.assert_allclose(np.diff(corners[:, 0, 1]), 1.0)
    # boundaries run along the cell edges (half-integers), not interpolated through the cells
    lines = [c for c in right.collections if isinstance(c, LineCollection)]
    assert lines
    for collection in lines:
        for segment in collection.get_segments():
            assert np.allclose(np.asarray(segment) % 1.0, 0.5) or np.allclose(
                (np.asarray(segment) - 0.5) % 1.0, 0.0), segment
            assert np.allclose(np.sort(np.abs(np.diff(segment, axis=0)).ravel()), [0.0, 1.0])
    # the legend's markers are the scatter markers themselves, at their size
    scatters = [c for c in left.collections if isinstance(c, PathCollection)]
    handles = [h for legend in figure.legends for h in legend.legend_handles if isinstance(h, PathCollection)]
    assert len(handles) == len(scatters)
    for handle, scatter in zip(handles, scatters):
        np.testing.assert_allclose(handle.get_sizes()[:1], scatter.get_sizes()[:1])
        assert handle.get_paths()[0] == scatter.get_paths()[0] or np.allclose(
            handle.get_paths()[0].vertices, scatter.get_paths()[0].vertices)


# -- Fig. 1(a, b): the attention maps --------------------------------------------------------
def test_attention_maps_spread_over_their_colour_scale():
    pytest.importorskip("torch")
    from remprop.diagrams.attention_figures import attention_maps_figure
    from remprop.validation.attention_maps import attention_map_data

    data = attention_map_data((0.5, 3.0), seq_len=128, width=64)
    figure = attention_maps_figure(data)
    check_layout(figure)
    images = [image for ax in figure.axes for image in ax.images]
    assert len(images) == 2
    for image in images:
        colour = np.ma.filled(image.norm(image.get_array()), np.nan).ravel()
        quartiles = np.nanpercentile(colour, [25, 75])
        # a linear scale up to the largest weight puts three quarters of a 0.5-beta map below 0.02
        # of the scale (T A_ij ~ lognormal around 1, the largest ~ 20); here they spread
        assert quartiles[1] - quartiles[0] > 0.15, quartiles
        assert np.mean((colour < 0) | (colour > 1)) < 0.05


# -- file names ----------------------------------------------------------------------------
def test_check_writes_one_extension_for_a_config_file(capsys, tmp_path):
    from cli_checks import run_cli

    config = tmp_path / "mymodel_config.json"
    fields = {k: v for k, v in load_hf_config("bert-base").items() if k != "_name_or_path"}  # named by its path
    config.write_text(json.dumps(fields))
    code, _, err = run_cli(capsys, "check", config, "--depth", "2", "--max-depth", "8", "--out", tmp_path / "out")
    assert code == 0, err
    names = sorted(path.name for path in (tmp_path / "out").iterdir())
    assert names and all(name.count(".") == 1 for name in names), names
    assert not any(name.endswith(".json.json") or name.endswith(".json.png") for name in names), names
    # the stem: the config's name, then the options given that change the answer
    assert any(name.endswith("mymodel_config-depth=2-max-depth=8.png") for name in names), names


def test_name_option_drops_its_extension_once(capsys, tmp_path):
    from cli_checks import run_cli

    code, _, err = run_cli(capsys, "diagram", "--beta", "0.5,1", "--alpha", "0.5,1", "--depth", "2",
                           "--name", "run.json", "--out", tmp_path)
    assert code == 0, err
    assert sorted(path.name for path in tmp_path.iterdir()) == ["run.json", "run.npz", "run.png"]
