"""The numba depth kernels and the component compositions against the scalar reference.

``tests/reference.py`` implements the maps of docs/theory.md sections 3-5 one float at a time
with the ``math`` module. Every (norm, attention, activation) combination is compared
over random parameters drawn by hypothesis, as scalars and broadcast over grids.

Tolerance 1e-12: both sides evaluate the same closed forms in float64 (error ~1e-16 per
operation); the maps are smooth away from the kink of Y2 at beta_c (continuous there),
so a few dozen layers amplify round-off by far less than 1e4.
"""
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import reference as ref
from kernel_checks import assert_propagate_matches_block
from remprop.theory import ACTIVATIONS, Architecture, final_state, propagate

TOL = 1e-12
COMBOS = list(itertools.product(ref.NORMS, ref.ATTENTIONS, ref.ACTIVATIONS))
COMBO_IDS = ["-".join(c) for c in COMBOS]


def floats(low, high):
    return st.floats(low, high, allow_nan=False, allow_infinity=False)


# sigma_b2 > 0 keeps every branch output away from q = 0 (0/0 in LayerNorm and the
# ReLU kernel); rho0 in [0, 1] is the physical domain of the T -> infinity theory
# (a simplex of T tokens has rho >= -1/(T - 1)).
FIELDS = {
    "sigma_w2": floats(0.0, 3.0),
    "sigma_b2": floats(1e-6, 0.5),
    "sigma_v2": floats(0.0, 3.0),
    "alpha_sa": floats(0.0, 3.0),
    "alpha_mlp": floats(0.0, 3.0),
}
SCALAR_CASE = st.fixed_dictionaries({
    **FIELDS,
    "beta": floats(0.05, 6.0),
    "q0": floats(0.05, 5.0),
    "rho0": floats(0.0, 1.0),
})


def collapse_conditioning(qs, ps):
    """``max_l q_l / (q_l - p_l)`` over a reference trajectory (at least 1, at most 1/eps).

    Near collapse the maps read ``q - p``, which holds a rounding error of a few ulp of q:
    both sides round differently, and the difference grows by this factor (``rho0 =
    0.99999`` gives 1e5; hypothesis found 2e-12 relative there, no-LN gain-controlled).
    """
    eps = np.finfo(float).eps
    ratios = [q / (q - p) if q > p else 1.0 / eps for q, p in zip(qs, ps)]
    return float(min(max([1.0] + ratios), 1.0 / eps))


def assert_state_close(q, p, q_ref, p_ref, where="", cond=1.0):
    """q relative to 1e-12; p relative to the scale q (p may cancel to ~0); both widened by
    64 eps times the trajectory's collapse conditioning ``cond`` (:func:`collapse_conditioning`;
    1 + 1e-14 for healthy inputs)."""
    tol = TOL + 64 * np.finfo(float).eps * cond
    assert math.isfinite(q) and math.isfinite(p), where
    assert abs(q - q_ref) <= tol * abs(q_ref), f"q {q} != {q_ref} {where}"
    assert abs(p - p_ref) <= tol * abs(q_ref), f"p {p} != {p_ref} {where}"


def assert_beta_c_close(value, expected, where="", q_scale=1.0, cond=1.0):
    """beta_c relative to 1e-12, widened by its conditioning near collapse.

    ``beta_c = sqrt(2 / (q (q - p)))``: a rounding error of a few ulp of q in p (float64
    storage of the state; both sides round differently) moves beta_c by
    ``(1/2) (ulp q) / (q - p)`` relative, i.e. ``eps q^2 beta_c^2 / 4``. Near-collapsed
    inputs (beta_c ~ 300 at q ~ 1) make that exceed 1e-12, so the tolerance adds 16 eps
    times that factor; ``q_scale`` bounds the attention input's q over the layers. Errors
    carried from earlier, more collapsed layers (``cond``, as in :func:`assert_state_close`)
    add 64 eps times the trajectory's conditioning.
    """
    def tolerance(beta_c):
        eps = np.finfo(float).eps
        return TOL + 16 * eps * max(1.0, 0.25 * (q_scale * beta_c) ** 2) + 64 * eps * cond

    # where the tolerance reaches 1, q - p is within rounding of 0: finite and inf agree
    if math.isinf(expected):
        assert math.isinf(value) or tolerance(value) >= 1.0, where
    elif math.isinf(value):
        assert tolerance(expected) >= 1.0, f"beta_c {value} != {expected} {where}"
    else:
        assert abs(value - expected) <= tolerance(expected) * expected, f"beta_c {value} != {expected} {where}"


