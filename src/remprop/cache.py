"""The one folder remprop keeps things in: tables, tokenizers and compiled code.

:func:`cache_directory` is ``$REMPROP_CACHE_DIR``, else the platform's user cache folder
(:func:`user_cache_directory`: ``$XDG_CACHE_HOME/remprop`` or ``~/.cache/remprop`` on Linux,
``~/Library/Caches/remprop`` on macOS, ``%LOCALAPPDATA%\\remprop\\Cache`` on Windows). Inside it:

* ``numba/`` -- the compiled engine and the theory's other compiled loops (numba's disk cache,
  :func:`configure_numba`, in a folder named after the theory's sources; ``$NUMBA_CACHE_DIR``, numba's
  own setting, wins over ``numba/`` where it is set);
* ``*.npy`` -- the tabulated REM quantities (:func:`cached_array`: the participation and
  cross-overlap tables);
* ``tokenizers/`` -- the BPE tokenizers of the training runs (``remprop.validation.training``);
* ``precompile.log`` -- the output of ``remprop precompile --background``.

Beside numba's files, the folder :func:`configure_numba` names holds remprop's own record of what is
compiled there: an empty marker file per compiled function and machine (:func:`mark_compiled`,
written after the function's first successful call in a process, which numba has by then kept on
disk), so that whether a call will compile is known without reading numba's private cache index
(:func:`is_marked_compiled`). The folder is named after the theory's sources, so an edit leaves
the old markers behind with the old code.

The theory package computes and writes nothing itself: its compiled functions are cached where
:func:`configure_numba` points numba (``remprop.theory._jit`` calls it before anything is
compiled), and its tables go through :func:`cached_array`. A cache folder that cannot be written
(a read-only install or home, ``REMPROP_CACHE_DIR`` naming a file) is not an error: code is
compiled in memory and tables kept in memory, with one ``RuntimeWarning`` per process.
"""
from __future__ import annotations

import functools
import hashlib
import os
import sys
import tempfile
import warnings
from pathlib import Path

__all__ = ["cache_directory", "user_cache_directory", "numba_cache_directory", "is_writable", "configure_numba",
           "compiled_marker", "mark_compiled", "is_marked_compiled", "cached_array", "write_atomically"]


def user_cache_directory(platform=None, environ=None, home=None) -> Path:
    """The platform's per-user cache folder for remprop (without ``$REMPROP_CACHE_DIR``).

    Parameters
    ----------
    platform : str, optional
        ``sys.platform`` (default: this one's).
    environ : mapping, optional
        The environment (default ``os.environ``).
    home : path, optional
        The home folder (default ``Path.home()``).

    Returns
    -------
    Path
        Windows: ``%LOCALAPPDATA%\\remprop\\Cache`` (else ``~\\AppData\\Local\\...``); macOS:
        ``~/Library/Caches/remprop``; otherwise ``$XDG_CACHE_HOME/remprop`` where that is an
        absolute path (the XDG rule), else ``~/.cache/remprop``.
    """
    platform = sys.platform if platform is None else platform
    environ = os.environ if environ is None else environ
    home = Path.home() if home is None else Path(home)
    if platform.startswith("win"):
        local = environ.get("LOCALAPPDATA")
        return (Path(local) if local else home / "AppData" / "Local") / "remprop" / "Cache"
    if platform == "darwin":
        return home / "Library" / "Caches" / "remprop"
    xdg = environ.get("XDG_CACHE_HOME", "")
    return (Path(xdg) if os.path.isabs(xdg) else home / ".cache") / "remprop"


def cache_directory() -> Path:
    """``$REMPROP_CACHE_DIR``, else :func:`user_cache_directory` (read at every call)."""
    return Path(os.environ.get("REMPROP_CACHE_DIR") or user_cache_directory())


def numba_cache_directory() -> Path:
    """Where numba keeps the compiled code: ``$NUMBA_CACHE_DIR`` where set, else ``numba/`` in
    :func:`cache_directory`."""
    return Path(os.environ.get("NUMBA_CACHE_DIR") or cache_directory() / "numba")


def is_writable(folder) -> bool:
    """Whether ``folder`` exists or can be created, and a file can be made in it."""
    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
        return True
    except OSError:
        return False


