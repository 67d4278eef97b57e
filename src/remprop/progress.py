"""Progress of long work on stderr: one facility for the library and the ``remprop`` commands.

:func:`progress_bar` is what every long loop of remprop reports to (the grid of a diagram,
the cells of a sweep or a trained grid, the figures, a training run, the simulated layers of
a real model). Where it shows depends on the stream:

* a terminal (or a Jupyter kernel): a ``tqdm`` bar, redrawn in place;
* anything else (a log file, a pipe, a captured stream): plain lines, each with the
  wall-clock time, the work done, the elapsed time and the ETA::

      12:04:31 sweep: 3/72 cells (4%), 0.0732cells/s, 41 s elapsed, ETA 16 min

  one at the first step, then at most one every :data:`LINE_INTERVAL_S` seconds, and one
  when the work ends. A log of a long run therefore always says how far it got.

:func:`announce` prints the one line of an estimate made before the work starts, in the
same form. Only the standard library is imported here (tqdm when a bar is drawn).
"""
from __future__ import annotations

import math
import sys
import time

__all__ = ["LINE_INTERVAL_S", "progress_bar", "announce", "LineProgress", "NoProgress", "format_seconds"]

#: Seconds between two progress lines in a log (the first step and the end are always written).
LINE_INTERVAL_S = 10.0
#: Work within this share of the total reads as done: sums of parts of units (``steps / depth``) miss the
#: total by rounding errors, which would read as an ETA of 1e-15 s.
_DONE_TOLERANCE = 1e-9


def format_seconds(seconds) -> str:
    """``"40 s"``, ``"12 min"``, ``"3.2 h"``, ``"5.1 days"``, ``"2e+03 years"`` (``"unknown"``: not finite)."""
    seconds = float(seconds)
    if seconds != seconds or seconds == float("inf"):
        return "unknown"
    for unit, size in (("years", 365.25 * 86400), ("days", 86400), ("h", 3600), ("min", 60)):
        if seconds >= 2 * size if unit in ("years", "days") else seconds >= size:
            return f"{seconds / size:.2g} {unit}"
    return f"{seconds:.2g} s"


def _stamp() -> str:
    return time.strftime("%H:%M:%S")


def announce(text, stream=None) -> None:
    """Print ``HH:MM:SS estimate: <text>`` on ``stream`` (default stderr): the estimate of work
    about to start, so that a log says what was expected before anything runs."""
    stream = sys.stderr if stream is None else stream
    print(f"{_stamp()} estimate: {text}", file=stream, flush=True)


def _interactive(stream) -> bool:
    """A stream a bar can be redrawn on: a terminal, or the output of a Jupyter kernel."""
    try:
        if stream.isatty():
            return True
    except (AttributeError, ValueError):
        return False
    return _in_jupyter_kernel() and stream in (sys.stderr, sys.stdout)


def _in_jupyter_kernel() -> bool:
    """This process is a running Jupyter kernel (not merely one that imported ``ipykernel``, as a
    notebook runner does)."""
    if "ipykernel" not in sys.modules or "IPython" not in sys.modules:
        return False
    try:
        shell = sys.modules["IPython"].get_ipython()
    except Exception:  # an IPython without a shell
        return False
    return getattr(shell, "kernel", None) is not None


class NoProgress:
    """The progress of a run that shows none: every call does nothing (the tqdm methods used here)."""

    n = 0

    def update(self, n=1):
        pass

    def set_postfix_str(self, text=""):
        pass

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _rate(per_second) -> str:
    """A rate as tqdm writes it: three significant digits and a k/M/G prefix (``5.2M``)."""
    for prefix, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if per_second >= scale:
            return f"{per_second / scale:.3g}{prefix}"
    return f"{per_second:.3g}"


