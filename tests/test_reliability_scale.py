"""Issue 15, item 1: deep pre-LN and no-LN streams carry their scale; the ReLU map near rho = 1.

Before: pre-LN at alpha 1.2 gave NaN from layer ~1950 and the diagram labelled those cells
rank-collapsed; the no-LN defaults gave NaN from layer ~3530 and ``min-alpha --norm none
--depth 10000`` answered "no alpha up to 1000". The kernels now carry ``(q, p) 2**e``
(remprop.theory.kernels, "The carried scale"): multiplying by a power of two is exact, so
the scaled run must equal the unscaled maps to round-off wherever the latter is finite,
and stay finite beyond.
"""
import json
import math
import subprocess
import sys

import mpmath
import numpy as np
import pytest

from kernel_checks import assert_propagate_matches_block
from remprop.diagrams import alpha_star, trainability_diagram
from remprop.diagrams.phases import RANK_COLLAPSE, TRAINABLE
from remprop.theory import DEFAULT_THRESHOLD, Architecture, final_state, propagate
from remprop.theory.activations.closed_form import relu_kernel_core
from remprop.theory.kernels import SCALE_EXPONENT


@pytest.mark.parametrize("seq_len", [None, 64])
@pytest.mark.parametrize("norm, alpha, depth", [("pre", 1.2, 1500), ("none", 1.0, 2500)])
def test_rescaled_stream_equals_the_block_maps(norm, alpha, depth, seq_len):
    # q passes 2**SCALE_EXPONENT (the first rescale) well before `depth` and stays below
    # float64's 2**1024, so the plain maps of Architecture.block are a valid reference.
    arch = Architecture(norm=norm, alpha_sa=alpha, seq_len=seq_len)
    traj = assert_propagate_matches_block(arch, [0.3, 1.0], depth, rho0=0.1)
    assert np.all(traj.log2_q[..., -1] > 2 * SCALE_EXPONENT)
    assert np.all(traj.log2_q[..., -1] < 1023)


@pytest.mark.parametrize("norm, alpha", [("pre", 1.2), ("none", 1.0)])
def test_deep_streams_stay_finite(norm, alpha):
    # 10000 layers leave float64 (log2 q ~ 5260 pre-LN, ~2900 no LN): q reads inf, but the
    # cosine and log2 q stay finite, and log2 q grows like the residual stream should.
    arch = Architecture(norm=norm, alpha_sa=alpha)
    traj = propagate(arch, [0.05, 0.5], 10000)
    assert np.all(np.isfinite(traj.rho)) and np.all(np.isfinite(traj.log2_q))
    assert np.all((traj.rho >= 0) & (traj.rho <= 1))
    assert np.all(np.diff(traj.log2_q, axis=-1)[..., 100:] > 0)
    if norm == "pre":
        # q_{l+1} = alpha^2 q_l + O(1): log2 q gains 2 log2(alpha) per layer once q >> 1
        slope = (traj.log2_q[..., -1] - traj.log2_q[..., 5000]) / 5000
        np.testing.assert_allclose(slope, 2 * math.log2(alpha), rtol=1e-9)
        # the branches' share falls like alpha^(-2L) (2^-1315 at layer 2500): from there on
        # only the skip's rounding moves the cosine, an ulp-sized random walk over 7500
        # layers (~sqrt(7500) eps ~ 2e-14)
        np.testing.assert_allclose(traj.rho[..., -1], traj.rho[..., 2500], rtol=1e-12)
    state = final_state(arch, [0.05, 0.5], 10000)
    np.testing.assert_array_equal(state["rho"], traj.rho[..., -1])
    np.testing.assert_array_equal(state["log2_q"], traj.log2_q[..., -1])


