"""remprop.validation.probe: per-layer statistics of real torch transformers, from hooks."""
import copy
import dataclasses

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")
transformers = pytest.importorskip("transformers", reason="probing Hugging Face models needs transformers")

from torch import nn  # noqa: E402

from remprop.validation import ProbeTrace, probe  # noqa: E402
from remprop.validation.measurements import (attention_statistics, last_tokens_statistics,  # noqa: E402
                                             token_statistics)

torch.set_num_threads(min(2, torch.get_num_threads()))

TOKENS = ("q", "p", "rho", "cosine")
ATTENTION = ("y2", "entropy")
B, T, D, VOCAB = 3, 40, 64, 97


def _padding_mask():
    mask = torch.ones(B, T, dtype=torch.bool)
    mask[0, 29:] = False
    mask[2, 35:] = False
    return mask


def bert(seed=0, cls="Bert", layers=3):
    torch.manual_seed(seed)
    config = getattr(transformers, f"{cls}Config")(
        hidden_size=D, num_hidden_layers=layers, num_attention_heads=4, intermediate_size=128, vocab_size=VOCAB,
        max_position_embeddings=T + 8, pad_token_id=1, bos_token_id=0, eos_token_id=2)
    return getattr(transformers, f"{cls}Model")(config)


def gpt2(seed=0, head=False):
    torch.manual_seed(seed)
    config = transformers.GPT2Config(n_embd=D, n_layer=3, n_head=4, vocab_size=VOCAB, n_positions=T,
                                     bos_token_id=0, eos_token_id=0)
    return (transformers.GPT2LMHeadModel if head else transformers.GPT2Model)(config)


def vit(seed=0):
    torch.manual_seed(seed)
    config = transformers.ViTConfig(hidden_size=D, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
                                    image_size=32, patch_size=8, num_channels=3)
    return transformers.ViTModel(config)


def encoder(batch_first=True, norm_first=False, seed=0, layers=3, heads=4):
    torch.manual_seed(seed)
    layer = nn.TransformerEncoderLayer(D, heads, 128, dropout=0.1, batch_first=batch_first, norm_first=norm_first)
    # enable_nested_tensor (the default where allowed) would take the nested fast path in eval mode
    return nn.TransformerEncoder(layer, layers, enable_nested_tensor=batch_first and not norm_first).double()


def _ids(seed=1):
    return torch.randint(3, VOCAB, (B, T), generator=torch.Generator().manual_seed(seed))


def _reference(model, hook_last_block=None, **kwargs):
    """hidden_states and attentions that a copy of the model returns (eager, eval, no grad)."""
    model = copy.deepcopy(model).eval()
    model.set_attn_implementation("eager")
    recorded = []
    if hook_last_block is not None:
        hook_last_block(model).register_forward_hook(lambda m, a, out: recorded.append(out))
    with torch.no_grad():
        out = model(**kwargs, output_hidden_states=True, output_attentions=True)
    return out.hidden_states, out.attentions, recorded


def _assert_matches(trace, hidden, attentions, mask=None, last=None, rtol=1e-6):
    assert len(hidden) == trace.depth + 1 and len(attentions) == trace.depth
    for layer, h in enumerate(hidden):
        expected = token_statistics(h, mask) if last is None else last_tokens_statistics(h, last, mask)
        for key in TOKENS:
            np.testing.assert_allclose(trace.as_dict()[key][:, layer], expected[key].numpy(), rtol=rtol, atol=1e-9,
                                       err_msg=f"{key}, layer {layer}")
    for layer, a in enumerate(attentions):
        rows, rows_mask = a, mask
        if last is not None:
            rows = a[..., a.shape[-2] - last:, :]
            rows_mask = None if mask is None else mask[:, a.shape[-2] - last:]
        expected = attention_statistics(rows, rows_mask)
        for key in ATTENTION:
            np.testing.assert_allclose(getattr(trace, key)[:, layer], expected[key].numpy(), rtol=rtol, atol=1e-9,
                                       err_msg=f"{key}, block {layer + 1}")


