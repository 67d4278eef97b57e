"""The sliding windows of a decoder configuration: which layers attend to their last keys only.

:func:`config_windows` reads ``sliding_window`` and the layer pattern as the ``transformers``
modules apply them (``masking_utils``: row q sees keys ``q - sliding_window < k <= q``):

* Mistral and Phi-3: every layer, whenever ``sliding_window`` is set;
* Qwen2: only with ``use_sliding_window`` (default false), the layers from ``max_window_layers`` on;
* Gemma 2: alternating, the even layers (0, 2, ...) local and the odd ones global;
* Gemma 3: five local layers to one global (``sliding_window_pattern``, default 6);
* an explicit ``layer_types`` list (``"sliding_attention"`` / ``"full_attention"``) wins for all of them.

Other families (LLaMA, OLMo 2, GPT-NeoX, the encoders) attend over every earlier key whatever the
field says. The pattern is the one :mod:`remprop.theory.attention_masks` and the causal theories
read (:attr:`~remprop.theory.ModelSpec.attention_windows`).
"""
from __future__ import annotations

from ..attention_masks import check_windows
from ..checks import ParameterError

__all__ = ["config_windows", "window_note", "WINDOWED_FAMILIES"]

#: The ``model_type`` of the families whose ``transformers`` modules apply ``sliding_window``.
WINDOWED_FAMILIES = ("mistral", "phi3", "qwen2", "gemma2", "gemma3_text")
_TYPES = {"sliding_attention": True, "full_attention": False}


def config_windows(cfg) -> tuple:
    """The per-layer windows of a configuration dict: ``()`` when no layer slides, else one entry per
    layer (the window, or None for a global layer; :func:`~remprop.theory.attention_masks.check_windows`).

    A ``sliding_window`` below 1 or a ``layer_types`` entry other than the two above is a
    :class:`~remprop.theory.checks.ParameterError` naming the field (``config.sliding_window``,
    ``config.layer_types``).
    """
    family, window = cfg.get("model_type"), cfg.get("sliding_window")
    if family not in WINDOWED_FAMILIES or window is None:
        return ()
    if family == "qwen2" and not cfg.get("use_sliding_window", False):
        return ()
    check_windows(window, name="config.sliding_window")
    depth = int(cfg.get("num_hidden_layers", 1))
    types = cfg.get("layer_types")
    if types is None:
        if family == "gemma2":
            sliding = [(i + 1) % 2 != 0 for i in range(depth)]
        elif family == "gemma3_text":
            every = int(cfg.get("sliding_window_pattern", 6))
            sliding = [(i + 1) % every != 0 for i in range(depth)]
        elif family == "qwen2":
            sliding = [i >= int(cfg.get("max_window_layers", 28)) for i in range(depth)]
        else:
            sliding = [True] * depth
    else:
        if not isinstance(types, (list, tuple)) or not types or any(t not in _TYPES for t in types):
            raise ParameterError("config.layer_types", "config.layer_types must be a non-empty list of "
                                 f"{' and '.join(map(repr, _TYPES))}, got {types!r}")
        sliding = [_TYPES[t] for t in types]
    pattern = tuple(window if s else None for s in sliding)
    return pattern if any(w is not None for w in pattern) else ()


def window_note(cfg, seq_len):
    """The assumption note of a model whose windows are shorter than T (None otherwise)."""
    pattern = config_windows(cfg)
    short = [w for w in pattern if w is not None and w < seq_len]
    if not short:
        return None
    layers = "every layer" if len(short) == len(pattern) else f"{len(short)} of {len(pattern)} layers"
    return (f"sliding_window = {short[0]} < T = {seq_len} on {layers}: the causal theories (per-position maps, "
            f"causal Gram state) give each row of those layers its last {short[0]} keys; the layer maps (the "
            "trainability diagram's) see all of them")
