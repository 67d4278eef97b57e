"""Tests of remprop.theory.symbolic: the block tree walked symbolically, the expansion near
collapse and the large-depth laws.

Every check compares a symbolic result with the numeric engine (remprop.theory maps and
numba depth kernels), with tolerances set by the size of the first neglected term.
"""
from __future__ import annotations

import doctest

import numpy as np
import pytest
import sympy as sp
from hypothesis import given, settings
from hypothesis import strategies as st

from remprop.theory import (
    Architecture,
    activation_moments,
    cross_overlap_table,
    final_state,
    participation_ratio,
    participation_table,
    propagate,
    relu_kernel,
)
from remprop.theory import symbolic as S

BETA_SPREAD = 0.5  # below beta_c = sqrt(2) of the first layer: spread attention at every layer
THRESHOLD = 0.99
DEPTHS = (100, 200, 500, 1000, 2000)


# -- helpers ------------------------------------------------------------------------------
def numeric_alpha_star(arch, depth, threshold=THRESHOLD, beta=BETA_SPREAD, lo=0.05, hi=1e4,
                       rtol=1e-12, points=33):
    """Smallest alpha_sa with final rho <= threshold, by grid refinement over alpha_sa.

    Uses that the final cosine decreases with alpha_sa (checked on every grid below).
    Each round evaluates ``points`` alphas at once through final_state and keeps the
    bracket around the first alpha that meets the threshold.
    """
    grid = np.geomspace(lo, hi, points)
    while True:
        rho = final_state(arch.replace(alpha_sa=grid), beta, depth)["rho"]
        # monotone up to the round-off accumulated over the depth (a few ulp per block)
        assert np.all(np.diff(rho) <= 4 * depth * 2.2e-16), "final cosine must decrease with alpha_sa"
        ok = rho <= threshold
        if not ok.any():
            return np.inf
        i = int(np.argmax(ok))
        assert i > 0, "lower end of the bracket already below threshold"
        lo, hi = grid[i - 1], grid[i]
        if hi - lo <= rtol * hi:
            return hi
        grid = np.linspace(lo, hi, points)


def block_eps(arch, beta, eps):
    """1 - rho after one block from q = 1, rho = 1 - eps (numpy component maps)."""
    q, p = arch.block(beta)(1.0, 1.0 - eps)
    return 1.0 - p / q


def max_decrement_slope(arch, eps_final, points=400, h=1e-6):
    """max |G'(eps)| on [eps_final, 1], G(eps) = eps - eps' (finite differences of the block)."""
    eps = np.linspace(eps_final + h, 1.0 - h, points)
    g = lambda e: e - block_eps(arch, BETA_SPREAD, e)  # noqa: E731
    return float(np.max(np.abs((g(eps + h) - g(eps - h)) / (2 * h))))


@pytest.fixture(scope="module")
def bert_alpha_star():
    arch = Architecture()
    return {depth: numeric_alpha_star(arch, depth) for depth in DEPTHS}


# -- the kernel near c = 1 ---------------------------------------------------------------
def test_kernel_expansion_leading_coefficients():
    k = S.relu_kernel_expansion(sp.Rational(7, 2))
    c = k.coefficients
    assert c[0] == 1 and c[1] == -1
    assert sp.Integer(2) not in c  # no delta^2 term: only half-integer powers beyond delta
    assert sp.simplify(c[sp.Rational(3, 2)] - 2 * sp.sqrt(2) / (3 * sp.pi)) == 0
    assert sp.simplify(c[sp.Rational(5, 2)] - sp.sqrt(2) / (30 * sp.pi)) == 0


