"""Rotary positions wired into Architecture, the kernels, the simulator, the CLI and the
LLaMA reader (docs/theory.md section 15).

With ``positions="rope"`` the REM of every attention row sees the overlap ``p cbar_T``
(``cbar_T = rope_mean_correlation(T, d_H, base)``); the output map keeps ``p`` and its
finite-T cross-overlap is ``1/T`` (``rope_softmax_attention_map``). The kernels against the
tree with RoPE are checked in tests/test_theory_kernels.py
(``test_kernels_follow_the_composed_block_with_rope``).
"""
import math

import numpy as np
import pytest

from remprop.theory import Architecture, components as C, final_state, model_spec, propagate
from remprop.theory import rope_softmax_attention_map
from remprop.theory.propagation import PARAMETER_COLUMNS, pack_parameters
from remprop.theory.rem import (beta_critical, participation_ratio, rope_beta_critical, rope_mean_correlation,
                                rope_participation_ratio)

T, D_H = 128, 64
ROPE = dict(positions="rope", seq_len=T, head_dim=D_H)


def test_absolute_positions_change_nothing_bit_for_bit():
    """The default packs cbar = 1 exactly; p * 1.0 == p, so RoPE's fields are inert: the
    kernels' results equal those of any other rope_base / head_dim, bit for bit."""
    base = Architecture(norm="pre", seq_len=T, alpha_sa=np.array([0.5, 1.0])[:, None])
    other = base.replace(rope_base=5e5, head_dim=D_H)
    assert base.positions == "absolute" and base.mean_rope_correlation == 1.0
    _, _, rows = pack_parameters(base, 1.0)
    assert np.all(rows(0, 2)[:, PARAMETER_COLUMNS["mean_rope_correlation"]] == 1.0)
    betas = np.array([0.5, 1.5, 3.0])
    a, b = propagate(base, betas, 6, rho0=0.4), propagate(other, betas, 6, rho0=0.4)
    for name in ("q", "p", "rho", "beta_critical"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    q, p = np.array([1.0, 2.0]), np.array([0.3, 1.9])
    np.testing.assert_array_equal(base.block_beta_critical(q, p), beta_critical(*base.attention_input(q, p)))


@pytest.mark.parametrize("attention", ["softmax", "gain-controlled"])
def test_the_attention_component_is_the_rope_map(attention):
    """The tree's attention with RoPE is rope_softmax_attention_map (the one home of the map):
    Y2 tabulated in the tree (relative error <= 1e-6) against the exact quadrature, so 1e-5.
    Gain-controlled attention reads the same Y2 (minus 1/T)."""
    arch = Architecture(attention=attention, **ROPE)
    cbar = rope_mean_correlation(T, D_H)
    assert arch.mean_rope_correlation == cbar and 0.3 < cbar < 0.8
    q, p, beta = np.array([1.0, 1.0, 2.0]), np.array([0.0, 0.5, 1.6]), 1.7
    qa, pa = arch.attention_map(beta)(q, p)
    y2 = rope_participation_ratio(beta, q, p, T, D_H)
    if attention == "softmax":
        q_ref, p_ref = rope_softmax_attention_map(beta, q=q, p=p, sigma_v2=arch.sigma_v2, sigma_b2=arch.sigma_b2,
                                                  seq_len=T, head_dim=D_H)
    else:
        q_ref, p_ref = C.gain_controlled_attention(beta, arch.sigma_v2, arch.sigma_b2, T)._attend(
            q, p, y2, arch.sigma_v2, arch.sigma_b2)
    np.testing.assert_allclose(qa, q_ref, rtol=1e-5)
    np.testing.assert_allclose(pa, p_ref, rtol=1e-5, atol=1e-5 * q.max())
    # p > 0: RoPE raises Y2 over the REM without positions, so it changes the map
    assert np.all(y2[1:] > participation_ratio(beta, q[1:], p[1:], T))


def test_critical_beta_is_the_rope_critical_beta_of_the_attention_input():
    arch = Architecture(norm="pre", **ROPE)
    q, p = np.array([0.5, 2.0, 3.0]), np.array([0.1, 1.0, 3.0])
    q_in, p_in = arch.attention_input(q, p)
    np.testing.assert_allclose(arch.block_beta_critical(q, p), rope_beta_critical(q_in, p_in, T, D_H), rtol=1e-15)
    # collapsed tokens freeze at a finite beta with RoPE (all of their score variance is positional)
    assert np.isfinite(arch.block_beta_critical(3.0, 3.0))
    traj = propagate(arch, 1.0, 5, rho0=0.3)
    np.testing.assert_allclose(traj.beta_critical, arch.block_beta_critical(traj.q[:-1], traj.p[:-1]), rtol=1e-12)
    final = final_state(arch, 1.0, 5, rho0=0.3)
    assert final["beta_critical_min"] == pytest.approx(traj.beta_critical.min(), rel=1e-12)
    assert arch.beta_critical(traj.beta_critical) == pytest.approx(traj.beta_critical.min(), rel=1e-12)


@pytest.mark.parametrize("fields, message", [
    (dict(positions="alibi"), "positions"),
    (dict(positions="rope", head_dim=64), "seq_len"),
    (dict(positions="rope", seq_len=64), "head_dim"),
    (dict(positions="rope", seq_len=64, head_dim=63), "head_dim must be even"),
    (dict(positions="rope", seq_len=64, head_dim=1), "head_dim"),
    (dict(rope_base=1.0), "rope_base must be > 1"),
    (dict(rope_base="x"), "rope_base"),
])
def test_invalid_rope_fields_name_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        Architecture(**fields)


def test_command_line_options():
    from remprop.cli.errors import CommandLineError
    from remprop.cli.options import OneLineArgumentParser, add_architecture_arguments, architecture_from_args

    parser = OneLineArgumentParser(prog="remprop")
    add_architecture_arguments(parser)
    args = parser.parse_args(["--positions", "rope", "--rope-base", "500000", "--head-dim", "64",
                              "--seq-len", "128"])
    arch = architecture_from_args(args)
    assert (arch.positions, arch.rope_base, arch.head_dim, arch.seq_len) == ("rope", 5e5, 64, 128)
    assert architecture_from_args(parser.parse_args([])).to_dict() == Architecture().to_dict()
    with pytest.raises(CommandLineError, match=r"head_dim.*option --head-dim"):
        architecture_from_args(parser.parse_args(["--positions", "rope", "--seq-len", "128"]))
    with pytest.raises(CommandLineError, match=r"seq_len is required.*option --seq-len"):
        architecture_from_args(parser.parse_args(["--positions", "rope", "--head-dim", "64"]))
    with pytest.raises(CommandLineError, match=r"rope_base must be > 1.*option --rope-base"):
        architecture_from_args(parser.parse_args(["--rope-base", "0.5"]))


def test_llama_configs_read_rotary_positions():
    spec = model_spec("llama-3.2-1b")
    arch = spec.architecture
    assert arch.positions == "rope" and arch.rope_base == spec.config["rope_theta"]
    assert arch.head_dim == spec.width // spec.heads
    assert not any("are ignored" in note and "rotary" in note for note in spec.assumptions)
    assert model_spec("gpt2").architecture.positions == "absolute"


# -- a simulated RoPE stack against propagate -------------------------------------------------
torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")

SEEDS = 3
#: Two-sided 95 % point of Student's t with SEEDS - 1 = 2 degrees of freedom: the seed mean
#: of a correct theory is within K standard errors of it with probability 0.95 per layer.
K = 4.30
#: Accuracy of the finite-T REM with RoPE for Y2 at cosines <= 0.6: 7 % (docs/theory.md
#: section 15, measured against real rotated attention).
Y2_LAW = 0.07
#: Finite-width bias of the mean cosine after each norm, < 0.23 / d (tests/test_validation_stack.py).
NORM_BIAS = 0.23 / 256


def test_simulated_rope_stack_follows_the_theory():
    """A LLaMA-like block (pre-RMSNorm, SwiGLU, two heads of d_H = 128) with RoPE, d = 256,
    T = 128, 4 layers, 3 seeds, beta = 2, rho0 = 0.5: the cosine per layer within
    K sem + the norms' bias, and the measured Y2 per layer within K sem + 7 % of the RoPE
    law, which the REM without positions misses (its Y2 is 25 % lower)."""
    from remprop.validation import compare
    from remprop.validation.settings import SimulationSettings

    torch.set_num_threads(min(2, torch.get_num_threads()))
    arch = Architecture(norm="pre", norm_type="rms", mlp="gated", activation="silu", sigma_b2=0.0, heads=2,
                        positions="rope", seq_len=128, head_dim=128)
    beta, depth = 2.0, 4
    c = compare(arch, beta, depth,
                sim=SimulationSettings(width=256, seq_len=128, device="cpu", seeds=SEEDS, sequences=1,
                                       inputs="synthetic", q0=1.0, rho0=0.5), observable="rho")
    sem = c.std("rho") / math.sqrt(SEEDS)
    tolerance = K * sem + 2 * np.arange(depth + 1) * NORM_BIAS + 1e-9
    assert np.all(c.error <= tolerance), (c.error, tolerance)

    y2 = c.trace.y2
    y2_mean, y2_sem = y2.mean(axis=0), y2.std(axis=0, ddof=1) / math.sqrt(SEEDS)
    q_in, p_in = arch.attention_input(c.theory.q[:-1], c.theory.p[:-1])
    rope = rope_participation_ratio(arch.effective_beta(beta), q_in, p_in, 128, 128)
    assert np.all(np.abs(y2_mean - rope) <= K * y2_sem + Y2_LAW * rope), (y2_mean, rope, y2_sem)
    absolute = participation_ratio(arch.effective_beta(beta), q_in, p_in, 128)
    assert np.any(np.abs(y2_mean - absolute) > K * y2_sem + Y2_LAW * absolute), (y2_mean, absolute)


def test_simulator_checks_the_rope_head_width():
    from remprop.validation.simulator import SimulatedStack
    from remprop.validation.settings import SimulationSettings

    arch = Architecture(heads=2, positions="rope", seq_len=64, head_dim=64)
    with pytest.raises(ValueError, match="head_dim = 64"):
        SimulatedStack(arch, 1.0, 2, sim=SimulationSettings(width=256, seq_len=64, device="cpu"))
    with pytest.raises(ValueError, match="softmax attention only"):
        SimulatedStack(arch.replace(attention="gain-controlled"), 1.0, 2,
                       sim=SimulationSettings(width=128, seq_len=64, device="cpu"))
    sim = SimulationSettings(width=128, seq_len=64, device="cpu")
    assert SimulatedStack(arch, 1.0, 2, sim=sim).rotate is not None
    assert SimulatedStack(Architecture(), 1.0, 2, sim=sim).rotate is None


def test_a_later_field_stays_out_of_the_stored_keys_while_unset():
    """``rotary_dim`` came after runs, cells and diagrams were stored with ``Architecture.to_dict()`` as
    their key: unset it is left out (those records resume and compare equal), set it is written and
    read back."""
    assert "rotary_dim" not in Architecture().to_dict()
    assert Architecture(**Architecture().to_dict()).to_dict() == Architecture().to_dict()
    partial = Architecture(positions="rope", head_dim=64, rotary_dim=16, seq_len=128)
    assert partial.to_dict()["rotary_dim"] == 16 and Architecture(**partial.to_dict()).rotary_dim == 16
