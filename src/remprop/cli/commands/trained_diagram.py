"""``remprop trained-diagram``: train a (beta, alpha_SA) grid and set it beside the theory.

Needs the ``validation`` extra (torch, tokenizers); dask (the ``distributed`` extra) runs the
cells in parallel. The parser is built without them; :mod:`remprop.validation` is imported
inside the run function, and a missing extra is one line with status 2.

Everything is checked before the folder is touched: the inputs, the corpus's vocabulary,
the output files, a folder holding another grid (naming the options that differ) and the
estimated memory and time of all the runs (``--max-memory``, ``--max-seconds``). A cell
whose training diverges is an outcome (``diverged``), not an error.
"""
from __future__ import annotations

import os

from ..converters import count, layer_count, open_unit_real, positive_real
from ..errors import CommandLineError, validation_extra
from ..options import (ARCHITECTURE_OPTIONS, add_architecture_arguments, add_cluster_options, add_command,
                       add_grid_options, add_output_options, add_progress_option, add_seeds_option, add_work_limit_options,
                       point_at_option)
from ..output import describe, dumps, run_inputs, show_progress, writable_directory, writable_file
from .training import TRAIN_OPTIONS, check_training_work, training_architecture

__all__ = ["add_trained_diagram_parser", "run_trained_diagram"]

#: Option of each training or grid parameter, to name it in an error message.
OPTIONS = {**TRAIN_OPTIONS, "seeds": "--seeds", "betas": "--beta", "alphas": "--alpha", "alpha_sa": "--alpha",
           "threshold": "--threshold", "threads": "--threads", "workers": "--workers", "scheduler": "--scheduler",
           "out": "--out", "theory": "--theory", "max_seconds": "--max-seconds", "max_memory": "--max-memory",
           "batch": "--batch-cells"}


def add_trained_diagram_parser(commands):
    parser = add_command(commands, "trained-diagram", run_trained_diagram,
                         help="trained trainability diagram: train a (beta, alpha_SA) grid of short masked-LM runs "
                              "(needs the validation extra)")
    grid = parser.add_argument_group("grid")
    add_grid_options(grid, betas="0.25,1,4", alphas="0.2,1")
    grid.add_argument("--depth", type=layer_count, default=4, metavar="L", help="blocks L (default: %(default)s)")
    # one seed by default, not SIMULATION_SEEDS: each seed is a whole training run of every cell
    add_seeds_option(grid, 1, what="training runs per cell")
    from remprop.theory import DEFAULT_THRESHOLD

    grid.add_argument("--threshold", type=open_unit_real, default=DEFAULT_THRESHOLD, metavar="RHO",
                      help="rank-collapse threshold in (0, 1) on the token cosine after the last block at init "
                           "(default: %(default)s, the theory's)")
    grid.add_argument("--theory", choices=("auto", "finite-T", "asymptotic"), default="auto",
                      help="prediction to compare with: finite-T attention at the trained T, or T -> infinity "
                           "(default: auto = finite-T)")
    train = parser.add_argument_group("training (every cell)")
    train.add_argument("--width", type=count(2), default=64, metavar="D", help="model width d (default: %(default)s)")
    train.add_argument("--seq-len", type=count(2), default=64, metavar="T",
                       help="tokens per training sequence T (default: %(default)s)")
    train.add_argument("--steps", type=count(1), default=300, metavar="N",
                       help="optimiser steps (default: %(default)s)")
    train.add_argument("--lr", type=positive_real, default=1e-3, help="AdamW peak learning rate (default: %(default)s)")
    train.add_argument("--batch-size", type=count(1), default=32, metavar="N",
                       help="sequences per step (default: %(default)s)")
    train.add_argument("--vocab-size", type=count(64), default=4096, metavar="V",
                       help="BPE vocabulary of the corpus (default: %(default)s)")
    train.add_argument("--eval-every", type=count(1), default=None, metavar="N",
                       help="test loss every N steps (default: steps / 10)")
    train.add_argument("--threads", type=count(1), default=1, metavar="N",
                       help="torch CPU threads per cell (default: %(default)s, fixed so that results are reproducible)")
    train.add_argument("--batch-cells", type=count(1), default=1, metavar="N",
                       help="train up to N cells of one alpha_SA row, with all their seeds, as one stacked model "
                            "(each run equals its one-at-a-time run to float rounding; still written and resumed "
                            "cell by cell; default: %(default)s, one run at a time)")
    train.add_argument("--device", default="auto", help="auto (each worker's GPU where there is one), cpu or "
                                                        "cuda[:n] (default: auto)")
    add_output_options(parser, out_help="grid folder, created if needed; an existing one resumes cell by cell")
    parser.add_argument("--json", action="store_true", help="print a JSON summary instead of text")
    add_cluster_options(parser)
    add_progress_option(parser)
    add_work_limit_options(parser)
    add_architecture_arguments(parser, alpha_sa=False, theory_seq_len=False)


