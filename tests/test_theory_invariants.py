"""Invariants of the depth iteration over random architectures (hypothesis).

The statements hold in exact arithmetic; where a comparison involves two computed
values, a round-off slack of a few ulps per block (stated at each use) is allowed.
Random parameters keep sigma_b2 > 0 (no branch output is identically zero) and
rho0 in [0, 1], the domain of the T -> infinity theory (a simplex of T tokens has
rho >= -1/(T - 1)); see ``test_negative_input_cosine_is_rejected_or_stays_physical``.
"""
import itertools
import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from remprop.theory import Architecture, beta_critical, final_state, propagate

NORMS = ("post", "pre", "none")
ATTENTIONS = ("softmax", "gain-controlled")
ACTIVATIONS = ("relu", "linear")
EPS = np.finfo(float).eps
#: one block evaluates ~30 floating-point operations on (q, p)
BLOCK_ROUNDING = 30 * EPS


def floats(low, high):
    return st.floats(low, high, allow_nan=False, allow_infinity=False)


FIELDS = st.fixed_dictionaries({
    "sigma_w2": floats(0.0, 3.0),
    "sigma_b2": floats(1e-6, 0.5),
    "sigma_v2": floats(0.0, 3.0),
    "alpha_sa": floats(0.0, 3.0),
    "alpha_mlp": floats(0.0, 3.0),
})


@settings(max_examples=60, deadline=None)
@given(norm=st.sampled_from(NORMS), attention=st.sampled_from(ATTENTIONS),
       activation=st.sampled_from(ACTIVATIONS), fields=FIELDS, beta=floats(0.05, 6.0),
       q0=floats(0.05, 5.0), rho0=floats(0.0, 1.0), depth=st.integers(1, 60))
def test_trajectories_keep_q_positive_and_rho_a_cosine(norm, attention, activation, fields,
                                                       beta, q0, rho0, depth):
    arch = Architecture(norm=norm, attention=attention, activation=activation, **fields)
    traj = propagate(arch, beta, depth, q0=q0, rho0=rho0)
    assert np.all(np.isfinite(traj.q)) and np.all(np.isfinite(traj.p))
    assert np.all(traj.q > 0)
    assert np.all(np.abs(traj.rho) <= 1.0 + 2 * EPS)  # p / q rounds by at most an ulp or two
    assert np.all(traj.beta_critical > 0)


@settings(max_examples=40, deadline=None)
@given(attention=st.sampled_from(ATTENTIONS), activation=st.sampled_from(ACTIVATIONS),
       fields=FIELDS, beta=floats(0.05, 6.0), q0=floats(0.05, 5.0), rho0=floats(0.0, 1.0),
       depth=st.integers(1, 60))
def test_post_ln_tokens_have_unit_norm_after_every_block(attention, activation, fields, beta,
                                                         q0, rho0, depth):
    arch = Architecture(norm="post", attention=attention, activation=activation, **fields)
    traj = propagate(arch, beta, depth, q0=q0, rho0=rho0)
    assert np.all(traj.q[1:] == 1.0)
    assert traj.q[0] == q0


@settings(max_examples=40, deadline=None)
@given(fields=FIELDS, rho0=floats(0.0, 0.999), beta_fraction=floats(0.01, 0.999),
       depth=st.integers(1, 60))
