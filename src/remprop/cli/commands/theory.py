"""``remprop diagram``, ``remprop min-alpha`` and ``remprop propagate``: the theory alone.

Each ``add_*_parser(commands)`` adds a sub-command and sets its ``handler``; each
``run_*(args)`` takes the parsed options and returns the exit status. Heavy imports
(NumPy, the diagrams package, matplotlib) happen inside the commands, so that a command
pays only for what it uses: ``min-alpha`` never imports matplotlib.
"""
from __future__ import annotations

from pathlib import Path

from ..converters import GRID_SYNTAX, count, grid_of, positive_real
from ..errors import CommandLineError
from ..limits import check_work
from ..options import (ARCHITECTURE_OPTIONS, add_architecture_arguments, add_command, add_grid_options,
                       add_output_options, add_progress_option, add_run_options, add_threads_option, add_work_limit_options,
                       architecture_from_args, work_limits)
from ..output import (FIGURE_SECONDS, describe, dumps, format_number, format_table, progress_bar, run_inputs,
                      show_progress, writable_directory)

__all__ = ["add_diagram_parser", "add_min_alpha_parser", "add_propagate_parser",
           "run_diagram", "run_min_alpha", "run_propagate", "check_rope_work"]


# -- the learning rate (docs/theory.md section 20) ------------------------------------------
#: Defaults of --steps and --width (remprop train's), which apply with --lr only.
LR_STEPS, LR_WIDTH = 300, 64


def add_learning_rate_options(parser):
    """``--lr LR --steps S --width D``: the learning-rate ceiling's axis (defaults: ``remprop train``'s)."""
    group = parser.add_argument_group("learning rate (docs/theory.md section 20)")
    group.add_argument("--lr", type=positive_real, default=None, metavar="LR",
                       help="AdamW peak learning rate > 0: also ask for the learning-rate ceiling (needs --seq-len)")
    group.add_argument("--steps", type=count(1), default=None, metavar="S",
                       help=f"AdamW steps of warm-up and linear decay, with --lr "
                            f"(default: {LR_STEPS}, remprop train's)")
    group.add_argument("--width", type=count(2), default=None, metavar="D",
                       help=f"model width d, with --lr (default: {LR_WIDTH}, remprop train's)")


def _check_learning_rate_options(args, arch) -> None:
    """``--lr`` needs a finite T (the logits scale with log T); ``--steps`` and ``--width`` apply with
    ``--lr`` only (given alone they would be ignored: refused). Fills in their defaults."""
    if args.lr is None:
        given = [option for option, value in (("--steps", args.steps), ("--width", args.width)) if value is not None]
        if given:
            raise CommandLineError(f"{given[0]} applies with --lr only (the learning-rate ceiling's "
                                   f"{'steps' if given[0] == '--steps' else 'model width'}): add --lr LR or drop "
                                   f"{given[0]}")
    if args.lr is not None and arch.seq_len is None:
        raise CommandLineError("--lr needs --seq-len T: the learning-rate ceiling's logits scale with log T "
                               "(docs/theory.md section 20)")
    args.steps = LR_STEPS if args.steps is None else args.steps
    args.width = LR_WIDTH if args.width is None else args.width


# -- remprop diagram ---------------------------------------------------------------------
def add_diagram_parser(commands):
    diagram = add_command(commands, "diagram", run_diagram,
                          help="trainability diagram over (beta, alpha_SA): PNG + npz + json")
    add_grid_options(diagram, betas="0.05:3:200", alphas="0:3:200")
    add_run_options(diagram, json_help="print a JSON summary (files, alpha_star, beta_critical) instead of text")
    add_output_options(diagram, name="trainability")
    add_progress_option(diagram)
    add_threads_option(diagram)
    add_work_limit_options(diagram)
    add_learning_rate_options(diagram)
    add_architecture_arguments(diagram, alpha_sa=False)


