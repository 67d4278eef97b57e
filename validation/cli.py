"""``remprop validate``: simulate a transformer stack and set it beside the theory.

:func:`add_arguments` fills the sub-command's parser and :func:`run` executes it;
:mod:`remprop.cli` wires both in. This module imports no torch when it is imported (the
top-level command line builds its parser from it); :func:`run` imports the simulator.

Writes ``OUT/NAME.png`` (theory line, measured dots with std error bars) and
``OUT/NAME.json`` (settings, per-layer table, errors, per-sequence measurements) and
prints the per-layer table and the maximum and mean absolute error (``--json``: a JSON
summary instead). Bad input raises ``ValueError`` naming the parameter, which
:func:`remprop.cli.main` reports as one line with exit status 2.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

__all__ = ["add_arguments", "run"]


def _has(parser, flag):
    return flag in parser._option_string_actions  # noqa: SLF001 - argparse exposes no public lookup


def _add_architecture(parser):
    try:
        from remprop.cli import add_architecture_arguments
    except ImportError:  # pragma: no cover - the top-level command line ships with remprop
        add_architecture_arguments = None
    if add_architecture_arguments is not None:
        # --seq-len here is the simulated sequence length (an option of its own below).
        add_architecture_arguments(parser, seq_len=False)
        return
    from remprop.theory import ACTIVATIONS, ATTENTIONS, NORMS  # pragma: no cover

    group = parser.add_argument_group("architecture")  # pragma: no cover
    group.add_argument("--norm", choices=tuple(NORMS), default="post")
    group.add_argument("--attention", choices=tuple(ATTENTIONS), default="softmax")
    group.add_argument("--activation", choices=tuple(ACTIVATIONS), default="relu")
    for flag, default in (("--sigma-w2", 0.2), ("--sigma-b2", 4e-4), ("--sigma-v2", 0.2), ("--alpha-mlp", 1.0)):
        group.add_argument(flag, type=float, default=default)
    group.add_argument("--alpha", dest="alpha_sa", type=float, default=1.0)


def _architecture(args):
    try:
        from remprop.cli import architecture_from_args
    except ImportError:  # pragma: no cover
        from remprop.theory import Architecture

        return Architecture(norm=args.norm, attention=args.attention, activation=args.activation,
                            sigma_w2=args.sigma_w2, sigma_b2=args.sigma_b2, sigma_v2=args.sigma_v2,
                            alpha_sa=args.alpha_sa, alpha_mlp=args.alpha_mlp)
    return architecture_from_args(args)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the options of ``remprop validate`` to ``parser``.

    Architecture options come from :func:`remprop.cli.add_architecture_arguments`;
    the others set the simulation: ``--beta --depth --seq-len --width --d-ff --heads
    --causal --seeds --sequences --inputs --q0 --rho0 --dtype --device --batch-size
    --observable --threads --out --name --json --progress``.
    """
    if not _has(parser, "--norm"):
        _add_architecture(parser)
    sim = parser.add_argument_group("simulation")
    options = [
        ("--beta", dict(type=float, default=0.5, help="query/key scale beta > 0 (default: %(default)s)")),
        ("--depth", dict(type=int, default=60, metavar="L", help="number of blocks (default: %(default)s)")),
        ("--seq-len", dict(type=int, default=512, metavar="T", help="tokens per sequence (default: %(default)s)")),
        ("--width", dict(type=int, default=720, metavar="D", help="model width d (default: %(default)s)")),
        ("--d-ff", dict(type=int, default=None, metavar="D", help="MLP hidden width (default: the width)")),
        ("--heads", dict(type=int, default=1, metavar="H", help="attention heads (default: %(default)s)")),
        ("--causal", dict(action="store_true", help="causal attention mask (decoder)")),
        ("--seeds", dict(type=int, default=2, metavar="N",
                         help="initialisations, seeds 0..N-1 (default: %(default)s)")),
        ("--sequences", dict(type=int, default=2, metavar="N", help="input sequences per seed (default: %(default)s)")),
        ("--inputs", dict(choices=("text", "synthetic"), default="text",
                          help="embedded pydoc text windows or Gaussian tokens (default: %(default)s)")),
        ("--q0", dict(type=float, default=1.0, help="synthetic inputs: squared norm per coordinate (default: %(default)s)")),
        ("--rho0", dict(type=float, default=0.0, help="synthetic inputs: cosine of two tokens (default: %(default)s)")),
        ("--dtype", dict(choices=("float32", "float64"), default="float32", help="precision (default: %(default)s)")),
        ("--device", dict(default="auto", help="auto, cpu or cuda[:n] (default: %(default)s)")),
        ("--batch-size", dict(type=int, default=None, metavar="N", help="sequences per forward pass")),
        ("--observable", dict(choices=("cosine", "rho"), default="cosine",
                              help="measured mean pairwise cosine or Gram ratio p/q (default: %(default)s)")),
        ("--threads", dict(type=int, default=None, metavar="N", help="torch CPU threads (default: torch's)")),
        ("--out", dict(default="remprop-out", metavar="DIR", help="output directory (default: %(default)s)")),
        ("--name", dict(default="validate", help="file stem of the PNG and JSON (default: %(default)s)")),
        ("--json", dict(action="store_true", help="print a JSON summary instead of the table")),
        ("--progress", dict(action=argparse.BooleanOptionalAction, default=None,
                            help="progress bar on stderr (default: only when stderr is a terminal)")),
    ]
    for flag, kwargs in options:
        if not _has(parser, flag):
            sim.add_argument(flag, **kwargs)


