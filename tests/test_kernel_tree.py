"""The depth kernels take any tree of components: the tree is lowered to a program that one
compiled interpreter runs.

A component defined here, outside remprop.theory.components, reaches the kernels through the
tree that holds it (its kernel face is a method of its own, composing the tape's instructions;
there is no registry of components); the kernels' results equal the tree iterated in NumPy to
1e-12 (same maps, same order: round-off only). Every architecture runs in the same compiled
sweeps, and their on-disk cache keys are the same in every process (numba hashes the pickled
closure cells of each sweep).
"""
from __future__ import annotations

import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from remprop.theory import Architecture
from remprop.theory import components as C
from remprop.theory.components import Column, Component
from remprop.theory.kernels import PARAMS, kernels_for, packed_table, propagate_tree
from remprop.theory.propagation import kernel_tree, pack_parameters

TOL = 1e-12


@dataclass(repr=False)
class ScaledIdentity(Component):
    """``x -> c x`` as a branch: ``(q, p) -> (gain q, gain p)`` with ``gain = c**2``."""

    gain: object
    name = "scaled_identity"

    def apply(self, q, p):
        return self.gain * q, self.gain * p

    def kernel(self, tape):
        tape.dense(self.gain, 0.0)  # gain q + 0: the library's dense instruction, bit for bit


def iterate(tree, depth, q0, p0):
    """The tree applied ``depth`` times in NumPy: q and p of shape (depth + 1,)."""
    qs, ps = [q0], [p0]
    for _ in range(depth):
        q, p = tree(qs[-1], ps[-1])
        qs.append(float(q))
        ps.append(float(p))
    return np.array(qs), np.array(ps)


TOY_TREES = {
    # no norm: the toy branch and softmax attention in series (no carried scale: constants)
    "post": C.serial(C.residual(0.8, ScaledIdentity(0.5)), C.layer_norm(),
                     C.residual(1.0, C.softmax_attention(1.4, 0.6, 0.01)), C.layer_norm()),
    # pre-norm branches with the toy after the norm: the stream's scale is carried by the skips
    "pre": C.serial(C.residual(1.1, C.serial(C.rms_norm(), ScaledIdentity(0.7))),
                    C.residual(1.0, C.serial(C.layer_norm(), C.gain_controlled_attention(2.0, 0.5, 0.02)))),
    # parallel branches, three of them, one of which is the toy (finite T)
    "parallel": C.parallel(1.0, C.serial(C.layer_norm(), C.softmax_attention(1.2, 0.5, 0.01, seq_len=32)),
                           C.serial(C.layer_norm(), ScaledIdentity(0.3)),
                           C.serial(C.layer_norm(), C.mlp(0.9, 0.01, "tanh"))),
}


@pytest.mark.parametrize("name", sorted(TOY_TREES))
def test_a_component_defined_outside_the_library_reaches_the_kernels(name):
    tree = TOY_TREES[name]
    q, p, beta_c = propagate_tree(tree, 10, q0=[1.3, 0.4], p0=[0.2, 0.3], seq_len=32 if name == "parallel" else None)
    assert q.shape == p.shape == (2, 11) and beta_c.shape == (2, 10)
    for cell, (q0, p0) in enumerate([(1.3, 0.2), (0.4, 0.3)]):
        q_tree, p_tree = iterate(tree, 10, q0, p0)
        np.testing.assert_allclose(q[cell], q_tree, rtol=TOL, atol=0)
        error = np.abs(p[cell] - p_tree) / q_tree   # p relative to the scale q
        assert np.all(error <= TOL), f"p: worst error / q {error.max():.3g}"
        assert np.all(np.isfinite(beta_c[cell]))  # every block has one attention