def split(case):
    fields = {k: case[k] for k in FIELDS}
    return case["beta"], case["q0"], case["rho0"], fields


@pytest.mark.parametrize("combo", COMBOS, ids=COMBO_IDS)
@settings(max_examples=20, deadline=None)
@given(case=SCALAR_CASE, depth=st.integers(1, 40))
def test_propagate_matches_scalar_reference(combo, case, depth):
    norm, attention, activation = combo
    beta, q0, rho0, fields = split(case)
    arch = Architecture(norm=norm, attention=attention, activation=activation, **fields)
    traj = propagate(arch, beta, depth, q0=q0, rho0=rho0)
    qs, ps, beta_cs = ref.propagate(norm, attention, activation, beta, depth, q0, rho0, **fields)
    assert traj.q.shape == traj.p.shape == traj.rho.shape == (depth + 1,)
    assert traj.beta_critical.shape == (depth,)
    cond = collapse_conditioning(qs, ps)
    for layer in range(depth + 1):
        assert_state_close(traj.q[layer], traj.p[layer], qs[layer], ps[layer], f"layer {layer}", cond)
    for layer in range(depth):
        assert_beta_c_close(traj.beta_critical[layer], beta_cs[layer], f"layer {layer}", max(qs), cond)


@pytest.mark.parametrize("combo", COMBOS, ids=COMBO_IDS)
@settings(max_examples=20, deadline=None)
@given(case=SCALAR_CASE, depth=st.integers(1, 40))
def test_final_state_matches_scalar_reference(combo, case, depth):
    norm, attention, activation = combo
    beta, q0, rho0, fields = split(case)
    arch = Architecture(norm=norm, attention=attention, activation=activation, **fields)
    got = final_state(arch, beta, depth, q0=q0, rho0=rho0)
    want = ref.final_state(norm, attention, activation, beta, depth, q0, rho0, **fields)
    qs, ps, _ = ref.propagate(norm, attention, activation, beta, depth, q0, rho0, **fields)
    cond = collapse_conditioning(qs, ps)
    assert_state_close(float(got["q"]), float(got["p"]), want["q"], want["p"], "", cond)
    assert abs(float(got["rho"]) - want["rho"]) <= TOL + 64 * np.finfo(float).eps * cond
    q_scale = max(qs)
    assert_beta_c_close(float(got["beta_critical_first"]), want["beta_critical_first"], "", q_scale, cond)
    assert_beta_c_close(float(got["beta_critical_min"]), want["beta_critical_min"], "", q_scale, cond)


@pytest.mark.parametrize("combo", COMBOS, ids=COMBO_IDS)
@settings(max_examples=20, deadline=None)
@given(case=SCALAR_CASE)
def test_block_composition_matches_scalar_reference(combo, case):
    norm, attention, activation = combo
    beta, q0, rho0, fields = split(case)
    arch = Architecture(norm=norm, attention=attention, activation=activation, **fields)
    q, p = arch.block(beta)(q0, q0 * rho0)
    q_ref, p_ref, _ = ref.block(norm, attention, activation, q0, q0 * rho0, beta,
                                fields["sigma_w2"], fields["sigma_b2"], fields["sigma_v2"],
                                fields["alpha_sa"], fields["alpha_mlp"])
    assert_state_close(float(q), float(p), q_ref, p_ref)


# --- grids: every numeric input an array, broadcast together into shape (3, 4) ----------
SHAPES = {"beta": (3, 1), "sigma_w2": (4,), "sigma_b2": (3, 4), "sigma_v2": (3, 1),
          "alpha_sa": (4,), "alpha_mlp": (1, 4), "q0": (3, 1), "rho0": (4,)}
RANGES = {"beta": (0.05, 6.0), "sigma_w2": (0.0, 3.0), "sigma_b2": (1e-6, 0.5),
          "sigma_v2": (0.0, 3.0), "alpha_sa": (0.0, 3.0), "alpha_mlp": (0.0, 3.0),
          "q0": (0.05, 5.0), "rho0": (0.0, 1.0)}


@st.composite
def grid_case(draw):
    out = {}
    for name, shape in SHAPES.items():
        low, high = RANGES[name]
        size = int(np.prod(shape))
        values = draw(st.lists(floats(low, high), min_size=size, max_size=size))
        out[name] = np.array(values).reshape(shape)
    return out