def test_post_ln_final_cosine_does_not_increase_with_alpha_sa_below_beta_c(fields, rho0,
                                                                          beta_fraction, depth):
    """Post-LN ReLU, softmax, beta < beta_c of every layer (q0 = 1).

    With Y2 = 0 the attention sub-block maps rho to (c + a^2 rho) / (c + a^2) with
    c = s_v^2 rho + s_b^2 >= 0: increasing in rho, non-increasing in a = alpha_sa; the
    MLP sub-block is increasing in rho. Their composition over depth is therefore
    non-increasing in alpha_sa. beta_c = sqrt(2 / (1 - rho)) only grows along the
    trajectory (rho does not decrease), so beta < beta_c of the input holds at every layer.
    Slack: a block's round-off, carried through a contracting map.
    """
    beta = beta_fraction * beta_critical(1.0, rho0)
    alphas = np.linspace(0.0, 3.0, 61)
    arch = Architecture(norm="post", attention="softmax", activation="relu",
                        **{**fields, "alpha_sa": alphas})
    rho = final_state(arch, beta, depth, q0=1.0, rho0=rho0)["rho"]
    assert np.all(np.diff(rho) <= depth * BLOCK_ROUNDING)
    # beta stayed below every layer's critical value
    traj = propagate(arch, beta, depth, q0=1.0, rho0=rho0)
    assert np.all(traj.beta_critical > beta)


@settings(max_examples=60, deadline=None)
@given(norm=st.sampled_from(NORMS), activation=st.sampled_from(ACTIVATIONS), fields=FIELDS,
       beta=floats(0.05, 6.0), q0=floats(0.05, 5.0), rho0=floats(0.0, 1.0),
       depth=st.integers(1, 60))
def test_softmax_stacks_never_decorrelate_tokens(norm, activation, fields, beta, q0, rho0, depth):
    """rho is non-decreasing with depth for softmax attention, any norm, from rho0 >= 0.

    Softmax attention: rho_A = (s_v^2 p + s_b^2) / (s_v^2 (p + (q - p) Y2) + s_b^2) >= p/q
    since Y2 <= 1; the MLP: c1 = p1/q1 >= p/q and f(c1) >= c1; a skip connection and
    LayerNorm average or keep cosines. Slack: one block's round-off per layer.
    """
    arch = Architecture(norm=norm, attention="softmax", activation=activation, **fields)
    traj = propagate(arch, beta, depth, q0=q0, rho0=rho0)
    assert np.all(np.diff(traj.rho) >= -BLOCK_ROUNDING)


def test_post_ln_bert_cosine_rises_with_depth_from_orthogonal_tokens():
    """The BERT defaults below beta_c: rho rises strictly from 0 (rank collapse)."""
    traj = propagate(Architecture(), beta=np.array([0.5, 1.0]), depth=60, rho0=0.0)
    assert np.all(np.diff(traj.rho, axis=-1) > 0)
    assert np.all(traj.rho[:, -1] > 0.9)


@settings(max_examples=30, deadline=None)
@given(norm=st.sampled_from(NORMS), attention=st.sampled_from(ATTENTIONS),
       activation=st.sampled_from(ACTIVATIONS), fields=FIELDS, q0=floats(0.05, 5.0),
       rho0=floats(0.0, 0.999), depth=st.integers(1, 30))
def test_entropy_transition_does_not_depend_on_alpha(norm, attention, activation, fields, q0,
                                                     rho0, depth):
    """The first attention layer sees the input (post/none) or LN(input) (pre): its beta_c,
    and hence the entropy-collapse boundary beta > beta_c, is the same for every alpha."""
    alphas = np.linspace(0.0, 3.0, 13)[:, None]
    betas = np.linspace(0.1, 6.0, 9)
    arch = Architecture(norm=norm, attention=attention, activation=activation,
                        **{**fields, "alpha_sa": alphas, "alpha_mlp": alphas[::-1]})
    first = final_state(arch, betas, depth, q0=q0, rho0=rho0)["beta_critical_first"]
    assert first.shape == (13, 9)
    expected = beta_critical(1.0, rho0) if norm == "pre" else beta_critical(q0, q0 * rho0)
    assert np.all(first == first[0, 0])
    assert abs(first[0, 0] - expected) <= 1e-12 * expected
    entropy_collapse = betas > first
    assert np.all(entropy_collapse == entropy_collapse[0])


def test_post_ln_orthogonal_tokens_have_beta_c_sqrt_two():
    first = final_state(Architecture(), 0.5, 60)["beta_critical_first"]
    assert abs(first - math.sqrt(2.0)) <= 1e-15