# --------------------------------------------------------------------------- Hugging Face models

@pytest.mark.parametrize("cls", ["Bert", "Roberta"])
def test_bert_and_roberta_match_their_own_hidden_states_and_attentions(cls):
    model, ids, mask = bert(cls=cls), _ids(), _padding_mask()
    trace = probe(model, ids, mask)
    assert trace.layer_names == ("encoder.layer.0", "encoder.layer.1", "encoder.layer.2")
    assert trace.attention_recorded and trace.q.shape == (B, 4) and trace.y2.shape == (B, 3)
    hidden, attentions, _ = _reference(model, input_ids=ids, attention_mask=mask.long())
    _assert_matches(trace, hidden, attentions, mask)        # BERT: hidden_states[L] is block L's output
    n_real = mask.sum(1).numpy()[:, None]
    assert np.all(trace.y2 >= 1 / n_real - 1e-12) and np.all(trace.y2 <= 1)
    assert np.all(trace.y2 < 0.5)                            # random init: attention spread out, not a constant
    # the same batch given as a dict of keyword arguments
    again = probe(model, {"input_ids": ids, "attention_mask": mask.long()}, mask)
    for key in TOKENS + ATTENTION:
        np.testing.assert_array_equal(getattr(again, key), getattr(trace, key))


@pytest.mark.parametrize("head", [False, True], ids=["GPT2Model", "GPT2LMHeadModel"])
def test_gpt2_matches_its_hidden_states_and_attentions(head):
    model, ids = gpt2(head=head), _ids()
    prefix = "transformer." if head else ""
    trace = probe(model, ids)
    assert trace.layer_names == tuple(f"{prefix}h.{i}" for i in range(3)) and trace.attention_recorded

    def last_block(m):
        return (m.transformer if head else m).h[-1]

    hidden, attentions, recorded = _reference(model, last_block, input_ids=ids)
    # hidden_states[-1] has ln_f applied: the last block's output comes from a hook of our own
    blocks_out = list(hidden[:-1]) + [recorded[0] if torch.is_tensor(recorded[0]) else recorded[0][0]]
    _assert_matches(trace, blocks_out, attentions)
    causal = np.mean(1.0 / np.arange(1, T + 1))
    assert np.all(trace.y2 >= causal - 1e-12) and np.all(trace.y2 <= 1)
    # last K tokens only
    for last in (2, 10, T):
        _assert_matches(probe(model, ids, last=last), blocks_out, attentions, last=last)