@pytest.mark.parametrize("order, next_power", [(sp.Rational(3, 2), 2.5), (sp.Rational(5, 2), 3.5)])
def test_kernel_series_matches_numeric_kernel(order, next_power):
    # residual f - series_{<= order} must be the next coefficient times delta^next_power, up
    # to twice the term after it (one more power of delta) and the round-off of f near 1.
    powers = [sp.Rational(int(2 * next_power), 2), sp.Rational(int(2 * next_power) + 2, 2)]
    longer = S.relu_kernel_expansion(powers[1])
    c_next, c_after = (float(longer.coefficients[p]) for p in powers)
    series = S.relu_kernel_expansion(order)
    delta = np.geomspace(1e-3, 3e-2, 12) if next_power == 2.5 else np.geomspace(2e-2, 2e-1, 12)
    residual = relu_kernel(1.0 - delta) - series(delta)
    predicted = c_next * delta**next_power
    assert np.all(np.abs(residual - predicted) <= 2 * abs(c_after) * delta ** (next_power + 1) + 4e-16)
    slope = np.polyfit(np.log(delta), np.log(np.abs(residual)), 1)[0]
    assert abs(slope - next_power) < 0.05


# -- the block tree walked symbolically ----------------------------------------------------
_Y2, _M2, _M11, _C = sp.Function("Y2"), sp.Function("M2"), sp.Function("M11"), sp.Function("C")
_FIELD_SYMBOLS = {name: sp.Symbol(name, positive=True) for name in
                  ("sigma_w2", "sigma_b2", "sigma_v2", "alpha_sa", "alpha_mlp", "sigma_o2", "sigma_w2_out")}


@pytest.mark.parametrize("norm", ["post", "pre", "none"])
@pytest.mark.parametrize("attention, activation, seq_len, heads", [
    ("softmax", "relu", None, 1),
    ("gain-controlled", "tanh", None, 2),
    ("softmax", "tanh", 16, 1),
    ("gain-controlled", "relu", 16, 3),
])
def test_symbolic_block_equals_numeric_block(norm, attention, activation, seq_len, heads):
    # The block of Architecture.block walked on sympy symbols (every numeric field a symbol),
    # then evaluated at numbers, must be the numeric block: same cores, same order.
    arch = Architecture(norm=norm, attention=attention, activation=activation, seq_len=seq_len,
                        heads=heads, qk_scaling="head", sigma_w2=0.7, sigma_b2=0.01, sigma_v2=0.4,
                        alpha_sa=0.8, alpha_mlp=1.3, sigma_o2=0.9, sigma_w2_out=1.1)
    beta = 0.6
    context = S.SymbolicContext(participation=lambda b, q, p, t: _Y2(b, q, p),
                                moments=lambda name, q1, p1: (_M2(q1), _M11(q1, p1)),
                                cross_overlap=lambda b, q, p, t: _C(b, q, p))
    q_sym, p_sym = S.symbolic_block_map(S.symbolic_architecture(arch, **_FIELD_SYMBOLS), beta=beta,
                                        context=context)
    values = {_FIELD_SYMBOLS[name]: getattr(arch, name) for name in _FIELD_SYMBOLS}

    def y2(b, q, p):  # the participation ratio the numeric attention reads (tabulated at finite T)
        if seq_len is None:
            return participation_ratio(b, q, p)
        return participation_table(seq_len)(b * np.sqrt(q * (q - p)))

    def cross(b, q, p):  # the tabulated cross-overlap of two rows (finite-T softmax only)
        return cross_overlap_table(seq_len)(b * np.sqrt(q * (q - p)), p / q)

    numeric_maps = {"Y2": y2, "C": cross, "M2": lambda q1: activation_moments(q1, q1, activation)[0],
                    "M11": lambda q1, p1: activation_moments(q1, p1, activation)[1]}
    block = arch.block(beta)
    for q, p in [(1.0, 0.0), (2.5, 1.0), (0.7, 0.65), (1.3, 0.2)]:
        point = {**values, S.block_tree.Q: q, S.block_tree.P: p}
        got = [float(sp.lambdify([], expr.subs(point), modules=[numeric_maps, "numpy"])())
               for expr in (q_sym, p_sym)]
        # same arithmetic in another order: a few ulp of O(1) numbers
        np.testing.assert_allclose(got, block(q, p), rtol=1e-12, atol=1e-14)


