"""Exact finite-T participation ratios (remprop.theory.rem) and their use in the maps.

Independent references: a one-dimensional quadrature at T = 2 (two keys: the weight of
the first is a logistic function of a Gaussian), direct Monte Carlo of T Gaussian
energies, the annealed law below beta_c/2, the T -> infinity law, and the step
refinement of the integrator itself.
"""
import math

import numpy as np
import pytest
from scipy import integrate
from scipy.special import expit

from remprop.theory import (
    Architecture,
    cross_overlap,
    final_state,
    gain_controlled_attention_map,
    participation_moment,
    participation_ratio,
    participation_table,
    propagate,
    softmax_attention_map,
)
from remprop.theory import kernels
from remprop.theory.rem import TABLE_TOLERANCE
from remprop.theory.rem import table as rem_table
from remprop.theory.rem.integral import row_moment
from remprop.theory.propagation import kernel_tree, pack_parameters

from kernel_checks import assert_propagate_matches_block


def exact(x, seq_len, order=2, refine=1):
    return row_moment(np.atleast_1d(np.asarray(x, dtype=float)), seq_len, (order,), refine)


def monte_carlo(x, seq_len, samples, order, rng):
    """Mean and standard error of sum_j a_j^k over ``samples`` rows of T N(0, x^2 log T) energies."""
    sigma = x * math.sqrt(math.log(seq_len))
    values = []
    for start in range(0, samples, 1000):
        g = rng.standard_normal((min(1000, samples - start), seq_len)) * sigma
        g -= g.max(axis=1, keepdims=True)
        a = np.exp(g)
        a /= a.sum(axis=1, keepdims=True)
        values.append((a ** order).sum(axis=1))
    values = np.concatenate(values)
    return values.mean(), values.std(ddof=1) / math.sqrt(values.size)


# --- exact values -----------------------------------------------------------------------
@pytest.mark.parametrize("seq_len", [2, 3, 64, 4096, 10**7])
@pytest.mark.parametrize("order", [2, 3])
def test_zero_temperature_spread_is_uniform(seq_len, order):
    # x = 0: every key has weight 1/T, so sum_j a_j^k = T^(1-k) exactly.
    assert exact(0.0, seq_len, order)[0] == pytest.approx(seq_len ** (1.0 - order), rel=1e-13)
    assert participation_moment(0.0, 1.0, 0.3, seq_len, order) == pytest.approx(
        seq_len ** (1.0 - order), rel=1e-13)


@pytest.mark.parametrize("order", [2, 3])
@pytest.mark.parametrize("x", [1e-3, 0.3, 1.0, 3.0, 10.0, 50.0])
def test_two_keys_against_one_dimensional_quadrature(x, order):
    # T = 2: a_1 = logistic(g_1 - g_2) with g_1 - g_2 ~ N(0, 2 v); quad to 1e-13.
    sd = math.sqrt(2.0 * x * x * math.log(2.0))
    value, err = integrate.quad(
        lambda z: (expit(sd * z) ** order + expit(-sd * z) ** order) * math.exp(-0.5 * z * z)
        / math.sqrt(2 * math.pi), -40, 40, points=[0.0], limit=500, epsabs=1e-15, epsrel=1e-13)
    assert err < 1e-12
    # both sides are accurate to ~1e-13; 1e-11 leaves room for the quad estimate
    assert exact(x, 2, order)[0] == pytest.approx(value, rel=1e-11)


def test_step_refinement_changes_nothing():
    # Dividing the tau and y steps by 3 changes Y_k by < 1e-11 relative: the trapezoid
    # sums have converged (geometric convergence for these analytic integrands).
    xs = np.array([0.0, 1e-3, 0.2, 0.7, 1.0, 1.41, 2.0, 5.0, 20.0, 50.0])
    for seq_len in (2, 64, 4096, 10**7):
        for order in (2, 3):
            a = exact(xs, seq_len, order)
            b = exact(xs, seq_len, order, refine=3)
            np.testing.assert_allclose(a, b, rtol=1e-11, atol=0)


