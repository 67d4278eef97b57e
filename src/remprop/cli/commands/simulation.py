"""``remprop sweep`` and ``remprop validate``: the theory against simulated networks.

Both need the ``validation`` extra (torch). Their parsers are built without it;
:mod:`remprop.validation` is imported inside the run functions, and a missing extra is
reported as one line with status 2 (:func:`~remprop.cli.errors.validation_extra`).

``--seq-len`` is the number of tokens of each simulated sequence, and in ``validate`` also the
theory's T (``--sim-seq-len`` and ``--theory-seq-len`` set them apart; without any, the theory
runs at ``T -> infinity``); the theory of ``sweep`` is chosen by ``--theory`` (finite-T at the
simulated T, or asymptotic).
The simulated stacks take their heads and query/key scaling from the Architecture
(``--heads``, ``--qk-scaling``), as the theory does.
"""
from __future__ import annotations

import contextlib
import os

from remprop.progress import progress_bar

from ..converters import count
from ..errors import CommandLineError, validation_extra
from ..limits import check_work
from ..options import (COMPARED_THEORIES_HELP, add_architecture_arguments, add_cluster_options, add_command, add_grid_options,
                       add_output_options, add_progress_option, add_run_options, add_simulation_options,
                       add_work_limit_options, architecture_from_args, simulated_seq_len, work_limits)
from ..output import describe, dumps, run_inputs, show_progress, writable_directory

__all__ = ["add_sweep_parser", "add_validate_parser", "run_sweep", "run_validate", "simulation_time"]


# -- remprop sweep -----------------------------------------------------------------------
def add_sweep_parser(commands):
    sweep = add_command(commands, "sweep", run_sweep,
                        help="measured trainability diagram: simulate a (beta, alpha_SA) grid "
                             "(needs the validation extra)")
    grid = sweep.add_argument_group("grid and simulation")
    add_grid_options(grid, betas="0.2:2.4:8", alphas="0.8:1.6:9")
    add_simulation_options(grid, width=128, sim_seq_len=128, inputs="synthetic", threads=1)
    grid.add_argument("--theory", choices=("auto", "finite-T", "asymptotic"), default="auto",
                      help="prediction to compare with: finite-T attention at the simulated T, or T -> infinity "
                           "(default: auto = finite-T where the theory has it)")
    add_run_options(sweep, json_help="print a JSON summary (files, agreement, cells) instead of text")
    add_output_options(sweep, out_help="sweep folder, created if needed; an existing one resumes")
    add_cluster_options(sweep)
    add_progress_option(sweep)
    add_work_limit_options(sweep)
    # the theory's T is --theory's choice (at the simulated T or infinite), not an option of its own
    add_architecture_arguments(sweep, alpha_sa=False, theory_seq_len=False)


