"""DyT (Dynamic Tanh, ``tanh(a0 x)``): the norm of theory/components/dyt.py, every face.

The map on (q, p) is checked three ways: its limits in closed form (a0 -> 0: the linear map
``a0^2 (q, p)`` and its next order; a0 large: the sign's arcsine kernel and its first
correction), a Monte Carlo of the same Gaussian expectation, and a simulated torch stack with
DyT at the norm against ``propagate``. The kernels follow the tree to 1e-12
(tests/kernel_checks.py), the Gram state reproduces the mean-cosine maps on a simplex and
its pair maps at unequal norms follow a Monte Carlo of the Gaussian vector; bad ``a0`` is a
ParameterError naming it, on the command line one line.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from kernel_checks import assert_propagate_matches_block
from remprop.theory import Architecture, propagate, propagate_gram
from remprop.theory.checks import ParameterError
from remprop.theory.components import DyT, dyt
from remprop.theory.components.dyt import DYT_ALPHA0, dyt_map

#: Standard errors of a Monte Carlo mean allowed: |t| > 5 has probability ~6e-7 per check (normal).
K = 5.0


# -- the map: closed-form limits -----------------------------------------------------------------
@pytest.mark.parametrize("q, rho", [(0.5, 0.3), (2.0, 0.9), (1.0, -0.2)])
def test_small_a0_is_the_linear_map_and_its_next_order(q, rho):
    """tanh x = x - x^3/3 + 2 x^5/15 - ...: E[tanh(a u)^2] = a^2 q - 2 a^4 q^2 + (17/3) a^6 q^3 + ...,
    E[tanh(a u) tanh(a v)] = a^2 p - 2 a^4 q p + a^6 (5 q^2 p + (2/3) p^3) + ... (Gaussian moments
    E[u^4] = 3 q^2, E[u^3 v] = 3 q p, E[u^5 v] = 15 q^2 p, E[u^3 v^3] = 9 q^2 p + 6 p^3). After the
    a^4 term the rest is bounded by twice the a^6 term (the series alternates in a^2 q, here <= 5e-3);
    1e-13 for the quadrature's rounding."""
    p = rho * q
    for a in (0.05, 0.02):
        q1, p1 = (float(x) for x in dyt_map(q, p, a))
        assert abs(q1 - (a ** 2 * q - 2 * a ** 4 * q ** 2)) <= 2 * (17 / 3) * a ** 6 * q ** 3 + 1e-13
        assert abs(p1 - (a ** 2 * p - 2 * a ** 4 * q * p)) <= 2 * a ** 6 * (5 * q ** 2 * abs(p) + abs(p) ** 3) + 1e-13
        assert q1 / (a * a * q) == pytest.approx(1.0, abs=3 * a * a * q)  # q' ~ a^2 q


def _large_a0_residuals(q, rho, a):
    """The map minus its large-a expansion: the sign's kernel ``(1, (2/pi) arcsin rho)`` with the
    first corrections (module notes of test_large_a0_is_the_arcsine_kernel)."""
    q1, p1 = (float(x) for x in dyt_map(q, rho * q, a))
    s = math.sqrt(2 * math.pi * q)
    q_expansion = 1 - 2 / (a * s) + math.pi ** 2 / (12 * a ** 3 * q * s)
    p_expansion = 2 / math.pi * math.asin(rho) - math.pi * rho / (6 * q * math.sqrt(1 - rho ** 2) * a ** 2)
    return q1 - q_expansion, p1 - p_expansion


