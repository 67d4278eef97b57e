"""``remprop lr-sweep``: the measured learning-rate sweep (validation extra).

Trains (or resumes) every run of
:data:`remprop.validation.training.lr_sweep.LR_SWEEP_DESIGN` under ``--out``, each a one-cell
trained grid in its own folder (those of ``remprop trained-diagram`` with the same settings,
so either command resumes the other's runs), reads every run with the sweep's rule (trains
when its trained fraction against its family's best run is at least 3/4) and prints the
outcome table; writes ``OUT/lr_sweep.json``
(:func:`~remprop.validation.training.lr_sweep.save_outcomes`). The time of the runs not on
disk yet is estimated first and refused above ``--max-seconds``.
"""
from __future__ import annotations

import os

from ..converters import count
from ..errors import CommandLineError, validation_extra
from ..limits import check_work
from ..options import (add_command, add_output_options, add_progress_option, add_work_limit_options,
                       point_at_option, work_limits)
from ..output import dumps, show_progress, writable_directory, writable_file

__all__ = ["add_lr_sweep_parser", "run_lr_sweep_command"]

#: Parameter of a library error -> the option to name.
OPTIONS = {"max_seconds": "--max-seconds", "max_memory": "--max-memory", "out": "--out", "workers": "--workers",
           "threads": "--threads"}


def add_lr_sweep_parser(commands):
    parser = add_command(commands, "lr-sweep", run_lr_sweep_command,
                         help="the measured learning-rate sweep: train (or resume) its runs and print whether each "
                              "trains at its rate (needs the validation extra)")
    add_output_options(parser, out_help="sweep folder, created if needed; runs already there are reused")
    parser.add_argument("--json", action="store_true", help="print the outcome table as JSON instead of text")
    parser.add_argument("--design", choices=("reference", "scale"), default="reference",
                        help="reference: the first sweep (width 16-32, the ceiling's fit); scale: the sweep at "
                             "widths 32-512 and its recipe axes (hours on two cores, run in one "
                             "process) (default: %(default)s)")
    parser.add_argument("--workers", type=count(0), default=None, metavar="N",
                        help="dask LocalCluster worker processes training up to N runs at once; 0 = one run at a "
                             "time in this process (default: one per core, or 0 without dask)")
    parser.add_argument("--threads", type=count(1), default=1, metavar="N",
                        help="torch CPU threads per run (default: %(default)s, the sweep's recorded setting; "
                             "another value is another sweep)")
    add_progress_option(parser)
    add_work_limit_options(parser)


