"""Chunked and prefix-LM attention masks (theory/attention_masks.py): the one description of each row's keys
read by the per-position maps (key counts), the causal Gram state (the mask) and the configuration reader
(Llama 4's chunked layers); sizes of 0, or above T when given explicitly, are errors naming the field, while
a configuration's larger field is clipped to T."""
from __future__ import annotations

import json

import numpy as np
import pytest

from remprop.theory import Architecture, model_spec
from remprop.theory.attention_masks import (AttentionMask, causal_window_mask, check_windows, clip_windows,
                                            window_keys, windows_json)
from remprop.theory.causal import _CausalGramWalker, propagate_causal, propagate_causal_gram
from remprop.theory.checks import ParameterError
from remprop.theory.gram_state import propagate_gram
from remprop.theory.models.windows import config_windows

from cli_checks import run_cli
from test_attention_windows import TINY_MISTRAL

ARCH = Architecture(norm="pre", norm_type="rms", mlp="gated", activation="silu", sigma_v2=1.0)


def _rows_see(seq_len, window=None, chunk=None, prefix=None):
    """Which keys each row sees, written out row by row from the definitions (1-based t): the causal keys
    1..t, cut to the last ``window`` and to t's own chunk, plus every prefix key for a prefix row."""
    seen = np.zeros((seq_len, seq_len), dtype=bool)
    for t in range(1, seq_len + 1):
        for k in range(1, t + 1):
            in_window = window is None or k > t - window
            in_chunk = chunk is None or (k - 1) // chunk == (t - 1) // chunk
            seen[t - 1, k - 1] = in_window and in_chunk
        if prefix is not None and t <= prefix:
            seen[t - 1, :prefix] = True
    return seen


CASES = [dict(chunk=1), dict(chunk=3), dict(chunk=4), dict(chunk=12), dict(prefix=1), dict(prefix=5),
         dict(prefix=12), dict(window=3, chunk=5), dict(window=2, prefix=4), dict(chunk=4, prefix=6),
         dict(window=3, chunk=5, prefix=2)]


@pytest.mark.parametrize("fields", CASES, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()))
def test_the_mask_and_the_key_counts_are_each_rows_keys(fields):
    seq_len = 12
    mask = AttentionMask(**fields)
    expected = _rows_see(seq_len, **fields)
    assert np.array_equal(causal_window_mask(seq_len, mask), expected)
    t = np.arange(1, seq_len + 1)
    assert np.array_equal(window_keys(t, mask), expected.sum(axis=1))
    assert np.all(np.diag(expected))  # every row keeps its own key


def test_the_stated_key_counts():
    t = np.arange(1, 21)
    np.testing.assert_array_equal(window_keys(t, AttentionMask(chunk=6)), (t - 1) % 6 + 1)
    np.testing.assert_array_equal(window_keys(t, AttentionMask(prefix=7)), np.maximum(t, 7))


def test_the_pattern_keeps_one_form_per_mask():
    chunk = AttentionMask(chunk=4)
    assert check_windows([AttentionMask(window=3), AttentionMask(), chunk, {"prefix": 2}]) == (
        3, None, chunk, AttentionMask(prefix=2))
    pattern = check_windows([5, None, chunk])
    assert check_windows(windows_json(pattern)) == pattern and json.dumps(windows_json(pattern))
    assert clip_windows(check_windows([4096, AttentionMask(chunk=8192, prefix=3)]), 16) == (
        16, AttentionMask(chunk=16, prefix=3))


@pytest.mark.parametrize("make, field", [
    (lambda: check_windows(0), "window"), (lambda: check_windows(-2), "window"),
    (lambda: AttentionMask(chunk=0), "chunk"), (lambda: AttentionMask(prefix=0), "prefix"),
    (lambda: AttentionMask(window=2.5), "window"), (lambda: check_windows({"chunk": 0}), "chunk"),
    (lambda: check_windows({"stride": 2}), "window"),
    (lambda: check_windows(13, seq_len=12), "window"),
    (lambda: check_windows(AttentionMask(prefix=13), seq_len=12), "prefix"),
    (lambda: check_windows([None, AttentionMask(chunk=13)], seq_len=12), "chunk"),
    (lambda: propagate_causal(ARCH, 0.8, 2, 16, [16], window=17), "window"),
    (lambda: propagate_causal(ARCH, 0.8, 2, 16, [16], window=AttentionMask(prefix=17)), "prefix"),
    (lambda: propagate_causal_gram(ARCH, 0.8, 1, 16, window=AttentionMask(chunk=0)), "chunk"),
    (lambda: propagate_causal_gram(ARCH, 0.8, 1, 16, window=20), "window"),
    (lambda: config_windows({"model_type": "llama4_text", "attention_chunk_size": 0}), "config.attention_chunk_size"),
    (lambda: config_windows({"model_type": "llama4_text", "layer_types": ["chunked_attention", "sliding_attention"]}),
     "config.layer_types"),
])
def test_bad_masks_name_the_field(make, field):
    with pytest.raises(ParameterError, match=field.replace(".", r"\.")) as err:
        make()
    assert err.value.parameter == field