def run_sweep(args) -> int:
    """Measured trainability diagram: simulate a (beta, alpha_SA) grid and set it beside the theory.

    A depth-L stack is simulated on every cell of the grid and each cell's measured phase is
    classified exactly as the theory classifies (rank collapse: measured final mean token cosine
    above the threshold; entropy collapse: beta above the critical beta sqrt(2/(q(q-p))) of the
    measured input of the first attention layer -- pre-LN and no LN: the smallest over layers),
    and draw measured against predicted with the agreement. Each cell is written to OUT/cells/
    as it finishes (atomic files), so an interrupted sweep resumes where it stopped;
    OUT/sweep.json pins the settings. Cells run on a dask LocalCluster (one single-threaded
    worker per core by default), on an existing cluster (--scheduler), or in this process
    (--workers 0, or without dask). Writes OUT/measured_diagram.png, .npz and .json. Needs the
    validation extra; dask comes with the distributed extra. The memory of one cell's
    simulation is estimated first: above --max-memory the sweep is refused.
    """
    import numpy as np

    arch = architecture_from_args(args)
    _check_simulation_memory(args, arch, batch=args.sequences)
    directory = writable_directory(args.out)
    with validation_extra():
        from remprop.validation import SimulatedStack  # noqa: F401 - loads torch: fails here, not in the workers
        from remprop.validation.experiments.measured_diagram import MeasuredDiagram
        from remprop.validation.experiments import distributed
        from remprop.validation.experiments.sweep import SweepSpec, load_records, run_sweep as sweep_cells

    cells = len(args.beta) * len(args.alpha)
    parallel = args.workers if args.workers is not None else \
        ((os.cpu_count() or 1) if distributed.dask_installed() and args.scheduler is None else 1)
    _check_simulation_time(args, f"a sweep of {cells} cells ({len(args.seeds)} seed(s) x {args.sequences} "
                                 f"sequence(s) each) on {max(parallel, 1)} worker(s)",
                           runs=cells * len(args.seeds), parallel=max(parallel, 1))

    spec = SweepSpec(arch=arch, betas=np.asarray(args.beta, dtype=float), alphas=np.asarray(args.alpha, dtype=float),
                     depth=args.depth, seeds=args.seeds, sequences=args.sequences, width=args.width,
                     seq_len=args.seq_len, threshold=args.threshold, q0=args.q0, rho0=args.rho0,
                     inputs=args.inputs, dtype=args.dtype, threads=args.threads)
    report = sweep_cells(spec, directory, workers=args.workers, scheduler=args.scheduler,
                         device=None if args.device == "auto" else args.device, progress=show_progress(args))
    diagram = MeasuredDiagram.from_records(spec, load_records(spec, directory), theory=args.theory)
    files = [str(path) for path in diagram.save(directory / "measured_diagram")]
    if args.json:
        print(dumps({"files": files, "agreement": diagram.agreement, "cells": int(diagram.phase.size),
                     "cells_agreeing": int(diagram.agrees.sum()), "theory": diagram.theory,
                     "confusion_predicted_vs_measured": diagram.confusion(),
                     "backend": report.backend, "workers": report.workers, "cells_computed": report.cells_computed,
                     "cells_reused": report.cells_reused, "elapsed_s": report.elapsed_s,
                     "cells_per_minute": report.cells_per_minute, "devices": list(diagram.devices),
                     "measured_phase": diagram.phase, "predicted_phase": diagram.predicted.phase,
                     "beta": spec.betas, "alpha": spec.alphas, **run_inputs(args, arch)}))
        return 0
    print(f"measured trainability diagram: {describe(arch, args.depth, args.threshold)}")
    print(f"grid: {len(spec.betas)} betas x {len(spec.alphas)} alphas, d={spec.width}, T={spec.seq_len}, "
          f"{len(spec.seeds)} seed(s) x {spec.sequences} sequence(s) per cell")
    rate = f", {report.cells_per_minute:.1f} cells/min" if report.cells_computed else ""
    print(f"cells: {report.cells_computed} computed, {report.cells_reused} already on disk; backend {report.backend}; "
          f"{report.elapsed_s:.1f} s{rate}; device(s) {', '.join(diagram.devices)}")
    print(diagram.summary())
    print("wrote " + ", ".join(files))
    return 0


# -- remprop validate --------------------------------------------------------------------
def add_validate_parser(commands):
    validate = add_command(commands, "validate", run_validate,
                           help="compare the theory with simulated networks (needs the validation extra)")
    add_run_options(validate, beta=True, threshold=False, json_help="print a JSON summary instead of the table")
    sim = validate.add_argument_group("simulation")
    add_simulation_options(sim, width=720, sim_seq_len=512, inputs="text", threads=None, theory_too=True)
    sim.add_argument("--d-ff", type=count(1), default=None, metavar="D", help="MLP hidden width (default: the width)")
    sim.add_argument("--causal", action="store_true", help="causal attention mask (decoder)")
    sim.add_argument("--batch-size", type=count(1), default=None, metavar="N", help="sequences per forward pass")
    sim.add_argument("--observable", choices=("cosine", "rho"), default="cosine",
                     help="measured mean pairwise cosine or Gram ratio p/q (default: %(default)s)")
    sim.add_argument("--theory", choices=("auto", "mean", "gram", "sampled"), default="auto",
                     help=f"theory set beside the measurements: {COMPARED_THEORIES_HELP}; 'auto' (default) the "
                          "chains for text inputs of an encoder, the mean-cosine maps otherwise")
    sim.add_argument("--gram-draws", type=count(1), default=8, metavar="N",
                     help="Monte Carlo draws (or chains) per attention layer of the Gram state (default: 8)")
    add_output_options(validate, name="validate")
    add_progress_option(validate)
    add_work_limit_options(validate)
    add_architecture_arguments(validate, alpha_sa=True, theory_seq_len="override")


