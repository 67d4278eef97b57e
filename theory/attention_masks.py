r"""Which keys each row of a causal attention layer sees: the causal mask, cut to a sliding window or a
chunk, with a bidirectional prefix.

One description per layer (an entry of a pattern, :func:`check_windows`), read by the per-position maps
(:func:`window_keys`: how many keys row t sees), the causal Gram state and the simulated stacks
(:func:`causal_window_mask`: which ones):

* None: the full causal mask, row t (1-based) sees the keys ``1..t``;
* an integer ``w``: a sliding window, the last ``min(t, w)`` keys ``max(1, t - w + 1)..t`` (Mistral,
  Phi-3, Gemma 2's local layers: the ``transformers`` mask ``kv_idx > q_idx - sliding_window``);
* an :class:`AttentionMask` for the rest: ``chunk = c`` (Llama 4's chunked layers, ``transformers``'
  ``chunked_causal_mask_function``: row t sees the keys of its own chunk of c positions up to itself,
  ``((t - 1) mod c) + 1`` of them), ``prefix = P`` (a prefix-LM: the first P positions attend to each
  other both ways and the later rows causally, ``or_masks(causal, prefix)`` in ``transformers``'
  ``masking_utils``, PaliGemma's and Gemma 3's bidirectional image tokens; a row t <= P sees P keys, a
  later one its causal keys), ``window`` together with either (the window and the chunk cut the causal
  keys, the prefix adds to them: row t sees ``P`` keys for t <= P, else ``min(t, w, ((t - 1) mod c) + 1)``).

Every size is an integer >= 1, so every row keeps at least its own key: a size of 0 (a row with no key)
is a :class:`~remprop.theory.checks.ParameterError` naming the field. A size of T or more is the causal
mask (window, chunk) or the encoder's full mask (prefix); a size larger than T given to a theory of T
tokens is an error (the one rule, ``check_windows(..., seq_len=T)``: an explicit argument larger than
the sequence is a mistake), while a model reader clips a configuration's field to T
(:func:`clip_windows`: Mistral's ``sliding_window = 4096`` at T = 2048 is its full causal mask).

A model's masks are a per-layer pattern: one entry for every layer (Mistral), or one per layer with
None for a global layer (Gemma 2 alternates local and global layers, Gemma 3 five local to one global,
Llama 4 three chunked to one global), repeated when a stack is deeper than the pattern (the
collapse-depth search of a diagnosis). Block-sparse masks are not described here.
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np

from .checks import ParameterError

__all__ = ["AttentionMask", "check_windows", "clip_windows", "layer_window", "window_keys", "causal_window_mask",
           "windows_json"]

_FIELDS = ("window", "chunk", "prefix")


def _size(value, name, seq_len=None):
    """``value`` as an int >= 1 (None passes), at most ``seq_len`` when given; else a ParameterError."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ParameterError(name, f"{name} must be an integer >= 1 (the keys each row sees; every row keeps its "
                                   f"own key, a size of T is the full mask), got {value!r}")
    if seq_len is not None and value > seq_len:
        raise ParameterError(name, f"{name} = {value} is larger than the sequence, T = {seq_len} (a size of T is "
                                   "the full mask; a model's configuration is clipped to T, an argument is not)")
    return int(value)


