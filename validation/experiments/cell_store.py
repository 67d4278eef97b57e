"""One small JSON file per grid cell, written atomically, shared safely between runs.

A sweep over a grid of cells writes, in its folder ``DIR``:

* ``DIR/sweep.json`` -- the manifest: every setting that decides a cell's numbers. The
  first run creates it exclusively (a hard link of a complete temporary file, so two runs
  starting together cannot both write it); every later run, concurrent or not, must
  present the same manifest (else a ``ValueError`` names the folder and the first setting
  that differs), so that cells of two different sweeps are never mixed.
* ``DIR/cells/<key>.json`` -- one record per finished cell.
* ``DIR/cells/<key>.claim`` -- while a run computes cell ``key``: who computes it (pid,
  host, start time, a random token). Created with ``O_CREAT | O_EXCL`` semantics (a hard
  link that fails if the name exists), so one run at a time holds a cell; removed by its
  holder when the record is on disk.
* ``DIR/cells/<key>.json.corrupt`` -- a damaged record moved aside (see :meth:`CellStore.quarantine`).

Atomic files. Every file is written to a temporary name private to its writer,
``.<name>~<host>~<pid>~<token>.tmp`` in the same folder, flushed to disk (``fsync``) and
renamed over its final name with :func:`os.replace`, atomic on POSIX and Windows: a reader
(or a run that resumes after a crash or a ``SIGKILL``) sees either no file or a complete
one, and no two writers ever share a temporary name.

Stale files. Another run's files are removed only when provably abandoned:

* a temporary file is stale when its writer's pid is dead on this host, or when it is
  older than ``temp_timeout`` (default :data:`TEMP_STALE_AFTER_S`, one hour: a write takes
  milliseconds); a temporary name without a writer is judged by its age alone;
* a claim is stale when its pid is dead on this host, or when it was taken more than
  ``claim_timeout`` ago (default :data:`CLAIM_STALE_AFTER_S`, 24 hours: the only rule for
  a holder on another host, whose pid cannot be checked from here).

A stale claim may be taken over; the takeover renames the claim to a private name first
and checks that it moved the stale claim it read (a fresh claim moved by mistake is put
back), so two runs cannot both take over one claim.

Damaged records. A record is valid when it is a strict JSON object (no ``NaN`` or
``Infinity``: no record is written with one) and the store's ``check``
accepts it (the sweep checks the cell's own coordinates, a hash of the manifest and a
checksum of the result, see :mod:`remprop.validation.experiments.sweep`). :meth:`CellStore.done`
counts valid records only, so a damaged cell is computed again; :meth:`CellStore.read`
raises one ``ValueError`` naming the file.

This module needs only the standard library.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import secrets
import socket
import time
import warnings
from pathlib import Path

__all__ = ["CellStore", "DamagedRecordWarning", "atomic_write_json", "json_sha256", "pid_alive", "stored_manifest",
           "MANIFEST_NAME", "CELLS_FOLDER", "CLAIM_SUFFIX", "CORRUPT_SUFFIX", "TEMP_STALE_AFTER_S", "CLAIM_STALE_AFTER_S"]

#: File name of the manifest in the sweep folder.
MANIFEST_NAME = "sweep.json"
#: Folder of the per-cell records inside the sweep folder.
CELLS_FOLDER = "cells"
#: Age (seconds) after which a temporary file is stale whoever wrote it.
TEMP_STALE_AFTER_S = 3600.0
#: Age (seconds) after which a claim is stale whoever holds it.
CLAIM_STALE_AFTER_S = 86400.0
#: Suffix of a cell's claim file (``<key>.claim``).
CLAIM_SUFFIX = ".claim"
#: Suffix of a damaged record moved aside (``<key>.json.corrupt``).
CORRUPT_SUFFIX = ".corrupt"
_KEY_PATTERN = re.compile(r"^[A-Za-z0-9_\-]+$")
_HOST = socket.gethostname()
_HOST_TAG = re.sub(r"[^A-Za-z0-9.\-]", "_", _HOST) or "host"
_TEMP_PATTERN = re.compile(r"^\.(?P<name>.+)~(?P<host>[^~]*)~(?P<pid>\d+)~(?P<token>[0-9a-f]+)\.tmp$")


class DamagedRecordWarning(UserWarning):
    """A damaged cell record was moved aside and its cell will be computed again."""


def json_sha256(value) -> str:
    """SHA-256 (hex) of the canonical JSON of ``value`` (sorted keys, no spaces, strict).

    Floats are written with ``repr`` precision, so a value and its JSON round trip have
    the same hash.
    """
    text = json.dumps(value, allow_nan=False, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _temporary_name(path: Path) -> Path:
    """A temporary name next to ``path``, private to this writer (host, pid, random token)."""
    return path.with_name(f".{path.name}~{_HOST_TAG}~{os.getpid()}~{secrets.token_hex(8)}.tmp")


def _write_temporary(path: Path, text: str) -> Path:
    """Write ``text`` to a fresh private temporary file next to ``path`` (flushed to disk)."""
    temporary = _temporary_name(path)
    try:
        with open(temporary, "x", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        _unlink(temporary)
        raise
    return temporary


def _unlink(path) -> bool:
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def atomic_write_json(path, value) -> Path:
    """Write ``value`` as JSON to ``path`` atomically (private temporary file + ``os.replace``).

    Floats are written with ``repr`` precision, so they read back bit for bit.
    Non-finite floats are refused (strict JSON): encode them before.

    Returns
    -------
    Path
        ``path``.
    """
    path = Path(path)
    temporary = _write_temporary(path, json.dumps(value, allow_nan=False, sort_keys=True))
    try:
        os.replace(temporary, path)
    except BaseException:
        _unlink(temporary)
        raise
    return path


def _create_exclusive_json(path: Path, value) -> bool:
    """Create ``path`` holding ``value`` only if no file has that name; whether it was created.

    The content is complete before the name appears (a hard link of a finished temporary
    file, which fails when the name exists). Where hard links are not supported, an
    ``O_CREAT | O_EXCL`` open is used instead.
    """
    text = json.dumps(value, allow_nan=False, sort_keys=True)
    temporary = _write_temporary(path, text)
    try:
        try:
            os.link(temporary, path)
            return True
        except FileExistsError:
            return False
        except OSError:
            pass  # no hard links on this file system
        try:
            descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        return True
    finally:
        _unlink(temporary)


def _make_folder(folder: Path) -> None:
    """Create a store's folder (and its parents); a file in the way, or a folder that cannot be
    created, is one ``ValueError`` naming the path."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        blocking = next((p for p in (folder, *folder.parents) if p.exists() and not p.is_dir()), None)
        if blocking is not None:
            where = "not a folder" if blocking == folder else f"in the way of the folder {folder}"
            raise ValueError(f"out: {blocking} is a file, {where} (a store keeps its records there); move it "
                             "away or use another folder") from None
        raise ValueError(f"out: cannot create the folder {folder} ({err.strerror or type(err).__name__})") from None


