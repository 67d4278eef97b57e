"""A decoder too large for memory, measured one block at a time: one block redrawn for every layer.

At random initialisation the blocks of a ``transformers`` decoder are independent draws
from one distribution: the library draws every linear weight ``N(0, r^2)``
(``initializer_range`` r) and sets the norms' gains and the biases to constants. A stack
whose layer l is a single block *redrawn* from that distribution before it runs is
therefore the same random model, layer by layer, as the full one, while it holds only the
embedding and one block in memory: Llama 3 8B in float32 needs 2.1 GB (embedding) +
0.9 GB (one block) instead of 30 GB.

:func:`stream_blocks` makes that stack of a real ``transformers`` model built with one block
(:func:`remprop.validation.hf_models.streamed_model` builds it from a spec): the model's
own forward (embedding, rotary positions, causal mask) runs over a list of
:class:`RedrawnLayer` entries that each redraw the one block from a seed of their own and
run it, so :func:`~remprop.validation.probe` reads it like any model (every entry runs
once; the block's attention probabilities reach the probe through the entry's
``self_attn`` tap). The redraw is deterministic (the seed of layer l is fixed by the
model's seed and l), so two passes over the stack see the same weights.

It is only correct where the library's initialisation is exactly that: before it returns,
:func:`stream_blocks` checks the block the library drew (every linear weight of mean
about 0 and standard deviation about r, every other tensor constant) and refuses a family
whose block is drawn otherwise. Layers of different attention types (Gemma 2's alternating
sliding-window and global layers) keep their masks: the forward reads each layer's type from the
full depth's ``config.layer_types``, which :func:`stream_blocks` sets.
:func:`parameter_bytes` counts a model's parameters without allocating them (``meta``
device) and :func:`available_memory` reads the memory free on a device, from which
:func:`remprop.validation.hf_models.needs_streaming` decides whether the full model would fit
(:func:`~remprop.validation.simulate_model`'s default).

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333 (the measured models).
"""
from __future__ import annotations

import math
import os

import torch
from torch import nn

from .backend import check_positive_int, resolve_device, resolve_dtype

__all__ = ["RedrawnLayer", "stream_blocks", "parameter_bytes", "available_memory", "MEMORY_FRACTION"]

#: The full model is built only if its parameters take at most this fraction of the memory
#: available on the device (the rest: activations, the attention probabilities, the probe).
MEMORY_FRACTION = 0.5
#: Seeds of the redrawn layers: layer l of initialisation s draws from ``s * _SEED_STRIDE + l``.
_SEED_STRIDE = 1_000_003


class _AttentionTap(nn.Module):
    """Hands the shared block's attention output to the probe, under the entry that runs it."""

    def forward(self, output):
        return output


class RedrawnLayer(nn.Module):
    """Layer ``index`` of a streamed stack: redraw the shared block, then run it.

    Parameters
    ----------
    stream : object
        The owner of the shared block, which redraws it (not registered here: the block's
        parameters belong to the model once, not once per layer).
    index : int
        The layer, 0-based.
    """

    def __init__(self, stream, index):
        super().__init__()
        object.__setattr__(self, "_stream", stream)
        self.index = index
        self.self_attn = _AttentionTap()
        attention_type = getattr(stream.block, "attention_type", None)
        if attention_type is not None:  # read by some models' forward to pick the mask
            self.attention_type = attention_type

    def forward(self, *args, **kwargs):
        self._stream.redraw(self.index, self.self_attn)
        return self._stream.block(*args, **kwargs)


class _BlockStream(nn.Module):
    """The shared block, its redraws and the hook that routes its attention output to the tap
    of the layer running."""

    def __init__(self, block, std, seed):
        super().__init__()
        self.block = block
        self.std = float(std)
        self.seed = int(seed)
        self.linears = [module for module in block.modules() if isinstance(module, nn.Linear)]
        attention = getattr(block, "self_attn", None)
        if not isinstance(attention, nn.Module):
            raise ValueError(f"a streamed block needs a self_attn module; {type(block).__name__} has none")
        object.__setattr__(self, "_tap", None)
        attention.register_forward_hook(self._route)

    def _route(self, module, args, output):
        return output if self._tap is None else self._tap(output)

    @torch.no_grad()
    def redraw(self, index, tap):
        """Draw every linear weight of the block ``N(0, std^2)`` from the seed of layer ``index``."""
        device = self.linears[0].weight.device
        generator = torch.Generator(device=device).manual_seed(self.seed * _SEED_STRIDE + int(index))
        for linear in self.linears:
            linear.weight.normal_(0.0, self.std, generator=generator)
        object.__setattr__(self, "_tap", tap)


