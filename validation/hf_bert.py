"""The simulated stack as a real Hugging Face ``transformers.BertModel``.

:class:`HuggingFaceBert` builds a ``BertModel`` from a ``BertConfig`` matching a
:class:`~remprop.validation.simulator.SimulatedStack` and re-initialises it to our
conventions, using only public module attributes and hooks (no library code is copied):

* LayerNorms of the blocks are swapped for ``nn.LayerNorm(d, elementwise_affine=False)``;
* query and key projections are swapped for bias-free ``nn.Linear`` layers;
* the attention output projection ``attention.output.dense`` becomes ``nn.Identity``
  when the architecture has none (``sigma_o2=None``, the reference variant), else a
  bias-free ``nn.Linear`` holding the stack's ``W_O``;
* every weight is copied from :meth:`~remprop.validation.SimulatedStack.weights`, so both run the same network
  (the MLP's ``W2`` with its variance ``sigma_w2_out / d_ff``; the query/key variance of
  ``arch.qk_scaling`` over ``arch.heads`` heads, which the config's
  ``num_attention_heads`` repeats);
* ``alpha_sa`` and ``alpha_mlp`` multiply the identity path through forward pre-hooks on
  ``BertSelfOutput`` and ``BertOutput``, whose forward is ``LN(branch + input_tensor)``:
  the hook hands them ``alpha * input_tensor``;
* gain-controlled attention is a forward hook on ``BertSelfAttention`` that removes the
  sequence mean of its output and adds the value bias back (the mean of ``A V`` holds it);
* inputs enter as ``inputs_embeds``. ``BertEmbeddings`` adds position and token-type
  embeddings and applies a LayerNorm: both tables are zeroed and that LayerNorm is
  ``nn.Identity``, so the first block sees our inputs unchanged.

Dropout probabilities are 0 and the model is in eval mode; attention is ``"eager"`` so
the attention matrices can be read. BERT is post-LN: other block orders raise.

Requires the optional dependency ``transformers``.
"""
from __future__ import annotations

import torch
from torch import nn

from .simulator import SimulatedStack, StackTrace, trace_stack

__all__ = ["HuggingFaceBert", "bert_config", "check_bert_architecture", "BERT_FIXED_FIELDS"]

#: Our activation names -> Hugging Face ``hidden_act`` (ACT2FN; "gelu" is the exact GELU).
#: erf has no ACT2FN entry: the config says "linear" and the adapter sets every block's
#: ``intermediate_act_fn`` to an erf module.
HF_ACTIVATIONS = {"relu": "relu", "linear": "linear", "tanh": "tanh", "gelu": "gelu", "silu": "silu",
                  "erf": "linear"}


class _Erf(nn.Module):
    """erf as a module (the activation slot of ``BertIntermediate`` holds modules)."""

    def forward(self, x):
        return torch.erf(x)


#: The activations ACT2FN lacks, as the modules the adapter puts in their place.
_OWN_ACTIVATIONS = {"erf": _Erf}


#: Architecture fields BertModel has no place for, and the one value each must hold.
BERT_FIXED_FIELDS = {"norm_type": "layer", "mlp": "dense", "positions": "absolute", "qk_norm": False,
                     "block_form": "sequential", "branch_norm": False, "final_norm": False, "logit_softcap": None}


def check_bert_architecture(arch):
    """``ValueError`` naming the first field of ``arch`` that ``BertModel`` cannot run.

    BERT is post-LN with LayerNorm, a dense MLP, absolute positions and one key/value head
    per query head; the other choices (``norm_type``, ``mlp``, ``positions``, ``qk_norm``,
    ``block_form``, ``branch_norm``, ``final_norm``, ``logit_softcap``, ``head_dim`` other
    than ``width / heads``, ``kv_heads`` other than ``heads``) would be ignored or break
    it, so they are refused.
    """
    if not arch.norm.normalises_stream:
        raise ValueError(f"norm must be 'post' for BertModel (post-LN), got {arch.norm!r}")
    for name, value in BERT_FIXED_FIELDS.items():
        if getattr(arch, name) != value:
            raise ValueError(f"{name} must be {value!r} for BertModel, got {getattr(arch, name)!r}")
    if arch.kv_heads is not None and arch.kv_heads != arch.heads:
        raise ValueError(f"kv_heads must equal heads ({arch.heads}) for BertModel, got {arch.kv_heads!r}")
    if arch.head_dim is not None:
        raise ValueError(f"head_dim must be unset for BertModel (its heads split the width), got {arch.head_dim!r}")


def _transformers():
    try:
        import transformers
    except ImportError:  # pragma: no cover - exercised only without the extra
        raise ImportError("the Hugging Face adapter needs transformers: pip install 'remprop[validation]'") from None
    return transformers