def _refuse_constant(name):
    """``json.loads``'s hook for ``NaN`` and ``Infinity``: strict JSON never holds them (every
    record is written with ``allow_nan=False``), so a record that does was damaged or edited."""
    raise ValueError(f"a non-finite number {name} (records are strict JSON)")


def _read_json(path: Path):
    """The JSON value in ``path``, or None when the file is missing or unreadable."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def stored_manifest(directory):
    """The manifest a store folder holds (a dict), or None where it has no readable one
    (no folder, no manifest, damaged JSON, or JSON that is not an object)."""
    manifest = _read_json(Path(directory) / MANIFEST_NAME)
    return manifest if isinstance(manifest, dict) else None


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` runs on this host (a zombie counts as dead).

    Where this cannot be told without side effects (not POSIX), every pid counts as alive,
    and only the age rules reap.
    """
    if os.name != "posix":
        return True
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, ValueError):
        return True
    try:
        state = Path(f"/proc/{int(pid)}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def _age(path: Path):
    """Seconds since ``path`` was modified (None when it is gone)."""
    try:
        return time.time() - path.stat().st_mtime
    except FileNotFoundError:
        return None


class CellStore:
    """The folder of a resumable sweep: a manifest and one record file per cell.

    Several processes (or several dask clusters' drivers) may use one store at once: each
    writes through private temporary names, holds a cell through a claim while computing
    it (:meth:`claim`, :meth:`release`) and reaps only provably stale files (module
    docstring).

    Parameters
    ----------
    directory : str or Path
        Sweep folder (created if missing).
    manifest : dict
        JSON-ready settings of the sweep. Written on first use; afterwards it must equal
        the stored manifest (compared after a JSON round trip).
    create : bool
        Start a new sweep when the folder has no manifest (else ``ValueError``).
    check : callable, optional
        ``check(key, record)``: None when the record (a dict) is a valid record of cell
        ``key``, else a short reason. Default: every JSON object is valid.
    temp_timeout, claim_timeout : float
        Ages (seconds) after which temporary files and claims are stale whoever wrote them.

    Raises
    ------
    ValueError
        The folder holds a different sweep (the message names the folder and the first
        setting that differs), or its manifest is not readable JSON.
    """

    def __init__(self, directory, manifest: dict, *, create=True, check=None, temp_timeout=TEMP_STALE_AFTER_S,
                 claim_timeout=CLAIM_STALE_AFTER_S):
        self.directory = Path(directory)
        self.cells_dir = self.directory / CELLS_FOLDER
        self.check = check
        self.temp_timeout, self.claim_timeout = float(temp_timeout), float(claim_timeout)
        self._claims = {}  # key -> token of the claims this object holds
        wanted = json.loads(json.dumps(manifest, allow_nan=False, sort_keys=True))
        path = self.directory / MANIFEST_NAME
        if not create and not path.exists():
            raise ValueError(f"out: {self.directory} holds no sweep (no {MANIFEST_NAME})")
        _make_folder(self.cells_dir)
        #: Whether this object wrote the manifest (a new sweep): :meth:`discard_if_unused` may take it back.
        self.created = False
        if not path.exists() and _create_exclusive_json(path, wanted):
            stored, self.created = wanted, True
        else:
            try:
                stored = json.loads(path.read_text(encoding="utf-8"))
            except ValueError:
                raise ValueError(f"out: {path} is not a readable sweep manifest") from None
        if stored != wanted:
            raise ValueError(f"out: {self.directory} holds a different sweep ({_first_difference(stored, wanted)});"
                             " use another folder or the same settings")
        self.manifest = wanted
        self.reap_stale()

    def discard_if_unused(self) -> bool:
        """Take back the manifest this object wrote when no cell was kept: a run refused or
        failed before its first record, so that the folder does not stay pinned to settings
        that computed nothing (the corrected rerun would be refused as "a different sweep").

        Removes the manifest only when this object created it (``created``) and the cells
        folder holds no record, no damaged record and no claim (another run that opened the
        same sweep and took a cell keeps it). Returns whether the manifest was removed.
        """
        if not self.created:
            return False
        if any(path.name.endswith((".json", CORRUPT_SUFFIX, CLAIM_SUFFIX)) for path in self.cells_dir.iterdir()):
            return False
        self.created = False
        return _unlink(self.directory / MANIFEST_NAME)

    # -- records --------------------------------------------------------------------------
    def path(self, key: str) -> Path:
        """Record file of cell ``key`` (letters, digits, ``_`` and ``-`` only)."""
        if not isinstance(key, str) or not _KEY_PATTERN.match(key):
            raise ValueError(f"key must be a non-empty string of letters, digits, '_' and '-', got {key!r}")
        return self.cells_dir / f"{key}.json"

    def keys(self) -> list:
        """Keys of every record file on disk, valid or not, sorted."""
        return sorted(path.stem for path in self.cells_dir.glob("*.json") if _KEY_PATTERN.match(path.stem))

    def inspect(self, key: str):
        """``(record, problem)`` of cell ``key``: ``(record, None)`` when its record is valid,
        ``(None, reason)`` when its file is damaged, ``(None, None)`` when there is none."""
        path = self.path(key)
        try:
            text = path.read_bytes().decode("utf-8")
        except FileNotFoundError:
            return None, None
        except UnicodeDecodeError:
            return None, "not UTF-8 text"
        try:
            record = json.loads(text, parse_constant=_refuse_constant)
        except ValueError as err:
            return None, f"not readable JSON: {err}"
        if not isinstance(record, dict):
            return None, f"not a JSON object but a {type(record).__name__}"
        problem = self.check(key, record) if self.check is not None else None
        return (None, problem) if problem else (record, None)

    def scan(self):
        """``(records, damaged)``: the valid records ``{key: record}`` and the damaged
        files ``{key: reason}`` on disk."""
        records, damaged = {}, {}
        for key in self.keys():
            record, problem = self.inspect(key)
            if problem is not None:
                damaged[key] = problem
            elif record is not None:
                records[key] = record
        return records, damaged

    def done(self) -> set:
        """Keys of the cells whose record on disk is valid (damaged ones are not done)."""
        return set(self.scan()[0])

    def write(self, key: str, record: dict) -> Path:
        """Write the record of cell ``key`` atomically (replaces an existing one)."""
        return atomic_write_json(self.path(key), record)

    def read(self, key: str) -> dict:
        """The record of cell ``key``; ``ValueError`` naming the file when missing or damaged."""
        record, problem = self.inspect(key)
        if problem is not None:
            raise ValueError(f"out: cell record {self.path(key)} is damaged ({problem}); "
                             "run the sweep again to recompute it")
        if record is None:
            raise ValueError(f"key: no record for cell {key!r} in {self.cells_dir}")
        return record

    def read_all(self) -> dict:
        """Every record on disk, keyed by cell; ``ValueError`` naming the first damaged file."""
        records, damaged = self.scan()
        if damaged:
            key = sorted(damaged)[0]
            more = f" (and {len(damaged) - 1} more damaged)" if len(damaged) > 1 else ""
            raise ValueError(f"out: cell record {self.path(key)} is damaged ({damaged[key]}){more}; "
                             "run the sweep again to recompute it")
        return records

    def quarantine(self, key: str, reason: str) -> Path:
        """Move the damaged record of ``key`` aside to ``<key>.json.corrupt`` (replacing an
        older one) with a :class:`DamagedRecordWarning` naming the file; return the new path.

        Call it while holding the cell's claim, so that no valid record written by another
        run is moved by mistake.
        """
        path = self.path(key)
        aside = path.with_name(path.name + CORRUPT_SUFFIX)
        try:
            os.replace(path, aside)
        except FileNotFoundError:
            return aside
        warnings.warn(f"{path}: damaged cell record ({reason}); moved to {aside.name}, the cell is computed again",
                      DamagedRecordWarning, stacklevel=2)
        return aside

    # -- claims ---------------------------------------------------------------------------
    def claim_path(self, key: str) -> Path:
        """Claim file of cell ``key``."""
        return self.path(key).with_suffix(CLAIM_SUFFIX)

    def claim(self, key: str) -> bool:
        """Take cell ``key`` for this process: True when taken (a stale claim is taken over),
        False when another live run holds it."""
        path = self.claim_path(key)
        token = secrets.token_hex(8)
        mine = {"pid": os.getpid(), "host": _HOST, "started": time.time(), "token": token}
        for _ in range(3):
            if _create_exclusive_json(path, mine):
                self._claims[key] = token
                return True
            holder = _read_json(path)
            if not self._claim_is_stale(path, holder) or not self._take_away(path, holder):
                return False
        return False

    def release(self, key: str) -> None:
        """Remove this process's claim on cell ``key`` (a claim of another run is left alone)."""
        token = self._claims.pop(key, None)
        path = self.claim_path(key)
        holder = _read_json(path)
        if token is not None and isinstance(holder, dict) and holder.get("token") == token:
            _unlink(path)

    def release_all(self) -> None:
        """Remove every claim this object holds."""
        for key in list(self._claims):
            self.release(key)

    def _claim_is_stale(self, path: Path, holder) -> bool:
        try:
            pid, host, started = int(holder["pid"]), str(holder["host"]), float(holder["started"])
        except (TypeError, KeyError, ValueError):
            age = _age(path)  # unreadable: a claim being created without hard links, or damage
            return age is not None and age > self.temp_timeout
        return (host == _HOST and not pid_alive(pid)) or time.time() - started > self.claim_timeout

    def _take_away(self, path: Path, holder) -> bool:
        """Remove the stale claim ``holder`` from ``path``; False when it turned out fresh."""
        aside = _temporary_name(path)
        try:
            os.rename(path, aside)
        except FileNotFoundError:
            return True  # gone already: try to create ours
        moved = _read_json(aside)
        if moved != holder:  # a fresh claim replaced the stale one in between: put it back
            try:
                os.link(aside, path)
            except OSError:
                pass
        _unlink(aside)
        return moved == holder

    # -- stale files ----------------------------------------------------------------------
    def reap_stale(self) -> int:
        """Remove provably stale temporary files and claims (module docstring); return how many."""
        removed = 0
        for folder in (self.directory, self.cells_dir):
            for path in folder.glob(".*.tmp"):
                if self._temporary_is_stale(path) and _unlink(path):
                    removed += 1
        for path in self.cells_dir.glob(f"*{CLAIM_SUFFIX}"):
            holder = _read_json(path)
            if self._claim_is_stale(path, holder) and self._take_away(path, holder):
                removed += 1
        return removed

    def _temporary_is_stale(self, path: Path) -> bool:
        age = _age(path)
        if age is None:
            return False
        match = _TEMP_PATTERN.match(path.name)
        if match and match["host"] == _HOST_TAG and not pid_alive(int(match["pid"])):
            return True
        return age > self.temp_timeout


def _first_difference(stored, wanted, prefix="") -> str:
    """Human-readable path of the first setting that differs between two manifests."""
    if isinstance(stored, dict) and isinstance(wanted, dict):
        for key in sorted(set(stored) | set(wanted)):
            if stored.get(key, "<missing>") != wanted.get(key, "<missing>"):
                return _first_difference(stored.get(key, "<missing>"), wanted.get(key, "<missing>"),
                                         f"{prefix}{key}.")
    text = lambda v: json.dumps(v)[:60]  # noqa: E731
    return f"{prefix.rstrip('.') or 'manifest'}: stored {text(stored)}, asked {text(wanted)}"