def run_diagram(args) -> int:
    """Trainability diagram of a depth-L stack over the query/key scale beta and alpha_SA.

    alpha_SA is the attention skip strength. Phases: trainable, rank collapse (final rho above
    the threshold), entropy collapse (beta above the critical beta of the first attention layer;
    pre-LN: the smallest over layers). With no options: the 60-layer post-LN BERT diagram.
    Writes OUT/NAME.png, OUT/NAME.npz and OUT/NAME.json and prints alpha* and beta_c. The time
    and memory are estimated first: above --max-seconds or --max-memory the run is refused.
    The PNG draws at most 1000 evenly spread betas and alphas (no more than its pixels); the
    npz and json files keep the whole grid.
    """
    import numpy as np

    arch = architecture_from_args(args)
    _check_learning_rate_options(args, arch)
    directory = writable_directory(args.out)
    from remprop.diagrams import trainability_diagram
    from remprop.diagrams.residual_strength import search_seconds
    from remprop.theory import work_estimates as work
    from remprop.theory.learning_rate import CEILING_BAND, ceiling_seconds

    betas = np.asarray(args.beta, dtype=float)
    alphas = np.asarray(args.alpha, dtype=float)
    check_work(f"a diagram of {betas.size} x {alphas.size} cells at depth {args.depth}",
               seconds=(work.run_seconds(arch, betas.size * alphas.size, args.depth)
                        + search_seconds(arch, args.depth, betas.size)
               # --lr walks the grid once more (the ceiling of every cell)
               + (ceiling_seconds(betas.size * alphas.size, args.depth) if args.lr is not None else 0.0)
               + FIGURE_SECONDS),
               nbytes=work.diagram_bytes(betas.size, alphas.size), **work_limits(args))
    result = trainability_diagram(arch, betas, alphas, args.depth, args.threshold,
                                  q0=args.q0, rho0=args.rho0, progress=show_progress(args))
    stem = directory / args.name
    result.save(stem)
    png = Path(f"{stem}.png")
    rate = _rate_region(result, args, stem) if args.lr is not None else None
    _draw(result, png, rate)
    files = [str(path) for path in (png, Path(f"{stem}.npz"), Path(f"{stem}.json")) if path.exists()]
    if rate is not None:
        files.append(rate["file"])
    alpha_star = np.atleast_1d(np.asarray(result.alpha_star, dtype=float))
    beta_c = np.atleast_1d(np.asarray(result.beta_critical, dtype=float))
    undefined, note = _undefined_cells(result)
    if args.json:
        extra = {} if rate is None else {"lr": {key: value for key, value in rate.items() if key != "phase"}}
        print(dumps({"files": files, "beta": betas, "alpha_star": alpha_star, "beta_critical": beta_c,
                     "alpha": alphas, "undefined_cells": undefined, "note": note, **extra, **run_inputs(args, arch)}))
        return 0
    print(f"trainability diagram: {describe(arch, args.depth, args.threshold)}")
    print(f"grid: {betas.size} betas in [{format_number(betas.min())}, {format_number(betas.max())}], "
          f"{alphas.size} alphas in [{format_number(alphas.min())}, {format_number(alphas.max())}]")
    finite = beta_c[np.isfinite(beta_c)]
    if finite.size and np.ptp(finite) <= 1e-12 * abs(finite[0]):
        print(f"beta_c = {format_number(finite[0])} (entropy collapse above)")
    elif finite.size:
        print(f"beta_c from {format_number(finite.min())} to {format_number(finite.max())} over the grid "
              f"(entropy collapse above)")
    rows = [(format_number(betas[k]), format_number(alpha_star[k]), format_number(beta_c[k]))
            for k in work.spread_indices(betas.size, 9)]
    print(format_table(("beta", "alpha*", "beta_c"), rows))
    if rate is not None:
        print(f"at lr {format_number(args.lr)} ({args.steps} AdamW steps, d = {args.width}): "
              f"{rate['above_ceiling']} of "
              f"{rate['trainable_at_init']} cells trainable at initialisation are above the learning-rate ceiling "
              f"and {rate['below_floor']} below its floor (hatched, labelled 'trainable at init, lr above ceiling' and "
              "'trainable at init, lr below floor'; "
              "constants fitted on 300-step CPU runs, docs/theory.md section 20)")
        if rate["ceiling_range"] is not None:
            low, high = rate["ceiling_range"]
            print(f"learning-rate ceiling over the trainable cells: {format_number(low)} to {format_number(high)} "
                  f"(measured: the true ceiling {CEILING_BAND[0]:g} to {CEILING_BAND[1]:g} times the predicted one)")
    print("wrote " + ", ".join(files))
    if note is not None:
        print(f"note: {note}")
    return 0


def _undefined_cells(result):
    """(number of cells whose final cosine is nan, a note saying where and why), or (0, None)."""
    import numpy as np

    undefined = np.isnan(result.rho_final)
    count = int(undefined.sum())
    if count == 0:
        return 0, None
    i, j = np.argwhere(undefined)[0]
    return count, (f"{count} of {undefined.size} cells have no final cosine (nan; the first at alpha "
                   f"{format_number(result.alphas[i])}, beta {format_number(result.betas[j])}): the stream "
                   "vanished (q = p = 0) or left float64 (without post-LN, from alpha about 7e134); "
                   "they are drawn as rank-collapsed")


