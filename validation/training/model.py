"""The simulated stack with trainable weights and a masked-LM head.

:class:`MaskedLMStack` is an ``nn.Module`` whose blocks are exactly those of
:class:`~remprop.validation.simulator.SimulatedStack`: its weights are the simulator's
own draws (:meth:`SimulatedStack.weights <remprop.validation.simulator.SimulatedStack.weights>`,
stream ``(seed, weights, layer)``; ``W_Q, W_K ~ N(0, beta sqrt(log T) / d)`` from
:func:`~remprop.validation.layers.query_key_variance`, the other variances of the
Architecture, docs/theory.md section 2) turned into parameters, and its forward runs
each block through :meth:`SimulatedStack.block
<remprop.validation.simulator.SimulatedStack.block>`, i.e. the theory's block tree
:meth:`Architecture.block <remprop.theory.Architecture.block>` walked through the
components' torch faces (docs/theory.md section 5). With the same
seed, its first block therefore computes what the simulator's first block computes.

Around the blocks (BERT style, Devlin et al. 2019):

* input ``x_t = E[w_t] + P[t]``: word and absolute position tables with i.i.d.
  ``N(0, 1/2)`` entries (:func:`~remprop.validation.inputs.embedding_tables`, stream
  ``(seed, embeddings, 0)``), so the input has ``q0 = 1`` per coordinate;
* the head: a LayerNorm without affine parameters, then a linear map to the vocabulary,
  ``W ~ N(0, 1/d)`` (stream ``(seed, embeddings, 1)``), bias 0, applied only at the
  selected positions.
"""
from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn.functional as F
from torch import nn

from .. import layers
from ..backend import STREAM_EMBEDDINGS, generator
from ..inputs import embedding_tables
from ..settings import SimulationSettings
from ..simulator import SimulatedStack

__all__ = ["MaskedLMStack", "BlockParameters", "HEAD_STREAM_INDEX"]

#: Index of the head's weights in the embeddings stream (index 0 holds the tables).
HEAD_STREAM_INDEX = 1


class BlockParameters(nn.Module):
    """The weights of one block as trainable parameters.

    Every tensor field of the block's :mod:`~remprop.validation.layers` weight records
    (attention, the dense or gated MLP, the optional output projection) becomes a
    parameter named ``attention_<field>`` / ``mlp_<field>``; :meth:`weights` rebuilds the
    records of the same types, so a new weight layout needs no change here.
    """

    def __init__(self, weights: layers.BlockWeights):
        super().__init__()
        self._types = {"attention": type(weights.attention), "mlp": type(weights.mlp)}
        for part in ("attention", "mlp"):
            record = getattr(weights, part)
            for field in dataclasses.fields(record):
                self.register_parameter(f"{part}_{field.name}", nn.Parameter(getattr(record, field.name).clone()))
        self.output = None if weights.output is None else nn.Parameter(weights.output.clone())

    def _record(self, part):
        kind = self._types[part]
        return kind(**{field.name: getattr(self, f"{part}_{field.name}") for field in dataclasses.fields(kind)})

    @property
    def query(self):
        return self.attention_query

    @property
    def key(self):
        return self.attention_key

    def weights(self) -> layers.BlockWeights:
        """The parameters as the :class:`~remprop.validation.layers.BlockWeights` the simulator's block reads."""
        return layers.BlockWeights(attention=self._record("attention"), mlp=self._record("mlp"), output=self.output)


