"""Chunked and prefix-LM masks are the ``transformers`` ones: the mask functions of ``masking_utils``
(``chunked_causal_mask_function``, ``or_masks(causal, bidirectional block)`` of the prefix-LMs), the
probabilities of a tiny Llama 4 text stack's chunked and global layers (eager attention, random init; its
layers read from the config as the theory reads them), and the library's own simulated stack."""
from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
masking_utils = pytest.importorskip("transformers.masking_utils")

from remprop.theory.attention_masks import AttentionMask, causal_window_mask, layer_window  # noqa: E402
from remprop.theory.models.windows import config_windows  # noqa: E402

from test_attention_windows_hf import assert_the_simulated_stack_masks  # noqa: E402

SEQ_LEN = 20


def _evaluated(mask_function):
    """A ``masking_utils`` mask function on every (query, key) pair of one sequence, ``(T, T)`` bool."""
    index = torch.arange(SEQ_LEN)
    rows = [[bool(mask_function(0, 0, index[i], index[j])) for j in range(SEQ_LEN)] for i in range(SEQ_LEN)]
    return np.array(rows)


@pytest.mark.parametrize("chunk", [1, 3, 7, 20])
def test_chunked_is_transformers_chunked_causal_mask(chunk):
    expected = _evaluated(masking_utils.chunked_causal_mask_function(chunk, torch.zeros(1, dtype=torch.long)))
    assert np.array_equal(causal_window_mask(SEQ_LEN, AttentionMask(chunk=chunk)), expected)


@pytest.mark.parametrize("prefix, window", [(1, None), (6, None), (20, None), (8, 3)])
def test_prefix_is_transformers_bidirectional_block_or_causal(prefix, window):
    # the prefix as one bidirectional block (block id 0, the rest -1: text), or-ed with the causal mask or,
    # Gemma 3's local layers, with the sliding-window one
    blocks = torch.tensor([[0] * prefix + [-1] * (SEQ_LEN - prefix)])
    causal = (masking_utils.causal_mask_function if window is None
              else masking_utils.sliding_window_causal_mask_function(window))
    expected = _evaluated(masking_utils.or_masks(causal, masking_utils.blockwise_overlay(blocks)))
    assert np.array_equal(causal_window_mask(SEQ_LEN, AttentionMask(window=window, prefix=prefix)), expected)


def test_the_llama4_modules_chunks_are_the_theorys():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.Llama4TextConfig(hidden_size=32, intermediate_size=64, intermediate_size_mlp=64,
                                        num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
                                        head_dim=16, vocab_size=100, attention_chunk_size=6, num_local_experts=1,
                                        max_position_embeddings=64)
    # the reader sees the fields of the config file (layer_types derived from no_rope_layers, not given)
    fields = {k: v for k, v in cfg.to_dict().items() if k not in ("layer_types", "no_rope_layers")}
    pattern = config_windows(fields, seq_len=SEQ_LEN)
    assert pattern == (AttentionMask(chunk=6),) * 3 + (None,)
    torch.manual_seed(0)
    model = transformers.Llama4ForCausalLM(cfg).eval()
    model.set_attn_implementation("eager")
    ids = torch.randint(0, 100, (2, SEQ_LEN), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        attentions = model(input_ids=ids, output_attentions=True).attentions
    assert len(attentions) == 4
    for layer, probs in enumerate(attentions):
        expected = causal_window_mask(SEQ_LEN, layer_window(pattern, layer))
        assert np.array_equal((probs > 0).numpy(), np.broadcast_to(expected, probs.shape)), layer


def test_the_simulated_stack_masks_chunks_and_prefixes():
    # the library's torch stack with the pattern (chunk 4, prefix 5 with a window of 3)
    from remprop.validation.settings import SimulationSettings

    pattern = (AttentionMask(chunk=4), AttentionMask(window=3, prefix=5))
    sim = assert_the_simulated_stack_masks(pattern)
    assert sim.window == pattern and sim.to_dict()["window"] == [{"chunk": 4}, {"window": 3, "prefix": 5}]
    with pytest.raises(ValueError, match="prefix"):
        SimulationSettings(width=32, seq_len=12, causal=True, window=AttentionMask(prefix=13))


def test_a_window_of_one_key_is_not_the_plain_causal_path():
    # a window of 1 (an int equal to True) once took the fused kernel's unmasked path: each row is its own value
    from remprop.validation.layers import AttentionWeights, softmax_attention

    torch.manual_seed(1)
    x = torch.randn(1, 6, 8, dtype=torch.float64)
    w = AttentionWeights(*(torch.randn(8, 8, dtype=torch.float64) for _ in range(3)),
                         torch.zeros(8, dtype=torch.float64))
    out = softmax_attention(x, w, heads=2, causal=1, need_weights=False)[0]
    torch.testing.assert_close(out, x @ w.value.T)
