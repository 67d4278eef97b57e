"""The estimator against the clock at tiny sizes: benchmarks/bench_estimates.py's :func:`measure` on a
command whose work is estimated at a few seconds, and the compile estimate's view of numba's cache.

This checks the estimate, not the speed: the bound is on the ratio of measured to estimated time of
the same run on the same (possibly loaded) machine. The estimate is a quiet machine's time multiplied by
the slowdown a short probe measures when the command starts (:mod:`remprop.machine`), so steady load
cancels; what does not cancel is load that changes during the run (other test workers starting and
stopping: a factor of 2 on two cores), the noise of a probe of milliseconds and, in ``wall - floor``, the
noise of the separately timed import floor (about 0.3 s of a few seconds). The goal of the benchmark is 2x; the
test allows 4x either way, the goal times the 2x that load changes alone can make.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import remprop.machine

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
#: Allowed ratio of measured to estimated time, either way (see the module docstring).
RATIO_BOUND = 4.0
#: The machine's probe as remprop defines it (tests/conftest.py's quiet_machine replaces it in every test).
_REAL_PROBE = remprop.machine.probe_slowdowns


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
    loaded = "12:00:04 estimate: the work: about 32 s (machine load 6 on 2 cores; quiet: 8 s) (--max-seconds 600)\n"
    assert bench.estimated_seconds(text + loaded) == pytest.approx(40 + 90 + 32)
    assert bench.estimated_seconds(text + loaded, quiet=True) == pytest.approx(40 + 90 + 8)


def test_a_deep_propagation_takes_about_its_estimate(bench):
    """``propagate`` through enough blocks to be estimated at a few seconds (the kernel's timed speed
    times the blocks): the measured work, import floor subtracted, within RATIO_BOUND of it."""
    floor = bench.import_floor()
    run = bench.measure(["propagate", "--depth", "3000000", "--beta", "0.5"], floor=floor)
    assert run["returncode"] == 0, run["stderr_tail"]
    assert run["estimate_s"] >= 1.0, run  # a size whose estimate is not lost in the floor's noise
    assert 1 / RATIO_BOUND <= run["ratio"] <= RATIO_BOUND, run


@pytest.mark.slow
def test_a_small_simulation_takes_about_its_estimate(bench, tmp_path):
    """``validate`` at the size of docs/getting_started.md (torch's import, the simulated stack at the rate
    :func:`~remprop.validation.training.work.simulation_flop_rate` measures, the theory, the figure): the
    measured work, import floor subtracted, within RATIO_BOUND of its estimate at the measured load."""
    pytest.importorskip("torch")
    floor = bench.import_floor()
    run = bench.measure(["validate", "--depth", "4", "--width", "128", "--sim-seq-len", "64", "--seeds", "2",
                         "--out", str(tmp_path)], floor=floor)
    assert run["returncode"] == 0, run["stderr_tail"]
    assert run["estimate_s"] >= 1.0, run
    assert 1 / RATIO_BOUND <= run["ratio"] <= RATIO_BOUND, run


@pytest.mark.slow
def test_a_small_training_takes_about_its_estimate(bench, tmp_path):
    """``train`` at a size whose training is a second (its estimate mostly the one-time costs: torch's import,
    the first optimiser's, the figure): the measured work, import floor subtracted, within RATIO_BOUND of its
    estimate at the measured load. Uncounted, those costs had made the run 4.2x its estimate."""
    pytest.importorskip("torch")
    floor = bench.import_floor()
    run = bench.measure(["train", "--alpha", "0.1", "--depth", "2", "--width", "32", "--seq-len", "32", "--steps",
                         "20", "--out", str(tmp_path)], floor=floor)
    assert run["returncode"] == 0, run["stderr_tail"]
    assert run["estimate_s"] >= 1.0, run
    assert 1 / RATIO_BOUND <= run["ratio"] <= RATIO_BOUND, run


def test_the_one_time_costs_count_what_this_process_has_not_imported():
    """:func:`~remprop.cli.commands.simulation.startup_seconds` in a fresh process counts importing torch, the
    first optimiser (torch._dynamo) and the figure; once they are imported, the figure alone."""
    pytest.importorskip("torch")
    code = ("import sys; from remprop.cli.commands import simulation as s; from remprop.cli.output import F"
            "IGURE_SECONDS as f\nbefore = s.startup_seconds(figure=True, optimiser=True)\nimport torch\n"
            "torch.optim.AdamW([torch.zeros(1, requires_grad=True)])\n"
            "print(before - (s.TORCH_IMPORT_SECONDS + s.OPTIMISER_IMPORT_SECONDS + f), "
            "s.startup_seconds(figure=True, optimiser=True) - f, s.startup_seconds(figure=False))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert [float(word) for word in done.stdout.split()] == [0.0, 0.0, 0.0]


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


# -- the machine's load ------------------------------------------------------------------------
def test_the_load_factor_shares_the_cores_among_all_threads():
    from remprop.machine import MachineLoad

    # (n + t) / c for t <= c threads: two threads at load 8 on two cores take 5x as long, one thread 4.5x
    assert MachineLoad(8.0, 2).factor(2) == pytest.approx(5.0)
    assert MachineLoad(8.0, 2).factor(1) == pytest.approx(4.5)
    assert MachineLoad(6.0, 4).factor(4) == pytest.approx(2.5)
    # a quiet machine, or one thread beside one other on two cores: no slower
    assert MachineLoad(0.0, 2).factor(2) == MachineLoad(1.0, 2).factor(1) == 1.0
    # more threads than cores: the quiet machine's oversubscription is not load; 2 x (8 + 4) / (4 x 2) = 3
    assert MachineLoad(0.0, 2).factor(4) == 1.0
    assert MachineLoad(8.0, 2).factor(4) == pytest.approx(3.0)
    assert MachineLoad(8.0, 2).describe() == "machine load 8 on 2 cores"


def test_the_free_cores_are_the_cores_less_the_load_and_one_when_the_probe_finds_none():
    from remprop.machine import BUSY_SLOWDOWN, MachineLoad

    assert MachineLoad(0.2, 2).free_cores() == 2
    assert MachineLoad(0.6, 2).free_cores() == MachineLoad(1.4, 2).free_cores() == 1  # one other thread's core
    assert MachineLoad(6.0, 2).free_cores() == MachineLoad(0.0, 1).free_cores() == 1  # at least one
    assert MachineLoad(2.0, 16).free_cores() == 14
    # a quiet load average, but the probe's thread got less than a core: none free
    assert MachineLoad(0.2, 2, ((1, BUSY_SLOWDOWN),)).free_cores() == 1
    assert MachineLoad(0.2, 2, ((1, 1.05),)).free_cores() == 2


def test_the_load_is_read_from_the_system_and_quiet_without_it(monkeypatch):
    from remprop.machine import machine_load

    monkeypatch.setattr(os, "getloadavg", lambda: (6.1, 3.0, 1.0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert machine_load(probe=False) == (6.1, 2, ())
    assert machine_load() == (6.1, 2, ())  # the suite's quiet_machine fixture: the probe measures nothing
    monkeypatch.delattr(os, "getloadavg")
    assert machine_load().load == 0.0


# -- the measured slowdown (remprop.machine.probe_slowdowns): its logic on a fake probe, no timing ---------------
class FakeProbe:
    """A probe whose threads each hash ``rate * cpu`` blocks in ``cpu`` CPU seconds over ``wall`` seconds."""

    def __init__(self, rate=1000.0, share=0.5, wall=0.02):
        self.rate, self.share, self.wall, self.calls = rate, share, wall, []

    def __call__(self, threads):
        self.calls.append(threads)
        cpu = self.share * self.wall
        return self.rate * cpu * threads, cpu * threads, self.wall * threads


@pytest.fixture
def probing(monkeypatch, tmp_path):
    """:mod:`remprop.machine` with its real :func:`probe_slowdowns` (the suite's fixture replaces it) on a
    cache folder of its own."""
    import remprop.machine

    monkeypatch.setenv("REMPROP_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(remprop.machine, "probe_slowdowns", _REAL_PROBE)
    return remprop.machine


def test_the_slowdown_is_the_quiet_rate_over_the_rate_got(probing):
    assert probing.slowdown(500, 1.0, 1000.0) == pytest.approx(2.0)  # half the blocks a quiet second hashes
    assert probing.slowdown(1200, 1.0, 1000.0) == 1.0  # faster than the best seen: no slower than quiet
    assert probing.slowdown(0, 1.0, 1000.0) == probing.slowdown(10, 0.0, 1000.0) == 1.0  # nothing measured


def test_the_probe_reads_the_quiet_rate_from_cpu_time_and_keeps_it(probing):
    # a thread given half a core: 2x slower, on the rate its own CPU time says (no quiet run needed)
    fake = FakeProbe(rate=1000.0, share=0.5)
    assert probing.probe_slowdowns(2, now=100.0, probe=fake) == ((1, pytest.approx(2.0)),)
    assert fake.calls == [1]  # one thread, whatever the cores
    # within PROBE_CACHE_SECONDS the last probe is reused, not probed again
    again = FakeProbe(share=0.25)
    assert probing.probe_slowdowns(2, now=100.0 + probing.PROBE_CACHE_SECONDS - 1, probe=again)[0][1] == \
        pytest.approx(2.0)
    assert again.calls == []
    # later: probed again; a slower CPU rate (contention that CPU time shows too) is measured against the best
    # rate kept, 1000: a quarter of a core at 800 blocks per CPU second is 5x slower
    later = FakeProbe(rate=800.0, share=0.25)
    assert probing.probe_slowdowns(2, now=200.0, probe=later) == ((1, pytest.approx(5.0)),)
    assert later.calls == [1]
    # a probe from the future (a clock set back), or taken with another core count, is not reused
    for cores, now in ((2, 150.0), (4, 201.0)):
        fresh = FakeProbe(share=1.0)
        assert probing.probe_slowdowns(cores, now=now, probe=fresh) == ((1, 1.0),)
        assert fresh.calls == [1]
    kept = json.loads((Path(os.environ["REMPROP_CACHE_DIR"]) / probing.PROBE_FILE).read_text())
    assert kept["quiet_rates"] == {"1": 1000.0}


def test_a_probe_of_another_host_or_an_unwritable_cache_is_not_an_error(probing, monkeypatch, tmp_path):
    probing.probe_slowdowns(1, now=0.0, probe=FakeProbe(rate=1e6, share=1.0))
    monkeypatch.setattr(probing.platform, "node", lambda: "another-machine")
    fake = FakeProbe(rate=1000.0, share=0.5)  # its quiet rate is its own, not the other host's 1e6
    assert probing.probe_slowdowns(1, now=1.0, probe=fake) == ((1, pytest.approx(2.0)),)
    assert fake.calls == [1]
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("REMPROP_CACHE_DIR", str(blocker))
    assert probing.probe_slowdowns(1, now=2.0, probe=FakeProbe(share=0.5)) == ((1, pytest.approx(2.0)),)


def test_the_measured_factor_replaces_the_load_average(probing):
    from remprop.machine import MachineLoad

    measured = MachineLoad(10.0, 4, ((1, 1.5), (4, 3.0)))  # the load average alone would say (10 + 4) / 4
    assert measured.factor(1) == 1.5 and measured.factor(4) == measured.factor(16) == 3.0
    assert measured.factor(2) == pytest.approx(2.0)  # linear between the thread counts probed
    assert MachineLoad(10.0, 2, ((1, 0.9), (2, 0.8))).factor(2) == 1.0  # never faster than quiet
    assert measured.describe() == "machine load 10 on 4 cores, measured 1.5-3x slower"
    assert MachineLoad(3.0, 1, ((1, 2.04),)).describe() == "machine load 3 on 1 core, measured 2x slower"
    assert MachineLoad(10.0, 4).factor(4) == pytest.approx(3.5)  # nothing measured: the load average's
    one = MachineLoad(10.0, 2, ((1, 2.5),))  # what probe_slowdowns measures: one thread's, for any count
    assert one.factor(1) == one.factor(2) == 2.5
    assert one.describe() == "machine load 10 on 2 cores, measured 2.5x slower"


def test_the_real_probe_runs_its_threads_for_their_time(probing):
    blocks, cpu, wall = probing.probe_threads(2, seconds=0.005)
    assert blocks >= 2 and cpu > 0 and wall >= 2 * 0.005  # each thread hashes until its 5 ms are up
    load = probing.machine_load()
    assert [threads for threads, _ in load.slowdowns] == [1]
    assert all(value >= 1.0 for _, value in load.slowdowns)
    assert (Path(os.environ["REMPROP_CACHE_DIR"]) / probing.PROBE_FILE).is_file()


def _announced(capsys, monkeypatch, load, seconds, **args):
    """The estimate line of a command (``precompile``: no engine sweeps to read) estimated at ``seconds`` on a
    quiet machine, at a load average of ``load`` on two cores, and the command's ``args``."""
    import argparse

    import numba

    from remprop.cli.limits import check_work
    from remprop.cli.options import work_limits

    monkeypatch.setattr(os, "getloadavg", lambda: (load, 0.0, 0.0))
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    monkeypatch.setattr(numba, "get_num_threads", lambda: 2)
    namespace = argparse.Namespace(command="precompile", progress=None, **args)
    check_work("the work", seconds=seconds, **work_limits(namespace))
    return capsys.readouterr().err, namespace


def test_the_estimate_line_gives_the_time_at_the_machines_load(capsys, monkeypatch):
    # 8 s of two-thread work at load 6 on two cores: (6 + 2) / 2 = 4 times as long, and the line says why
    err, args = _announced(capsys, monkeypatch, 6.0, 8.0, max_seconds=600.0)
    assert "estimate: the work: about 32 s (machine load 6 on 2 cores; quiet: 8 s) (--max-seconds 600)" in err
    assert args.estimated_seconds == pytest.approx(32.0)
    # 3 s quiet: silent on a quiet machine, shown once the load makes it 5 s or more
    err, args = _announced(capsys, monkeypatch, 0.0, 3.0, max_seconds=600.0)
    assert err == "" and args.estimated_seconds == pytest.approx(3.0)
    err, _ = _announced(capsys, monkeypatch, 2.0, 3.0, max_seconds=600.0)
    assert "about 6 s (machine load 2 on 2 cores; quiet: 3 s)" in err


def test_the_limit_reads_the_quiet_estimate(capsys, monkeypatch):
    """A command is run or refused alike whatever the load: 8 s quiet under a limit of 10 s runs at load
    100 (its line says 51 x 8 s = 6.8 min), 12 s quiet is refused on a quiet machine."""
    err, _ = _announced(capsys, monkeypatch, 100.0, 8.0, max_seconds=10.0)
    assert "about 6.8 min (machine load 100 on 2 cores; quiet: 8 s) (--max-seconds 10)" in err
    with pytest.raises(ValueError, match="would take about 12 s"):
        _announced(capsys, monkeypatch, 0.0, 12.0, max_seconds=10.0)


def test_the_load_is_read_once_a_command(capsys, monkeypatch):
    from remprop.cli.output import command_load

    _, args = _announced(capsys, monkeypatch, 6.0, 8.0)
    monkeypatch.setattr(os, "getloadavg", lambda: (50.0, 0.0, 0.0))
    assert command_load(args).load == 6.0
