"""``remprop acceptance``: the acceptance cases of docs/validation.md, measured and set against the theory.

Needs the ``validation`` extra (torch); :mod:`remprop.validation.experiments.acceptance` is imported
inside the run function, and a missing extra is reported as one line with status 2
(:func:`~remprop.cli.errors.validation_extra`). The parser is built without torch.
"""
from __future__ import annotations

import sys
from pathlib import Path

from ..converters import count, seed_list
from ..errors import CommandLineError, one_line, validation_extra
from ..limits import check_work
from ..options import (COMPARED_THEORIES_HELP, add_command, add_progress_option, add_threads_option,
                       add_work_limit_options, work_limits)
from ..output import dumps, show_progress, writable_directory, writable_file

__all__ = ["add_acceptance_parser", "run_acceptance_command"]

#: Sizes of the acceptance table of docs/validation.md (d, T, seeds, sequences per seed): the
#: issue asks for at least 4 initialisations; 4 understate the scatter of the deep and pre-LN
#: rows (docs/validation.md, "Twelve initialisations"), so the table uses 12.
FULL_SIZES = {"width": 720, "seq_len": 512, "seeds": 12, "sequences": 2}
#: Sizes of --quick (a smoke run of the machinery).
QUICK_SIZES = {"width": 32, "seq_len": 16, "seeds": 2, "sequences": 2}


def theory_list(text: str) -> tuple:
    """Converter of ``--theory``: a comma list among mean, gram, sampled, or ``auto``."""
    import argparse

    names = tuple(part.strip() for part in str(text).split(",") if part.strip())
    if names == ("auto",):
        return names
    if not names or len(set(names)) != len(names) or any(name not in ("mean", "gram", "sampled") for name in names):
        raise argparse.ArgumentTypeError("expected 'auto' or a comma list of distinct 'mean', 'gram', 'sampled', "
                                         f"got {text!r}")
    return names


def add_acceptance_parser(commands):
    parser = add_command(commands, "acceptance", run_acceptance_command,
                         help="the acceptance cases of docs/validation.md (text and Gaussian inputs, post/pre-LN): "
                              "simulate, set against the theory, write the table (needs the validation extra)")
    sizes = parser.add_argument_group("simulation (default: the sizes of docs/validation.md; --quick: tiny ones)")
    sizes.add_argument("--out", default="remprop-acceptance", metavar="DIR",
                       help="folder of the measurements, created if needed; an existing one resumes "
                            "(default: %(default)s)")
    sizes.add_argument("--quick", action="store_true",
                       help=f"tiny sizes for a smoke run: d={QUICK_SIZES['width']}, T={QUICK_SIZES['seq_len']}, "
                            f"{QUICK_SIZES['seeds']} seeds x {QUICK_SIZES['sequences']} sequences")
    sizes.add_argument("--width", type=count(2), default=None, metavar="D",
                       help=f"model width d (default: {FULL_SIZES['width']})")
    sizes.add_argument("--seq-len", dest="seq_len", type=count(2), default=None, metavar="T",
                       help=f"tokens per simulated sequence T; the theory runs at the same T "
                            f"(default: {FULL_SIZES['seq_len']})")
    sizes.add_argument("--seeds", type=seed_list, default=None, metavar="SEEDS",
                       help=f"initialisations: a count N or a list 'a,b,c' (default: {FULL_SIZES['seeds']})")
    sizes.add_argument("--sequences", type=count(1), default=None, metavar="N",
                       help=f"input sequences per seed (default: {FULL_SIZES['sequences']})")
    sizes.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                       help="simulation precision (default: %(default)s)")
    sizes.add_argument("--device", default="auto", help="auto (CUDA where available), cpu or cuda[:n] (default: auto)")
    add_threads_option(sizes, what="torch and numba CPU threads while simulating")
    table = parser.add_argument_group("theory and table")
    table.add_argument("--theory", type=theory_list, default=("auto",), metavar="NAMES",
                       help=f"comma list of theories: {COMPARED_THEORIES_HELP} (the last two: text cases only); "
                            "auto: mean and sampled where the Gram theory exists (default: auto)")
    table.add_argument("--draws", type=count(1), default=8, metavar="N",
                       help="Monte Carlo draws per attention layer of the Gram theory (default: %(default)s)")
    table.add_argument("--workers", type=count(0), default=None, metavar="N",
                       help="processes computing the theory (default: one per core; 0: this process)")
    table.add_argument("--measure-only", action="store_true", help="measure the cases, skip the theory and table")
    table.add_argument("--markdown", default=None, metavar="FILE",
                       help="write the table in Markdown to FILE (default: OUT/acceptance.md)")
    table.add_argument("--json", action="store_true", help="print the table as JSON instead of Markdown")
    add_progress_option(parser)
    add_work_limit_options(parser)


def _sizes(args) -> dict:
    base = QUICK_SIZES if args.quick else FULL_SIZES
    chosen = {name: getattr(args, name) for name in base}
    return {name: base[name] if value is None else value for name, value in chosen.items()}


