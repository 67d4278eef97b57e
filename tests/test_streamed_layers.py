"""A decoder measured one block at a time (validation/streamed_layers.py): the streamed stack is the
model with the redrawn weights, its redraws are the library's distribution, and it measures what
the full model measures."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from remprop.theory import model_spec  # noqa: E402
from remprop.validation import probe  # noqa: E402
from remprop.validation import hf_models, streamed_layers  # noqa: E402
from remprop.validation.hf_models import (build_model, model_bytes, model_inputs, needs_streaming,  # noqa: E402
                                         reduced_spec, simulate_model, streamed_model)
from remprop.validation.streamed_layers import available_memory  # noqa: E402

FAMILIES = ["llama-3.2-1b", "qwen2.5-0.5b", "phi-3-mini", "gemma-2-2b", "olmo-2-1b", "mistral-7b"]


def _tiny(name, depth=3):
    return reduced_spec(model_spec(name, seq_len=64), depth=depth, width=64, heads=4)


@pytest.mark.parametrize("name", FAMILIES)
def test_streamed_stack_is_the_model_with_the_redrawn_weights(name):
    # The full transformers model given the streamed stack's embedding and, in block l, the weights of
    # redraw l: both run the same float32 operations in the same order, so every statistic agrees to
    # rounding (measured: exactly).
    spec = _tiny(name)
    streamed, inputs, trace = assert_streamed_is_the_full_model(spec, seed=3)
    assert np.isfinite(trace.y2).all() and trace.y2.shape == (2, spec.depth)
    # two passes see the same weights: the redraw of layer l is fixed by the seed and l
    np.testing.assert_array_equal(probe(streamed, inputs).rho, trace.rho)


def assert_streamed_is_the_full_model(spec, seed):
    """The streamed stack of ``spec`` against the full model given its embedding and, in block l, the
    weights of redraw l: every statistic equal to rounding. Returns (streamed, inputs, its trace)."""
    streamed = streamed_model(spec, seed=seed)
    inputs = model_inputs(spec, 2, seed=seed)
    trace = probe(streamed, inputs)
    full = build_model(spec, seed=seed)
    full.embed_tokens.load_state_dict(streamed.embed_tokens.state_dict())
    for layer in range(spec.depth):
        streamed.streamed_block.redraw(layer, None)
        full.layers[layer].load_state_dict(streamed.streamed_block.block.state_dict())
    expected = probe(full, inputs)
    for key in ("q", "rho", "y2"):
        np.testing.assert_allclose(getattr(trace, key), getattr(expected, key), rtol=1e-6, atol=0)
    return streamed, inputs, trace


def test_redraws_are_the_library_draw_and_differ_per_layer():
    spec = _tiny("llama-3.2-1b")
    model = streamed_model(spec, seed=0)
    block = model.streamed_block.block
    weights = []
    for layer in range(2):
        model.streamed_block.redraw(layer, None)
        streamed_layers._check_library_draw(block, spec.init_range)  # passes for the redraw as for the library
        weights.append(block.self_attn.q_proj.weight.detach().clone())
    assert not torch.equal(weights[0], weights[1])
    assert sum(p.numel() for p in model.parameters()) < sum(p.numel() for p in build_model(spec).parameters())


@pytest.mark.parametrize("tamper, named", [("scale", "o_proj"), ("norm", "input_layernorm")])
def test_a_block_drawn_otherwise_is_refused(monkeypatch, tamper, named):
    # A scaled output projection (std x 2; 6 standard errors of a sample std are 7 % at 64 x 64) or a random
    # norm gain is not what the redraw draws: refused, naming the tensor.
    real_build = hf_models.build_model

    def build(spec, **kwargs):
        model = real_build(spec, **kwargs)
        with torch.no_grad():
            block = model.layers[0]
            if tamper == "scale":
                block.self_attn.o_proj.weight.mul_(2.0)
            else:
                block.input_layernorm.weight.normal_()
        return model

    monkeypatch.setattr(hf_models, "build_model", build)
    with pytest.raises(ValueError, match=named):
        streamed_model(_tiny("llama-3.2-1b"), seed=0)


def test_streamed_measurement_agrees_with_the_full_model():
    # Two independent sets of 8 initialisations (the streamed stack draws other numbers from the same
    # distribution): per layer, the difference of the two means over its standard error is a Welch t
    # with about 14 degrees of freedom; P(|t| > 5) is about 2e-4 per layer.
    spec = _tiny("llama-3.2-1b", depth=4)
    seeds = tuple(range(8))
    full = simulate_model(spec, seeds=seeds, streamed=False)
    streamed = simulate_model(spec, seeds=seeds, streamed=True)
    assert streamed.streamed and not full.streamed and streamed.summary()["streamed"] is True
    n = len(seeds)
    se = np.sqrt(full.rho_std ** 2 / n + streamed.rho_std ** 2 / n)
    t = np.abs(full.rho_mean - streamed.rho_mean)[1:] / se[1:]
    assert np.all(t < 5.0), t
    assert not np.allclose(full.rho_mean[1:], streamed.rho_mean[1:])  # other draws, not the same numbers


def test_streamed_store_is_kept_apart(tmp_path):
    spec = _tiny("smollm2-135m", depth=2)
    simulate_model(spec, seeds=(0,), streamed=True, store=tmp_path / "store")
    with pytest.raises(ValueError):
        simulate_model(spec, seeds=(0,), streamed=False, store=tmp_path / "store")
    with pytest.raises(ValueError, match="streamed"):
        simulate_model(spec, seeds=(0,), streamed="yes")
    # by default a resumed run measures as its store was measured, whatever memory is free today
    resumed = simulate_model(spec, seeds=(0, 1), store=tmp_path / "store")
    assert resumed.streamed and resumed.rho.shape[0] == 2
    assert not simulate_model(spec, seeds=(0,), store=tmp_path / "other").streamed  # 13 MB of weights: fits


def test_model_bytes_and_the_streaming_choice(monkeypatch):
    # Llama 3 8B: 8.03e9 parameters with its 128256 x 4096 output head (Meta, model card), 7.50e9
    # without; counted on the meta device, nothing allocated
    spec = model_spec("llama-3-8b")
    assert model_bytes(spec) == pytest.approx(4 * (8.03e9 - 128256 * 4096), rel=0.002)
    assert model_bytes(spec, "float64") == 2 * model_bytes(spec)
    assert available_memory() > 0
    monkeypatch.setattr(streamed_layers, "available_memory", lambda device=None: 48e9)
    assert needs_streaming(spec) and not needs_streaming(model_spec("smollm2-135m"))
    monkeypatch.setattr(streamed_layers, "available_memory", lambda device=None: 256e9)
    assert not needs_streaming(spec)
