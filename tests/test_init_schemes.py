"""Every family, initialised three ways, against the deviation table (docs/real_models.md section 6.4).

Tiny real models (2 layers, d = 64, CPU) of every family the table knows -- BERT, RoBERTa, GPT-2,
LLaMA, Mistral, Qwen2, Phi-3, Gemma 2, OLMo 2, ViT and plain ``nn.TransformerEncoder`` -- are
initialised by

* the library's default: nothing flagged, every block matrix's measured mean square within
  ``TOL_SIGMAS`` sampling errors of the default variance, written here from the libraries'
  sources (``N(0, r^2)``, GPT-2's ``r^2 / (2L)`` projections; PyTorch's ``1/(2d)`` in_proj and
  ``1/(3 fan_in)`` linears), not read back from the code under test;
* a scaled branch, the attention output projection times 5: W_O alone flagged, at 5 times the
  default draw's ratio;
* muP (every block matrix ``N(0, 1/fan_in)``, the query further ``/ sqrt(d_H)``, redrawn here):
  all six matrices flagged, each measured within sampling error of muP's variance.

Tolerance: a sample mean square of ``n`` i.i.d. entries has relative standard deviation
``sqrt((kappa - 1)/n)`` -- Gaussian ``kappa = 3``, PyTorch's uniform draws ``9/5`` --
(``second_moment_error``); ``TOL_SIGMAS = 5`` of them is passed by a correct draw with
probability above 1 - 1e-6 per tensor. ``n`` counts every layer's entries, except the default
``nn.TransformerEncoder``, whose layers are deep copies of one (one layer's entries).
"""
from __future__ import annotations

import math
import re

import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import remprop  # noqa: E402
from remprop.theory.models.measured_weights import second_moment_error  # noqa: E402

from test_model_families import _encoder, _gemma2, _olmo2, _phi3, _vit  # noqa: E402  (the same tiny models)
from test_own_weights import _bert, _gpt2, _llama  # noqa: E402

TOL_SIGMAS = 5.0
WIDTH, HEADS, LAYERS, VOCAB, T = 64, 4, 2, 100, 64
MAX_DEPTH = 200
R2 = 0.02 ** 2  # every transformers config here keeps initializer_range 0.02
MATRICES = ("query", "key", "value", "output", "mlp_in", "mlp_out")


def _roberta():
    torch.manual_seed(0)
    return transformers.RobertaModel(transformers.RobertaConfig(
        vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=96, max_position_embeddings=T + 2)).eval()


def _mistral():
    torch.manual_seed(0)
    return transformers.MistralModel(transformers.MistralConfig(
        vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=2, intermediate_size=96, max_position_embeddings=T)).eval()


def _qwen2():
    torch.manual_seed(0)
    return transformers.Qwen2Model(transformers.Qwen2Config(
        vocab_size=VOCAB, hidden_size=WIDTH, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=2, intermediate_size=96, max_position_embeddings=T)).eval()


def _seeded(build):
    def made():
        torch.manual_seed(0)
        return build().eval()
    return made


FAMILIES = {"bert": _bert, "roberta": _roberta, "gpt2": _gpt2, "llama": _llama, "mistral": _mistral, "qwen2": _qwen2,
            "phi3": _seeded(_phi3), "gemma2": _seeded(_gemma2), "olmo2": _seeded(_olmo2), "vit": _seeded(_vit),
            "encoder": lambda: _encoder(True)}
#: The test's own reading of module paths: (pattern on the path's end, role).
PATHS = [(r"(attention\.self\.query|q_proj)", "query"), (r"(attention\.self\.key|k_proj)", "key"),
         (r"(attention\.self\.value|v_proj)", "value"),
         (r"(attention\.output\.dense|o_proj|attn\.c_proj|self_attn\.out_proj)", "output"),
         (r"(intermediate\.dense|gate_proj|up_proj|gate_up_proj|mlp\.fc1|mlp\.c_fc|linear1)", "mlp_in"),
         (r"(layer\.\d+\.output\.dense|down_proj|mlp\.fc2|mlp\.c_proj|linear2)", "mlp_out"),
         (r"(qkv_proj|attn\.c_attn)", "qkv")]


def _matrices(model):
    """(role, weight, conv1d) of every block matrix: nn.Linear (out, in), GPT-2's Conv1D (in, out),
    nn.MultiheadAttention's fused in_proj_weight (3d, d)."""
    out = []
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.MultiheadAttention):
            out.append(("qkv", module.in_proj_weight, False))
            continue
        conv1d = type(module).__name__ == "Conv1D"
        if not (conv1d or isinstance(module, torch.nn.Linear)):
            continue
        role = next((r for pattern, r in PATHS if re.search(r"(^|\.)" + pattern + "$", name)), None)
        if role is not None:
            out.append((role, module.weight, conv1d))
    return out