def test_a_configs_sizes_beyond_t_are_clipped_and_an_arguments_are_not():
    # Mistral's window of 512 at T = 64: the model reads the full causal mask (the window clipped to T),
    # and the theory accepts the clipped pattern; the same 512 passed explicitly is refused
    spec = model_spec(dict(TINY_MISTRAL, sliding_window=512), seq_len=64)
    assert spec.attention_windows == (64, 64)
    assert not any("sliding_window" in a for a in spec.assumptions)
    rows = np.arange(40, 65)
    np.testing.assert_array_equal(propagate_causal(ARCH, 0.8, 2, 64, rows, window=spec.attention_windows).rho,
                                  propagate_causal(ARCH, 0.8, 2, 64, rows).rho)
    with pytest.raises(ParameterError, match="window"):
        propagate_causal(ARCH, 0.8, 2, 64, rows, window=512)


def test_a_config_window_beyond_t_keeps_check_working(capsys, tmp_path):
    path = tmp_path / "wide.json"
    path.write_text(json.dumps(dict(TINY_MISTRAL, sliding_window=4096)))
    code, out, err = run_cli(capsys, "check", path, "--seq-len", "16", "--no-figure", "--out", tmp_path)
    assert code == 0, err
    assert "phase" in out


def test_llama4_chunked_layers_are_read_as_its_config_class_sets_them():
    # LlamaConfig of llama4_text (transformers 5.x): chunks of attention_chunk_size (default 8192) on the
    # layers with rotary positions, every fourth layer (NoPE) global; layer_types wins when given
    base = {"model_type": "llama4_text", "num_hidden_layers": 8, "attention_chunk_size": 16}
    chunk = AttentionMask(chunk=16)
    assert config_windows(base) == (chunk, chunk, chunk, None) * 2
    assert config_windows(dict(base, no_rope_layers=[1, 0] * 4)) == (chunk, None) * 4
    assert config_windows(dict(base, no_rope_layer_interval=2)) == (chunk, None) * 4
    assert config_windows(dict(base, layer_types=["full_attention", "chunked_attention"] * 4)) == (None, chunk) * 4
    assert config_windows({"model_type": "llama4_text", "num_hidden_layers": 4})[0] == AttentionMask(chunk=8192)
    assert config_windows(dict(base, attention_chunk_size=None)) == ()
    assert config_windows(base, seq_len=8) == (AttentionMask(chunk=8), AttentionMask(chunk=8), AttentionMask(chunk=8),
                                               None) * 2
    assert config_windows(dict(base, model_type="llama")) == ()  # LLaMA's modules ignore the field


@pytest.mark.parametrize("rope", [False, True])
def test_the_maps_give_each_row_the_rem_of_its_keys(rope):
    # A chunked row t sees ((t - 1) mod c) + 1 keys and a prefix row max(t, P): the masked maps at T give it
    # the state the unmasked maps at the same T give a row of that many keys, exactly (both read one table of
    # the REM at those key counts; rows of one key excepted: the row is its own value, the maps' special case)
    seq_len, c, prefix = 64, 12, 20
    extra = dict(positions="rope", head_dim=16, seq_len=seq_len, rope_base=100.0) if rope else {}
    arch = ARCH.replace(**extra)
    rows = np.arange(2, seq_len + 1)
    full = propagate_causal(arch, 0.8, 3, seq_len, rows, 1.0, 0.3)
    chunked = propagate_causal(arch, 0.8, 3, seq_len, rows, 1.0, 0.3, window=AttentionMask(chunk=c))
    keys = (rows - 1) % c + 1
    several = keys >= 2
    as_rows = propagate_causal(arch, 0.8, 3, seq_len, keys[several], 1.0, 0.3)
    np.testing.assert_allclose(chunked.rho[several], as_rows.rho, rtol=1e-13)
    np.testing.assert_allclose(chunked.q[several], as_rows.q, rtol=1e-13)
    assert np.max(np.abs(chunked.rho - full.rho)) > 0.02
    prefixed = propagate_causal(arch, 0.8, 3, seq_len, rows, 1.0, 0.3, window=AttentionMask(prefix=prefix))
    as_rows = propagate_causal(arch, 0.8, 3, seq_len, np.maximum(rows, prefix), 1.0, 0.3)
    np.testing.assert_allclose(prefixed.rho, as_rows.rho, rtol=1e-13)
    assert np.all(prefixed.rho[rows <= prefix] == prefixed.rho[rows == prefix])   # the prefix rows are alike
    # the later rows: the same REM, read from a table on other key counts (3e-6 apart, measured)
    np.testing.assert_allclose(prefixed.rho[rows > prefix], full.rho[rows > prefix], rtol=1e-5)
    assert np.max(np.abs(prefixed.rho - full.rho)) > 0.02


