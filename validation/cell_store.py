"""One small JSON file per grid cell, written atomically, so that a sweep can resume.

A sweep over a grid of cells writes, in its folder ``DIR``:

* ``DIR/sweep.json`` -- the manifest: every setting that decides a cell's numbers. It is
  written once; a later run in the same folder must present the same manifest (else a
  ``ValueError`` names the first setting that differs), so that cells of two different
  sweeps are never mixed.
* ``DIR/cells/<key>.json`` -- one record per finished cell.

Every file is written to a temporary name in the same folder, flushed to disk
(``fsync``) and renamed over its final name with :func:`os.replace`, which is atomic on
POSIX and Windows: a reader (or a run that resumes after a crash or a ``SIGKILL``) sees
either no file or a complete one, never a partial one. Temporary files left by a killed
run start with ``.`` and end with ``.tmp``; they are removed when the store is opened.

A cell whose file exists is done; a resumed sweep computes only the others, and each
cell has exactly one file whatever the number of interruptions.

This module needs only the standard library.
"""
from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path

__all__ = ["CellStore", "atomic_write_json", "MANIFEST_NAME", "CELLS_FOLDER"]

#: File name of the manifest in the sweep folder.
MANIFEST_NAME = "sweep.json"
#: Folder of the per-cell records inside the sweep folder.
CELLS_FOLDER = "cells"
_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_\-]+$")
_TEMP_PREFIX, _TEMP_SUFFIX = ".", ".tmp"


def atomic_write_json(path, value) -> Path:
    """Write ``value`` as JSON to ``path`` atomically (temporary file + ``os.replace``).

    Floats are written with ``repr`` precision, so they read back bit for bit.
    Non-finite floats are refused (strict JSON): encode them before.

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    handle = tempfile.NamedTemporaryFile("w", encoding="utf-8", dir=path.parent, prefix=_TEMP_PREFIX,
                                         suffix=_TEMP_SUFFIX, delete=False)
    try:
        with handle:
            json.dump(value, handle, allow_nan=False, sort_keys=True)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, path)
    except BaseException:
        try:
            os.unlink(handle.name)
        except FileNotFoundError:
            pass
        raise
    return path


class CellStore:
    """The folder of a resumable sweep: a manifest and one record file per cell.

    Parameters
    ----------
    directory : str or Path
        Sweep folder (created if missing).
    manifest : dict
        JSON-ready settings of the sweep. Written on first use; afterwards it must equal
        the stored manifest (compared after a JSON round trip).
    create : bool
        Start a new sweep when the folder has no manifest (else ``ValueError``).

    Raises
    ------
    ValueError
        The folder holds a different sweep (the message names the first setting that
        differs), or its manifest is not readable JSON.
    """

    def __init__(self, directory, manifest: dict, *, create=True):
        self.directory = Path(directory)
        self.cells_dir = self.directory / CELLS_FOLDER
        wanted = json.loads(json.dumps(manifest, allow_nan=False, sort_keys=True))
        path = self.directory / MANIFEST_NAME
        if not create and not path.exists():
            raise ValueError(f"out: {self.directory} holds no sweep (no {MANIFEST_NAME})")
        self.cells_dir.mkdir(parents=True, exist_ok=True)
        if path.exists():
            try:
                stored = json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                raise ValueError(f"out: {path} is not a readable sweep manifest") from None
            if stored != wanted:
                raise ValueError(f"out: {self.directory} holds a different sweep ({_first_difference(stored, wanted)});"
                                 " use another folder or the same settings")
        else:
            atomic_write_json(path, wanted)
        self.manifest = wanted
        self.remove_stale_temporaries()

    def remove_stale_temporaries(self) -> int:
        """Delete temporary files left by an interrupted write; return how many."""
        removed = 0
        for folder in (self.directory, self.cells_dir):
            for path in folder.glob(f"{_TEMP_PREFIX}*{_TEMP_SUFFIX}"):
                try:
                    path.unlink()
                    removed += 1
                except FileNotFoundError:
                    pass
        return removed

    def path(self, key: str) -> Path:
        """Record file of cell ``key`` (letters, digits, ``_`` and ``-`` only)."""
        if not isinstance(key, str) or not _KEY_PATTERN.match(key):
            raise ValueError(f"key must be a non-empty string of letters, digits, '_' and '-', got {key!r}")
        return self.cells_dir / f"{key}.json"

    def done(self) -> set:
        """Keys of the cells whose record is on disk."""
        return {path.stem for path in self.cells_dir.glob("*.json") if not path.name.startswith(_TEMP_PREFIX)}

    def write(self, key: str, record: dict) -> Path:
        """Write the record of cell ``key`` atomically (replaces an existing one)."""
        return atomic_write_json(self.path(key), record)

    def read(self, key: str) -> dict:
        """The record of cell ``key``."""
        path = self.path(key)
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"key: no record for cell {key!r} in {self.cells_dir}") from None

    def read_all(self) -> dict:
        """Every record on disk, keyed by cell."""
        return {key: self.read(key) for key in sorted(self.done())}


def _first_difference(stored, wanted, prefix="") -> str:
    """Human-readable path of the first setting that differs between two manifests."""
    if isinstance(stored, dict) and isinstance(wanted, dict):
        for key in sorted(set(stored) | set(wanted)):
            if stored.get(key, "<missing>") != wanted.get(key, "<missing>"):
                return _first_difference(stored.get(key, "<missing>"), wanted.get(key, "<missing>"),
                                         f"{prefix}{key}.")
    text = lambda v: json.dumps(v)[:60]  # noqa: E731
    return f"{prefix.rstrip('.') or 'manifest'}: stored {text(stored)}, asked {text(wanted)}"
