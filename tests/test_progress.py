"""Progress everywhere (issue 26, item 2): one facility (:mod:`remprop.progress`) whose lines a log
can read -- an estimate up front, then progress with an ETA on stderr -- and the refusal past
``--max-seconds`` that names the estimate. stderr captured by pytest is not a terminal: what the
tests read is what a log file gets."""
from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from cli_checks import assert_one_line_error, run_cli  # noqa: E402

from remprop.progress import LineProgress, NoProgress, progress_bar  # noqa: E402

#: A progress line of a log: time stamp, work done of the total, elapsed time and the ETA.
PROGRESS_LINE = re.compile(r"^\d\d:\d\d:\d\d .+: [\d.]+/[\d.]+ \S+ \(\d+%\).*, \S+ \S+ elapsed, ETA \d")
ESTIMATE_LINE = re.compile(r"^\d\d:\d\d:\d\d estimate: .+: about \S+ (s|min|h)")


def test_lines_in_a_log_carry_the_eta_and_are_spaced_out():
    stream = io.StringIO()
    with progress_bar(4, desc="cells", unit="cell", stream=stream) as bar:
        assert isinstance(bar, LineProgress)  # a StringIO is not a terminal
        for _ in range(4):
            bar.update(1)
    lines = stream.getvalue().splitlines()
    # the first step, then none within LINE_INTERVAL_S (10 s; the loop takes microseconds), then the end
    assert len(lines) == 2, lines
    assert PROGRESS_LINE.match(lines[0]) and "1/4 cell (25%)" in lines[0]
    assert "4/4 cell (100%)" in lines[1] and lines[1].endswith("done")


def test_resumed_work_does_not_count_towards_the_rate():
    stream = io.StringIO()
    bar = LineProgress(10, desc="sweep", unit="cell", initial=5, stream=stream, interval=0)
    assert "ETA unknown" in bar.line()  # nothing done by this run yet
    bar.update(1)
    assert "6/10 cell (60%)" in stream.getvalue() and "ETA " in stream.getvalue()
    bar.close()


def test_disabled_progress_writes_nothing():
    bar = progress_bar(3, enabled=False)
    assert isinstance(bar, NoProgress)
    bar.update(3)
    bar.close()


def test_a_command_in_a_log_prints_its_estimate_and_progress_with_an_eta(capsys, tmp_path):
    # a sweep of two cells in this process: the first finished cell gives the rate, hence the ETA
    pytest.importorskip("torch")
    code, out, err = run_cli(capsys, "sweep", "--beta", "0.5,1", "--alpha", "1", "--depth", 2, "--width", 16,
                             "--seq-len", 16, "--seeds", 1, "--sequences", 1, "--workers", 0, "--progress",
                             "--out", tmp_path, "--json")
    assert code == 0, err
    lines = err.splitlines()
    estimates = [line for line in lines if ESTIMATE_LINE.match(line)]
    assert estimates and "a sweep of 2 cells" in estimates[-1] and "--max-seconds 600" in estimates[-1], lines
    progress = [line for line in lines if PROGRESS_LINE.match(line)]
    assert progress and " sweep: 1/2 cell (50%)" in progress[0], lines
    assert lines.index(estimates[-1]) < lines.index(progress[0])
    assert json.loads(out)["cells_computed"] == 2


def test_a_quick_command_stays_silent_by_default(capsys):
    code, out, err = run_cli(capsys, "min-alpha", "--depth", 4)
    assert code == 0 and err == ""


@pytest.mark.parametrize("argv", [("min-alpha", "--depth", 2000), ("diagram", "--depth", 10),
                                  ("recipes", "--depth", 100_000), ("propagate", "--depth", 100_000)])
def test_max_seconds_tiny_refuses_naming_the_estimate(capsys, tmp_path, argv):
    code, out, err = run_cli(capsys, *argv, "--max-seconds", "1e-9", *(() if argv[0] in ("min-alpha", "propagate")
                                                                       else ("--out", tmp_path)))
    assert_one_line_error(code, err, "would take about", "--max-seconds")
    assert out == ""


def test_check_simulate_reports_the_simulated_layers(capsys, tmp_path):
    """The simulation of a real model reports from inside the library loop (a hook on its blocks)."""
    pytest.importorskip("transformers")
    code, out, err = run_cli(capsys, "check", "gpt2", "--simulate", "--width", 64, "--depth", 2, "--seq-len", 16,
                             "--seeds", 2, "--sequences", 1, "--device", "cpu", "--out", tmp_path, "--no-figure",
                             "--progress", "--json")
    assert code == 0, err
    lines = err.splitlines()
    assert any(ESTIMATE_LINE.match(line) and "simulating 2 seed(s)" in line for line in lines), lines
    simulated = [line for line in lines if " simulate " in line]
    assert any(PROGRESS_LINE.match(line) for line in simulated), lines
    # 2 seeds x 2 blocks x 2 passes (a causal model is probed twice)
    assert simulated[-1].split(": ", 1)[1].startswith("8/8 layer"), simulated


