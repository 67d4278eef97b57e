"""Noci et al. (2022) as a limit of the engine: no LayerNorm, linear MLP, uniform attention.

Their block is ``Z = X + g1 SA(X)``, ``X' = Z + g2 MLP(Z)`` (branch scaling, value and MLP
weights of variance 1/d, no biases); ours is ``alpha x + F(x)`` with ``alpha = 1/g``
(docs/derivations.md section 4). Uniform attention is our beta -> 0 at finite T.
Closed forms (their propagation of the token inner products), with
``C(X) = sum_{k,k'} <x_k, x_k'>``:

    C(X^L) = (1 + g1^2)^L (1 + g2^2)^L C(X^0)
    |X^L|_F^2 = (1 + g2^2)^L [ |X^0|_F^2 + ((1 + g1^2)^L - 1) C(X^0) / T ]
"""
from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp

from remprop.diagrams.depth_recipes import inverse_sqrt_depth, residual_scaling, scale_architecture
from remprop.theory import Architecture, propagate

#: beta small enough that x = beta sqrt(q (q - p)) stays below 1e-12 while our q grows like
#: (1 + 1/g^2)^(2L) (up to 1e97 at L = 32, g = 1/sqrt(32)): uniform attention to double precision.
_BETA_UNIFORM = 1e-120


def _noci_architecture(g1, g2, seq_len):
    return Architecture(norm="none", attention="softmax", activation="linear", sigma_w2=1.0, sigma_v2=1.0,
                        sigma_b2=0.0, alpha_sa=1.0 / g1, alpha_mlp=1.0 / g2, seq_len=seq_len)


def _closed_forms(g1, g2, seq_len, q0, p0, depth):
    """(|X^l|^2 / (T d), C(X^l) / (T^2 d)) = (q_l, m_l) of Noci et al., l = 0..depth."""
    layers = np.arange(depth + 1)
    m0 = p0 + (q0 - p0) / seq_len
    q = (1 + g2 ** 2) ** layers * (q0 + m0 * ((1 + g1 ** 2) ** layers - 1))
    m = ((1 + g1 ** 2) * (1 + g2 ** 2)) ** layers * m0
    return q, m


def test_closed_forms_solve_the_uniform_attention_recursion():
    """Symbolic: one block maps (q, m) -> ((1+g2^2)(q + g1^2 m), (1+g1^2)(1+g2^2) m), and the closed forms solve it."""
    q, p, g1, g2, T, L, q0, m0 = sp.symbols("q p g1 g2 T L q0 m0", positive=True)
    m = p + (q - p) / T
    # uniform attention: every output row is W_V times the mean token, |mean|^2/d = m
    q_z, p_z = q + g1 ** 2 * m, p + g1 ** 2 * m
    q_new, p_new = (1 + g2 ** 2) * q_z, (1 + g2 ** 2) * p_z
    m_new = p_new + (q_new - p_new) / T
    assert sp.simplify(m_new - (1 + g1 ** 2) * (1 + g2 ** 2) * m) == 0
    q_l = (1 + g2 ** 2) ** L * (q0 + m0 * ((1 + g1 ** 2) ** L - 1))
    m_l = (1 + g1 ** 2) ** L * (1 + g2 ** 2) ** L * m0
    q_next = (1 + g2 ** 2) ** (L + 1) * (q0 + m0 * ((1 + g1 ** 2) ** (L + 1) - 1))
    assert sp.simplify(sp.expand(sp.powsimp(q_next - (1 + g2 ** 2) * (q_l + g1 ** 2 * m_l), force=True))) == 0
    assert sp.simplify(q_l.subs(L, 0) - q0) == 0


@pytest.mark.parametrize("g1, g2, seq_len, q0, rho0", [(0.7, 0.4, 16, 1.0, 0.3), (1.0, 1.0, 64, 2.0, 0.0),
                                                      (0.2, 1.5, 8, 0.5, -0.1)])
def test_engine_reproduces_noci_closed_forms(g1, g2, seq_len, q0, rho0):
    """propagate() in the Noci limit equals their closed forms after the scale (g1 g2)^(2L) (rel. 1e-9)."""
    depth = 8
    traj = propagate(_noci_architecture(g1, g2, seq_len), _BETA_UNIFORM, depth, q0=q0, rho0=rho0)
    scale = (g1 * g2) ** (2 * np.arange(depth + 1))
    q_ours, p_ours = traj.q * scale, traj.p * scale
    q_cf, m_cf = _closed_forms(g1, g2, seq_len, q0, q0 * rho0, depth)
    assert np.allclose(q_ours, q_cf, rtol=1e-9)
    assert np.allclose(p_ours + (q_ours - p_ours) / seq_len, m_cf, rtol=1e-9)


