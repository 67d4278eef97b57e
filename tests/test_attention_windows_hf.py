"""The sliding windows the theory reads from a config are the masks the ``transformers`` modules apply:
the attention probabilities of the real modules (eager attention, at random init) are zero exactly
outside each row's window, layer by layer, and a streamed Gemma 2 (one block redrawn per layer) keeps
its alternating local and global layers at T beyond the window."""
from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from remprop.theory import model_spec  # noqa: E402
from remprop.theory.attention_masks import causal_window_mask, layer_window  # noqa: E402
from remprop.theory.models import CONFIG_DIR  # noqa: E402
from remprop.validation.hf_models import build_model  # noqa: E402

from test_attention_windows import TINY_MISTRAL  # noqa: E402
from test_streamed_layers import assert_streamed_is_the_full_model  # noqa: E402

_SMALL = {"hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2, "num_key_value_heads": 1,
          "vocab_size": 100}


def _shipped(name, **fields):
    return {**json.loads((CONFIG_DIR / f"{name}.json").read_text()), **_SMALL, **fields}


CASES = {
    "mistral": TINY_MISTRAL,
    "qwen2": dict(TINY_MISTRAL, model_type="qwen2", num_hidden_layers=3, use_sliding_window=True,
                  max_window_layers=1),
    "phi3": dict(TINY_MISTRAL, model_type="phi3", sliding_window=5, vocab_size=32064),  # its default pad id 32000
    "gemma2": _shipped("gemma-2-2b", num_hidden_layers=4, head_dim=16, query_pre_attn_scalar=16, sliding_window=4,
                       max_position_embeddings=64),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_modules_mask_is_the_theorys(name):
    seq_len = 20
    spec = model_spec(CASES[name], seq_len=seq_len)
    assert spec.attention_windows  # every case has windowed layers shorter than T
    model = build_model(spec, seed=0)
    model.set_attn_implementation("eager")
    ids = torch.randint(0, 100, (2, seq_len), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        attentions = model(input_ids=ids, output_attentions=True).attentions
    assert len(attentions) == spec.depth
    for layer, probs in enumerate(attentions):
        seen = (probs > 0).numpy()
        expected = causal_window_mask(seq_len, layer_window(spec.attention_windows, layer))
        assert np.array_equal(seen, np.broadcast_to(expected, seen.shape)), (name, layer)


def test_a_streamed_gemma2_keeps_its_local_and_global_layers():
    # T = 32 with a window of 4 on the even layers: the streamed stack (one block redrawn per layer, the
    # model's forward choosing each layer's mask from config.layer_types) is the full model with the
    # redrawn weights, statistic by statistic (the same float32 operations: equal to rounding)
    spec = model_spec(CASES["gemma2"], seq_len=32)
    assert spec.attention_windows == (4, None, 4, None)
    assert_streamed_is_the_full_model(spec, seed=1)


def assert_the_simulated_stack_masks(pattern):
    """The library's own torch stack (validation/simulator.py, T = 12, 2 blocks) with the mask ``pattern``:
    each block's attention probabilities are zero exactly outside its mask; the fused path (no
    probabilities) gives the same outputs. Returns the settings."""
    from remprop.theory import Architecture
    from remprop.validation.settings import SimulationSettings
    from remprop.validation.simulator import SimulatedStack

    sim = SimulationSettings(width=32, seq_len=12, causal=True, window=pattern, seeds=1, sequences=2,
                             inputs="synthetic", dtype="float64")
    stack = SimulatedStack(Architecture(norm="pre", heads=2), 0.7, 2, sim=sim, seed=0)
    x = next(iter(sim.input_batches(0))).tokens
    seen = []
    stack.forward(x, observe=lambda layer, h, probs: seen.append(probs) if probs is not None else None)
    assert len(seen) == 2
    for layer, probs in enumerate(seen):
        expected = causal_window_mask(12, layer_window(sim.window, layer))
        assert np.array_equal((probs > 0).cpu().numpy(), np.broadcast_to(expected, probs.shape)), layer
    x_in = stack.prepare_inputs(x)[0]
    for layer in range(2):
        full, _ = stack.block(x_in, stack.weights(layer), layer=layer)
        fused, probs = stack.block(x_in, stack.weights(layer), need_probs=False, layer=layer)
        assert probs is None
        torch.testing.assert_close(fused, full, rtol=1e-10, atol=1e-12)
    return sim


def test_the_simulated_stack_masks_each_layer_by_its_window():
    # the pattern (3, None): the first block sees each row's last 3 keys, the second the causal mask
    from remprop.validation.settings import SimulationSettings

    sim = assert_the_simulated_stack_masks((3, None))
    assert sim.to_dict()["window"] == [3, None] and "window" not in sim.replace(window=None).to_dict()
    with pytest.raises(ValueError, match="window"):
        SimulationSettings(width=32, seq_len=12, window=3)


def test_a_windowed_stack_follows_the_windowed_gram_state():
    # d = 256, T = 64, a window of 4 keys on every layer, 3 pre-RMSNorm SwiGLU blocks, beta = 1, rho0 = 0.3,
    # 6 seeds x 2 sequences, standard error of the 6 seed means (measured: 0.360, 0.411, 0.441, +-0.008).
    # The windowed Gram state is within 3 standard errors (0.365, 0.414, 0.450); the unwindowed one
    # (0.444, 0.563, 0.649) is more than 8 away: the stack and the theory mask alike.
    from remprop.theory import Architecture
    from remprop.theory.causal import propagate_causal_gram
    from remprop.validation.causal import causal_comparison
    from remprop.validation.settings import SimulationSettings

    arch = Architecture(norm="pre", norm_type="rms", mlp="gated", activation="silu", sigma_v2=1.0)
    seeds = 6
    sim = SimulationSettings(width=256, seq_len=64, seeds=seeds, sequences=2, inputs="synthetic", rho0=0.3,
                             causal=True, window=4)
    cmp = causal_comparison(arch, 1.0, 3, sim=sim, last=50, observable="rho", gram=True)
    per_seed = cmp.measured_last.reshape(seeds, 2, -1).mean(axis=1)
    mean, se = per_seed.mean(axis=0), per_seed.std(axis=0, ddof=1) / np.sqrt(seeds)
    assert np.all(np.abs(cmp.theory_gram[1:] - mean[1:]) < 3 * se[1:])
    full = propagate_causal_gram(arch, 1.0, 3, 64, 1.0, 0.3, last=50).rho
    assert np.all(np.abs(full[1:] - mean[1:]) > 8 * se[1:])
