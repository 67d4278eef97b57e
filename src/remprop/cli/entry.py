"""``remprop`` entry point: parse, run the command, turn every failure into one line.

Exit status: 0 on success, 2 on bad input (one line on stderr naming the parameter and,
for a library ``ValueError``, the option that sets it), 1 on an unexpected error (one
line; ``REMPROP_DEBUG=1`` shows the traceback), 130 when interrupted (one line, which says
where a long run stopped: ``remprop propagate: interrupted at layer N of M``).
"""
from __future__ import annotations

import contextlib
import os
import sys
import warnings

from .commands import COMMANDS
from .errors import CommandLineError, one_line
from .options import ARCHITECTURE_OPTIONS, point_at_option
from .output import compile_notices, simulation_threads
from .parser import DEBUG_VARIABLE, build_parser

__all__ = ["main"]

#: Option that sets each library parameter, to point error messages at the right flag.
OPTION_OF = {**ARCHITECTURE_OPTIONS,
             "beta": "--beta", "depth": "--depth", "threshold": "--threshold", "q0": "--q0", "rho0": "--rho0",
             "out": "--out", "name": "--name", "only": "--only", "device": "--device", "scheduler": "--scheduler",
             "workers": "--workers", "theory": "--theory", "seeds": "--seeds", "width": "--width",
             "d_ff": "--d-ff", "sequences": "--sequences", "threads": "--threads", "inputs": "--inputs",
             "dtype": "--dtype", "batch_size": "--batch-size", "observable": "--observable",
             "config": "--hf-config", "max_depth": "--max-depth", "pixel_std": "--pixel-std",
             "max_seconds": "--max-seconds", "max_memory": "--max-memory"}

#: Where a command's option for a parameter differs from :data:`OPTION_OF`: the simulated
#: sequence length of ``validate`` (an Architecture's ``seq_len`` is reported by
#: :func:`~remprop.cli.options.architecture_from_args` before it runs), the swept skip
#: strengths of ``sweep`` (a simulated stream that overflows names ``alpha_sa``). Errors about quantities the user did not set
#: (a config's fields, measured inputs) start with words that are not parameter names,
#: so that no option is blamed for them.
COMMAND_OPTION_OF = {
    "sweep": {"alpha_sa": "--alpha"},
    "validate": {"seq_len": "--sim-seq-len"},
    "acceptance": {"theories": "--theory", "draws": "--draws", "store": "--out"},
}


def _suggestion(parser, args, unknown) -> str:
    """`` (did you mean --seq-len?)`` for the first unknown option close to one of the command's own
    (:func:`remprop.theory.checks.did_you_mean`; argparse suggests nothing before Python 3.14); the
    refused old spellings of :data:`~remprop.cli.options.RENAMED_OPTIONS` are not suggested."""
    from remprop.theory.checks import did_you_mean

    from .options import RENAMED_OPTIONS

    command = parser
    if args.command:
        (choices,) = [action.choices for action in parser._actions if isinstance(action.choices, dict)]
        command = choices[args.command]
    options = [option for option in command._option_string_actions
               if option.startswith("--") and option not in RENAMED_OPTIONS]
    for word in unknown:
        if word.startswith("--"):
            hint = did_you_mean(word.split("=", 1)[0], options)
            if hint:
                return hint.replace("'", "")
    return ""


def _command_name(argv):
    """The sub-command named in ``argv``: the first word that is not an option.

    The top-level parser has no option that takes a value, so this is exact.
    """
    for word in argv:
        if word == "--":
            return None
        if not word.startswith("-"):
            return word
    return None


