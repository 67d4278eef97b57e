"""Tabulated REM quantities kept on disk, so that another process loads them instead of rebuilding.

One home for the cache of :func:`~remprop.theory.rem.participation_table` and
:func:`~remprop.theory.rem.cross_overlap_table`: a flat float64 array per table, in
``$REMPROP_CACHE_DIR`` (default: the ``__pycache__`` folder of this package, where numba
caches its code too). The file name carries a hash of the source files that compute the
table, so a new version of the integrator or of the tabulation never reads an old file.
Files are written to a per-process temporary name and renamed into place (two processes
building the same table cannot leave a half-written file); an unreadable, damaged or
non-finite file is rebuilt, and an unwritable folder only disables the disk copy.
"""
from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

import numpy as np

__all__ = ["cached_array", "cache_directory", "write_atomically"]


def cache_directory() -> Path:
    """``$REMPROP_CACHE_DIR``, or this package's ``__pycache__`` folder."""
    return Path(os.environ.get("REMPROP_CACHE_DIR") or str(Path(__file__).parent / "__pycache__"))


@functools.lru_cache(maxsize=None)
def _source_key(sources) -> str:
    here = Path(__file__).parent
    return hashlib.sha256(b"".join((here / name).read_bytes() for name in sources)).hexdigest()[:16]


def cached_array(name: str, sources: tuple, build, valid) -> np.ndarray:
    """The array ``build()`` returns, loaded from disk when a valid copy is there.

    Parameters
    ----------
    name : str
        Stem of the file (e.g. ``"participation-T512-k2"``).
    sources : tuple of str
        Files of this package whose source the table depends on (their hash is in the
        file name).
    build : callable
        ``() -> ndarray`` (1-D float64), called when no valid copy is on disk.
    valid : callable
        ``(ndarray) -> bool``: whether a loaded array is this table (shape, header).

    Returns
    -------
    ndarray
    """
    path = cache_directory() / f"{name}-{_source_key(tuple(sources))}.npy"
    try:
        packed = np.load(path, allow_pickle=False)
        if packed.ndim == 1 and packed.dtype == np.float64 and np.all(np.isfinite(packed)) and valid(packed):
            return packed
    except (OSError, ValueError):
        pass
    packed = np.asarray(build(), dtype=np.float64)
    write_atomically(path, lambda handle: np.save(handle, packed))  # read-only install: in memory only
    return packed


def write_atomically(path: Path, write) -> bool:
    """Create or replace the file ``path`` with what ``write(handle)`` writes to a binary handle.

    The bytes go to a per-process temporary name first and are renamed into place, so a reader
    (or another process writing the same file) never sees a half-written file. A folder that
    cannot be created or written is not an error: returns whether the file was written, and
    leaves no temporary file behind.
    """
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
