"""Multi-head attention: the query/key variance convention that keeps beta's meaning for every H.

Theory: remprop.theory.rem.heads (docs/derivations.md section 3); simulator option
``qk_scaling`` of remprop.validation.
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from remprop.theory.rem import (
    QK_SCALINGS,
    effective_beta,
    head_participation_ratio,
    participation_moment,
    query_key_variance,
    score_variance,
)


def _gaussian_expectation(expr, pairs):
    """E of a polynomial in centred Gaussian symbols with E[w w'] given by ``pairs`` (Wick, degree <= 4)."""
    symbols = sorted({s for pair in pairs for s in pair}, key=str)
    poly = sp.Poly(sp.expand(expr), *symbols)
    total = 0
    for monomial, coeff in poly.terms():
        factors = [s for s, k in zip(symbols, monomial) for _ in range(k)]
        if len(factors) % 2:
            continue
        total += coeff * _wick(factors, pairs)
    return sp.expand(total)


def _wick(factors, pairs):
    if not factors:
        return 1
    first, rest = factors[0], factors[1:]
    out = 0
    for i, other in enumerate(rest):
        cov = pairs.get((first, other), pairs.get((other, first), 0))
        if cov != 0:
            out += cov * _wick(rest[:i] + rest[i + 1:], pairs)
    return out


@pytest.mark.parametrize("d, heads", [(2, 1), (4, 2), (4, 4)])
def test_head_score_variance_symbolic(d, heads):
    """Var s^(h) = s_qk^4 |x|^2 |y|^2 for every H (Wick's theorem on the raw weights; docs section 3)."""
    d_head = d // heads
    s2 = sp.Symbol("s2", positive=True)
    x = sp.symbols(f"x0:{d}")
    y = sp.symbols(f"y0:{d}")
    wq = sp.Matrix(d, d, sp.symbols(f"q0:{d * d}"))
    wk = sp.Matrix(d, d, sp.symbols(f"k0:{d * d}"))
    qx = wq * sp.Matrix(x)
    ky = wk * sp.Matrix(y)
    score = sum(qx[k] * ky[k] for k in range(d_head)) / sp.sqrt(d_head)     # head 0
    pairs = {(w, w): s2 for w in list(wq) + list(wk)}
    variance = _gaussian_expectation(score ** 2, pairs)
    assert sp.expand(variance - s2 ** 2 * sum(v ** 2 for v in x) * sum(v ** 2 for v in y)) == 0


def test_conventions():
    """Over d: beta_eff = beta; over d_H: beta_eff = H beta, and Var s = beta_eff^2 q^2 log T."""
    assert effective_beta(0.5, 12, "model") == 0.5
    assert effective_beta(0.5, 12, "head") == pytest.approx(6.0)
    T, d = 512, 768
    for scaling in QK_SCALINGS:
        for heads in (1, 4, 12):
            s2 = query_key_variance(0.5, d, T, heads, scaling)
            b = effective_beta(0.5, heads, scaling)
            assert s2 == pytest.approx(b * math.sqrt(math.log(T)) / d)
            # Var s = s_qk^4 d^2 q^2
            assert score_variance(0.5, 1.3, T, heads, scaling) == pytest.approx(s2 ** 2 * d ** 2 * 1.3 ** 2)
    assert head_participation_ratio(0.5, 1.0, 0.0, 4, T, "head") == pytest.approx(
        participation_moment(2.0, 1.0, 0.0, T), rel=1e-12)
    with pytest.raises(ValueError, match="qk_scaling"):
        effective_beta(0.5, 2, "width")
    with pytest.raises(ValueError, match="heads"):
        query_key_variance(0.5, 10, 64, 3)
    with pytest.raises(ValueError, match="heads"):
        effective_beta(0.5, 0)


torch = pytest.importorskip("torch")


def test_simulated_score_variance_per_head():
    """Empirical head-score variance (64 seeds x 64 x 64 scores) against beta_eff^2 q^2 log T.

    Scores of one draw share the weights, so the tolerance is 4 standard errors of the
    per-seed means (the spread of Var s over seeds is about sqrt(2/d_H) ~ 0.35 relative).
    """
    from remprop.validation import layers
    from remprop.validation.backend import generator

    d, T, heads, beta = 64, 64, 4, 0.5
    for scaling in QK_SCALINGS:
        per_seed = []
        for seed in range(64):
            x = torch.randn(T, d, generator=torch.Generator().manual_seed(10_000 + seed), dtype=torch.float64)
            x = x / x.norm(dim=1, keepdim=True) * math.sqrt(d)                       # q = 1 exactly
            w = layers.draw_attention_weights(generator(seed, 0, 0), d, beta, T, 1.0, 0.0, dtype=torch.float64,
                                              device="cpu", layout=layers.HeadLayout(heads, scaling))
            dh = d // heads
            qh = (x @ w.query.T)[:, :dh]
            kh = (x @ w.key.T)[:, :dh]
            per_seed.append(float(((qh @ kh.T) / math.sqrt(dh)).pow(2).mean()))
        per_seed = np.array(per_seed)
        expected = score_variance(beta, 1.0, T, heads, scaling)
        assert abs(per_seed.mean() - expected) < 4 * per_seed.std(ddof=1) / math.sqrt(per_seed.size), scaling


def test_simulated_head_participation_ratio():
    """Y2 of 4-head attention (d = 256, T = 128, beta = 0.5), both conventions, vs finite-T theory at beta_eff.

    Tolerance: 4 standard errors over seeds x sequences plus 3 % of the value (finite-width
    deviation of Y2 from the REM: at d_H = 64 the rows' energy scale spreads by about 6/d_H,
    docs/derivations.md 1.6, which moves Y2 by a few per cent near beta_c / 2 and beta_c).
    """
    from remprop.validation.multihead import multihead_participation
    from remprop.validation.settings import SimulationSettings

    rows = multihead_participation(heads=(4,), betas=(0.5,),
                                   sim=SimulationSettings(width=256, seq_len=128, dtype="float64", seeds=3,
                                                          sequences=2))
    assert {r["qk_scaling"] for r in rows} == set(QK_SCALINGS)
    for r in rows:
        se = r["measured_y2_std"] / math.sqrt(r["samples"])
        assert abs(r["measured_y2"] - r["theory_y2"]) < 4 * se + 0.03 * r["theory_y2"], r
    by = {r["qk_scaling"]: r for r in rows}
    # over d_H the heads are frozen at 4 beta = 2 > beta_c; over d they stay spread
    assert by["head"]["measured_y2"] > 10 * by["model"]["measured_y2"]


def test_simulator_option():
    from remprop.theory import Architecture
    from remprop.validation.simulator import SimulatedStack
    from remprop.validation.settings import SimulationSettings

    with pytest.raises(ValueError, match="qk_scaling"):
        SimulatedStack(Architecture(heads=2, qk_scaling="wrong"), 0.5, 1, sim=SimulationSettings(width=16, seq_len=8))
    model = SimulatedStack(Architecture(heads=4), 0.5, 1, sim=SimulationSettings(width=16, seq_len=8, device="cpu"))
    head = SimulatedStack(Architecture(heads=4, qk_scaling="head"), 0.5, 1,
                          sim=SimulationSettings(width=16, seq_len=8, device="cpu"))
    assert model.qk_scaling == "model"
    # same random draw, variance 4 times larger over d_H
    ratio = (head.weights(0).attention.query / model.weights(0).attention.query).flatten()
    assert torch.allclose(ratio, torch.full_like(ratio, 2.0))


def test_architecture_heads_feed_the_effective_beta():
    # qk_scaling="head" makes every head a single head at H * beta: the propagated
    # trajectory must equal the single-head one at the effective beta, through the
    # numba kernels and through the component composition alike.
    from remprop.theory import Architecture, propagate

    multi = Architecture(heads=4, qk_scaling="head", seq_len=256)
    single = Architecture(seq_len=256)
    np.testing.assert_array_equal(propagate(multi, 0.5, 6).rho, propagate(single, 2.0, 6).rho)
    np.testing.assert_array_equal(propagate(Architecture(heads=12), 0.5, 6).rho,
                                  propagate(Architecture(), 0.5, 6).rho)
    q, p = multi.block(0.5)(1.0, 0.0)
    q_ref, p_ref = single.block(2.0)(1.0, 0.0)
    assert (q, p) == pytest.approx((q_ref, p_ref), rel=1e-12)
    with pytest.raises(ValueError, match="qk_scaling"):
        Architecture(qk_scaling="per-head")
    with pytest.raises(ValueError, match="heads"):
        Architecture(heads=0)