def test_symbolic_block_has_the_block_order():
    # post-LN: the block output is LayerNorm'd (q' = 1 exactly), for any input and Y2
    post = S.symbolic_architecture(Architecture(norm="post"), **{k: _FIELD_SYMBOLS[k] for k in S.BERT})
    q_out, _ = S.symbolic_block_map(post)
    assert q_out == 1
    # no LayerNorm, no bias, linear MLP, spread attention (q_A = p_A = sigma_v2 p):
    # p' = (alpha_M^2 + sigma_w2^2) (alpha^2 + sigma_v2) p, attention then MLP, each with its skip
    arch = S.symbolic_architecture(Architecture(norm="none", activation="linear"), sigma_b2=0,
                                   **{k: _FIELD_SYMBOLS[k] for k in ("sigma_w2", "sigma_v2", "alpha_sa",
                                                                      "alpha_mlp")})
    _, p_out = S.symbolic_block_map(arch, context=S.SymbolicContext(participation=S.spread_phase))
    a, am, w, v = (_FIELD_SYMBOLS[k] for k in ("alpha_sa", "alpha_mlp", "sigma_w2", "sigma_v2"))
    assert sp.simplify(p_out - (am**2 + w**2) * (a**2 + v) * S.block_tree.P) == 0


def test_post_ln_block_map_is_the_tree_at_spread_attention():
    # post_ln_block_map is the symbolic block at q = 1, p = 1 - eps, Y2 = 0
    exact, eps_att = S.post_ln_block_map()
    arch = S.symbolic_architecture(Architecture(norm="post"), sigma_w2=S.SIGMA_W2, sigma_b2=S.SIGMA_B2,
                                   sigma_v2=S.SIGMA_V2, alpha_sa=S.ALPHA_SA, alpha_mlp=S.ALPHA_MLP)
    q_out, p_out = S.symbolic_block_map(arch, 1, 1 - S.EPS,
                                        context=S.SymbolicContext(participation=S.spread_phase))
    point = {S.SIGMA_W2: 0.3, S.SIGMA_B2: 0.02, S.SIGMA_V2: 0.5, S.ALPHA_SA: 1.4, S.ALPHA_MLP: 0.9}
    for eps in (1e-3, 0.2, 0.9):
        at = {**point, S.EPS: eps}
        assert abs(float((exact - (1 - p_out / q_out)).subs(at))) < 1e-14
    assert sp.simplify(eps_att - S.ALPHA_SA**2 * S.EPS
                       / (S.ALPHA_SA**2 + S.SIGMA_V2 + S.SIGMA_B2 - S.SIGMA_V2 * S.EPS)) == 0


# -- the block map near collapse ---------------------------------------------------------
def test_expansion_matches_brute_force_series_at_rational_point():
    # independent derivation: sympy series of the exact composed map at numbers
    values = {S.SIGMA_W2: sp.Rational(1, 5), S.SIGMA_B2: sp.Rational(1, 2500),
              S.SIGMA_V2: sp.Rational(3, 10), S.ALPHA_SA: sp.Rational(3, 2),
              S.ALPHA_MLP: sp.Rational(7, 10)}
    exact, _ = S.post_ln_block_map()
    t = sp.Symbol("t", positive=True)
    brute = sp.series(exact.subs(values).subs(S.EPS, t**2), t, 0, 6).removeO()
    expansion = S.block_map_expansion(sp.Rational(5, 2))
    for k in range(2, 6):
        ours = expansion.coefficients.get(sp.Rational(k, 2), 0)
        assert sp.simplify(brute.coeff(t, k) - sp.sympify(ours).subs(values)) == 0


def test_expansion_factorisation():
    e = S.block_map_expansion()
    assert sp.simplify(e.lam - e.lam_attention * e.lam_mlp) == 0
    assert sp.simplify(e.kappa - e.kappa_mlp * e.lam_attention ** sp.Rational(3, 2)) == 0
    # bias-free MLP: linear factor exactly 1; attention factor < 1 for any alpha
    assert sp.simplify(e.lam_mlp.subs(S.SIGMA_B2, 0) - 1) == 0
    bert = e.numeric()
    assert 0.9995 < bert["lam_mlp"] < 1.0 and bert["kappa"] < 0


