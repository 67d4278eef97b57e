"""One attention layer at finite width: the keys' geometry, the query norms, the measured cosine.

Checks of remprop.theory.rem.finite_width (docs/theory.md section 18) three ways: limits
(x -> 0, d -> infinity, quadrature step), Monte Carlo of the same expectations, and the
simulated torch attention layer of remprop.validation.
"""
import math

import numpy as np
import pytest

from remprop.theory import participation_ratio, softmax_attention_map
from remprop.theory.rem.finite_width import (
    _TAU_BELOW,
    ENERGY_X_MAX,
    _energy_square_at,
    _kernels,
    _lattice_sums,
    CosineSampling,
    attention_mean_cosine,
    finite_width_attention_map,
    gibbs_energy_square,
    key_dimension,
    query_norm_variance,
)


def _softmax_rows(g):
    a = np.exp(g - g.max(axis=-1, keepdims=True))
    return a / a.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("x", [0.5, 1.5, 3.0])
def test_energy_square_matches_monte_carlo(x):
    """D = E[(<g> - g_bar)^2] / v against 40000 sampled rows of T = 16 i.i.d. energies.

    Tolerance: 4 standard errors of the sample mean (a false failure once in ~16000 runs).
    """
    seq_len, n = 16, 40_000
    v = x * x * math.log(seq_len)
    g = np.random.default_rng(11).standard_normal((n, seq_len)) * math.sqrt(v)
    a = _softmax_rows(g)
    samples = ((a * g).sum(1) - g.mean(1)) ** 2 / v
    exact = gibbs_energy_square(x, 1.0, 0.0, seq_len=seq_len)
    assert abs(samples.mean() - exact) < 4 * samples.std(ddof=1) / math.sqrt(n)


def test_lattice_sums_are_the_pairwise_sums():
    """The correlations of ``_lattice_sums`` against the plain double loop over (tau, g) pairs on
    the same lattice (the quadrature's sums before the speed-up): equal to rounding (1e-12 relative
    to the largest term; the sums add at most 40 positive terms of double precision)."""
    step, n_g, n_tau = 0.25, 40, 70
    rng = np.random.default_rng(5)
    g = -3.0 + step * np.arange(n_g)
    taus = g[0] - _TAU_BELOW + step * np.arange(n_tau)
    weights = {"a": (0, rng.uniform(0.1, 1.0, n_g)), "b": (1, rng.uniform(0.1, 1.0, n_g)),
               "c": (2, rng.uniform(0.1, 1.0, n_g))}
    sums = _lattice_sums(weights, n_g, n_tau, step)
    kernels = _kernels(g[None, :] - taus[:, None])
    for name, (k, w) in weights.items():
        pairwise = np.array([sum(kernels[k][a, i] * w[i] for i in range(n_g)) for a in range(n_tau)])
        assert sums[name].shape == (n_tau,)
        assert np.max(np.abs(sums[name] - pairwise)) <= 1e-12 * np.max(np.abs(pairwise)), name


def test_energy_square_limits_and_numerics():
    # x -> 0: D = v (1 - 1/T^2) + O(v^2); v = 1e-6 log T, so relative 1e-4 is 100x the O(v) term
    for seq_len in (2, 64, 4096):
        v = 1e-6 * math.log(seq_len)
        assert gibbs_energy_square(1e-3, 1.0, 0.0, seq_len=seq_len) == pytest.approx(v * (1 - seq_len ** -2),
                                                                                     rel=1e-4)
    assert gibbs_energy_square(0.0, 1.0, 0.0, seq_len=32) == 0.0
    # the trapezoid rule: halving the step moves D by < 1e-9 relative
    for x, seq_len in ((0.7, 8), (2.0, 128), (6.0, 512)):
        assert _energy_square_at(x, seq_len, step=0.125) == pytest.approx(_energy_square_at(x, seq_len), rel=1e-9)
    # the table against the quadrature, between its nodes (1e-4 of D ~ 1-7 moves a map by < 1e-6 at d >= 100)
    xs = np.random.default_rng(2).uniform(0.0, ENERGY_X_MAX, 12)
    table = gibbs_energy_square(xs, 1.0, 0.0, seq_len=128, method="table")
    exact = gibbs_energy_square(xs, 1.0, 0.0, seq_len=128)
    assert np.max(np.abs(table - exact)) < 1e-4
    # frozen rows: D below 2 log T (the squared maximum of T Gaussians in units of v) and increasing in x
    d = gibbs_energy_square(np.array([2.0, 4.0, 8.0]), 1.0, 0.0, seq_len=128)
    assert np.all(np.diff(d) > 0) and d[-1] < 2 * math.log(128)


