r"""Which keys each row of a causal attention layer sees: the full causal mask or a sliding window.

A causal row t (1-based) sees the keys ``1..t``; with a sliding window of ``w`` keys it sees
``max(1, t - w + 1)..t``, the last ``min(t, w)`` keys (Mistral, Phi-3, Gemma 2's local layers: the
``transformers`` mask ``kv_idx > q_idx - sliding_window``). A window of ``w >= T`` is the full causal
mask. A model's windows are a per-layer pattern (:func:`check_windows`): one window for every layer
(Mistral), or one entry per layer with None for a global layer (Gemma 2 alternates local and global
layers, Gemma 3 five local to one global), repeated when a stack is deeper than the pattern (the
collapse-depth search of a diagnosis). The per-position maps give row t the finite-T REM of its
``min(t, w)`` keys (:func:`window_keys`), the causal Gram state and the simulated stacks mask its
scores by :func:`causal_window_mask`.
"""
from __future__ import annotations

import numpy as np

from .checks import ParameterError

__all__ = ["check_windows", "layer_window", "window_keys", "causal_window_mask"]


def check_windows(window, name="window") -> tuple:
    """A window pattern as a tuple of per-layer windows (None: a global layer), ``()`` for None.

    Parameters
    ----------
    window : None, int or sequence of (int or None)
        One window for every layer, or one entry per layer of the pattern (an empty one: no window,
        as None).
    name : str
        The parameter named in errors.

    Returns
    -------
    tuple
        ``()`` (no window), or the pattern; every window an integer >= 1 (checked again: unchanged).

    Raises
    ------
    ParameterError
        A window that is not an integer >= 1 (a row with no key).
    """
    if window is None:
        return ()
    entries = tuple(window) if isinstance(window, (list, tuple)) else (window,)
    for value in entries:
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ParameterError(name, f"{name} must be an integer >= 1 (the keys each row sees; a window >= T is "
                                       f"the full causal mask), got {value!r}")
    return tuple(None if value is None else int(value) for value in entries)


def layer_window(pattern, layer):
    """The window of block ``layer`` (0-based) under the checked ``pattern`` (:func:`check_windows`):
    ``pattern[layer % len(pattern)]``, None for an empty pattern (the full causal mask)."""
    return pattern[layer % len(pattern)] if pattern else None


def window_keys(positions, window):
    """The number of keys row t (1-based ``positions``) sees: ``t``, or ``min(t, window)``."""
    positions = np.asarray(positions)
    return positions if window is None else np.minimum(positions, window)


def causal_window_mask(seq_len, window=None) -> np.ndarray:
    """``(T, T)`` bool, True where query i (row) sees key j: ``i - window < j <= i`` (0-based; no
    window: ``j <= i``). The one mask of the causal Gram state and of the simulated stacks."""
    index = np.arange(int(seq_len))
    offset = index[:, None] - index[None, :]
    seen = offset >= 0
    return seen if window is None else seen & (offset < window)
