"""``ProbeTrace.plot``: a coord_check picture (q and token cosine per layer, across widths) with
the theory's lines, drawn through pyplot so that Jupyter shows it (issue 26, item 7)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg")  # the test process only

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from remprop.diagrams.probe_figures import probe_figure  # noqa: E402
from remprop.theory import Architecture, propagate  # noqa: E402
from remprop.validation import probe  # noqa: E402
from test_figure_layout import check_layout  # noqa: E402

DEPTH, T, BATCH = 3, 12, 4


def encoder_trace(width, seed):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(width, 2, 2 * width, dropout=0.0, batch_first=True, dtype=torch.float64)
    model = nn.TransformerEncoder(layer, DEPTH, enable_nested_tensor=False)
    x = torch.randn(BATCH, T, width, dtype=torch.float64, generator=torch.Generator().manual_seed(seed))
    return probe(model, x)


@pytest.fixture(scope="module")
def traces():
    return {f"d = {width}": encoder_trace(width, seed) for seed, width in enumerate((16, 64))}


def test_trace_plot_draws_through_pyplot_and_overlays_the_theory(traces):
    small, large = traces["d = 16"], traces["d = 64"]
    theory = propagate(Architecture(), 0.5, DEPTH, q0=float(large.q[:, 0].mean()), rho0=float(large.rho[:, 0].mean()))
    before = plt.get_fignums()
    figure = small.plot(label="d = 16")
    try:
        assert plt.get_fignums() == before + [figure.number]  # pyplot knows it: Jupyter shows it
        again = large.plot(theory, label="d = 64", axes=figure.axes[:2])
        assert again is figure
        q_ax, rho_ax = figure.axes[:2]
        # one error-bar series per trace, at the batch means; the second takes the next marker
        assert len(q_ax.containers) == 2 and len(rho_ax.containers) == 2
        markers = {container.lines[0].get_marker() for container in rho_ax.containers}
        assert len(markers) == 2
        np.testing.assert_allclose(rho_ax.containers[1].lines[0].get_ydata(), large.rho.mean(axis=0))
        np.testing.assert_allclose(q_ax.containers[0].lines[0].get_ydata(), small.q.mean(axis=0))
        theory_lines = [line for line in rho_ax.lines if line.get_label() == "theory"]
        assert len(theory_lines) == 1
        np.testing.assert_allclose(theory_lines[0].get_ydata(), theory.rho)
        labels = [text.get_text() for text in rho_ax.get_legend().get_texts()]
        assert {"d = 16", "d = 64", "theory"} <= set(labels)
        check_layout(figure)
    finally:
        plt.close(figure)


def test_probe_figure_across_widths_with_a_theory_per_trace(traces):
    theories = {label: propagate(Architecture(), 0.5, DEPTH, q0=float(t.q[:, 0].mean()),
                                 rho0=float(t.rho[:, 0].mean())) for label, t in traces.items()}
    figure = probe_figure(traces, theories, title="coord check")
    assert plt.get_fignums() == []  # the function itself stays off pyplot
    q_ax, rho_ax = figure.axes
    own = [line for line in rho_ax.lines if line.get_gid() == "theory"]
    assert len(own) == 2  # each trace's theory, in the colour of its points
    for line, container, theory in zip(own, rho_ax.containers, theories.values()):
        assert line.get_color() == container.lines[0].get_color()
        np.testing.assert_allclose(line.get_ydata(), theory.rho)
    check_layout(figure)


def test_probe_figure_refuses_bad_input(traces):
    with pytest.raises(ValueError, match="traces"):
        probe_figure({})
    with pytest.raises(ValueError, match="axes"):
        probe_figure(traces, axes=[None])

    class Flat:
        q = rho = np.zeros((2, 3, 4))

    with pytest.raises(ValueError, match=r"traces\['x'\]\.q"):
        probe_figure({"x": Flat()})
