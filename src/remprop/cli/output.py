"""What the ``remprop`` commands write: strict JSON (see ``remprop._json``), plain-text
tables, one-line descriptions of a run, and the checked output directory."""
from __future__ import annotations

import contextlib
import math
import sys
import tempfile
from pathlib import Path

from remprop._json import dumps, to_jsonable

from .converters import drop_extension
from .errors import CommandLineError

#: How the JSON outputs spell the numbers that JSON lacks (the epilog of every command with --json).
JSON_NOTE = ('--json: strict JSON on stdout; numbers that are not finite are the strings "inf", '
             '"-inf", "nan" (alpha_star = "inf": no alpha_SA up to the search bound avoids rank collapse).')

__all__ = ["JSON_NOTE", "to_jsonable", "dumps", "format_number", "format_table", "describe", "run_inputs",
           "show_progress", "estimate_announcer", "progress_bar", "LONG_WORK_SECONDS", "writable_directory", "writable_file",
           "name_stem", "compile_notices", "COMPILE_SECONDS_PER_SWEEP", "COMPILE_SECONDS_OTHER", "SWEEPS_OF",
           "LOAD_SECONDS_PER_SWEEP", "load_seconds", "command_load", "work_threads", "loaded_seconds", "load_note",
           "FIGURE_SECONDS", "simulation_threads", "SIMULATION_THREADS_TEXT"]


def format_number(value, digits=6) -> str:
    """A number for a table: ``digits`` significant digits, ``inf``/``nan`` spelled out."""
    value = float(value)
    if math.isnan(value):
        return "nan"
    if math.isinf(value):
        return "inf" if value > 0 else "-inf"
    return f"{value:.{digits}g}"


def format_table(headers, rows) -> str:
    """Right-aligned plain-text table; ``rows`` hold strings or numbers."""
    cells = [[cell if isinstance(cell, str) else format_number(cell) for cell in row] for row in rows]
    widths = [max([len(h)] + [len(row[k]) for row in cells]) for k, h in enumerate(headers)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(headers, widths))]
    lines.append("  ".join("-" * w for w in widths))
    lines.extend("  ".join(c.rjust(w) for c, w in zip(row, widths)) for row in cells)
    return "\n".join(lines)


def describe(arch, depth, threshold=None) -> str:
    """One line naming the stack: block order, attention, MLP, heads, theory T, depth, threshold."""
    norm = arch.norm.label(arch.norm_type)
    mlp = arch.mlp.describe(arch.activation)
    text = f"{norm}, {arch.attention} attention, {mlp}"
    if arch.heads != 1:
        text += f", {arch.heads} heads ({arch.qk_scaling} q/k scaling)"
    if arch.seq_len is not None:
        text += f", theory at T = {arch.seq_len}"
    text += f", depth {depth}"
    if threshold is not None:
        text += f", rank collapse when final rho > {format_number(threshold)}"
    return text


def run_inputs(args, arch, **extra) -> dict:
    """The inputs of a run, for the JSON outputs (alpha_sa left out when it is swept)."""
    architecture = arch.to_dict()
    if "alpha_sa" not in getattr(args, "architecture_dests", {"alpha_sa": "alpha"}):
        architecture.pop("alpha_sa", None)
    out = {"architecture": architecture, "depth": args.depth}
    for name in ("threshold", "q0", "rho0"):
        if hasattr(args, name):
            out[name] = getattr(args, name)
    out.update(extra)
    return out


#: Seconds to draw and write a command's figure on a quiet machine (matplotlib imported, a PNG at its dpi): a
#: simulation's 1.5-3.3 s of wall time from quiet to load 8; a warm ``diagram`` (the 200 x 200 cells of
#: ``make run``, its kernels milliseconds) 1.2 s of CPU time beside the 0.5 s of Python and the command line.
FIGURE_SECONDS = 1.5

#: Work estimated to take less than this many seconds shows no estimate and no progress unless
#: --progress asks for them (a quick command prints its answer alone).
LONG_WORK_SECONDS = 5.0