def run_lr_sweep_command(args) -> int:
    """Train or resume the learning-rate sweep and print its outcome table.

    Every run of the fixed design is a one-cell trained grid (alpha_SA, beta, depth, width,
    norm placement, attention, learning rate) in OUT/<group>/<run>; a run on disk is reused.
    A run trains at its rate when its trained fraction f = (U - L) / (U - R) is at least 3/4,
    R the best final test loss of the sweep's runs with the same norm placement, depth and
    width; a diverged run does not train. Writes OUT/lr_sweep.json. Needs the validation extra.
    """
    directory = writable_directory(args.out)
    table_path = writable_file(directory / "lr_sweep.json", "--out")
    with validation_extra():
        from remprop.validation.backend import resolve_device, torch_threads
        from remprop.validation.experiments import distributed
        from remprop.validation.training import lr_sweep
        from remprop.validation.training.work import training_bytes, training_seconds

    if args.design == "scale":
        return _run_scale(args, directory, writable_file(directory / "lr_scale.json", "--out"))
    design, training = lr_sweep.LR_SWEEP_DESIGN, lr_sweep.LR_SWEEP_TRAINING
    total = len(lr_sweep.design_runs(design))
    pending = [spec for _, spec in lr_sweep.pending_runs(directory, design, training=training, threads=args.threads)]
    workers = args.workers if args.workers is not None else \
        ((os.cpu_count() or 1) if distributed.dask_installed() else 0)
    parallel = max(1, min(workers, len(pending)))
    try:
        if pending:
            device = resolve_device("auto")
            with torch_threads(args.threads):  # the rate at the runs' own thread count
                seconds = sum(training_seconds(s.config, s.config.vocab_size, device) for s in pending) / parallel
            nbytes = max(training_bytes(s.config, s.config.vocab_size) for s in pending) * parallel
            check_work(f"learning-rate sweep: training {len(pending)} of {total} run(s) of "
                       f"{training['steps']} steps", seconds=seconds, nbytes=nbytes, **work_limits(args))
        report = lr_sweep.run_lr_sweep(directory, design, training=training, workers=workers, threads=args.threads,
                                       progress=show_progress(args))
        records = lr_sweep.lr_sweep_outcomes(directory, design, training=training, threads=args.threads)
    except ValueError as err:
        raise CommandLineError(point_at_option(err, OPTIONS)) from None
    lr_sweep.save_outcomes(records, table_path, design=design)
    if args.json:
        print(dumps({"files": [str(table_path)], "runs": records, "runs_total": report.runs_total,
                     "runs_computed": report.runs_computed, "runs_reused": report.runs_reused,
                     "elapsed_s": report.elapsed_s, "backend": report.backend}))
        return 0
    print(f"learning-rate sweep: {report.runs_total} runs, {report.runs_computed} trained, {report.runs_reused} "
          f"already on disk; backend {report.backend}; {report.elapsed_s:.1f} s")
    for line in lr_sweep.outcome_table_text(records):
        print(line)
    trains = sum(r["trains"] for r in records)
    print(f"{trains} of {len(records)} runs train at their rate (f >= 3/4 against the family's best run)")
    print(f"wrote {table_path}")
    return 0


def _run_scale(args, directory, table_path) -> int:
    """``--design scale``: the scale sweep (:mod:`remprop.validation.training.lr_scale`) under OUT/<recipe>/,
    its outcome table and summary (the measured ceiling of each family against the theory's) in
    OUT/lr_scale.json."""
    with validation_extra():
        from remprop.validation.backend import resolve_device, torch_threads
        from remprop.validation.training import lr_scale, lr_sweep
        from remprop.validation.training.work import training_bytes, training_seconds

    pending = [spec for _, _, spec in lr_scale.scale_pending(directory)]
    try:
        if pending:
            device = resolve_device("auto")
            with torch_threads(1):  # each run trains on one thread (run_scale_sweep)
                seconds = sum(training_seconds(s.config, s.config.vocab_size, device) for s in pending)
            nbytes = max(training_bytes(s.config, s.config.vocab_size) for s in pending)
            check_work(f"learning-rate scale sweep: training {len(pending)} run(s)", seconds=seconds, nbytes=nbytes,
                       **work_limits(args))
        lr_scale.run_scale_sweep(directory, progress=show_progress(args))
        records = lr_scale.scale_outcomes(directory)
    except ValueError as err:
        raise CommandLineError(point_at_option(err, OPTIONS)) from None
    summary = lr_scale.scale_summary(records)
    lr_sweep.save_outcomes(records, table_path, extra={"summary": summary})
    if args.json:
        print(dumps({"files": [str(table_path)], "runs": records, "summary": summary}))
        return 0
    for line in lr_sweep.outcome_table_text(records):
        print(line)
    for edge in summary["edges"]:
        print(f"{edge['recipe']:<9} {edge['norm']:<4} L {edge['depth']:<3} d {edge['width']:<4} "
              f"{edge['steps']:>5} steps: trained up to {edge['trained_up_to']:.3g}, failed from "
              f"{edge['failed_from']:.3g}; predicted ceiling {edge['predicted']:.3g} "
              f"({edge['low']:.2f} to {edge['high']:.2f} of it)")
    window, band = summary["window"]["all"], summary["band"]
    print(f"the theory's window reads {window['correct']} of {window['runs']} runs right "
          f"(AUROC {window['auroc']:.3f}); measured ceilings within {band[0]:.2f} to {band[1]:.2f} of the predicted")
    print(f"wrote {table_path}")
    return 0

