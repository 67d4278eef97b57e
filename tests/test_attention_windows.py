"""Sliding-window attention (theory/attention_masks.py, theory/models/windows.py): each row of a windowed
layer sees its last min(t, w) keys in the causal Gram state, the per-position maps and the simulated
stacks; the configs' sliding_window and layer patterns are read as the transformers modules apply them."""
from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest

from remprop.theory import Architecture, model_spec
from remprop.theory.attention_masks import causal_window_mask, check_windows, layer_window, window_keys
from remprop.theory.causal import _CausalGramWalker, last_tokens_cosine, propagate_causal, propagate_causal_gram
from remprop.theory.checks import ParameterError
from remprop.theory.models.windows import config_windows

from cli_checks import assert_one_line_error, run_cli

#: A tiny Mistral-style decoder (every layer windowed) for the configuration tests.
TINY_MISTRAL = {"model_type": "mistral", "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
                "num_key_value_heads": 1, "intermediate_size": 64, "max_position_embeddings": 256,
                "initializer_range": 0.02, "rms_norm_eps": 1e-5, "vocab_size": 100, "hidden_act": "silu",
                "rope_theta": 10000.0, "sliding_window": 8, "_name_or_path": "tiny-mistral"}


def _rows_see(seq_len, window):
    """Which keys each row sees, written out row by row (1-based t sees max(1, t - w + 1) .. t)."""
    seen = np.zeros((seq_len, seq_len), dtype=bool)
    for t in range(1, seq_len + 1):
        first = 1 if window is None else max(1, t - window + 1)
        seen[t - 1, first - 1:t] = True
    return seen


@pytest.mark.parametrize("seq_len, window", [(10, 1), (10, 3), (10, 9), (10, 10), (10, 50), (7, None)])
def test_the_mask_is_each_rows_last_keys(seq_len, window):
    mask = causal_window_mask(seq_len, window)
    assert np.array_equal(mask, _rows_see(seq_len, window))
    t = np.arange(1, seq_len + 1)
    assert np.array_equal(mask.sum(axis=1), window_keys(t, window))


def test_window_checks_name_the_field():
    assert check_windows(None) == () and check_windows(4) == (4,) and check_windows([4, None]) == (4, None)
    assert layer_window((4, None), 0) == 4 and layer_window((4, None), 3) is None and layer_window((), 5) is None
    assert check_windows([]) == () and check_windows(check_windows((4, None))) == (4, None)
    for bad in (0, -3, 2.5, True, "4", [4, 0]):
        with pytest.raises(ParameterError, match="window") as err:
            check_windows(bad)
        assert err.value.parameter == "window"
    with pytest.raises(ParameterError, match="config.sliding_window"):
        model_spec(dict(TINY_MISTRAL, sliding_window=0))
    with pytest.raises(ParameterError, match="config.layer_types"):
        model_spec(dict(TINY_MISTRAL, layer_types=["sliding_attention", "chunked_attention"]))


def test_a_bad_window_in_check_is_one_line_exit_2(capsys, tmp_path):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(dict(TINY_MISTRAL, sliding_window=0)))
    code, out, err = run_cli(capsys, "check", path, "--seq-len", "16", "--no-figure", "--out", tmp_path)
    assert_one_line_error(code, err, "config.sliding_window")


def test_gram_state_window_is_a_direct_monte_carlo_of_windowed_attention():
    # One windowed attention layer on a random (not exchangeable) Gram matrix of T = 10 tokens, w = 3:
    # the walker's sigma_v^2 E[A G A^T] (8 walkers x 400 draws) against an independent Monte Carlo of
    # the same expectation written out here (Cholesky factor in place of the symmetric root, the mask
    # row by row, 4000 draws). Both are unbiased: each entry within 4.5 standard errors of the two
    # estimates together (100 entries: a false alarm about 7e-4). The full causal mask differs by far
    # more than that (checked: the test tells the window from no window).
    t, w, beta = 10, 3, 1.1
    rng = np.random.default_rng(5)
    x = rng.standard_normal((t, 12)) + 0.8 * rng.standard_normal(12)
    g = x @ x.T / 12
    comp = SimpleNamespace(beta=beta, sigma_v2=1.0, sigma_b2=0.0, gain_controlled=False)

    def walker_runs(window):
        runs = []
        for seed in range(8):
            walker = _CausalGramWalker(400, np.random.default_rng(seed), "relu", None)
            walker.window = window
            runs.append(walker.attention(comp, g))
        runs = np.array(runs)
        return runs.mean(axis=0), runs.std(axis=0, ddof=1) / np.sqrt(len(runs))

    c = beta * np.sqrt(np.log(t))
    root = np.linalg.cholesky(g)
    blocked = ~_rows_see(t, w)
    direct = []
    for _ in range(4000):
        scores = c * (root @ rng.standard_normal((t, t)) @ root.T)
        scores[blocked] = -np.inf
        a = np.exp(scores - scores.max(axis=1, keepdims=True))
        a /= a.sum(axis=1, keepdims=True)
        out = a @ g @ a.T
        direct.append(0.5 * (out + out.T))
    direct = np.array(direct)
    mean, se = direct.mean(axis=0), direct.std(axis=0, ddof=1) / np.sqrt(len(direct))
    windowed, windowed_se = walker_runs(w)
    bound = 4.5 * np.sqrt(se ** 2 + windowed_se ** 2) + 1e-12  # row 1 sees one key: exact, to rounding
    assert np.all(np.abs(windowed - mean) < bound)
    full, _ = walker_runs(None)
    assert np.max(np.abs(full - mean) / bound) > 5


