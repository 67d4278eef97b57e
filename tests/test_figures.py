"""Theory figures (remprop.diagrams.theory_figures, .figure_data, .paper_figures): they run on small grids,
write non-trivial PNGs with labelled axes, show the right numbers, and leave no pyplot
state behind (but ``.plot()`` without axes, which draws through pyplot for Jupyter)."""
from __future__ import annotations

import json
import math

import matplotlib

matplotlib.use("Agg")  # the test process only; the library itself never selects a backend

import matplotlib.image as mpimg  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from remprop.diagrams import (  # noqa: E402
    LAYERNORM_REFERENCE_RUN,
    attention_phase_data,
    attention_phase_figure,
    layernorm_placement_data,
    layernorm_placement_figure,
    make_theory_figures,
    trainability_diagram,
    trainability_figure,
)
from remprop.theory import Architecture, participation_ratio, propagate  # noqa: E402


def assert_nontrivial_png(path):
    """The file is a PNG image with real content: many colours and visible contrast."""
    assert path.exists() and path.stat().st_size > 5_000
    image = mpimg.imread(path)
    assert image.ndim == 3 and min(image.shape[:2]) > 200
    rgb = image[..., :3].reshape(-1, 3)
    assert len(np.unique((rgb * 255).astype(np.uint8), axis=0)) > 20
    assert rgb.std() > 0.05


def assert_labelled(ax):
    assert ax.get_xlabel().strip() and ax.get_ylabel().strip()


@pytest.fixture(scope="module")
def small_diagram():
    return trainability_diagram(Architecture(), np.linspace(0.05, 3.0, 24), np.linspace(0.0, 3.0, 20), 60)


@pytest.fixture(autouse=True)
def no_pyplot_leak():
    before = plt.get_fignums()
    yield
    assert plt.get_fignums() == before


def test_trainability_figure(tmp_path, small_diagram):
    fig = trainability_figure(small_diagram)
    ax = fig.axes[0]
    assert_labelled(ax)
    assert r"\beta" in ax.get_xlabel() and r"\alpha_{SA}" in ax.get_ylabel()
    assert "60" in ax.get_title() and "0.99" in ax.get_title()
    texts = {t.get_text() for t in ax.texts}
    assert {"trainable", "rank collapse", "entropy collapse"} <= texts
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any(r"\beta_c" in t for t in legend) and any(r"\alpha^*" in t for t in legend)
    # the vertical beta_c line sits at sqrt(2)
    vertical = [line for line in ax.lines if np.ptp(line.get_xdata()) == 0]
    assert vertical and math.isclose(vertical[0].get_xdata()[0], math.sqrt(2.0))
    fig.savefig(tmp_path / "diagram.png", dpi=100)
    assert_nontrivial_png(tmp_path / "diagram.png")


def test_plot_draws_into_given_axes(small_diagram):
    fig = Figure()
    ax = fig.add_subplot()
    assert small_diagram.plot(ax) is ax
    assert_labelled(ax)
    before = plt.get_fignums()
    # without axes, a figure pyplot knows: Jupyter shows it at the end of the cell
    drawn = small_diagram.plot()
    assert drawn.figure is not fig and plt.get_fignums() == before + [drawn.figure.number]
    assert_labelled(drawn)
    plt.close(drawn.figure)


def test_trainability_figure_pre_ln_draws_beta_c_contour(tmp_path):
    d = trainability_diagram(Architecture(norm="pre"), np.linspace(0.05, 3.0, 20), np.linspace(0.0, 3.0, 16), 20)
    fig = trainability_figure(d)
    fig.savefig(tmp_path / "pre.png", dpi=100)
    assert_nontrivial_png(tmp_path / "pre.png")
    assert "pre-LN" in fig.axes[0].get_title()


