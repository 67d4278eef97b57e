"""Files that several processes may write at once: an exclusive lock, and a set of outputs put in
place together.

* :func:`exclusive_lock` -- an advisory ``fcntl.flock`` on a folder or a file, released when the
  block ends or the process dies (the one lock of the package: a training folder's
  ``train.lock`` and a command's output folder);
* :class:`OutputSet` -- a run's output files written into a private staging folder beside their
  final names, then each renamed into place (``os.replace``, atomic) under the output folder's lock,
  so that two runs writing the same names leave the complete set of one of them, never a mix.
"""
from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

__all__ = ["exclusive_lock", "OutputSet", "output_set"]


@contextlib.contextmanager
def exclusive_lock(path, *, wait=True):
    """Hold an exclusive advisory lock (``fcntl.flock``) on ``path`` while the block runs.

    ``path`` is a folder, or a file (created if missing). Yields the open descriptor (a file's can
    be read and written, e.g. the holder's pid), or None where ``fcntl`` is missing (not POSIX:
    nothing is locked). ``wait=False``: ``BlockingIOError`` at once when another open description
    holds it (another process, or another open of it in this one); else waits for it.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield None
        return
    path = Path(path)
    descriptor = os.open(path, os.O_RDONLY) if path.is_dir() else os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        yield descriptor
    finally:
        os.close(descriptor)  # releases the lock


class OutputSet:
    """The output files of one run, staged in a private folder inside ``directory`` and put in place
    as one set by :meth:`commit`.

    Write each file to :meth:`path` (``name`` as it will be called in ``directory``); :meth:`final`
    gives the name it will have. Nothing appears under the final names before :meth:`commit`.
    """

    def __init__(self, directory):
        self.directory = Path(directory)
        self.staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=self.directory))

    def path(self, name) -> Path:
        """Where to write the output ``name`` (a file name, no folder) before the commit."""
        return self.staging / Path(name).name

    def final(self, path) -> Path:
        """The name in ``directory`` of a staged file."""
        return self.directory / Path(path).name

    def commit(self) -> list:
        """Rename every staged file over its final name, all under the lock of ``directory``
        (:func:`exclusive_lock`): a concurrent run's commit comes wholly before or after. Returns the
        final paths."""
        done = []
        with exclusive_lock(self.directory):
            for staged in sorted(self.staging.iterdir()):
                os.replace(staged, self.final(staged))
                done.append(self.final(staged))
        return done

    def discard(self) -> None:
        """Remove the staging folder and whatever is left in it."""
        shutil.rmtree(self.staging, ignore_errors=True)


@contextlib.contextmanager
def output_set(directory):
    """An :class:`OutputSet` in ``directory``, committed when the block ends without an exception and
    discarded in any case (an interrupted run leaves its previous outputs as they were)."""
    outputs = OutputSet(directory)
    try:
        yield outputs
        outputs.commit()
    finally:
        outputs.discard()