def test_a_custom_component_reads_a_column_of_the_packed_rows():
    """The toy's gain a Column: one compiled kernel for a whole grid of gains."""
    tree = C.serial(C.residual(Column("alpha_sa"), C.serial(C.layer_norm(), ScaledIdentity(Column("sigma_v2")))),
                    C.layer_norm())
    kernels = kernels_for(tree)
    assert kernels.columns == ("sigma_v2", "alpha_sa") and not kernels.finite
    gains, alphas = np.array([0.2, 0.9, 3.0]), np.array([0.0, 0.5, 1.5])
    params = np.zeros((3, len(PARAMS)))
    params[:, PARAMS.index("sigma_v2")], params[:, PARAMS.index("alpha_sa")] = gains, alphas
    params[:, PARAMS.index("q0")], params[:, PARAMS.index("p0")] = 2.0, 0.5
    out = kernels.final_states(params, 7)
    for cell in range(3):
        numbers = C.serial(C.residual(alphas[cell], C.serial(C.layer_norm(), ScaledIdentity(gains[cell]))),
                           C.layer_norm())
        q_tree, p_tree = iterate(numbers, 7, 2.0, 0.5)
        assert out[cell, 0] * 2.0 ** out[cell, 4] == pytest.approx(q_tree[-1], rel=TOL)
        assert out[cell, 1] * 2.0 ** out[cell, 4] == pytest.approx(p_tree[-1], rel=TOL)
        assert out[cell, 2] == out[cell, 3] == math.inf  # no attention


def test_a_custom_pre_norm_stream_carries_its_scale():
    """q grows like 1.5**(2L) past the kernels' 2**128 window: the skip multiplies the toy's
    normalised branch by the carried scale, exactly (powers of two)."""
    tree = C.residual(1.5, C.serial(C.layer_norm(), ScaledIdentity(2.0)))
    assert tree.carries_scale
    params = np.zeros((1, len(PARAMS)))
    params[0, PARAMS.index("q0")], params[0, PARAMS.index("p0")] = 1.0, 0.25
    q, p, exponent, _ = kernels_for(tree).trajectories(params, 250)
    assert exponent[0, -1] > 150
    q_tree, p_tree = iterate(tree, 250, 1.0, 0.25)
    np.testing.assert_allclose(np.log2(q[0]) + exponent[0], np.log2(q_tree), rtol=TOL)
    np.testing.assert_allclose(p[0] / q[0], p_tree / q_tree, rtol=TOL)


def test_kernels_are_shared_by_structure():
    base = Architecture(norm="pre", seq_len=64)
    assert kernels_for(kernel_tree(base)) is kernels_for(kernel_tree(base.replace(seq_len=512, sigma_w2=0.9)))
    assert kernels_for(kernel_tree(base)) is not kernels_for(kernel_tree(base.replace(seq_len=None)))
    assert kernels_for(kernel_tree(base)) is not kernels_for(kernel_tree(base.replace(sigma_o2=0.5)))
    assert kernels_for(kernel_tree(base)).finite and kernels_for(kernel_tree(base)).columns == (
        "beta", "sigma_w2", "sigma_b2", "sigma_v2", "alpha_sa", "alpha_mlp")
    # the tree of an architecture is its block with a column per number
    assert repr(kernel_tree(base)) == repr(base.block(1.0))


def test_kernel_tree_errors_name_their_cause():
    class Opaque(Component):
        def apply(self, q, p):
            return q, p

    with pytest.raises(NotImplementedError, match="no kernel face"):
        kernels_for(C.serial(Opaque(), C.layer_norm()))
    with pytest.raises(ValueError, match="numbers or Column"):
        kernels_for(C.residual(np.array([0.5, 1.0]), C.layer_norm()))
    with pytest.raises(ValueError, match="not a column"):
        kernels_for(C.residual(Column("gamma"), C.layer_norm()))
    with pytest.raises(ValueError, match="columns"):
        propagate_tree(kernel_tree(Architecture()), 3)
    with pytest.raises(ValueError, match="tree must be a component"):
        kernels_for("post")
    with pytest.raises(ValueError, match="seq_len"):
        propagate_tree(TOY_TREES["parallel"], 2)
    with pytest.raises(ValueError, match="shape"):
        kernels_for(TOY_TREES["post"]).final_states(np.zeros((2, 5)), 3)


_CACHE_KEYS = """
import hashlib, sys
from remprop.theory import Architecture
from remprop.theory.kernels import kernels_for
from remprop.theory.kernels._engine import ENGINE
from remprop.theory.propagation import kernel_tree
archs = [Architecture(), Architecture(norm="pre", seq_len=64, positions="rope", head_dim=16, block_form="parallel"),
         Architecture(norm="none", mlp="gated", activation="silu", seq_len=32, qk_norm=True, head_dim=8,
                      branch_norm=True, sigma_o2=0.5)]
for arch in archs[::int(sys.argv[1])]:
    assert kernels_for(kernel_tree(arch)).cacheable
for sweep in ENGINE:
    print(sweep.py_func.__module__, sweep.py_func.__qualname__, sweep.py_func.__closure__,
          hashlib.sha256(sweep.py_func.__code__.co_code).hexdigest())
"""