def show_progress(args) -> bool:
    """--progress / --no-progress; by default shown unless the command's estimate
    (:func:`estimate_announcer`) is under :data:`LONG_WORK_SECONDS`. Shown: a bar on a
    terminal, timestamped lines with the ETA in a log (:func:`remprop.progress.progress_bar`)."""
    mode = getattr(args, "progress", None)
    if mode is not None:
        return bool(mode)
    seconds = getattr(args, "estimated_seconds", None)
    return seconds is None or seconds >= LONG_WORK_SECONDS


def estimate_announcer(args):
    """The ``announce`` of :func:`remprop.cli.limits.check_work` for a command: adds the
    estimated seconds to ``args.estimated_seconds`` (read by :func:`show_progress`) and prints
    the estimate line on stderr (``HH:MM:SS estimate: <task>: about 40 s, 300 MiB``) when
    progress is shown: always with --progress, never with --no-progress, by default when the
    estimated time is at least :data:`LONG_WORK_SECONDS`. The command's first estimate also counts
    reading the engine's sweeps it still needs from disk (:func:`load_seconds`).

    The estimates are a quiet machine's seconds; the line gives them at the machine's load
    (:func:`loaded_seconds`: ``about 40 s (machine load 6.1 on 2 cores; quiet: 8 s)``), and so does
    ``args.estimated_seconds``. The limits (``--max-seconds``) compare the quiet estimate.
    """
    from remprop.progress import announce

    from .limits import format_bytes, format_seconds

    def announce_estimate(task, seconds, nbytes):
        loading = 0.0
        if seconds is not None and not getattr(args, "loads_counted", False):
            args.loads_counted = True  # once a command: the first estimate carries the loads still to come
            loading = load_seconds(args)
        parts, load_text = [], ""
        if seconds is not None:
            quiet = float(seconds) + loading
            seconds = loaded_seconds(args, float(seconds), threads=work_threads(args)) + loaded_seconds(args, loading)
            args.estimated_seconds = (getattr(args, "estimated_seconds", None) or 0.0) + seconds
            load_text = load_note(args, seconds, quiet)
            parts.append(f"about {format_seconds(seconds)}{load_text}")
        mode = getattr(args, "progress", None)
        if mode is False or (mode is None and (seconds is None or seconds < LONG_WORK_SECONDS)):
            return
        parts += [f"{format_bytes(nbytes)} of memory"] if nbytes is not None else []
        limit = getattr(args, "max_seconds", None)
        limit_text = f" (--max-seconds {limit:g})" if seconds is not None and limit is not None else ""
        announce(f"{task}: {', '.join(parts) or 'not estimated'}{limit_text}")

    return announce_estimate


def command_load(args):
    """The machine's load for this command (:func:`remprop.machine.machine_load`), read at the first
    call and kept on ``args`` (``args.machine_load``): one load for all of a command's estimates."""
    load = getattr(args, "machine_load", None)
    if load is None:
        from remprop.machine import machine_load

        load = args.machine_load = machine_load()
    return load


#: How ``--threads`` defaults where a command simulates with torch (``validate``, ``check --simulate``):
#: :func:`simulation_threads`.
SIMULATION_THREADS_TEXT = "one per core other processes leave free, 1 on a busy machine"


def simulation_threads(args) -> int:
    """The torch (and numba) threads of a simulating command whose ``--threads`` is not given: one per free
    core of the command's load (:meth:`remprop.machine.MachineLoad.free_cores` of :func:`command_load`). On
    two shared cores, beside other processes, two threads ran ``check bert-48 --simulate`` 0.9-2.2x as long as
    one (docs/data/bench-simulation-threads.json): each waits for the other at every operation while another
    process holds a core."""
    return command_load(args).free_cores()


def work_threads(args) -> int:
    """The threads the command's work runs on: numba's (which ``--threads`` sets, and torch's with it)
    where numba is imported, else ``--threads``, else one a core."""
    if "numba" in sys.modules:
        return sys.modules["numba"].get_num_threads()
    return getattr(args, "threads", None) or command_load(args).cores


def loaded_seconds(args, seconds, threads=1) -> float:
    """A quiet machine's ``seconds`` of work on ``threads`` threads at the command's load
    (:meth:`remprop.machine.MachineLoad.factor` of :func:`command_load`)."""
    return float(seconds) * command_load(args).factor(threads) if seconds else 0.0