def run_validate(args) -> int:
    """Simulate a depth-L stack (torch) and set the measured cosine of each layer beside the theory's.

    Writes OUT/NAME.png (theory line, measured dots with std error bars) and OUT/NAME.json
    (settings, per-layer table, errors, per-sequence measurements) and prints the per-layer
    table and the maximum and mean absolute error, and ends with one verdict line: agree or disagree
    by the package's one rule (:func:`remprop.validation.agreement.acceptance_error`), and the worst
    layer. Needs the validation extra: pip install
    'remprop[validation]'. The memory of a batch's simulation and of the Gram theory (its
    --gram-draws) is estimated first: above --max-memory the run is refused.
    """
    args.sim_seq_len = simulated_seq_len(args)
    if args.theory_seq_len is None:  # --seq-len sets both Ts; --theory-seq-len the theory's alone
        args.theory_seq_len = args.seq_len
    arch = architecture_from_args(args)
    if args.theory in ("gram", "sampled"):
        from remprop.theory.gram_state import gram_support_problem

        problem = gram_support_problem(arch)
        if problem is not None:
            raise CommandLineError(f"--theory {args.theory}: {problem}")
    # compare() simulates min(sequences, 16) sequences at a time unless --batch-size says otherwise
    _check_simulation_memory(args, arch, batch=args.batch_size or min(args.sequences, 16), d_ff=args.d_ff)
    _check_gram_memory(args, arch)
    _check_simulation_time(args, f"simulating {len(args.seeds)} seed(s) x {args.sequences} sequence(s) of "
                                 f"{args.sim_seq_len} tokens, width {args.width}, depth {args.depth}",
                           runs=len(args.seeds), d_ff=args.d_ff)
    directory = writable_directory(args.out)
    with validation_extra():
        from remprop.diagrams.comparison_figures import plot_layer_comparisons
        from remprop.validation import FigureResult, SimulationSettings, compare
        from remprop.validation.backend import torch_threads

        threads = contextlib.nullcontext() if args.threads is None else torch_threads(args.threads)
        show = show_progress(args)
        total = len(args.seeds) * args.sequences
        sim = SimulationSettings(width=args.width, seq_len=args.sim_seq_len, d_ff=args.d_ff, causal=args.causal,
                                 dtype=args.dtype, device=args.device, seeds=args.seeds, sequences=args.sequences,
                                 batch_size=args.batch_size, inputs=args.inputs, q0=args.q0, rho0=args.rho0)
        with threads, progress_bar(total, enabled=show, desc="validate", unit="seq") as bar:
            comparison = compare(arch, args.beta, args.depth, sim=sim, observable=args.observable,
                                 progress=bar.update, theory=args.theory, gram_draws=args.gram_draws)
    settings = comparison.settings
    ax = plot_layer_comparisons([comparison], title=(
        f"{arch.norm}-LN, {arch.attention}, beta={settings['beta']:g}, d={settings['width']}, "
        f"T={settings['seq_len']}, {comparison.samples} sequences"))
    paths = FigureResult(args.name, ax.figure, comparison.to_dict()).save(directory)
    if args.json:
        print(dumps({"files": paths, "max_abs_error": comparison.max_abs_error,
                     "mean_abs_error": comparison.mean_abs_error, "observable": comparison.observable,
                     "agreement": comparison.agreement(), "verdict": comparison.verdict(),
                     "elapsed_s": comparison.elapsed, "settings": settings, "table": comparison.table()}))
        return 0
    print(f"validate: {describe(arch, args.depth)}, beta {settings['beta']:g}")
    print(f"{'layer':>5} {'theory':>8} {'measured':>9} {'std':>8} {'error':>8}")
    for row in comparison.table():
        print(f"{row['layer']:5d} {row['theory_rho']:8.4f} {row['measured_mean']:9.4f} "
              f"{row['measured_std']:8.4f} {row['error']:8.4f}")
    print(comparison.summary())
    print(f"wrote {paths['png']} and {paths['json']}")
    print(comparison.verdict())  # the last line: agree or not, by which rule, and where it is worst
    return 0


def _check_simulation_memory(args, arch, *, batch, d_ff=None):
    """Refuse a simulation whose tensors would exceed --max-memory (one line with the estimate)."""
    from remprop.theory import work_estimates as work

    nbytes = work.simulation_bytes(args.width, simulated_seq_len(args), batch, {"float32": 4, "float64": 8}[args.dtype],
                                   d_ff=d_ff, heads=arch.heads)
    check_work(f"simulating {batch} sequence(s) of {simulated_seq_len(args)} tokens of width {args.width} "
               f"in {args.dtype}", nbytes=nbytes, **work_limits(args))


def simulation_time(device, width, seq_len, batch, depth, *, d_ff=None, passes=1) -> float:
    """Estimated seconds of one simulation on ``device`` (``"auto"``/None: CUDA where available):
    :func:`~remprop.theory.work_estimates.simulation_seconds` at the float32 matrix-product rate
    measured on the device (:func:`~remprop.validation.training.work.simulation_flop_rate`).
    Needs the validation extra."""
    from remprop.theory import work_estimates as work

    with validation_extra():
        from remprop.validation.backend import resolve_device
        from remprop.validation.training.work import simulation_flop_rate
    try:
        resolved = resolve_device(None if device in (None, "auto") else device)
    except ValueError as err:
        raise CommandLineError(f"argument --device: {err}") from None
    return work.simulation_seconds(width, seq_len, batch, depth, d_ff=d_ff, passes=passes,
                                   flops_per_second=simulation_flop_rate(resolved))