class MaskedLMStack(nn.Module):
    """Embeddings, the simulator's blocks with trainable weights, and a masked-LM head.

    Parameters
    ----------
    config : remprop.validation.training.TrainConfig
        Architecture, beta, depth, width, d_ff, seq_len, seed.
    vocab_size : int
    device : torch.device
    """

    def __init__(self, config, vocab_size: int, device):
        super().__init__()
        #: The simulator this model trains: its weights, block tree and settings.
        sim = SimulationSettings(width=config.width, seq_len=config.seq_len, d_ff=config.d_ff, dtype="float32",
                                 device=device)
        self.stack = SimulatedStack(config.arch, config.beta, config.depth, sim=sim, seed=config.seed)
        self.blocks = nn.ModuleList(BlockParameters(self.stack.weights(layer)) for layer in range(config.depth))
        word, position = embedding_tables(vocab_size, config.seq_len, config.width, seed=config.seed,
                                          std=math.sqrt(0.5) if config.embedding_std is None else config.embedding_std,
                                          device=device)
        self.word = nn.Parameter(word)
        self.position = nn.Parameter(position)
        gen = generator(config.seed, STREAM_EMBEDDINGS, HEAD_STREAM_INDEX, device)
        head = torch.randn(vocab_size, config.width, generator=gen, device=device).mul_(1.0 / math.sqrt(config.width))
        self.head_weight = nn.Parameter(head)
        self.head_bias = nn.Parameter(torch.zeros(vocab_size, device=device))
        self._compiled_block = None
        self._compiled_stack = None

    def hidden(self, ids: torch.Tensor, observe=None) -> torch.Tensor:
        """The residual stream after the last block, ``(batch, T, d)``.

        ``observe(layer, hidden, probs)`` is called as in
        :meth:`SimulatedStack.forward <remprop.validation.simulator.SimulatedStack.forward>`:
        layer 0 with the embedded input, then after each block. Without ``observe`` (the training
        steps and the test loss) nothing reads the attention probabilities, so softmax attention
        runs fused where it can (:func:`~remprop.validation.layers.fused_attention`).
        """
        x = self.word[ids] + self.position
        if observe is None:
            return self._blocks(x)
        observe(0, x, None)
        for layer, block in enumerate(self.blocks):
            x, probs = self.stack.block(x, block.weights())
            observe(layer + 1, x, probs)
        return x

    def _block(self, x, weights):
        """One block, unobserved (attention fused where it can be): the unit :meth:`compile_blocks` compiles."""
        return self.stack.block(x, weights, need_probs=False)[0]

    def _each_block(self, x):
        """The blocks on the embedded input, unobserved, one (compiled or eager) block at a time."""
        step = self._block if self._compiled_block is None else self._compiled_block
        for block in self.blocks:
            x = step(x, block.weights())
        return x

    def _blocks(self, x):
        """The blocks on the embedded input, unobserved (:meth:`compile_blocks`)."""
        return self._each_block(x) if self._compiled_stack is None else self._compiled_stack(x)

    def compile_blocks(self, *, whole_stack=False, **options):
        """Run the unobserved blocks (training steps, test loss) through ``torch.compile(**options)``.

        By default one block is compiled, its weights inputs of the graph, so every block of a shape
        reuses one graph and the build time does not grow with the depth. With ``whole_stack`` the
        loop over the blocks is compiled as one graph instead: the build grows with the depth, but
        the compiler fuses across blocks and, with ``mode="reduce-overhead"`` on CUDA, a step's
        forward is one CUDA graph rather than one per block (whose replays cannot take the CUDA
        graph trees' fast path while the earlier blocks' backwards are pending). The observed
        passes (:func:`~remprop.validation.training.loop.probe`) stay eager and keep their attention
        probabilities; the weights are the same parameters either way.
        """
        if whole_stack:
            self._compiled_block, self._compiled_stack = None, torch.compile(self._each_block, **options)
        else:
            self._compiled_block, self._compiled_stack = torch.compile(self._block, **options), None

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, observe=None) -> torch.Tensor:
        """Logits ``(n, vocab)`` at the ``(sequence, position)`` pairs ``positions`` (n, 2)."""
        x = self.hidden(ids, observe)
        x = layers.layer_norm(x[positions[:, 0], positions[:, 1]], self.stack.layer_norm_eps)
        return F.linear(x, self.head_weight, self.head_bias)

    def query_key_parameters(self):
        """``[(W_Q, W_K)]`` of every block, in order."""
        return [(block.query, block.key) for block in self.blocks]