def test_attention_phase_data_matches_the_maps():
    data = attention_phase_data(np.linspace(0.1, 4.0, 30), np.linspace(0.0, 0.95, 20))
    betas, rhos, cosine = data["betas"], data["input_cosines"], data["output_cosine"]
    beta_c = np.sqrt(2.0 / (1.0 - rhos))
    np.testing.assert_allclose(data["beta_critical"], beta_c, rtol=1e-15)
    spread = betas[None, :] < beta_c[:, None]
    # spread attention: every output token is the mean token (cosine 1)
    np.testing.assert_allclose(cosine[spread], 1.0, rtol=1e-14)
    # localised: rho / (rho + (1 - rho) Y2) with Y2 = 1 - beta_c / beta (sigma_b2 = 0)
    y2 = 1.0 - beta_c[:, None] / betas[None, :]
    expected = rhos[:, None] / (rhos[:, None] + (1.0 - rhos[:, None]) * y2)
    np.testing.assert_allclose(cosine[~spread], expected[~spread], rtol=1e-12)
    np.testing.assert_allclose(data["y2"], participation_ratio(betas[None, :], 1.0, data["y2_cosines"][:, None]))


def test_attention_phase_figure(tmp_path):
    fig = attention_phase_figure(np.linspace(0.05, 4.0, 40), np.linspace(0.0, 0.99, 30))
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 2
    for ax in panels:
        assert_labelled(ax)
        assert r"\beta" in ax.get_xlabel()
    assert "cosine" in panels[0].get_ylabel() and "Y_2" in panels[1].get_ylabel()
    assert len(panels[1].lines) == 4  # one Y2 curve per default input cosine
    fig.savefig(tmp_path / "attention.png", dpi=100)
    assert_nontrivial_png(tmp_path / "attention.png")


VARIANTS = {"post-LN": ("post", "softmax"), "pre-LN": ("pre", "softmax"),
            "post-LN, gain-controlled": ("post", "gain-controlled"),
            "pre-LN, gain-controlled": ("pre", "gain-controlled")}


def test_layernorm_placement_data_equals_architecture_blocks_when_biases_agree():
    # With the value bias equal to the MLP bias the composed blocks are the Architecture's
    # block orders: iterating Architecture.block() must reproduce them to round-off.
    depth = 30
    data = layernorm_placement_data(LAYERNORM_REFERENCE_RUN.replace(depth=depth), sigma_bv2=0.02 ** 2)
    for name, (norm, attention) in VARIANTS.items():
        arch = Architecture(norm=norm, attention=attention, sigma_w2=0.2, sigma_b2=0.02 ** 2, sigma_v2=1.0)
        block, q, p = arch.block(0.1), 1.0, 0.2
        for layer in range(1, depth + 1):
            q, p = block(q, p)
            assert data["q"][name][layer] == pytest.approx(q, rel=1e-12)
            assert data["rho"][name][layer] == pytest.approx(p / q, abs=1e-12)


def test_layernorm_placement_separate_value_bias_matters_only_through_values():
    # sigma_bv2 = 0 differs from the shared-bias stack (the bias enters the value path)...
    run = LAYERNORM_REFERENCE_RUN.replace(depth=20)
    shared = layernorm_placement_data(run, sigma_bv2=0.02 ** 2)["rho"]
    no_value_bias = layernorm_placement_data(run)["rho"]
    for name in VARIANTS:
        assert np.abs(shared[name][1:] - no_value_bias[name][1:]).max() > 1e-6
    # ...and agrees with propagate() of an Architecture without any bias when the MLP
    # bias is also 0 (one kernel combination: post-LN softmax ReLU).
    zero = layernorm_placement_data(run.replace(arch=run.arch.replace(sigma_b2=0.0)))["rho"]["post-LN"]
    traj = propagate(Architecture(sigma_w2=0.2, sigma_b2=0.0, sigma_v2=1.0), 0.1, 20, q0=1.0, rho0=0.2)
    np.testing.assert_allclose(zero, traj.rho, rtol=0, atol=1e-12)


