"""Unique names for specialised nested functions compiled by numba.

numba names compiled code after the Python function's ``__qualname__`` plus a
per-process counter, and its on-disk cache restores those names. Two specialisations of
one nested function (the kernels of two architectures, the moments of two activations)
compiled in different processes can therefore carry the same symbol name, and once both
are loaded from the cache into one process the second silently links to the first
(wrong code, or a crash such as ``'descr' is NULL``). Giving every specialisation its
own qualname before it is compiled rules this out, and keeps one cache index per
specialisation.
"""
from __future__ import annotations

import re

__all__ = ["specialised", "inline_jitable"]


def specialised(function, tag):
    """Rename ``function`` (in place) to ``<qualname>__<tag>`` and return it."""
    suffix = re.sub(r"\W", "_", str(tag))
    function.__qualname__ = f"{function.__qualname__}__{suffix}"
    function.__name__ = f"{function.__name__}__{suffix}"
    return function


def inline_jitable(function):
    """Like ``numba.extending.register_jitable``, but inlined into the caller's IR.

    Returns ``function`` itself (plain Python, usable from NumPy code) after registering
    it as a numba overload with ``inline="always"``. Inlining matters for functions that
    take arrays on a per-cell hot path: a compiled call with an array argument costs
    reference-count updates on the array, which contend between threads.
    """
    from numba.extending import overload

    def typer(*args, **kwargs):
        return function

    overload(function, jit_options={}, strict=False, inline="always")(typer)
    return function