def test_key_geometry_identity_monte_carlo():
    """|sum_j (a_j - 1/T) z_j|^2 / d_k = (1 - 1/d_k)(Y2 - 1/T) + D / d_k for i.i.d. Gaussian keys.

    d_k = 15, T = 32 (T/d_k ~ 2: the correction is as large as Y2 - 1/T); 8000 rows with
    a query of norm sqrt(v); 4 standard errors.
    """
    seq_len, d_k, n, x = 32, 15, 8000, 1.0
    v = x * x * math.log(seq_len)
    rng = np.random.default_rng(5)
    z = rng.standard_normal((n, seq_len, d_k))
    w = rng.standard_normal((n, d_k))
    w *= math.sqrt(v) / np.linalg.norm(w, axis=1, keepdims=True)
    a = _softmax_rows(np.einsum("ntk,nk->nt", z, w))
    out = np.einsum("nt,ntk->nk", a - 1.0 / seq_len, z)
    samples = (out * out).sum(1) / d_k
    y2 = participation_ratio(x, 1.0, 0.0, seq_len=seq_len) - 1.0 / seq_len
    predicted = (1 - 1 / d_k) * y2 + gibbs_energy_square(x, 1.0, 0.0, seq_len=seq_len) / d_k
    se = samples.std(ddof=1) / math.sqrt(n)
    assert abs(samples.mean() - predicted) < 4 * se
    assert abs(samples.mean() - y2) > 10 * se  # the d -> infinity value is far outside


def test_width_limit_and_rate():
    """The map tends to the finite-T map as d -> infinity, the difference times d to a limit (rate 1/d)."""
    q, p, beta, seq_len = 1.0, np.array([0.1, 0.5]), np.array([0.6, 1.2, 3.0])[:, None], 128
    q0, p0 = softmax_attention_map(beta, q=q, p=p, sigma_v2=1.0, sigma_b2=0.0, seq_len=seq_len)
    scaled = []
    for width in (10 ** 4, 10 ** 5, 10 ** 6):
        qa, pa = finite_width_attention_map(beta, q=q, p=p, sigma_v2=1.0, sigma_b2=0.0, width=width, seq_len=seq_len)
        scaled.append((width * (qa - q0), width * (pa - p0)))
    for k in (0, 1):  # d (map - limit) = L + O(1/d): 10x steps shrink the change 10x
        first, second = np.abs(scaled[1][k] - scaled[0][k]), np.abs(scaled[2][k] - scaled[1][k])
        assert np.all(second <= 0.2 * first + 1e-6)
        assert np.all(np.abs(scaled[2][k]) < 50)
    assert np.all(scaled[2][0] > 0)  # wider keys' projection raises q_A at every beta


