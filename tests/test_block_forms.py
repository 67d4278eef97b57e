"""Decoder block forms (docs/theory.md section 19): grouped-query attention, QK-norm, parallel
branches, branch norms, a final norm and attention-logit soft-capping.

Each new field is checked three ways where it has a map: against a closed form, against a
Monte Carlo of real blocks (numpy, small widths; tolerances from the seed spread), and the
kernels against the composed tree to 1e-12. The default kernels are compared bit for bit with
values stored before the block forms were added.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from remprop.theory import Architecture, final_state, model_spec, propagate
from remprop.theory import components as C
from remprop.theory.rem import qk_norm_energy_core
from remprop.theory import softcap
from remprop.theory.softcap import SOFTCAP_TOLERANCE
from remprop.theory.components.attention import softmax_attention_map
from remprop.theory.propagation import final_state_rows, pack_parameters
from remprop.theory.rem import gaussian_cosine_mean, participation_ratio, qk_norm_beta

# -- default kernels: bit-identical to the values computed before this change ---------------------------------
#: propagate(arch, [0.3, 1.0, 2.5], 12, q0=1.3, rho0=0.2): final q and rho, smallest beta_c, computed at
#: commit e9f66de (before the block-form fields existed).
STORED = {
    "post_relu_inf": (dict(), [1.0, 1.0, 1.0], [0.7221647184148619, 0.7221647184148619, 0.5735866738297414],
                      [1.2162606385262997] * 3),
    "pre_rms_gated_T": (dict(norm="pre", norm_type="rms", mlp="gated", activation="silu", sigma_b2=0.0, seq_len=64,
                             sigma_o2=0.5, sigma_w2_out=0.3),
                        [1.6845371138055016, 1.7658401451536907, 2.0882358322081047],
                        [0.3587259194329296, 0.343782790137475, 0.2824421988422065], [1.5811388300841898] * 3),
    "none_relu_T": (dict(norm="none", seq_len=32, alpha_sa=1.1),
                    [48.954620596409264, 71.68839288363083, 88.25098011882724],
                    [0.5783131017971249, 0.45264482091459934, 0.39355312417758054],
                    [0.0618737909353916, 0.037730455664174545, 0.02922605559134322]),
    "pre_gelu_rope": (dict(norm="pre", activation="gelu", seq_len=128, positions="rope", head_dim=64),
                      [2.308613137457991, 2.4198617379212886, 3.0014371672973947],
                      [0.5064958274507778, 0.46136259622920867, 0.3167866271837785], [1.4997916512280511] * 3),
    "post_gc_T": (dict(attention="gain-controlled", seq_len=16), [1.0, 1.0, 1.0],
                  [0.25270050701070645, 0.20044751122048077, 0.11784943682932239], [1.2162606385262997] * 3),
}


@pytest.mark.parametrize("name", sorted(STORED))
def test_default_kernels_are_bit_identical_to_the_stored_values(name):
    fields, q, rho, beta_c = STORED[name]
    traj = propagate(Architecture(**fields), np.array([0.3, 1.0, 2.5]), 12, q0=1.3, rho0=0.2)
    assert traj.q[:, -1].tolist() == q
    assert traj.rho[:, -1].tolist() == rho
    assert traj.beta_critical.min(axis=-1).tolist() == beta_c


# -- kernels == the composed tree ------------------------------------------------------------------------------
TREE_CASES = [
    # Gemma 2's form (the specialisation model_spec("gemma-2-2b") runs)
    dict(norm="pre", norm_type="rms", mlp="gated", activation="gelu", seq_len=64, positions="rope", head_dim=16,
         branch_norm=True, final_norm=True, heads=4, kv_heads=2, logit_softcap=50.0, sigma_o2=0.8, sigma_b2=0.0),
    # OLMo 2's form: no norm before the branches, branch norms, QK-norm over all heads, RoPE
    dict(norm="none", norm_type="rms", mlp="gated", activation="silu", seq_len=128, positions="rope", head_dim=16,
         heads=4, qk_norm=True, qk_norm_dim=64, branch_norm=True, final_norm=True, sigma_o2=0.8, sigma_b2=0.0),
    # every new choice at once (the specialisation of test_cli_options_reach_the_architecture)
    dict(norm="pre", block_form="parallel", branch_norm=True, final_norm=True, heads=2, kv_heads=1, qk_norm=True,
         head_dim=16, seq_len=64, qk_norm_gain=1.2, logit_softcap=50.0),
    dict(norm="pre", block_form="parallel", alpha_sa=1.3),                    # T -> infinity, carried scale
    dict(norm="none", branch_norm=True, alpha_sa=1.5),                        # no-LN: not rescaled
    dict(norm="post", branch_norm=True, seq_len=16, attention="gain-controlled"),
    dict(norm="none", qk_norm=True, seq_len=64, head_dim=16, qk_norm_gain=1.7),  # beta not rescaled
]


def _tree(arch, beta, depth, q0, rho0):
    block = arch.block(beta)
    q, p = q0, q0 * rho0
    qs, ps, beta_cs = [q], [p], []
    for _ in range(depth):
        beta_cs.append(float(arch.block_beta_critical(q, p)))
        q, p = (float(v) for v in block(q, p))
        qs.append(q)
        ps.append(p)
    qs[-1], ps[-1] = (float(v) for v in arch.stack_output(qs[-1], ps[-1]))
    return np.array(qs), np.array(ps), np.array(beta_cs)


@pytest.mark.parametrize("fields", TREE_CASES, ids=lambda f: "-".join(f"{k}={v}" for k, v in f.items()))
def test_kernels_follow_the_composed_tree(fields):
    arch = Architecture(**fields)
    # 1e-12, but 1e-11 with QK-norm: its kappa_n uses lgamma, CPython's own in the tree and libm's in the
    # kernels, which differ by an ulp of lgamma(n/2) ~ 1e3 (a relative 1e-13 of the constant, amplified by
    # the REM's slope over a few layers)
    tol = 1e-11 if arch.qk_norm else 1e-12
    for beta in ((0.3, 0.65) if arch.logit_softcap else (0.5, 2.0)):   # soft-capped: within the accepted range
        traj = propagate(arch, beta, 6, q0=1.3, rho0=0.2)
        q, p, beta_c = _tree(arch, beta, 6, 1.3, 0.2)
        np.testing.assert_allclose(traj.q, q, rtol=tol, atol=0)
        np.testing.assert_allclose(traj.p, p, rtol=tol, atol=tol * np.max(np.abs(q)))
        np.testing.assert_allclose(traj.beta_critical, beta_c, rtol=tol)


@pytest.mark.parametrize("index, alpha, depth", [(0, 2.0, 150), (3, 1.3, 400)])
def test_deep_streams_carry_their_scale_through_branch_norms_and_parallel_branches(index, alpha, depth):
    """q grows like alpha^(2L) past float64's 2**128 window: the kernels' carried scale (a power of two,
    exact) must multiply the normalised branch outputs too (docs/theory.md section 19)."""
    arch = Architecture(**dict(TREE_CASES[index], alpha_sa=alpha, final_norm=False))
    traj = propagate(arch, 0.7, depth, q0=1.3, rho0=0.2)
    q, p, beta_c = _tree(arch, 0.7, depth, 1.3, 0.2)
    assert np.log2(q[-1]) > 200   # the kernels rescaled
    np.testing.assert_allclose(traj.log2_q, np.log2(q), rtol=1e-12)
    np.testing.assert_allclose(traj.rho, p / q, rtol=1e-11)
    np.testing.assert_allclose(traj.beta_critical, beta_c, rtol=1e-11)


def test_block_forms_build_the_documented_trees():
    sandwich = Architecture(norm="pre", branch_norm=True, norm_type="rms").block(0.5)
    assert repr(sandwich) == ("serial(residual(alpha, serial(rms_norm, softmax_attention, rms_norm)), "
                              "residual(alpha, serial(rms_norm, mlp, rms_norm)))")
    olmo = Architecture(norm="none", branch_norm=True, norm_type="rms").block(0.5)
    assert repr(olmo) == "serial(residual(alpha, serial(softmax_attention, rms_norm)), residual(alpha, serial(mlp, rms_norm)))"
    parallel = Architecture(norm="pre", block_form="parallel").block(0.5)
    assert repr(parallel) == "parallel(alpha, serial(layer_norm, softmax_attention), serial(layer_norm, mlp))"
    assert parallel.name == "parallel"
    assert Architecture(final_norm=True, norm_type="rms").final_layer().name == "rms_norm"
    assert Architecture().final_layer() is None


# -- closed forms --------------------------------------------------------------------------------------------
def test_parallel_block_is_the_skip_plus_both_branches_of_the_normalised_input():
    arch = Architecture(norm="pre", block_form="parallel", alpha_sa=0.7, sigma_o2=0.6)
    q, p, beta = 2.0, 0.5, 1.3
    qa, pa = softmax_attention_map(beta, q=1.0, p=p / q, sigma_v2=arch.sigma_v2, sigma_b2=arch.sigma_b2)
    qm, pm = C.mlp(arch.sigma_w2, arch.sigma_b2)(1.0, p / q)
    expected = (0.49 * q + 0.6 * qa + qm, 0.49 * p + 0.6 * pa + pm)
    assert np.allclose(arch.block(beta)(q, p), expected, rtol=1e-14)
    # the sequential block differs: its MLP reads the attention's output
    assert not np.allclose(arch.replace(block_form="sequential", alpha_mlp=1.0).block(beta)(q, p), expected)


def test_branch_norms_add_a_unit_branch_of_the_branch_cosine():
    arch = Architecture(norm="none", branch_norm=True, sigma_o2=3.0, alpha_sa=0.5, alpha_mlp=2.0)
    q, p, beta = 1.7, 0.4, 0.8
    qa, pa = softmax_attention_map(beta, q=q, p=p, sigma_v2=arch.sigma_v2, sigma_b2=arch.sigma_b2)
    q1, p1 = 0.25 * q + 1.0, 0.25 * p + pa / qa        # the projection's scale drops out of the norm
    qm, pm = C.mlp(arch.sigma_w2, arch.sigma_b2)(q1, p1)
    assert np.allclose(arch.block(beta)(q, p), (4.0 * q1 + 1.0, 4.0 * p1 + pm / qm), rtol=1e-13)


def test_final_norm_sets_the_final_q_to_one_and_keeps_every_cosine():
    base = Architecture(norm="pre", seq_len=64, alpha_sa=1.2)
    plain, normed = (propagate(a, [0.4, 1.5], 10, q0=0.3, rho0=0.1) for a in (base, base.replace(final_norm=True)))
    np.testing.assert_array_equal(normed.rho, plain.rho)
    np.testing.assert_array_equal(normed.q[:, :-1], plain.q[:, :-1])
    np.testing.assert_array_equal(normed.q[:, -1], 1.0)
    np.testing.assert_array_equal(normed.p[:, -1], plain.rho[:, -1])
    np.testing.assert_array_equal(normed.log2_q[:, -1], 0.0)
    state = final_state(base.replace(final_norm=True), [0.4, 1.5], 10, q0=0.3, rho0=0.1)
    np.testing.assert_array_equal(state["q"], 1.0)
    np.testing.assert_array_equal(state["p"], plain.rho[:, -1])
    np.testing.assert_array_equal(state["rho"], plain.rho[:, -1])
    # the packed rows continue from the last block: no final norm there
    _, _, rows = pack_parameters(base.replace(final_norm=True), [0.4, 1.5], 0.3, 0.1)
    raw = final_state_rows(base.replace(final_norm=True), rows(0, 2), 10)
    np.testing.assert_array_equal(raw[:, 0] * 2.0 ** raw[:, 4], plain.q[:, -1])


def test_qk_norm_runs_the_rem_at_qk_norm_beta():
    # norm="none": the kernels' specialisation of the last tree case (compiled once); the maps of a
    # QK-normed head read only the cosine of their input
    arch = Architecture(norm="none", qk_norm=True, seq_len=256, head_dim=64, qk_norm_gain=1.3)
    rho = np.array([-0.003, 0.0, 0.3, 0.8, 0.99])
    # the head's beta at the state (1, rho): qk_norm_beta (docs/theory.md section 16), times the multiplier
    np.testing.assert_allclose(arch.effective_beta(2.0, q=1.0, p=rho),
                               2.0 * np.asarray(qk_norm_beta(rho, 64, 256, 1.3)), rtol=1e-12)
    # and at the reference state the packed column g^2 / sqrt(log T)
    assert arch.effective_beta(1.0) == pytest.approx(1.69 / math.sqrt(math.log(256)), rel=1e-15)
    assert arch.effective_beta(1.0, q=1.0, p=0.0) == pytest.approx(arch.effective_beta(1.0), rel=1e-14)
    # the weights' scale (q) drops out: the map of a no-norm block does not depend on q given rho
    energy = np.vectorize(qk_norm_energy_core)(rho, 64, 1.0)
    np.testing.assert_allclose(energy, 1.0 - np.asarray(gaussian_cosine_mean(rho, 64)), rtol=1e-12, atol=1e-15)
    # one attention layer's output: the finite-T softmax map at qk_norm_beta (table: relative 1e-6)
    attention = arch.attention_map(1.0)
    for r in (0.0, 0.3, 0.8):
        beta_qk = float(qk_norm_beta(r, 64, 256, 1.3))
        expected = C.softmax_attention(beta_qk, arch.sigma_v2, arch.sigma_b2, seq_len=256)(1.0, r)
        np.testing.assert_allclose(attention(1.0, r), expected, rtol=1e-12)
    # beta_critical is the multiplier at which the first layer's x reaches sqrt(2)
    traj = propagate(arch, 1.0, 3)
    multiplier = float(arch.beta_critical(traj.beta_critical))
    rho_in = np.min(traj.rho[:-1])  # the smallest beta_c is at the smallest input cosine
    x = multiplier * 1.69 * math.sqrt((1.0 - float(gaussian_cosine_mean(rho_in, 64))) / math.log(256))
    assert x == pytest.approx(math.sqrt(2.0), rel=1e-10)


def test_qk_norm_kappa_series_matches_the_hypergeometric_closed_form():
    rho = np.linspace(-0.999, 0.999, 41)
    for dim in (3, 16, 128, 2048):
        kappa = 1.0 - np.vectorize(qk_norm_energy_core)(rho, dim, 1.0)
        np.testing.assert_allclose(kappa, gaussian_cosine_mean(rho, dim), rtol=1e-11, atol=1e-14)
    assert qk_norm_energy_core(1.0, 64, 1.0) == 0.0 and qk_norm_energy_core(-1.0, 64, 0.5) == 1.5


# -- Monte Carlo of real blocks (numpy) ---------------------------------------------------------------------
WIDTH, TOKENS, SEEDS = 256, 32, 24


def _tokens(rng, q0, rho0):
    shared = rng.standard_normal(WIDTH)
    return np.sqrt(q0) * (np.sqrt(rho0) * shared + np.sqrt(1.0 - rho0) * rng.standard_normal((TOKENS, WIDTH)))


def _order_parameters(x):
    gram = x @ x.T / x.shape[1]
    diagonal = np.trace(gram)
    return diagonal / TOKENS, (gram.sum() - diagonal) / (TOKENS * (TOKENS - 1))


def _rms(x):
    return x / np.sqrt(np.mean(x * x, axis=1, keepdims=True))


def _attention(rng, x, beta, sigma_v2, *, heads=1, kv_heads=None, qk_norm=False, sigma_o2=None):
    """Multi-head softmax attention with the engine's conventions (docs/theory.md sections 2-3):
    ``W_Q, W_K ~ N(0, beta sqrt(log T) / d)`` per entry, scores over ``sqrt(d_H)``; QK-norm: RMS over
    each head's ``d_H`` coordinates, scores ``beta q.k / sqrt(d_H)``. Heads of one key/value group share
    ``W_K`` and ``W_V``; concatenated, then ``W_O ~ N(0, sigma_o2 / d)`` if given."""
    d = x.shape[1]
    head_dim = d // heads
    groups = heads if kv_heads is None else kv_heads
    scale = 1.0 if qk_norm else math.sqrt(beta * math.sqrt(math.log(TOKENS)) / d)
    keys = [x @ rng.standard_normal((d, head_dim)) * scale for _ in range(groups)]
    values = [x @ rng.standard_normal((d, head_dim)) * math.sqrt(sigma_v2 / d) for _ in range(groups)]
    outputs = []
    for h in range(heads):
        g = h * groups // heads
        query, key = x @ rng.standard_normal((d, head_dim)) * scale, keys[g]
        if qk_norm:
            query, key = _rms(query), _rms(key)
        scores = (beta if qk_norm else 1.0) * query @ key.T / math.sqrt(head_dim)
        weights = np.exp(scores - scores.max(axis=1, keepdims=True))
        outputs.append(weights / weights.sum(axis=1, keepdims=True) @ values[g])
    out = np.concatenate(outputs, axis=1)
    return out if sigma_o2 is None else out @ rng.standard_normal((d, d)) * math.sqrt(sigma_o2 / d)


def _mlp(rng, x, sigma_w2):
    d = x.shape[1]
    hidden = np.maximum(x @ rng.standard_normal((d, d)) * math.sqrt(sigma_w2 / d), 0.0)
    return hidden @ rng.standard_normal((d, d)) * math.sqrt(sigma_w2 / d)


def _simulated_block(rng, form, x, beta, sigma_v2, sigma_w2):
    if form == "parallel":
        n = _rms(x)
        return x + _attention(rng, n, beta, sigma_v2) + _mlp(rng, n, sigma_w2)
    if form == "sandwich":
        x = x + _rms(_attention(rng, _rms(x), beta, sigma_v2))
        return x + _rms(_mlp(rng, _rms(x), sigma_w2))
    x = x + _rms(_attention(rng, x, beta, sigma_v2, qk_norm=form == "olmo-qk"))
    return x + _rms(_mlp(rng, x, sigma_w2))


BLOCKS = {
    "parallel": dict(norm="pre", block_form="parallel"),
    "sandwich": dict(norm="pre", branch_norm=True),
    "olmo": dict(norm="none", branch_norm=True),
    "olmo-qk": dict(norm="none", branch_norm=True, qk_norm=True, head_dim=WIDTH),
}


def _assert_within_seed_spread(measured, theory):
    """Mean of measured - theory within 4 standard errors of the seeds, plus 1% of the theory for the
    O(1/d) finite-width terms the mean-field maps leave out (d = 256: about 0.4%)."""
    diff = np.asarray(measured) - np.asarray(theory)
    error = diff.std(axis=0, ddof=1) / math.sqrt(len(diff))
    assert np.all(np.abs(diff.mean(axis=0)) <= 4.0 * error + 0.01 * np.abs(np.mean(theory, axis=0))), (
        diff.mean(axis=0), error)


@pytest.mark.parametrize("form", sorted(BLOCKS))
@pytest.mark.parametrize("beta", [0.5, 2.0])
def test_block_forms_match_simulated_blocks(form, beta):
    arch = Architecture(norm_type="rms", sigma_b2=0.0, sigma_v2=0.8, sigma_w2=1.5, seq_len=TOKENS, **BLOCKS[form])
    rng = np.random.default_rng(20261124)
    measured, theory = [], []
    for _ in range(SEEDS):
        x = _tokens(rng, 1.3, 0.3)
        measured.append(_order_parameters(_simulated_block(rng, form, x, beta, 0.8, 1.5)))
        theory.append([float(v) for v in arch.block(beta)(*_order_parameters(x))])  # the theory at the drawn input
    _assert_within_seed_spread(measured, theory)


@pytest.mark.parametrize("sigma_o2", [None, 0.7])
def test_grouped_query_attention_keeps_the_mean_map(sigma_o2):
    """8 query heads with 8, 2 or 1 key/value heads: the same theory map (docs/theory.md section 19)."""
    beta, sigma_v2 = 1.0, 0.8
    theory_map = Architecture(heads=8, seq_len=TOKENS, sigma_b2=0.0, sigma_v2=sigma_v2, sigma_o2=sigma_o2).attention_map(beta)
    if sigma_o2 is not None:
        theory_map = C.serial(theory_map, C.output_projection(sigma_o2))
    for kv_heads in (8, 2, 1):
        rng = np.random.default_rng(7 + kv_heads)
        measured, theory = [], []
        for _ in range(SEEDS):
            x = _rms(_tokens(rng, 1.0, 0.3))
            out = _attention(rng, x, beta, sigma_v2, heads=8, kv_heads=kv_heads, sigma_o2=sigma_o2)
            measured.append(_order_parameters(out))
            theory.append([float(v) for v in theory_map(*_order_parameters(x))])
        _assert_within_seed_spread(measured, theory)


def test_logit_softcap_bound_holds_on_sampled_rows():
    """Rows of T Gaussian scores at the std of the engine's scores: soft-capping changes each row's Y2
    by less than the bound of logit_softcap_change (in all of 200 rows; the bound holds for a row with
    probability >= 0.9 by construction, and much more often in practice)."""
    T, cap = 2048, 12.0
    arch = Architecture(norm="pre", seq_len=T, logit_softcap=cap)
    beta = 0.6 * softcap.logit_softcap_max_beta(arch) * 3.0   # past the accepted range: a bound well above the tolerance
    bound = float(softcap.logit_softcap_change(arch, beta))
    sigma = beta * math.sqrt(math.log(T))   # the scores' std at q = 1 (docs/theory.md section 3.1)
    rng = np.random.default_rng(3)
    changes = []
    for _ in range(200):
        scores = sigma * rng.standard_normal(T)
        y2 = [np.sum(w * w) for w in (np.exp(s - s.max()) / np.exp(s - s.max()).sum()
                                      for s in (scores, cap * np.tanh(scores / cap)))]
        changes.append(abs(y2[1] / y2[0] - 1.0))
    assert 0.0 < max(changes) <= bound
    assert bound > SOFTCAP_TOLERANCE and max(changes) > 0.1 * SOFTCAP_TOLERANCE   # a bound that means something


def test_logit_softcap_is_accepted_below_the_tolerance_and_rejected_above():
    arch = Architecture(norm="pre", seq_len=1024, logit_softcap=50.0)
    limit = softcap.logit_softcap_max_beta(arch)
    assert float(softcap.logit_softcap_change(arch, limit)) == pytest.approx(SOFTCAP_TOLERANCE, rel=1e-9)
    propagate(arch, 0.99 * limit, 2)
    with pytest.raises(ValueError, match="^logit_softcap = 50 is too small"):
        propagate(arch, 1.01 * limit, 2)
    with pytest.raises(ValueError, match="^logit_softcap"):
        arch.block(1.01 * limit)
    # a post-LN stack's first layer sees the input's q0
    post = arch.replace(norm="post")
    assert softcap.logit_softcap_max_beta(post, q0=4.0) == pytest.approx(softcap.logit_softcap_max_beta(post) / 4.0, rel=1e-12)


@pytest.mark.parametrize("fields, message", [
    (dict(heads=4, kv_heads=3), "^kv_heads must divide heads"),
    (dict(heads=4, kv_heads=0), "^kv_heads must be an integer"),
    (dict(qk_norm=True, head_dim=64), "^seq_len is required with qk_norm"),
    (dict(qk_norm=True, seq_len=64), "^head_dim is required with qk_norm"),
    (dict(qk_norm=True, seq_len=64, head_dim=64, qk_norm_dim=32), "^qk_norm_dim must be >= head_dim"),
    (dict(qk_norm="yes"), "^qk_norm must be True or False"),
    (dict(qk_norm_gain=0.0), "^qk_norm_gain"),
    (dict(block_form="fused"), "^block_form must be one of"),
    (dict(block_form="parallel"), "^block_form 'parallel' needs norm='pre'"),
    (dict(block_form="parallel", norm="pre", alpha_mlp=0.5), "^alpha_mlp must be 1 with block_form='parallel'"),
    (dict(branch_norm=1), "^branch_norm must be True or False"),
    (dict(final_norm=None), "^final_norm must be True or False"),
    (dict(logit_softcap=50.0), "^logit_softcap needs seq_len"),
    (dict(logit_softcap=-1.0, seq_len=8), "^logit_softcap must be > 0"),
    (dict(logit_softcap=50.0, seq_len=8, norm="none"), "^logit_softcap is not supported with norm='none'"),
])
def test_bad_block_form_fields_raise_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        Architecture(**fields)


def test_kv_heads_is_carried_and_does_not_change_the_maps():
    arch = Architecture(heads=8, kv_heads=2, seq_len=64)
    assert arch.kv_heads == 2 and arch.to_dict()["kv_heads"] == 2
    np.testing.assert_array_equal(propagate(arch, 0.7, 5).rho, propagate(arch.replace(kv_heads=None), 0.7, 5).rho)


def test_parallel_block_symbolic_walk_matches_the_numbers():
    sp = pytest.importorskip("sympy")
    from remprop.theory.symbolic import SymbolicContext, symbolic_block_map

    arch = Architecture(norm="pre", block_form="parallel", activation="linear", alpha_sa=0.5)
    q, p = sp.symbols("q p", positive=True)
    q1, p1 = symbolic_block_map(arch, q, p, beta=0.3, context=SymbolicContext(participation=lambda *a: sp.Integer(0)))
    # Y2 = 0 (T -> infinity below beta_c): the numeric map at beta = 0.3 < beta_c
    numeric = arch.block(0.3)(2.0, 0.5)
    assert float(q1.subs({q: 2.0, p: 0.5})) == pytest.approx(float(numeric[0]), rel=1e-12)
    assert float(p1.subs({q: 2.0, p: 0.5})) == pytest.approx(float(numeric[1]), rel=1e-12)


# -- real model configurations ------------------------------------------------------------------------------
def test_gemma2_and_olmo2_configs_translate():
    gemma = model_spec("gemma-2-2b")
    arch = gemma.architecture
    assert (arch.norm, arch.branch_norm, arch.final_norm, arch.norm_type, arch.mlp) == ("pre", True, True, "rms", "gated")
    assert (arch.heads, arch.kv_heads, arch.head_dim, arch.logit_softcap) == (8, 4, 256, 50.0)
    r2 = 0.02 ** 2
    assert arch.sigma_o2 == pytest.approx(r2 * 8 * 256, rel=1e-12) and gemma.q0 == pytest.approx(r2 * 2304, rel=1e-12)
    assert gemma.beta == pytest.approx(r2 * 2304 / math.sqrt(math.log(8192)), rel=1e-12)
    assert float(softcap.logit_softcap_change(arch, gemma.beta)) < SOFTCAP_TOLERANCE
    olmo = model_spec("allenai/OLMo-2-0425-1B")
    arch = olmo.architecture
    assert (arch.norm, arch.branch_norm, arch.final_norm, arch.qk_norm, arch.qk_norm_dim) == ("none", True, True, True, 2048)
    assert (olmo.beta, arch.kv_heads, arch.positions, arch.rope_base) == (1.0, 16, "rope", 500000.0)
    for spec in (gemma, olmo):
        traj = propagate(spec.architecture, spec.beta, 4, spec.q0, spec.rho0)
        assert np.all(np.isfinite(traj.rho)) and traj.q[-1] == 1.0


@pytest.mark.slow
def test_check_succeeds_for_olmo2(capsys, tmp_path):
    from remprop.cli import main

    code = main(["check", "olmo-2-1b", "--depth", "2", "--seq-len", "256", "--json", "--no-figure",
                 "--out", str(tmp_path)])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["model"]["family"] == "olmo2"


def test_cli_options_reach_the_architecture():
    from remprop.cli import main

    assert main(["propagate", "--norm", "pre", "--block-form", "parallel", "--branch-norm", "--final-norm",
                 "--kv-heads", "1", "--heads", "2", "--qk-norm", "--head-dim", "16", "--seq-len", "64",
                 "--qk-norm-gain", "1.2", "--logit-softcap", "50", "--beta", "1", "--depth", "2", "--json"]) == 0
    assert main(["propagate", "--norm", "post", "--block-form", "parallel", "--beta", "1", "--depth", "2"]) == 2
    assert main(["propagate", "--heads", "4", "--kv-heads", "3", "--beta", "1", "--depth", "2"]) == 2
