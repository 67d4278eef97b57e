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

``RandomProjection`` (``x -> x W^T``, ``W ~ N(0, c^2 / d)``) is a toy with weights and a Gram face:
it draws into a slot of its own, which the block's draw and forward find through the tree, and
the Gram state walks it. A real component added the same way, DyT (theory/components/dyt.py,
one module and its registration in ``NormType``), is then chosen through ``Architecture``
(``norm_type="dyt"``) and reaches every face from there.
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


@dataclass(repr=False)
class RandomProjection(Component):
    """``x -> x W^T`` with ``W ~ N(0, c^2 / d)`` (d x d, no bias): ``(q, p) -> (c^2 q, c^2 p)`` in the mean
    over ``W``, a layer with weights (its own slot) and a Gram face."""

    variance: object  # c^2
    name = "random_projection"
    weight_slot = "toy_projection"  # a key of BlockWeights.extra
    draw_rank = 3  # after the library's attention, MLP and output projection

    def apply(self, q, p):
        return self.variance * q, self.variance * p

    def kernel(self, tape):
        tape.dense(self.variance, 0.0)

    def gram(self, walker, g):
        return self.variance * g  # E_W[W x_i . W x_j / d] = c^2 x_i . x_j / d, pair by pair

    def torch_weights(self, sim):
        return sim.ops.draw_output_projection(sim.generator, sim.width, float(self.variance), dtype=sim.dtype,
                                              device=sim.device)

    def torch_forward(self, x, sim):
        weight = sim.weights_of(self)
        return (x.reshape(-1, x.shape[-1]) @ weight.T).view(x.shape)


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


# -- a toy with weights and a Gram face ------------------------------------------------------------
def projected_block():
    """Pre-norm attention, then the projection toy in the stream, then the MLP sublayer."""
    return C.serial(C.residual(1.0, C.serial(C.layer_norm(), C.softmax_attention(0.8, 0.5, 0.01))),
                    RandomProjection(parameter("variance", 0.7, nonnegative=True)),
                    C.residual(0.9, C.serial(C.layer_norm(), C.mlp(0.7, 0.01, "relu"))))


