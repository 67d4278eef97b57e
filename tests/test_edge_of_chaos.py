"""Edge of chaos: chi_1, the order-to-chaos boundary, and residual MLP blocks with LayerNorm.

Independent references: scipy quad + brentq for the length fixed point and the boundary,
the erf closed forms, finite differences of the maps (chi_1 is a slope), and iterating
the component maps over 200 layers.
"""
import math

import numpy as np
import pytest
from scipy import integrate, optimize

from remprop.theory import activation_moments
from remprop.theory import components as C
from remprop.theory import edge_of_chaos as E


def gauss(f, q):
    """E[f(sqrt(q) z)] by adaptive quadrature (independent of the engine's rules)."""
    s = math.sqrt(q)
    return integrate.quad(lambda z: f(s * z) * math.exp(-0.5 * z * z) / math.sqrt(2 * math.pi),
                          -12, 12, epsabs=1e-14, epsrel=1e-13, limit=200)[0]


def scipy_fixed_point(sigma_w2, sigma_b2, f):
    return optimize.brentq(lambda q: sigma_w2 * gauss(lambda x: f(x) ** 2, q) + sigma_b2 - q,
                           1e-12, 50.0, xtol=1e-15, rtol=1e-14)


def scipy_chi_1(sigma_w2, sigma_b2, f, df):
    q = scipy_fixed_point(sigma_w2, sigma_b2, f)
    return sigma_w2 * gauss(lambda x: df(x) ** 2, q)


def dtanh(x):
    return 1.0 - math.tanh(x) ** 2


@pytest.mark.parametrize("sigma_w2, sigma_b2", [(0.8, 0.01), (1.76, 0.05), (3.0, 0.3)])
def test_fixed_point_and_chi_1_against_scipy(sigma_w2, sigma_b2):
    assert E.length_fixed_point(sigma_w2, sigma_b2) == pytest.approx(
        scipy_fixed_point(sigma_w2, sigma_b2, math.tanh), rel=1e-9)
    assert E.chi_1(sigma_w2, sigma_b2) == pytest.approx(scipy_chi_1(sigma_w2, sigma_b2, math.tanh, dtanh),
                                                        rel=1e-9)


@pytest.mark.parametrize("sigma_b2", [0.01, 0.05, 0.3])
def test_chaos_boundary_against_scipy_root(sigma_b2):
    # chi_1(sigma_w2) = 1 solved by brentq on the scipy chi_1; the engine inverts the
    # exact q* parametrisation instead: two different routes to the same boundary.
    expected = optimize.brentq(lambda w: scipy_chi_1(w, sigma_b2, math.tanh, dtanh) - 1.0, 1.0, 5.0,
                               xtol=1e-12)
    assert E.chaos_boundary(sigma_b2) == pytest.approx(expected, rel=1e-8)


def test_tanh_boundary_starts_at_one_and_rises():
    sigma_b2 = np.array([0.0, 1e-3, 0.01, 0.05, 0.3, 1.0])
    edge = E.chaos_boundary(sigma_b2)
    assert edge[0] == pytest.approx(1.0, abs=1e-9)  # q* = 0, chi_1 = sigma_w2 tanh'(0)^2
    assert np.all(np.diff(edge) > 0)
    np.testing.assert_allclose(E.chi_1(edge[1:], sigma_b2[1:]), 1.0, atol=1e-9)


def test_erf_chi_1_from_closed_forms():
    # E[erf(u)^2] = (2/pi) asin(2q/(1+2q)), E[erf'(u)^2] = (4/pi)/sqrt(1+4q)
    sigma_w2, sigma_b2 = 2.0, 0.1
    q = optimize.brentq(lambda q: sigma_w2 * (2 / math.pi) * math.asin(2 * q / (1 + 2 * q)) + sigma_b2 - q,
                        1e-9, 50.0, xtol=1e-15)
    assert E.chi_1(sigma_w2, sigma_b2, "erf") == pytest.approx(sigma_w2 * (4 / math.pi) / math.sqrt(1 + 4 * q),
                                                               rel=1e-10)


@pytest.mark.parametrize("sigma_w2", [1.2, 2.5])
def test_chi_1_is_the_slope_of_the_correlation_map(sigma_w2):
    # c(1) = 1 and c'(1) = chi_1 (Price): one-sided difference, error O(eps) * c''
    eps = 1e-5
    assert E.correlation_map(1.0, sigma_w2, 0.05) == pytest.approx(1.0, abs=1e-12)
    slope = (1.0 - E.correlation_map(1.0 - eps, sigma_w2, 0.05)) / eps
    assert slope == pytest.approx(E.chi_1(sigma_w2, 0.05), rel=1e-3)