def _check_library_draw(block, std) -> None:
    """Raise ``ValueError`` unless the block is drawn as the redraw draws it: linear weights of
    mean ~0 and std ~``std``, every other tensor constant.

    The sample std of n draws has relative standard error ``1/sqrt(2n)`` and the sample mean
    standard error ``std/sqrt(n)``: 6 standard errors (plus 1e-6 of float rounding) fail a
    different initialisation scheme (a scaled output projection differs by a factor of 2 or
    more) and never a correct one.
    """
    linear_weights = {id(module.weight) for module in block.modules() if isinstance(module, nn.Linear)}
    for name, tensor in block.named_parameters():
        values = tensor.detach().double()
        if id(tensor) in linear_weights:
            n = values.numel()
            mean, spread = float(values.mean()), float(values.std())
            if abs(spread / std - 1.0) > 6.0 / math.sqrt(2.0 * n) + 1e-6 or abs(mean) > 6.0 * std / math.sqrt(n):
                raise ValueError(f"cannot stream this model one block at a time: its weight {name} is drawn with "
                                 f"mean {mean:.3g} and std {spread:.4g}, not N(0, {std:.4g}^2) as every linear "
                                 "weight is redrawn")
        elif values.numel() and not bool((values == values.reshape(-1)[0]).all()):
            raise ValueError(f"cannot stream this model one block at a time: its tensor {name} is drawn at random "
                             "(only linear weights are redrawn per layer)")


def stream_blocks(model, depth, *, init_range, seed, layer_types=None):
    """Turn a ``transformers`` model with one block into a stack of ``depth`` redrawn layers.

    Parameters
    ----------
    model : torch.nn.Module
        A model built with one block, in a ``ModuleList`` named ``layers`` (the LLaMA-style
        decoders: ``LlamaModel``, ``MistralModel``, ``Qwen2Model``, ``Phi3Model``, ``Gemma2Model``,
        ``Olmo2Model``), as the library initialised it.
    depth : int
        Layers of the stack.
    init_range : float
        The library's standard deviation r of every linear weight (``initializer_range``).
    seed : int
        Layer l draws its weights from ``seed`` and l.
    layer_types : sequence of str, optional
        The full depth's per-layer attention types (``config.layer_types``), read by some models'
        forward.

    Returns
    -------
    torch.nn.Module
        ``model``, its blocks replaced by ``depth`` :class:`RedrawnLayer` entries over the one block
        (registered as ``streamed_block``), its configuration set to ``depth`` layers and no
        key/value cache.

    Raises
    ------
    ValueError
        No one-block list named ``layers``, or a block drawn otherwise than the redraw draws it
        (a tensor other than a linear weight at random, a linear weight not ``N(0, r^2)``).
    """
    depth = check_positive_int("depth", depth)
    seed = check_positive_int("seed", seed, 0)
    blocks = getattr(model, "layers", None)
    if not isinstance(blocks, nn.ModuleList) or len(blocks) != 1:
        raise ValueError(f"cannot stream {type(model).__name__}: it has no one-block list named 'layers'")
    block = blocks[0]
    std = float(init_range)
    _check_library_draw(block, std)
    stream = _BlockStream(block, std, seed)
    model.streamed_block = stream
    model.layers = nn.ModuleList([RedrawnLayer(stream, index) for index in range(depth)])
    model.config.num_hidden_layers = depth
    model.config.use_cache = False  # a key/value cache would stack every layer's keys in the one block's slot
    if layer_types:
        model.config.layer_types = list(layer_types)
    return model


def parameter_bytes(config, dtype="float32") -> int:
    """Bytes of the parameters of ``AutoModel.from_config(config)`` in ``dtype``, counted on the
    ``meta`` device (nothing is allocated)."""
    import transformers

    with torch.device("meta"):
        model = transformers.AutoModel.from_config(config)
    count = sum(tensor.numel() for tensor in model.parameters())
    return count * torch.empty((), dtype=resolve_dtype(dtype)).element_size()


def available_memory(device=None) -> int:
    """Bytes free for tensors on ``device``: CUDA's free memory, else the system's available
    memory (``MemAvailable`` of /proc/meminfo, or all physical memory where that is not read)."""
    device = resolve_device(device)
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return int(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