def _differences(stored: dict, wanted: dict, args) -> list:
    """The options whose values differ between a folder's grid manifest and this run's."""
    out = []
    for key in sorted(set(stored) | set(wanted)):
        old, new = stored.get(key), wanted.get(key)
        if key == "config" and isinstance(old, dict) and isinstance(new, dict):
            out += _differences(old, new, args)
        elif key == "arch" and isinstance(old, dict) and isinstance(new, dict):
            out += [f"{ARCHITECTURE_OPTIONS.get(k, k)}: stored {old.get(k)!r}, asked {new.get(k)!r}"
                    for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
        elif old != new:
            option = OPTIONS.get(key, key)
            if key == "eval_every" and args.eval_every is None:
                option += " (steps / 10 unless set)"
            out.append(f"{option}: stored {old!r}, asked {new!r}")
    return out


def _check_folder(directory, spec, args):
    """One line naming the options that differ when ``directory`` holds another trained grid."""
    from remprop.validation.experiments.cell_store import stored_manifest

    stored = stored_manifest(directory)
    if stored is not None and stored.get("format") == spec.manifest()["format"]:
        differences = _differences(stored, spec.manifest(), args)
        if differences:
            raise CommandLineError(f"argument --out: {directory} holds a trained grid of other settings "
                                   f"({'; '.join(differences)}); use another folder or the same settings")


def run_trained_diagram(args) -> int:
    """Trained trainability diagram: train every cell of a (beta, alpha_SA) grid and set it beside the theory.

    Each cell is a short masked-LM training run per seed (AdamW, linear warm-up schedule, real
    text) with that query/key scale and attention skip strength, written to OUT/cells/ as it
    finishes (an interrupted grid resumes cell by cell; two runs on one folder train each cell
    once). A cell is trainable when its trained fraction f = (U - L) / (U - R) is at least 3/4
    (L its final test loss, U the unigram loss, R the best cell's loss); a cell that did not
    train is called entropy-collapsed when some layer's attention entropy at init is below
    (1/2) log T, else rank-collapsed when its token cosine after the last block at init is
    above the threshold. Writes OUT/trained_diagram.png, .npz and .json with the agreement against
    the theory's phases, at init and with the learning-rate window at --lr (cells trainable at init
    whose window excludes the rate are expected not to train). Needs the validation extra.
    """
    import numpy as np

    arch = training_architecture(args)
    directory = writable_directory(args.out)
    for ext in ("png", "npz", "json"):
        writable_file(directory / f"trained_diagram.{ext}", "--out")
    with validation_extra():
        from remprop.validation.experiments import distributed
        from remprop.validation.training import TrainConfig, masked_lm_corpus
        from remprop.validation.training.trained_diagram import TrainedDiagram
        from remprop.validation.training.trained_grid import (TrainedGridSpec, load_trained_records,
                                                              run_trained_grid)

    try:
        config = TrainConfig(arch=arch, depth=args.depth, width=args.width, seq_len=args.seq_len,
                             batch_size=args.batch_size, steps=args.steps, lr=args.lr, vocab_size=args.vocab_size,
                             eval_every=args.eval_every or max(args.steps // 10, 1), device=args.device)
        spec = TrainedGridSpec(config, np.asarray(args.beta, dtype=float), np.asarray(args.alpha, dtype=float),
                               args.seeds, args.threshold, args.threads)
        corpus = masked_lm_corpus(config.vocab_size)
        corpus.check_seq_len(config.seq_len)
    except ValueError as err:
        raise CommandLineError(point_at_option(err, OPTIONS)) from None
    _check_folder(directory, spec, args)
    runs = len(spec.cells()) * len(spec.seeds)
    parallel = args.workers if args.workers is not None else \
        ((os.cpu_count() or 1) if distributed.dask_installed() else 1)
    try:
        check_training_work(args, spec.run_config(0, 0, spec.seeds[0]),
                            corpus.vocab_size, runs=runs, parallel=parallel or 1,
                            task=f"training {runs} run(s) of {config.steps} steps, depth {config.depth}, width "
                                 f"{config.width}, {config.batch_size} x {config.seq_len} tokens")
        report = run_trained_grid(spec, directory, workers=args.workers, scheduler=args.scheduler,
                                  progress=show_progress(args), batch=args.batch_cells)
        diagram = TrainedDiagram.from_records(spec, load_trained_records(spec, directory), theory=args.theory)
    except ValueError as err:
        raise CommandLineError(point_at_option(err, OPTIONS)) from None
    files = [str(path) for path in diagram.save(directory / "trained_diagram")]
    if args.json:
        print(dumps({"files": files, "agreement": diagram.agreement,
                     "agreement_trainable": diagram.agreement_trainable, "cells": int(diagram.phase.size),
                     "agreement_at_rate": diagram.agreement_at_rate,
                     "agreement_trainable_at_rate": diagram.agreement_trainable_at_rate,
                     "predicted_phase_at_rate": diagram.predicted_at_rate(),
                     "theory": diagram.theory, "confusion_predicted_vs_trained": diagram.confusion(),
                     "trained_phase": diagram.phase, "predicted_phase": diagram.predicted.phase,
                     "final_test_loss": diagram.final_test_loss, "trained_fraction": diagram.fraction,
                     "unigram_loss": diagram.unigram_loss, "reference_loss": diagram.reference_loss,
                     "backend": report.backend, "cells_computed": report.cells_computed,
                     "cells_reused": report.cells_reused, "elapsed_s": report.elapsed_s,
                     "beta": spec.betas, "alpha": spec.alphas, **run_inputs(args, arch)}))
        return 0
    print(f"trained diagram: {describe(arch, args.depth, spec.threshold)}")
    print(f"grid: {len(spec.betas)} betas x {len(spec.alphas)} alphas, d={config.width}, T={config.seq_len}, "
          f"{config.steps} steps, {len(spec.seeds)} seed(s) per cell")
    print(f"cells: {report.cells_computed} trained, {report.cells_reused} already on disk; backend {report.backend}; "
          f"{report.elapsed_s:.1f} s")
    print(diagram.summary())
    print("wrote " + ", ".join(files))
    return 0