def test_the_torch_stack_draws_and_runs_a_toy_with_weights():
    torch = pytest.importorskip("torch", reason="the torch face needs the validation extra")
    from remprop.validation import layers
    from remprop.validation.backend import generator
    from remprop.validation.registry import BlockContext, BlockSizes, draw_block_weights, simulate_component

    tree, width, seq_len = projected_block(), 32, 16
    sizes = BlockSizes(generator(0, 0, 0), width, 48, torch.float64, torch.device("cpu"), 0.8, seq_len)
    weights = draw_block_weights(tree, BlockContext(sizes=sizes))
    projection = weights.extra["toy_projection"]  # its own slot, found through the tree
    assert projection.shape == (width, width) and set(weights.extra) == {"toy_projection"}
    # drawn after the library's weights: the attention's and the MLP's draws are those of the block without it
    bare = draw_block_weights(block(), BlockContext(sizes=BlockSizes(generator(0, 0, 0), width, 48, torch.float64,
                                                                     torch.device("cpu"), 0.8, seq_len)))
    assert torch.equal(bare.attention.query, weights.attention.query) and torch.equal(bare.mlp.w1, weights.mlp.w1)
    x = torch.randn(2, seq_len, width, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    out = simulate_component(tree, x, BlockContext(weights=weights))
    attended = layers.skip(x, layers.softmax_attention(layers.layer_norm(x), weights.attention)[0], 1.0)
    projected = (attended.reshape(-1, width) @ projection.T).view(attended.shape)
    expected = layers.skip(projected, layers.mlp(layers.layer_norm(projected), weights.mlp, "relu"), 0.9)
    assert torch.equal(out, expected)


def test_the_gram_state_walks_the_toy():
    """The Gram walker reaches the toy's Gram face through the tree: a simplex through the block is the
    numeric map (the control variate is zero on a simplex), and the toy alone is c^2 G on any G."""
    from remprop.theory.gram_state import _GramWalker  # the walker itself: the toy is in no Architecture

    t = 8
    g = 1.3 * 0.8 * np.eye(t) + 1.3 * 0.2
    walker = _GramWalker(4, np.random.default_rng(0), "relu")
    toy = RandomProjection(0.7)
    rng = np.random.default_rng(1)
    x = rng.standard_normal((t, 5))
    np.testing.assert_array_equal(walker.apply(C.serial(toy, toy), x @ x.T), 0.7 * (0.7 * (x @ x.T)))
    tree = C.serial(C.residual(1.0, C.serial(C.layer_norm(), C.softmax_attention(0.8, 0.5, 0.01, seq_len=t))),
                    toy, C.residual(0.9, C.serial(C.layer_norm(), C.mlp(0.7, 0.01, "relu"))))
    out = walker.apply(tree, g)
    q, p = tree(1.3, 1.3 * 0.2)
    np.testing.assert_allclose(np.diag(out), float(q), rtol=1e-12)
    np.testing.assert_allclose(out[~np.eye(t, dtype=bool)], float(p), rtol=1e-12)


# -- a real one, chosen through Architecture: DyT ---------------------------------------------------
def test_an_architecture_choice_reaches_every_face_of_its_component():
    """norm_type="dyt": the block tree holds DyT (theory/components/dyt.py) wherever the norm goes; the numeric
    map, the kernels (1e-12), the sympy walk, the Gram state (a simplex: to rounding) and the torch stack
    (bit for bit against tanh(a0 x) by hand) run it with no edit outside its module and its registration."""
    from remprop.theory import Architecture, propagate, propagate_gram
    from remprop.theory.components import DyT

    arch = Architecture(norm="pre", norm_type="dyt", dyt_alpha0=0.6, final_norm=True, seq_len=16)
    tree = arch.block(0.7)
    norms = [leaf for layer in tree.layers for leaf in layer.branch.layers if isinstance(leaf, DyT)]
    assert len(norms) == 2 and all(float(n.alpha0) == 0.6 for n in norms)
    assert isinstance(arch.final_layer(), DyT) and arch.norm.label(arch.norm_type) == "pre-DyT"
    traj = propagate(arch.replace(final_norm=False), 0.7, 5, q0=1.3, rho0=0.2)
    q, p = 1.3, 1.3 * 0.2
    for layer in range(5):
        q, p = tree(q, p)
        assert float(traj.q[layer + 1]) == pytest.approx(float(q), rel=TOL)
        assert float(traj.p[layer + 1]) == pytest.approx(float(p), rel=TOL)
    gram = propagate_gram(arch.replace(final_norm=False), 0.7, 1.3 * 0.8 * np.eye(16) + 1.3 * 0.2, 5)
    np.testing.assert_allclose(gram.q, traj.q, rtol=1e-12)
    # sympy: with linear "moments" DyT is the scaled identity a0^2 (q, p), exactly
    qs, ps = sp.symbols("q p", positive=True)
    linear = SymbolicContext(moments=lambda activation, q1, p1: (q1, p1))
    q_sym, p_sym = norms[0].symbolic(qs, ps, linear)
    assert sp.simplify(q_sym - sp.Float(0.36) * qs) == 0 and sp.simplify(p_sym - sp.Float(0.36) * ps) == 0


def test_the_torch_stack_runs_the_architecture_choice():
    torch = pytest.importorskip("torch", reason="the torch face needs the validation extra")
    from remprop.theory import Architecture
    from remprop.validation import layers
    from remprop.validation.settings import SimulationSettings
    from remprop.validation.simulator import SimulatedStack

    arch = Architecture(norm="pre", norm_type="dyt", dyt_alpha0=0.6, final_norm=True)
    stack = SimulatedStack(arch, 0.7, 1, sim=SimulationSettings(width=16, seq_len=8, dtype="float64", device="cpu"))
    weights = stack.weights(0)
    assert not weights.extra  # DyT at initialisation draws nothing: gamma = 1, beta = 0, a = a0
    x = torch.randn(1, 8, 16, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    dyt = lambda u: (u * 0.6).tanh()  # noqa: E731
    attended = layers.skip(x, layers.softmax_attention(dyt(x), weights.attention)[0], 1.0)
    expected = layers.skip(attended, layers.mlp(dyt(attended), weights.mlp, "relu"), 1.0)
    assert torch.equal(stack.forward(x), dyt(expected))  # the block, then the final DyT
