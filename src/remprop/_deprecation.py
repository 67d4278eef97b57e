"""Deprecated spellings of public names, kept for one release.

One mechanism for every renamed function, method or keyword: the old spelling still works,
warns :class:`DeprecationWarning` naming the new one, and gives the same result. Pure Python:
it imports nothing of remprop, so the theory package can use it without an import cycle.
"""
from __future__ import annotations

import functools
import inspect
import warnings

__all__ = ["renamed", "renamed_keywords", "old_order", "reordered", "warn_renamed"]


def warn_renamed(old: str, new: str, *, stacklevel: int = 3) -> None:
    """Warn that ``old`` is deprecated in favour of ``new`` (removed in the next release)."""
    warnings.warn(f"{old} is deprecated and will be removed in the next release; use {new}",
                  DeprecationWarning, stacklevel=stacklevel)


def renamed(old: str, function, new: str | None = None, *, adapt=None):
    """A deprecated alias ``old`` of ``function``: the same call, with a warning naming ``new``.

    ``new`` defaults to ``function.__name__`` (with ``()``); ``adapt(*args, **kwargs)``, if given,
    maps the old call's arguments to ``(args, kwargs)`` of the new function (an old argument
    order). The alias works as a function or a method (it is a plain function).
    """
    new = new or f"{function.__name__}()"

    @functools.wraps(function)
    def alias(*args, **kwargs):
        warn_renamed(f"{old.split('.')[-1]}()", new)
        if adapt is not None:
            args, kwargs = adapt(*args, **kwargs)
        return function(*args, **kwargs)

    alias.__name__ = alias.__qualname__ = old.split(".")[-1]
    alias.__doc__ = f"Deprecated alias of {new} (removed in the next release)."
    del alias.__wrapped__  # inspect.signature shows the alias's own (*args, **kwargs)
    return alias


def renamed_keywords(**names):
    """Decorator: the function also takes each deprecated keyword of ``names`` (old=new), warning
    and passing it on as the new one; both spellings at once is a ``TypeError``. The signature
    shown (``inspect.signature``, the documentation) is the function's own."""
    def decorate(function):
        where = function.__name__

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            for old, new in names.items():
                if old in kwargs:
                    if new in kwargs:
                        raise TypeError(f"{where}() got both {new!r} and its deprecated spelling {old!r}")
                    warn_renamed(f"{where}({old}=...)", f"{where}({new}=...)")
                    kwargs[new] = kwargs.pop(old)
            return function(*args, **kwargs)

        return wrapper

    return decorate


def old_order(*names):
    """An ``adapt`` for :func:`renamed`: the old call's positional arguments, in the old order
    ``names``, passed to the new function by keyword (so that the new order does not matter)."""
    def adapt(*args, **kwargs):
        if len(args) > len(names):
            raise TypeError(f"takes at most {len(names)} positional arguments ({', '.join(names)}), "
                            f"got {len(args)}")
        for name, value in zip(names, args):
            if name in kwargs:
                raise TypeError(f"got multiple values for argument {name!r}")
            kwargs[name] = value
        return (), kwargs

    return adapt


def reordered(was: str):
    """Decorator for a function whose argument order changed and whose moved arguments became
    keyword-only (the old order cannot be told from the new by the values): a call with more
    positional arguments than it now takes, an old-order call, is a ``TypeError`` that says so
    (``was``: the old signature) instead of a silent swap. The signature shown is the function's own."""
    def decorate(function):
        kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
        names = [p.name for p in inspect.signature(function).parameters.values() if p.kind in kinds]

        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            if len(args) > len(names):
                raise TypeError(f"{function.__name__}() takes {len(names)} positional arguments "
                                f"({', '.join(names)}) and the rest by keyword since its argument order "
                                f"changed (it was {function.__name__}{was}); got {len(args)} positional")
            return function(*args, **kwargs)

        return wrapper

    return decorate
