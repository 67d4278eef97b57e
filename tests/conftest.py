"""How the suite is shared among pytest-xdist workers (``make test``).

``make test`` runs ``--dist loadfile --no-loadscope-reorder``: a worker takes one unit of
work at a time, and the units are handed out in the order of the collection.

* **A test file is a unit** (xdist's ``loadfile``): its module fixtures (a simulation, a
  trained grid, the figures, the built distributions) are built once, on one worker.
* **The tests named in** :data:`INDEPENDENT` **are units of their own**: the notebook
  runs, say, each a minute or two and sharing nothing, run side by side instead of one
  after another on the worker that took their file. (xdist's ``loadgroup`` marks would say
  this per test, but they do not reach the scheduler under pytest 9, which no longer
  lets xdist rename a test; so the scheduler below reads this list.)
* **The files holding a test marked** ``slow`` **go first** (then the other files, the
  largest first, as xdist orders them by default), so that no minutes-long test starts
  last and finishes alone while the other workers are idle: longest first is the classic
  rule for sharing jobs among machines (Graham 1969, within 4/3 of the best schedule).


**Idle threads do not spin** (set here before any test module imports numpy, numba or torch,
and inherited by the notebook kernels and the commands the tests start). A thread that
finishes its share of a parallel operation spins by default, waiting for the next one; with
two workers on two cores, each running two-thread numba kernels, torch and BLAS, the spinning
threads take the cores from the other worker's work.

* OpenMP (numba's threading layer, torch): ``OMP_WAIT_POLICY=PASSIVE``, ``KMP_BLOCKTIME=0``,
  idle threads sleep (``remprop.OPENMP_DEFAULTS``, which ``import remprop`` sets in every process
  where they are unset, the suite's included). Measured, the seven notebooks on two workers:
  188 -> 124 CPU-seconds, 116 -> 91 s.
* OpenBLAS (numpy's BLAS): under xdist with more than one worker, one BLAS thread per worker
  (``OPENBLAS_NUM_THREADS=1``; the workers are the parallelism). Measured, five simulation
  files (96 tests) on two workers, OpenMP already passive: 131 -> 85 CPU-seconds, 79 -> 53 s.

``REMPROP_SUITE_THREAD_DEFAULTS=1`` leaves OpenBLAS's default (``benchmarks/bench_suite_threads.py``
times a part of the suite both ways in one run); OpenMP's is remprop's own there too (its import).

``make test`` compiles the common numba kernels once before pytest starts (``remprop
precompile``, the engine, in the Makefile), so that the workers load them from disk
instead of each compiling the same specialisations at once.

Without xdist (``-p no:xdist``, a plain ``pytest``) only the order of the files changes.
"""
from __future__ import annotations

import os

import pytest

from remprop import OPENMP_DEFAULTS  # light: numpy, numba and torch stay unloaded

_QUIET_THREADS = dict(OPENMP_DEFAULTS)
if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:  # set by xdist before this file loads
    _QUIET_THREADS["OPENBLAS_NUM_THREADS"] = "1"
if os.environ.get("REMPROP_SUITE_THREAD_DEFAULTS") != "1":
    for _name, _value in _QUIET_THREADS.items():
        os.environ.setdefault(_name, _value)

#: Tests (node-id prefixes) that share no fixture with the rest of their file: their own units of work.
INDEPENDENT = (
    "tests/test_notebooks.py::test_notebook_runs_without_error",
    "tests/test_docs_site.py::test_the_site_builds_without_warnings",
    "tests/test_reliability_work.py::test_deep_propagate_runs_in_bounded_memory_and_stops_on_ctrl_c",
    "tests/test_block_forms.py::test_check_succeeds_for_olmo2",
    "tests/test_qk_norm.py::test_check_runs_for_phi3_and_names_the_feature_for_gemma3",
    "tests/test_training.py::test_trainable_beats_both_collapsed_phases",
)


def _unit(nodeid: str) -> str:
    """The unit of work of a test: its own node id if it is independent, else its file."""
    return nodeid if nodeid.startswith(INDEPENDENT) else nodeid.split("::", 1)[0]


@pytest.hookimpl(optionalhook=True)  # a hook of xdist: absent under -p no:xdist
def pytest_xdist_make_scheduler(config, log):
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class Scheduling(LoadFileScheduling):
        """xdist's loadfile, with the :data:`INDEPENDENT` tests as units of their own."""

        def _split_scope(self, nodeid):
            return _unit(nodeid)

    return Scheduling(config, log)


def pytest_collection_modifyitems(config, items):
    units = {}
    for item in items:
        units.setdefault(_unit(item.nodeid), []).append(item)
    slow = {name for name, members in units.items() if any(m.get_closest_marker("slow") for m in members)}
    # the units holding a slow test first, then by size (xdist's default order); a stable sort
    # keeps the collection order otherwise, within a unit too (every worker sorts alike)
    order = sorted(units, key=lambda name: (name not in slow, -len(units[name])))
    items[:] = [item for name in order for item in units[name]]


@pytest.fixture(autouse=True)
def quiet_machine(monkeypatch):
    """The commands run in a test's process read the machine as quiet (a load average of 0): whether a
    command prints its estimate (at 5 s at the machine's load, :func:`remprop.cli.output.show_progress`)
    must not depend on what the other workers run meanwhile; nor is the machine probed
    (:func:`remprop.machine.probe_slowdowns` measures nothing, so the factor is the load average's). Tests of
    the load set their own ``os.getloadavg`` and probe; commands started as processes read the real ones."""
    import remprop.machine

    if hasattr(os, "getloadavg"):
        monkeypatch.setattr(os, "getloadavg", lambda: (0.0, 0.0, 0.0))
    monkeypatch.setattr(remprop.machine, "probe_slowdowns", lambda cores, **kwargs: ())
