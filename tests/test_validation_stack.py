"""remprop.validation: short simulated stacks against the theory, and compare().

Sizes d = T = 128, 6 blocks, 16 seeds with one sequence each (independent samples).
Tolerance per layer: K * sem + finite-T bias + finite-width LayerNorm bias, where

* sem is the standard error over the 16 seeds and K = 5 (Student t with 15 dof:
  P(|t| > 5) ~ 2e-4 per layer and architecture, < 1% over all checks here);
* the finite-T bias is |annealed - asymptotic|: the theory propagated once with the
  asymptotic participation ratio (what remprop.theory does) and once with the annealed
  finite-T estimate Y2 = e^v / T, v = beta^2 q (q - p) log T (valid for beta < beta_c / 2,
  asserted below; docs/theory.md section 3);
* each LayerNorm returns the mean cosine of its input rather than p/q; the excess
  (3/4) rho Var(eps) + Var(eps)/(T - 1) with Var(eps) = 2 (1 - rho)^2 / d is below
  0.23 / d (derived in test_validation_inputs); counted once per LayerNorm applied.
"""
import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")

from remprop.theory import Architecture, beta_critical, layernorm_map, mlp_map, skip_map  # noqa: E402
from remprop.theory.components.attention import gain_controlled_attention_core, softmax_attention_core  # noqa: E402
from remprop.validation import SimulationSettings, compare  # noqa: E402
from remprop.validation.simulator import SimulatedStack  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))

D = T = 128
DEPTH = 6
SEEDS = 16
K = 5.0
LN_BIAS = 0.23 / D


def _annealed_rho(arch, beta, depth, q0, rho0):
    """rho per layer with the annealed finite-T participation ratio (test-local composition)."""
    s = dict(sigma_v2=arch.sigma_v2, sigma_b2=arch.sigma_b2)

    def attention(q, p):
        assert beta < beta_critical(q, p) / 2  # the annealed estimate holds here
        y2 = min(math.exp(beta ** 2 * q * (q - p) * math.log(T)) / T, 1.0)
        if arch.attention == "softmax":
            return softmax_attention_core(q, p, y2, s["sigma_v2"], s["sigma_b2"])
        return gain_controlled_attention_core(q, p, y2 - 1.0 / T, s["sigma_v2"], s["sigma_b2"])

    def ff(q, p):
        return mlp_map(q, p, arch.sigma_w2, arch.sigma_b2, arch.activation)

    q, p = q0, q0 * rho0
    rho = [rho0]
    for _ in range(depth):
        if arch.norm == "post":
            q, p = layernorm_map(*skip_map(*attention(q, p), q, p, arch.alpha_sa))
            q, p = layernorm_map(*skip_map(*ff(q, p), q, p, arch.alpha_mlp))
        elif arch.norm == "pre":
            q, p = skip_map(*attention(*layernorm_map(q, p)), q, p, arch.alpha_sa)
            q, p = skip_map(*ff(*layernorm_map(q, p)), q, p, arch.alpha_mlp)
        else:
            q, p = skip_map(*attention(q, p), q, p, arch.alpha_sa)
            q, p = skip_map(*ff(q, p), q, p, arch.alpha_mlp)
        rho.append(p / q)
    return np.array(rho)


ARCHITECTURES = [
    Architecture(),
    Architecture(alpha_sa=0.6),
    Architecture(norm="pre"),
    Architecture(norm="none"),
    Architecture(attention="gain-controlled"),
    Architecture(norm="pre", attention="gain-controlled"),
    Architecture(norm="pre", activation="linear", alpha_mlp=0.8),
]


@pytest.mark.parametrize("arch", ARCHITECTURES,
                         ids=[f"{a.norm}-{a.attention}-{a.activation}-a{a.alpha_sa}" for a in ARCHITECTURES])
