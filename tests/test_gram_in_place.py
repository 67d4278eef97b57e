"""The fast causal Gram state's in-place pair maps (theory/_gram_in_place.py) against the numpy maps.

They evaluate the same cores entry by entry, so they must agree to rounding (1e-12 relative: a few
float64 operations per entry in another order); the masked softmax runs in float32, so it agrees to
float32 rounding (1e-6 relative, about 16 ulp).
"""
import numpy as np
import pytest

from remprop.theory import _gram_in_place as in_place
from remprop.theory._causal_gram import _CausalGramWalker
from remprop.theory.activations.pair_moments import pair_moments_table
from remprop.theory.components import dense, gated_mlp, mlp, residual


def _gram(t=40, spread=0.6, seed=0):
    """A Gram matrix of ``t`` tokens whose norms spread over a factor ``e^spread``."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((t, 64)) + 0.5 * rng.standard_normal(64)
    x *= np.exp(spread * rng.random(t))[:, None] / 8.0
    return x @ x.T / 64


def _numpy_mlp(comp, g):
    """The table path of the numpy walker: ``comp._two_layers`` on the rows' variances, the diagonal
    replaced by the per-token map."""
    diag = np.diag(g)
    rows = np.broadcast_to(diag[:, None], g.shape)

    def moments(q1, p1):
        from remprop.theory.activations import activation_spec, moments_array

        m2 = np.broadcast_to(moments_array(activation_spec(comp.activation).code, np.diag(q1), np.diag(q1))[0][:, None],
                             q1.shape)
        return m2, pair_moments_table(comp.activation, np.diag(q1), p1)
    q_out, g_out = comp._two_layers(rows, g, moments, lambda value: value)
    g_out = np.array(g_out)
    np.fill_diagonal(g_out, np.diag(q_out))
    return g_out


@pytest.mark.parametrize("comp", [gated_mlp(1.3, 0.01, "silu", 0.7), mlp(0.9, 0.02, "gelu"), gated_mlp(1.0, 0.0, "gelu")])
@pytest.mark.parametrize("overwrite", [False, True])
def test_fast_mlp_equals_the_numpy_table_path(comp, overwrite):
    g = _gram()
    expected = _numpy_mlp(comp, g)
    walker = _CausalGramWalker(1, np.random.default_rng(0), comp.activation, fast=True)
    given = g.copy()
    out = walker.mlp(comp, given, overwrite=overwrite)
    np.testing.assert_allclose(out, expected, rtol=1e-12, atol=0)
    assert (out is given) == overwrite
    if not overwrite:
        np.testing.assert_array_equal(given, g)   # the walker's input untouched


def test_dense_skip_and_symmetrisation_in_place():
    g = _gram(seed=1)
    walker = _CausalGramWalker(1, np.random.default_rng(0), "silu", fast=True)
    layer = dense(0.8, 0.03)
    np.testing.assert_allclose(walker.dense(layer, g), layer.apply(g, g)[1], rtol=1e-15)
    branch = _gram(seed=2)
    block = residual(0.7, layer)
    expected = branch + 0.49 * g
    in_place.skip_in_place(branch, g, 0.7)
    np.testing.assert_allclose(branch, expected, rtol=1e-15)
    block_out = walker.residual(block, g)
    np.testing.assert_allclose(block_out, layer.apply(g, g)[1] + 0.49 * g, rtol=1e-15)
    skew = np.random.default_rng(3).standard_normal((70, 70))   # tiles of 64: a partial tile too
    expected = 0.5 * (skew + skew.T)
    assert in_place.symmetrise(skew)
    np.testing.assert_array_equal(skew, expected)
    skew[5, 66] = np.nan
    assert not in_place.symmetrise(skew)


@pytest.mark.parametrize("cap", [0.0, 1.5])
def test_masked_softmax_equals_numpy(cap):
    rng = np.random.default_rng(4)
    s = (3.0 * rng.standard_normal((30, 50))).astype(np.float32)
    seen = rng.random((30, 50)) < 0.4
    seen[np.arange(30), rng.integers(0, 50, 30)] = True   # every row sees a key
    capped = s.astype(np.float64) if cap == 0 else cap * np.tanh(s.astype(np.float64) / cap)
    masked = np.where(seen, capped, -np.inf)
    expected = np.exp(masked - masked.max(axis=1, keepdims=True))
    expected /= expected.sum(axis=1, keepdims=True)
    in_place.masked_softmax(s, seen, np.float32(cap))
    np.testing.assert_allclose(s, expected, rtol=1e-6, atol=1e-9)
    assert np.all(s[~seen] == 0)
