"""Validators of the REM's discrete inputs: sequence length, moment orders, causal positions, heads.

Each names its parameter in the error (the CLI maps it to its flag).
"""
from __future__ import annotations

import numbers

import numpy as np

from ..checks import ParameterError

__all__ = ["check_seq_len", "check_order", "check_orders", "check_positions", "check_heads"]


def check_seq_len(seq_len, name="seq_len", allow_none=True):
    """A sequence length: None (T -> infinity) or an integer >= 2 (integral floats accepted)."""
    if seq_len is None and allow_none:
        return None
    if isinstance(seq_len, bool) or not isinstance(seq_len, (numbers.Integral, np.integer)):
        if isinstance(seq_len, (float, np.floating)) and float(seq_len).is_integer():
            seq_len = int(seq_len)
        else:
            what = "None or an integer >= 2" if allow_none else "an integer >= 2"
            raise ParameterError(name, f"{name} must be {what}, got {seq_len!r}")
    seq_len = int(seq_len)
    if seq_len < 2:
        raise ParameterError(name, f"{name} must be an integer >= 2, got {seq_len}")
    return seq_len


def check_order(order, name="order"):
    """A moment order: an integer >= 1."""
    if isinstance(order, bool) or not isinstance(order, (numbers.Integral, np.integer)) or order < 1:
        raise ParameterError(name, f"{name} must be an integer >= 1, got {order!r}")
    return int(order)


def check_orders(orders, count=(1, 2)):
    """A tuple of one (one-key moment) or two (two-key moment) orders, each >= 1."""
    what = " or ".join({1: "one", 2: "two"}[n] for n in count)
    try:
        values = tuple(orders)
    except TypeError:
        raise ParameterError("orders", f"orders must be a tuple of {what} integers >= 1, got {orders!r}") from None
    if len(values) not in count:
        raise ParameterError("orders", f"orders must be a tuple of {what} integers >= 1, got {orders!r}")
    return tuple(check_order(o, "orders") for o in values)


def check_positions(positions, seq_len):
    """Causal positions: integers t in [2, seq_len] (1-based; position 1 has no REM)."""
    arr = np.asarray(positions)
    if arr.size == 0 or not np.issubdtype(arr.dtype, np.number) or np.any(arr != np.round(arr)):
        raise ParameterError("positions", f"positions must be integers in [2, seq_len], got {positions!r}")
    arr = np.asarray(np.round(arr), dtype=np.int64)
    if arr.min() < 2 or arr.max() > seq_len:
        raise ParameterError("positions", f"positions must lie in [2, seq_len={seq_len}], got {arr.min()}..{arr.max()}")
    return arr


def check_heads(heads):
    """A number of attention heads: an integer >= 1."""
    if isinstance(heads, bool) or not isinstance(heads, (numbers.Integral, np.integer)) or heads < 1:
        raise ParameterError("heads", f"heads must be an integer >= 1, got {heads!r}")
    return int(heads)