@dataclass(frozen=True)
class AttentionMask:
    """The keys row t of one layer sees: causal, cut to the last ``window`` keys and to the own ``chunk``,
    with a bidirectional ``prefix`` (each None: not applied; sizes integers >= 1, checked here).

    Row t (1-based) sees ``prefix`` keys for ``t <= prefix``, else ``min(t, window, ((t - 1) mod chunk) + 1)``
    (:meth:`keys`); :meth:`matrix` is the ``(T, T)`` boolean mask. A pattern (:func:`check_windows`) holds
    a mask with neither ``chunk`` nor ``prefix`` as its integer window, and the empty one as None.
    """

    window: int | None = None
    chunk: int | None = None
    prefix: int | None = None

    def __post_init__(self):
        for name in _FIELDS:
            object.__setattr__(self, name, _size(getattr(self, name), name))

    def keys(self, positions) -> np.ndarray:
        """The number of keys row t (1-based ``positions``, array) sees."""
        t = np.asarray(positions)
        n = t if self.window is None else np.minimum(t, self.window)
        if self.chunk is not None:
            n = np.minimum(n, (t - 1) % self.chunk + 1)
        return n if self.prefix is None else np.where(t <= self.prefix, self.prefix, n)

    def matrix(self, seq_len) -> np.ndarray:
        """``(T, T)`` bool, True where query i (row, 0-based) sees key j."""
        index = np.arange(int(seq_len))
        i, j = index[:, None], index[None, :]
        seen = j <= i
        if self.window is not None:
            seen = seen & (i - j < self.window)
        if self.chunk is not None:
            seen = seen & (i // self.chunk == j // self.chunk)
        if self.prefix is not None:
            seen = seen | ((i < self.prefix) & (j < self.prefix))
        return seen

    def to_dict(self) -> dict:
        """The set fields (JSON; :func:`check_windows` reads it back)."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


def _entry(value, name, seq_len):
    """One checked entry of a pattern in its normal form: None, an int window, or an AttentionMask."""
    if value is None:
        return None
    if isinstance(value, dict):
        unknown = set(value) - set(_FIELDS)
        if unknown:
            raise ParameterError(name, f"{name} entries name only {', '.join(_FIELDS)}, got {sorted(unknown)}")
        value = AttentionMask(**value)
    if isinstance(value, AttentionMask):
        for field in _FIELDS:
            _size(getattr(value, field), field if name == "window" else f"{name}.{field}", seq_len)
        if value.chunk is None and value.prefix is None:
            return value.window
        return value
    return _size(value, name, seq_len)


def check_windows(window, name="window", seq_len=None) -> tuple:
    """A mask pattern as a tuple of per-layer entries (None: a global layer), ``()`` for None.

    Parameters
    ----------
    window : None, int, AttentionMask, dict or sequence of them
        One entry for every layer, or one per layer of the pattern (an empty one: no mask, as None);
        an int is a sliding window, a dict the fields of an :class:`AttentionMask`.
    name : str
        The parameter named in errors.
    seq_len : int, optional
        T of the theory that reads the pattern: a size larger than T is an error (model readers clip
        their configuration's fields first, :func:`clip_windows`).

    Returns
    -------
    tuple
        ``()`` (no mask), or the pattern: None, an integer window >= 1, or an :class:`AttentionMask` with a
        chunk or a prefix (checked again: unchanged).

    Raises
    ------
    ParameterError
        A size that is not an integer >= 1 (a row with no key) or is larger than ``seq_len``.
    """
    if window is None:
        return ()
    entries = tuple(window) if isinstance(window, (list, tuple)) else (window,)
    return tuple(_entry(value, name, seq_len) for value in entries)


def clip_windows(pattern, seq_len) -> tuple:
    """A checked pattern with every size above ``seq_len`` set to ``seq_len`` (the same mask at T tokens):
    the rule of the model readers, whose configurations set sizes for their longest context."""
    def clip(entry):
        if entry is None or isinstance(entry, (int, np.integer)):
            return entry if entry is None else min(int(entry), seq_len)
        return _entry(AttentionMask(**{k: min(v, seq_len) for k, v in entry.to_dict().items()}), "window", None)
    return tuple(clip(entry) for entry in pattern)


def windows_json(pattern) -> list:
    """A checked pattern in JSON: None, an integer, or an :class:`AttentionMask`'s fields as a dict."""
    return [entry.to_dict() if isinstance(entry, AttentionMask) else entry for entry in pattern]


def layer_window(pattern, layer):
    """The mask of block ``layer`` (0-based) under the checked ``pattern`` (:func:`check_windows`):
    ``pattern[layer % len(pattern)]``, None for an empty pattern (the full causal mask)."""
    return pattern[layer % len(pattern)] if pattern else None


def window_keys(positions, window):
    """The number of keys row t (1-based ``positions``) sees under one entry of a pattern: ``t`` (None),
    ``min(t, window)`` (an int), or :meth:`AttentionMask.keys`."""
    positions = np.asarray(positions)
    if isinstance(window, AttentionMask):
        return window.keys(positions)
    return positions if window is None else np.minimum(positions, window)


def causal_window_mask(seq_len, window=None) -> np.ndarray:
    """``(T, T)`` bool, True where query i (row) sees key j under one entry of a pattern: ``j <= i``
    (None), ``i - window < j <= i`` (an int; 0-based), or :meth:`AttentionMask.matrix`. The one mask of
    the causal Gram state and of the simulated stacks."""
    if isinstance(window, AttentionMask):
        return window.matrix(seq_len)
    seq_len = int(seq_len)
    seen = np.tri(seq_len, dtype=bool)   # j <= i, built as booleans (no T x T offsets)
    if window is not None:
        seen &= ~np.tri(seq_len, k=-int(window), dtype=bool)   # and j > i - window
    return seen
