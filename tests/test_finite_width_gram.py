"""The causal Gram state at finite width (docs/theory.md section 8.2): a head's values are the tokens
whose queries and keys made its scores.

Checked against a direct Monte Carlo of real heads (Gaussian tokens ``X``, Gaussian query and key
weights, causal softmax; the values' weights averaged out exactly: ``A X X^T A^T / d``), at sizes where
the effect is large (``T / d = 4``), and against the infinite-width law it corrects, which the same
measurement rejects.
"""
from types import SimpleNamespace

import numpy as np
import pytest

from remprop.theory import Architecture
from remprop.theory.causal import _CausalGramWalker, causal_gram_flops, propagate_causal_gram
from remprop.theory.checks import ParameterError

T, D, D_H, C, LAST = 256, 64, 8, 1.0, 32


def _real_heads(seeds):
    """Per seed: mean squared norm and mean pair overlap of the last rows of ``A X X^T A^T / d``."""
    rng = np.random.default_rng(7)
    late = slice(T - LAST, T)
    mask = np.triu(np.ones((T, T), dtype=bool), 1)
    out = []
    for _ in range(seeds):
        x = rng.standard_normal((T, D))
        wq, wk = rng.standard_normal((2, D_H, D)) / np.sqrt(D)
        s = C * (x @ wq.T) @ (x @ wk.T).T / np.sqrt(D_H)
        s[mask] = -np.inf
        a = np.exp(s - s.max(axis=1, keepdims=True))
        a /= a.sum(axis=1, keepdims=True)
        o = a[late] @ x
        g = o @ o.T / D
        out.append((np.trace(g) / LAST, (g.sum() - np.trace(g)) / (LAST * (LAST - 1))))
    return np.array(out)


def _theory(width, draws=32, chains=4):
    comp = SimpleNamespace(beta=C / np.sqrt(np.log(T)), sigma_v2=1.0, sigma_b2=0.0, gain_controlled=False)
    late = slice(T - LAST, T)
    out = []
    for chain in range(chains):
        walker = _CausalGramWalker(draws, np.random.default_rng(chain), "relu", None, fast=True, width=width)
        g = walker.attention(comp, np.eye(T))[late, late]
        out.append((np.trace(g) / LAST, (g.sum() - np.trace(g)) / (LAST * (LAST - 1))))
    return np.array(out)


def test_finite_width_attention_follows_real_heads():
    # 300 real heads against 4 chains of 32 draws. Tolerance: 4 combined standard errors (of the heads'
    # mean and the chains' mean). Measured: q 0.0279 +- 0.0003 real, 0.0275 +- 0.0003 at d = 64, 0.0111
    # at infinite width (the late rows' Y_2, 60 standard errors off); p 0.00440, 0.00444, 0.00411.
    real, finite, infinite = _real_heads(300), _theory((D, D_H)), _theory(None)
    def se(a):
        return a.std(axis=0, ddof=1) / np.sqrt(len(a))
    bound = 4 * np.hypot(se(real), se(finite))
    assert np.all(np.abs(real.mean(axis=0) - finite.mean(axis=0)) <= bound), (real.mean(0), finite.mean(0), bound)
    # the infinite-width law misses the late tokens' norm by far more than the noise
    assert real.mean(axis=0)[0] - infinite.mean(axis=0)[0] > 20 * np.hypot(se(real), se(infinite))[0]


def test_finite_width_tends_to_the_infinite_width_law():
    # at d = 10^6 the correction (1 - 2 d_H / d, c^2 / d) is below 1e-5 of q: the same draws (seeded alike)
    # give the same Gram matrix to float32 rounding of the values
    comp = SimpleNamespace(beta=C / np.sqrt(np.log(64)), sigma_v2=1.0, sigma_b2=0.0, gain_controlled=False)
    g0 = 0.7 * np.eye(64) + 0.3
    wide = _CausalGramWalker(4, np.random.default_rng(1), "relu", None, fast=True, width=(10 ** 6, 64)).attention(comp, g0)
    plain = _CausalGramWalker(4, np.random.default_rng(1), "relu", None, fast=True).attention(comp, g0)
    assert np.allclose(wide, plain, rtol=1e-4, atol=1e-6)


def _arch(**fields):
    return Architecture(norm="pre", norm_type="rms", mlp="gated", activation="silu", sigma_v2=1.0, heads=4, **fields)


def test_width_is_checked():
    arch = _arch()
    with pytest.raises(ValueError, match="width"):
        propagate_causal_gram(arch, 0.5, 1, 32, width=2)
    with pytest.raises(ValueError, match="width must be a multiple of heads"):
        propagate_causal_gram(arch, 0.5, 1, 32, width=66)
    with pytest.raises(ValueError, match="width must be at least 2 head_dim"):
        propagate_causal_gram(_arch(positions="rope", head_dim=32, seq_len=32), 0.5, 1, 32, width=48)
    with pytest.raises(ValueError, match="width needs method='fast'"):
        propagate_causal_gram(arch, 0.5, 1, 32, width=64, method="exact")
    with pytest.raises(ParameterError):
        propagate_causal_gram(arch, 0.5, 1, 32, width=float("nan"))


def test_width_is_recorded_and_counted():
    traj = propagate_causal_gram(_arch(), 0.5, 2, 32, width=64, last=8)
    assert traj.settings["width"] == 64 and np.all(np.isfinite(traj.rho))
    assert propagate_causal_gram(_arch(), 0.5, 2, 32, last=8).settings["width"] is None
    # the finite width draws m = d_H score columns and adds 2 d_H value columns
    assert causal_gram_flops(_arch(), 2, 512, width=64) != causal_gram_flops(_arch(), 2, 512)