def load_note(args, seconds, quiet) -> str:
    """``" (machine load 6.1 on 2 cores; quiet: 8 s)"`` where the load makes ``seconds`` longer than the
    ``quiet`` estimate, else ``""``."""
    from .limits import format_seconds

    if not seconds > quiet:
        return ""
    return f" ({command_load(args).describe()}; quiet: {format_seconds(quiet)})"


#: Seconds to compile one of the engine's sweeps (:data:`remprop.theory.kernels.ENGINE_SWEEPS`) on a quiet machine
#: (numba compiles on one thread; the machine's load multiplies it, :func:`compile_notices`): the CPU time of cold
#: minus warm runs on empty caches (benchmarks/bench_estimates.py, ``cpu_s``; the CPU time of one-thread work is
#: its wall time on a quiet machine): ``diagram`` (two sweeps) 17.0 - 1.7 s, ``check bert-base`` (three) 31.1 -
#: 3.4 s, 7.7 and 9.2 s a sweep at loads of 3-4. The 30 s this was before folded in a load of 5-11 and read 2-4x
#: long on a quiet machine.
COMPILE_SECONDS_PER_SWEEP = 9.0
#: The engine's sweeps a command runs (the kernel timing of an estimate runs ``final_states``); any other
#: command may run all three, ``precompile`` compiles them itself.
SWEEPS_OF = {"propagate": ("trajectories", "final_states"), "min-alpha": ("final_states", "min_alpha"),
             "diagram": ("final_states", "min_alpha"), "precompile": ()}


#: Seconds to read one of the engine's compiled sweeps from numba's disk cache on a quiet machine: warm ``propagate``
#: and ``min-alpha`` (two sweeps, the work itself milliseconds) took 1.1 s of CPU time against 0.5 s for starting
#: Python and importing the command line (benchmarks/bench_estimates.py at load 3.5). The 1.5 s this was before
#: had been read in a profile at load 10.
LOAD_SECONDS_PER_SWEEP = 0.3


def load_seconds(args) -> float:
    """Seconds of reading the engine's sweeps the command runs (:data:`SWEEPS_OF`) that this process has not
    loaded but numba's disk cache holds (:func:`remprop.theory.kernels.sweeps_to_load`)."""
    sweeps = SWEEPS_OF.get(getattr(args, "command", None))
    if sweeps == ():
        return 0.0
    from remprop.theory.kernels import ENGINE_SWEEPS, sweeps_to_load

    return LOAD_SECONDS_PER_SWEEP * len(sweeps_to_load(ENGINE_SWEEPS if sweeps is None else sweeps))


#: Seconds assumed on a quiet machine for the first compile of a numba function outside the engine (the causal
#: Gram state's pair quadrature, an activation's moments over arrays, the finite-T table): a ``check bert-base``
#: that compiled ``_moments_serial`` and a ``validate`` that compiled ``many`` took no longer than the same runs
#: without (6.6 and 6.8 s, 9.3 and 11.3 s, at loads 3-11), the larger ones a few seconds.
COMPILE_SECONDS_OTHER = 3.0


