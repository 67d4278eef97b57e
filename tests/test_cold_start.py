"""Cold starts (issues 27 and 43): ``remprop precompile`` (the engine, once, into the user cache folder).

The speed itself is measured by benchmarks/bench_cold_start.py; these tests check the
mechanisms: a precompiled command compiles nothing on its first call, its compiled code lies in
``$REMPROP_CACHE_DIR`` (:mod:`remprop.cache`), and the work estimates time nothing.
"""
from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from remprop.cache import numba_cache_directory
from remprop.cli.commands import precompile
from remprop.theory import Architecture, work_estimates
from cli_checks import assert_one_line, run_cli

#: Counts numba compilations while a ``remprop`` command line runs in this process.
COUNT_COMPILES = """
import sys
from numba.core import event
compiled = []
class Listener(event.Listener):
    def on_start(self, data):
        pass
    def on_end(self, data):
        compiled.append(data.data["dispatcher"].py_func.__qualname__)
event.register("numba:compile", Listener())
from remprop.cli.entry import main
status = main(sys.argv[1:])
print("COMPILED", len(compiled), sorted(set(compiled))[:5])
sys.exit(status)
"""

#: A specialisation no other test compiles (no LN, tanh MLP, gain-controlled attention), kept small.
TINY = ("propagate", "--depth", "3", "--beta", "0.5", "--norm", "none", "--activation", "tanh",
        "--attention", "gain-controlled")