@pytest.mark.parametrize("seq_len", [2, 512, 10**7])
def test_moments_are_ordered_probabilities_and_monotone_in_x(seq_len):
    xs = np.linspace(0.0, 50.0, 301)
    y2 = exact(xs, seq_len, 2)
    y3 = exact(xs, seq_len, 3)
    assert np.all(np.isfinite(y2)) and np.all(np.isfinite(y3))
    assert np.all(y2 >= 1.0 / seq_len * (1 - 1e-12)) and np.all(y2 < 1.0)
    # Jensen / Hoelder: sum a^3 <= (sum a^2)^2 / ... the simple bounds Y3 <= Y2 and Y3 >= Y2^2
    assert np.all(y3 <= y2 * (1 + 1e-12))
    assert np.all(y3 >= y2 ** 2 * (1 - 1e-9))
    assert np.all(np.diff(y2) > 0) and np.all(np.diff(y3) > 0)  # colder = more localised


# --- Monte Carlo --------------------------------------------------------------------------
MC_CASES = [(64, 0.3), (64, 1.5), (512, 1.0), (512, 1.5), (512, 4.0), (4096, 0.8), (4096, 2.5)]


@pytest.mark.parametrize("seq_len, x", MC_CASES)
def test_against_monte_carlo_of_gaussian_energies(seq_len, x):
    # 4000 rows per case: the estimate of Y_k has standard error se; |exact - MC| <= 4.5 se
    # (two-sided Gaussian tail 7e-6 per comparison, 14 comparisons: false alarm < 1e-4).
    rng = np.random.default_rng(seq_len * 1000 + int(10 * x))
    samples = 4000 if seq_len < 4096 else 2000
    for order in (2, 3):
        mean, se = monte_carlo(x, seq_len, samples, order, rng)
        assert abs(exact(x, seq_len, order)[0] - mean) <= 4.5 * se, (order, mean, se)


def test_measured_value_at_512_and_beta_1_5():
    # docs/theory.md section 3: at T = 512, beta = 1.5, p = 0 the measured Y2 is ~0.28 (two
    # digits) while the asymptotic law gives 1 - sqrt(2)/1.5 = 0.057.
    y2 = participation_ratio(1.5, 1.0, 0.0, seq_len=512)
    assert abs(y2 - 0.28) <= 0.005
    assert participation_ratio(1.5, 1.0, 0.0) == pytest.approx(1 - math.sqrt(2) / 1.5)


# --- limits -------------------------------------------------------------------------------
@pytest.mark.parametrize("x", [0.2, 0.4])
@pytest.mark.parametrize("seq_len", [10**3, 10**5, 10**7])
def test_annealed_law_below_half_critical(x, seq_len):
    # Below beta_c/2 (x < 1/sqrt 2) Z self-averages: Y2 = E[e^{2g}] / (T E[e^g]^2) = e^v / T
    # = T^-(1 - 2 beta^2/beta_c^2) times 1 + first + ..., where the delta-method expansion
    # of E[e^{2g_1} / Z^2] gives first = (3 e^v - 2 e^{2v} - 1) / T = O(T^-(1 - 2x^2)); the
    # next terms are smaller by a further power of T, so the remainder is < |first| / 10 here.
    v = x * x * math.log(seq_len)
    ratio = exact(x, seq_len)[0] / (seq_len ** -(1 - x * x))
    first = (3 * math.exp(v) - 2 * math.exp(2 * v) - 1) / seq_len
    assert abs(ratio - 1 - first) <= 0.1 * abs(first)
    assert abs(ratio - 1) <= 2 * seq_len ** -(1 - 2 * x * x)


