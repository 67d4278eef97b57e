"""The cross-overlap of two attention rows at finite T (docs/theory.md section 3.4)."""
import math

import numpy as np
import pytest

from remprop.theory import cross_overlap, participation_ratio, softmax_attention_map
from remprop.theory.rem import cross_overlap_table
from remprop.theory.rem.cross_overlap import _lookup_many, cross_moment, cross_ratio


def _monte_carlo(x, rho, T, n, seed):
    """Mean and standard error of sum_k a_ik a_lk for T keys with energies of correlation rho."""
    rng = np.random.default_rng(seed)
    sigma = x * math.sqrt(math.log(T))
    w, h1, h2 = (rng.standard_normal((n, T)) for _ in range(3))
    rows = []
    for h in (h1, h2):
        g = sigma * (math.sqrt(rho) * w + math.sqrt(1.0 - rho) * h)
        a = np.exp(g - g.max(axis=1, keepdims=True))
        rows.append(a / a.sum(axis=1, keepdims=True))
    sample = (rows[0] * rows[1]).sum(axis=1)
    return sample.mean(), sample.std(ddof=1) / math.sqrt(n)


@pytest.mark.parametrize("x, rho, T", [(1.0, 0.5, 16), (1.5, 0.3, 64), (0.85, 0.5, 512), (2.0, 0.8, 128)])
def test_quadrature_matches_monte_carlo(x, rho, T):
    exact = cross_moment(x, rho, T)
    mean, stderr = _monte_carlo(x, rho, T, n=20000, seed=1)
    # 4 standard errors: a false alarm has probability 6e-5 per case
    assert abs(exact - mean) < 4 * stderr
    assert exact > 1.5 / T  # well above the independent-rows value


def test_limits_and_convergence():
    T, x = 128, 1.7
    y2 = participation_ratio(x, 1.0, 0.0, seq_len=T)
    assert cross_moment(x, 0.0, T) == 1.0 / T
    assert cross_moment(x, 1.0 - 1e-12, T) == pytest.approx(y2, rel=1e-5)  # rho -> 1: one row
    assert T * cross_moment(x, 1e-8, T) == pytest.approx(1.0, rel=1e-6)
    # small energies: C - 1/T = rho (Y2 - 1/T) + O(sigma^4); at x = 0.05 (sigma^2 = 0.012)
    # the ratio is C - 1/T ~ 4e-5 over C ~ 8e-3, so the quadrature's 1e-6 relative error
    # allows ~2e-4, the fourth-order term ~sigma^2 ~ 1e-2 relative
    assert cross_ratio(0.05, 0.4, T) == pytest.approx(0.4, abs=5e-3)
    for rho in (0.3, 0.9):
        value = cross_moment(x, rho, T)
        assert cross_moment(x, rho, T, refine=2) == pytest.approx(value, rel=1e-6)


def test_table_interpolates_the_quadrature():
    T = 16
    table = cross_overlap_table(T)
    rng = np.random.default_rng(0)
    for _ in range(6):
        x, rho = rng.uniform(0.1, 6.0), rng.uniform(0.05, 0.95)
        y2 = participation_ratio(x, 1.0, 0.0, seq_len=T)
        assert abs(table(x, rho) - cross_moment(x, rho, T)) <= 2e-3 * (y2 - 1.0 / T)


def test_public_function_and_map():
    T = 64
    c = cross_overlap(1.2, 1.0, [0.0, 0.5], seq_len=T)
    assert c[0] == pytest.approx(1.0 / T) and c[1] > 2.0 / T
    assert cross_overlap(1.2, 1.0, 0.5) == 0.0
    q_a, p_a = softmax_attention_map(1.2, q=1.0, p=0.5, sigma_v2=1.0, sigma_b2=0.0, seq_len=T)
    assert p_a == pytest.approx(0.5 + 0.5 * c[1], rel=1e-4)
    with pytest.raises(ValueError, match="method"):
        cross_overlap(1.0, 1.0, 0.5, seq_len=T, method="bad")