def test_check_simulate_with_a_bar_keeps_the_blocks_outputs(capsys, tmp_path, monkeypatch):
    """On a terminal the progress is a tqdm bar, whose update returns a bool: the hook on the model's
    blocks must not hand that back as the block's output (it did: the probe then read a bool)."""
    pytest.importorskip("transformers")
    import remprop.progress

    monkeypatch.setattr(remprop.progress, "_interactive", lambda stream: True)
    code, out, err = run_cli(capsys, "check", "gpt2", "--simulate", "--width", 64, "--depth", 2, "--seq-len", 16,
                             "--seeds", 1, "--sequences", 1, "--device", "cpu", "--out", tmp_path, "--no-figure",
                             "--progress", "--json")
    assert code == 0, err
    assert "simulate gpt2" in err and "4/4" in err  # the bar ran to its end: 2 blocks x 2 passes


def test_a_process_that_imported_ipykernel_is_not_a_kernel(monkeypatch):
    """A notebook runner imports ipykernel without being a kernel: its progress stays plain lines (the
    suite's notebook tests made later tests in the same worker draw bars)."""
    import types

    import remprop.progress

    class Stream:
        def isatty(self):
            return False

    stream = Stream()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    ipython = types.ModuleType("IPython")
    ipython.get_ipython = lambda: None
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    assert not remprop.progress._interactive(stream)
    ipython.get_ipython = lambda: types.SimpleNamespace(kernel=object())   # a running kernel's shell
    assert remprop.progress._interactive(stream)


def test_sweep_past_max_seconds_is_refused_with_its_estimate(capsys, tmp_path):
    pytest.importorskip("torch")
    code, out, err = run_cli(capsys, "sweep", "--beta", "0.5", "--alpha", "1", "--depth", 2, "--width", 16,
                             "--seq-len", 16, "--workers", 0, "--max-seconds", "1e-9", "--out", tmp_path)
    assert_one_line_error(code, err, "a sweep of 1 cells", "would take about", "--max-seconds")


def test_figures_past_max_seconds_are_refused_before_any_figure(capsys, tmp_path):
    folder = tmp_path / "figs"
    code, out, err = run_cli(capsys, "figures", "--only", "9", "--quick", "--max-seconds", "1e-9", "--out", folder)
    assert_one_line_error(code, err, "1 figure(s) (9)", "would take about", "--max-seconds")
    assert out == "" and not folder.exists()  # refused before the folder, let alone a figure


def test_figures_print_their_estimate_before_the_progress(capsys, tmp_path):
    pytest.importorskip("torch")
    code, out, err = run_cli(capsys, "figures", "--only", "9", "--quick", "--progress", "--out", tmp_path, "--json")
    assert code == 0, err
    lines = err.splitlines()
    estimates = [line for line in lines if ESTIMATE_LINE.match(line)]
    assert len(estimates) == 1 and "1 figure(s) (9)" in estimates[0] and "--max-seconds 600" in estimates[0], lines
    progress = [line for line in lines if PROGRESS_LINE.match(line)]
    assert progress and any(" figures: 1/1 fig (100%)" in line for line in lines), lines
    assert lines.index(estimates[0]) < lines.index(progress[0])
    assert json.loads(out)["figures"]["9"]


def test_the_figures_estimate_grows_with_their_sizes():
    """The estimate is counted from the sizes: twice the seeds (stacks) of Fig. 9, or twice the
    training seeds of Fig. 3, is twice the simulated work (and the same drawing)."""
    pytest.importorskip("torch")
    from remprop.validation.experiments.figure_work import DRAW_SECONDS, figures_seconds
    from remprop.validation.experiments.paper_figures import SIZES

    quick = SIZES["quick"]
    for figure_id, more in (("9", quick.replace(eoc_seeds=2 * quick.eoc_seeds)),
                            ("3", quick.replace(train_seeds=2 * quick.train_seeds))):
        drawn = 2 * DRAW_SECONDS if figure_id == "9" else DRAW_SECONDS  # theory part and simulated part
        base = figures_seconds(quick, figure_id)[figure_id] - drawn
        doubled = figures_seconds(more, figure_id)[figure_id] - drawn
        assert base > 0 and doubled == pytest.approx(2 * base, rel=1e-6), (figure_id, base, doubled)
    # without the simulations only the theory parts count: Fig. 9's drawing
    assert figures_seconds(quick, "9", simulate=False) == {"9": DRAW_SECONDS}
    assert figures_seconds(quick, "3", simulate=False) == {"3": 0.0}


def test_parts_of_units_read_as_whole_units_and_rounding_reads_as_done():
    """A segmented diagram reports shares of a cell (cell-blocks / depth): the line counts whole cells
    (not ``416.7/40000 cell``), a sum of parts that misses the total by a rounding error reads as
    done (not ``ETA 3.2e-15 s``), and times under a second read to a tenth of one."""
    bar = LineProgress(40000, desc="diagram", unit="cell", stream=io.StringIO(), interval=0)
    bar.update(416.7)
    line = bar.line()
    assert "416/40000 cell (1%)" in line and "416.7" not in line, line
    bar = LineProgress(3, desc="diagram", unit="cell", stream=io.StringIO(), interval=0)
    for _ in range(30):
        bar.update(0.1)  # 2.9999999999999996
    assert bar.n != 3 and bar.line().endswith("done") and "3/3 cell (100%)" in bar.line(), bar.line()
    bar = LineProgress(1000, desc="diagram", unit="cell", stream=io.StringIO(), interval=0)
    bar.update(999)
    assert re.search(r"elapsed, ETA 0\.\d s$", bar.line()) and "e-" not in bar.line(), bar.line()
    assert "(99%)" in bar.line()  # 100% only when done
