"""Every bad-input path of the theory API raises ValueError naming the parameter."""
import math
import re

import numpy as np
import pytest

from remprop.theory import (
    ACTIVATIONS,
    ATTENTIONS,
    NORMS,
    NUMERIC_FIELDS,
    Architecture,
    activation_moments,
    components as C,
    beta_critical,
    dense_map,
    final_state,
    gain_controlled_attention_map,
    layernorm_map,
    mlp_map,
    participation_ratio,
    propagate,
    relu_kernel,
    skip_map,
    softmax_attention_map,
)

NAN = math.nan
ARCH = Architecture()


def assert_names(err, name):
    """The message mentions ``name`` as a word (``q`` must not match inside ``q_branch``)."""
    assert re.search(rf"(?<![\w]){re.escape(name)}(?![\w])", str(err)), (name, str(err))


# (parameter named in the error, call) ------------------------------------------------
STATE_MAPS = {
    "beta_critical": lambda q, p: beta_critical(q, p),
    "participation_ratio": lambda q, p: participation_ratio(1.0, q, p),
    "softmax_attention_map": lambda q, p: softmax_attention_map(1.0, q=q, p=p),
    "gain_controlled_attention_map": lambda q, p: gain_controlled_attention_map(1.0, q=q, p=p),
    "layernorm_map": lambda q, p: layernorm_map(q, p),
    "dense_map": lambda q, p: dense_map(q, p),
    "mlp_map": lambda q, p: mlp_map(q, p),
    "skip_map (input)": lambda q, p: skip_map(1.0, 0.0, q, p),
}
BAD_STATES = [  # (q, p, named)
    (0.0, 0.0, "q"), (-1.0, 0.0, "q"), (NAN, 0.0, "q"), (np.array([1.0, NAN]), 0.0, "q"),
    (math.inf, 0.0, "q"), ("one", 0.0, "q"),
    (1.0, 1.5, "p"), (1.0, -1.5, "p"), (1.0, NAN, "p"), (1.0, np.array([0.0, NAN]), "p"),
    (np.array([1.0, 2.0]), np.array([0.5, 2.5]), "p"), (1.0, "zero", "p"),
]


@pytest.mark.parametrize("q, p, name", BAD_STATES)
@pytest.mark.parametrize("function", sorted(STATE_MAPS))
def test_bad_order_parameters_are_rejected_by_every_map(function, q, p, name):
    with pytest.raises(ValueError) as err:
        STATE_MAPS[function](q, p)
    assert_names(err.value, name)