def test_deep_network_phases():
    # 200 layers from c0 = 0.2 at sigma_b2 = 0.05 (edge at sigma_w2 = 1.76):
    # ordered -> c -> 1; chaotic -> c* < 1, a stable fixed point.
    edge = E.chaos_boundary(0.05)
    traj = E.correlation_trajectory(0.2, 200, [0.7 * edge, 1.5 * edge], 0.05)
    assert traj[0, -1] > 1 - 1e-6
    c_star = traj[1, -1]
    assert c_star < 0.9
    assert E.correlation_map(c_star, 1.5 * edge, 0.05) == pytest.approx(c_star, abs=1e-9)


def test_mlp_block_chi_is_the_slope_of_the_block_map():
    # x <- LN(alpha x + MLP(x)) on unit tokens: d rho'/d rho at rho = 1 equals
    # (chi D + alpha^2)/(D + alpha^2), D = sigma_w2 E[phi^2] + sigma_b2.
    sigma_w2, sigma_b2, alpha = 1.4, 0.05, 0.7
    block = C.serial(C.residual(alpha, C.mlp(sigma_w2, sigma_b2, "tanh")), C.layer_norm())
    q1 = sigma_w2 + sigma_b2
    d = sigma_w2 * activation_moments(q1, q1, "tanh")[0] + sigma_b2
    chi = E.mlp_block_chi(sigma_w2, sigma_b2)
    eps = 1e-5
    q, p = block(1.0, 1.0 - eps)
    slope = (1.0 - p / q) / eps
    assert slope == pytest.approx((chi * d + alpha ** 2) / (d + alpha ** 2), rel=1e-3)


def test_residual_tanh_stack_on_both_sides_of_its_edge():
    sigma_b2 = 0.05
    edge = E.mlp_block_boundary(sigma_b2)
    assert E.mlp_block_chi(edge, sigma_b2) == pytest.approx(1.0, abs=1e-9)
    finals = []
    for sigma_w2 in (0.6 * edge, 2.0 * edge):
        block = C.serial(C.residual(1.0, C.mlp(sigma_w2, sigma_b2, "tanh")), C.layer_norm())
        q, p = 1.0, 0.2
        for _ in range(200):
            q, p = block(q, p)
        finals.append(p / q)
    assert finals[0] > 0.99  # ordered: rank collapse, slowly
    assert finals[1] < 0.8  # chaotic: tokens stay apart


def test_relu_blocks_are_never_chaotic():
    sigma_w2 = np.linspace(0.05, 5.0, 40)
    for sigma_b2 in (0.0, 1e-3, 0.1):
        assert np.all(E.mlp_block_chi(sigma_w2, sigma_b2, "relu") <= 1.0 + 1e-12)
    assert np.isnan(E.mlp_block_boundary(0.1, "relu")) and np.isnan(E.mlp_block_boundary(0.0, "tanh"))


@pytest.mark.parametrize("call, name", [
    (lambda: E.chi_1(0.0, 0.1), "sigma_w2"),
    (lambda: E.chi_1(1.0, -0.1), "sigma_b2"),
    (lambda: E.chaos_boundary(float("nan")), "sigma_b2"),
    (lambda: E.chaos_boundary(0.1, "swish"), "activation"),
    (lambda: E.correlation_map(1.5, 1.0, 0.1), "c"),
    (lambda: E.correlation_trajectory(0.2, 0, 1.0, 0.1), "depth"),
    (lambda: E.mlp_block_boundary(0.1, sigma_w2_max=-1.0), "sigma_w2_max"),
])
def test_bad_inputs_are_named(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_edge_of_chaos_figure_draws_the_simulation_over_the_theory():
    """One function draws Fig. 9: theory lines alone, or with simulated points (mean, std) over (b), (c)."""
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from remprop.diagrams import edge_of_chaos_data, edge_of_chaos_figure

    data = edge_of_chaos_data(depth=20)
    plain = edge_of_chaos_figure(data)
    factors = len(data["factors"])
    simulated = {f"{stack}_{kind}": np.full((factors, 21), 0.5)
                 for stack in ("block", "deep") for kind in ("mean", "std")}
    simulated.update(width=32, seq_len=8)
    drawn = edge_of_chaos_figure(data, simulated)
    for panel in (1, 2):
        assert not plain.axes[panel].containers
        assert len(drawn.axes[panel].containers) == factors  # one error-bar series per setting
        assert "simulation, $d = 32$" in drawn.axes[panel].get_legend().get_texts()[-1].get_text()
