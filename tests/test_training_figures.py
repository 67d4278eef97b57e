"""The paper's training figures (Figs. 1(f), 3, 6, 8): their data at tiny sizes, beta_c from the
theory's one home, cached runs reused, and the drawings (remprop.validation.training.paper_runs,
remprop.diagrams.training_paper_figures)."""
import math

import matplotlib

matplotlib.use("Agg")  # the test process only

import numpy as np  # noqa: E402
import pytest  # noqa: E402

pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")
pytest.importorskip("tokenizers", reason="the training corpus needs Hugging Face tokenizers")

from test_all_figures import TINY  # noqa: E402

from remprop.diagrams.training_paper_figures import beta_sweep_figure, loss_curves_figure  # noqa: E402
from remprop.theory import Architecture, propagate  # noqa: E402
from remprop.validation.backend import torch_threads  # noqa: E402
from remprop.validation.training.paper_runs import (RunCache, beta_sweep_3, learning_rates_8,  # noqa: E402
                                                    loss_curves_1f, run_key)

#: Two seeds, so that the spreads are real ones (TINY of the figure pipeline trains one).
SIZES = TINY.replace(train_seeds=2)


@pytest.fixture(autouse=True)
def one_thread():
    with torch_threads(1):
        yield


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    folder = tmp_path_factory.mktemp("runs")
    with torch_threads(1):
        cache = RunCache(folder)
        return folder, cache, beta_sweep_3(SIZES, cache, device="cpu")


def assert_finite(values):
    values = np.asarray(values, dtype=float)
    assert values.size and np.all(np.isfinite(values))


def test_beta_sweep_has_one_loss_per_beta_and_seed(sweep):
    _, cache, data = sweep
    count, seeds = int(SIZES.betas_3[2]), SIZES.train_seeds
    assert data["betas"].shape == (count,) and data["final_test_loss"].shape == (count, seeds)
    assert data["final_mean"].shape == data["final_std"].shape == (count,) and len(data["theory_phase"]) == count
    assert_finite(data["final_test_loss"])
    assert np.allclose(data["final_mean"], data["final_test_loss"].mean(axis=1))
    assert np.allclose(data["final_std"], data["final_test_loss"].std(axis=1, ddof=1))
    # seeds differ in their initialisation and data order: a zero spread would mean one run counted twice
    assert np.all(data["final_std"] > 0)
    assert cache.trained == count * seeds and cache.reused == 0
    assert data["runs_trained"] == count * seeds


def test_beta_critical_marker_is_the_architectures(sweep):
    _, _, data = sweep
    arch = Architecture(heads=1, seq_len=SIZES.train_seq_len)
    trajectory = propagate(arch, 0.5, 1, q0=1.0, rho0=data["input_rho"])
    assert data["beta_critical"] == arch.beta_critical(per_layer=trajectory.beta_critical)
    # post-LN, q = 1 at the first attention: beta_c = sqrt(2 / (1 - rho0)) (docs/theory.md section 3)
    assert math.isclose(data["beta_critical"], math.sqrt(2.0 / (1.0 - data["input_rho"])), rel_tol=1e-9)
    # the theory's phase of each beta follows from the same beta_c
    for beta, phase in zip(data["betas"], data["theory_phase"]):
        assert (phase == "entropy-collapse") == (beta > data["beta_critical"])


def test_a_second_call_reuses_the_cached_runs(sweep):
    folder, _, first = sweep
    again = RunCache(folder)
    second = beta_sweep_3(SIZES, again, device="cpu")
    assert again.trained == 0 and again.reused == int(SIZES.betas_3[2]) * SIZES.train_seeds
    assert np.array_equal(second["final_test_loss"], first["final_test_loss"])
    # another size is another run: it is trained, not confused with the cached one
    other = RunCache(folder)
    beta_sweep_3(SIZES.replace(betas_3=(0.5, 0.5, 1), train_seeds=1, train_steps=2), other, device="cpu")
    assert other.trained == 1 and other.reused == 0


def test_run_key_tells_settings_apart():
    from remprop.validation.training.paper_runs import base_config

    config = base_config(SIZES, "cpu")
    assert run_key(config) == run_key(base_config(SIZES, "cpu"))
    assert len({run_key(config), run_key(config.replace(seed=1)), run_key(config.replace(lr=1e-3))}) == 3


def test_loss_curves_have_one_curve_per_setting_and_the_theory_phase(tmp_path):
    data = loss_curves_1f(SIZES.replace(train_seeds=1), RunCache(tmp_path), device="cpu")
    settings = data["settings"]
    assert [s["label"].split(":")[0] for s in settings] == ["trainable", "rank collapse", "entropy collapse"]
    for setting in settings:
        steps = np.asarray(setting["eval_steps"])
        assert steps[0] == 0 and steps[-1] == SIZES.train_steps
        assert setting["test_loss_mean"].shape == setting["test_loss_std"].shape == steps.shape
        assert_finite(setting["test_loss_mean"])
        assert setting["final_mean"] == setting["test_loss_mean"][-1]
    # beta = 4 lies above beta_c = sqrt(2 / (1 - rho0)) < 2 for any input cosine below 1/2
    assert settings[2]["beta"] == 4.0 and settings[2]["theory_phase"] == "entropy-collapse"
    assert settings[0]["theory_phase"] == "trainable"
    figure = loss_curves_figure(data)
    curves, finals = figure.axes
    assert len(curves.get_legend().get_texts()) == len(settings) + 1  # + the unigram baseline
    assert [t.get_text() for t in finals.get_xticklabels()] == [s["label"] for s in settings]


def test_learning_rate_gap_is_collapsed_minus_reference(tmp_path):
    sizes = SIZES.replace(train_seeds=1, lrs_8=(3e-3,))
    data = learning_rates_8(sizes, RunCache(tmp_path), device="cpu")
    collapsed, reference = data["settings"]
    assert collapsed["beta"] == sizes.beta_8 and reference["beta"] == 0.5
    assert data["gap"][0] == pytest.approx(collapsed["final_mean"] - reference["final_mean"])


def test_beta_sweep_figure_marks_beta_critical(sweep):
    _, _, data = sweep
    ax = beta_sweep_figure(data).axes[0]
    verticals = [line for line in ax.get_lines() if len(set(line.get_xdata())) == 1 and len(line.get_xdata()) == 2]
    assert [line.get_xdata()[0] for line in verticals] == [data["beta_critical"]]