BAD_CALLS = {
    # participation ratio and attention: beta > 0, variances >= 0
    "participation_ratio beta=0": (lambda: participation_ratio(0.0, 1.0, 0.0), "beta"),
    "participation_ratio beta<0": (lambda: participation_ratio(-1.0, 1.0, 0.0), "beta"),
    "participation_ratio beta=nan": (lambda: participation_ratio(NAN, 1.0, 0.0), "beta"),
    "participation_ratio beta array nan": (
        lambda: participation_ratio(np.array([0.5, NAN]), 1.0, 0.0), "beta"),
    "softmax beta=0": (lambda: softmax_attention_map(0.0, q=1.0, p=0.0), "beta"),
    "softmax beta=nan": (lambda: softmax_attention_map(NAN, q=1.0, p=0.0), "beta"),
    "softmax sigma_v2<0": (lambda: softmax_attention_map(1.0, q=1.0, p=0.0, sigma_v2=-0.1), "sigma_v2"),
    "softmax sigma_v2=nan": (lambda: softmax_attention_map(1.0, q=1.0, p=0.0, sigma_v2=NAN), "sigma_v2"),
    "softmax sigma_b2<0": (lambda: softmax_attention_map(1.0, q=1.0, p=0.0, sigma_b2=-1e-4), "sigma_b2"),
    "softmax sigma_b2=nan": (lambda: softmax_attention_map(1.0, q=1.0, p=0.0, sigma_b2=NAN), "sigma_b2"),
    "gain-controlled beta<0": (lambda: gain_controlled_attention_map(-2.0, q=1.0, p=0.0), "beta"),
    "gain-controlled sigma_v2<0": (
        lambda: gain_controlled_attention_map(1.0, q=1.0, p=0.0, sigma_v2=-1.0), "sigma_v2"),
    "gain-controlled sigma_b2=nan": (
        lambda: gain_controlled_attention_map(1.0, q=1.0, p=0.0, sigma_b2=NAN), "sigma_b2"),
    # skip connection: branch state and alpha
    "skip q_branch<=0": (lambda: skip_map(0.0, 0.0, 1.0, 0.0), "q_branch"),
    "skip q_branch=nan": (lambda: skip_map(NAN, 0.0, 1.0, 0.0), "q_branch"),
    "skip |p_branch|>q_branch": (lambda: skip_map(1.0, 2.0, 1.0, 0.0), "p_branch"),
    "skip p_branch=nan": (lambda: skip_map(1.0, NAN, 1.0, 0.0), "p_branch"),
    "skip alpha<0": (lambda: skip_map(1.0, 0.0, 1.0, 0.0, alpha=-0.5), "alpha"),
    "skip alpha=nan": (lambda: skip_map(1.0, 0.0, 1.0, 0.0, alpha=NAN), "alpha"),
    # dense layers, MLP, activations
    "dense sigma_w2<0": (lambda: dense_map(1.0, 0.0, sigma_w2=-0.2), "sigma_w2"),
    "dense sigma_b2=nan": (lambda: dense_map(1.0, 0.0, sigma_b2=NAN), "sigma_b2"),
    "mlp sigma_w2<0": (lambda: mlp_map(1.0, 0.0, sigma_w2=-0.2), "sigma_w2"),
    "mlp sigma_w2=nan": (lambda: mlp_map(1.0, 0.0, sigma_w2=NAN), "sigma_w2"),
    "mlp sigma_b2<0": (lambda: mlp_map(1.0, 0.0, sigma_b2=-1.0), "sigma_b2"),
    "mlp activation": (lambda: mlp_map(1.0, 0.0, activation="no-such-activation"), "activation"),
    "moments q1<=0": (lambda: activation_moments(0.0, 0.0), "q1"),
    "moments q1=nan": (lambda: activation_moments(NAN, 0.0), "q1"),
    "moments |p1|>q1": (lambda: activation_moments(1.0, 1.1), "p1"),
    "moments p1=nan": (lambda: activation_moments(1.0, NAN), "p1"),
    "moments activation": (lambda: activation_moments(1.0, 0.0, "no-such"), "activation"),
    "relu_kernel c>1": (lambda: relu_kernel(1.5), "c"),
    "relu_kernel c<-1": (lambda: relu_kernel(-1.0 - 1e-9), "c"),
    "relu_kernel c=nan": (lambda: relu_kernel(np.array([0.0, NAN])), "c"),
    # Architecture: categorical fields
    "Architecture norm": (lambda: Architecture(norm="middle"), "norm"),
    "Architecture norm=None": (lambda: Architecture(norm=None), "norm"),
    "Architecture attention": (lambda: Architecture(attention="linear"), "attention"),
    "Architecture activation": (lambda: Architecture(activation="sigmoid-ish"), "activation"),
    "Architecture activation=3": (lambda: Architecture(activation=3), "activation"),
    "Architecture.replace norm": (lambda: ARCH.replace(norm="post-ln"), "norm"),
    "Architecture.replace alpha_sa<0": (lambda: ARCH.replace(alpha_sa=-1.0), "alpha_sa"),
    "Architecture.replace unknown field": (lambda: ARCH.replace(depth=3), "depth"),
    "mlp sigma_w2=sigma_b2=0": (lambda: mlp_map(1.0, 0.0, 0.0, 0.0), "sigma_w2"),
    # attention inputs are T tokens: cosine >= -1/(T - 1), i.e. >= 0 as T -> infinity
    "softmax p<0 (T -> inf)": (lambda: softmax_attention_map(0.5, q=1.0, p=-0.1), "p"),
    "gain-controlled p<0 (T -> inf)": (lambda: gain_controlled_attention_map(0.5, q=1.0, p=-0.1), "p"),
    "softmax p/q<-1/(T-1)": (lambda: softmax_attention_map(0.5, q=1.0, p=-0.2, seq_len=8), "p"),
    "components.softmax_attention p<0": (lambda: C.softmax_attention(1.0)(1.0, -0.1), "p"),
    "pre-LN block p<0": (lambda: ARCH.replace(norm="pre").block(1.0)(2.0, -0.1), "p"),
    "propagate rho0<0 (T -> inf)": (lambda: propagate(ARCH, 0.5, 3, rho0=-0.1), "rho0"),
    "final_state rho0<-1/(T-1)": (
        lambda: final_state(ARCH.replace(seq_len=8), 0.5, 3, rho0=-0.2), "rho0"),
    # propagate / final_state
    "propagate arch": (lambda: propagate("post", 0.5, 3), "arch"),
    "final_state arch": (lambda: final_state(None, 0.5, 3), "arch"),
    "propagate broadcast": (
        lambda: propagate(ARCH.replace(alpha_sa=[0.0, 1.0, 2.0]), [0.5, 1.0], 3), "alpha_sa"),
    "final_state broadcast": (
        lambda: final_state(ARCH.replace(sigma_w2=np.ones(3)), np.ones(2), 3), "sigma_w2"),
    # components
    "components.residual alpha<0": (lambda: C.residual(-1.0, C.layer_norm()), "alpha"),
    "components.residual alpha=nan": (lambda: C.residual(NAN, C.layer_norm()), "alpha"),
    "components.residual branch": (lambda: C.residual(1.0, "attention"), "branch"),
    "components.serial layers": (lambda: C.serial(C.layer_norm(), len), "layers"),
    "components.softmax_attention beta": (lambda: C.softmax_attention(0.0), "beta"),
    "components.softmax_attention sigma_v2": (
        lambda: C.softmax_attention(1.0, sigma_v2=-1.0), "sigma_v2"),
    "components.gain_controlled_attention beta": (
        lambda: C.gain_controlled_attention(NAN), "beta"),
    "components.gain_controlled_attention sigma_b2": (
        lambda: C.gain_controlled_attention(1.0, sigma_b2=-1.0), "sigma_b2"),
    "components.mlp activation": (lambda: C.mlp(activation="no-such"), "activation"),
    "components.mlp sigma_w2": (lambda: C.mlp(sigma_w2=NAN), "sigma_w2"),
    "Architecture.block beta": (lambda: ARCH.block(0.0), "beta"),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_bad_parameter_is_named(case):
    call, name = BAD_CALLS[case]
    with pytest.raises(ValueError) as err:
        call()
    assert_names(err.value, name)


@pytest.mark.parametrize("value", [-0.1, NAN, math.inf, "abc", None, [0.2, NAN], [[0.1], [-0.3]]])
@pytest.mark.parametrize("field", NUMERIC_FIELDS)
def test_architecture_rejects_bad_numeric_fields(field, value):
    with pytest.raises(ValueError) as err:
        Architecture(**{field: value})
    assert_names(err.value, field)


def test_missing_numeric_field_says_it_must_be_a_number():
    with pytest.raises(ValueError, match="alpha_sa must be a real number"):
        Architecture(alpha_sa=None)


def test_finite_seq_len_accepts_the_most_negative_simplex_cosine():
    """A regular simplex of T tokens has cosine exactly -1/(T - 1); it must be accepted
    and stay physical (q > 0, |rho| <= 1)."""
    T = 8
    traj = propagate(ARCH.replace(seq_len=T), 0.5, 3, rho0=-1.0 / (T - 1))
    assert np.all(traj.q > 0) and np.all(np.abs(traj.rho) <= 1.0)
    q_a, p_a = softmax_attention_map(0.5, q=1.0, p=-1.0 / (T - 1), seq_len=T)
    assert q_a > 0 and abs(p_a) <= q_a


def test_architecture_choices_are_the_documented_ones():
    assert set(NORMS) == {"post", "pre", "none"}
    assert set(ATTENTIONS) == {"softmax", "gain-controlled"}
    assert {"relu", "linear"} <= set(ACTIVATIONS)
    for norm in NORMS:
        for attention in ATTENTIONS:
            for activation in ACTIVATIONS:
                Architecture(norm=norm, attention=attention, activation=activation)


@pytest.mark.parametrize("run", [propagate, final_state], ids=["propagate", "final_state"])
@pytest.mark.parametrize("kwargs, name", [
    ({"beta": 0.0}, "beta"), ({"beta": -0.5}, "beta"), ({"beta": NAN}, "beta"),
    ({"beta": [0.5, NAN]}, "beta"), ({"beta": math.inf}, "beta"), ({"beta": "big"}, "beta"),
    ({"depth": 0}, "depth"), ({"depth": -3}, "depth"), ({"depth": 2.5}, "depth"),
    ({"depth": "3"}, "depth"), ({"depth": None}, "depth"), ({"depth": True}, "depth"),
    ({"depth": NAN}, "depth"), ({"depth": [3]}, "depth"),
    ({"q0": 0.0}, "q0"), ({"q0": -1.0}, "q0"), ({"q0": NAN}, "q0"), ({"q0": [1.0, -1.0]}, "q0"),
    ({"rho0": 1.5}, "rho0"), ({"rho0": -1.01}, "rho0"), ({"rho0": NAN}, "rho0"),
    ({"rho0": [0.0, 2.0]}, "rho0"),
])
def test_propagation_inputs_are_checked(run, kwargs, name):
    arguments = {"beta": 0.5, "depth": 3, **kwargs}
    with pytest.raises(ValueError) as err:
        run(ARCH, arguments.pop("beta"), arguments.pop("depth"), **arguments)
    assert_names(err.value, name)


def test_integral_float_depth_is_accepted():
    np.testing.assert_array_equal(propagate(ARCH, 0.5, 3.0).rho, propagate(ARCH, 0.5, 3).rho)


# --- error names of the less common paths
def test_broadcast_error_names_rho0():
    with pytest.raises(ValueError) as err:
        propagate(ARCH, [0.5, 1.0], 3, rho0=[0.0, 0.1, 0.2])
    assert_names(err.value, "rho0")


def test_final_state_rejects_a_non_callable_progress():
    with pytest.raises(ValueError) as err:
        final_state(ARCH, 0.5, 3, progress=5)
    assert_names(err.value, "progress")


@pytest.mark.parametrize("q, p, name", [(0.0, 0.0, "q"), (-1.0, 0.0, "q"), (1.0, NAN, "p"),
                                        (1.0, 5.0, "p")])
@pytest.mark.parametrize("component", ["layer_norm", "mlp", "softmax_attention", "block"])
def test_components_reject_bad_order_parameters(component, q, p, name):
    maps = {"layer_norm": C.layer_norm(), "mlp": C.mlp(), "softmax_attention": C.softmax_attention(1.0),
            "block": ARCH.block(1.0)}
    with pytest.raises(ValueError) as err:
        maps[component](q, p)
    assert_names(err.value, name)


def test_rounding_below_the_simplex_floor_is_clipped_not_rejected():
    # A cosine measured from data lands ~1e-11 below an exact 0: that is rounding, and the
    # trajectory must equal the one from the floor itself; 1e-6 below is a real error.
    exact = propagate(ARCH, 0.5, 3, rho0=0.0)
    rounded = propagate(ARCH, 0.5, 3, rho0=-1.3e-11)
    np.testing.assert_array_equal(rounded.rho, exact.rho)
    with pytest.raises(ValueError, match="rho0"):
        propagate(ARCH, 0.5, 3, rho0=-1e-6)
