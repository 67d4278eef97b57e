"""``remprop diagram``, ``remprop min-alpha`` and ``remprop propagate``: the theory alone.

Each ``add_*_parser(commands)`` adds a sub-command and sets its ``handler``; each
``run_*(args)`` takes the parsed options and returns the exit status. Heavy imports
(NumPy, the diagrams package, matplotlib) happen inside the commands, so that a command
pays only for what it uses: ``min-alpha`` never imports matplotlib.
"""
from __future__ import annotations

from pathlib import Path

from ..converters import GRID_SYNTAX, grid_of, positive_real
from ..options import (ARCHITECTURE_OPTIONS, add_architecture_arguments, add_command, add_grid_options,
                       add_output_options, add_progress_option, add_run_options, architecture_from_args)
from ..output import describe, dumps, format_number, format_table, run_inputs, show_progress, writable_directory

__all__ = ["add_diagram_parser", "add_min_alpha_parser", "add_propagate_parser",
           "run_diagram", "run_min_alpha", "run_propagate"]


# -- remprop diagram ---------------------------------------------------------------------
def add_diagram_parser(commands):
    diagram = add_command(commands, "diagram", run_diagram,
                          help="trainability diagram over (beta, alpha_SA): PNG + npz + json")
    add_grid_options(diagram, betas="0.05:3:200", alphas="0:3:200")
    add_run_options(diagram, json_help="print a JSON summary (files, alpha_star, beta_critical) instead of text")
    add_output_options(diagram, name="trainability")
    add_progress_option(diagram)
    add_architecture_arguments(diagram, alpha_sa=False)


def run_diagram(args) -> int:
    """Trainability diagram of a depth-L stack over the query/key scale beta and alpha_SA.

    alpha_SA is the attention skip strength. Phases: trainable, rank collapse (final rho above
    the threshold), entropy collapse (beta above the critical beta of the first attention layer;
    pre-LN: the smallest over layers). With no options: the 60-layer post-LN BERT diagram.
    Writes OUT/NAME.png, OUT/NAME.npz and OUT/NAME.json and prints alpha* and beta_c.
    """
    import numpy as np

    arch = architecture_from_args(args)
    directory = writable_directory(args.out)
    from remprop.diagrams import trainability_diagram

    betas = np.asarray(args.betas, dtype=float)
    alphas = np.asarray(args.alphas, dtype=float)
    result = trainability_diagram(arch, betas, alphas, args.depth, args.threshold,
                                  q0=args.q0, rho0=args.rho0, progress=show_progress(args))
    stem = directory / args.name
    result.save(stem)
    png = Path(f"{stem}.png")
    _draw(result, png)
    files = [str(path) for path in (png, Path(f"{stem}.npz"), Path(f"{stem}.json")) if path.exists()]
    alpha_star = np.atleast_1d(np.asarray(result.alpha_star, dtype=float))
    beta_c = np.atleast_1d(np.asarray(result.beta_critical, dtype=float))
    if args.json:
        print(dumps({"files": files, "beta": betas, "alpha_star": alpha_star, "beta_critical": beta_c,
                     "alpha": alphas, **run_inputs(args, arch)}))
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
            for k in _subsample(betas.size, 9)]
    print(format_table(("beta", "alpha*", "beta_c"), rows))
    print("wrote " + ", ".join(files))
    return 0


def _subsample(count, at_most):
    """At most ``at_most`` evenly spread indices of ``range(count)``, ends included."""
    if count <= at_most:
        return list(range(count))
    return sorted({round(k * (count - 1) / (at_most - 1)) for k in range(at_most)})