def test_gram_state_windows_per_layer():
    # a window >= T is the full causal mask (the same draws: equal to rounding); a pattern (w, None)
    # masks the first layer only, so it differs from (None, w) and from no window
    arch = Architecture(norm="pre", norm_type="rms", mlp="gated", activation="silu", sigma_v2=1.0)
    args = (arch, 0.8, 2, 24, 1.0, 0.2)
    full = propagate_causal_gram(*args, last=10, draws=2, seed=1)
    wide = propagate_causal_gram(*args, last=10, draws=2, seed=1, window=24)
    np.testing.assert_allclose(wide.rho, full.rho, rtol=1e-12)
    local_first = propagate_causal_gram(*args, last=10, draws=2, seed=1, window=(4, None))
    local_second = propagate_causal_gram(*args, last=10, draws=2, seed=1, window=(None, 4))
    assert local_first.settings["window"] == (4, None)
    assert abs(local_first.rho[1] - full.rho[1]) > 0.01 and local_second.rho[1] == pytest.approx(full.rho[1])
    assert abs(local_second.rho[2] - full.rho[2]) > 0.01


@pytest.mark.parametrize("rope", [False, True])
def test_maps_with_a_window_are_the_maps_of_w_keys(rope):
    # Limit check: every row t >= w of a windowed layer sees w keys, so the windowed maps at T give
    # each such row the state of row w of the full causal maps at the same T (exactly), and without
    # RoPE the maps of T = w at the beta of the same score scale, beta sqrt(log T / log w)
    # (Y2(w) at T = w is the REM of w keys at that scale; the cross-overlap 1/w both).
    seq_len, w = 256, 16
    extra = dict(positions="rope", head_dim=16, seq_len=seq_len, rope_base=100.0) if rope else {}
    arch = Architecture(norm="pre", norm_type="rms", mlp="gated", activation="silu", sigma_v2=1.0, **extra)
    rows = np.arange(200, seq_len + 1)
    windowed = propagate_causal(arch, 0.8, 4, seq_len, rows, 1.0, 0.3, window=w)
    row_w = propagate_causal(arch, 0.8, 4, seq_len, [w], 1.0, 0.3)
    np.testing.assert_allclose(windowed.rho, np.broadcast_to(row_w.rho, windowed.rho.shape), rtol=1e-13)
    full = propagate_causal(arch, 0.8, 4, seq_len, rows, 1.0, 0.3)
    assert np.max(np.abs(full.rho - windowed.rho)) > 0.02
    np.testing.assert_array_equal(propagate_causal(arch, 0.8, 4, seq_len, rows, 1.0, 0.3, window=seq_len).rho,
                                  full.rho)
    if not rope:
        short = propagate_causal(arch, 0.8 * np.sqrt(np.log(seq_len) / np.log(w)), 4, w, [w], 1.0, 0.3)
        np.testing.assert_allclose(windowed.rho[0], short.rho[0], rtol=1e-12)
        np.testing.assert_allclose(windowed.q[0], short.q[0], rtol=1e-12)
    # one key: the row is its own value, no key shared with another row
    one = propagate_causal(arch, 0.8, 1, seq_len, rows, 1.0, 0.3, window=1)
    assert np.all(np.isfinite(one.rho))


def test_configs_read_the_windows_transformers_applies():
    mistral = model_spec(TINY_MISTRAL, seq_len=64)
    assert mistral.attention_windows == (8, 8)
    assert any(a.startswith("sliding_window = 8 < T = 64 on every layer") for a in mistral.assumptions)
    assert model_spec(TINY_MISTRAL, seq_len=8).attention_windows == (8, 8)   # w >= T: accepted, full causal
    assert not any("sliding_window" in a for a in model_spec(TINY_MISTRAL, seq_len=8).assumptions)
    llama = dict(TINY_MISTRAL, model_type="llama")
    assert model_spec(llama, seq_len=64).attention_windows == ()             # LLaMA's modules ignore the field
    qwen = dict(TINY_MISTRAL, model_type="qwen2", num_hidden_layers=3)
    assert model_spec(qwen).attention_windows == ()                          # use_sliding_window defaults to off
    assert config_windows(dict(qwen, use_sliding_window=True, max_window_layers=1)) == (None, 8, 8)
    gemma2 = model_spec("gemma-2-2b", seq_len=8192)
    assert gemma2.attention_windows == (4096, None) * 13
    assert any("on 13 of 26 layers" in a for a in gemma2.assumptions)
    gemma3 = {"model_type": "gemma3_text", "sliding_window": 512, "num_hidden_layers": 12}
    assert config_windows(gemma3) == ((512,) * 5 + (None,)) * 2
    assert config_windows(dict(gemma3, layer_types=["full_attention", "sliding_attention"] * 6)) == (None, 512) * 6


def test_a_windowed_diagnosis_reads_the_windows():
    spec = model_spec(TINY_MISTRAL, seq_len=64)
    from remprop.diagrams import diagnose

    d = diagnose(spec, causal_theory="maps", max_depth=50)
    windowed = last_tokens_cosine(spec.architecture, spec.beta, spec.depth, 64, 50, spec.q0, spec.rho0, (8, 8))
    full = last_tokens_cosine(spec.architecture, spec.beta, spec.depth, 64, 50, spec.q0, spec.rho0)
    np.testing.assert_allclose(d.rho_last_tokens, windowed, rtol=1e-12)
    assert np.max(np.abs(windowed - full)) > 1e-3