PARAMETER_SETS = [
    dict(),                                                     # BERT defaults, alpha_sa = 1
    dict(alpha_sa=0.5),
    dict(alpha_sa=3.0, sigma_b2=0.0),
    dict(sigma_w2=1.0, sigma_b2=0.01, sigma_v2=0.5, alpha_sa=2.0, alpha_mlp=0.5),
]


def _check_block_expansion(params, beta):
    """Returns (eps, error bound, kappa) after asserting the residual is mu eps^2 + O(eps^(5/2))."""
    eps = np.geomspace(1e-6, 1e-3, 13)
    numeric = block_eps(Architecture(**params), beta, eps)
    e3 = S.block_map_expansion(3)
    c = e3.numeric_coefficients(**params)
    lam, kappa, mu = c[1.0], c[1.5], c[2.0]
    residual = numeric - (lam * eps + kappa * eps**1.5)
    # residual = mu eps^2 + nu eps^(5/2) + xi eps^3 + ...; allow twice the next two terms and
    # the round-off: a few ulp of 1 from 1 - p/q and 1 - eps, and the kernel's sqrt(1 - c^2)
    # at 1 - c^2 ~ 2 r eps_1 (eps_1 = lam_A eps after attention): ulp / sqrt(2 r lam_A eps).
    lam_a = float(e3.numeric(**params)["lam_attention"])
    r = params.get("sigma_w2", 0.2) / (params.get("sigma_w2", 0.2) + params.get("sigma_b2", 4e-4))
    roundoff = 1e-15 + 2.2e-16 / np.sqrt(2 * r * lam_a * eps)
    bound = 2 * abs(c[2.5]) * eps**2.5 + 2 * abs(c[3.0]) * eps**3 + roundoff
    assert np.all(np.abs(residual - mu * eps**2) <= bound)
    np.testing.assert_allclose(e3.evaluate(eps, **params), numeric, rtol=0,
                               atol=3 * abs(c[3.0]) * 1e-9 + roundoff.max())
    return eps, bound, kappa


@pytest.mark.parametrize("params", PARAMETER_SETS)
@pytest.mark.parametrize("beta", [BETA_SPREAD, 3.0])
def test_expansion_matches_numeric_block(params, beta):
    # beta = 3 > sqrt 2 is still spread near collapse: beta_c = sqrt(2 / eps) >= 44 here
    eps, bound, kappa = _check_block_expansion(params, beta)
    # the check is sharp: a 1% error in kappa would exceed the bound for eps >= 1e-4
    big = eps >= 1e-4
    assert np.all(bound[big] < 0.01 * abs(kappa) * eps[big] ** 1.5)


@settings(max_examples=25, deadline=None)
@given(sigma_w2=st.floats(0.05, 2.0), sigma_b2=st.floats(0.0, 0.05), sigma_v2=st.floats(0.0, 2.0),
       alpha_sa=st.floats(0.3, 5.0), alpha_mlp=st.floats(0.0, 2.0))
def test_expansion_matches_numeric_block_random(sigma_w2, sigma_b2, sigma_v2, alpha_sa, alpha_mlp):
    _check_block_expansion(dict(sigma_w2=sigma_w2, sigma_b2=sigma_b2, sigma_v2=sigma_v2,
                                alpha_sa=alpha_sa, alpha_mlp=alpha_mlp), BETA_SPREAD)


# -- polynomial collapse of the bias-free ReLU MLP stack ----------------------------------
def test_plain_relu_constant_is_nine_pi_squared_over_two():
    e = S.block_map_expansion()
    kappa = e.kappa_mlp.subs({S.SIGMA_B2: 0, S.ALPHA_MLP: 0})
    assert sp.simplify(4 / kappa**2 - 9 * sp.pi**2 / 2) == 0


