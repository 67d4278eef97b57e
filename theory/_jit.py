"""numba compilation helpers: unique names for specialised closures, inlined jitables.

numba names compiled code after the Python function's ``__qualname__`` plus a
per-process counter, and its on-disk cache restores those names. Two specialisations of
one nested function (the moments of two activations, the engine before and after an edit)
compiled in different processes can therefore carry the same symbol name, and once both
are loaded from the cache into one process the second silently links to the first
(wrong code, or a crash such as ``'descr' is NULL``). Giving every specialisation its
own qualname before it is compiled rules this out, and keeps one cache index per
specialisation.

The name also carries :func:`source_digest`, a hash of every theory module that imports
numba. numba keys its disk cache on the source file of the cached function and on its
pickled closure, in which the jitted helpers of other modules (the attention, LayerNorm
and activation cores, the components' ``*_core`` maps) appear by reference only: without the digest,
an edit to one of them would leave the old compiled code in use. With it, changed
sources get fresh cache entries (the stale files stay behind in the cache folder, as they
do when numba itself recompiles after an edit).

Where numba keeps compiled code is decided here, before any theory module decorates a function:
:data:`CACHE` is :func:`remprop.cache.configure_numba` (numba's cache pointed at the user cache
folder, never the package's own ``__pycache__``), and every ``njit`` that keeps its code on disk
passes ``cache=CACHE``, False where that folder cannot be written (compiled in memory).

Used by :mod:`.activations`, :mod:`.kernels` and :mod:`.rem.table`; it imports
nothing from theory, so it sits below all three (inside :mod:`.kernels`, which imports
the other two, it would close an import cycle). Private to theory.
"""
from __future__ import annotations

import functools
import hashlib
import re
from pathlib import Path

from remprop.cache import configure_numba

__all__ = ["specialised", "inline_jitable", "source_digest", "JIT_OPTIONS", "CACHE"]

#: Whether the theory's compiled functions are kept on disk (``njit(cache=CACHE)``): numba's cache
#: folder is set (:func:`remprop.cache.configure_numba`) and writable.
CACHE = configure_numba()

#: The options of every compiled entry point of theory (``njit(cache=..., **JIT_OPTIONS)``). numba
#: compiles a ``register_jitable`` helper once per set of its callers' flags (and a helper inherits
#: ``error_model`` and ``forceinline`` from its caller): with one set for all entry points, a helper
#: reached from several of them is compiled once. The loops of an activation's moments over arrays
#: add ``forceinline``, as the kernel steps that call the same moments have it
#: (``remprop.theory.activations.maps``): in a ``remprop check`` of a SiLU model the quadrature
#: below the moments had been compiled twice.
JIT_OPTIONS = dict(error_model="numpy", nogil=True)

_IMPORTS_NUMBA = re.compile(rb"^\s*(?:from|import) numba\b", re.M)


@functools.lru_cache(maxsize=None)
def source_digest():
    """Eight hex digits of SHA-256 over the theory modules that import numba (path and text).

    Unreadable sources (e.g. a zipped install) are skipped: the digest then stands for
    the files that could be read.
    """
    root = Path(__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        try:
            source = path.read_bytes()
        except OSError:
            continue
        if _IMPORTS_NUMBA.search(source):
            digest.update(path.relative_to(root).as_posix().encode() + b"\0" + source)
    return digest.hexdigest()[:8]


def specialised(function, tag):
    """Rename ``function`` (in place) to ``<qualname>__<tag>_<source digest>`` and return it."""
    suffix = re.sub(r"\W", "_", f"{tag}_{source_digest()}")
    function.__qualname__ = f"{function.__qualname__}__{suffix}"
    function.__name__ = f"{function.__name__}__{suffix}"
    return function


def inline_jitable(function):
    """``numba.extending.register_jitable`` with ``forceinline``: LLVM inlines ``function`` into
    every compiled caller.

    Returns ``function`` itself (plain Python, usable from NumPy code). Inlining matters for
    the table lookups, which take the packed table on a per-cell hot path: inlined, the call
    and its reference counts on the table go. The inlining is LLVM's: numba's
    own IR inlining (an ``inline="always"`` overload), used before, retyped the function at every
    call site and made up a third of a cold ``remprop check bert-base`` (35.5 s of compiling
    -> 22.4 s; each table-lookup loop 3.5-4.5 s -> 0.5 s), and ran no faster (a 500 x 500
    finite-T diagram at 60 layers, and 1e6 table lookups, equal within the run-to-run spread).
    Only compiled code calls the compiled function, so numba builds neither its CPython nor its
    C wrapper.
    """
    from numba.extending import register_jitable

    register_jitable(forceinline=True, no_cpython_wrapper=True, no_cfunc_wrapper=True)(function)
    return function
