"""Input checking shared by the public functions: every error names its parameter."""
from __future__ import annotations

import difflib
import numbers
import os
import stat

import numpy as np

class ParameterError(ValueError):
    """A ValueError about one parameter, which it names: ``err.parameter`` (a command line points
    the message at that parameter's option). Its message starts with the name."""

    def __init__(self, parameter, message):
        super().__init__(message)
        self.parameter = parameter


def as_float_array(name, value, *, positive=False, nonnegative=False, low=None, high=None,
                   allow_inf=False):
    """Convert ``value`` to a float64 array and check it, naming ``name`` in any error.

    Parameters
    ----------
    name : str
        Parameter name used in the error message.
    value : array_like
        The value to check.
    positive, nonnegative : bool
        Require ``value > 0`` or ``value >= 0`` element-wise.
    low, high : float, optional
        Closed bounds ``low <= value <= high``.
    allow_inf : bool
        Accept ``+inf`` (never NaN).

    Notes
    -----
    A bool (or boolean array) is refused, as :func:`check_count` and :func:`check_real_scalar` refuse
    it: ``beta=True`` is a mistake, not the number 1.
    """
    if value is None or isinstance(value, (str, bytes, bool, np.bool_)) or getattr(value, "dtype", None) == np.bool_:
        raise ParameterError(name, f"{name} must be a real number or an array of real numbers, got {value!r}")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ParameterError(name, f"{name} must be a real number or an array of real numbers, got {value!r}") from None
    if np.isnan(arr).any():
        raise ParameterError(name, f"{name} must not be NaN")
    if not allow_inf and not np.isfinite(arr).all():
        raise ParameterError(name, f"{name} must be finite")
    if positive and (arr <= 0).any():
        raise ParameterError(name, f"{name} must be > 0, got {_worst(arr, arr <= 0)}")
    if nonnegative and (arr < 0).any():
        raise ParameterError(name, f"{name} must be >= 0, got {_worst(arr, arr < 0)}")
    if low is not None and (arr < low).any():
        raise ParameterError(name, f"{name} must be >= {low}, got {_worst(arr, arr < low)}")
    if high is not None and (arr > high).any():
        raise ParameterError(name, f"{name} must be <= {high}, got {_worst(arr, arr > high)}")
    return arr


#: What :func:`check_regular_file` calls a path that is not a regular file, by its ``stat`` mode test.
_FILE_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a named pipe"), (stat.S_ISSOCK, "a socket"),
               (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))


def check_regular_file(name, path):
    """Refuse ``path`` unless it is a regular file (symbolic links followed), before anything opens it.

    Reading a named pipe blocks until another process writes to it, a device may never end: the
    file's type is read with ``os.stat``, which opens nothing. Returns ``path`` unchanged.

    Raises
    ------
    ParameterError
        Naming ``name`` and the path: it does not exist, cannot be stat-ed, or is a folder, a named
        pipe, a socket or a device.
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        raise ParameterError(name, f"{name}: cannot read {os.fspath(path)!r} "
                                   f"({err.strerror or type(err).__name__})") from None
    if not stat.S_ISREG(mode):
        kind = next((kind for test, kind in _FILE_KINDS if test(mode)), "a special file")
        raise ParameterError(name, f"{name}: {os.fspath(path)!r} is {kind}, not a regular file (nothing was read "
                                   "from it)")
    return path


def check_open_unit(name, value):
    """Check a scalar in the open interval (0, 1) (collapse thresholds)."""
    value = check_real_scalar(name, value)
    if not 0.0 < value < 1.0:
        raise ParameterError(name, f"{name} must lie in the open interval (0, 1), got {value!r}")
    return value


def check_real_scalar(name, value):
    """A finite real scalar (bools are rejected)."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Real, np.floating, np.integer)):
        arr = np.asarray(value)
        if arr.ndim != 0 or not np.issubdtype(arr.dtype, np.number):
            raise ParameterError(name, f"{name} must be a real number, got {value!r}")
        value = arr.item()
    value = float(value)
    if not np.isfinite(value):
        raise ParameterError(name, f"{name} must be finite, got {value!r}")
    return value


def check_depth(depth, name="depth"):
    """A layer count: an integer >= 1."""
    return check_count(name, depth, 1)


def check_choice(name, value, choices):
    """A string among ``choices``."""
    if value not in choices:
        options = ", ".join(repr(c) for c in choices)
        raise ParameterError(name, f"{name} must be one of {options}, got {value!r}")
    return value


def did_you_mean(text, choices) -> str:
    """`` (did you mean 'x'?)`` for the choice closest to an unknown ``text``, or ``""`` when none is close.

    A choice equal to ``text`` but for letter case comes first (``llama-3.2-1B``: ``llama-3.2-1b``);
    else the closest by ``difflib.get_close_matches`` (similarity ratio >= 0.75, about one
    typo in every four characters: ``--seqlen``: ``--seq-len``).
    """
    text, choices = str(text), [str(c) for c in choices]
    folded = [c for c in choices if c.casefold() == text.casefold()]
    close = folded or difflib.get_close_matches(text, choices, n=1, cutoff=0.75)
    return f" (did you mean {close[0]!r}?)" if close else ""


