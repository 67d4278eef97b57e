"""The ``remprop`` command line: trainability diagrams and signal propagation from the shell.

Commands
--------
``remprop diagram``    trainability diagram over (beta, alpha_SA): PNG + npz + json
``remprop min-alpha``  smallest skip strength alpha_SA that avoids rank collapse at depth L
``remprop propagate``  order parameters q, p, rho layer by layer
``remprop figures``    the paper's reference figures, theory and simulation (PNG + data)
``remprop sweep``      measured trainability diagram: simulated (beta, alpha_SA) grid against the
                       theory, resumable, on dask.distributed (needs the validation extra)
``remprop validate``   finite-size checks against real networks (needs the validation extra)
``remprop check``      diagnose a real model (Hugging Face config) at its default initialisation:
                       its place on the diagram, per-layer cosine, changes that would help

Exit status: 0 on success, 2 on bad input (one line on stderr naming the parameter),
1 on an unexpected error (one line; ``REMPROP_DEBUG=1`` shows the traceback).

The option helpers :func:`add_architecture_arguments` and :func:`architecture_from_args`
are public: other command lines (``remprop.validation.cli``) reuse them.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys
import textwrap

from ._cli_options import (
    CommandLineError,
    OneLineArgumentParser,
    GRID_SYNTAX,
    add_architecture_arguments,
    architecture_from_args,
    cosine,
    count,
    grid_of,
    layer_count,
    nonnegative_real,
    open_unit_real,
    positive_real,
    seed_list,
)

__all__ = ["main", "build_parser", "add_architecture_arguments", "architecture_from_args", "COMMANDS"]

#: Sub-commands, in the order of ``remprop --help``.
COMMANDS = ("diagram", "min-alpha", "propagate", "figures", "sweep", "validate", "check")

#: Environment variable that turns the one-line report of unexpected errors into a traceback.
DEBUG_VARIABLE = "REMPROP_DEBUG"

VALIDATION_HINT = "the validation extra is needed: pip install 'remprop[validation]'"

JSON_NOTE = ('--json: strict JSON on stdout; numbers that are not finite are the strings "inf", '
             '"-inf", "nan" (alpha_star = "inf": no alpha_SA up to the search bound avoids rank collapse).')

EPILOG = "\n".join(textwrap.wrap(JSON_NOTE, 79) + textwrap.wrap(
    "Exit status: 0 success, 2 bad input (one line on stderr naming the parameter), "
    f"1 unexpected error ({DEBUG_VARIABLE}=1 shows the traceback).", 79))

#: Option that sets each library parameter, to point error messages at the right flag.
_OPTION_OF = {"alpha_sa": "--alpha", "alpha_mlp": "--alpha-mlp", "sigma_w2": "--sigma-w2",
              "sigma_b2": "--sigma-b2", "sigma_v2": "--sigma-v2", "norm": "--norm",
              "sigma_o2": "--sigma-o2", "sigma_w2_out": "--sigma-w2-out",
              "attention": "--attention", "activation": "--activation", "beta": "--beta",
              "depth": "--depth", "threshold": "--threshold", "q0": "--q0", "rho0": "--rho0",
              "out": "--out", "only": "--only", "device": "--device", "scheduler": "--scheduler",
              "workers": "--workers", "theory": "--theory", "seeds": "--seeds", "width": "--width",
              "seq_len": "--seq-len", "sequences": "--sequences", "threads": "--threads",
              "config": "--hf-config", "max_depth": "--max-depth", "pixel_std": "--pixel-std"}


def _version() -> str:
    from . import __version__

    return __version__


# -- parser --------------------------------------------------------------------------------
def _add_run_options(parser, *, threshold=True, json_help="print JSON instead of a table"):
    """Options shared by the commands that propagate: --depth, --threshold, --q0, --rho0, --json."""
    parser.add_argument("--depth", type=layer_count, default=60, metavar="L",
                        help="number of transformer blocks (default: %(default)s)")
    if threshold:
        from remprop.diagrams import DEFAULT_THRESHOLD

        parser.add_argument("--threshold", type=open_unit_real, default=DEFAULT_THRESHOLD, metavar="RHO",
                            help="rank-collapse threshold in (0, 1): the stack is rank-collapsed when the "
                                 "final-layer cosine rho exceeds it (default: %(default)s)")
    parser.add_argument("--q0", type=positive_real, default=1.0,
                        help="input squared norm per coordinate, > 0 (default: %(default)s)")
    parser.add_argument("--rho0", type=cosine, default=0.0,
                        help="input cosine similarity of two tokens, in [-1, 1] (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help=json_help)


def _add_progress_option(parser):
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="show a progress bar on stderr (default: only when stderr is a terminal)")


def build_parser(validation_cli=None) -> OneLineArgumentParser:
    """The ``remprop`` argument parser.

    Parameters
    ----------
    validation_cli : module, optional
        ``remprop.validation.cli``; when given, its ``add_arguments(parser)`` fills the
        ``validate`` sub-command (it is imported only when that command runs).
    """
    parser = OneLineArgumentParser(
        prog="remprop", description="Signal propagation through transformers at initialisation "
        "(attention as a Random Energy Model): trainability diagrams and minimum skip strengths.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"remprop {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineArgumentParser)

    diagram = commands.add_parser(
        "diagram", help="trainability diagram over (beta, alpha_SA): PNG + npz + json",
        description="Trainability diagram of a depth-L stack over the query/key scale beta and the "
        "attention skip strength alpha_SA. Phases: trainable, rank collapse (final rho above the "
        "threshold), entropy collapse (beta above the critical beta of the first attention layer; "
        "pre-LN: the smallest over layers). With no options: the 60-layer post-LN BERT diagram. "
        "Writes OUT/NAME.png, OUT/NAME.npz and OUT/NAME.json and prints alpha* and beta_c.",
        epilog=JSON_NOTE)
    diagram.add_argument("--betas", type=grid_of(positive_real), default=grid_of(positive_real)("0.05:3:200"),
                         metavar="GRID", help=f"beta values (> 0): {GRID_SYNTAX} (default: 0.05:3:200)")
    diagram.add_argument("--alphas", type=grid_of(nonnegative_real), default=grid_of(nonnegative_real)("0:3:200"),
                         metavar="GRID", help="alpha_SA values (>= 0), same syntax (default: 0:3:200)")
    _add_run_options(diagram, json_help="print a JSON summary (files, alpha_star, beta_critical) instead of text")
    diagram.add_argument("--out", default="remprop-out", metavar="DIR",
                         help="output directory, created if needed (default: %(default)s)")
    diagram.add_argument("--name", default="trainability", help="file name stem (default: %(default)s)")
    _add_progress_option(diagram)
    add_architecture_arguments(diagram, alpha_sa=False)

    min_alpha = commands.add_parser(
        "min-alpha", help="smallest alpha_SA that keeps a depth-L stack out of rank collapse",
        description="Smallest attention skip strength alpha_SA for which the final-layer cosine rho of a "
        "depth-L stack stays at or below the threshold, for each beta. JSON: an object with key "
        "alpha_star (a number for one beta, a list for several) and the inputs.",
        epilog=JSON_NOTE)
    min_alpha.add_argument("--beta", type=grid_of(positive_real), default=grid_of(positive_real)("0.5"),
                           metavar="BETA", help=f"query/key scale(s) beta > 0: {GRID_SYNTAX} (default: 0.5)")
    _add_run_options(min_alpha, json_help="print a JSON object with key alpha_star")
    add_architecture_arguments(min_alpha, alpha_sa=False)

    propagate = commands.add_parser(
        "propagate", help="order parameters q, p, rho layer by layer",
        description="Propagate the order parameters (q, p) of the token simplex through L blocks and "
        "print q, p, rho = p/q per layer (layer 0 = input) and the critical beta of each attention "
        "input. JSON: lists layer, q, p, rho (length L+1) and beta_critical (length L).",
        epilog=JSON_NOTE)
    propagate.add_argument("--beta", type=positive_real, default=0.5,
                           help="query/key scale beta > 0 (default: %(default)s)")
    _add_run_options(propagate, threshold=False, json_help="print JSON lists instead of a table")
    add_architecture_arguments(propagate, alpha_sa=True)

    _add_figures_parser(commands)
    _add_sweep_parser(commands)

    validate = commands.add_parser(
        "validate", help="compare the theory with simulated networks (needs the validation extra)",
        description="Finite-size validation against real networks (torch). Needs the validation extra: "
        "pip install 'remprop[validation]'.")
    if validation_cli is not None:
        validation_cli.add_arguments(validate)
    _add_check_parser(commands)
    return parser


def _add_check_parser(commands):
    from remprop.diagrams import DEFAULT_THRESHOLD
    from remprop.theory import shipped_configs

    check = commands.add_parser(
        "check", help="diagnose a real model (Hugging Face config) at its default initialisation",
        description="Where a real transformer sits at its library's default initialisation: its "
        "query/key scale beta against beta_c, its skip strength against alpha*(L), the phase, the "
        "predicted cosine per layer, the depth at which rank collapse sets in, the query gradient scale, "
        "and changes (skip scaling, query/key std, LayerNorm placement, gain-controlled attention) with "
        "their predicted effect. Writes OUT/NAME.png (the model on its trainability diagram) and "
        "OUT/NAME.json. --simulate instantiates the model at random init (no weights are downloaded; "
        "needs the validation extra) and overlays the measured cosines; each finished initialisation is "
        "kept in OUT/NAME.simulation/, so an interrupted run resumes.", epilog=JSON_NOTE)
    check.add_argument("model", nargs="?", default=None, metavar="MODEL",
                       help="a shipped model name or a config path (same as --hf-config)")
    check.add_argument("--hf-config", dest="config", default=None, metavar="PATH|NAME",
                       help="a config.json (or its folder), or a shipped name: " + ", ".join(shipped_configs()))
    check.add_argument("--seq-len", dest="seq_len", type=count(2), default=None, metavar="T",
                       help="sequence length (default: the model's maximum)")
    check.add_argument("--depth", type=layer_count, default=None, metavar="L",
                       help="override the number of layers (default: the config's)")
    check.add_argument("--pixel-std", type=positive_real, default=1.0, metavar="S",
                       help="ViT: std of the i.i.d. input pixels (default: %(default)s)")
    check.add_argument("--rho0", type=cosine, default=None,
                       help="override the input cosine of two tokens that the embeddings give (default: "
                            "from the config, e.g. 1/3 for BERT's shared token-type embedding)")
    check.add_argument("--threshold", type=open_unit_real, default=DEFAULT_THRESHOLD, metavar="RHO",
                       help="rank-collapse threshold on the final cosine, in (0, 1) (default: %(default)s)")
    check.add_argument("--max-depth", type=layer_count, default=10_000, metavar="L",
                       help="deepest stack searched for the onset of rank collapse (default: %(default)s)")
    check.add_argument("--simulate", action="store_true",
                       help="instantiate the model at random init and overlay measurements (torch, transformers)")
    check.add_argument("--seeds", type=seed_list, default=seed_list("4"), metavar="SEEDS",
                       help="initialisation seeds of --simulate: a count N (seeds 0..N-1) or a list 0,3,7 "
                            "(default: 4)")
    check.add_argument("--sequences", type=count(1), default=2, metavar="N",
                       help="random input sequences per initialisation (default: %(default)s)")
    check.add_argument("--device", default=None, help="torch device of --simulate (default: cuda if available)")
    check.add_argument("--out", default="remprop-out", metavar="DIR",
                       help="output directory, created if needed (default: %(default)s)")
    check.add_argument("--name", default=None, help="file name stem (default: check-<model>)")
    check.add_argument("--no-figure", dest="figure", action="store_false", help="skip the PNG")
    check.add_argument("--json", action="store_true", help="print the report as JSON")


def _add_figures_parser(commands):
    from .figure_set import not_yet_supported, supported_figures

    supported, later = supported_figures(), not_yet_supported()
    lines = textwrap.wrap(
        "Regenerate the reference figures of the paper (THEORY.md section 9) into DIR: for each, a PNG and "
        "the data behind it (JSON/npz), theory and simulation together, plus an index figures.json. "
        "Simulated parts need the validation extra (without it only the theory parts are drawn).", 79)
    lines += ["", "supported:"]
    lines += [f"  {k:>3}  {v}" for k, v in supported.items()]
    if later:
        lines += ["", "not yet supported:"] + [f"  {k:>3}  {v}" for k, v in later.items()]
    figures = commands.add_parser(
        "figures", help="the paper's reference figures, theory and simulation (PNG + data)",
        description="\n".join(lines), formatter_class=argparse.RawDescriptionHelpFormatter)
    figures.add_argument("--out", default="remprop-out", metavar="DIR",
                         help="output directory, created if needed (default: %(default)s)")
    figures.add_argument("--quick", action="store_true",
                         help="small sizes (d, T of 64-128, two seeds): a few minutes on two cores "
                              "instead of the paper's sizes")
    figures.add_argument("--only", default=None, metavar="IDS",
                         help=f"comma list of figures to draw (default: all supported: {','.join(supported)})")
    figures.add_argument("--workers", type=count(0), default=0, metavar="N",
                         help="dask worker processes for the simulated sweep of Fig. 1c (default: 0, in this "
                              "process)")
    figures.add_argument("--device", default="auto",
                         help="simulation device: auto (CUDA when available), cpu or cuda[:n] (default: auto)")
    figures.add_argument("--threads", type=count(1), default=None, metavar="N",
                         help="torch CPU threads while simulating (default: 1 with --quick, torch's default "
                              "otherwise)")
    figures.add_argument("--json", action="store_true", help="print the files and notes as JSON")
    _add_progress_option(figures)


def _add_sweep_parser(commands):
    sweep = commands.add_parser(
        "sweep", help="measured trainability diagram: simulate a (beta, alpha_SA) grid (needs the validation extra)",
        description="Simulate a depth-L stack on every cell of a (beta, alpha_SA) grid, classify each cell's "
        "measured phase exactly as the theory classifies (rank collapse: measured final mean token cosine above "
        "the threshold; entropy collapse: beta above the critical beta sqrt(2/(q(q-p))) of the measured input "
        "of the first attention layer -- pre-LN and no LN: the smallest over layers), and draw measured "
        "against predicted with the agreement. Each cell is written to OUT/cells/ as it finishes (atomic "
        "files), so an interrupted sweep resumes where it stopped; OUT/sweep.json pins the settings. Cells "
        "run on a dask LocalCluster (one single-threaded worker per core by default), on an existing cluster "
        "(--scheduler), or in this process (--workers 0, or without dask). Writes OUT/measured_diagram.png, "
        ".npz and .json. Needs the validation extra; dask comes with the distributed extra.",
        epilog=JSON_NOTE)
    grid = sweep.add_argument_group("grid and simulation")
    grid.add_argument("--betas", type=grid_of(positive_real), default=grid_of(positive_real)("0.2:2.4:8"),
                      metavar="GRID", help=f"beta values (> 0): {GRID_SYNTAX} (default: 0.2:2.4:8)")
    grid.add_argument("--alphas", type=grid_of(nonnegative_real), default=grid_of(nonnegative_real)("0.8:1.6:9"),
                      metavar="GRID", help="alpha_SA values (>= 0), same syntax (default: 0.8:1.6:9)")
    grid.add_argument("--seeds", type=seed_list, default=seed_list("2"), metavar="SEEDS",
                      help="initialisations: a count N (seeds 0..N-1) or a list 'a,b,c' (default: 2)")
    grid.add_argument("--sequences", type=count(1), default=2, metavar="N",
                      help="input sequences per seed (default: %(default)s)")
    grid.add_argument("--width", type=count(2), default=128, metavar="D", help="model width d (default: %(default)s)")
    grid.add_argument("--seq-len", type=count(2), default=128, metavar="T",
                      help="tokens per sequence T (default: %(default)s)")
    grid.add_argument("--inputs", choices=("synthetic", "text"), default="synthetic",
                      help="Gaussian tokens with exactly q0, rho0, or embedded pydoc text (default: %(default)s)")
    grid.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                      help="simulation precision (default: %(default)s)")
    grid.add_argument("--threads", type=count(1), default=1, metavar="N",
                      help="torch threads per cell (fixed so that results are reproducible; default: 1)")
    grid.add_argument("--theory", choices=("auto", "finite-T", "asymptotic"), default="auto",
                      help="prediction to compare with: finite-T attention at the simulated T, or T -> infinity "
                           "(default: auto = finite-T where the theory has it)")
    _add_run_options(sweep, json_help="print a JSON summary (files, agreement, cells) instead of text")
    sweep.add_argument("--out", default="remprop-sweep", metavar="DIR",
                       help="sweep folder, created if needed; an existing one resumes (default: %(default)s)")
    where = sweep.add_argument_group("where cells run")
    where.add_argument("--workers", type=count(0), default=None, metavar="N",
                       help="dask LocalCluster worker processes, one thread each; 0 = in this process "
                            "(default: one per core, or 0 without dask)")
    where.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="address of a running dask scheduler (tcp://host:8786) instead of a LocalCluster")
    where.add_argument("--device", default="auto",
                       help="auto (each worker takes CUDA when it has it), cpu or cuda[:n] (default: auto)")
    _add_progress_option(sweep)
    # --seq-len of a sweep is the simulated sequence length (in the grid group above).
    add_architecture_arguments(sweep, alpha_sa=False, seq_len=False)


# -- running -------------------------------------------------------------------------------
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


def _load_validation_cli():
    try:
        validation_cli = importlib.import_module("remprop.validation.cli")
    except ImportError as err:
        raise CommandLineError(f"{VALIDATION_HINT} ({_one_line(err)})", prog="remprop validate") from None
    return validation_cli


def _dispatch(argv, command) -> int:
    validation_cli = _load_validation_cli() if command == "validate" else None
    args, unknown = build_parser(validation_cli).parse_known_args(argv)
    if unknown:  # reported by the sub-command that got them, not by "remprop"
        prog = f"remprop {args.command}" if args.command else "remprop"
        raise CommandLineError(f"unrecognized arguments: {' '.join(unknown)}", prog=prog)
    if args.command is None:
        raise CommandLineError(f"a command is required: one of {', '.join(COMMANDS)} "
                               "(remprop --help lists them)", prog="remprop")
    from . import _cli_commands as run

    if args.command == "diagram":
        return run.run_diagram(args)
    if args.command == "min-alpha":
        return run.run_min_alpha(args)
    if args.command == "propagate":
        return run.run_propagate(args)
    if args.command == "figures":
        return run.run_figures(args)
    if args.command == "sweep":
        return run.run_sweep(args)
    if args.command == "check":
        return run.run_check(args)
    try:
        return int(validation_cli.run(args) or 0)
    except ImportError as err:
        raise CommandLineError(f"{VALIDATION_HINT} ({_one_line(err)})", prog="remprop validate") from None


def _one_line(error) -> str:
    text = " ".join(str(error).split())
    return text or type(error).__name__


def _point_at_option(message: str) -> str:
    """Add the command-line option to a library message that starts with a parameter name."""
    name = message.split(" ", 1)[0].rstrip(":")
    option = _OPTION_OF.get(name)
    return f"{message} (option {option})" if option else message


def _report(prog, message):
    print(f"{prog}: error: {message}", file=sys.stderr)


def main(argv=None) -> int:
    """Run ``remprop`` with ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    Bad input -- argparse errors, ``ValueError`` from the library, an output directory
    that cannot be written -- prints one line ``remprop CMD: error: ...`` on stderr and
    returns 2; any other exception prints one line and returns 1 (set ``REMPROP_DEBUG=1``
    to get the traceback instead). ``--help`` and ``--version`` return 0.
    """
    argv = sys.argv[1:] if argv is None else [str(word) for word in argv]
    command = _command_name(argv)
    prog = f"remprop {command}" if command in COMMANDS else "remprop"
    debug = bool(os.environ.get(DEBUG_VARIABLE))
    try:
        return _dispatch(argv, command)
    except CommandLineError as err:
        _report(err.prog or prog, err)
        return 2
    except ValueError as err:
        if debug:
            raise
        _report(prog, _point_at_option(_one_line(err)))
        return 2
    except SystemExit as exit_:  # --help and --version
        code = exit_.code
        return code if isinstance(code, int) else (0 if code is None else 1)
    except KeyboardInterrupt:
        _report(prog, "interrupted")
        return 130
    except BrokenPipeError:
        # stdout closed early (e.g. piped into `head`): silence the flush at exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except Exception as err:  # noqa: BLE001 - the command line never shows a traceback
        if debug:
            raise
        _report(prog, f"unexpected {type(err).__name__}: {_one_line(err)} "
                      f"(set {DEBUG_VARIABLE}=1 to see the traceback)")
        return 1


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