def grid_arch_and_inputs(combo, case):
    norm, attention, activation = combo
    arch = Architecture(norm=norm, attention=attention, activation=activation,
                        **{k: case[k] for k in FIELDS})
    return arch, case["beta"], case["q0"], case["rho0"]


def cell(case, index):
    """Scalar inputs of one grid cell."""
    return {name: float(np.broadcast_to(value, (3, 4))[index]) for name, value in case.items()}


@pytest.mark.parametrize("combo", COMBOS, ids=COMBO_IDS)
@settings(max_examples=4, deadline=None)
@given(case=grid_case(), depth=st.integers(1, 25))
def test_grid_propagate_and_final_state_match_reference_cellwise(combo, case, depth):
    norm, attention, activation = combo
    arch, beta, q0, rho0 = grid_arch_and_inputs(combo, case)
    traj = propagate(arch, beta, depth, q0=q0, rho0=rho0)
    final = final_state(arch, beta, depth, q0=q0, rho0=rho0)
    assert traj.q.shape == (3, 4, depth + 1)
    assert traj.beta_critical.shape == (3, 4, depth)
    for key in ("q", "p", "rho", "beta_critical_first", "beta_critical_min"):
        assert final[key].shape == (3, 4)
    for index in itertools.product(range(3), range(4)):
        c = cell(case, index)
        fields = {k: c[k] for k in FIELDS}
        qs, ps, beta_cs = ref.propagate(norm, attention, activation, c["beta"], depth,
                                        c["q0"], c["rho0"], **fields)
        cond = collapse_conditioning(qs, ps)
        for layer in range(depth + 1):
            assert_state_close(traj.q[index][layer], traj.p[index][layer], qs[layer], ps[layer],
                               f"cell {index} layer {layer}", cond)
        for layer in range(depth):
            assert_beta_c_close(traj.beta_critical[index][layer], beta_cs[layer], "", max(qs), cond)
        assert_state_close(final["q"][index], final["p"][index], qs[-1], ps[-1], f"cell {index}", cond)
        assert_beta_c_close(final["beta_critical_first"][index], beta_cs[0], "", max(qs), cond)
        assert_beta_c_close(final["beta_critical_min"][index], min(beta_cs), "", max(qs), cond)


@pytest.mark.parametrize("combo", COMBOS, ids=COMBO_IDS)
@settings(max_examples=5, deadline=None)
@given(case=grid_case())
def test_grid_block_composition_matches_reference_cellwise(combo, case):
    norm, attention, activation = combo
    arch, beta, q0, rho0 = grid_arch_and_inputs(combo, case)
    q, p = arch.block(beta)(q0, q0 * rho0)
    assert np.shape(q) == np.shape(p) == (3, 4)
    for index in itertools.product(range(3), range(4)):
        c = cell(case, index)
        q_ref, p_ref, _ = ref.block(norm, attention, activation, c["q0"], c["q0"] * c["rho0"],
                                    c["beta"], c["sigma_w2"], c["sigma_b2"], c["sigma_v2"],
                                    c["alpha_sa"], c["alpha_mlp"])
        assert_state_close(q[index], p[index], q_ref, p_ref, f"cell {index}")


# --- the kernels against the composed tree, every structural choice ---------------------
# Architecture.block (the composed tree of components) is the description of a block; the
# kernels (remprop.theory.kernels) compose their step from the same tree (its Column template,
# propagation.kernel_tree) and must agree with it. Every choice that changes the tree:
BLOCK_CHOICES = list(itertools.product(
    ["post", "pre", "none"], ["softmax", "gain-controlled"],
    [None, 0.6],  # sigma_o2: no output projection, or one
    [None, 1.7],  # sigma_w2_out: the MLP's second layer at sigma_w2, or its own variance
    [None, 64],  # seq_len: T -> infinity, or the tabulated finite-T Y2
))
BLOCK_IDS = [f"{n}-{a}-o2_{o}-wout_{w}-T{t}" for n, a, o, w, t in BLOCK_CHOICES]