def test_mean_cosine_monte_carlo_and_limit():
    """The controlled mean against plain sampling of two rows (another seed), T = 16, d -> infinity.

    Tolerance: 4 standard errors of the difference of the two estimates.
    """
    seq_len, q, p, beta = 16, 1.0, 0.3, 1.5
    est, err = attention_mean_cosine(beta, q=q, p=p, sigma_v2=1.0, sigma_b2=0.0, seq_len=seq_len,
                                     sampling=CosineSampling(4096), return_error=True)
    rng = np.random.default_rng(99)
    n, rho = 40_000, p / q
    v = beta ** 2 * q * (q - p) * math.log(seq_len)
    shared = rng.standard_normal((n, seq_len))
    g_i = math.sqrt(v) * (math.sqrt(rho) * shared + math.sqrt(1 - rho) * rng.standard_normal((n, seq_len)))
    g_k = math.sqrt(v) * (math.sqrt(rho) * shared + math.sqrt(1 - rho) * rng.standard_normal((n, seq_len)))
    a_i, a_k = _softmax_rows(g_i), _softmax_rows(g_k)
    num = p + (q - p) * (a_i * a_k).sum(1)
    cos = num / np.sqrt((p + (q - p) * (a_i ** 2).sum(1)) * (p + (q - p) * (a_k ** 2).sum(1)))
    assert abs(est - cos.mean()) < 4 * math.hypot(err, cos.std(ddof=1) / math.sqrt(n))
    # the ratio of the means is a different number: the row fluctuations are resolved
    q_a, p_a = softmax_attention_map(beta, q=q, p=p, sigma_v2=1.0, sigma_b2=0.0, seq_len=seq_len)
    assert est - p_a / q_a > 10 * err
    # width -> infinity: the finite-width cosine tends to the finite-T one (the same draws)
    wide = attention_mean_cosine(beta, q=q, p=p, sigma_v2=1.0, sigma_b2=0.0, seq_len=seq_len, width=10 ** 7,
                                 sampling=CosineSampling(4096))
    assert wide == pytest.approx(est, abs=1e-4)


def test_simulated_layer_inside_two_standard_errors():
    """One torch attention layer, d = T = 64, 24 initialisations x 2 sequences (float64).

    The finite-T theory is 5-16 standard errors from the simulation there; with the
    finite-width terms the map meets the measured p/q ("rho") and the mean cosine meets
    the measured cosine within 2 standard errors (the acceptance of issue 14, at a size
    where the T/d correction is large). Input cosines 0.1 (beta 0.5) and 0.5.
    """
    from remprop.theory import Architecture
    from remprop.validation import attention_sweep
    from remprop.validation.settings import SimulationSettings

    arch = Architecture(sigma_v2=1.0, sigma_b2=0.0)
    width = seq_len = 64
    betas, rhos = np.array([0.5, 0.75, 1.0]), np.array([0.1, 0.5])
    sweep = attention_sweep(betas, rhos, arch=arch,
                            sim=SimulationSettings(width=width, seq_len=seq_len, dtype="float64", seeds=24,
                                                   sequences=2))
    n = 48
    se = {k: sweep.spread[k] / math.sqrt(n) for k in ("rho", "cosine")}
    q0, p0 = softmax_attention_map(betas, q=1.0, p=rhos[:, None], sigma_v2=1.0, sigma_b2=0.0, seq_len=seq_len)
    qa, pa = finite_width_attention_map(betas, q=1.0, p=rhos[:, None], sigma_v2=1.0, sigma_b2=0.0, width=width,
                                        seq_len=seq_len)
    cos = attention_mean_cosine(betas, q=1.0, p=rhos[:, None], sigma_v2=1.0, sigma_b2=0.0, width=width, seq_len=seq_len)
    use = np.array([[True, False, False], [True, True, True]])  # rho 0.1: beta 0.5 only
    assert np.all(np.abs(p0 / q0 - sweep.measured["rho"])[use] > 2 * se["rho"][use])
    assert np.all(np.abs(pa / qa - sweep.measured["rho"])[use] < 2 * se["rho"][use])
    assert np.all(np.abs(cos - sweep.measured["cosine"])[use] < 2 * se["cosine"][use])


def test_bad_inputs_are_named():
    with pytest.raises(ValueError, match="width"):
        finite_width_attention_map(1.0, q=1.0, p=0.1, width=3, seq_len=16)
    with pytest.raises(ValueError, match="seq_len"):
        finite_width_attention_map(1.0, q=1.0, p=0.1, width=16, seq_len=None)
    with pytest.raises(ValueError, match="heads"):
        query_norm_variance(10, heads=3)
    with pytest.raises(ValueError, match="sigma_v2 and sigma_b2"):
        attention_mean_cosine(1.0, q=1.0, p=0.1, sigma_v2=0.0, sigma_b2=0.0, seq_len=16)
    with pytest.raises(ValueError, match="beta"):
        gibbs_energy_square(-1.0, 1.0, 0.0, seq_len=16)
    with pytest.raises(ValueError, match="p / q"):
        finite_width_attention_map(1.0, q=1.0, p=-0.5, width=16, seq_len=16)
    assert key_dimension(128) == 127
