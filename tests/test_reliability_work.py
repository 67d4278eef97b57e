"""Issue 15, item 6: unbounded work is estimated up front, refused, streamed or drawn subsampled.

Before: ``remprop propagate --depth 1000000000`` allocated whole trajectories (7.5 GiB and
more: 23 GB resident after 120 s on the developer machine, no answer); ``remprop min-alpha
--depth 1000000000`` ran one compiled call for hours, with no progress and deaf to Ctrl-C;
``remprop diagram --beta 0.05:3:5000 --alpha 0:3:5000`` passed 4 GB while drawing 25
million cells; ``sweep`` and ``validate`` started simulations of any size.

After: the time (the kernels' calibrated costs) and the memory are estimated first and refused
above ``--max-seconds`` / ``--max-memory`` (exit 2, one line with the estimate); the
propagation keeps only the printed layers, advancing the kernels in segments (progress
and Ctrl-C between segments: exit 130, one line saying where it stopped); a long alpha*
search is bisected segment by segment with the kernel's own midpoints (the same answer);
the PNG draws at most 1000 x 1000 cells while the saved files keep the whole grid.
"""
from __future__ import annotations

import os
import re
import select
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from remprop.cli.limits import check_work
from remprop.diagrams import alpha_star, trainability_diagram
from remprop.theory import Architecture, propagate, propagate_at_layers, work_estimates
from remprop.theory.propagation import final_state_rows, pack_parameters
from remprop.theory.work_estimates import WorkInterrupted
from cli_checks import run_cli, assert_one_line  # noqa: E402


ARCHITECTURES = [dict(), dict(norm="pre", alpha_sa=1.2), dict(norm="none", sigma_b2=0.01),
                 dict(seq_len=16, heads=2, qk_scaling="head"), dict(attention="gain-controlled", norm="none")]


# -- case 1: the propagation is streamed ---------------------------------------------------
@pytest.mark.parametrize("fields", ARCHITECTURES, ids=["post", "pre-1.2", "none", "finite-T heads", "gain none"])
def test_sampled_layers_equal_the_whole_trajectory(fields):
    """propagate_at_layers equals propagate at the same layers, whatever the segments.

    The kernels resume a segment from the exact state (mantissas and carried exponent) the
    previous one ended with, so the agreement is to round-off: 1e-12 relative."""
    arch = Architecture(**fields)
    beta = np.array([0.3, 1.0, 2.5])
    whole = propagate(arch, beta, 90)
    layers = [0, 1, 2, 7, 8, 45, 89, 90]
    for segment in (None, 1, 6, 90, 1000):
        sampled = propagate_at_layers(arch, beta, layers, segment=segment)
        assert sampled.rho.shape == (3, len(layers)) and sampled.depth == 90
        for name in ("q", "p", "rho", "log2_q"):
            np.testing.assert_allclose(getattr(sampled, name), getattr(whole, name)[:, layers], rtol=1e-12, atol=0)
        np.testing.assert_allclose(sampled.beta_critical[:, 1:], whole.beta_critical[:, np.subtract(layers[1:], 1)],
                                   rtol=1e-12)
        smallest = np.fmin.accumulate(whole.beta_critical, axis=1)
        np.testing.assert_allclose(sampled.beta_critical_min[:, 1:], smallest[:, np.subtract(layers[1:], 1)],
                                   rtol=1e-12)
        np.testing.assert_allclose(sampled.beta_critical_first, whole.beta_critical[:, 0], rtol=1e-12)
        assert np.isnan(sampled.beta_critical[:, 0]).all() and np.isinf(sampled.beta_critical_min[:, 0]).all()


def test_sampled_layers_reject_bad_layers():
    for bad in ([], [-1, 3], [1.5], "abc", [[1, 2]], [True]):
        with pytest.raises(ValueError, match="layers"):
            propagate_at_layers(Architecture(), 0.5, bad)
    with pytest.raises(ValueError, match="segment"):
        propagate_at_layers(Architecture(), 0.5, [3], segment=0)