@pytest.mark.parametrize("alpha_mlp", [0.0, 0.5])
def test_polynomial_collapse_law(alpha_mlp):
    # MLP-only stack: no attention (sigma_v2 = 0), no biases: lambda = 1 exactly.
    arch = Architecture(sigma_v2=0.0, sigma_b2=0.0, alpha_mlp=alpha_mlp)
    depths = np.array([2000, 4000, 10000])
    rho = propagate(arch, BETA_SPREAD, int(depths[-1])).rho
    eps_num = 1.0 - rho[depths]
    k = -float(S.block_map_expansion().numeric(sigma_b2=0.0, sigma_v2=0.0, alpha_mlp=alpha_mlp)["kappa"])
    u_num = eps_num**-0.5
    u_law = S.polynomial_collapse_law(depths, eps0=1.0, alpha_mlp=alpha_mlp) ** -0.5
    u_lead = S.polynomial_collapse_law(depths, eps0=1.0, alpha_mlp=alpha_mlp, correction=False) ** -0.5
    shift = u_num - u_law
    # the law keeps every term of u_L that grows with L (K L / 2 and the logarithm); what it
    # misses is an O(1) transient shift whose drift is a tail sum of O(u^-2) terms, ~1/u.
    # It must drift less than 20% of what the logarithm itself adds over the same range.
    log_term_growth = 0.75 * k * np.log(u_law[-1] / u_law[0])
    assert abs(shift[-1] - shift[0]) < 0.2 * log_term_growth
    assert abs((u_num - u_lead)[-1] - (u_num - u_lead)[0]) > 0.5 * log_term_growth


# -- the large-depth law of alpha* ---------------------------------------------------------
def test_alpha_star_independent_of_beta_in_spread_phase():
    arch = Architecture(alpha_sa=np.geomspace(1.0, 40.0, 9))
    a = final_state(arch, 0.3, 500)["rho"]
    b = final_state(arch, np.sqrt(2.0) - 1e-9, 500)["rho"]
    np.testing.assert_allclose(a, b, rtol=0, atol=1e-14)


def test_min_residual_strength_law_against_numeric(bert_alpha_star):
    depths = np.array(DEPTHS, dtype=float)
    numeric = np.array([bert_alpha_star[d] for d in DEPTHS])
    law = S.alpha_star_law(depths)
    eps_t = 1.0 - THRESHOLD
    n = {o: S.depth_to_collapse(eps_t, 1.0, numeric, em_order=o) for o in (0, 1, 2)}
    slopes = np.array([max_decrement_slope(Architecture(alpha_sa=a), eps_t) for a in numeric])
    # the Euler-Maclaurin series of the depth is in powers of G' (the per-block change of the
    # step): the neglected remainder is below the last kept term times max|G'| (factor 2 margin)
    for lower, upper in ((0, 1), (1, 2)):
        kept_last = np.abs(n[upper] - n[lower])
        assert np.all(np.abs(n[upper] - depths) <= 2 * slopes * kept_last)
        assert np.all(np.abs(n[upper] - depths) < np.abs(n[lower] - depths))
    # translate the depth residual into alpha: d N / d log alpha from the law itself
    dn_dlog_alpha = (S.depth_to_collapse(eps_t, 1.0, numeric * 1.001)
                     - S.depth_to_collapse(eps_t, 1.0, numeric / 1.001)) / (2 * np.log(1.001))
    tolerance = 2 * slopes * np.abs(n[2] - n[1]) / dn_dlog_alpha
    rel = np.abs(law / numeric - 1)
    assert np.all(rel <= tolerance + 1e-9)  # + bisection tolerances (1e-12 numeric, ~1e-16 law)
    assert rel[-1] < 1e-6 and rel[0] < 1e-5
    # the leading term alone (continuum integral) is off by ~0.3-0.8 %: the log correction matters
    rel0 = np.abs(S.alpha_star_law(depths, em_order=0) / numeric - 1)
    assert np.all(rel0 > 1e-3) and np.all(rel0 < 1e-2)
    # alpha* grows faster than sqrt(L) at BERT settings (the MLP also collapses)
    assert np.all(np.diff(numeric / np.sqrt(depths)) > 0)