def compiles(argv, env):
    """Number of numba compilations of a fresh process running ``remprop argv``."""
    done = subprocess.run([sys.executable, "-c", COUNT_COMPILES, *argv], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    line = next(line for line in done.stdout.splitlines() if line.startswith("COMPILED"))
    return int(line.split()[1]), line


def test_a_precompiled_command_compiles_nothing_on_its_first_call(tmp_path, monkeypatch):
    """After ``precompile_parts`` of a part, a fresh process running the part's command line
    loads every kernel from disk: zero compilations (a cold one compiles dozens), whether remprop
    is loaded from its sources or from bytecode: the engine's sweeps are module-level functions without
    a closure, so numba's key is their file's text and bytecode (the closures' pickled cells had been
    part of it, and ``precompile`` wrote the package's bytecode first for them). Here the parts run from the sources only (``PYTHONDONTWRITEBYTECODE``, an empty
    ``PYTHONPYCACHEPREFIX``); the command then runs from the sources writing its bytecode into a
    second prefix, and again from that bytecode. The compiled engine lies in ``numba/`` of
    ``$REMPROP_CACHE_DIR`` (the one cache folder, :mod:`remprop.cache`)."""
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    monkeypatch.setenv("REMPROP_CACHE_DIR", str(tmp_path / "remprop"))
    env = dict(os.environ)
    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setenv("PYTHONPYCACHEPREFIX", str(tmp_path / "no-bytecode"))
    monkeypatch.setitem(precompile.PARTS, "tiny", (TINY,))
    results = precompile.precompile_parts(["tiny"], jobs=1, log=None)
    assert results["tiny"][1] == 0, results
    assert not (tmp_path / "no-bytecode").exists()  # the parts ran from the sources
    engine_index = [path.name for path in (tmp_path / "remprop" / "numba").rglob("*.nbi")
                    if path.name.startswith("_engine.")]
    # the sweep the command ran (propagate: trajectories), kept in the cache folder
    assert any(name.startswith("_engine.trajectories-") for name in engine_index), engine_index
    bytecode_env = {name: value for name, value in env.items() if name != "PYTHONDONTWRITEBYTECODE"}
    bytecode_env["PYTHONPYCACHEPREFIX"] = str(tmp_path / "bytecode")
    count, line = compiles(TINY, bytecode_env)  # from the sources, writing the bytecode
    assert count == 0, line
    assert list((tmp_path / "bytecode").rglob("_engine.*.pyc")), "the first run wrote no bytecode"
    count, line = compiles(TINY, bytecode_env)  # from that bytecode
    assert count == 0, line
    cold_env = dict(env, REMPROP_CACHE_DIR=str(tmp_path / "remprop-cold"))
    cold, line = compiles(TINY, cold_env)
    assert cold > 10, line  # the same call on an empty cache compiles: the zeros above are the cache's


def test_precompile_parts_reports_a_failing_command_line(monkeypatch):
    """A command line that fails ends its part with its exit status and says so in the log."""
    import io

    monkeypatch.setitem(precompile.PARTS, "broken", (("propagate", "--depth", "0"),))
    log = io.StringIO()
    results = precompile.precompile_parts(["broken"], jobs=1, log=log)
    assert results["broken"][1] == 2
    assert "broken: failed: remprop propagate --depth" in log.getvalue() and "depth" in log.getvalue()
    with pytest.raises(ValueError, match="parts must be among"):
        precompile.precompile_parts(["nope"])


def test_every_part_runs_command_lines_the_parser_takes_on_shipped_models():
    """A part's command lines run only in a background process (``make run``) whose log nobody
    reads: each parses, and each ``check`` names a shipped model configuration; the default parts
    are parts."""
    from remprop.cli.parser import build_parser
    from remprop.theory import shipped_configs

    parser = build_parser()
    for part, lines in precompile.PARTS.items():
        for line in lines:
            words = [word.format(out="out") for word in line]
            assert parser.parse_args(words).command == words[0], (part, words)
            if words[0] == "check":
                assert words[1] in shipped_configs(), (part, words)
    assert set(precompile.DEFAULT_PARTS) <= set(precompile.PARTS)
    # the engine part reaches the three sweeps: trajectories (propagate), the bisection (min-alpha)
    # and final states (diagram), the last at finite T (its table)
    engine = {line[0]: line for line in precompile.PARTS["engine"]}
    assert set(engine) == {"propagate", "min-alpha", "diagram"} and "--seq-len" in engine["diagram"]


def test_precompile_refuses_an_unknown_part_in_one_line(capsys):
    code, out, err = run_cli(capsys, "precompile", "engine", "nope")
    assert_one_line(err, "PART", "nope", code=code)


def test_work_estimates_time_nothing_and_write_nothing(tmp_path, monkeypatch):
    """Before: the first estimate of a process timed the kernel (about 0.5 s) and kept the timing as
    JSON in the cache folder. After: arithmetic on the lowered program with the constants of
    benchmarks/bench_work_estimates.py: no clock is read, no file written, and the costs follow
    the instructions (a quadrature activation costs more than ReLU's closed form, a finite-T
    attention more than the asymptotic one; a round is one batch per thread)."""
    import numba

    from remprop.theory.kernels import BATCH

    monkeypatch.setenv("REMPROP_CACHE_DIR", str(tmp_path))

    def no_clock():
        raise AssertionError("the estimate read the clock")

    relu = Architecture(norm="post", activation="relu")
    monkeypatch.setattr(time, "perf_counter", no_clock)
    monkeypatch.setattr(time, "time", no_clock)
    speed = work_estimates.kernel_speed(relu)
    gelu = work_estimates.kernel_speed(relu.replace(activation="gelu"))
    finite = work_estimates.kernel_speed(relu.replace(seq_len=128))
    monkeypatch.undo()
    assert list(tmp_path.iterdir()) == []
    assert gelu.round_seconds > 10 * speed.round_seconds and finite.round_seconds > speed.round_seconds
    assert speed.cells_per_round == BATCH * numba.get_num_threads() and speed.call_seconds == work_estimates.CALL_SECONDS
    # kernel_seconds: calls x call + depth x rounds x round
    cells = 3 * speed.cells_per_round
    assert work_estimates.kernel_seconds(relu, cells, 100, calls=2) == pytest.approx(
        2 * speed.call_seconds + 100 * 3 * speed.round_seconds, rel=1e-12)


def test_every_instruction_of_the_built_in_architectures_has_a_calibrated_cost():
    """A kind without a constant would be costed at the dearest of its class: every instruction
    the built-in choices lower to is calibrated by the benchmark's set of architectures."""
    from remprop.theory.activations import BUILTIN_ACTIVATIONS
    from remprop.theory.kernels import kernels_for
    from remprop.theory.propagation import kernel_tree

    archs = [Architecture(norm=norm, activation=activation, mlp=mlp) for norm in ("pre", "post", "none")
             for activation in BUILTIN_ACTIVATIONS for mlp in ("dense", "gated")]
    archs += [Architecture(seq_len=128, attention="gain-controlled"), Architecture(positions="rope", head_dim=64, seq_len=256),
              Architecture(qk_norm=True, qk_norm_dim=64, head_dim=64, seq_len=128)]
    kinds = {kind for arch in archs for kind in work_estimates.instruction_kinds(kernels_for(kernel_tree(arch)).program)}
    assert kinds <= set(work_estimates.INSTRUCTION_SECONDS), kinds - set(work_estimates.INSTRUCTION_SECONDS)


def test_background_precompile_returns_at_once_and_logs_each_part(tmp_path):
    """``--background`` returns before the part is compiled (it prints where the log goes) and a
    detached process compiles it, writing one line per part to that log. The kernels come from
    the suite's shared cache (``make test`` precompiled them; ``NUMBA_CACHE_DIR`` keeps it while
    the log goes to an empty ``REMPROP_CACHE_DIR``), so the part takes seconds."""
    env = dict(os.environ, REMPROP_CACHE_DIR=str(tmp_path), NUMBA_CACHE_DIR=str(numba_cache_directory()))
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "remprop", "precompile", "engine", "--background", "--jobs", "1"],
                          env=env, capture_output=True, text=True, timeout=120)
    returned = time.perf_counter() - start
    log = tmp_path / "precompile.log"
    assert done.returncode == 0 and str(log) in done.stdout, done.stderr
    deadline = time.time() + 600
    while "engine: " not in (log.read_text() if log.exists() else "") and time.time() < deadline:
        time.sleep(1)
    text = log.read_text()
    assert "remprop precompile: engine: done in" in text, text
    seconds = float(text.split("done in")[1].split()[0])
    assert returned < seconds, (returned, seconds)  # it did not wait for the part


