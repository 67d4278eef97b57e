"""The Hugging Face BertModel adapter runs the same network as our simulator."""
import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")
pytest.importorskip("transformers", reason="the Hugging Face adapter needs transformers (the validation extra)")

from remprop.theory import Architecture  # noqa: E402
from remprop.validation import HuggingFaceBert, SimulatedStack, bert_config  # noqa: E402
from remprop.validation.inputs import gaussian_tokens, text_tokens  # noqa: E402
from remprop.validation.measurements import attention_statistics, token_statistics  # noqa: E402
from remprop.validation.settings import SimulationSettings  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))

# float64: both compute the same arithmetic in a different order, so they agree to a few
# ulps times the depth; float32: to ~1e-6 relative. Statistics are sums of such numbers.
TOLERANCE = {"float64": 1e-10, "float32": 2e-5}

CASES = [
    (Architecture(heads=1), dict(causal=False), "float64"),
    (Architecture(alpha_sa=1.3, alpha_mlp=0.7, heads=4), dict(causal=False), "float64"),
    (Architecture(attention="gain-controlled", activation="linear", heads=2), dict(causal=False), "float64"),
    (Architecture(alpha_sa=1.2, activation="gelu", heads=2), dict(causal=True), "float64"),
    (Architecture(activation="erf", heads=1), dict(causal=False), "float64"),
    (Architecture(alpha_sa=1.3, heads=1), dict(causal=False), "float32"),
    # output projection W_O in BertSelfOutput.dense, W2 with its own variance (d_ff = 96 != d = 64)
    (Architecture(activation="gelu", sigma_o2=0.6, sigma_w2_out=0.9, alpha_sa=1.1, heads=2), dict(causal=False),
     "float64"),
    # W_O after the gain-controlled centring hook (which adds the value bias back first)
    (Architecture(attention="gain-controlled", sigma_o2=1.7, sigma_w2_out=0.3, heads=4), dict(causal=False),
     "float64"),
    # query/key variance over d_H (each head at H beta): the stack's weights carry the scale
    (Architecture(heads=4, qk_scaling="head", alpha_sa=1.3), dict(causal=False), "float64"),
]


def _run(model, batch):
    """Hidden states of real tokens and per-layer statistics, from one forward pass."""
    hidden, stats = [], []

    def observe(layer, h, probs):
        hidden.append(h[batch.mask])
        row = token_statistics(h, batch.mask)
        if probs is not None:
            row.update(attention_statistics(probs, batch.mask))
        stats.append(row)

    model.forward(batch.tokens, batch.mask, observe)
    return hidden, stats


@pytest.mark.parametrize("arch, options, dtype", CASES,
                         ids=[f"{a.attention}-{a.activation}-a{a.alpha_sa}-h{a.heads}{a.qk_scaling}-{o}-{d}"
                              + (f"-o{a.sigma_o2}-w{a.sigma_w2_out}" if a.output_projection else "")
                              for a, o, d in CASES])
def test_bert_model_matches_the_simulator(arch, options, dtype):
    sim = SimulationSettings(width=64, d_ff=96, seq_len=160, dtype=dtype, device="cpu", **options)
    stack = SimulatedStack(arch, 1.5, 4, sim=sim, seed=7)
    bert = HuggingFaceBert(stack)
    assert type(bert.model).__name__ == "BertModel"
    batch = text_tokens(9, seq_len=160, width=64, seed=7, padded=True, dtype=dtype, device="cpu")
    assert (~batch.mask).any()  # some sequences are padded
    (h_ours, s_ours), (h_theirs, s_theirs) = _run(stack, batch), _run(bert, batch)
    assert len(h_ours) == len(h_theirs) == stack.depth + 1
    tol = TOLERANCE[dtype]
    for layer in range(stack.depth + 1):
        torch.testing.assert_close(h_theirs[layer], h_ours[layer], rtol=10 * tol, atol=10 * tol)
        assert set(s_theirs[layer]) == set(s_ours[layer]) == (
            {"q", "p", "rho", "cosine"} | ({"y2", "entropy"} if layer else set()))
        for key, value in s_ours[layer].items():
            torch.testing.assert_close(s_theirs[layer][key], value, rtol=tol, atol=tol, msg=f"{key} {layer}")


def test_bert_output_projection_holds_the_stacks_weights():
    stack = SimulatedStack(Architecture(sigma_o2=0.5, sigma_w2_out=0.7), 0.5, 2,
                           sim=SimulationSettings(width=32, seq_len=16, d_ff=48, dtype="float64", device="cpu"))
    bert = HuggingFaceBert(stack)
    for index, layer in enumerate(bert.model.encoder.layer):
        w = stack.weights(index)
        dense = layer.attention.output.dense
        assert isinstance(dense, torch.nn.Linear) and dense.bias is None
        assert torch.equal(dense.weight, w.output) and torch.equal(layer.output.dense.weight, w.mlp.w2)
    plain = HuggingFaceBert(SimulatedStack(Architecture(), 0.5, 1,
                                           sim=SimulationSettings(width=32, seq_len=16, device="cpu")))
    assert isinstance(plain.model.encoder.layer[0].attention.output.dense, torch.nn.Identity)


def test_bert_statistics_change_with_alpha():
    # The skip hooks act: a different alpha_sa gives different hidden states.
    x = gaussian_tokens(1.0, 0.3, count=2, seq_len=16, width=32, seed=0, dtype="float64", device="cpu").tokens
    outs = [HuggingFaceBert(SimulatedStack(Architecture(alpha_sa=a), 0.5, 2,
                                           sim=SimulationSettings(width=32, seq_len=16, dtype="float64",
                                                                  device="cpu")))(x) for a in (1.0, 2.0)]
    assert not torch.allclose(*outs)


def test_bert_config_and_unsupported_block_orders():
    stack = SimulatedStack(Architecture(heads=4), 0.5, 3,
                           sim=SimulationSettings(width=32, seq_len=16, d_ff=48, device="cpu"))
    config = bert_config(stack)
    assert (config.hidden_size, config.intermediate_size, config.num_attention_heads, config.num_hidden_layers) \
        == (32, 48, 4, 3)
    assert config.hidden_act == "relu" and config.hidden_dropout_prob == 0.0
    assert config.attention_probs_dropout_prob == 0.0
    for norm in ("pre", "none"):
        with pytest.raises(ValueError, match="norm"):
            HuggingFaceBert(SimulatedStack(Architecture(norm=norm), 0.5, 1,
                                           sim=SimulationSettings(width=8, seq_len=4, device="cpu")))
    with pytest.raises(ValueError, match="stack"):
        bert_config("stack")