class LineProgress(NoProgress):
    """Progress as plain timestamped lines (a log): ``HH:MM:SS desc: n/total unit (pct), rate,
    elapsed, ETA``.

    The ETA is the remaining units at the mean rate of the units done by this run (units done
    before it, ``initial``, such as cells already on disk, do not count towards the rate).
    """

    def __init__(self, total, *, desc="", unit="it", initial=0, stream=None, interval=LINE_INTERVAL_S):
        self.total, self.desc, self.unit = total, desc, unit
        self.n = self.initial = initial
        self.stream = sys.stderr if stream is None else stream
        self.interval = float(interval)
        self.start = time.perf_counter()
        self.last = None
        self.postfix = ""
        self.closed = False

    def line(self) -> str:
        """The current progress line (without the time stamp).

        Work reported in parts of a unit (a share of a cell's blocks) is shown in whole units done
        (``416/40000 cells``, never ``416.7``) while its percentage and ETA use the exact amount;
        work within a rounding error of the total reads as done (no ``ETA 3.2e-15 s``), and times
        under a second read to a tenth of one (``0.4 s``, ``0.0 s``).
        """
        elapsed = time.perf_counter() - self.start
        finished = bool(self.total) and self.n >= self.total * (1.0 - _DONE_TOLERANCE)
        shown = self.total if finished else self.n
        whole = self.total is None or float(self.total).is_integer()
        count = _amount(math.floor(shown + 1e-9) if whole else shown)
        done = f"{count}/{_amount(self.total)} {self.unit}" if self.total else f"{count} {self.unit}"
        if self.total:
            done += f" ({math.floor(100 * min(shown / self.total, 1.0)):.0f}%)"  # 100% only when done
        own = self.n - self.initial
        if finished:
            eta = "done"
        elif self.total and own > 0:
            eta = "ETA " + _clock(elapsed / own * (self.total - self.n))
        else:
            eta = "ETA unknown"
        postfix = f" [{self.postfix}]" if self.postfix else ""
        rate = f", {_rate(own / elapsed)}{self.unit}/s" if own > 0 and elapsed > 0 else ""
        return f"{self.desc}: {done}{postfix}{rate}, {_clock(elapsed)} elapsed, {eta}"

    def _write(self):
        # one write of the whole line: a Ctrl-C between the text and its newline would leave the
        # command's last message glued to this line
        self.stream.write(f"{_stamp()} {self.line()}\n")
        self.stream.flush()
        self.last, self.written = time.perf_counter(), self.n

    def update(self, n=1):
        self.n += n
        if self.last is None or time.perf_counter() - self.last >= self.interval:
            self._write()

    def set_postfix_str(self, text=""):
        self.postfix = str(text)

    def close(self):
        if not self.closed:
            self.closed = True
            # a run that never advanced writes nothing at its end either, nor one whose last line said it all
            if self.last is not None and self.n != self.written:
                self._write()


def _clock(seconds) -> str:
    """An elapsed time or an ETA: :func:`format_seconds`, to a tenth of a second below one second."""
    return f"{seconds:.1f} s" if 0.0 <= seconds < 1.0 else format_seconds(seconds)


def _amount(value) -> str:
    return f"{value:.0f}" if float(value).is_integer() else f"{value:.1f}"


def progress_bar(total, *, desc="", unit="it", initial=0, enabled=True, stream=None, leave=True, position=None):
    """The progress reporter of a long loop: ``update(n)``, ``set_postfix_str``, ``close``, a context manager.

    Parameters
    ----------
    total : float
        Units of the whole work (cells, layers, steps, ...).
    desc, unit : str
        What is done, and its unit, for the display.
    initial : float
        Units already done before this run (resumed work).
    enabled : bool
        False: a :class:`NoProgress` that shows nothing.
    stream : file, optional
        Default stderr. A terminal (or a Jupyter kernel) gets a tqdm bar, anything else
        :class:`LineProgress` lines.
    leave, position
        As tqdm's, for nested bars on a terminal.
    """
    if not enabled:
        return NoProgress()
    stream = sys.stderr if stream is None else stream
    if _interactive(stream):
        from tqdm.auto import tqdm

        return tqdm(total=total, desc=desc, unit=unit, initial=initial, file=stream, leave=leave,
                    position=position, dynamic_ncols=True)
    return LineProgress(total, desc=desc, unit=unit, initial=initial, stream=stream)