@functools.lru_cache(maxsize=None)
def configure_numba(folder=None) -> bool:
    """Point numba's disk cache at :func:`numba_cache_directory` (its sub-folder ``folder`` where given);
    whether compiled code is kept on disk.

    Called once per process (later calls return the first answer), before the first function
    with a disk cache is decorated: numba places a function's cache when it is decorated
    (``numba.config.CACHE_DIR``). ``remprop.theory._jit`` names the sub-folder after the theory's
    sources, so that an edit compiles into a fresh folder. Where the folder cannot be written, numba
    would fall back to the ``__pycache__`` folders of the package or refuse the function; instead this
    returns False, warns once (``RuntimeWarning``) and the theory compiles in memory (``cache=False``).
    """
    import numba

    folder = numba_cache_directory() if folder is None else numba_cache_directory() / folder
    if not is_writable(folder):
        warnings.warn(f"cannot write remprop's cache folder {str(folder)!r}: the compiled code is kept in memory "
                      "only and compiled again by every process (set REMPROP_CACHE_DIR to a writable folder)",
                      RuntimeWarning, stacklevel=2)
        return False
    numba.config.CACHE_DIR = str(folder)
    global _NUMBA_FOLDER
    _NUMBA_FOLDER = folder
    return True


#: The folder :func:`configure_numba` pointed numba at (None: not configured, or compiled in memory).
_NUMBA_FOLDER = None


@functools.lru_cache(maxsize=None)
def _machine_key() -> str:
    """Eight hex digits naming this machine's code generation (llvmlite's public host CPU name and
    features, what numba's compiled code depends on besides the sources)."""
    from llvmlite import binding

    host = f"{binding.get_process_triple()} {binding.get_host_cpu_name()} {binding.get_host_cpu_features().flatten()}"
    return hashlib.sha256(host.encode()).hexdigest()[:8]


def compiled_marker(name: str):
    """The marker file of the compiled function ``name`` (e.g. ``"kernels._engine.final_states"``) for this
    machine in the folder :func:`configure_numba` configured, or None where nothing is kept on disk."""
    if _NUMBA_FOLDER is None:
        return None
    return _NUMBA_FOLDER / f"{name}-{_machine_key()}.compiled"


def mark_compiled(name: str) -> bool:
    """Record that ``name`` is compiled and kept in numba's disk cache (module notes); whether the marker
    was written (False: no disk cache, or a folder that cannot be written)."""
    marker = compiled_marker(name)
    if marker is None:
        return False
    return marker.exists() or write_atomically(marker, lambda handle: None)


def is_marked_compiled(name: str) -> bool:
    """Whether :func:`mark_compiled` recorded ``name`` for this machine and these sources."""
    marker = compiled_marker(name)
    return marker is not None and marker.exists()


@functools.lru_cache(maxsize=None)
def _source_key(sources) -> str:
    return hashlib.sha256(b"".join(Path(path).read_bytes() for path in sources)).hexdigest()[:16]


def cached_array(name: str, sources, build, valid):
    """The array ``build()`` returns, loaded from :func:`cache_directory` when a valid copy is there.

    A flat float64 array per file, ``<name>-<hash>.npy``: the hash is over the source files that
    compute it, so a new version of the code never reads an old file. An unreadable, damaged or
    non-finite file is rebuilt; an unwritable folder only disables the disk copy
    (:func:`write_atomically`).

    Parameters
    ----------
    name : str
        Stem of the file (e.g. ``"participation-T512-k2"``).
    sources : tuple of path
        The source files the array depends on (their hash is in the file name).
    build : callable
        ``() -> ndarray`` (1-D float64), called when no valid copy is on disk.
    valid : callable
        ``(ndarray) -> bool``: whether a loaded array is this table (shape, header).

    Returns
    -------
    ndarray
    """
    import numpy as np

    path = cache_directory() / f"{name}-{_source_key(tuple(str(source) for source in sources))}.npy"
    try:
        packed = np.load(path, allow_pickle=False)
        if packed.ndim == 1 and packed.dtype == np.float64 and np.all(np.isfinite(packed)) and valid(packed):
            return packed
    except (OSError, ValueError):
        pass
    packed = np.asarray(build(), dtype=np.float64)
    write_atomically(path, lambda handle: np.save(handle, packed))  # read-only: in memory only
    return packed


def write_atomically(path, write) -> bool:
    """Create or replace the file ``path`` with what ``write(handle)`` writes to a binary handle.

    The bytes go to a per-process temporary name first and are renamed into place, so a reader
    (or another process writing the same file) never sees a half-written file. A folder that
    cannot be created or written is not an error: returns whether the file was written, and
    leaves no temporary file behind.
    """
    path = Path(path)
    temporary = path.with_suffix(f".{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(temporary, "wb") as handle:
            write(handle)
        os.replace(temporary, path)
        return True
    except OSError:
        try:
            temporary.unlink()
        except OSError:
            pass
        return False