def _rate_region(result, args, stem) -> dict:
    """The diagram at ``--lr``: every cell's learning-rate ceiling and its phase at that rate, written to
    ``STEM.lr.json``; returns the summary (and the phases, for the figure)."""
    import numpy as np

    from remprop.diagrams.learning_rate import (LR_ABOVE_CEILING, LR_BELOW_FLOOR, LR_LABELS, diagram_window,
                                                phases_at_rate)
    from remprop.diagrams.phases import TRAINABLE

    floor, ceiling = diagram_window(result, args.width, args.steps)
    phase = phases_at_rate(result.phase, ceiling, args.lr, floor)
    path = Path(f"{stem}.lr.json")
    summary = {"lr": args.lr, "steps": args.steps, "width": args.width, "file": str(path),
               "labels": {str(code): label for code, label in LR_LABELS.items()},
               "trainable_at_init": int(np.sum(result.phase == TRAINABLE)),
               "above_ceiling": int(np.sum(phase == LR_ABOVE_CEILING)),
               "below_floor": int(np.sum(phase == LR_BELOW_FLOOR))}
    trainable = (result.phase == TRAINABLE) & np.isfinite(ceiling) & (ceiling > 0)
    summary["ceiling_range"] = ([float(ceiling[trainable].min()), float(ceiling[trainable].max())]
                                if trainable.any() else None)
    path.write_text(dumps({**summary, "betas": result.betas, "alphas": result.alphas, "phase": phase,
                           "ceiling": ceiling, "floor": floor}))
    return {**summary, "phase": phase}


