"""Output of the ``remprop`` commands: strict JSON (see :mod:`remprop._json`) and
plain-text tables."""
from __future__ import annotations

import math

from ._json import dumps, to_jsonable

__all__ = ["to_jsonable", "dumps", "format_number", "format_table"]


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
