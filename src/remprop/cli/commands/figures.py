"""``remprop figures``: the paper's reference figures, theory and simulation, into one folder."""
from __future__ import annotations

import argparse
import os
import textwrap

from ..converters import count
from ..errors import CommandLineError, one_line
from ..limits import check_work
from ..options import (add_command, add_output_options, add_progress_option, add_threads_option,
                       add_work_limit_options, work_limits)
from ..output import dumps, show_progress, writable_directory

__all__ = ["add_figures_parser", "run_figures"]


def _figure_registry():
    """The registry of reference figures: imported when used (it loads NumPy)."""
    from remprop.validation.experiments.paper_figures import make_figures, supported_figures

    return make_figures, supported_figures


def _check_figures_work(args) -> None:
    """Refuse figures estimated above --max-seconds or --max-memory (one line with the estimate),
    else print the estimate (:func:`~remprop.validation.experiments.figure_work.figures_seconds`,
    :func:`~remprop.validation.experiments.figure_work.figures_bytes`): before any figure is drawn."""
    from remprop.validation.experiments.figure_work import figures_bytes, figures_seconds

    device = None if args.device == "auto" else args.device
    try:
        seconds = figures_seconds(quick=args.quick, only=args.only, device=device, workers=args.workers,
                                  threads=args.threads)
    except ValueError as err:
        if not str(err).startswith("device"):
            raise
        raise CommandLineError(f"argument --device: {one_line(err)}") from None  # a device torch cannot use
    nbytes = figures_bytes(quick=args.quick, only=args.only, workers=args.workers)
    preset = "--quick" if args.quick else "the paper's sizes"
    check_work(f"{len(seconds)} figure(s) ({','.join(seconds)}) at {preset} (--only, --quick; training runs and "
               "sweep cells already in --out are not redone)", seconds=sum(seconds.values()), nbytes=nbytes,
               **work_limits(args))


def add_figures_parser(commands):
    _, supported_figures = _figure_registry()
    supported = supported_figures()
    lines = textwrap.wrap(
        "Regenerate the reference figures of the paper (docs/theory.md section 9) into DIR: for each, a PNG "
        "and the data behind it (JSON/npz), theory and simulation together, plus an index figures.json. "
        "Simulated parts need the validation extra (without it only the theory parts are drawn).", 79)
    lines += ["", "supported:"]
    lines += [f"  {k:>3}  {v}" for k, v in supported.items()]
    figures = add_command(commands, "figures", run_figures,
                          help="the paper's reference figures, theory and simulation (PNG + data)",
                          description="\n".join(lines), epilog=None,
                          formatter_class=argparse.RawDescriptionHelpFormatter)
    add_output_options(figures)
    figures.add_argument("--quick", action="store_true",
                         help="small sizes (d, T of 64-128, two seeds): about a quarter of an hour on two "
                              "cores (estimated before it starts) instead of the paper's sizes")
    figures.add_argument("--only", default=None, metavar="IDS",
                         help=f"comma list of figures to draw (default: all supported: {','.join(supported)})")
    figures.add_argument("--workers", type=count(0), default=0, metavar="N",
                         help="dask worker processes for the simulated sweep of Fig. 1c (default: 0, in this "
                              "process)")
    figures.add_argument("--device", default="auto",
                         help="simulation device: auto (CUDA when available), cpu or cuda[:n] (default: auto)")
    add_threads_option(figures, what="torch and numba CPU threads while simulating",
                       default_text="1 with --quick, all cores otherwise")
    figures.add_argument("--json", action="store_true", help="print the files and notes as JSON")
    add_progress_option(figures)
    add_work_limit_options(figures)


def run_figures(args) -> int:
    """Every reference figure (PNG + data), and the parts left out (no validation extra).

    The work is estimated first: above --max-seconds or --max-memory nothing is drawn."""
    _check_figures_work(args)
    directory = writable_directory(args.out)
    make_figures, supported_figures = _figure_registry()
    result = make_figures(directory, quick=args.quick, progress=show_progress(args), only=args.only,
                          device=None if args.device == "auto" else args.device, workers=args.workers,
                          threads=args.threads)
    if args.json:
        print(dumps({"files": [str(path) for path in result.paths], "quick": args.quick,
                     "figures": {k: [str(p) for p in v] for k, v in result.files.items()},
                     "notes": result.notes, "skipped": result.skipped, "elapsed_s": result.elapsed_s,
                     "index": str(result.index)}))
        return 0
    described = supported_figures()
    for figure_id, paths in result.files.items():
        print(f"figure {figure_id}: {described[figure_id]} ({result.elapsed_s[figure_id]:.1f} s)")
        for path in paths:
            print(f"  {os.fspath(path)}")
        notes = result.notes.get(figure_id, {})
        if "agreement" in notes:
            print(f"  measured vs predicted ({notes['theory']} theory): {notes['cells_agreeing']}/{notes['cells']} "
                  f"cells agree ({100 * notes['agreement']:.1f}%)")
    for figure_id, reason in result.skipped.items():
        print(f"figure {figure_id}: {reason}")
    print(f"index: {os.fspath(result.index)}")
    return 0