def test_every_architecture_runs_in_one_engine_with_the_same_cache_keys_in_every_process():
    """One compiled interpreter serves every tree of built-in components (no tree compiles code of
    its own); numba's index key of a cached sweep hashes its bytecode and its closure: the sweeps are
    module-level functions without one, and two fresh processes (lowering the trees in the other
    order) must agree, or the on-disk cache would miss and grow on every run."""
    runs = [subprocess.run([sys.executable, "-c", _CACHE_KEYS, order], capture_output=True, text=True, check=True,
                           cwd=Path(__file__).parent).stdout.split("\n") for order in ("1", "-1")]
    first, second = (sorted(line for line in run if line) for run in runs)
    assert len(first) == 3 and len(set(first)) == 3
    assert all(line.startswith("remprop.theory.kernels._engine ") and " None " in line for line in first), first
    assert first == second
    # the cache folder is named after the theory's sources: an edit to a component's core (which the
    # cached sweeps reach as globals, outside the file numba keys them on) compiles them again
    import numba

    from remprop.theory._jit import CACHE, source_digest
    from remprop.theory.kernels._engine import ENGINE

    if CACHE:
        assert Path(numba.config.CACHE_DIR).name == f"theory-{source_digest()}"
        assert all(Path(sweep._cache._cache_path).is_relative_to(numba.config.CACHE_DIR) for sweep in ENGINE)


def test_a_user_activation_runs_in_the_same_compiled_sweeps():
    """Before: a tree with a user-registered activation ran in an interpreter compiled for it (every
    process, about 15 s on two cores). After: the same sweeps, one signature for every program; only the
    activation's moments are compiled (a first-class function argument), and the kernel agrees with
    the tree iterated in NumPy (to 1e-12, as every kernel test)."""
    from remprop.theory import register_activation
    from remprop.theory.kernels._engine import ENGINE

    def softsign_tree_test(x):
        return x / (1.0 + abs(x))

    name = "softsign-kernel-tree-test"
    if name not in __import__("remprop.theory", fromlist=["ACTIVATIONS"]).ACTIVATIONS:
        register_activation(name, softsign_tree_test, parity="odd")
    builtin = C.serial(C.mlp(0.5, 0.1, "tanh"), C.layer_norm())
    user = C.serial(C.mlp(0.5, 0.1, name), C.layer_norm())
    _, p_builtin, _ = propagate_tree(builtin, 3, 1.0, 0.3)
    q, p, _ = propagate_tree(user, 3, 1.0, 0.3)
    assert len(ENGINE[0].signatures) == 1, ENGINE[0].signatures
    expected_q, expected_p = 1.0, 0.3
    for _ in range(3):
        expected_q, expected_p = user(expected_q, expected_p)
    assert q[-1] == pytest.approx(expected_q, rel=1e-12) and p[-1] == pytest.approx(expected_p, rel=1e-12)
    assert p[-1] != p_builtin[-1]  # the user's moments were called, not the stand-in or tanh's


def test_a_program_is_data():
    """The lowered tree is op codes, operand slots and constants: a post-LN block is two skips, two
    norms, one attention and one MLP, with the skip's input pushed before each branch."""
    from remprop.theory.kernels import _tape

    program = kernels_for(kernel_tree(Architecture())).program
    codes = [int(code) for code in program.ops[:, 0]]
    assert codes == [_tape.OP_PUSH, _tape.OP_ATTENTION, _tape.OP_SKIP, _tape.OP_NORM,
                     _tape.OP_PUSH, _tape.OP_MLP, _tape.OP_SKIP, _tape.OP_NORM]
    assert program.stack == 1 and program.mode == _tape.NO_SCALE and not program.finite
    # the skips before a norm are read up to scale (post-LN: a norm follows each)
    assert all(program.ops[i, 1] == _tape.SKIP_SCALE_FREE for i in (2, 6))
    with pytest.raises(ValueError, match="pops an empty stack"):
        _tape.Tape().skip(1.0)