def test_no_ln_scale_invariance_without_biases():
    # Without biases every no-LN map is homogeneous in q given beta sqrt(q (q - p)):
    # q0 -> c q0 with beta -> beta / c leaves each layer's cosine unchanged and shifts
    # log2 q by log2 c. c = 2^-600 starts far below the rescale window (downward scale).
    arch = Architecture(norm="none", sigma_b2=0.0)
    plain = propagate(arch, 0.7, 400, q0=1.0, rho0=0.2)
    shifted = propagate(arch, 0.7 * 2.0 ** 600, 400, q0=2.0 ** -600, rho0=0.2)
    np.testing.assert_allclose(shifted.rho, plain.rho, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(shifted.log2_q, plain.log2_q - 600, rtol=0, atol=1e-9)


def test_deep_pre_ln_diagram_is_not_called_rank_collapsed():
    # `remprop diagram --norm pre --depth 10000 --beta 0.05,0.5 --alpha 1.2` labelled
    # both cells rank-collapsed (NaN) while alpha* = 1.0006 < 1.2 in the same run.
    arch = Architecture(norm="pre")
    diagram = trainability_diagram(arch, [0.05, 0.5], [1.2], 10000)
    assert np.all(np.isfinite(diagram.rho_final))
    assert np.all(diagram.rho_final < DEFAULT_THRESHOLD)
    assert not np.any(diagram.phase == RANK_COLLAPSE)
    star = alpha_star(arch, 0.05, 10000)
    assert 1.0 < float(star) < 1.2
    assert diagram.phase[0, 0] == TRAINABLE


def test_deep_no_ln_min_alpha_brackets_the_crossing():
    # No-LN defaults, depth 3000: the old search lowered its bound where the state
    # overflowed and answered 1.0214, where rho_L is NaN. The answer must bracket the
    # threshold crossing with finite cosines on both sides.
    arch = Architecture(norm="none")
    star = float(alpha_star(arch, 0.5, 3000))
    assert math.isfinite(star) and star > 1.0
    above = final_state(arch.replace(alpha_sa=star * (1 + 1e-6)), 0.5, 3000)["rho"]
    below = final_state(arch.replace(alpha_sa=star * (1 - 1e-3)), 0.5, 3000)["rho"]
    assert above <= DEFAULT_THRESHOLD < below


def test_deep_no_ln_no_alpha_is_an_answer_from_finite_cosines():
    # Depth 10000 (`min-alpha --norm none --depth 10000 --beta 0.5`): "no alpha up to 1000"
    # was read from NaN; now every alpha in [1, 1000] has a finite rho_L above the
    # threshold (the ReLU MLP with its own skip alpha_mlp = 1 still aligns the tokens).
    arch = Architecture(norm="none")
    assert math.isinf(float(alpha_star(arch, 0.5, 10000)))
    rho = final_state(arch.replace(alpha_sa=np.geomspace(1.0, 1e3, 7)), 0.5, 10000)["rho"]
    assert np.all(np.isfinite(rho)) and np.all(rho > DEFAULT_THRESHOLD)


def test_cli_propagate_no_ln_10000_layers_has_no_nan():
    out = subprocess.run([sys.executable, "-m", "remprop", "propagate", "--norm", "none", "--depth", "10000",
                          "--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert all(math.isfinite(r) for r in result["rho"])
    assert result["undefined_from_layer"] is None


def test_non_homogeneous_activation_without_norm_is_reported_not_rescaled():
    # GELU's moments are not homogeneous: a no-LN GELU stream is not rescaled; when it
    # leaves float64 the cosine is NaN (reported by `remprop propagate` as undefined),
    # never a finite number read from overflowed values.
    traj = propagate(Architecture(norm="none", activation="gelu"), 0.5, 6000)
    finite = np.isfinite(traj.q)
    assert not np.all(finite)
    assert np.all(np.isnan(traj.rho[~finite]) | np.isinf(traj.q[~finite]))
    assert np.all(np.isfinite(traj.rho[finite]))


@pytest.mark.parametrize("k", range(1, 17))
def test_relu_kernel_accurate_near_one(k):
    # f(c) to within 2 ulp of 1 against 40-digit arithmetic; the former form
    # sqrt(1 - c*c) lost eps / sqrt(1 - c) (1.2e-14 at 1 - c = 1e-8).
    c = 1.0 - 10.0 ** -k
    with mpmath.workdps(40):
        exact = (mpmath.sqrt(1 - mpmath.mpf(c) ** 2) + c * (mpmath.pi - mpmath.acos(c))) / mpmath.pi
    assert abs(float(relu_kernel_core(c)) - float(exact)) <= 2 * np.finfo(float).eps