@pytest.mark.parametrize("norm, attention, sigma_o2, sigma_w2_out, seq_len", BLOCK_CHOICES, ids=BLOCK_IDS)
def test_kernels_follow_the_composed_block(norm, attention, sigma_o2, sigma_w2_out, seq_len):
    """propagate == Architecture.block iterated layer by layer, to 1e-12 (kernel_checks),
    on a 4 x 4 x 3 x 3 grid of alpha_sa (0: no skip, up to 1.5: growing pre-/no-LN
    streams), beta (both sides of beta_c), q0 and rho0 (0 to 0.9)."""
    arch = Architecture(norm=norm, attention=attention, sigma_o2=sigma_o2, sigma_w2_out=sigma_w2_out,
                        seq_len=seq_len, sigma_b2=0.01,
                        alpha_sa=np.array([0.0, 0.5, 1.0, 1.5])[:, None, None, None])
    betas = np.array([0.3, 1.0, 1.6, 3.0])[:, None, None]
    q0 = np.array([0.5, 1.0, 2.0])[:, None]
    rho0 = np.array([0.0, 0.4, 0.9])
    traj = assert_propagate_matches_block(arch, betas, 12, rho0=rho0, q0=q0)
    assert traj.q.shape == (4, 4, 3, 3, 13)


# The norm type and the MLP form (docs/theory.md section 14) against the tree, for every norm
# placement: RMSNorm, the gated MLP, and both together (SwiGLU, asymptotic and, with
# gain-controlled attention and an output projection, finite T).
NORM_MLP_CHOICES = [(norm, norm_type, mlp, activation, attention, seq_len)
                    for norm in ("post", "pre", "none")
                    for norm_type, mlp, activation, attention, seq_len in (
                        ("rms", "dense", "relu", "softmax", None),
                        ("layer", "gated", "relu", "softmax", None),
                        ("rms", "gated", "silu", "softmax", None),
                        ("rms", "gated", "silu", "gain-controlled", 64))]
NORM_MLP_IDS = ["-".join(str(x) for x in choice) for choice in NORM_MLP_CHOICES]


@pytest.mark.parametrize("norm, norm_type, mlp, activation, attention, seq_len", NORM_MLP_CHOICES,
                         ids=NORM_MLP_IDS)
def test_kernels_follow_the_composed_block_norm_types_and_gated_mlps(norm, norm_type, mlp, activation, attention,
                                                                     seq_len):
    """As above, 8 layers (a gated MLP is quadratic in the stream: no-LN stacks at
    alpha_sa = 1.5 reach q ~ 1e50 and stay finite), on the same grid."""
    arch = Architecture(norm=norm, norm_type=norm_type, mlp=mlp, activation=activation, attention=attention,
                        seq_len=seq_len, sigma_b2=0.01, sigma_o2=0.6 if seq_len else None,
                        alpha_sa=np.array([0.0, 0.5, 1.0, 1.5])[:, None, None, None])
    betas = np.array([0.3, 1.0, 1.6, 3.0])[:, None, None]
    q0 = np.array([0.5, 1.0, 2.0])[:, None]
    rho0 = np.array([0.0, 0.4, 0.9])
    traj = assert_propagate_matches_block(arch, betas, 8, rho0=rho0, q0=q0)
    assert np.isfinite(traj.q).all()


# Rotary positions (docs/theory.md section 15): the REM sees p cbar_T, the finite-T
# cross-overlap is 1/T; every norm placement, both attentions, with and without W_O.
ROPE_CHOICES = [(norm, attention, sigma_o2) for norm in ("post", "pre", "none")
                for attention, sigma_o2 in (("softmax", None), ("gain-controlled", 0.6))]


@pytest.mark.parametrize("norm, attention, sigma_o2", ROPE_CHOICES,
                         ids=["-".join(str(x) for x in choice) for choice in ROPE_CHOICES])
def test_kernels_follow_the_composed_block_with_rope(norm, attention, sigma_o2):
    """As above with positions="rope" (T = 64, d_H = 16, base 1e4: cbar_T = 0.58, far from 1), 8
    layers; the kernels' per-layer beta_c is Architecture.block_beta_critical of the state."""
    arch = Architecture(norm=norm, attention=attention, sigma_o2=sigma_o2, seq_len=64, sigma_b2=0.01,
                        positions="rope", head_dim=16,
                        alpha_sa=np.array([0.0, 0.5, 1.0, 1.5])[:, None, None, None])
    assert 0.3 < arch.mean_rope_correlation < 0.8
    betas = np.array([0.3, 1.0, 1.6, 3.0])[:, None, None]
    q0 = np.array([0.5, 1.0, 2.0])[:, None]
    rho0 = np.array([0.0, 0.4, 0.9])
    traj = assert_propagate_matches_block(arch, betas, 8, rho0=rho0, q0=q0)
    expected = arch.block_beta_critical(traj.q[..., :-1], traj.p[..., :-1])
    np.testing.assert_allclose(traj.beta_critical, expected, rtol=1e-12)