def test_interrupted_propagation_names_the_layer():
    """Ctrl-C between segments (here raised by the third progress call) names the layers finished."""
    calls = []

    def stop_at_third(steps):
        calls.append(steps)
        if len(calls) == 3:
            raise KeyboardInterrupt

    with pytest.raises(WorkInterrupted, match="interrupted at layer 30 of 100") as caught:
        propagate_at_layers(Architecture(), 0.5, [100], segment=10, progress=stop_at_third)
    assert isinstance(caught.value, KeyboardInterrupt) and (caught.value.done, caught.value.total) == (30, 100)


def _signal_state(pid) -> dict:
    """The blocked, ignored and caught signal masks of a process (Linux /proc), for a failure message."""
    with open(f"/proc/{pid}/status") as status:
        return {line.split(":")[0]: line.split()[1] for line in status if line.startswith(("SigBlk", "SigIgn", "SigCgt"))}


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads the peak memory from Linux's /proc")
def test_deep_propagate_runs_in_bounded_memory_and_stops_on_ctrl_c():
    """`propagate --depth 1e9` streams (peak memory far below one trajectory) and Ctrl-C exits 130.

    Before: 23 GB resident and still allocating after 120 s. The whole trajectory would be
    64 GB; the streamed run keeps 1001 layers: its peak is the interpreter, numba and
    NumPy (about 200 MB), checked against 1 GiB."""
    env = {k: v for k, v in os.environ.items() if k != "REMPROP_DEBUG"}

    def as_from_a_terminal():
        # the child starts as from a shell: SIGINT delivered and handled by default, whatever the
        # test process inherited or blocked (under pytest-xdist a worker's children were seen to
        # ignore it: three Ctrl-C, 20 s apart, left the run going)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    harness = _signal_state("self")
    process = subprocess.Popen([sys.executable, "-m", "remprop", "propagate", "--depth", "1000000000",
                                "--progress", "--max-seconds", "1e9"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                               preexec_fn=as_from_a_terminal)
    stderr, deadline = b"", time.monotonic() + 90
    try:
        # a rate ("5.2Mlayer/s", not the first "?layer/s") shows that segments are advancing
        while not re.search(rb"[0-9kMG]layer/s", stderr) and process.poll() is None and time.monotonic() < deadline:
            if select.select([process.stderr], [], [], 1.0)[0]:
                stderr += os.read(process.stderr.fileno(), 65536)
        assert re.search(rb"[0-9kMG]layer/s", stderr), stderr.decode()
        with open(f"/proc/{process.pid}/status") as status:
            peak_kib = next(int(line.split()[1]) for line in status if line.startswith("VmHWM"))
        assert peak_kib < 2 ** 20, f"peak resident memory {peak_kib} KiB"
        child = _signal_state(process.pid)
        process.send_signal(signal.SIGINT)
        try:
            out, rest = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"Ctrl-C did not stop the run in 60 s; signal state of the test process "
                                 f"{harness}, of the run {child}; {stderr[-500:].decode()}") from None
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, (stderr + rest).decode()
    last = (stderr + rest).decode().replace("\r", "\n").strip().split("\n")[-1]
    assert last.startswith("remprop propagate: interrupted at layer ") and last.endswith(" of 1000000000"), last
    assert "Traceback" not in (stderr + rest).decode() and out == b""


def test_propagate_refuses_what_it_cannot_finish(capsys):
    # time: 10**12 blocks take hours on any machine (about 1e-7 s a block), above the default 600 s
    code, out, err = run_cli(capsys, "propagate", "--depth", 10 ** 12)
    assert_one_line(err, "would take about", "(option --max-seconds)", "depth 1000000000000", code=code)
    assert out == ""
    # memory: --json prints every layer, about 464 bytes each (arrays and text): 430 GiB at 1e9
    code, out, err = run_cli(capsys, "propagate", "--depth", 10 ** 9, "--json", "--max-seconds", "1e12")
    assert_one_line(err, "max_memory", "GiB", "(option --max-memory)", code=code)