def test_short_stack_follows_the_theory(arch):
    beta = 0.5
    c = compare(arch, beta, DEPTH, sim=SimulationSettings(width=D, seq_len=T, device="cpu", seeds=SEEDS, sequences=1,
                                                          inputs="synthetic", q0=1.0, rho0=0.2), observable="rho")
    assert c.samples == SEEDS and c.theory.rho[0] == pytest.approx(0.2)
    sem = c.std("rho") / math.sqrt(SEEDS)
    finite_t = np.abs(_annealed_rho(arch, beta, DEPTH, 1.0, 0.2) - c.theory.rho)
    layer_norms = 0 if arch.norm == "none" else 2 * np.arange(DEPTH + 1)
    tolerance = K * sem + finite_t + layer_norms * LN_BIAS + 1e-9
    assert np.all(c.error <= tolerance), (c.error, tolerance)


def test_text_inputs_follow_the_theory_from_the_measured_input_state():
    # Embedded text (std 0.1 tables): q0 ~ 0.02, the theory starts from the measured input.
    arch, beta = Architecture(alpha_sa=1.3), 0.5
    c = compare(arch, beta, DEPTH, sim=SimulationSettings(width=D, seq_len=T, device="cpu", seeds=SEEDS, sequences=1,
                                                          inputs="text"), observable="rho")
    assert c.settings["q0"] == pytest.approx(0.02, rel=0.1)
    sem = c.std("rho") / math.sqrt(SEEDS)
    q0, rho0 = c.settings["q0"], c.settings["rho0"]
    finite_t = np.abs(_annealed_rho(arch, beta, DEPTH, q0, rho0) - c.theory.rho)
    tolerance = K * sem + finite_t + 2 * np.arange(DEPTH + 1) * LN_BIAS + 1e-9
    assert np.all(c.error <= tolerance), (c.error, tolerance)


def test_package_exports_the_functions_not_the_modules():
    import remprop.validation as validation
    import remprop.validation.experiments.simulated_figures  # noqa: F401 - imports the comparison module first
    from remprop.validation import comparison

    assert validation.compare is comparison.compare and callable(validation.compare)
    assert set(validation.__all__) <= set(dir(validation))
    with pytest.raises(AttributeError):
        validation.no_such_name


def test_comparison_table_and_json():
    c = compare(Architecture(), 0.5, 2, sim=SimulationSettings(width=16, seq_len=16, device="cpu", seeds=[3, 5],
                                                               sequences=2, inputs="synthetic", rho0=0.3))
    assert c.settings["seeds"] == [3, 5] and c.samples == 4
    rows = c.table()
    assert [r["layer"] for r in rows] == [0, 1, 2]
    assert "theory_y2" not in rows[0] and {"theory_y2", "measured_y2"} <= set(rows[1])
    assert c.max_abs_error == pytest.approx(max(r["error"] for r in rows[1:]))
    assert c.mean_abs_error == pytest.approx(np.mean([r["error"] for r in rows[1:]]))
    for r in rows:
        assert r["error"] == pytest.approx(abs(r["theory_rho"] - r["measured_mean"]))
    data = json.loads(json.dumps(c.to_dict()))
    assert len(data["per_sequence"]["cosine"]) == 4 and len(data["per_sequence"]["y2"][0]) == 2
    assert "max |theory - measured cosine|" in c.summary()
    # theory Y2 of the first layer: asymptotic value on the input (q, p)
    assert rows[1]["theory_y2"] == 0.0


def test_stack_forward_is_deterministic_and_runs_in_float64():
    arch = Architecture(norm="pre")
    x = torch.randn(2, 16, 24, generator=torch.Generator().manual_seed(0))
    a = SimulatedStack(arch, 0.7, 3, sim=SimulationSettings(width=24, seq_len=16, dtype="float64", device="cpu"),
                       seed=1)
    b = SimulatedStack(arch, 0.7, 3, sim=SimulationSettings(width=24, seq_len=16, dtype="float64", device="cpu"),
                       seed=1)
    out = a(x)
    assert out.dtype == torch.float64 and torch.equal(out, b(x))
    assert not torch.equal(out, SimulatedStack(arch, 0.7, 3, sim=SimulationSettings(width=24, seq_len=16,
                                                                                    dtype="float64", device="cpu"),
                                               seed=2)(x))
    trace = a.trace(x)
    assert trace.q.shape == (2, 4) and trace.y2.shape == (2, 3)


