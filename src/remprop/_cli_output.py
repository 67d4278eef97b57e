"""Output of the ``remprop`` commands: strict JSON and plain-text tables.

JSON convention (stated in ``remprop --help``): numbers that are not finite are written
as the strings ``"inf"``, ``"-inf"`` and ``"nan"``, so that the output is strict JSON
(RFC 8259 has no infinities) while keeping their meaning; ``float("inf")`` reads them
back in Python. ``alpha_star = "inf"`` means that no skip strength up to the search
bound avoids rank collapse.
"""
from __future__ import annotations

import json
import math

__all__ = ["to_jsonable", "dumps", "format_number", "format_table"]


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


def format_number(value, digits=6) -> str:
    """A number for a table: ``digits`` significant digits, ``inf``/``nan`` spelled out."""
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}g}"


def format_table(headers, rows) -> str:
    """Right-aligned plain-text table; ``rows`` hold strings or numbers."""
    cells = [[cell if isinstance(cell, str) else format_number(cell) for cell in row] for row in rows]
    widths = [max([len(h)] + [len(row[k]) for row in cells]) for k, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells)
    return "\n".join(lines)