@settings(max_examples=40, deadline=None)
@given(attention=st.sampled_from(ATTENTIONS), activation=st.sampled_from(ACTIVATIONS),
       fields=FIELDS, beta=floats(0.05, 6.0), q0=floats(0.05, 5.0), rho0=floats(0.0, 1.0),
       depth=st.integers(1, 60))
def test_pre_ln_norm_grows_with_depth_when_skips_are_at_least_one(attention, activation, fields,
                                                                   beta, q0, rho0, depth):
    """Pre-LN: q' = q_F + alpha^2 q >= q when alpha >= 1 (docs/theory.md section 5: q grows with depth)."""
    fields = {**fields, "alpha_sa": 1.0 + fields["alpha_sa"], "alpha_mlp": 1.0 + fields["alpha_mlp"]}
    arch = Architecture(norm="pre", attention=attention, activation=activation, **fields)
    traj = propagate(arch, beta, depth, q0=q0, rho0=rho0)
    assert np.all(np.diff(traj.q) > 0)


@settings(max_examples=40, deadline=None)
@given(fields=FIELDS, beta_fraction=floats(0.01, 0.999), q0=floats(0.05, 5.0),
       rho0=floats(0.0, 0.999), depth=st.integers(1, 40))
def test_linear_no_ln_stack_with_uniform_attention_has_a_closed_form(fields, beta_fraction, q0,
                                                                      rho0, depth):
    """Noci et al.'s limiting case: no LN, linear MLP, uniform attention (Y2 = 0).

    Attention outputs identical tokens (q_A = p_A), the linear MLP maps q - p to
    s_w^4 (q - p), so each block multiplies the spread q - p by
    alpha_sa^2 (s_w^4 + alpha_mlp^2):  q_L - p_L = [alpha_sa^2 (s_w^4 + alpha_mlp^2)]^L (q0 - p0).
    beta_c = sqrt(2 / (q (q - p))) moves with (q, p), so cases where beta crosses it at
    some layer are discarded.
    """
    arch = Architecture(norm="none", attention="softmax", activation="linear", **fields)
    beta = beta_fraction * beta_critical(q0, q0 * rho0)
    traj = propagate(arch, beta, depth, q0=q0, rho0=rho0)
    assume(np.all(traj.beta_critical > beta))
    factor = fields["alpha_sa"] ** 2 * (fields["sigma_w2"] ** 2 + fields["alpha_mlp"] ** 2)
    layers = np.arange(depth + 1)
    expected = factor**layers * q0 * (1.0 - rho0)
    spread = traj.q - traj.p
    # q - p cancels: its error is ~ layers * eps * q (q itself is computed to ~eps q per op)
    slack = 8 * (layers + 1) * EPS * traj.q
    assert np.all(np.abs(spread - expected) <= 1e-12 * expected + slack)


@pytest.mark.parametrize("norm, attention", list(itertools.product(NORMS, ATTENTIONS)))
def test_negative_input_cosine_is_rejected_or_stays_physical(norm, attention):
    arch = Architecture(norm=norm, attention=attention)
    try:
        traj = propagate(arch, 0.5, 10, rho0=-1.0)
    except ValueError as err:
        assert "rho0" in str(err)
        return
    assert np.all(traj.q > 0) and np.all(np.abs(traj.rho) <= 1.0)


def test_collapsed_tokens_stay_finite():
    """rho0 = 1 (fully collapsed tokens) is a fixed point: rho stays 1, nothing is NaN.

    One deterministic case (pre-LN tanh, whose kernels test_activations_general.py also
    compiles); the hypothesis tests above cover relu and linear on every norm."""
    arch = Architecture(norm="pre", activation="tanh", sigma_w2=1.0)
    with np.errstate(invalid="ignore"):
        rho = propagate(arch, 0.5, 5, rho0=1.0).rho
    assert np.all(np.isfinite(rho)) and np.all(np.abs(rho - 1.0) <= 2 * EPS), rho