def check_overlap(q, p, q_name="q", p_name="p"):
    """Order parameters of a token simplex: ``q > 0`` and ``|p| <= q``."""
    q = as_float_array(q_name, q, positive=True)
    p = as_float_array(p_name, p)
    if (np.abs(p) > q * (1 + 1e-12)).any():
        raise ParameterError(p_name, f"{p_name} must satisfy |{p_name}| <= {q_name} (a cosine in [-1, 1])")
    return q, p


def simplex_cosine_floor(seq_len):
    """Smallest mean cosine of T tokens: ``-1/(T - 1)`` (0 as T -> infinity, ``seq_len=None``).

    ``|sum_i x_i|^2 = T q + T (T - 1) p >= 0`` gives ``p / q >= -1/(T - 1)``.
    """
    return 0.0 if seq_len is None else -1.0 / (seq_len - 1)


#: How far below the simplex floor a cosine may lie and still count as rounding error.
SIMPLEX_ROUNDING = 1e-9


def check_simplex_cosine(name, cosine, seq_len):
    """Check a mean cosine of T tokens against :func:`simplex_cosine_floor`.

    ``cosine`` is a validated float array; ``name`` is named in the error. Values within
    :data:`SIMPLEX_ROUNDING` below the floor are rounding error: they are returned
    clipped onto the floor. Returns the (possibly clipped) cosine.
    """
    floor = simplex_cosine_floor(seq_len)
    # Cosines measured from data land a rounding error below an exact floor (e.g. -1e-11
    # for orthogonalised Gaussian tokens): accept those and clip them onto the floor.
    rounding = (cosine < floor) & (cosine >= floor - SIMPLEX_ROUNDING)
    if rounding.any():
        cosine = np.where(rounding, floor, cosine)
    if (cosine < floor).any():
        if seq_len is None:
            why = ("negative mean cosines are not reachable as T -> infinity (T tokens have mean "
                   "cosine >= -1/(T - 1) -> 0); the T -> infinity attention maps would give "
                   "negative variances. Use a finite seq_len for negative cosines")
        else:
            why = f"T = {seq_len} tokens have mean cosine >= -1/(T - 1) = {floor!r}"
        worst = float(_worst(cosine, cosine < floor))
        raise ParameterError(name, f"{name} must be >= {floor!r}: {why}; got {worst!r}")
    return cosine


def output_pair(first, second):
    """Broadcast the two outputs of a map to their common shape (like a two-output ufunc)."""
    first, second = np.broadcast_arrays(np.asarray(first, dtype=np.float64),
                                        np.asarray(second, dtype=np.float64))
    return scalar_or_array(np.array(first)), scalar_or_array(np.array(second))


def _worst(arr, mask):
    bad = arr[mask]
    return bad.flat[0] if bad.size else arr


def scalar_or_array(x):
    """Return a Python float for 0-d results (like a ufunc on scalars), else an ndarray."""
    x = np.asarray(x, dtype=np.float64)
    return float(x) if x.ndim == 0 else x


def check_grid_axis(name, values, *, allow_scalar=False, **checks):
    """A non-empty 1-d float array of grid values (``checks`` as in :func:`as_float_array`).

    ``allow_scalar``: a single number is a grid of one value.
    """
    arr = as_float_array(name, values, **checks)
    if allow_scalar and arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise ParameterError(name, f"{name} must be a {'number or a ' if allow_scalar else ''}1-d sequence, "
                         f"got shape {arr.shape}")
    if arr.size == 0:
        raise ParameterError(name, f"{name} must not be empty")
    return arr


def check_count(name, value, minimum=1):
    """An integer ``>= minimum`` (bools and non-integral floats are rejected)."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, np.integer)):
        if isinstance(value, (float, np.floating)) and float(value).is_integer():
            value = int(value)
        else:
            raise ParameterError(name, f"{name} must be an integer >= {minimum}, got {value!r}")
    value = int(value)
    if value < minimum:
        raise ParameterError(name, f"{name} must be an integer >= {minimum}, got {value}")
    return value


def check_seeds(seeds, name="seeds"):
    """Initialisation seeds: a count n (seeds ``0 .. n-1``) or distinct integers >= 0, as a tuple."""
    if isinstance(seeds, (numbers.Integral, np.integer)) and not isinstance(seeds, bool):
        return tuple(range(check_count(name, seeds, 1)))
    if isinstance(seeds, (str, bytes)):
        raise ParameterError(name, f"{name} must be a count >= 1 or a sequence of seeds >= 0, got {seeds!r}")
    try:
        values = tuple(seeds)
    except TypeError:
        raise ParameterError(name, f"{name} must be a count >= 1 or a sequence of seeds >= 0, got {seeds!r}") from None
    if not values:
        raise ParameterError(name, f"{name} must not be empty")
    out = tuple(check_count(name, s, 0) for s in values)
    if len(set(out)) != len(out):
        raise ParameterError(name, f"{name} must be distinct, got {list(out)}")
    return out
