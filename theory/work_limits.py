"""The limits on estimated work, for the command line and the library alike.

A computation estimates its time and memory first (:mod:`remprop.theory.work_estimates`: the
kernels' calibrated costs added up, the arrays counted) and :func:`check_work` refuses it above
the limits with one ``ValueError`` holding the estimate. The command line's ``--max-seconds``
and ``--max-memory`` default to :data:`MAX_SECONDS` and :data:`MAX_BYTES`
(:mod:`remprop.cli.limits`); the library functions whose work grows without bound in their
arguments (:func:`~remprop.theory.learning_rate_ceiling`'s depth, ``remprop.check``'s
``max_depth``) take the same defaults as their ``max_seconds`` / ``max_memory`` parameters:
raise them (``math.inf``: no limit) to run such work anyway.
"""
from __future__ import annotations

import numbers

from remprop.progress import format_seconds

__all__ = ["MAX_SECONDS", "MAX_BYTES", "check_work", "check_limit", "format_seconds", "format_bytes"]

#: Default time limit (``--max-seconds``, ``max_seconds=``): longer estimates are refused.
MAX_SECONDS = 600.0
#: Default memory limit (``--max-memory``, ``max_memory=``; 4 GiB): larger estimates are refused.
MAX_BYTES = 4 * 2 ** 30


def check_work(task, *, seconds=None, nbytes=None, max_seconds=MAX_SECONDS, max_memory=MAX_BYTES, announce=None):
    """Refuse work estimated above the limits: ``ValueError`` naming the limit, with the estimate.

    Parameters
    ----------
    task : str
        What would run, for the message (``"min-alpha at depth 1000000000"``).
    seconds, nbytes : float, optional
        The estimates (:func:`~remprop.theory.work_estimates.kernel_seconds`,
        :func:`~remprop.theory.work_estimates.diagram_bytes`, ...); None: not checked.
    max_seconds, max_memory : float
        The limits (defaults :data:`MAX_SECONDS`, :data:`MAX_BYTES`), > 0 (``inf``: none).
    announce : callable, optional
        ``announce(task, seconds, nbytes)`` once the estimate is within the limits: the
        command's estimate line (:func:`remprop.cli.output.estimate_announcer`).

    Raises
    ------
    ValueError
        ``"max_seconds: <task> would take about 3.2 h (estimate), more than the limit of
        10 min; raise the limit to run it anyway"``, and alike for ``max_memory``.
    """
    max_seconds = check_limit("max_seconds", max_seconds)
    max_memory = check_limit("max_memory", max_memory)
    if seconds is not None and seconds > max_seconds:
        raise ValueError(f"max_seconds: {task} would take about {format_seconds(seconds)} (estimate), more "
                         f"than the limit of {format_seconds(max_seconds)}; raise the limit "
                         "to run it anyway")
    if nbytes is not None and nbytes > max_memory:
        raise ValueError(f"max_memory: {task} would need about {format_bytes(nbytes)} of memory (estimate), "
                         f"more than the limit of {format_bytes(max_memory)}; raise the limit to run it anyway")
    if announce is not None:
        announce(task, seconds, nbytes)


def check_limit(name, value):
    """A limit: a real number > 0 (``inf``: no limit; bools refused)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0:
        raise ValueError(f"{name} must be a number > 0, got {value!r}")
    return float(value)


def format_bytes(nbytes) -> str:
    """``"300 MiB"``, ``"7.5 GiB"`` (powers of 1024)."""
    nbytes = float(nbytes)
    for unit, size in (("TiB", 2 ** 40), ("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if nbytes >= size:
            return f"{nbytes / size:.3g} {unit}"
    return f"{nbytes:.0f} B"