def _draw(result, path: Path) -> None:
    """Draw ``result.plot`` on an off-screen figure (no pyplot, no display needed)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.0, 5.0), layout="constrained")
    result.plot(ax=figure.add_subplot())
    figure.savefig(path, dpi=150)


# -- remprop min-alpha -------------------------------------------------------------------
def add_min_alpha_parser(commands):
    min_alpha = add_command(commands, "min-alpha", run_min_alpha,
                            help="smallest alpha_SA that keeps a depth-L stack out of rank collapse")
    min_alpha.add_argument("--beta", type=grid_of(positive_real), default=grid_of(positive_real)("0.5"),
                           metavar="BETA", help=f"query/key scale(s) beta > 0: {GRID_SYNTAX} (default: 0.5)")
    add_run_options(min_alpha, json_help="print a JSON object with key alpha_star")
    add_architecture_arguments(min_alpha, alpha_sa=False)


def run_min_alpha(args) -> int:
    """Smallest attention skip strength alpha_SA that keeps a depth-L stack out of rank collapse.

    For each beta, the smallest alpha_SA for which the final-layer cosine rho stays at or below
    the threshold. JSON: an object with key alpha_star (a number for one beta, a list for
    several) and the inputs.
    """
    import numpy as np

    from remprop.diagrams import ALPHA_MAX, min_residual_strength

    arch = architecture_from_args(args)
    beta = np.asarray(args.beta, dtype=float) if args.beta.is_list else args.beta[0]
    alpha_star = min_residual_strength(arch, args.depth, beta, args.threshold, q0=args.q0, rho0=args.rho0)
    if args.json:
        print(dumps({"alpha_star": alpha_star, "beta": beta, **run_inputs(args, arch), "alpha_max": ALPHA_MAX}))
        return 0
    print(f"smallest alpha_SA: {describe(arch, args.depth, args.threshold)}")
    rows = [(format_number(b), format_number(a)) for b, a in
            zip(np.atleast_1d(beta), np.atleast_1d(alpha_star))]
    print(format_table(("beta", "alpha*"), rows))
    if any(np.isinf(np.atleast_1d(alpha_star))):
        print(f"alpha* = inf: no alpha_SA up to {format_number(ALPHA_MAX)} keeps rho at or below the threshold")
    return 0


# -- remprop propagate -------------------------------------------------------------------
def add_propagate_parser(commands):
    propagate = add_command(commands, "propagate", run_propagate,
                            help="order parameters q, p, rho layer by layer")
    add_run_options(propagate, beta=True, threshold=False, json_help="print JSON lists instead of a table")
    add_architecture_arguments(propagate, alpha_sa=True)


def run_propagate(args) -> int:
    """Propagate the order parameters (q, p) of the token simplex through L blocks.

    Prints q, p, rho = p/q per layer (layer 0 = input) and the critical beta of each attention
    input; beyond 1001 layers an evenly spread subset. JSON: lists layer, q, p, rho (length
    L+1) and beta_critical (length L).
    """
    from remprop.theory import propagate

    arch = architecture_from_args(args)
    trajectory = propagate(arch, args.beta, args.depth, q0=args.q0, rho0=args.rho0)
    q, p, rho, beta_c = trajectory.q, trajectory.p, trajectory.rho, trajectory.beta_critical
    undefined, note = _undefined_cosine(arch, rho)
    if args.json:
        print(dumps({"layer": list(range(args.depth + 1)), "q": q, "p": p, "rho": rho,
                     "beta_critical": beta_c, "undefined_from_layer": undefined, "note": note,
                     **run_inputs(args, arch, beta=args.beta)}))
        return 0
    print(f"order parameters layer by layer: {describe(arch, args.depth)}, "
          f"beta {format_number(args.beta)}")
    layers = _subsample(args.depth + 1, TABLE_LAYERS)
    rows = [(str(layer), format_number(q[layer], 8), format_number(p[layer], 8), format_number(rho[layer], 8),
             format_number(beta_c[layer - 1]) if layer else "-")
            for layer in layers]
    print(format_table(("layer", "q", "p", "rho", "beta_c"), rows))
    print("layer 0 is the input; beta_c is the critical beta of the layer's attention input")
    if len(layers) < args.depth + 1:
        print(f"{len(layers)} of {args.depth + 1} layers shown, evenly spread; --json gives all")
    if note is not None:
        print(f"note: {note}")
    return 0


#: Fields whose zero can make a sublayer and its skip both vanish (the stream's q = p = 0).
_VANISHING_FIELDS = ("alpha_sa", "sigma_v2", "sigma_b2", "sigma_o2", "alpha_mlp", "sigma_w2", "sigma_w2_out")


def _undefined_cosine(arch, rho):
    """(first layer whose rho is not finite, a note naming the likely cause), or (None, None).

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
    return int(bad[0]), (f"rho is undefined (nan) from layer {int(bad[0])} on: the stream vanished{cause}, "
                         "q = p = 0 (a sublayer and its skip both give zero), or left float64")


#: Most layers printed by ``remprop propagate`` (evenly spread, ends included).
TABLE_LAYERS = 1001