def test_propagate_streams_the_table_beyond_one_trajectory(capsys, monkeypatch):
    """A deep table comes from the sampled layers and matches the whole trajectory's values.

    The whole trajectory is forbidden here (monkeypatched away): the command must stream."""
    import remprop.theory

    depth = 300_000  # 19 MB as a trajectory: above one segment's bound, so streamed
    expected = propagate_at_layers(Architecture(), 0.5, [0, 300, depth])
    monkeypatch.setattr(remprop.theory, "propagate", None)
    monkeypatch.setattr(work_estimates, "SEGMENT_BYTES", 1 << 16)  # one trajectory is too large
    code, out, err = run_cli(capsys, "propagate", "--depth", depth)
    assert code == 0, err
    rows = {line.split()[0]: line.split() for line in out.splitlines()
            if len(line.split()) == 5 and line.split()[0].isdigit()}
    assert len(rows) == 1001 and "1001 of 300001 layers shown" in out
    assert float(rows["300"][3]) == pytest.approx(expected.rho[1], rel=1e-7)  # printed to 8 digits
    assert float(rows[str(depth)][3]) == pytest.approx(expected.rho[2], rel=1e-7)


def test_plain_ctrl_c_is_one_line_with_status_130(capsys, monkeypatch):
    import remprop.theory

    def interrupt(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(remprop.theory, "propagate", interrupt)
    code, out, err = run_cli(capsys, "propagate", "--depth", 3)
    assert code == 130 and err == "remprop propagate: interrupted\n"


def test_ctrl_c_inside_a_compiled_call_is_an_interruption(capsys, monkeypatch):
    """SIGINT handled while numba boxes a result surfaces as chained SystemErrors: still exit 130."""
    import remprop.theory

    def interrupted_kernel(*args, **kwargs):
        try:
            try:
                raise KeyboardInterrupt
            except KeyboardInterrupt as interrupt:
                raise SystemError("<function _numba_unpickle> returned a result with an exception set") from interrupt
        except SystemError as inner:
            raise SystemError("CPUDispatcher(...) returned a result with an exception set") from inner

    monkeypatch.setattr(remprop.theory, "propagate", interrupted_kernel)
    code, out, err = run_cli(capsys, "propagate", "--depth", 3)
    assert code == 130 and err == "remprop propagate: interrupted\n"
    assert not work_estimates.is_ctrl_c(SystemError("another failure"))


# -- case 2: min-alpha --------------------------------------------------------------------
@pytest.mark.parametrize("fields", [dict(), dict(norm="pre"), dict(attention="gain-controlled", norm="none")],
                         ids=["post", "pre", "gain none"])
def test_segmented_search_is_the_one_call_bisection(fields):
    """Forced into segments, the search evaluates the kernel's own midpoints: the same alpha*, bit for bit."""
    arch = Architecture(**fields)
    betas = np.array([0.2, 0.8, 2.0])
    one_call = alpha_star(arch, betas, 60)
    steps = []
    segmented = alpha_star(arch, betas, 60, segment=25, progress=steps.append)
    np.testing.assert_array_equal(segmented, one_call)
    assert np.isfinite(one_call).all()
    assert max(steps) <= 25 * 400 * betas.size  # no call advanced more than one segment (scan: 400 alphas)


def test_interrupted_search_names_where_it_stopped(capsys, monkeypatch):
    """Ctrl-C during a long min-alpha search: exit 130 and one line saying where it stopped."""
    from remprop.diagrams import residual_strength

    real, calls = residual_strength.final_state_rows, []

    def interrupt_on_third_call(*args):
        calls.append(args[2])
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(*args)

    monkeypatch.setattr(residual_strength, "final_state_rows", interrupt_on_third_call)
    # a search estimated above SEGMENTED_ABOVE_SECONDS runs in segments of SEGMENT_SECONDS:
    # lowered here, so that a search of a second is cut into millisecond segments
    monkeypatch.setattr(work_estimates, "SEGMENTED_ABOVE_SECONDS", 0.0)
    monkeypatch.setattr(work_estimates, "SEGMENT_SECONDS", 1e-3)
    # --no-progress: the search is estimated at a few seconds, near where progress lines start
    code, out, err = run_cli(capsys, "min-alpha", "--depth", 200_000, "--no-progress")
    assert code == 130 and out == ""
    assert max(calls) < 200_000 // 3  # segments, not one call over the whole depth
    assert_one_line(err, f"remprop min-alpha: interrupted at layer {2 * calls[0]} of 200000 in evaluation 1 "
                         "of the alpha* search")


def test_min_alpha_refuses_a_search_of_hours(capsys):
    """Depth 1e9: about 40 evaluations of 1e9 blocks (hours on any machine): refused at once."""
    start = time.perf_counter()
    code, out, err = run_cli(capsys, "min-alpha", "--depth", 10 ** 9)
    assert_one_line(err, "max_seconds: min-alpha at depth 1000000000", "would take about",
                    "(option --max-seconds)", code=code)
    assert time.perf_counter() - start < 30  # the estimate is arithmetic (no call timed); 30 s for a busy CI


def test_time_estimate_follows_a_measured_call():
    """The estimate (arithmetic on the program, constants of benchmarks/bench_work_estimates.py)
    follows a call measured on this machine within the noise of a shared machine.

    The constants are the best of a few calls on a calibration machine; a single call on 2
    shared cores can be slower by a factor ~2-3 when other jobs run, and another machine
    faster or slower by about as much, so a factor 10 either way is the bound (a constant
    per-block guess off by the 100x spread between kernels fails it)."""
    arch = Architecture()
    depth = 1_000_000
    estimate = work_estimates.kernel_seconds(arch, 1, depth)
    rows = pack_parameters(arch, 0.5)[2](0, 1)
    start = time.perf_counter()
    final_state_rows(arch, rows, depth)
    measured = time.perf_counter() - start
    assert measured / 10 < estimate < 10 * measured, (estimate, measured)


# -- case 3: the diagram --------------------------------------------------------------------
def test_diagram_refuses_a_grid_beyond_the_memory_limit(capsys, tmp_path):
    code, out, err = run_cli(capsys, "diagram", "--beta", "0.05:3:5000", "--alpha", "0:3:5000",
                             "--max-memory", "1", "--out", tmp_path)
    assert_one_line(err, "max_memory: a diagram of 5000 x 5000 cells", "GiB", "(option --max-memory)", code=code)
    assert not any(tmp_path.iterdir())  # refused before anything was computed or written


def test_diagram_figure_draws_at_most_1000_cells_per_axis():
    """The PNG shows at most MAX_DRAWN_PER_AXIS columns; the diagram keeps every cell."""
    from remprop.diagrams import trainability_figure

    diagram = trainability_diagram(Architecture(), np.linspace(0.05, 3, 2500), [0.5, 1.5, 3.0], 2)
    figure = trainability_figure(diagram)
    mesh = figure.axes[0].collections[0]
    assert mesh.get_array().size == 3 * work_estimates.MAX_DRAWN_PER_AXIS
    assert diagram.phase.shape == (3, 2500)


def test_segmented_diagram_equals_the_one_call_diagram():
    arch = Architecture(norm="pre")
    betas, alphas = np.linspace(0.1, 3, 5), np.linspace(0, 2, 4)
    one = trainability_diagram(arch, betas, alphas, 40)
    segmented = trainability_diagram(arch, betas, alphas, 40, segment=9)
    for name in ("phase", "rho_final", "beta_critical_cells", "alpha_star"):
        np.testing.assert_array_equal(getattr(segmented, name), getattr(one, name))


# -- case 4: simulations --------------------------------------------------------------------
@pytest.mark.parametrize("command", ["validate", "sweep"])
def test_simulation_beyond_the_memory_limit_is_refused_before_torch(capsys, tmp_path, command):
    code, out, err = run_cli(capsys, command, "--width", 100_000, "--seq-len", 100_000, "--out", tmp_path)
    assert_one_line(err, "max_memory: simulating", "TiB", "(option --max-memory)", code=code)


# -- the helpers ----------------------------------------------------------------------------
def test_limits_are_checked_and_spread_indices_keep_the_ends():
    assert work_estimates.spread_indices(11, 3) == [0, 5, 10]
    assert work_estimates.spread_indices(3, 1001) == [0, 1, 2]
    for name in ("max_seconds", "max_memory"):
        with pytest.raises(ValueError, match=name):
            check_work("x", **{name: 0})
    check_work("x", seconds=1e9, nbytes=1e30, max_seconds=np.inf, max_memory=np.inf)
    with pytest.raises(ValueError, match=r"^max_seconds: x would take about 3\.2 h"):
        check_work("x", seconds=3.2 * 3600)


# -- issue 46, item 10: the library estimates and refuses like the command line -----------------------
def test_learning_rate_ceiling_refuses_unbounded_depth_with_a_limit_to_raise():
    """Before: ``learning_rate_ceiling(..., depth=10**9, ...)`` ran past 300 s. After: refused at
    once from :func:`~remprop.theory.learning_rate.ceiling_seconds`, naming ``max_seconds``; the
    limit is a parameter (the CLI's --max-seconds default), and a raised one lets the walk run."""
    import math

    from remprop.theory import learning_rate_ceiling
    from remprop.theory.learning_rate import ceiling_seconds
    from remprop.theory.work_limits import MAX_SECONDS

    arch = Architecture(seq_len=64)
    start = time.perf_counter()
    with pytest.raises(ValueError, match=r"^max_seconds: the learning-rate ceiling's walk through depth 1000000000 "
                                         r".*raise the limit"):
        learning_rate_ceiling(arch, 0.5, depth=10**9, width=64, steps=100)
    assert time.perf_counter() - start < 5.0  # refused before any walk (the bound of test_reliability_time.py)
    depth = int(MAX_SECONDS / ceiling_seconds(1, 1)) + 1  # just above the default limit: refused ...
    with pytest.raises(ValueError, match="^max_seconds"):
        learning_rate_ceiling(arch, 0.5, depth=depth, width=64, steps=100)
    with pytest.raises(ValueError, match="^max_seconds must be a number > 0"):
        learning_rate_ceiling(arch, 0.5, depth=4, width=64, steps=100, max_seconds=0)
    small = learning_rate_ceiling(arch, 0.5, depth=8, width=64, steps=100)
    assert learning_rate_ceiling(arch, 0.5, depth=8, width=64, steps=100, max_seconds=math.inf).ceiling == small.ceiling
    with pytest.raises(ValueError, match="^max_seconds"):  # ... and a lowered limit refuses a small walk
        learning_rate_ceiling(arch, 0.5, depth=8, width=64, steps=100, max_seconds=ceiling_seconds(1, 8) / 2)


def test_the_command_line_limits_are_the_librarys():
    """One home for the rule: the CLI's check_work and defaults are remprop.theory.work_limits'."""
    from remprop.cli import limits
    from remprop.theory import work_limits

    assert limits.check_work is work_limits.check_work
    assert (limits.MAX_SECONDS, limits.MAX_BYTES) == (work_limits.MAX_SECONDS, work_limits.MAX_BYTES)


def test_causal_gram_memory_estimate_bounds_the_measured_peak():
    """Issue 46's acceptance: at T = 1024 the causal Gram state was estimated at 177 MiB and peaked
    at 721 MB (the rotary draws of a chunk of frequencies were not counted). After:
    :func:`~remprop.theory.work_estimates.causal_gram_bytes` counts them; the peak numpy holds
    (tracemalloc, a warm run: no compilation in it) lies below the estimate and above half of it
    (the estimate is an upper bound of the arrays alive at once, not a fit)."""
    import tracemalloc

    from remprop.diagrams.diagnosis_work import diagnosis_bytes
    from remprop.theory import model_spec
    from remprop.theory.causal import propagate_causal_gram

    spec = model_spec("smollm2-135m", seq_len=128)
    arch = spec.architecture

    def run():
        return propagate_causal_gram(arch, spec.beta, 1, 128, spec.q0, spec.rho0, draws=2,
                                     norm_eps=spec.layer_norm_eps)

    run()  # compiled and warm
    tracemalloc.start()
    try:
        run()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    estimate = work_estimates.causal_gram_bytes(arch, 1, 128, 2)
    assert peak <= estimate <= 2 * peak, (peak, estimate)
    # the diagnosis counts it: above the old 160 T^2 + 16 T^2 where the Gram state is chosen
    assert diagnosis_bytes(spec.with_depth(1), causal_theory="gram", gram_draws=2) >= estimate
