"""numba compilation helpers: where compiled code is kept, the options of every entry point, inlined jitables.

Where numba keeps compiled code is decided here, before any theory module decorates a function:
:data:`CACHE` is :func:`remprop.cache.configure_numba` (numba's cache pointed at the user cache
folder, never the package's own ``__pycache__``), and every ``njit`` that keeps its code on disk
passes ``cache=CACHE``, False where that folder cannot be written (compiled in memory).

numba keys a cached function on the text of its own source file and on its bytecode (and its
closure, which no cached function of theory has): an edit to a jitted helper in another module
(a component's ``*_core``, an activation's moments, which the engine reaches as globals) would leave
the old compiled code in use. The folder is therefore named after the theory's sources,
:func:`source_digest` (``numba/theory-<digest>``): edited sources compile into a fresh folder (the old
one stays behind until deleted, as numba's own stale entries do). That one name is the only place the
digest enters; no compiled function is renamed for the cache.

No compiled function of theory is made by a factory: numba names compiled code after
``module.qualname`` and a per-process counter, and two specialisations of one nested function
compiled in different processes and loaded from the disk cache into one could carry the same
symbol, the second then silently linking to the first (wrong code, or a crash such as ``'descr' is
NULL``). The engine's sweeps, the trapezoid rules of the smooth activations
(:mod:`.activations.quadrature_moments`, the integrand chosen by an integer code) and the fast Gram
state's MLP pass (``_gram_in_place``, the hidden core chosen by a flag) are module-level functions,
compiled once. A user-registered activation's rules are closures over its compiled function, compiled
in memory only (never kept on disk), where numba's per-process counter keeps their names apart.

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

__all__ = ["inline_jitable", "source_digest", "JIT_OPTIONS", "CACHE"]

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


#: Whether the theory's compiled functions are kept on disk (``njit(cache=CACHE)``): numba's cache
#: folder is set (:func:`remprop.cache.configure_numba`, its ``theory-<source digest>`` folder) and writable.
CACHE = configure_numba(f"theory-{source_digest()}")

#: The options of every compiled entry point of theory (``njit(cache=..., **JIT_OPTIONS)``). numba
#: compiles a ``register_jitable`` helper once per set of its callers' flags (and a helper inherits
#: ``error_model`` and ``forceinline`` from its caller): with one set for all entry points, a helper
#: reached from several of them is compiled once. The loops of an activation's moments over arrays
#: add ``forceinline``, as the kernel steps that call the same moments have it
#: (``remprop.theory.activations.maps``): in a ``remprop check`` of a SiLU model the quadrature
#: below the moments had been compiled twice.
JIT_OPTIONS = dict(error_model="numpy", nogil=True)


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