def test_vit_matches_its_hidden_states_and_attentions():
    model = vit()
    pixels = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    trace = probe(model, pixels)
    assert trace.layer_names == ("layers.0", "layers.1") and trace.attention_recorded
    assert trace.q.shape == (2, 3)
    hidden, attentions, recorded = _reference(model, lambda m: m.layers[-1], pixel_values=pixels)
    blocks_out = list(hidden[:-1]) + [recorded[0] if torch.is_tensor(recorded[0]) else recorded[0][0]]
    _assert_matches(trace, blocks_out, attentions)
    tokens = (32 // 8) ** 2 + 1
    assert np.all(trace.y2 >= 1 / tokens - 1e-12) and np.all(trace.y2 <= 1)


def test_uniform_attention_gives_y2_one_over_t():
    model, ids, mask = bert(), _ids(), _padding_mask()
    with torch.no_grad():
        for layer in model.encoder.layer:
            layer.attention.self.query.weight.zero_()
            layer.attention.self.query.bias.zero_()
    trace = probe(model, ids, mask)
    n_real = mask.sum(1).numpy().astype(float)[:, None]
    np.testing.assert_allclose(trace.y2, np.broadcast_to(1 / n_real, trace.y2.shape), rtol=1e-6)
    np.testing.assert_allclose(trace.entropy, np.broadcast_to(np.log(n_real), trace.y2.shape), rtol=1e-6)

    model, ids = gpt2(), _ids()
    with torch.no_grad():
        for block in model.h:                               # Conv1D: columns [0, d) are the queries
            block.attn.c_attn.weight[:, :D].zero_()
            block.attn.c_attn.bias[:D].zero_()
    row = 1.0 / np.arange(1, T + 1)                         # row t attends uniformly to t + 1 tokens
    np.testing.assert_allclose(probe(model, ids).y2, np.mean(row), rtol=1e-6)
    np.testing.assert_allclose(probe(model, ids, last=8).y2, np.mean(row[-8:]), rtol=1e-6)


# --------------------------------------------------------------------------- nn.TransformerEncoder

@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("norm_first", [False, True])
@pytest.mark.parametrize("padded", [False, True])
def test_transformer_encoder_matches_a_manual_forward(batch_first, norm_first, padded):
    enc = encoder(batch_first, norm_first)
    x = torch.randn(B, T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(5))
    src = x if batch_first else x.transpose(0, 1)
    mask = _padding_mask() if padded else None
    kpm = None if mask is None else ~mask
    trace = probe(enc, src, mask)
    assert trace.layer_names == ("layers.0", "layers.1", "layers.2") and trace.attention_recorded
    assert all(m.training for m in enc.modules())           # built in training mode, restored so

    enc.eval()                                              # manual forward; grad on -> no fast path
    h, hidden, attentions = src, [src], []
    for layer in enc.layers:
        inp = layer.norm1(h) if norm_first else h
        attentions.append(layer.self_attn(inp, inp, inp, key_padding_mask=kpm, need_weights=True,
                                          average_attn_weights=False)[1].detach())
        h = layer(h, src_key_padding_mask=kpm)
        hidden.append(h.detach())
    out = enc(src, src_key_padding_mask=kpm).detach()
    torch.testing.assert_close(out, hidden[-1], rtol=0, atol=0)
    if not batch_first:
        hidden = [s.transpose(0, 1) for s in hidden]
    _assert_matches(trace, hidden, attentions, mask, rtol=1e-10)
    if mask is not None:
        n_real = mask.sum(1).numpy()[:, None]
        assert np.all(trace.y2 >= 1 / n_real - 1e-12)


def test_transformer_encoder_uniform_and_causal_attention():
    enc = encoder()
    with torch.no_grad():
        for layer in enc.layers:
            layer.self_attn.in_proj_weight[:D].zero_()
            layer.self_attn.in_proj_bias[:D].zero_()
    x = torch.randn(B, T, D, dtype=torch.float64, generator=torch.Generator().manual_seed(6))
    mask = _padding_mask()
    n_real = mask.sum(1).numpy().astype(float)[:, None]
    np.testing.assert_allclose(probe(enc, x, mask).y2, np.broadcast_to(1 / n_real, (B, 3)), rtol=1e-12)
    np.testing.assert_allclose(probe(enc, x).y2, 1 / T, rtol=1e-12)
    causal = nn.Transformer.generate_square_subsequent_mask(T, dtype=torch.float64)
    trace = probe(enc, {"src": x, "mask": causal, "is_causal": True}, last=5)
    np.testing.assert_allclose(trace.y2, np.mean(1.0 / np.arange(T - 4, T + 1)), rtol=1e-12)
    assert trace.last == 5


# --------------------------------------------------------------------------- the model is unchanged

def _snapshot(model):
    return {
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "training": [m.training for m in model.modules()],
        "attn": [getattr(m.config, "_attn_implementation", None) for m in model.modules() if hasattr(m, "config")],
        "fastpath": torch.backends.mha.get_fastpath_enabled(),
        "grad": torch.is_grad_enabled(),
    }


def _assert_unchanged(model, before):
    after = _snapshot(model)
    assert before["state"].keys() == after["state"].keys()
    for key, value in before["state"].items():
        assert torch.equal(value, after["state"][key]), key
    for key in ("training", "attn", "fastpath", "grad"):
        assert before[key] == after[key], key
    for name, module in model.named_modules():
        for hooks in ("_forward_hooks", "_forward_pre_hooks", "_forward_hooks_with_kwargs",
                      "_forward_pre_hooks_with_kwargs", "_forward_hooks_always_called"):
            assert not getattr(module, hooks), f"{hooks} left on {name!r}"
    assert not getattr(model, "_output_capturing_hooks_installed", False)


MODELS = {"bert": lambda: bert(layers=2), "gpt2": lambda: gpt2(head=True), "encoder": lambda: encoder(heads=2)}


def _run(kind, model):
    if kind == "encoder":
        return probe(model, torch.randn(B, T, D, dtype=torch.float64), _padding_mask())
    return probe(model, _ids(), _padding_mask())


@pytest.mark.parametrize("kind", list(MODELS))
def test_the_model_is_left_as_it_was(kind):
    model = MODELS[kind]()
    model.train()
    first = next(m for m in model.modules() if isinstance(m, nn.ModuleList))[0]
    first.eval()                                            # mixed flags must come back exactly
    before = _snapshot(model)
    assert before["attn"] in ([], ["sdpa"] * len(before["attn"]))
    trace = _run(kind, model)
    assert np.isfinite(trace.q).all() and trace.attention_recorded
    _assert_unchanged(model, before)


@pytest.mark.parametrize("kind", list(MODELS))
def test_the_model_is_left_as_it_was_when_the_forward_raises(kind):
    model = MODELS[kind]()
    blocks = next(m for m in model.modules() if isinstance(m, nn.ModuleList))
    seen = {}

    def boom(module, args):
        seen["fastpath"] = torch.backends.mha.get_fastpath_enabled()
        seen["training"] = module.training
        raise RuntimeError("boom inside the forward")

    handle = blocks[1].register_forward_pre_hook(boom)
    before = _snapshot(model)
    with pytest.raises(RuntimeError, match="boom"):
        _run(kind, model)
    assert seen == {"fastpath": False, "training": False}   # the probe's state was in force
    handle.remove()
    _assert_unchanged(model, before)
    if kind != "encoder":                                   # token id out of the vocabulary: fails in the embedding
        with pytest.raises(IndexError):
            probe(model, torch.full((B, T), 10 * VOCAB))
        _assert_unchanged(model, before)


# --------------------------------------------------------------------------- other models, errors

class _Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x):
        return x + torch.tanh(self.linear(x))


