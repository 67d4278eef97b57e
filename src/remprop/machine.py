"""The machine a computation runs on: its cores and how busy other processes keep them.

The work estimates (:mod:`remprop.theory.work_estimates`, the command line's) are a quiet machine's
seconds; :func:`machine_load` reads the load average and :meth:`MachineLoad.factor` says how many times
longer the work takes beside the other processes. The theory never reads the machine: the command line
applies the factor to its estimates (:func:`remprop.cli.output.estimate_announcer`), and an estimate
timed on the spot under the present load divides it out (``remprop.diagrams.diagnosis_work``).
Only the standard library is imported here.
"""
from __future__ import annotations

import os
from typing import NamedTuple

__all__ = ["MachineLoad", "machine_load"]


class MachineLoad(NamedTuple):
    """The load of the machine a command runs on (:func:`machine_load`).

    Attributes
    ----------
    load : float
        The 1-minute load average: the threads of other processes that were running or waiting for a
        core (0 where the system does not report it).
    cores : int
        The cores this process may run on.
    """

    load: float
    cores: int

    def factor(self, threads=1) -> float:
        r"""How many times longer work of ``threads`` threads takes than on a quiet machine.

        The cores are shared fairly among the ``n`` others' threads and the work's ``t``: each thread
        gets ``c / (n + t)`` of a core when there are more threads than the ``c`` cores, and the work,
        which on a quiet machine keeps ``min(t, c)`` cores busy, runs at ``t c / (n + t)`` of them:

        .. math:: f = \max\Big(1, \frac{\min(t, c)\,(n + t)}{t\, c}\Big)

        (``(n + t) / c`` for ``t <= c``: ``(8 + 2) / 2 = 5`` for two threads at load 8 on two cores,
        4.5 for one thread; 1 on a quiet machine, also for more threads than cores). Where the kernel
        shares the cores among sessions before threads (Linux's autogroup), the load of a few sessions of
        many threads slows the work less: measured, 2-3x less at load 10 from about five sessions.
        """
        threads = max(1, int(threads))
        cores = max(1, int(self.cores))
        return max(1.0, min(threads, cores) * (max(0.0, float(self.load)) + threads) / (threads * cores))

    def describe(self) -> str:
        """``"machine load 6.1 on 2 cores"``."""
        return f"machine load {self.load:.3g} on {self.cores} core{'s' if self.cores != 1 else ''}"


def machine_load() -> MachineLoad:
    """The machine's load now: ``os.getloadavg()``'s 1-minute average (0 on systems without it) and the
    cores this process may use (``os.sched_getaffinity``, else ``os.cpu_count()``)."""
    try:
        load = float(os.getloadavg()[0])
    except (AttributeError, OSError):  # no load average on this system (Windows): read as quiet
        load = 0.0
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return MachineLoad(load, max(1, cores))
