"""Errors of the ``remprop`` command line: a usage error is one line on stderr, status 2.

:class:`CommandLineError` carries the message and the command that failed;
:func:`one_line` folds any exception into a single line; :func:`validation_extra`
turns the ImportError of a missing ``validation`` extra (torch, transformers) into a
usage error with the install hint, so that no traceback reaches the user (an ImportError
inside remprop itself stays an unexpected error, status 1).
"""
from __future__ import annotations

import contextlib

from remprop.validation import VALIDATION_HINT  # the hint's one home (importing it loads no torch)

__all__ = ["CommandLineError", "one_line", "is_missing_dependency", "validation_extra", "VALIDATION_HINT"]


class CommandLineError(Exception):
    """A usage error: reported as one line on stderr with exit status 2.

    ``prog`` is the command that failed (``"remprop diagram"``); when it is None the
    caller supplies it.
    """

    def __init__(self, message, prog=None):
        super().__init__(" ".join(str(message).split()))
        self.prog = prog


def one_line(error) -> str:
    """The message of ``error`` on one line (its type name when the message is empty)."""
    text = " ".join(str(error).split())
    return text or type(error).__name__


def is_missing_dependency(error: ImportError) -> bool:
    """Whether ``error`` is about a package outside remprop (torch, transformers, ...).

    An ImportError inside remprop itself (``cannot import name 'x' from 'remprop.y'``) is a
    bug, not a missing extra: it must not be reported as one.
    """
    return (error.name or "").split(".")[0] != "remprop"


@contextlib.contextmanager
def validation_extra(prog=None, option=None):
    """Report an ImportError of a missing dependency raised in the block as the missing validation extra.

    Parameters
    ----------
    prog : str, optional
        The failing command (``"remprop validate"``); None: the caller's.
    option : str, optional
        The option that needs the extra (``"--simulate"``), put before the message.
    """
    try:
        yield
    except ImportError as err:
        if not is_missing_dependency(err):
            raise
        prefix = f"{option}: " if option else ""
        text = one_line(err).replace(f": {VALIDATION_HINT}", "")  # the library's own hint: said once, first
        raise CommandLineError(f"{prefix}{VALIDATION_HINT} ({text})", prog=prog) from None