def run_acceptance_command(args) -> int:
    """Measure the acceptance cases of docs/validation.md and set them against the theory.

    Cases: embedded pydoc text and Gaussian tokens, post-LN and pre-LN, alpha_SA in {1, 1.3},
    beta in {0.5, 1, 1.4} reported at depths 12, 30, 60 (one 60-layer simulation: the weights
    of layer l do not depend on the depth) and beta 3 at depth 12; d = 720, T = 512, 12 seeds x
    2 sequences. Each case is simulated (on CUDA where available) and written to
    OUT/cells/ as it finishes, so an interrupted run resumes and two runs on one folder share
    the cases. The theory curves ('mean': propagate from the measured mean input state at the
    simulated T; 'sampled', text cases only: the single-initialisation Gram chains of each
    sequence, averaged; 'gram': the mean Gram state) are computed on the CPU cores and cached
    under OUT/theory/. The table -- per case and depth: the largest
    absolute error of the theory's mean cosine over layers 1..L, its layer, 2 standard errors
    of the measured mean there, and pass (the error is at most max(0.02, 2 s.e.) at every
    layer) -- is written to --markdown (default OUT/acceptance.md) and printed. The memory of
    one case's simulation and of the theory's workers is estimated first, and --out and
    --markdown are checked: above --max-memory, or with a path that cannot be written, the run
    is refused before any measurement.
    """
    sizes = _sizes(args)
    directory = writable_directory(args.out, option="--out")
    # every output path is checked before the measurements
    markdown = (writable_file(args.markdown, option="--markdown") if args.markdown is not None
                else writable_file(directory / "acceptance.md", option="--out"))
    with validation_extra():
        from remprop.validation.experiments import acceptance as acc
        from remprop.validation.experiments import acceptance_table as tables
        from remprop.validation.text import pydoc_corpus

    theories = tables.available_theories() if args.theory == ("auto",) else args.theory
    corpus = pydoc_corpus().stream.size
    if sizes["seq_len"] > corpus:
        raise CommandLineError(f"argument --seq-len: the text cases take windows of T consecutive tokens of the "
                               f"pydoc corpus: T must be <= {corpus}, got {sizes['seq_len']}")
    _check_memory(args, sizes, () if args.measure_only else theories)
    say = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    progress = say if show_progress(args) else None  # a line per case, and the ETA over the cases
    try:
        acc.open_store(directory, **sizes, dtype=args.dtype)
    except ValueError as err:  # another size's folder: name the option, not the library's "out"
        message = one_line(err)
        raise CommandLineError(f"--out: {message.split(': ', 1)[1] if message.startswith('out: ') else message}")
    report = acc.run_acceptance(directory, **sizes, dtype=args.dtype,
                                device=None if args.device == "auto" else args.device,
                                threads=args.threads, progress=progress)
    say(f"measurements: {report.cells_computed} computed, {report.cells_reused} on disk, {report.elapsed_s:.1f} s")
    if args.measure_only:
        return 0
    table = tables.acceptance_table(directory, theories, draws=args.draws, workers=args.workers,
                                    progress=progress)
    text = tables.acceptance_markdown(table)
    markdown.write_text(text, encoding="utf-8")
    say(f"wrote {markdown}")
    print(dumps({"table": table, "markdown": str(markdown), "sizes": sizes, "theories": list(theories)})
          if args.json else text, end="" if not args.json else "\n")
    return 0


def _check_memory(args, sizes, theories) -> None:
    """Refuse an acceptance run whose simulation or theory would exceed --max-memory, or whose simulations
    would exceed --max-seconds (one line with the estimate).

    The simulation of one seed's ``sequences`` sequences through one block at a time
    (:func:`~remprop.theory.work_estimates.simulation_bytes`); the theory: the input Gram
    matrices of every sequence (``8 n T^2``) and, per worker process, the largest Gram-theory
    run (:func:`~remprop.theory.work_estimates.gram_theory_bytes`) at the cases' deepest depth.
    """
    import os

    from remprop.theory import work_estimates as work

    from remprop.validation.experiments.acceptance import ACCEPTANCE_CASES

    from .simulation import simulation_time

    width, seq_len, sequences = sizes["width"], sizes["seq_len"], sizes["sequences"]
    dtype_bytes = {"float32": 4, "float64": 8}[args.dtype]
    seeds = len(sizes["seeds"]) if isinstance(sizes["seeds"], (list, tuple)) else int(sizes["seeds"])
    check_work(f"simulating {sequences} sequence(s) of {seq_len} tokens of width {width} in {args.dtype} (--width, "
               "--seq-len, --sequences)", nbytes=work.simulation_bytes(width, seq_len, sequences, dtype_bytes),
               **work_limits(args))
    blocks = sum(case.depth for case in ACCEPTANCE_CASES)  # one simulation per case, at its deepest depth
    limits = work_limits(args)
    announce = limits.pop("announce")  # the estimate line once every bound has passed: a refusal is one line
    task = (f"simulating {len(ACCEPTANCE_CASES)} cases x {seeds} seed(s) of {sequences} sequence(s) (--seeds, "
            "--sequences, --width, --seq-len; cases already in --out are not redone)")
    seconds = seeds * simulation_time(args.device, width, seq_len, sequences, blocks)
    check_work(task, seconds=seconds, **limits)
    gram = [name for name in theories if name in ("gram", "sampled")]
    if gram:
        _check_gram_work(args, gram, seq_len, seeds, sequences, limits)
    check_work(task, seconds=seconds, announce=announce, **limits)


def _check_gram_work(args, gram, seq_len, seeds, sequences, limits) -> None:
    """Refuse Gram theories whose memory exceeds --max-memory (one line with the estimate)."""
    import os

    from remprop.theory import work_estimates as work
    from remprop.validation.experiments.acceptance import ACCEPTANCE_CASES

    depth = max(case.depth for case in ACCEPTANCE_CASES)
    workers = max(1, os.cpu_count() or 1) if args.workers is None else max(1, args.workers)
    one = max(work.gram_theory_bytes(seq_len, depth, args.draws, sampled=name == "sampled") for name in gram)
    check_work(f"the Gram theory with {args.draws} draws at T = {seq_len} on {workers} worker(s) (--draws, "
               "--seq-len, --workers)", nbytes=8 * seeds * sequences * seq_len ** 2 + workers * one, **limits)
