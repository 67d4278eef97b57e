"""Probe any torch transformer at initialisation: order parameters layer by layer, from hooks.

:func:`probe` attaches forward hooks to the blocks of a model -- a Hugging Face model
(``BertModel``, ``RobertaModel``, ``GPT2Model``, ``GPT2LMHeadModel``, ``ViTModel``, the decoders
``LlamaModel``, ``MistralModel``, ``Qwen2Model``, ``Phi3Model``, ``Gemma2Model``, ``Olmo2Model``,
...) or a plain ``torch.nn.TransformerEncoder`` -- runs one forward pass under ``torch.no_grad()`` and
records, for every sequence of the batch,

* the residual stream entering block 1 (layer 0) and leaving each block l = 1..L: with the
  Gram matrix ``G_ij = x_i . x_j / d`` of the n real tokens,

  ``q = (1/n) sum_i G_ii``, ``p = (1/(n(n-1))) sum_{i != j} G_ij``, ``rho = p / q`` and the
  mean pairwise cosine ``(1/(n(n-1))) sum_{i != j} G_ij / sqrt(G_ii G_jj)``;
* the self-attention probabilities ``a_ij`` of each block: the participation ratio
  ``Y2 = sum_j a_ij^2`` and the entropy ``-sum_j a_ij log a_ij``, averaged over heads and
  real query rows i.

The statistics are those of :func:`~remprop.validation.measurements.token_statistics` and
:func:`~remprop.validation.measurements.attention_statistics`.

How the attention probabilities are read
----------------------------------------
* ``nn.MultiheadAttention`` (the ``self_attn`` of ``nn.TransformerEncoderLayer``, or the first
  one inside any other block): a forward pre-hook (``with_kwargs=True``) sets
  ``need_weights=True, average_attn_weights=False``; a forward hook reads the per-head
  weights and hands the caller the output it asked for (``(out, None)``, or the head mean),
  so the block computes exactly what it would have. The weights are the softmax that
  multiplied the values in that very forward pass.
* Hugging Face models (transformers 5): every attention module returns
  ``(attn_output, attn_weights)`` (rotary positions, grouped key/value heads, QK-norm and
  soft-capping happen inside it: the weights read are those after all of them), but only the
  ``"eager"`` implementation fills
  ``attn_weights`` (``"sdpa"``, the default, returns ``None``). The probe switches the model
  to eager with the public ``model.set_attn_implementation("eager")`` and, afterwards, writes
  back the ``_attn_implementation_internal`` value of every config it found (so the restore
  is exact and cannot fail). The attention module of each block is the one the model class
  declares for its ``output_attentions`` (``_can_record_outputs["attentions"]``: class,
  sub-module name and tuple index), else the first sub-module whose class name contains
  ``SelfAttention``/``Attention``. The probe does *not* pass ``output_attentions=True``:
  transformers 5 answers it by installing permanent capture hooks on the model's modules.

What the probe changes, only for the duration of the forward pass
-----------------------------------------------------------------
Every module is put in eval mode (no dropout) and its ``training`` flag restored
afterwards; Hugging Face models run with eager attention (restored afterwards);
``torch.backends.mha`` fast paths are disabled (restored afterwards) -- otherwise, in eval
mode without gradients, ``nn.TransformerEncoder`` turns a padded batch into a nested tensor
and ``nn.TransformerEncoderLayer`` / ``nn.MultiheadAttention`` call fused kernels that bypass
``self_attn.forward`` and its hooks. (The layer fast path is also disabled by any hook on the
layer: ``TransformerEncoderLayer.forward`` checks ``_forward_hooks``/``_forward_pre_hooks`` of
its modules.) All hooks are removed, also when the forward raises. Parameters are never
touched.

Modules, one idea each
----------------------
* :mod:`~remprop.validation.probing.hooked_forward` -- :func:`probe`, the public entry: one hooked forward pass;
* :mod:`~remprop.validation.probing.discovery` -- finding the blocks, their attention modules and the Hugging Face
  configs of a model;
* :mod:`~remprop.validation.probing.arguments` -- the forward call (inputs, mask, token window), checked;
* :mod:`~remprop.validation.probing.state` -- eval mode, eager attention and MHA fast paths, switched and restored;
* :mod:`~remprop.validation.probing.recorder` -- the hooks and the statistics they record;
* :mod:`~remprop.validation.probing.trace` -- :class:`ProbeTrace`, the result.

Reference: Giorlandino & Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

from .hooked_forward import probe
from .trace import ProbeTrace

__all__ = ["ProbeTrace", "probe"]
