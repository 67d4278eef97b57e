"""Shared checks of the command line's answers for the reliability tests: run ``main`` in-process,
and assert that a refusal is one plain line naming what was wrong."""
from __future__ import annotations

from remprop.cli import main


def run_cli(capsys, *argv):
    """main(argv) -> (exit status, stdout, stderr)."""
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_one_line(err, *names, code=None, status=2, absent=()):
    """Exactly one line on stderr naming every ``names`` and none of ``absent``, no traceback
    (and, with ``code``, the exit status ``status``)."""
    if code is not None:
        assert code == status, err
    lines = err.strip("\n").split("\n")
    assert len(lines) == 1 and "Traceback" not in err, err
    for name in names:
        assert name in lines[0], lines[0]
    for name in absent:
        assert name not in lines[0], lines[0]


def assert_one_line_error(code, err, *names, absent=()):
    """Exit 2 and :func:`assert_one_line`, with no "unexpected" error (an internal failure)."""
    assert "unexpected" not in err, err
    assert_one_line(err, *names, code=code, absent=absent)
