"""Strict JSON for everything remprop writes.

Numbers that are not finite are written as the strings ``"inf"``, ``"-inf"`` and
``"nan"``, so that the output is strict JSON (RFC 8259 has no infinities) while keeping
their meaning; ``float("inf")`` reads them back in Python. ``alpha_star = "inf"`` means
that no skip strength up to the search bound avoids rank collapse.
"""
from __future__ import annotations

import json
import math

__all__ = ["to_jsonable", "dumps"]


def to_jsonable(value):
    """Convert NumPy arrays and scalars, tuples and non-finite floats to JSON values."""
    if isinstance(value, dict):
        return {str(key): to_jsonable(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(item) for item in value]
    tolist = getattr(value, "tolist", None)
    if tolist is not None and not isinstance(value, (str, bytes)):
        return to_jsonable(tolist())  # ndarray or NumPy scalar
    if isinstance(value, bool) or value is None or isinstance(value, (int, str)):
        return value
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value
    return str(value)


def dumps(value) -> str:
    """Strict JSON text of ``value`` on one line (see the module docstring for non-finite numbers)."""
    return json.dumps(to_jsonable(value), allow_nan=False)