def bert_config(stack: SimulatedStack):
    """A ``BertConfig`` with the sizes, heads (``stack.arch.heads``), activation and mask of
    ``stack``, no dropout."""
    if not isinstance(stack, SimulatedStack):
        raise ValueError(f"stack must be a SimulatedStack, got {type(stack).__name__}")
    check_bert_architecture(stack.arch)
    transformers = _transformers()
    return transformers.BertConfig(
        vocab_size=2, hidden_size=stack.width, num_hidden_layers=stack.depth,
        num_attention_heads=stack.heads, intermediate_size=stack.d_ff,
        hidden_act=HF_ACTIVATIONS[stack.arch.activation],
        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, max_position_embeddings=stack.seq_len,
        type_vocab_size=1, layer_norm_eps=stack.layer_norm_eps, is_decoder=stack.causal, use_cache=False,
        attn_implementation="eager")


def _copy(module: nn.Linear, weight, bias=None):
    module.weight.copy_(weight)
    if bias is not None:
        module.bias.copy_(bias)


class HuggingFaceBert:
    """A ``transformers.BertModel`` running the same network as a simulated stack.

    Parameters
    ----------
    stack : SimulatedStack
        Post-LN stack to mirror (sizes, activation, alphas, attention variant, weights).

    Attributes
    ----------
    model : transformers.BertModel
    """

    def __init__(self, stack: SimulatedStack):
        config = bert_config(stack)
        transformers = _transformers()
        self.stack = stack
        self.depth = stack.depth
        self._mask = None
        model = transformers.BertModel(config, add_pooling_layer=False).to(device=stack.device, dtype=stack.dtype)
        d, kw = stack.width, dict(device=stack.device, dtype=stack.dtype)
        with torch.no_grad():
            emb = model.embeddings
            emb.position_embeddings.weight.zero_()
            emb.token_type_embeddings.weight.zero_()
            emb.LayerNorm = nn.Identity()
            for index, layer in enumerate(model.encoder.layer):
                w = stack.weights(index)
                attn = layer.attention
                attn.self.query = nn.Linear(d, d, bias=False, **kw)
                attn.self.key = nn.Linear(d, d, bias=False, **kw)
                _copy(attn.self.query, w.attention.query)
                _copy(attn.self.key, w.attention.key)
                _copy(attn.self.value, w.attention.value, w.attention.value_bias)
                if w.output is None:
                    attn.output.dense = nn.Identity()
                else:
                    attn.output.dense = nn.Linear(d, d, bias=False, **kw)
                    _copy(attn.output.dense, w.output)
                attn.output.LayerNorm = nn.LayerNorm(d, eps=stack.layer_norm_eps, elementwise_affine=False, **kw)
                _copy(layer.intermediate.dense, w.mlp.w1, w.mlp.b1)
                if stack.arch.activation in _OWN_ACTIVATIONS:  # BERT's table lacks it
                    layer.intermediate.intermediate_act_fn = _OWN_ACTIVATIONS[stack.arch.activation]()
                _copy(layer.output.dense, w.mlp.w2, w.mlp.b2)
                layer.output.LayerNorm = nn.LayerNorm(d, eps=stack.layer_norm_eps, elementwise_affine=False, **kw)
                attn.output.register_forward_pre_hook(self._skip_hook(stack.params["alpha_sa"]))
                layer.output.register_forward_pre_hook(self._skip_hook(stack.params["alpha_mlp"]))
                if stack.arch.attention.gain_controlled:
                    attn.self.register_forward_hook(self._centre_hook)
        self.model = model.eval()

    @staticmethod
    def _skip_hook(alpha):
        def hook(module, args):
            branch, identity = args
            return branch, identity * alpha
        return hook

    def _centre_hook(self, module, args, output):
        out, probs = output
        if self._mask is None:
            mean = out.mean(dim=1, keepdim=True)
        else:
            m = self._mask.to(out.dtype)[..., None]
            mean = (out * m).sum(dim=1, keepdim=True) / m.sum(dim=1, keepdim=True)
        return out - mean + module.value.bias, probs

    def forward(self, x, mask=None, observe=None):
        """Same contract as :meth:`~remprop.validation.SimulatedStack.forward` (hidden states of every layer to ``observe``)."""
        x, mask = self.stack.prepare_inputs(x, mask)
        attention_mask = None if mask is None else mask.to(torch.long)
        self._mask = mask
        try:
            with torch.no_grad():
                out = self.model(inputs_embeds=x, attention_mask=attention_mask, output_hidden_states=True,
                                 output_attentions=observe is not None, use_cache=False)
        finally:
            self._mask = None
        hidden = out.hidden_states
        if len(hidden) != self.depth + 1:  # pragma: no cover - guards against an API change
            raise RuntimeError(f"expected {self.depth + 1} hidden states from BertModel, got {len(hidden)}")
        if observe is not None:
            observe(0, hidden[0], None)
            for layer in range(self.depth):
                observe(layer + 1, hidden[layer + 1], out.attentions[layer])
        return hidden[-1]

    __call__ = forward

    def trace(self, x, mask=None) -> StackTrace:
        """Per-sequence statistics of every layer, as :meth:`~remprop.validation.SimulatedStack.trace`."""
        return trace_stack(self, x, mask)
