"""The estimator against the clock at tiny sizes: benchmarks/bench_estimates.py's :func:`measure` on a
command whose work is estimated at a few seconds, and the compile estimate's view of numba's cache.

This checks the estimate, not the speed: the bound is on the ratio of measured to estimated time of
the same run on the same (possibly loaded) machine. The estimate is timed on this machine when the
command starts (the kernel's speed, read back from disk for a day), so load that stays the same
cancels; what does not cancel is load that changes between the timing and the run (other test
workers starting and stopping: a factor of 2 on two cores) and, in ``wall - floor``, the noise of
the separately timed import floor (about 0.3 s of a few seconds). The goal of the benchmark is 2x;
the test allows 4x either way, the goal times the 2x that load changes alone can make.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
#: Allowed ratio of measured to estimated time, either way (see the module docstring).
RATIO_BOUND = 4.0


@pytest.fixture
def bench(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    import bench_estimates

    return bench_estimates


def test_the_estimate_line_parser(bench):
    text = ("12:00:01 estimate: compiling the theory's engine (2 sweep(s): ...): about 40 s\n"
            "12:00:02 estimate: a diagram of 2 x 2 cells at depth 2: about 1.5 min, 1.19 KiB of memory\n"
            "12:00:03 diagram L=2: 4/4 cell (100%), done\n")
    assert bench.estimated_seconds(text) == pytest.approx(40 + 90)


def test_a_deep_propagation_takes_about_its_estimate(bench):
    """``propagate`` through enough blocks to be estimated at a few seconds (the kernel's timed speed
    times the blocks): the measured work, import floor subtracted, within RATIO_BOUND of it."""
    floor = bench.import_floor()
    run = bench.measure(["propagate", "--depth", "3000000", "--beta", "0.5"], floor=floor)
    assert run["returncode"] == 0, run["stderr_tail"]
    assert run["estimate_s"] >= 1.0, run  # a size whose estimate is not lost in the floor's noise
    assert 1 / RATIO_BOUND <= run["ratio"] <= RATIO_BOUND, run


def test_the_compile_estimate_sees_an_empty_cache(tmp_path):
    """On an empty numba cache every sweep of the engine is to be compiled (and counted by the compile
    estimate); in this process, after a propagation, the sweep it ran is not."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    code = "from remprop.theory.kernels import sweeps_to_compile; print(','.join(sweeps_to_compile()))"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["trajectories,final_states,min_alpha"]
    from remprop.theory import Architecture, propagate
    from remprop.theory.kernels import sweeps_to_compile

    propagate(Architecture(), beta=0.5, depth=3)
    assert "trajectories" not in sweeps_to_compile()
    with pytest.raises(ValueError, match="names must be among"):
        sweeps_to_compile(["nope"])