def _draw(result, path: Path, rate=None) -> None:
    """Draw ``result.plot`` on an off-screen figure (no pyplot, no display needed); with ``rate`` (the
    ``--lr`` region) its cells above the ceiling hatched."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.0, 5.0), layout="constrained")
    ax = figure.add_subplot()
    result.plot(ax=ax)
    if rate is not None:
        from remprop.diagrams.learning_rate import draw_rate_region

        draw_rate_region(ax, result, rate["phase"], rate["lr"], rate["steps"], rate["width"])
    figure.savefig(path, dpi=150)


# -- remprop min-alpha -------------------------------------------------------------------
def add_min_alpha_parser(commands):
    min_alpha = add_command(commands, "min-alpha", run_min_alpha,
                            help="smallest alpha_SA that keeps a depth-L stack out of rank collapse")
    min_alpha.add_argument("--beta", type=grid_of(positive_real), default=grid_of(positive_real)("0.5"),
                           metavar="BETA", help=f"query/key scale(s) beta > 0: {GRID_SYNTAX} (default: 0.5)")
    add_run_options(min_alpha, json_help="print a JSON object with key alpha_star")
    add_progress_option(min_alpha)
    add_threads_option(min_alpha)
    add_work_limit_options(min_alpha, memory=False)
    add_learning_rate_options(min_alpha)
    add_architecture_arguments(min_alpha, alpha_sa=False)


def run_min_alpha(args) -> int:
    """Smallest attention skip strength alpha_SA that keeps a depth-L stack out of rank collapse.

    For each beta, the smallest alpha_SA for which the final-layer cosine rho stays at or below
    the threshold. JSON: an object with key alpha_star (a number for one beta, a list for
    several) and the inputs. The search's time is estimated first (the kernels' calibrated costs):
    above --max-seconds it is refused; a long one shows progress and stops on Ctrl-C.
    """
    import numpy as np

    from remprop.diagrams import ALPHA_MAX, residual_strength
    from remprop.diagrams.residual_strength import search_block_steps, search_seconds
    from remprop.theory import work_estimates as work
    from remprop.theory.learning_rate import ceiling_seconds

    arch = architecture_from_args(args)
    _check_learning_rate_options(args, arch)
    beta = np.asarray(args.beta, dtype=float) if args.beta.is_list else args.beta[0]
    check_work(f"min-alpha at depth {args.depth} for {np.size(beta)} beta(s)",
               seconds=search_seconds(arch, args.depth, np.size(beta))
               # --lr: a bisection of 60 halvings, each a walk of the stack per beta
               + (63 * ceiling_seconds(np.size(beta), args.depth) if args.lr is not None else 0.0),
               **work_limits(args))
    with progress_bar(args, total=search_block_steps(arch, args.depth, np.size(beta)), unit="block",
                      desc="min-alpha") as advance:
        alpha_star = residual_strength.alpha_star(arch, beta, args.depth, args.threshold, q0=args.q0, rho0=args.rho0,
                                                  progress=advance)
    at_rate = None
    if args.lr is not None:
        from remprop.diagrams.learning_rate import alpha_star_at_rate
        from remprop.theory import RunSettings

        run = RunSettings(arch, beta, args.depth, args.q0, args.rho0, args.threshold)
        at_rate = alpha_star_at_rate(run, args.lr, args.width, args.steps, alpha_star=alpha_star)
    if args.json:
        extra = {} if at_rate is None else {"alpha_star_at_lr": at_rate, "lr": args.lr, "steps": args.steps,
                                            "width": args.width}
        print(dumps({"alpha_star": alpha_star, "beta": beta, **extra, **run_inputs(args, arch),
                     "alpha_max": ALPHA_MAX}))
        return 0
    print(f"smallest alpha_SA: {describe(arch, args.depth, args.threshold)}")
    if at_rate is None:
        rows = [(format_number(b), format_number(a)) for b, a in
                zip(np.atleast_1d(beta), np.atleast_1d(alpha_star))]
        print(format_table(("beta", "alpha*"), rows))
    else:
        rows = [(format_number(b), format_number(a), format_number(r)) for b, a, r in
                zip(np.atleast_1d(beta), np.atleast_1d(alpha_star), np.atleast_1d(at_rate))]
        print(format_table(("beta", "alpha*", f"alpha* at lr {format_number(args.lr)}"), rows))
        print(f"alpha* at lr: also below the learning-rate ceiling for {args.steps} AdamW steps at d = {args.width} "
              "(inf: no alpha_SA up to alpha_max; fitted constants, docs/theory.md section 20)")
    if any(np.isinf(np.atleast_1d(alpha_star))):
        print(f"alpha* = inf: no alpha_SA up to {format_number(ALPHA_MAX)} keeps rho at or below the threshold")
    return 0


# -- remprop propagate -------------------------------------------------------------------
def add_propagate_parser(commands):
    propagate = add_command(commands, "propagate", run_propagate,
                            help="order parameters q, p, rho layer by layer")
    add_run_options(propagate, beta=True, threshold=False, json_help="print JSON lists instead of a table")
    add_progress_option(propagate)
    add_threads_option(propagate)
    add_work_limit_options(propagate)
    add_architecture_arguments(propagate, alpha_sa=True)


def run_propagate(args) -> int:
    """Propagate the order parameters (q, p) of the token simplex through L blocks.

    Prints q, p, rho = p/q per layer (layer 0 = input) and the critical beta of each attention
    input; beyond 1001 layers an evenly spread subset, computed without keeping the other layers
    (any depth runs in constant memory, with --progress and Ctrl-C between segments). JSON:
    lists layer, q, p, rho (length L+1) and beta_critical (length L). The estimated time and
    memory are checked first: above --max-seconds or --max-memory the run is refused.
    """
    import numpy as np

    from remprop.theory import propagate, propagate_at_layers, work_estimates as work

    check_rope_work(args)
    arch = architecture_from_args(args)
    shown = args.depth + 1 if args.json else min(args.depth + 1, TABLE_LAYERS)
    # the arrays kept, plus the JSON text of five numbers per layer (a Python float and ~50 characters each)
    nbytes = work.trajectory_bytes(1, shown) + (5 * 80 * shown if args.json else 0)
    check_work(f"propagate at depth {args.depth}{' with --json' if args.json else ''}",
               seconds=work.run_seconds(arch, 1, args.depth), nbytes=nbytes, **work_limits(args))
    layers = np.arange(args.depth + 1) if args.json else np.array(work.spread_indices(args.depth + 1, TABLE_LAYERS))
    short = (work.segment_layers(arch, 1, args.depth) >= args.depth
             and work.trajectory_bytes(1, args.depth + 1) <= work.SEGMENT_BYTES)
    if short:  # one kernel call either way: the whole trajectory
        trajectory = propagate(arch, args.beta, args.depth, q0=args.q0, rho0=args.rho0)
        q, p, rho, log2_q = (values[layers] for values in (trajectory.q, trajectory.p, trajectory.rho,
                                                            trajectory.log2_q))
        beta_c = np.r_[np.nan, trajectory.beta_critical][layers]
    else:
        with progress_bar(args, total=args.depth, unit="layer", desc="propagate") as advance:
            sampled = propagate_at_layers(arch, args.beta, layers, q0=args.q0, rho0=args.rho0, progress=advance)
        q, p, rho, beta_c, log2_q = sampled.q, sampled.p, sampled.rho, sampled.beta_critical, sampled.log2_q
    undefined, note = _undefined_cosine(arch, rho, layers)
    overflow, overflow_note = _overflowed_norm(q, rho, log2_q, layers)
    note = "; ".join(text for text in (note, overflow_note) if text) or None
    if args.json:
        print(dumps({"layer": layers.tolist(), "q": q, "p": p, "rho": rho, "log2_q": log2_q,
                     "beta_critical": beta_c[1:], "undefined_from_layer": undefined,
                     "overflow_from_layer": overflow, "note": note,
                     **run_inputs(args, arch, beta=args.beta)}))
        return 0
    print(f"order parameters layer by layer: {describe(arch, args.depth)}, "
          f"beta {format_number(args.beta)}")
    rows = [(str(layer), format_number(q[k], 8), format_number(p[k], 8), format_number(rho[k], 8),
             format_number(beta_c[k]) if layer else "-")
            for k, layer in enumerate(layers)]
    print(format_table(("layer", "q", "p", "rho", "beta_c"), rows))
    print("layer 0 is the input; beta_c is the critical beta of the layer's attention input")
    if len(layers) < args.depth + 1:
        print(f"{len(layers)} of {args.depth + 1} layers shown, evenly spread; --json gives all")
    if note is not None:
        print(f"note: {note}")
    return 0


def check_rope_work(args) -> None:
    """Refuse rotary positions whose mean correlation over ``--head-dim / 2`` frequencies would
    take longer than --max-seconds (:func:`~remprop.theory.work_estimates.rope_seconds`); checked
    before the Architecture is built, which already sums them."""
    from remprop.theory import work_estimates as work

    if getattr(args, "positions", None) == "rope" and getattr(args, "head_dim", None) is not None:
        check_work(f"the rotary correlation of a head of width {args.head_dim} (--head-dim)",
                   seconds=work.rope_seconds(args.head_dim), **work_limits(args))


#: Fields whose zero can make a sublayer and its skip both vanish (the stream's q = p = 0).
_VANISHING_FIELDS = ("alpha_sa", "sigma_v2", "sigma_b2", "sigma_o2", "alpha_mlp", "sigma_w2", "sigma_w2_out")


def _undefined_cosine(arch, rho, layers):
    """(first of ``layers`` whose rho is not finite, a note naming the likely cause), or (None, None).

    A stream whose sublayer and skip both give zero vanishes (q = p = 0); its cosine is
    0/0, reported as NaN and counted as rank collapse (the convention of
    :class:`remprop.theory.Architecture`, "Vanished stream").
    """
    import numpy as np

    bad = np.flatnonzero(~np.isfinite(rho))
    if bad.size == 0:
        return None, None
    zeros = [ARCHITECTURE_OPTIONS[field] for field in _VANISHING_FIELDS
             if getattr(arch, field) is not None and float(getattr(arch, field)) == 0.0]
    cause = f" ({', '.join(f'{flag} 0' for flag in zeros)})" if zeros else ""
    first = int(layers[bad[0]])
    return first, (f"rho is undefined (nan) from layer {first} on: the stream vanished{cause}, "
                   "q = p = 0 (a sublayer and its skip both give zero), or left float64")


def _overflowed_norm(q, rho, log2_q, layers):
    """(first of ``layers`` whose q reads inf with a finite rho, a note saying why), or (None, None).

    A pre-LN or no-LN stream grows like ``alpha**(2L)``; past float64's largest number (1.8e308)
    its q and p read inf, while the kernels carry the scale apart (docs/theory.md section 5):
    rho and ``log2 q`` stay exact.
    """
    import numpy as np

    big = np.flatnonzero(np.isinf(q) & np.isfinite(rho))
    if big.size == 0:
        return None, None
    first = int(layers[big[0]])
    return first, (f"q and p read inf from layer {first} on: their true values exceed float64's largest number "
                   f"(1.8e308; log2 q = {log2_q[big[0]]:.6g} at layer {first}); rho is exact (the scale is "
                   "carried apart), --json gives log2_q for every layer")


#: Most layers printed by ``remprop propagate`` (evenly spread, ends included).
TABLE_LAYERS = 1001