@pytest.mark.parametrize("q, rho", [(0.25, 0.3), (0.25, 0.8), (0.5, 0.5)])
def test_large_a0_is_the_arcsine_kernel(q, rho):
    """tanh(a u) -> sign(u): q' -> 1, p' -> (2/pi) arcsin(rho). The corrections come from |u| < 1/a:
    E[sech^2(a u)] = (2 phi(0) / a) - (phi(0) / (q a^3)) (pi^2 / 12) + O(a^-5) (phi the N(0, q)
    density, int sech^2 = 2, int t^2 sech^2 t dt = pi^2 / 6), and p' - (2/pi) arcsin rho =
    -2 phi(0) c (pi^2 / 12) / a^2 + O(a^-4) with c = rho sqrt(2/pi) / sqrt(q (1 - rho^2)) the slope of
    E[sign v | u] at 0 (int_0^inf (1 - tanh s) s ds = pi^2 / 24). Checked by the order of what is
    left: doubling a divides the q residual by ~2^5 and the p residual by ~2^4 (within a factor
    1.5: the following orders), and the residuals are small. a^2 q <= 100, where the tanh
    quadrature is accurate to 1e-10 (remprop.theory.activations.quadrature_moments)."""
    a = 10.0
    (rq1, rp1), (rq2, rp2) = _large_a0_residuals(q, rho, a), _large_a0_residuals(q, rho, 2 * a)
    assert abs(rq1) < 1e-3 and abs(rp1) < 1e-2 * (1 + rho / math.sqrt(1 - rho ** 2))
    assert 2 ** 5 / 1.5 <= rq1 / rq2 <= 2 ** 5 * 1.5
    assert 2 ** 4 / 1.5 <= rp1 / rp2 <= 2 ** 4 * 1.5


def test_the_map_at_the_default_a0_keeps_cosine_neither_nor_scale():
    """DyT is no scale-free norm: doubling q changes q', and the cosine moves (tanh saturates)."""
    q1, p1 = dyt_map(1.0, 0.5)
    q2, p2 = dyt_map(2.0, 1.0)
    assert DYT_ALPHA0 == 0.5 and float(q2) > float(q1) and float(p1 / q1) != pytest.approx(0.5, abs=1e-3)
    assert not DyT.scale_free and not DyT.keeps_cosine


# -- the map: Monte Carlo ------------------------------------------------------------------------
@pytest.mark.parametrize("q, rho, a", [(1.0, 0.3, 0.5), (2.0, 0.9, 1.5), (0.7, -0.4, 3.0)])
def test_map_against_monte_carlo(q, rho, a):
    """n = 400 000 Gaussian pairs of Var q, Cov rho q: the sample means of tanh(a u)^2 and
    tanh(a u) tanh(a v) against the map, within K standard errors (sample std / sqrt(n))."""
    n = 400_000
    rng = np.random.default_rng(7)
    w, e1, e2 = rng.standard_normal((3, n))
    u = math.sqrt(q) * w
    v = math.sqrt(q) * (rho * w + math.sqrt(1 - rho ** 2) * e1)
    del e2
    square, cross = np.tanh(a * u) ** 2, np.tanh(a * u) * np.tanh(a * v)
    q1, p1 = (float(x) for x in dyt_map(q, rho * q, a))
    assert abs(square.mean() - q1) <= K * square.std(ddof=1) / math.sqrt(n)
    assert abs(cross.mean() - p1) <= K * cross.std(ddof=1) / math.sqrt(n)


# -- the kernels against the tree ---------------------------------------------------------------
@pytest.mark.parametrize("norm, branch_norm", [("pre", False), ("pre", True), ("none", True)])
@pytest.mark.parametrize("alpha0", [0.5, 2.0])
def test_kernels_follow_the_composed_block(norm, branch_norm, alpha0):
    """propagate (the engine running the MLP instruction DyT emits) == Architecture.block iterated, to
    1e-12 (tests/kernel_checks.py), on a grid of alpha_sa, beta, q0 and rho0."""
    arch = Architecture(norm=norm, norm_type="dyt", dyt_alpha0=alpha0, branch_norm=branch_norm, sigma_b2=0.01,
                        alpha_sa=np.array([0.0, 0.5, 1.0, 1.5])[:, None, None, None])
    betas = np.array([0.3, 1.0, 3.0])[:, None, None]
    traj = assert_propagate_matches_block(arch, betas, 10, rho0=np.array([0.0, 0.4, 0.9]),
                                          q0=np.array([0.5, 2.0])[:, None])
    assert np.isfinite(traj.q).all()