def test_final_state_equals_last_layer_of_propagate_on_a_large_grid():
    """More cells than one kernel batch, uneven count: final_state == propagate[..., -1]."""
    arch = Architecture(alpha_sa=np.linspace(0.0, 2.0, 37)[:, None])
    beta = np.linspace(0.1, 3.0, 29)
    traj = propagate(arch, beta, 17)
    final = final_state(arch, beta, 17)
    assert final["q"].shape == (37, 29)
    close = dict(rtol=TOL, atol=TOL)  # q = 1 after post-LN: absolute and relative coincide
    np.testing.assert_allclose(final["q"], traj.q[..., -1], **close)
    np.testing.assert_allclose(final["p"], traj.p[..., -1], **close)
    np.testing.assert_allclose(final["beta_critical_first"], traj.beta_critical[..., 0], **close)
    np.testing.assert_allclose(final["beta_critical_min"], traj.beta_critical.min(axis=-1), **close)


def test_final_state_progress_counts_every_cell():
    arch = Architecture(alpha_sa=np.linspace(0.0, 2.0, 50)[:, None])
    seen = []
    final_state(arch, np.linspace(0.1, 3.0, 40), 3, progress=seen.append)
    assert sum(seen) == 50 * 40


@pytest.mark.parametrize("combo", COMBOS, ids=COMBO_IDS)
def test_deep_stacks_match_reference(combo):
    """300 layers: round-off does not accumulate beyond 1e-12. Variances and skips <= 1
    bound the growth of pre-LN and no-LN norms to < 4^300 per stack (finite in float64)."""
    norm, attention, activation = combo
    rng = np.random.default_rng(7)
    for _ in range(3):
        fields = {"sigma_w2": rng.uniform(0.0, 1.0), "sigma_b2": rng.uniform(1e-4, 0.1),
                  "sigma_v2": rng.uniform(0.0, 1.0), "alpha_sa": rng.uniform(0.0, 1.0),
                  "alpha_mlp": rng.uniform(0.0, 1.0)}
        beta, q0, rho0 = rng.uniform(0.1, 4.0), rng.uniform(0.2, 3.0), rng.uniform(0.0, 1.0)
        arch = Architecture(norm=norm, attention=attention, activation=activation, **fields)
        traj = propagate(arch, beta, 300, q0=q0, rho0=rho0)
        qs, ps, _ = ref.propagate(norm, attention, activation, beta, 300, q0, rho0, **fields)
        for layer in (100, 200, 300):
            assert_state_close(traj.q[layer], traj.p[layer], qs[layer], ps[layer], f"layer {layer}")


#: Activations beyond the main sweep (quadrature or closed forms added later).
OTHER_ACTIVATIONS = sorted(set(ACTIVATIONS) - set(ref.ACTIVATIONS))


@pytest.mark.parametrize("activation", OTHER_ACTIVATIONS)
@settings(max_examples=5, deadline=None)
@given(case=SCALAR_CASE, depth=st.integers(1, 20))
def test_other_activations_kernel_matches_reference_or_block(activation, case, depth):
    """Pre-LN softmax stacks with the other activations: the kernel against the scalar
    reference where it has the kernel in closed form (erf), else against iterating the
    component composition ``Architecture.block`` (same maps, NumPy path). Pre-LN: the
    same compiled kernels as test_activations_general.py (compilation dominates)."""
    beta, q0, rho0, fields = split(case)
    arch = Architecture(norm="pre", attention="softmax", activation=activation, **fields)
    traj = propagate(arch, beta, depth, q0=q0, rho0=rho0)
    if activation in ref.EXTRA_ACTIVATIONS:
        qs, ps, _ = ref.propagate("pre", "softmax", activation, beta, depth, q0, rho0, **fields)
    else:
        block = arch.block(beta)
        qs, ps = [q0], [q0 * rho0]
        for _ in range(depth):
            q, p = block(qs[-1], ps[-1])
            qs.append(float(q))
            ps.append(float(p))
    # Same maps on both sides: NaN (see test_collapsed_tokens_stay_finite in
    # test_theory_invariants.py) must appear at the same layers of both.
    q_ref, p_ref = np.array(qs), np.array(ps)
    nan = np.isnan(q_ref) | np.isnan(p_ref)
    assert np.array_equal(np.isnan(traj.q) | np.isnan(traj.p), nan)
    for layer in np.flatnonzero(~nan):
        assert_state_close(traj.q[layer], traj.p[layer], qs[layer], ps[layer], f"layer {layer}")