def _dispatch(argv) -> int:
    parser = build_parser()
    args, unknown = parser.parse_known_args(argv)
    if unknown:  # reported by the sub-command that got them, not by "remprop"
        prog = f"remprop {args.command}" if args.command else "remprop"
        raise CommandLineError(f"unrecognized arguments: {' '.join(unknown)}{_suggestion(parser, args, unknown)}",
                               prog=prog)
    if args.command is None:
        raise CommandLineError(f"a command is required: one of {', '.join(COMMANDS)} "
                               "(remprop --help lists them)", prog="remprop")
    if getattr(args, "threads", None) is None and (args.command == "validate" or getattr(args, "simulate", False)):
        args.threads = simulation_threads(args)  # torch's simulations: one thread per free core
    with command_threads(getattr(args, "threads", None), torch=getattr(args, "simulate", False)):
        with compile_notices(args):  # a cold engine's compile is most of a first call: its estimate first
            return int(args.handler(args) or 0)


@contextlib.contextmanager
def command_threads(count, torch=False):
    """Run a command with at most ``count`` numba threads (its --threads; None: numba's own),
    and torch's too with ``torch`` (``check --simulate``); the other commands that simulate or
    train set torch's threads themselves."""
    if count is None:
        yield
        return
    import numba

    before = numba.get_num_threads()
    numba.set_num_threads(max(1, min(count, numba.config.NUMBA_NUM_THREADS)))
    try:
        if torch:
            from .errors import validation_extra

            with validation_extra(option="--simulate"):
                from remprop.validation.backend import torch_threads
            with torch_threads(count):
                yield
        else:
            yield
    finally:
        numba.set_num_threads(before)


def _report(prog, message):
    print(f"{prog}: error: {message}", file=sys.stderr)


@contextlib.contextmanager
def plain_warnings(prog):
    """Show each Python warning raised while a command runs as one line on stderr,
    ``remprop CMD: warning: ...``, without the file, line and source that
    :func:`warnings.showwarning` prints (the previous display is restored after)."""
    def show(message, category, filename, lineno, file=None, line=None):
        try:
            print(f"{prog}: warning: {one_line(message)}", file=sys.stderr if file is None else file)
        except (OSError, ValueError):  # stderr closed: a warning is not worth a failure
            pass

    previous, warnings.showwarning = warnings.showwarning, show
    try:
        yield
    finally:
        warnings.showwarning = previous


def main(argv=None) -> int:
    """Run ``remprop`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    Bad input -- argparse errors, ``ValueError`` from the library, an output directory
    that cannot be written, a missing validation extra -- prints one line
    ``remprop CMD: error: ...`` on stderr and returns 2; any other exception prints one
    line and returns 1 (set ``REMPROP_DEBUG=1`` to get the traceback instead).
    ``--help`` and ``--version`` return 0; Ctrl-C prints one line (where the run stopped, when
    it says so: :class:`remprop.theory.work_estimates.WorkInterrupted`) and returns 130.
    """
    argv = sys.argv[1:] if argv is None else [str(word) for word in argv]
    command = _command_name(argv)
    prog = f"remprop {command}" if command in COMMANDS else "remprop"
    debug = bool(os.environ.get(DEBUG_VARIABLE))
    try:
        with plain_warnings(prog):
            return _dispatch(argv)
    except CommandLineError as err:
        _report(err.prog or prog, err)
        return 2
    except ValueError as err:
        if debug:
            raise
        _report(prog, point_at_option(err, {**OPTION_OF, **COMMAND_OPTION_OF.get(command, {})}))
        return 2
    except SystemExit as exit_:  # --help and --version
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except KeyboardInterrupt as interrupt:  # Ctrl-C; long runs say where they stopped
        print(f"{prog}: {one_line(interrupt) if str(interrupt) else 'interrupted'}", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # stdout closed early (e.g. piped into `head`): silence the flush at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as err:  # noqa: BLE001 - the command line never shows a traceback
        if isinstance(err, SystemError):  # Ctrl-C that landed inside a compiled (numba) call
            from remprop.theory.work_estimates import is_ctrl_c

            if is_ctrl_c(err):
                print(f"{prog}: interrupted", file=sys.stderr)
                return 130
        if debug:
            raise
        _report(prog, f"unexpected {type(err).__name__}: {one_line(err)} "
                      f"(set {DEBUG_VARIABLE}=1 to see the traceback)")
        return 1