def test_final_dyt_is_the_map_of_the_last_block():
    """With final_norm the last entry is DyT of the last block's state (it reads the scale, unlike
    LayerNorm's (1, rho)), in propagate and final_state alike."""
    from remprop.theory import final_state

    arch = Architecture(norm="pre", norm_type="dyt", dyt_alpha0=0.8, final_norm=True)
    bare = arch.replace(final_norm=False)
    traj, ref = propagate(arch, [0.4, 2.0], 6, q0=1.5, rho0=0.2), propagate(bare, [0.4, 2.0], 6, q0=1.5, rho0=0.2)
    q, p = dyt_map(ref.q[:, -1], ref.p[:, -1], 0.8)
    np.testing.assert_allclose(traj.q[:, -1], q, rtol=1e-12)
    np.testing.assert_allclose(traj.p[:, -1], p, rtol=1e-12)
    np.testing.assert_allclose(traj.rho[:, -1], p / q, rtol=1e-12)
    final = final_state(arch, [0.4, 2.0], 6, q0=1.5, rho0=0.2)
    np.testing.assert_allclose(final["q"], q, rtol=1e-12)


# -- the Gram state ------------------------------------------------------------------------------
def _simplex(t, q, rho):
    return q * (1.0 - rho) * np.eye(t) + q * rho


@pytest.mark.parametrize("branch_norm", [False, True])
def test_gram_state_on_a_simplex_reproduces_propagate(branch_norm):
    """Equal norms: DyT's Gram face is its map pair by pair, so the states agree to rounding."""
    t = 16
    arch = Architecture(norm="pre", norm_type="dyt", dyt_alpha0=0.7, seq_len=t, branch_norm=branch_norm)
    gram = propagate_gram(arch, 0.9, _simplex(t, 1.3, 0.2), 4)
    ref = propagate(arch, 0.9, 4, q0=1.3, rho0=0.2)
    np.testing.assert_allclose(gram.q, ref.q, rtol=1e-12)
    np.testing.assert_allclose(gram.rho, ref.rho, rtol=1e-12, atol=1e-14)