def _lagrange_reference(table, x, rho):
    """r of the tensor-product cubic through the 4 nodes around (x, rho), from the nodes."""
    def weights(t):  # nodes -1, 0, 1, 2
        return np.array([-t * (t - 1) * (t - 2) / 6, (t + 1) * (t - 1) * (t - 2) / 2,
                         -(t + 1) * t * (t - 2) / 2, (t + 1) * t * (t - 1) / 6])

    def stencil(position, n):
        first = min(max(min(int(position), n - 2) - 1, 0), n - 4)
        return first, position - first - 1.0

    n_x, n_xi = table.ratio.shape
    x_s = table.packed[4]
    du = table.x_nodes[-1] / (table.x_nodes[-1] + x_s) / (n_x - 1)
    ix, tx = stencil(min(x / (x + x_s) / du, n_x - 1.0), n_x)
    iy, ty = stencil(math.sqrt(1.0 - rho) * (n_xi - 1), n_xi)
    return weights(tx) @ table.ratio[ix:ix + 4, iy:iy + 4] @ weights(ty)


def test_packed_coefficients_are_the_cubic_through_the_nodes():
    """The kernels' per-cell coefficients give the node values and the 4-point Lagrange cubic."""
    T = 64
    table = cross_overlap_table(T)
    y2 = 0.5  # C = 1/T + r (y2 - 1/T): r back from C

    def ratio(x, rho):
        x, rho = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(rho, dtype=float))
        c = _lookup_many(table.packed, x.ravel(), rho.ravel(), np.full(x.size, y2)).reshape(x.shape)
        return (c - 1.0 / T) / (y2 - 1.0 / T)

    x_nodes, xi_nodes = np.meshgrid(table.x_nodes, table.xi_nodes, indexing="ij")
    # rounding only: r = O(1), cancellation in 1/T + r(y2 - 1/T) and back costs a few ulps
    np.testing.assert_allclose(ratio(x_nodes, 1.0 - xi_nodes ** 2), table.ratio, rtol=0, atol=1e-13)
    rng = np.random.default_rng(3)
    for x, rho in zip(rng.uniform(0.0, 25.0, 200), rng.uniform(0.0, 1.0, 200)):
        assert ratio(x, rho) == pytest.approx(_lagrange_reference(table, x, rho), abs=1e-13)
    # beyond the table: held at CROSS_X_MAX (also for x = inf); rho < 0: r = rho
    assert ratio(np.inf, 0.3) == pytest.approx(ratio(table.x_nodes[-1], 0.3), abs=1e-13)
    assert ratio(1.0, -0.01) == pytest.approx(-0.01, abs=1e-13)


def test_branch_free_lookup_selects_each_law_on_its_side():
    """The lookup computes both laws and selects one (so that the kernels' cell loop vectorises):
    below rho = 0 it is the linear law ``1/T + rho (Y2 - 1/T)`` exactly, above it the cubic (equal
    to the node values at the nodes), and a NaN cosine gives NaN, not a number from a clamped cell."""
    T = 64
    table = cross_overlap_table(T)
    y2 = 0.3
    rho = np.array([-1.0 / (T - 1), -1e-3, 0.0, 1e-12, 0.5, 1.0, np.nan])
    x = np.full(rho.shape, 1.5)
    c = _lookup_many(table.packed, x, rho, np.full(rho.shape, y2))
    linear = 1.0 / T + rho[:3] * (y2 - 1.0 / T)
    np.testing.assert_array_equal(c[:3], linear)
    # rho = 1 is the xi = 0 node column, where r = 1: C = Y2 (to rounding of 1/T + (Y2 - 1/T))
    assert c[5] == pytest.approx(y2, abs=1e-15)
    assert 1.0 / T < c[3] <= y2 + 1e-15 and 1.0 / T < c[4] < y2
    assert math.isnan(c[6])
    # x beyond the table and x = NaN (read at the first node) stay finite for a finite rho
    far = _lookup_many(table.packed, np.array([1e3, np.inf, np.nan]), np.full(3, 0.5), np.full(3, y2))
    assert np.isfinite(far).all()