@pytest.mark.parametrize("x", [0.5, 1.0, 2.0, 3.0, 6.0])
def test_converges_to_the_asymptotic_law(x):
    # T -> infinity: Y2 -> max(0, 1 - sqrt(2)/x) (Derrida 1981), slowly (the finite-T
    # shift of the REM freezing point is O(log log T / log T)). The error shrinks
    # monotonically along T = 1e2 ... 1e60 and is below 0.015 at T = 1e60.
    limit = max(0.0, 1 - math.sqrt(2) / x)
    errors = [abs(exact(x, seq_len)[0] - limit) for seq_len in (10**2, 10**4, 10**7, 10**20, 10**60)]
    assert all(b < a for a, b in zip(errors, errors[1:])), errors
    assert errors[-1] < 0.015


# --- tables -------------------------------------------------------------------------------
@pytest.mark.parametrize("seq_len, order", [(2, 2), (512, 3), (4096, 2), (10**7, 2), (10**7, 3)])
def test_table_interpolation_error_is_within_the_guarantee(seq_len, order):
    # A cubic spline's error peaks between nodes: check every midpoint (in u) against the
    # exact integral; the stated guarantee is TABLE_TOLERANCE relative.
    table = participation_table(seq_len, order)
    u = table.x_nodes / (table.x_nodes + table.x_scale)
    um = 0.5 * (u[1:] + u[:-1])
    mid = table.x_scale * um / (1 - um)
    err = np.abs(table(mid) / exact(mid, seq_len, order) - 1)
    assert err.max() <= TABLE_TOLERANCE
    np.testing.assert_allclose(table(table.x_nodes), table.values, rtol=1e-13)


def test_table_is_cached_and_extends_beyond_x_max():
    table = participation_table(512)
    assert participation_table(512.0) is table
    xs = np.array([50.0, 60.0, 100.0, 400.0])
    beyond = table(xs)
    assert np.all(np.diff(beyond) > 0) and np.all(beyond < 1)
    # 1 - Y2 ~ c / x for large x: the continuation is within 1e-3 of the exact value
    np.testing.assert_allclose(beyond, exact(xs, 512), atol=1e-3)


def test_table_method_matches_exact_method():
    beta = np.linspace(0.1, 6.0, 25)
    a = participation_moment(beta, 1.0, 0.4, seq_len=1000, method="table")
    b = participation_moment(beta, 1.0, 0.4, seq_len=1000, method="exact")
    np.testing.assert_allclose(a, b, rtol=TABLE_TOLERANCE)


# --- inputs -------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [1, 0, -5, 2.5, "512", True, None, [512]])
def test_bad_seq_len_is_named(bad):
    calls = [lambda: participation_moment(1.0, 1.0, 0.0, seq_len=bad),
             lambda: participation_table(bad)]
    if bad is not None:  # None means "T -> infinity" where it is allowed
        calls += [lambda: participation_ratio(1.0, 1.0, 0.0, seq_len=bad),
                  lambda: Architecture(seq_len=bad),
                  lambda: softmax_attention_map(1.0, q=1.0, p=0.0, seq_len=bad)]
    for call in calls:
        with pytest.raises(ValueError, match="seq_len"):
            call()


@pytest.mark.parametrize("kwargs, name", [({"order": 0}, "order"), ({"order": 2.5}, "order"),
                                          ({"method": "spline"}, "method"),
                                          ({"beta": -1.0}, "beta"), ({"p": 2.0}, "p")])
def test_bad_moment_arguments_are_named(kwargs, name):
    arguments = {"beta": 1.0, "q": 1.0, "p": 0.0, "seq_len": 64, **kwargs}
    with pytest.raises(ValueError, match=name):
        participation_moment(**arguments)


# --- maps and kernels at finite T ------------------------------------------------------
def test_attention_maps_use_the_finite_participation_ratio():
    q, p, beta, T = 1.0, 0.3, 1.2, 256
    y2 = participation_ratio(beta, q, p, seq_len=T)
    q_a, p_a = softmax_attention_map(beta, q=q, p=p, sigma_v2=0.5, sigma_b2=0.01, seq_len=T)
    assert q_a == pytest.approx(0.5 * (p + (q - p) * y2) + 0.01, rel=1e-14)
    # two rows overlap by the finite-T cross-overlap C (tabulated; 1/T only for independent rows)
    cross = cross_overlap(beta, q, p, T, method="table")
    assert 1 / T < cross < y2
    assert p_a == pytest.approx(0.5 * (p + (q - p) * cross) + 0.01, rel=1e-12)
    q_g, p_g = gain_controlled_attention_map(beta, q=q, p=p, sigma_v2=0.5, sigma_b2=0.01, seq_len=T)
    assert q_g == pytest.approx(0.5 * (q - p) * (y2 - 1 / T) + 0.01, rel=1e-14)
    assert p_g == pytest.approx(0.01)