def test_gram_face_at_unequal_norms_against_monte_carlo():
    """A Gram matrix with unequal diagonal: DyT's face (pair_moment's quadrature off the diagonal)
    against n = 200 000 draws of the Gaussian vector z ~ N(0, G), each entry within K standard errors."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((5, 8)) * np.array([0.5, 1.0, 1.5, 2.0, 0.8])[:, None]
    g = x @ x.T / 8
    out = DyT(1.2).gram(None, g)
    n = 200_000
    z = rng.standard_normal((n, 5)) @ np.linalg.cholesky(g).T
    y = np.tanh(1.2 * z)
    products = y[:, :, None] * y[:, None, :]
    mean, se = products.mean(axis=0), products.std(axis=0, ddof=1) / math.sqrt(n)
    assert np.all(np.abs(out - mean) <= K * se)
    assert np.ptp(np.diag(out)) > 0.1 and np.allclose(out, out.T)


# -- the torch face against the theory ---------------------------------------------------------
@pytest.mark.parametrize("branch_norm", [False, True])
def test_simulated_dyt_stack_follows_the_theory(branch_norm):
    """The torch stack with pre-DyT (and a DyT on each branch's output) at d = 256, T = 32, 8 seeds, three
    blocks, against propagate at the same finite T. DyT acts coordinate by coordinate: where its input's
    coordinates are Gaussian (the embeddings plus random projections) it has no finite-width bias of its
    own; what is left is the stream's O(1/sqrt(d T)) sample fluctuation (K standard errors over the
    seeds), the finite-width terms of the attention and the ReLU MLP and, with branch norms, the tanh
    outputs the skips add to the stream (not Gaussian), covered by 2e-2 of the value, as for the
    other simulated stacks (test_rmsnorm_gated.py)."""
    torch = pytest.importorskip("torch")
    from remprop.validation.inputs import gaussian_tokens
    from remprop.validation.settings import SimulationSettings
    from remprop.validation.simulator import SimulatedStack

    torch.set_num_threads(min(2, torch.get_num_threads()))
    width, seq_len, depth, beta, seeds = 256, 32, 3, 0.4, 8
    arch = Architecture(norm="pre", norm_type="dyt", dyt_alpha0=0.9, seq_len=seq_len, sigma_w2=1.0, sigma_v2=1.0,
                        branch_norm=branch_norm)
    theory = propagate(arch, beta, depth, q0=1.0, rho0=0.3)
    q_sim, p_sim = np.empty((seeds, depth + 1)), np.empty((seeds, depth + 1))
    for seed in range(seeds):
        x = gaussian_tokens(1.0, 0.3, count=1, seq_len=seq_len, width=width, seed=seed, dtype="float64",
                            device="cpu").tokens
        stack = SimulatedStack(arch, beta, depth, seed=seed,
                               sim=SimulationSettings(width=width, seq_len=seq_len, dtype="float64", device="cpu"))
        trace = stack.trace(x)
        q_sim[seed], p_sim[seed] = trace.q[0], trace.p[0]
    sem = lambda values: values.std(ddof=1) / math.sqrt(values.size)  # noqa: E731
    for layer in range(1, depth + 1):
        q_s, p_s = q_sim[:, layer], p_sim[:, layer]
        assert abs(q_s.mean() - theory.q[layer]) <= K * sem(q_s) + 2e-2 * theory.q[layer], layer
        assert abs(p_s.mean() - theory.p[layer]) <= K * sem(p_s) + 2e-2 * abs(theory.p[layer]), layer


# -- bad input -------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", [0.0, -0.5, float("nan"), float("inf"), "x", True])
def test_bad_alpha0_is_a_parameter_error_naming_it(value):
    with pytest.raises(ParameterError, match="^dyt_alpha0 must") as err:
        Architecture(norm="pre", norm_type="dyt", dyt_alpha0=value)
    assert err.value.parameter == "dyt_alpha0"
    with pytest.raises(ParameterError, match="^alpha0 must") as err:
        dyt(value)
    assert err.value.parameter == "alpha0"
    with pytest.raises(ParameterError, match="^alpha0 must"):
        dyt_map(1.0, 0.0, value)


def test_post_dyt_is_refused_naming_why():
    """After a post-norm skip a DyT reads the previous DyT's tanh outputs, not Gaussian coordinates:
    the map does not hold there (measured 5-13% off in q, docs/theory.md section 14.1)."""
    with pytest.raises(ParameterError, match="norm_type='dyt' is not defined with norm='post'.*Gaussian") as err:
        Architecture(norm="post", norm_type="dyt")
    assert err.value.parameter == "norm_type"


def test_alpha0_without_dyt_is_refused():
    with pytest.raises(ParameterError, match="^dyt_alpha0 is DyT's initial scale") as err:
        Architecture(norm_type="layer", dyt_alpha0=0.5)
    assert err.value.parameter == "dyt_alpha0"
    # unset, it is left out of the stored description (records keep their keys)
    assert "dyt_alpha0" not in Architecture().to_dict()
    assert Architecture(norm="pre", norm_type="dyt", dyt_alpha0=0.3).to_dict()["dyt_alpha0"] == 0.3


def test_command_line_chooses_dyt_and_refuses_bad_alpha0(capsys):
    from cli_checks import assert_one_line_error, run_cli

    code, out, err = run_cli(capsys, "propagate", "--norm", "pre", "--norm-type", "dyt", "--dyt-alpha0", "0.7",
                             "--depth", "3", "--json")
    assert code == 0, err
    assert '"dyt"' in out and "0.7" in out
    for argv in (("--norm", "pre", "--norm-type", "dyt", "--dyt-alpha0", "0"),
                 ("--norm", "pre", "--norm-type", "dyt", "--dyt-alpha0", "nan"),
                 ("--dyt-alpha0", "0.5")):
        code, out, err = run_cli(capsys, "propagate", *argv, "--depth", "3")
        assert_one_line_error(code, err, "--dyt-alpha0")
    code, out, err = run_cli(capsys, "propagate", "--norm", "post", "--norm-type", "dyt", "--depth", "3")
    assert_one_line_error(code, err, "--norm-type", "Gaussian")