class _MLPStack(nn.Module):
    """No attention: the attention statistics are NaN."""

    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleList([nn.Linear(16, 16), nn.Linear(16, 16)])
        self.blocks = nn.ModuleList([_Block() for _ in range(3)])

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.heads[0](x)


def test_models_without_attention_and_the_layers_argument():
    torch.manual_seed(0)
    model, x = _MLPStack(), torch.randn(2, 8, 16)
    trace = probe(model, x)
    assert trace.layer_names == ("blocks.0", "blocks.1", "blocks.2")
    assert not trace.attention_recorded and np.isnan(trace.y2).all() and trace.y2.shape == (2, 3)
    h, expected = x, [token_statistics(x)]
    for block in model.blocks:
        h = block(h).detach()
        expected.append(token_statistics(h))
    np.testing.assert_allclose(trace.q, torch.stack([e["q"] for e in expected], 1).numpy(), rtol=1e-12)
    sub = probe(model, x, layers=list(model.blocks)[:2])
    assert sub.layer_names == ("blocks.0", "blocks.1")
    np.testing.assert_array_equal(sub.q, trace.q[:, :3])
    assert probe(model, x, layers="blocks").layer_names == trace.layer_names
    with pytest.raises(RuntimeError, match="'heads.1' ran 0 times"):   # heads.1 never runs
        probe(model, x, layers="heads")


