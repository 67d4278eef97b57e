"""Hugging Face ``BertForMaskedLM`` at the initialisation of our masked-LM stack.

:class:`BertMaskedLM` is a real ``transformers.BertForMaskedLM`` (random init, no
download: the ``BertConfig`` is built from the run's sizes) whose every weight is that of
:class:`~remprop.validation.training.MaskedLMStack` at the same configuration and seed, so
the two are the same network at step 0 and train under the same loop, data and masking
(:func:`~remprop.validation.training.train` with ``TrainConfig(model="bert")``).

Why the weights are copied rather than drawn by BERT: ``BertPreTrainedModel._init_weights``
draws every matrix from ``N(0, r^2)`` with one ``r = initializer_range``. The theory's
initialisation (docs/theory.md section 2) gives each matrix its own variance: queries and
keys ``beta sqrt(log T) / d`` (the translation of docs/real_models.md section 1,
``beta = r^2 d / sqrt(log T)``, read backwards), values ``sigma_v2 / d``, the MLP
``sigma_w2 / d`` and ``sigma_w2_out / d_ff``, MLP biases ``sigma_b2``. One ``r`` matches
one of them; the others need their own draws, which are the simulator's
(:class:`~remprop.validation.hf_bert.HuggingFaceBert`, the one home of that translation).

How each setting of the reference experiments (arXiv 2505.24333, Fig. 1(f)) is met:

* **blocks** (post-LN, the encoder of :class:`~remprop.validation.hf_bert.HuggingFaceBert`):
  LayerNorms without affine parameters, bias-free query/key ``nn.Linear`` layers, the
  activation of ``arch.activation`` (ReLU by default), no dropout; ``alpha_sa``/``alpha_mlp``
  != 1 and gain-controlled attention through that adapter's hooks on BERT's own modules;
* **absolute position embeddings**: BERT's ``position_embeddings`` table
  (``max_position_embeddings = seq_len``) holds the stack's position table, its
  ``word_embeddings`` the stack's word table, both ``N(0, 1/2)``;
* **input**: the token-type table is zero and frozen (one segment), and the embedding
  LayerNorm is ``nn.Identity``, as in our stack (input ``q0 = 1`` per coordinate);
* **head**: ``cls.predictions.transform`` is reduced to a LayerNorm without affine
  parameters (its dense layer and activation are ``nn.Identity``), and the decoder is
  untied from the word embeddings and holds the stack's head ``W ~ N(0, 1/d)``, bias 0.

What cannot be matched: block orders other than post-LN (BERT is post-LN), RMSNorm, gated
MLPs, rotary positions, grouped key/value heads, QK-norm, branch and final norms, parallel
blocks, logit soft-capping: :func:`~remprop.validation.hf_bert.check_bert_architecture`
refuses them, naming the field (``TrainConfig(model="bert")`` checks it at construction).

Requires the optional dependency ``transformers``.
"""
from __future__ import annotations

import torch
from torch import nn

from ..hf_bert import HuggingFaceBert, bert_config
from .model import MaskedLMStack

__all__ = ["BertMaskedLM"]


class BertMaskedLM(nn.Module):
    """``transformers.BertForMaskedLM`` holding the weights of :class:`~remprop.validation.training.MaskedLMStack` (same config, same seed).

    Parameters
    ----------
    config : remprop.validation.training.TrainConfig
        Architecture (``norm`` must be ``"post"``), beta, depth, width, d_ff, seq_len, seed.
    vocab_size : int
    device : torch.device

    Attributes
    ----------
    mlm : transformers.BertForMaskedLM

    Raises
    ------
    ValueError
        ``config.arch.norm`` is not ``"post"``.
    """

    def __init__(self, config, vocab_size: int, device):
        super().__init__()
        reference = MaskedLMStack(config, vocab_size, device)   # the initialisation, drawn once
        stack = reference.stack
        encoder = HuggingFaceBert(stack)                          # raises unless post-LN
        settings = bert_config(stack)
        settings.vocab_size = vocab_size
        settings.tie_word_embeddings = False
        from transformers import BertForMaskedLM

        mlm = BertForMaskedLM(settings).to(device=stack.device, dtype=stack.dtype)
        mlm.bert.encoder = encoder.model.encoder
        d, kw = stack.width, dict(device=stack.device, dtype=stack.dtype)
        with torch.no_grad():
            emb = mlm.bert.embeddings
            emb.word_embeddings.weight.copy_(reference.word)
            emb.position_embeddings.weight.copy_(reference.position)
            emb.token_type_embeddings.weight.zero_()
            emb.token_type_embeddings.weight.requires_grad_(False)
            emb.LayerNorm = nn.Identity()
            head = mlm.cls.predictions
            head.transform.dense = nn.Identity()
            head.transform.transform_act_fn = nn.Identity()
            head.transform.LayerNorm = nn.LayerNorm(d, eps=stack.layer_norm_eps, elementwise_affine=False, **kw)
            head.decoder.weight.copy_(reference.head_weight)
            head.decoder.bias.copy_(reference.head_bias)
            head.bias = head.decoder.bias                     # one output bias, as set_output_embeddings ties it
        if head.decoder.weight is emb.word_embeddings.weight:  # pragma: no cover - guards against an API change
            raise RuntimeError("BertForMaskedLM tied its decoder to the word embeddings despite tie_word_embeddings")
        self.mlm = mlm
        self.depth = stack.depth

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, observe=None) -> torch.Tensor:
        """Logits ``(n, vocab)`` at the ``(sequence, position)`` pairs ``positions`` (n, 2).

        ``observe(layer, hidden, probs)`` as for :meth:`remprop.validation.training.model.MaskedLMStack.hidden`: layer 0 with
        the embedded input, then after each block with its attention matrix.
        """
        watch = observe is not None
        out = self.mlm.bert(input_ids=ids, output_hidden_states=watch, output_attentions=watch, return_dict=True)
        if watch:
            observe(0, out.hidden_states[0], None)
            for layer in range(self.depth):
                observe(layer + 1, out.hidden_states[layer + 1], out.attentions[layer])
        x = out.last_hidden_state[positions[:, 0], positions[:, 1]]
        return self.mlm.cls(x)

    def query_key_parameters(self):
        """``[(W_Q, W_K)]`` of every block, in order."""
        return [(layer.attention.self.query.weight, layer.attention.self.key.weight)
                for layer in self.mlm.bert.encoder.layer]
