"""The machine a computation runs on: its cores and how busy other processes keep them.

The work estimates (:mod:`remprop.theory.work_estimates`, the command line's) are a quiet machine's
seconds; :func:`machine_load` says how many times longer work takes beside the other processes now
(:meth:`MachineLoad.factor`). The theory never reads the machine: the command line applies the factor to
its estimates (:func:`remprop.cli.output.estimate_announcer`), and an estimate timed on the spot under the
present load divides it out (``remprop.diagrams.diagnosis_work``).

The factor is measured, not read off the load average: :func:`probe_slowdowns` keeps one thread busy for
:data:`PROBE_SECONDS` and compares the work it got done with what it does per second of CPU time (the quiet
machine's speed; the best seen on this host is kept). The load
average counts threads, and where the kernel shares the cores among sessions before threads (Linux's
autogroup) a few sessions of many threads slow the work 2-3x less than their count says. The measured
slowdowns are kept for :data:`PROBE_CACHE_SECONDS` in remprop's cache folder (``machine-probe.json``,
:func:`remprop.cache.cache_directory`), so that commands started one after another probe once.
Only the standard library is imported here (and :mod:`remprop.cache`).
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import threading
import time
from typing import NamedTuple

__all__ = ["MachineLoad", "machine_load", "probe_slowdowns", "probe_threads", "slowdown", "PROBE_SECONDS",
           "PROBE_CACHE_SECONDS", "PROBE_FILE", "BUSY_SLOWDOWN"]

#: Wall seconds of the probe: long enough for the scheduler to share the cores among the runnable threads a
#: few times (its slices are a few milliseconds), short enough that the probe costs under 50 ms.
PROBE_SECONDS = 0.03
#: Seconds a measured slowdown is reused by later commands (:data:`PROBE_FILE`): a burst of commands probes
#: once; the load average's own memory is a minute.
PROBE_CACHE_SECONDS = 30.0
#: The file in remprop's cache folder that keeps the last probe and the quiet speeds.
PROBE_FILE = "machine-probe.json"
#: The probe's unit of work: hashing this block (``hashlib`` lets go of the GIL on blocks this large, so
#: the probe's threads run on as many cores as they are given).
_BLOCK = b"\x5a" * (1 << 16)
#: A one-thread probe slowed down this much or more (:func:`probe_slowdowns`) means that no core is free: the
#: thread got at most 4/5 of one (:meth:`MachineLoad.free_cores`).
BUSY_SLOWDOWN = 1.25


class MachineLoad(NamedTuple):
    """The load of the machine a command runs on (:func:`machine_load`).

    Attributes
    ----------
    load : float
        The 1-minute load average: the threads of other processes that were running or waiting for a
        core (0 where the system does not report it).
    cores : int
        The cores this process may run on.
    slowdowns : tuple
        ``((threads, slowdown), ...)`` measured, by increasing threads (:func:`probe_slowdowns` measures
        one thread: ``((1, f),)``); empty where nothing was measured (the factor then falls back to the
        load average).
    """

    load: float
    cores: int
    slowdowns: tuple = ()

    def factor(self, threads=1) -> float:
        r"""How many times longer work of ``threads`` threads takes than on a quiet machine.

        Measured (:attr:`slowdowns`): the slowdown of the probe with as many threads (at most one a core),
        interpolated linearly between the thread counts probed and the last one's beyond (one thread's
        for any count where only one thread was probed, :func:`probe_slowdowns`). Otherwise from the load average, the
        cores shared fairly among the ``n`` others' threads and the work's ``t``: each thread gets
        ``c / (n + t)`` of a core when there are more threads than the ``c`` cores, and the work, which on
        a quiet machine keeps ``min(t, c)`` cores busy, runs at ``t c / (n + t)`` of them:

        .. math:: f = \max\Big(1, \frac{\min(t, c)\,(n + t)}{t\, c}\Big)

        (``(n + t) / c`` for ``t <= c``: ``(8 + 2) / 2 = 5`` for two threads at load 8 on two cores,
        4.5 for one thread; 1 on a quiet machine, also for more threads than cores). That is an upper
        estimate: where the kernel shares the cores among sessions before threads (Linux's autogroup),
        the load of a few sessions of many threads slows the work less (measured: 2-3x less at load 10
        from about five sessions).
        """
        threads = max(1, int(threads))
        cores = max(1, int(self.cores))
        if self.slowdowns:
            return max(1.0, _interpolate(self.slowdowns, min(threads, cores)))
        return max(1.0, min(threads, cores) * (max(0.0, float(self.load)) + threads) / (threads * cores))

    def free_cores(self) -> int:
        """The cores other processes leave free, at least 1: the cores less the load average rounded (half a
        thread waiting on average counts as one), and 1 where the one-thread probe measured a slowdown of
        :data:`BUSY_SLOWDOWN` or more (a core free would have given it all of one). The default thread count
        of torch's simulations on the command line (``validate``, ``check --simulate``): on the shared two-core
        machine, beside the other processes, two torch threads ran ``check bert-48 --simulate``
        0.9-2.2x as long as one (benchmarks/bench_simulation_threads.py), as they wait for each other at every operation while
        another process holds a core."""
        cores = max(1, int(self.cores))
        free = cores - int(max(0.0, float(self.load)) + 0.5)
        if self.slowdowns and _interpolate(self.slowdowns, 1) >= BUSY_SLOWDOWN:
            free = min(free, 1)
        return max(1, min(cores, free))

    def describe(self) -> str:
        """``"machine load 6.1 on 2 cores"``, and what was measured: ``", measured 2.1x slower"`` (from
        the fewest to the most threads probed: ``", measured 1.2-2.1x slower"``)."""
        text = f"machine load {self.load:.3g} on {self.cores} core{'s' if self.cores != 1 else ''}"
        if self.slowdowns:
            low, high = (max(1.0, value) for value in (self.slowdowns[0][1], self.slowdowns[-1][1]))
            text += (f", measured {low:.2g}x slower" if f"{low:.2g}" == f"{high:.2g}"
                     else f", measured {low:.2g}-{high:.2g}x slower")
        return text


def _interpolate(points, x) -> float:
    points = sorted(points)
    if x <= points[0][0]:
        return float(points[0][1])
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return float(y0 + (y1 - y0) * (x - x0) / (x1 - x0))
    return float(points[-1][1])


def machine_load(probe=True) -> MachineLoad:
    """The machine's load now: ``os.getloadavg()``'s 1-minute average (0 on systems without it), the
    cores this process may use (``os.sched_getaffinity``, else ``os.cpu_count()``) and, with ``probe``, the
    slowdowns :func:`probe_slowdowns` measures (or reuses from the last ``PROBE_CACHE_SECONDS``)."""
    try:
        load = float(os.getloadavg()[0])
    except (AttributeError, OSError):  # no load average on this system (Windows): read as quiet
        load = 0.0
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    cores = max(1, cores)
    return MachineLoad(load, cores, probe_slowdowns(cores) if probe else ())


def probe_threads(threads, seconds=PROBE_SECONDS) -> tuple:
    """Keep ``threads`` threads hashing blocks for ``seconds`` of wall time each.

    Returns ``(blocks, cpu_seconds, wall_seconds)`` summed over the threads: the blocks hashed, the CPU
    time the threads were given (``time.thread_time``) and the wall time they ran.
    """
    results = [None] * threads
    start = threading.Barrier(threads)

    def work(k):
        digest = hashlib.sha256()
        start.wait()
        cpu0, wall0, blocks = time.thread_time(), time.perf_counter(), 0
        while True:
            digest.update(_BLOCK)
            blocks += 1
            now = time.perf_counter()
            if now - wall0 >= seconds:
                break
        results[k] = (blocks, time.thread_time() - cpu0, now - wall0)

    workers = [threading.Thread(target=work, args=(k,), daemon=True) for k in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    return tuple(sum(result[i] for result in results) for i in range(3))


def slowdown(blocks, wall_seconds, quiet_rate) -> float:
    """How many times slower than ``quiet_rate`` (blocks a thread hashes per second on a quiet machine)
    threads ran that hashed ``blocks`` in ``wall_seconds`` (summed over the threads); at least 1."""
    if not blocks > 0 or not wall_seconds > 0 or not quiet_rate > 0:
        return 1.0
    return max(1.0, quiet_rate * wall_seconds / blocks)


def _host() -> str:
    return f"{platform.node()}/{platform.machine()}/{platform.python_implementation()}"


def _read_probe(path) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            kept = json.load(handle)
        return kept if isinstance(kept, dict) and kept.get("host") == _host() else {}
    except (OSError, ValueError):
        return {}


def probe_slowdowns(cores, *, now=None, probe=None) -> tuple:
    """The slowdown of the commands' work beside the machine's other work now, ``((1, f),)``: a probe
    (``probe``, default :func:`probe_threads`) of one thread, the blocks it hashed per wall second against the
    quiet rate, the blocks it hashes per second of CPU time (:func:`slowdown`).

    One thread, also for work on every core: measured on the shared two-core machine at loads 4-7, the
    README's commands ran at 0.5-1.1 of their estimates at the one-thread probe's slowdown
    (benchmarks/bench_estimates.py; train and check --simulate aside) and a 400 x 400 diagram on two numba
    threads at 0.7-0.8, while a probe of two threads read 2x slower than they ran
    (their Python, imports and figures are one thread; where the kernel shares the cores among sessions, two
    threads of one session get each half of its share). On many cores all busy a thread's slowdown
    understates that of work on every core. The CPU time a thread is given does not depend on how long it
    waited for a core, so the quiet rate is measured even on a busy machine; the best rate seen on this host
    is kept. A probe taken in the last :data:`PROBE_CACHE_SECONDS` on this host with as many cores is reused
    (``now``: the time, default ``time.time()``).
    The file is :data:`PROBE_FILE` in :func:`remprop.cache.cache_directory`; a folder that cannot be
    written only means probing every time.
    """
    from remprop.cache import cache_directory, write_atomically

    now = time.time() if now is None else float(now)
    probe = probe_threads if probe is None else probe
    cores = max(1, int(cores))  # the cores the probe was taken with: another count probes again
    path = cache_directory() / PROBE_FILE
    kept = _read_probe(path)
    last = kept.get("last") or {}
    if (last.get("cores") == cores and isinstance(last.get("time"), (int, float))
            and 0 <= now - last["time"] <= PROBE_CACHE_SECONDS):
        try:
            return tuple((int(threads), float(value)) for threads, value in last["slowdowns"])
        except (TypeError, ValueError, KeyError):
            pass
    best = {str(k): float(v) for k, v in (kept.get("quiet_rates") or {}).items()
            if isinstance(v, (int, float)) and v > 0}
    slowdowns = []
    for threads in (1,):
        blocks, cpu, wall = probe(threads)
        rate = blocks / cpu if cpu > 0 else 0.0
        best[str(threads)] = max(best.get(str(threads), 0.0), rate)
        slowdowns.append((threads, slowdown(blocks, wall, best[str(threads)])))
    record = {"host": _host(), "quiet_rates": best,
              "last": {"time": now, "cores": cores, "slowdowns": [list(pair) for pair in slowdowns]}}
    write_atomically(path, lambda handle: handle.write(json.dumps(record).encode("utf-8")))
    return tuple(slowdowns)