def test_probe_trace_api():
    trace = probe(bert(layers=2), _ids(), _padding_mask())
    assert isinstance(trace, ProbeTrace) and trace.depth == 2 and trace.batch_size == B
    means = trace.mean()
    assert set(means) == set(TOKENS + ATTENTION)
    assert means["q"].shape == (3,) and means["y2"].shape == (2,)
    np.testing.assert_allclose(means["rho"], trace.rho.mean(0))
    d = trace.as_dict()
    assert d["layer_names"] == ["encoder.layer.0", "encoder.layer.1"] and d["attention_recorded"] is True
    d["q"][:] = 0                                            # a copy
    assert np.all(trace.q > 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        trace.q = None
    with pytest.raises(ValueError):
        trace.q[0, 0] = 1.0                                  # read-only arrays
    np.testing.assert_allclose(trace.rho, trace.p / trace.q)


def test_bad_arguments_raise_value_errors_naming_the_parameter():
    model, ids = bert(layers=2), _ids()
    enc = encoder(heads=2)
    x = torch.randn(B, T, D, dtype=torch.float64)
    cases = [
        (lambda: probe("bert", ids), "model"),
        (lambda: probe(nn.Linear(4, 4), torch.randn(2, 3, 4)), "layers"),
        (lambda: probe(model, ids, layers="encoder.nope"), "layers"),
        (lambda: probe(model, ids, layers="encoder.layer.0.attention.self.query"), "layers"),
        (lambda: probe(model, ids, layers=[nn.Linear(2, 2)]), "layers"),
        (lambda: probe(model, ids, layers=[]), "layers"),
        (lambda: probe(model, ids.tolist()), "inputs"),
        (lambda: probe(model, ids[0]), "inputs"),
        (lambda: probe(model, ids > 5), "inputs"),
        (lambda: probe(model, torch.randn(B, T)), "inputs"),
        (lambda: probe(enc, x[0]), "inputs"),
        (lambda: probe(vit(), torch.randn(2, 3, 32)), "inputs"),
        (lambda: probe(model, {0: ids}), "inputs"),
        (lambda: probe(model, ids, _padding_mask().long()), "mask"),
        (lambda: probe(model, ids, _padding_mask()[:, :5]), "mask"),
        (lambda: probe(_MLPStack(), torch.randn(2, 8, 16), torch.ones(2, 8, dtype=torch.bool)), "mask"),
        (lambda: probe(model, ids, last=1), "last"),
        (lambda: probe(model, ids, last=T + 1), "last"),
        (lambda: probe(model, ids, last=True), "last"),
        (lambda: probe(model, ids, last=2.0), "last"),
        (lambda: probe(enc, x, last=T + 1), "last"),          # T known only inside the forward
        (lambda: probe(enc, x, batch_first="yes"), "batch_first"),
    ]
    before = _snapshot(enc)
    for call, name in cases:
        with pytest.raises(ValueError, match=rf"\b{name}\b"):
            call()
    _assert_unchanged(enc, before)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu():
    cases = ((lambda: bert(layers=2), _ids()), (lambda: encoder(), torch.randn(B, T, D, dtype=torch.float64)))
    for make, inputs in cases:
        model = make()
        cpu = probe(model, inputs, _padding_mask())
        gpu = probe(model.cuda(), inputs, _padding_mask())
        assert next(model.parameters()).is_cuda
        for key in TOKENS + ATTENTION:
            assert isinstance(getattr(gpu, key), np.ndarray)
            np.testing.assert_allclose(getattr(gpu, key), getattr(cpu, key), rtol=2e-4, atol=1e-6)


def test_the_name_probe_is_the_function_after_its_module_is_loaded():
    import importlib

    import remprop.validation as validation
    module = importlib.import_module("remprop.validation.probing")
    assert validation.ProbeTrace is module.ProbeTrace is ProbeTrace
    assert validation.probe is module.probe is probe and probe.__name__ == "probe"