def _head_dim(model):
    return getattr(getattr(model, "config", None), "head_dim", None) or WIDTH // HEADS


@torch.no_grad()
def _mup(model):
    """Redraw every block matrix N(0, 1/fan_in), the query rows / sqrt(d_H); role -> (variance, entries)."""
    torch.manual_seed(1)
    head_dim = _head_dim(model)
    drawn = {}
    for role, weight, conv1d in _matrices(model):
        fan_in = weight.shape[0] if conv1d else weight.shape[1]
        weight.normal_(0.0, 1.0 / math.sqrt(fan_in))
        parts = [(role, weight)]
        if role == "qkv":  # the query's H d_H = d rows (columns of a Conv1D) first, then key and value
            other = (weight.shape[1 if conv1d else 0] - WIDTH) // 2
            chunks = weight.split([WIDTH, other, other], dim=1 if conv1d else 0)
            parts = list(zip(("query", "key", "value"), chunks))
        for part, tensor in parts:
            if part == "query":
                tensor /= math.sqrt(head_dim)
            variance = 1.0 / fan_in / (head_dim if part == "query" else 1)
            _, entries = drawn.get(part, (variance, 0))
            drawn[part] = (variance, entries + tensor.numel())
    assert set(drawn) == set(MATRICES), drawn  # the test reads every family's six roles
    return drawn


def _default_variance(family, role, d_ff):
    """The libraries' default variance of a block matrix (module docstring)."""
    if family == "encoder":
        return {"query": 1 / (2 * WIDTH), "key": 1 / (2 * WIDTH), "value": 1 / (2 * WIDTH)}.get(
            role, 1 / (3 * (d_ff if role == "mlp_out" else WIDTH)))
    return R2 / (2 * LAYERS) if family == "gpt2" and role in ("output", "mlp_out") else R2


def _check(model, family):
    kwargs = {"seq_len": T} if family == "encoder" else {}
    diagnosis = remprop.check(model, max_depth=MAX_DEPTH, **kwargs)
    assert diagnosis.init is not None, family
    return {row.role: row for row in diagnosis.init.rows}, diagnosis.spec


def _error(family, entries):
    """Sampling error of a default draw's mean square (the encoder's: one layer, uniform)."""
    if family == "encoder":
        return float(second_moment_error(entries // LAYERS, 9 / 5))
    return float(second_moment_error(entries))


def _entries(model):
    out = {}
    for role, weight, conv1d in _matrices(model):
        if role == "qkv":
            rows = weight.shape[1 if conv1d else 0]
            other = weight.numel() // rows
            for part, size in zip(("query", "key", "value"), (WIDTH, (rows - WIDTH) // 2, (rows - WIDTH) // 2)):
                out[part] = out.get(part, 0) + size * other
        else:
            out[role] = out.get(role, 0) + weight.numel()
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
def test_default_scaled_branch_and_mup_of_every_family(family):
    model = FAMILIES[family]()
    rows, spec = _check(model, family)
    entries = _entries(model)
    # 1. the library's default: nothing flagged; each matrix within its sampling error of the default variance
    assert [row.role for row in rows.values() if row.flagged] == [], family
    for role in MATRICES:
        variance = _default_variance(family, role, spec.d_ff)
        assert rows[role].default_std ** 2 == pytest.approx(variance, rel=1e-12), role
        assert abs(rows[role].measured_std ** 2 / variance - 1) < TOL_SIGMAS * _error(family, entries[role]), role
    base = rows["output"].ratio
    # 2. a scaled branch: every attention output projection x5 -- W_O alone flagged, 5x the draw's ratio
    with torch.no_grad():
        for role, weight, _ in _matrices(model):
            if role == "output":
                weight.mul_(5.0)
    scaled, _ = _check(model, family)
    assert [row.role for row in scaled.values() if row.flagged] == ["output"], family
    assert scaled["output"].ratio == pytest.approx(5.0 * base, rel=1e-6)
    # 3. muP: all six flagged, each within its (Gaussian, every-layer) sampling error of muP's variance
    drawn = _mup(model)
    mup, _ = _check(model, family)
    assert {row.role for row in mup.values() if row.flagged} == set(MATRICES), family
    for role, (variance, count) in drawn.items():
        assert count == entries[role]
        error = TOL_SIGMAS * float(second_moment_error(count))
        assert abs(mup[role].measured_std ** 2 / variance - 1) < error, (role, mup[role], variance)