@contextlib.contextmanager
def compile_notices(args):
    """Within: the first time numba starts compiling, print its estimate (unless --no-progress) and add it
    to ``args.estimated_seconds``: ``HH:MM:SS estimate: compiling the theory's engine (2 sweep(s):
    final_states, min_alpha; once per install, `remprop precompile` does it ahead): about 18 s``
    (at the machine's load, :func:`loaded_seconds`: numba compiles on one thread).

    The sweeps counted are those the command runs (:data:`SWEEPS_OF`) that
    :func:`remprop.theory.kernels.sweeps_to_compile` finds neither compiled nor on disk, at
    :data:`COMPILE_SECONDS_PER_SWEEP` each; a compile of anything else numba keeps on disk first (the
    engine already there) is announced once at :data:`COMPILE_SECONDS_OTHER`; functions it does not keep
    (``cache=False``) compile in every process and are not announced. The line comes when compiling starts, so
    after the command has checked its input (a bad option stays one line) and before the minute a cold
    engine takes, in which nothing else would be printed.
    """
    sweeps = SWEEPS_OF.get(args.command)
    if sweeps == ():
        yield
        return
    from numba.core import event

    from remprop.progress import announce

    from .limits import format_seconds

    said = []

    class Notice(event.Listener):
        def on_start(self, data):
            dispatcher = data.data.get("dispatcher")
            if said or type(getattr(dispatcher, "_cache", None)).__name__ == "NullCache":
                return  # said once; a function numba does not keep on disk compiles in every process, quickly
            said.append(True)
            from remprop.theory.kernels import ENGINE_SWEEPS, sweeps_to_compile

            cold = sweeps_to_compile(ENGINE_SWEEPS if sweeps is None else sweeps)
            if cold:
                quiet = COMPILE_SECONDS_PER_SWEEP * len(cold)
                what = (f"the theory's engine ({len(cold)} sweep(s): {', '.join(cold)}; once per install, "
                        "`remprop precompile` does it ahead)")
            else:
                quiet = COMPILE_SECONDS_OTHER
                name = getattr(getattr(dispatcher, "py_func", None), "__name__", "a kernel")
                what = f"{name.split('__')[0]} (once per install)"
            seconds = loaded_seconds(args, quiet)  # numba compiles on one thread
            args.estimated_seconds = (getattr(args, "estimated_seconds", None) or 0.0) + seconds
            if getattr(args, "progress", None) is not False:
                announce(f"compiling {what}: about {format_seconds(seconds)}{load_note(args, seconds, quiet)}")

        def on_end(self, data):
            pass

    listener = Notice()
    event.register("numba:compile", listener)
    try:
        yield
    finally:
        event.unregister("numba:compile", listener)


@contextlib.contextmanager
def progress_bar(args, *, total, unit, desc):
    """Progress on stderr when :func:`show_progress` says so (:func:`remprop.progress.progress_bar`):
    yields its ``update(n)``, else None.

    The bar is closed (its line ended) however the block ends, so that an interruption's
    one-line message starts on a line of its own.
    """
    if not show_progress(args):
        yield None
        return
    from remprop.progress import progress_bar as bar_of

    with bar_of(total, unit=unit, desc=desc) as bar:
        yield bar.update
        bar.update(max(0, total - bar.n))  # finished: work estimated but not needed (a search ended early)


def writable_directory(path, option="--out") -> Path:
    """Create ``path`` if needed and check that a file can be written there.

    Checked before any computation, so that a bad ``--out`` fails at once (one line,
    exit status 2) rather than after a long sweep. The check writes and removes a
    temporary file: permission bits alone say nothing when running as root.
    """
    if isinstance(path, str) and not path.strip():
        raise CommandLineError(f"argument {option}: must name a folder, got {path!r} (use '.' for this folder)")
    directory = Path(path)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise CommandLineError(f"argument {option}: cannot write to {str(path)!r}: {reason}") from None
    return directory


def writable_file(path, option) -> Path:
    """Check before any computation that the file ``path`` can be written (one line, exit 2, otherwise).

    Refused: an empty name, a folder, a file that cannot be opened for writing; its folder is
    created if needed and checked by :func:`writable_directory`. An existing file is opened to
    append (its content kept) and closed; nothing is created in its place.
    """
    text = str(path)
    if not text.strip():
        raise CommandLineError(f"argument {option}: must name a file, got {text!r}")
    file = Path(path)
    if file.is_dir():
        raise CommandLineError(f"argument {option}: {text} is a folder, not a file")
    writable_directory(file.parent, option=option)
    if file.exists():
        try:
            with open(file, "a", encoding="utf-8"):
                pass
        except OSError as err:
            reason = err.strerror or type(err).__name__
            raise CommandLineError(f"argument {option}: cannot write to {text!r}: {reason}") from None
    return file


def name_stem(name, prefix="") -> str:
    """``prefix`` and a file-name stem from a model's name: every run of characters other than
    letters, digits, ``.``, ``_`` and ``-`` becomes one ``_``, and a trailing file extension
    is dropped once (:func:`~remprop.cli.converters.drop_extension`), so that
    ``OUT/<stem>.json`` has one extension (``remprop check mymodel_config.json`` writes
    ``check-mymodel_config.json``, not ``check-mymodel_config.json.json``). A dotted name
    that is not a file's (``Llama-3.2-1B``) keeps its dots.
    """
    import re

    text = drop_extension(re.sub(r"[^A-Za-z0-9._-]+", "_", str(name)).strip("_"))
    return prefix + (text.strip("_.") or "model")