def test_the_gram_state_with_a_chunk_or_a_prefix_at_its_limits():
    # the same draws: a chunk of T and a prefix of 1 are the causal mask (equal to rounding), a chunk of 8
    # and a prefix of 12 are not
    args = (ARCH, 0.8, 2, 24, 1.0, 0.2)
    full = propagate_causal_gram(*args, last=10, draws=2, seed=1)
    for same in (AttentionMask(chunk=24), AttentionMask(prefix=1), AttentionMask(chunk=24, prefix=1)):
        np.testing.assert_allclose(propagate_causal_gram(*args, last=10, draws=2, seed=1, window=same).rho,
                                   full.rho, rtol=1e-12)
    chunked = propagate_causal_gram(*args, last=10, draws=2, seed=1, window=AttentionMask(chunk=8))
    assert chunked.settings["window"] == (AttentionMask(chunk=8),)
    assert np.max(np.abs(chunked.rho - full.rho)) > 0.01
    prefixed = propagate_causal_gram(*args, last=24, draws=2, seed=1, window=AttentionMask(prefix=12))
    assert np.max(np.abs(prefixed.rho - propagate_causal_gram(*args, last=24, draws=2, seed=1).rho)) > 0.01


def test_chunks_share_no_keys_in_the_gram_state():
    # one chunked attention layer on orthogonal tokens (G = I): rows of different chunks average disjoint
    # keys, so their output overlap is exactly sigma_b^2 = 0; inside a chunk it is positive
    from types import SimpleNamespace

    comp = SimpleNamespace(beta=0.9, sigma_v2=1.0, sigma_b2=0.0, gain_controlled=False)
    walker = _CausalGramWalker(6, np.random.default_rng(0), "relu", None)
    walker.window = AttentionMask(chunk=5)
    out = walker.attention(comp, np.eye(15))
    block = np.arange(15)[:, None] // 5 == np.arange(15)[None, :] // 5
    assert np.all(out[~block] == 0.0) and np.all(out[block] > 0.0)


def test_a_prefix_of_t_is_the_encoder():
    # P = T: every row sees every key, the encoder's attention, whose Gram state on these exchangeable
    # tokens is the finite-T closed form (gram_state.propagate_gram). The causal Gram state is a plain Monte
    # Carlo of it: the mean of 6 seeds within 4 standard errors of that mean (the seeds' spread measured
    # here; 3 layers x 4 numbers: a false alarm about 1e-3), while the causal mask is far away.
    seq_len, depth, rho0 = 32, 3, 0.2
    g0 = (1.0 - rho0) * np.eye(seq_len) + rho0
    enc_rho = propagate_gram(ARCH, 0.8, g0, depth, draws=4, seed=0).rho
    runs = np.array([propagate_causal_gram(ARCH, 0.8, depth, seq_len, 1.0, rho0, last=seq_len, draws=4, seed=s,
                                           window=AttentionMask(prefix=seq_len)).rho for s in range(6)])
    mean, se = runs.mean(axis=0), runs.std(axis=0, ddof=1) / np.sqrt(len(runs))
    assert np.all(np.abs(mean[1:] - enc_rho[1:]) < 4 * se[1:] + 1e-12)
    causal = propagate_causal_gram(ARCH, 0.8, depth, seq_len, 1.0, rho0, last=seq_len, draws=4, seed=0).rho
    assert np.all(np.abs(causal[1:] - enc_rho[1:]) > 10 * se[1:])
