"""Adding a component is one module: a toy defined here reaches every face with no other edit.

``ScaledIdentity`` (``x -> c x``, so ``(q, p) -> (c^2 q, c^2 p)``) is written in this test module
only, with its faces: the numeric map (``apply``), the sympy walk (``symbolic``), the numba kernel
step (``kernel``) and the torch forward (``torch_forward``). Placed in a block tree beside the
library's own components, it is run by the numpy maps, the depth kernels
(:func:`remprop.theory.kernels.propagate_tree`), the symbolic walk and the torch stack
(:func:`remprop.validation.registry.draw_block_weights`, ``simulate_component``), none of which
knows its name (docs/architecture.md, "How to add a component"). The comparisons are exact up to
round-off: the same maps in the same order (kernels 1e-12 relative), the same torch operations on
the same drawn weights (bit for bit).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest
import sympy as sp

from remprop.theory import components as C
from remprop.theory.components import Component
from remprop.theory.components.base import parameter
from remprop.theory.kernels import propagate_tree
from remprop.theory.symbolic import SymbolicContext

TOL = 1e-12  # kernels against the tree: the same maps in the same order, round-off only


@dataclass(repr=False)
class ScaledIdentity(Component):
    """``x -> c x``: ``(q, p) -> (c^2 q, c^2 p)``, a layer without weights."""

    gain: object  # c^2, checked by parameter() (sympy expressions and kernel columns pass through)
    name = "scaled_identity"

    def apply(self, q, p):
        return self.gain * q, self.gain * p

    def symbolic(self, q, p, symbols):
        gain = symbols.parameter(self.gain)
        return gain * q, gain * p

    def kernel(self, tape):
        tape.dense(self.gain, 0.0)  # c^2 q + 0: composed from the library's dense instruction

    def torch_forward(self, x, sim):
        return x * math.sqrt(float(self.gain))


def scaled_identity(gain):
    """The toy's constructor: its parameter checked as the library's are."""
    return ScaledIdentity(parameter("gain", gain, nonnegative=True))


def block(seq_len=None):
    """A pre-norm block with the toy in the stream after attention, then an MLP."""
    return C.serial(C.residual(1.0, C.serial(C.layer_norm(), C.softmax_attention(0.8, 0.5, 0.01, seq_len=seq_len))),
                    scaled_identity(0.6),
                    C.residual(0.9, C.serial(C.layer_norm(), C.mlp(0.7, 0.01, "relu"))))


def test_the_toy_checks_its_parameter_like_the_library():
    with pytest.raises(ValueError, match="^gain must be >= 0"):
        scaled_identity(-1.0)


def test_the_numeric_map_runs_the_toy_in_the_tree():
    q, p = scaled_identity(0.25)(2.0, 1.0)
    assert (float(q), float(p)) == (0.5, 0.25)
    # in the block: the attention sublayer, then exactly the toy's factor, then the MLP sublayer
    tree = block()
    q1, p1 = tree.layers[0](1.3, 0.2)
    q2, p2 = tree.layers[1](q1, p1)
    assert (float(q2), float(p2)) == (0.6 * float(q1), 0.6 * float(p1))
    np.testing.assert_allclose(tree(1.3, 0.2), tree.layers[2](q2, p2), rtol=0, atol=0)


@pytest.mark.parametrize("seq_len", [None, 64])
def test_the_kernels_compose_the_toy_from_the_tree(seq_len):
    tree = block(seq_len)
    q, p, beta_c = propagate_tree(tree, 12, q0=[1.3, 0.5], p0=[0.2, 0.4], seq_len=seq_len)
    for cell, (q_in, p_in) in enumerate([(1.3, 0.2), (0.5, 0.4)]):
        qs, ps = [q_in], [p_in]
        for _ in range(12):
            q_next, p_next = tree(qs[-1], ps[-1])
            qs.append(float(q_next))
            ps.append(float(p_next))
        np.testing.assert_allclose(q[cell], qs, rtol=TOL, atol=0)
        assert np.all(np.abs(p[cell] - ps) <= TOL * np.array(qs))
        assert np.all(np.isfinite(beta_c[cell]))


def test_the_symbolic_walk_runs_the_toy():
    q, p, gain = sp.symbols("q p gain", positive=True)
    q_out, p_out = ScaledIdentity(gain).symbolic(q, p, SymbolicContext())
    assert sp.simplify(q_out - gain * q) == 0 and sp.simplify(p_out - gain * p) == 0
    # in a tree with library components, numbers substituted give the numeric map
    tree = C.serial(C.residual(1.2, C.serial(C.layer_norm(), C.mlp(0.7, 0.01, "relu"))), scaled_identity(0.6))
    q_sym, p_sym = tree.symbolic(q, p, SymbolicContext())
    q_num, p_num = tree(1.3, 0.2)
    assert float(q_sym.subs({q: 1.3, p: 0.2})) == pytest.approx(float(q_num), rel=1e-12)
    assert float(p_sym.subs({q: 1.3, p: 0.2})) == pytest.approx(float(p_num), rel=1e-12)


def test_the_torch_stack_runs_the_toy():
    torch = pytest.importorskip("torch", reason="the torch face needs the validation extra")
    from remprop.validation import layers
    from remprop.validation.backend import generator
    from remprop.validation.registry import BlockContext, BlockSizes, draw_block_weights, simulate_component

    tree, width, seq_len = block(), 32, 16
    sizes = BlockSizes(generator(0, 0, 0), width, 48, torch.float64, torch.device("cpu"), 0.8, seq_len)
    weights = draw_block_weights(tree, BlockContext(sizes=sizes))
    assert weights.attention is not None and weights.mlp is not None and not weights.extra  # the toy draws none
    x = torch.randn(2, seq_len, width, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    out = simulate_component(tree, x, BlockContext(weights=weights))
    # the same torch functions on the same weights, by hand: the toy is the factor sqrt(0.6)
    attended = layers.skip(x, layers.softmax_attention(layers.layer_norm(x), weights.attention)[0], 1.0)
    scaled = attended * math.sqrt(0.6)
    expected = layers.skip(scaled, layers.mlp(layers.layer_norm(scaled), weights.mlp, "relu"), 0.9)
    assert torch.equal(out, expected)