def test_precompile_says_its_estimate_before_it_compiles(capsys, monkeypatch):
    """A foreground ``remprop precompile`` on a cold cache takes a minute on busy cores: its estimate line comes
    first (the parts' command lines are not run here: their compiles are timed in the tests above)."""
    ran = []
    monkeypatch.setattr(precompile, "precompile_parts",
                        lambda parts, jobs=None, threads=None: ran.append(parts) or {part: (0.0, 0) for part in parts})
    monkeypatch.setattr("remprop.theory.kernels.sweeps_to_compile",
                        lambda names=None: ["trajectories", "final_states", "min_alpha"])
    code, out, err = run_cli(capsys, "precompile")
    assert code == 0 and ran == [["engine"]]
    from remprop.cli.output import COMPILE_SECONDS_PER_SWEEP

    seconds = precompile.PART_SECONDS["engine"] + 3 * COMPILE_SECONDS_PER_SWEEP  # a quiet machine: tests/conftest.py
    assert ("estimate: precompile engine (3 sweep(s) of the engine to compile: trajectories, final_states, "
            f"min_alpha): about {seconds:.0f} s") in err, err
    # with the engine on disk the part is a few seconds: no line
    monkeypatch.setattr("remprop.theory.kernels.sweeps_to_compile", lambda names=None: [])
    code, out, err = run_cli(capsys, "precompile")
    assert code == 0 and "estimate" not in err