def test_one_layer_weights_at_a_time():
    # Weights are drawn per block while the input passes: drawing a block's weights must
    # not depend on the others, and forward draws each block exactly once.
    stack = SimulatedStack(None, 0.5, 4, sim=SimulationSettings(width=16, seq_len=8, device="cpu"))
    drawn = []
    original = stack.weights
    stack.weights = lambda layer: drawn.append(layer) or original(layer)
    stack(torch.zeros(1, 8, 16) + 0.1)
    assert drawn == [0, 1, 2, 3]


@pytest.mark.parametrize("kwargs, name", [
    (dict(beta=0.0), "beta"), (dict(depth=0), "depth"), (dict(width=1), "width"),
    (dict(arch=Architecture(heads=3)), "heads"),
    (dict(seq_len=1), "seq_len"), (dict(d_ff=0), "d_ff"), (dict(causal="yes"), "causal"),
    (dict(dtype="float16"), "dtype"), (dict(device="tpu"), "device"), (dict(seed=-1), "seed"),
    (dict(arch=Architecture(alpha_sa=[1.0, 2.0])), "alpha_sa"), (dict(arch="post"), "arch"),
    (dict(sim=dict(width=16)), "sim"),
])
def test_stack_rejects_bad_input(kwargs, name):
    # the stack's own arguments (arch, beta, depth, seed), the rest through SimulationSettings
    args = dict(arch=None, beta=0.5, depth=2, width=16, seq_len=8)
    args.update(kwargs)
    stack_args = {key: args.pop(key) for key in ("arch", "beta", "depth", "seed", "sim") if key in args}
    with pytest.raises(ValueError, match=name):
        sim = stack_args.pop("sim") if "sim" in stack_args else SimulationSettings(**args)
        SimulatedStack(stack_args.pop("arch"), stack_args.pop("beta"), stack_args.pop("depth"), sim=sim,
                       **stack_args)


def test_forward_and_compare_reject_bad_input():
    stack = SimulatedStack(None, 0.5, 1, sim=SimulationSettings(width=16, seq_len=8, device="cpu"))
    with pytest.raises(ValueError, match="x"):
        stack(torch.zeros(1, 9, 16))
    with pytest.raises(ValueError, match="mask"):
        stack(torch.zeros(1, 8, 16), torch.ones(1, 8))
    with pytest.raises(ValueError, match="layer"):
        stack.weights(1)
    kw = dict(seq_len=8, width=16, device="cpu")
    for bad, name in [(dict(inputs="images"), "inputs"), (dict(seeds=0), "seeds"), (dict(seeds=[]), "seeds"),
                      (dict(seeds=[1, -2]), "seeds"), (dict(sequences=0), "sequences"),
                      (dict(observable="q"), "observable"), (dict(batch_size=0), "batch_size"),
                      (dict(inputs="synthetic", rho0=2.0), "rho0"), (dict(sim="cpu"), "sim")]:
        with pytest.raises(ValueError, match=name):
            fields = {**kw, **bad}
            observable = fields.pop("observable", "cosine")
            sim = fields.pop("sim") if "sim" in fields else SimulationSettings(**fields)
            compare(None, 0.5, 1, sim=sim, observable=observable)


def test_theory_calls_keep_the_torch_thread_count():
    # numba's OpenMP layer sets the process's OpenMP thread count at every parallel launch;
    # torch reads it. Inside torch_threads(1) a theory call must not put torch on every core.
    import torch

    from remprop.theory import Architecture, final_state
    from remprop.validation.backend import torch_threads

    with torch_threads(1):
        final_state(Architecture(), np.full(64, 0.5), 4)
        assert torch.get_num_threads() == 1
