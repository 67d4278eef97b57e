"""SimulationSettings: the simulation bundle, validated once at construction."""
import pytest

torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")

from remprop.theory import Architecture  # noqa: E402
from remprop.validation import SimulatedStack, SimulationSettings  # noqa: E402
from remprop.validation.inputs import input_batches  # noqa: E402
from remprop.validation.settings import check_simulation  # noqa: E402


def test_fields_are_resolved_once():
    sim = SimulationSettings(width=32, seq_len=16, seeds=3, dtype="float64", device="cpu", d_ff=None)
    assert sim.seeds == (0, 1, 2) and sim.dtype is torch.float64 and sim.device == torch.device("cpu")
    assert sim.mlp_width == 32 and sim.dtype_name == "float64" and sim.samples == 3 * sim.sequences
    # d_ff None follows the width through replace (the MLP width is not frozen at construction)
    assert sim.replace(width=64).mlp_width == 64 and sim.replace(d_ff=48).mlp_width == 48
    assert SimulationSettings(seeds=[5, 2], device="cpu").seeds == (5, 2)


def test_dict_round_trip_and_equality():
    sim = SimulationSettings(width=32, seq_len=16, seeds=[1, 4], inputs="synthetic", rho0=0.3, device="cpu")
    data = sim.to_dict()
    assert data["dtype"] == "float32" and data["device"] == "cpu" and data["seeds"] == [1, 4]
    assert SimulationSettings.from_dict(data) == sim
    assert sim.replace(rho0=0.4) != sim


@pytest.mark.parametrize("fields, name", [
    (dict(width=1), "width"), (dict(seq_len=1), "seq_len"), (dict(d_ff=0), "d_ff"), (dict(causal="yes"), "causal"),
    (dict(dtype="float16"), "dtype"), (dict(device="tpu"), "device"), (dict(seeds=0), "seeds"),
    (dict(seeds=[1, 1]), "seeds"), (dict(sequences=0), "sequences"), (dict(batch_size=0), "batch_size"),
    (dict(inputs="images"), "inputs"), (dict(q0=0.0), "q0"), (dict(rho0=1.5), "rho0"),
    (dict(seq_len=4, rho0=-0.5), "rho0"), (dict(layer_norm_eps=-1.0), "layer_norm_eps"),
])
def test_errors_name_the_field(fields, name):
    with pytest.raises(ValueError, match=f"^{name}"):
        SimulationSettings(**fields)
    with pytest.raises(ValueError, match=f"^{name}"):  # replace validates again
        SimulationSettings(device="cpu").replace(**fields)


def test_check_simulation_defaults_and_type():
    assert check_simulation(None, width=64, device="cpu").width == 64
    sim = SimulationSettings(device="cpu")
    assert check_simulation(sim, width=64) is sim
    with pytest.raises(ValueError, match="^sim"):
        check_simulation({"width": 64})


def test_input_batches_are_the_inputs_of_the_settings():
    sim = SimulationSettings(width=16, seq_len=8, sequences=3, inputs="synthetic", rho0=0.25, device="cpu")
    batches = list(sim.input_batches(seed=2, batch_size=2))
    assert [len(b) for b in batches] == [2, 1]
    direct = list(input_batches("synthetic", seed=2, sequences=3, batch_size=2, seq_len=8, width=16, rho0=0.25,
                                device="cpu"))
    for a, b in zip(batches, direct):
        assert torch.equal(a.tokens, b.tokens)


def test_stack_reads_its_sizes_from_the_settings():
    sim = SimulationSettings(width=24, seq_len=12, d_ff=40, causal=True, dtype="float64", device="cpu",
                             layer_norm_eps=1e-6)
    stack = SimulatedStack(Architecture(heads=2), 0.5, 2, sim=sim, seed=3)
    assert (stack.width, stack.d_ff, stack.seq_len, stack.causal, stack.dtype, stack.layer_norm_eps, stack.seed) == \
        (24, 40, 12, True, torch.float64, 1e-6, 3)
    assert stack.sim is sim and "sim=SimulationSettings(" in repr(stack)
    assert stack.weights(0).mlp.w1.shape == (40, 24)