@pytest.mark.parametrize("norm", ["post", "pre", "none"])
@pytest.mark.parametrize("attention", ["softmax", "gain-controlled"])
def test_kernels_match_the_component_composition_at_finite_seq_len(norm, attention):
    # The depth kernels and Architecture.block evaluate the same tabulated maps.
    arch = Architecture(norm=norm, attention=attention, seq_len=300, sigma_b2=0.01,
                        alpha_sa=0.8)
    betas = np.array([0.3, 1.0, 1.6, 3.0])
    traj = assert_propagate_matches_block(arch, betas, 12, rho0=0.2)
    end = final_state(arch, betas, 12, rho0=0.2)
    np.testing.assert_allclose(end["rho"], traj.rho[:, -1], rtol=1e-12)


def test_asymptotic_default_is_unchanged_and_finite_seq_len_differs():
    base = Architecture()
    assert base.seq_len is None and base.to_dict()["seq_len"] is None
    far = propagate(base.replace(seq_len=10**60), 0.8, 20).rho
    near = propagate(base.replace(seq_len=64), 0.8, 20).rho
    asym = propagate(base, 0.8, 20).rho
    assert np.max(np.abs(near - asym)) > 1e-3
    # beta = 0.8 < beta_c/2 ... beta_c: Y2 -> 0 only logarithmically slowly; at T = 1e60
    # the cosines are within 2e-3 of the T -> infinity ones.
    np.testing.assert_allclose(far, asym, atol=2e-3)


def test_minimum_residual_strength_depends_on_beta_only_at_finite_seq_len():
    # Asymptotic theory: Y2 = 0 below beta_c, so alpha* is the same for every beta < sqrt 2;
    # at finite T the attention output keeps a beta-dependent part (Y2 > 0).
    arch = Architecture()
    betas = np.array([0.3, 0.8, 1.2])

    def alpha_star(seq_len):
        _, _, rows = pack_parameters(arch.replace(alpha_sa=0.0), betas)
        return kernels.min_alpha_bisection(kernel_tree(arch.replace(seq_len=seq_len)), rows(0, betas.size), 60,
                                           0.99, 10.0, 1e-6, seq_len=seq_len)

    asym = alpha_star(None)
    finite = alpha_star(512)
    assert np.ptp(asym) < 1e-5
    assert np.all(np.diff(finite) < -1e-3)  # colder attention keeps tokens apart: less skip needed
    # near beta_c the finite-T rows are far from uniform (Y2 = 0.17 at T = 512, beta = 1.2)
    assert finite[-1] < asym[-1] - 0.01


def test_tables_are_saved_and_reloaded_from_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("REMPROP_CACHE_DIR", str(tmp_path))
    rem_table._cached_table.cache_clear()
    try:
        built = participation_table(97)
        files = list(tmp_path.glob("participation-T97-k2-*.npy"))
        assert len(files) == 1
        rem_table._cached_table.cache_clear()
        loaded = participation_table(97)
        assert loaded is not built
        np.testing.assert_array_equal(loaded.packed, built.packed)
        np.testing.assert_array_equal(loaded.x_nodes, built.x_nodes)
        np.testing.assert_array_equal(loaded(np.array([0.3, 2.0, 70.0])), built(np.array([0.3, 2.0, 70.0])))
        # a damaged file is ignored and rebuilt
        files[0].write_bytes(b"not a table")
        rem_table._cached_table.cache_clear()
        np.testing.assert_array_equal(participation_table(97).packed, built.packed)
    finally:
        rem_table._cached_table.cache_clear()
