"""Value converters of the ``remprop`` options: one command-line string in, a checked value out.

Every converter raises :class:`argparse.ArgumentTypeError` with a short reason;
argparse prefixes the reason with ``argument --option:``, so every message names the
offending option. Grids (:func:`grid_of`) read one number, a comma list or a
``start:stop:num[:log]`` range. Only the standard library is imported.
"""
from __future__ import annotations

import argparse
import math
import os

__all__ = [
    "integer",
    "real",
    "positive_real",
    "nonnegative_real",
    "open_unit_real",
    "cosine",
    "layer_count",
    "count",
    "seed_list",
    "file_stem",
    "drop_extension",
    "NAME_EXTENSIONS",
    "Grid",
    "GRID_SYNTAX",
    "grid_of",
]


# -- scalar converters -----------------------------------------------------------------
def real(text: str) -> float:
    """A finite real number (NaN and infinities are refused)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a real number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite real number, got {text!r}")
    return value


def positive_real(text: str) -> float:
    """A finite real number > 0."""
    value = real(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def nonnegative_real(text: str) -> float:
    """A finite real number >= 0 (variances, skip strengths)."""
    value = real(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def open_unit_real(text: str) -> float:
    """A real number in the open interval (0, 1) (collapse thresholds)."""
    value = real(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must lie in the open interval (0, 1), got {text!r}")
    return value


def cosine(text: str) -> float:
    """A cosine similarity in [-1, 1]."""
    value = real(text)
    if not -1.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [-1, 1], got {text!r}")
    return value


def layer_count(text: str) -> int:
    """A number of blocks: an integer >= 1."""
    return integer(text, 1)


def integer(text: str, minimum: int) -> int:
    """``int(text)``, at least ``minimum``; a text that is not an integer written in digits is refused
    with what is wrong with it (not a number, not finite, not whole, floating-point notation)."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text!r}: "
                                         f"{_not_an_integer(text)}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text!r}")
    return value


def _not_an_integer(text) -> str:
    """What keeps ``text`` from being an integer: not a number, not finite, not whole, or written in
    floating-point notation (``1e30``: a number of 31 digits, which the integer options take in digits)."""
    try:
        number = float(text)
    except (TypeError, ValueError):
        return "not a number"
    if not math.isfinite(number):
        return "not finite"
    if number != math.floor(number):
        return "not a whole number"
    size = f"; at {number:g} it would also be far too large to run" if abs(number) > 1e15 else ""
    return f"floating-point notation ({number:g}), where an integer in digits is expected{size}"


def count(minimum):
    """Converter of an integer >= ``minimum`` (sizes, worker counts)."""

    def convert(text: str) -> int:
        return integer(text, minimum)

    convert.__name__ = f"integer >= {minimum}"
    return convert


def seed_list(text: str):
    """Seeds: a count ``N`` (seeds 0..N-1, N >= 1) or a comma list of distinct integers >= 0."""
    parts = [part.strip() for part in str(text).split(",")]
    try:
        values = [int(part) for part in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count N or a list 'a,b,c' of seeds, got {text!r}") from None
    if len(values) == 1:
        if values[0] < 1:
            raise argparse.ArgumentTypeError(f"a seed count must be >= 1, got {text!r}")
        return list(range(values[0]))
    if min(values) < 0 or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"seeds must be distinct integers >= 0, got {text!r}")
    return values


#: File extensions that a stem drops once (:func:`drop_extension`): a config's, a weight
#: file's, and the outputs' own.
NAME_EXTENSIONS = (".json", ".safetensors", ".bin", ".npz", ".png")


def drop_extension(text: str) -> str:
    """``text`` without one trailing extension of :data:`NAME_EXTENSIONS` (any case); a text
    that is nothing but the extension is kept."""
    for extension in NAME_EXTENSIONS:
        if text.lower().endswith(extension) and len(text) > len(extension):
            return text[: -len(extension)]
    return text


def file_stem(text: str) -> str:
    """A plain file name stem: not empty, not "." or "..", no path separator (``--name``).

    The outputs are written as ``OUT/NAME.png`` etc.; a separator would write into another
    folder (or fail after the computation when it does not exist). A trailing output or
    config extension is dropped once (:func:`drop_extension`: ``--name run.json`` writes
    ``run.json`` and ``run.png``, not ``run.json.json``).
    """
    separators = [sep for sep in ("/", "\\", os.sep, os.altsep) if sep]
    stem = drop_extension(text)
    if not stem.strip() or stem in (".", "..") or any(sep in text for sep in separators) or "\0" in text:
        raise argparse.ArgumentTypeError(f"must be a plain file name stem (not empty, not '.' or '..', no "
                                         f"path separator; the folder is --out), got {text!r}")
    return stem


# -- grids -------------------------------------------------------------------------------
class Grid(tuple):
    """Values parsed from a grid specification; ``.is_list`` is False for one plain number."""

    is_list: bool = True

    def __new__(cls, values, is_list=True):
        grid = super().__new__(cls, values)
        grid.is_list = is_list
        return grid


GRID_SYNTAX = ("a number, a comma list 'a,b,c', or a range 'start:stop:num' "
               "(num evenly spaced values, both ends included; append ':log' for log spacing)")


def grid_of(element):
    """Converter of a grid specification whose values each satisfy ``element``.

    Accepted forms: ``"0.5"`` (one value), ``"0.1,0.5,1"`` (a list), ``"0.05:3:200"``
    (``numpy.linspace(0.05, 3, 200)``) and ``"0.01:10:50:log"`` (geometric spacing).
    """

    def convert(text: str) -> Grid:
        text = text.strip()
        if ":" in text:
            values = _parse_range(text)
            for value in values:
                try:
                    element(repr(value))
                except argparse.ArgumentTypeError as err:
                    rule = str(err).split(", got ")[0]
                    raise argparse.ArgumentTypeError(
                        f"the range {text!r} contains {value:g}, but each value {rule}") from None
            return Grid(values, is_list=True)
        if "," in text:
            return Grid([float(element(part.strip())) for part in text.split(",")], is_list=True)
        return Grid([float(element(text))], is_list=False)

    convert.__name__ = f"grid of {getattr(element, '__name__', 'values')}"
    return convert


def _parse_range(text: str) -> list:
    parts = [part.strip() for part in text.split(":")]
    spacing = "linear"
    if len(parts) == 4 and parts[3].lower() in ("log", "lin"):
        spacing = "log" if parts[3].lower() == "log" else "linear"
        parts = parts[:3]
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"a range is 'start:stop:num' or 'start:stop:num:log', got {text!r}")
    start, stop = real(parts[0]), real(parts[1])
    try:
        num = int(parts[2])
    except ValueError:
        raise argparse.ArgumentTypeError(f"the number of values in {text!r} must be an integer >= 1") from None
    if num < 1:
        raise argparse.ArgumentTypeError(f"the number of values in {text!r} must be an integer >= 1")
    if num > 10_000_000:
        raise argparse.ArgumentTypeError(f"too many values in {text!r} (at most 10000000)")
    if num == 1:
        return [start]
    if spacing == "log":
        if start <= 0 or stop <= 0:
            raise argparse.ArgumentTypeError(f"a log range needs start > 0 and stop > 0, got {text!r}")
        ratio = math.log(stop / start)
        return [start * math.exp(ratio * k / (num - 1)) for k in range(num - 1)] + [stop]
    step = (stop - start) / (num - 1)
    return [start + step * k for k in range(num - 1)] + [stop]