def run(args) -> int:
    """Run ``remprop validate`` with parsed ``args``; return the exit status (0).

    Raises
    ------
    ValueError
        Bad input, naming the parameter (``remprop.cli.main`` prints it as one line, status 2).
    """
    import torch
    from tqdm import tqdm

    from .comparison import compare
    from .figures import FigureResult, plot_layer_comparisons

    if args.threads is not None:
        if args.threads < 1:
            raise ValueError(f"threads must be an integer >= 1, got {args.threads}")
        torch.set_num_threads(args.threads)
    if not args.name or os.sep in args.name or args.name in (".", ".."):
        raise ValueError(f"name must be a plain file stem, got {args.name!r}")
    arch = _architecture(args)
    show = sys.stderr.isatty() if args.progress is None else args.progress
    total = (args.seeds if isinstance(args.seeds, int) else len(args.seeds)) * args.sequences
    with tqdm(total=max(total, 0), disable=not show, desc="validate", unit="seq", file=sys.stderr) as bar:
        comparison = compare(arch, args.beta, args.depth, args.seq_len, args.width, args.seeds, args.sequences,
                             inputs=args.inputs, q0=args.q0, rho0=args.rho0, d_ff=args.d_ff, heads=args.heads,
                             causal=args.causal, dtype=args.dtype, device=args.device,
                             batch_size=args.batch_size, observable=args.observable, progress=bar.update)
    ax = plot_layer_comparisons([comparison], title=(
        f"{arch.norm}-LN, {arch.attention}, beta={comparison.settings['beta']:g}, "
        f"d={comparison.settings['width']}, T={comparison.settings['seq_len']}, {comparison.samples} sequences"))
    try:
        paths = FigureResult(args.name, ax.figure, comparison.to_dict()).save(args.out)
    except OSError as err:
        raise ValueError(f"out: cannot write into {args.out!r} ({err.strerror or err})") from None
    if args.json:
        summary = {"files": paths, "max_abs_error": comparison.max_abs_error,
                   "mean_abs_error": comparison.mean_abs_error, "observable": comparison.observable,
                   "elapsed_s": comparison.elapsed, "settings": comparison.settings, "table": comparison.table()}
        print(json.dumps(summary, indent=1))
        return 0
    print(f"{'layer':>5} {'theory':>8} {'measured':>9} {'std':>8} {'error':>8}")
    for row in comparison.table():
        print(f"{row['layer']:5d} {row['theory_rho']:8.4f} {row['measured_mean']:9.4f} "
              f"{row['measured_std']:8.4f} {row['error']:8.4f}")
    print(comparison.summary())
    print(f"wrote {paths['png']} and {paths['json']}")
    return 0