def test_layernorm_placement_reference_settings():
    data = layernorm_placement_data()
    s = data["settings"]
    assert (s["sigma_w2"], s["sigma_b2"], s["sigma_bv2"], s["sigma_v2"], s["beta"], s["rho0"], s["q0"]) == (
        0.2, 0.02 ** 2, 0.0, 1.0, 0.1, 0.2, 1.0)
    assert len(data["layers"]) == 101
    rho = data["rho"]
    for curve in rho.values():
        assert curve[0] == pytest.approx(0.2) and np.all((curve >= 0) & (curve <= 1 + 1e-12))
    # Fig. 4's message: plain softmax stacks collapse, gain control keeps tokens apart
    assert rho["post-LN"][-1] > 0.99
    assert max(rho["post-LN, gain-controlled"][-1], rho["pre-LN, gain-controlled"][-1]) < rho["pre-LN"][-1]


def test_layernorm_placement_figure(tmp_path):
    fig = layernorm_placement_figure(LAYERNORM_REFERENCE_RUN.replace(depth=40))
    ax = fig.axes[0]
    assert_labelled(ax)
    assert len(ax.lines) == 4
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert labels == ["post-LN", "pre-LN", "post-LN, gain-controlled", "pre-LN, gain-controlled"]
    assert "values" in ax.get_legend().get_title().get_text()  # the value-bias choice is stated
    fig.savefig(tmp_path / "ln.png", dpi=100)
    assert_nontrivial_png(tmp_path / "ln.png")


def test_make_theory_figures_quick(tmp_path):
    written = make_theory_figures(tmp_path / "figs", quick=True)
    names = {p.name for p in written}
    assert names == {
        "fig1c_theory_bert_L60.png", "fig1c_theory_bert_L60.npz", "fig1c_theory_bert_L60.json",
        "fig2_theory_attention_phase.png", "fig2_theory_attention_phase.npz",
        "fig4_theory_layernorm_placement.png", "fig4_theory_layernorm_placement.json",
        "fig7_theory_spectrum_radius.png", "fig7_theory_spectrum_radius.json",
        "fig9_theory_edge_of_chaos.png", "fig9_theory_edge_of_chaos.json",
    }
    for path in written:
        assert path.exists() and path.stat().st_size > 0
        if path.suffix == ".png":
            assert_nontrivial_png(path)
    summary = json.loads((tmp_path / "figs" / "fig1c_theory_bert_L60.json").read_text())
    assert summary["settings"]["depth"] == 60 and len(summary["betas"]) == 60 and len(summary["alphas"]) == 60
    with np.load(tmp_path / "figs" / "fig2_theory_attention_phase.npz") as data:
        assert data["output_cosine"].shape == (80, 80)
    ln = json.loads((tmp_path / "figs" / "fig4_theory_layernorm_placement.json").read_text())
    assert len(ln["rho"]["post-LN"]) == 101
    with pytest.raises(ValueError, match="^only: unknown figure '99'"):
        make_theory_figures(tmp_path / "figs", quick=True, only="99")


@pytest.mark.parametrize("call, name", [
    (lambda: attention_phase_data(betas=[]), "betas"),
    (lambda: attention_phase_data(betas=[0.0, 1.0]), "betas"),
    (lambda: attention_phase_data(input_cosines=[1.5]), "input_cosines"),
    (lambda: attention_phase_data(sigma_v2=-1.0), "sigma_v2"),
    (lambda: attention_phase_data(q=0.0), "q"),
    (lambda: layernorm_placement_data(LAYERNORM_REFERENCE_RUN.replace(depth=0)), "depth"),
    (lambda: layernorm_placement_data(LAYERNORM_REFERENCE_RUN.replace(beta=0.0)), "beta"),
    (lambda: layernorm_placement_data(LAYERNORM_REFERENCE_RUN.replace(rho0=1.5)), "rho0"),
    (lambda: layernorm_placement_data(LAYERNORM_REFERENCE_RUN.replace(
        arch=LAYERNORM_REFERENCE_RUN.arch.replace(activation="tanh"))), "activation"),
    (lambda: layernorm_placement_data(LAYERNORM_REFERENCE_RUN.replace(beta=[0.1, 0.2])), "beta"),
    (lambda: layernorm_placement_data(LAYERNORM_REFERENCE_RUN, sigma_bv2=-1.0), "sigma_bv2"),
    (lambda: layernorm_placement_data(Architecture()), "run"),
])
def test_bad_figure_inputs(call, name):
    with pytest.raises(ValueError, match=name):
        call()
