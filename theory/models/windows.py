"""The attention masks of a decoder configuration: which layers attend to their last keys, or their chunk, only.

:func:`config_windows` reads ``sliding_window``, ``attention_chunk_size`` and the layer pattern as the
``transformers`` modules apply them (``masking_utils``: row q sees keys ``q - sliding_window < k <= q``,
or the keys ``k <= q`` of its own chunk, ``k // attention_chunk_size == q // attention_chunk_size``):

* Mistral and Phi-3: every layer, whenever ``sliding_window`` is set;
* Qwen2: only with ``use_sliding_window`` (default false), the layers from ``max_window_layers`` on;
* Gemma 2: alternating, the even layers (0, 2, ...) local and the odd ones global;
* Gemma 3: five local layers to one global (``sliding_window_pattern``, default 6);
* an explicit ``layer_types`` list (``"sliding_attention"`` / ``"full_attention"``) wins for all of them;
* Llama 4's text stack (``llama4_text``): chunks of ``attention_chunk_size`` (default 8192) on the
  ``"chunked_attention"`` layers of ``layer_types``, without it the layers with rotary positions
  (``no_rope_layers``, default every layer but each ``no_rope_layer_interval``-th, 4), the others global.

Other families (LLaMA, OLMo 2, GPT-NeoX, the encoders) attend over every earlier key whatever the
fields say. The pattern is the one :mod:`remprop.theory.attention_masks` and the causal theories
read (:attr:`~remprop.theory.ModelSpec.attention_windows`); a size beyond the theory's T is clipped
to T (a configuration sets it for the longest context: Mistral's 4096 at T = 2048 is the causal mask).
"""
from __future__ import annotations

from ..attention_masks import AttentionMask, check_windows, clip_windows
from ..checks import ParameterError

__all__ = ["config_windows", "window_note", "WINDOWED_FAMILIES"]

#: The ``model_type`` of the families whose ``transformers`` modules apply ``sliding_window`` (or, Llama 4's
#: text stack, ``attention_chunk_size``).
WINDOWED_FAMILIES = ("mistral", "phi3", "qwen2", "gemma2", "gemma3_text", "llama4_text")
_TYPES = {"sliding_attention": True, "full_attention": False}
#: ``LlamaConfig``'s defaults of Llama 4's text stack (transformers 5.x): the chunk and the NoPE interval.
_LLAMA4_CHUNK, _LLAMA4_NOPE_INTERVAL = 8192, 4


def _layer_types(cfg, types):
    """``config.layer_types`` as booleans (True: the masked layers of the family, ``types`` its names)."""
    listed = cfg.get("layer_types")
    if not isinstance(listed, (list, tuple)) or not listed or any(t not in types for t in listed):
        raise ParameterError("config.layer_types", "config.layer_types must be a non-empty list of "
                             f"{' and '.join(map(repr, types))}, got {listed!r}")
    return [types[t] for t in listed]


def _llama4_chunks(cfg, depth) -> tuple:
    """The chunked layers of a ``llama4_text`` configuration (its config class's defaults where unset)."""
    chunk = cfg.get("attention_chunk_size", _LLAMA4_CHUNK)
    if chunk is None:
        return ()
    chunk = check_windows(chunk, name="config.attention_chunk_size")[0]
    if cfg.get("layer_types") is not None:
        chunked = _layer_types(cfg, {"chunked_attention": True, "full_attention": False})
    else:
        rope = cfg.get("no_rope_layers") or [int((i + 1) % int(cfg.get("no_rope_layer_interval", _LLAMA4_NOPE_INTERVAL))
                                                 != 0) for i in range(depth)]
        chunked = [bool(r) for r in rope]
    return tuple(AttentionMask(chunk=chunk) if c else None for c in chunked)


def config_windows(cfg, seq_len=None) -> tuple:
    """The per-layer attention masks of a configuration dict: ``()`` when every layer sees all earlier
    keys, else one entry per layer (the sliding window, a chunked
    :class:`~remprop.theory.attention_masks.AttentionMask`, or None for a global layer;
    :func:`~remprop.theory.attention_masks.check_windows`), sizes clipped to ``seq_len`` when given.

    A ``sliding_window`` or ``attention_chunk_size`` below 1 or a ``layer_types`` entry the family does
    not know is a :class:`~remprop.theory.checks.ParameterError` naming the field (``config.sliding_window``,
    ``config.attention_chunk_size``, ``config.layer_types``).
    """
    family, window = cfg.get("model_type"), cfg.get("sliding_window")
    depth = int(cfg.get("num_hidden_layers", 1))
    if family == "llama4_text":
        pattern = _llama4_chunks(cfg, depth)
    elif family not in WINDOWED_FAMILIES or window is None:
        return ()
    elif family == "qwen2" and not cfg.get("use_sliding_window", False):
        return ()
    else:
        check_windows(window, name="config.sliding_window")
        if cfg.get("layer_types") is not None:
            sliding = _layer_types(cfg, _TYPES)
        elif family == "gemma2":
            sliding = [(i + 1) % 2 != 0 for i in range(depth)]
        elif family == "gemma3_text":
            every = int(cfg.get("sliding_window_pattern", 6))
            sliding = [(i + 1) % every != 0 for i in range(depth)]
        elif family == "qwen2":
            sliding = [i >= int(cfg.get("max_window_layers", 28)) for i in range(depth)]
        else:
            sliding = [True] * depth
        pattern = tuple(window if s else None for s in sliding)
    if seq_len is not None:
        pattern = clip_windows(pattern, seq_len)
    return pattern if any(w is not None for w in pattern) else ()


def window_note(cfg, seq_len):
    """The assumption note of a model whose windows or chunks are shorter than T (None otherwise)."""
    pattern = config_windows(cfg)
    short = [w for w in pattern if w is not None and (w.chunk if isinstance(w, AttentionMask) else w) < seq_len]
    if not short:
        return None
    layers = "every layer" if len(short) == len(pattern) else f"{len(short)} of {len(pattern)} layers"
    if isinstance(short[0], AttentionMask):
        return (f"attention_chunk_size = {short[0].chunk} < T = {seq_len} on {layers}: the causal theories "
                "(per-position maps, causal Gram state) give each row of those layers the keys of its own chunk "
                "up to itself; the layer maps (the trainability diagram's) see all of them")
    return (f"sliding_window = {short[0]} < T = {seq_len} on {layers}: the causal theories (per-position maps, "
            f"causal Gram state) give each row of those layers its last {short[0]} keys; the layer maps (the "
            "trainability diagram's) see all of them")