def test_rank_collapse_and_inverse_sqrt_depth_scaling():
    """Fixed g: rho_L -> 1. g = c / sqrt(L): rho_L -> (T e^{c^2} m0 / (q0 + m0 (e^{c^2} - 1)) - 1) / (T - 1) < 1."""
    T, q0, rho0, c = 32, 1.0, 0.0, 1.0
    fixed = propagate(_noci_architecture(1.0, 1.0, T), _BETA_UNIFORM, 30, q0=q0, rho0=rho0).rho[-1]
    assert fixed > 0.999
    m0 = rho0 * q0 + (q0 - rho0 * q0) / T
    e = math.exp(c ** 2)
    limit = (T * e * m0 / (q0 + m0 * (e - 1)) - 1) / (T - 1)
    errors = []
    for depth in (4, 8, 16, 32):
        alpha = residual_scaling(inverse_sqrt_depth(c), depth, convention="branch")
        assert alpha == pytest.approx(math.sqrt(depth) / c)
        arch = Architecture(norm="none", activation="linear", sigma_w2=1.0, sigma_v2=1.0, sigma_b2=0.0,
                            alpha_sa=alpha, alpha_mlp=alpha, seq_len=T)
        rho = propagate(arch, _BETA_UNIFORM, depth, q0=q0, rho0=rho0).rho[-1]
        # exact finite-L value of the closed forms
        q_cf, m_cf = _closed_forms(c / math.sqrt(depth), c / math.sqrt(depth), T, q0, q0 * rho0, depth)
        assert rho == pytest.approx((T * m_cf[-1] / q_cf[-1] - 1) / (T - 1), rel=1e-9)
        errors.append(abs(rho - limit))
    assert limit < 0.5
    # (1 + c^2/L)^L -> e^{c^2} with an O(1/L) error: doubling L roughly halves it
    assert all(b < 0.6 * a for a, b in zip(errors, errors[1:]))


def test_residual_scaling_helper():
    assert residual_scaling(1.3, 10) == 1.3
    assert residual_scaling(lambda L: 2.0 / L, 4) == 0.5
    assert residual_scaling(0.5, 7, convention="branch") == 2.0
    grid = residual_scaling(inverse_sqrt_depth([0.5, 1.0, 2.0]), 16, convention="branch")
    assert np.allclose(grid, [8.0, 4.0, 2.0])
    arch = scale_architecture(Architecture(), 25, alpha_sa=inverse_sqrt_depth(1.0), convention="branch")
    assert arch.alpha_sa == pytest.approx(5.0) and arch.alpha_mlp == 1.0
    # post-LN: LN(x + g F(x)) = LN(x/g + F(x)): the branch form and our alpha = 1/g give the same stack
    for bad, name in ((dict(alpha=-1.0, depth=3), "alpha"), (dict(alpha=0.0, depth=3, convention="branch"), "alpha"),
                      (dict(alpha=1.0, depth=0), "depth"), (dict(alpha=1.0, depth=3, convention="x"), "convention"),
                      (dict(alpha=lambda L: 1 / 0, depth=3), "alpha")):
        with pytest.raises(ValueError, match=name):
            residual_scaling(**bad)
    with pytest.raises(ValueError, match="arch"):
        scale_architecture("post", 3, alpha_sa=1.0)


torch = pytest.importorskip("torch")


def test_noci_closed_forms_monte_carlo():
    """Simulated no-LN linear stack with uniform attention (tiny beta), 96 seeds: C(X^L) and |X^L|^2.

    Each is a ratio of quadratic forms of products of L Gaussian matrices; tolerance 4
    standard errors of the mean over seeds.
    """
    from remprop.validation.inputs import gaussian_tokens
    from remprop.validation.measurements import token_statistics
    from remprop.validation.simulator import SimulatedStack
    from remprop.validation.settings import SimulationSettings

    g1, g2, T, d, depth, rho0 = 0.8, 0.5, 8, 64, 3, 0.2
    arch = _noci_architecture(g1, g2, T)
    x = gaussian_tokens(1.0, rho0, count=1, seq_len=T, width=d, seed=0, dtype="float64").tokens
    s0 = token_statistics(x)
    q_in, p_in = float(s0["q"][0]), float(s0["p"][0])
    samples = []
    for seed in range(96):
        stack = SimulatedStack(arch, 1e-12, depth,
                               sim=SimulationSettings(width=d, seq_len=T, dtype="float64", device="cpu"), seed=seed)
        out = token_statistics(stack(x))
        q, p = float(out["q"][0]), float(out["p"][0])
        samples.append((q, p + (q - p) / T))
    samples = np.array(samples) * (g1 * g2) ** (2 * depth)
    q_cf, m_cf = _closed_forms(g1, g2, T, q_in, p_in, depth)
    for column, expected in ((0, q_cf[-1]), (1, m_cf[-1])):
        values = samples[:, column]
        assert abs(values.mean() - expected) < 4 * values.std(ddof=1) / math.sqrt(values.size)
