"""The limits on a command's estimated work (``--max-seconds``, ``--max-memory``) and the machine's load.

A command estimates its time and memory first (:mod:`remprop.theory.work_estimates`:
the kernels' calibrated costs added up, the arrays counted) and :func:`check_work` refuses it
above the limits, one line with the estimate (exit status 2). The rule and its defaults
have one home, :mod:`remprop.theory.work_limits`, shared with the library functions that
take ``max_seconds`` / ``max_memory``: :data:`MAX_SECONDS` and :data:`MAX_BYTES` are the
defaults of the two options (:func:`remprop.cli.options.add_work_limit_options`).

The estimates are the work's seconds on a quiet machine. Other processes on the cores slow it down:
:func:`remprop.machine.machine_load` measures the load once per command and
:meth:`~remprop.machine.MachineLoad.factor` says by how much,
which the estimate line prints (:func:`remprop.cli.output.estimate_announcer`). The limits compare the
quiet machine's estimate, so that a command is run or refused the same way whatever the load.
"""
from __future__ import annotations

from remprop.theory.work_limits import MAX_BYTES, MAX_SECONDS, check_work, format_bytes, format_seconds

__all__ = ["MAX_SECONDS", "MAX_BYTES", "check_work", "format_seconds", "format_bytes"]