#: One-time cost of a simulating command beside its simulations on a quiet machine (the machine's load multiplies
#: it): importing torch and the simulated stack, 2.0 s of CPU time beside 0.5 s for Python and the command line
#: (:func:`startup_seconds`; 4-12 s of wall time from quiet to load 8), then its figure
#: (:data:`~remprop.cli.output.FIGURE_SECONDS`). Small simulations (``validate --depth 4 --width 128``) spend most
#: of their time there: their estimate had read 0.04 s for a run of 26 s.
TORCH_IMPORT_SECONDS = 2.0


#: One-time cost of simulating a real model (``check --simulate``) on a quiet machine: importing transformers and
#: building the model at random init, 2.3-2.4 s of CPU time (a 4-layer BERT of width 128 after torch, the shared
#: two-core machine at load 5); uncounted, ``check bert-48 --simulate --depth 4 --width 128 --seq-len 64`` took
#: 2.7x its estimate (benchmarks/bench_estimates.py; benchmarks/bench_startup.py times it again).
MODEL_BUILD_SECONDS = 2.3


#: One-time cost of a training run's first optimiser on a quiet machine: torch's first AdamW of a process imports
#: ``torch._dynamo``, 0.8 s of CPU time (benchmarks/bench_startup.py, ``optimiser``), which the training's first
#: step waits for; with the torch import and the figure it was most of the 4.2x by which ``train --depth 4
#: --width 32 --steps 100`` outran its estimate of the training alone.
OPTIMISER_IMPORT_SECONDS = 0.8


def startup_seconds(figure=True, model=False, optimiser=False) -> float:
    """The one-time costs of a simulating or training command still to come: importing torch (unless this
    process has), with ``model`` importing transformers and building the model (unless transformers is
    imported), with ``optimiser`` the first optimiser's import of ``torch._dynamo`` (unless imported) and, with
    ``figure``, its figure (:data:`TORCH_IMPORT_SECONDS`, :data:`MODEL_BUILD_SECONDS`,
    :data:`OPTIMISER_IMPORT_SECONDS`, :data:`~remprop.cli.output.FIGURE_SECONDS`). A command calls it when it
    starts, before anything it runs imports torch: the estimate it prints later counts these seconds."""
    import sys

    from ..output import FIGURE_SECONDS

    return ((0.0 if "torch" in sys.modules else TORCH_IMPORT_SECONDS) + (FIGURE_SECONDS if figure else 0.0)
            + (MODEL_BUILD_SECONDS if model and "transformers" not in sys.modules else 0.0)
            + (OPTIMISER_IMPORT_SECONDS if optimiser and "torch._dynamo" not in sys.modules else 0.0))


def _check_simulation_time(args, task, *, runs, parallel=1, d_ff=None):
    """Refuse simulations estimated above --max-seconds (one line with the estimate), and print the
    estimate: ``runs`` simulations of --sequences sequences through --depth blocks
    (:func:`simulation_time`), ``parallel`` at a time, and the command's one-time costs
    (:func:`startup_seconds`)."""
    startup = startup_seconds()  # before simulation_time, which imports torch
    seconds = simulation_time(args.device, args.width, simulated_seq_len(args), args.sequences, args.depth, d_ff=d_ff)
    check_work(task, seconds=startup + runs * seconds / parallel, **work_limits(args))


def _check_gram_memory(args, arch):
    """Refuse a Gram-matrix theory (``--theory gram``/``sampled``, or ``auto`` on the text inputs of an
    encoder) whose draws would exceed --max-memory: one run per simulated sequence, one at a time
    (:func:`~remprop.theory.work_estimates.gram_theory_bytes`), beside the input Gram matrices of
    every sequence."""
    from remprop.theory import work_estimates as work
    from remprop.theory.gram_state import gram_support_problem

    kind = args.theory
    if kind == "auto":  # compare()'s rule
        kind = "sampled" if args.inputs == "text" and not args.causal and gram_support_problem(arch) is None else "mean"
    if kind not in ("gram", "sampled"):
        return
    sequences = len(args.seeds) * args.sequences
    nbytes = (8 * sequences * args.sim_seq_len ** 2
              + work.gram_theory_bytes(args.sim_seq_len, args.depth, args.gram_draws, sampled=kind == "sampled"))
    check_work(f"the {kind} Gram theory with {args.gram_draws} draws (--gram-draws) at T = {args.sim_seq_len}",
               nbytes=nbytes, **work_limits(args))