def test_critical_depth_bert():
    # beyond L_max no alpha_sa helps: the MLP-only stack (alpha_sa -> inf) crosses the threshold
    l_max = S.critical_depth(THRESHOLD)
    n = int(np.floor(l_max))
    rho = propagate(Architecture(alpha_sa=1e8), BETA_SPREAD, n + 1).rho
    assert rho[n] <= THRESHOLD < rho[n + 1]
    # the fractional crossing by linear interpolation: interpolation error <= G'/8 ~ 1e-3 layer
    crossing = n + (THRESHOLD - rho[n]) / (rho[n + 1] - rho[n])
    assert abs(crossing - l_max) < 0.01
    assert np.isinf(S.alpha_star_law(n + 1))
    assert np.isinf(numeric_alpha_star(Architecture(), n + 1, hi=1e8))
    # the bias shortens L_max; without it the kernel's eps^(3/2) term still bounds it
    assert S.critical_depth(THRESHOLD, sigma_b2=0.0) > l_max + 500


def test_attention_only_law_exact():
    # alpha_mlp = 1e4 makes the MLP sub-block the identity up to a relative 1e-9 per block
    arch = Architecture(alpha_mlp=1e4)
    for depth in (100, 1000):
        numeric = numeric_alpha_star(arch, depth)
        exact = S.attention_only_residual_law(depth)
        assert abs(exact / numeric - 1) < 1e-6
    depths = np.array([100.0, 1000.0, 10000.0])
    a2_exact = S.attention_only_residual_law(depths) ** 2
    a2_two = S.attention_only_residual_law(depths, exact=False) ** 2
    big_b = 0.2 + 4e-4
    log_r = np.log((big_b - 0.2 * 0.01) / (4e-4 * 0.01))
    # B / (e^x - 1) = B / x - B / 2 + B x / 12 + O(x^3), x = ln R / L
    assert np.all(np.abs(a2_exact - a2_two - big_b * log_r / (12 * depths)) < big_b * (log_r / depths) ** 3)


# -- input checks and doctests --------------------------------------------------------------
@pytest.mark.parametrize("call, name", [
    (lambda: S.relu_kernel_expansion(0.3), "order"),
    (lambda: S.block_map_expansion(1), "order"),
    (lambda: S.alpha_star_law(100, threshold=1.0), "threshold"),
    (lambda: S.alpha_star_law(0.5), "depth"),
    (lambda: S.alpha_star_law(100, sigma_b2=-1.0), "sigma_b2"),
    (lambda: S.alpha_star_law(100, em_order=3), "em_order"),
    (lambda: S.critical_depth(sigma_w2=0.0), "sigma_w2"),
    (lambda: S.depth_to_collapse(0.5, 0.1), "eps_final"),
    (lambda: S.attention_only_residual_law(100, sigma_b2=0.0), "sigma_b2"),
    (lambda: S.polynomial_collapse_law(10, eps0=2.0), "eps0"),
    (lambda: S.block_map_expansion().numeric(beta=1.0), "beta"),
])
def test_bad_input_names_parameter(call, name):
    with pytest.raises(ValueError, match=name):
        call()


def test_broadcasting():
    out = S.alpha_star_law(np.array([[100.0], [200.0]]), sigma_v2=np.array([0.1, 0.2, 0.4]))
    assert out.shape == (2, 3)
    assert np.all(np.diff(out, axis=0) > 0) and np.all(np.diff(out, axis=1) > 0)


@pytest.mark.parametrize("module", ["arc_cosine", "block_tree", "block_expansion", "depth_laws"])
def test_doctests(module):
    result = doctest.testmod(getattr(S, module))
    assert result.failed == 0 and result.attempted > 0
