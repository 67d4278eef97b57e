"""``remprop recipes``: the published depth recipes on the trainability diagram.

For a base architecture (the architecture options), a depth and a query/key scale, every
recipe of :data:`remprop.diagrams.recipes.RECIPES` (or those named by ``--only``) is applied
and the theory's verdict printed: the recipe's skip strength, branch variances and beta,
its phase, final cosine, critical beta and ``alpha*(L)``. Writes OUT/NAME.png (each recipe
on the diagram of its own architecture) and OUT/NAME.json.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from ..converters import count
from ..limits import check_work
from ..options import add_architecture_arguments, add_command, add_output_options, add_progress_option, \
    add_run_options, add_threads_option, add_work_limit_options, architecture_from_args, work_limits
from ..output import describe, dumps, format_number, format_table, run_inputs, writable_directory

__all__ = ["add_recipes_parser", "run_recipes"]


def recipe_names(text: str) -> tuple:
    """Converter of ``--only``: a comma list of recipe names."""
    from remprop.diagrams.recipes import check_recipe_names

    names = tuple(part.strip() for part in str(text).split(",") if part.strip())
    try:
        return check_recipe_names(names)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err).replace("only must", "must")) from None


def add_recipes_parser(commands):
    from remprop.diagrams.recipes import DEFAULT_WIDTH, RECIPES

    recipes = add_command(commands, "recipes", run_recipes,
                          help="published depth recipes (DeepNorm, ReZero, T-Fixup, GPT-2, muP, 1/sqrt(L)) "
                               "on the trainability diagram")
    add_run_options(recipes, beta=True, json_help="print the table as JSON")
    recipes.add_argument("--only", type=recipe_names, default=None, metavar="NAMES",
                         help=f"comma list of recipes (default: all: {','.join(RECIPES)})")
    recipes.add_argument("--width", type=count(1), default=DEFAULT_WIDTH, metavar="D",
                         help="model width d, for muP's 1/d_H attention (default: %(default)s)")
    add_output_options(recipes, name="recipes")
    recipes.add_argument("--figure", action=argparse.BooleanOptionalAction, default=True,
                         help="draw the PNG, or skip it: the table alone is quick (default: draw it)")
    add_progress_option(recipes)
    add_threads_option(recipes)
    add_work_limit_options(recipes, memory=False)
    add_architecture_arguments(recipes, alpha_sa=True)


def run_recipes(args) -> int:
    """Where each published depth recipe lands on the trainability diagram, and the theory's verdict.

    Each recipe is applied to the base architecture (the architecture options: the variances
    before the recipe) at --depth and --beta: DeepNorm (post-LN, alpha = (2L)^(1/4), branch
    weights' gain (8L)^(-1/4)), ReZero / SkipInit (no LN, zero branches), T-Fixup (no LN,
    gains 0.67 L^(-1/4) or (9L)^(-1/4)), GPT-2 / Megatron (pre-LN, output projections over
    sqrt(2L)), muP's attention (scores over d_H: beta / sqrt(d_H) at --width) and 1/sqrt(L)
    branches (Noci et al.). Printed per recipe: alpha_SA, the branch variances, beta, the
    phase, the final cosine rho_L, beta_c and alpha*(L). Writes OUT/NAME.json and
    OUT/NAME.png (one panel per recipe: the diagram of the recipe's own architecture with the
    recipe marked) unless --no-figure. The time is estimated first (the kernels' calibrated costs):
    above --max-seconds the run is refused; the memory does not grow with the depth.
    """
    from remprop.diagrams.recipes import recipe_predictions, recipes_seconds

    from .theory import check_rope_work

    check_rope_work(args)
    arch = architecture_from_args(args)
    directory = writable_directory(args.out)
    check_work(f"{len(args.only or ()) or 'the'} recipe(s) at depth {args.depth}"
               + (" with their figure" if args.figure else ""),
               seconds=recipes_seconds(arch, args.beta, depth=args.depth, names=args.only, width=args.width,
                                       figure=args.figure), **work_limits(args))
    predictions = recipe_predictions(arch, args.beta, depth=args.depth, names=args.only, width=args.width, q0=args.q0,
                                     rho0=args.rho0, threshold=args.threshold)
    stem = directory / args.name
    files = []
    if args.figure:
        from remprop.diagrams.recipes import recipes_figure

        png = Path(f"{stem}.png")
        recipes_figure(predictions).savefig(png, dpi=130)
        files.append(str(png))
    table = [prediction.to_dict() for prediction in predictions]
    json_path = Path(f"{stem}.json")
    files.append(str(json_path))
    summary = {"recipes": table, "files": files, "width": args.width,
               **run_inputs(args, arch, beta=args.beta)}
    json_path.write_text(dumps(summary) + "\n", encoding="utf-8")
    if args.json:
        print(dumps(summary))
        return 0
    print(f"published recipes on base: {describe(arch, args.depth, args.threshold)}, "
          f"beta {format_number(args.beta)}, width {args.width}")
    rows = [(row["recipe"], row["norm"], format_number(row["alpha_sa"], 4), format_number(row["sigma_v2"], 4),
             format_number(row["sigma_o2"], 4), format_number(row["sigma_w2"], 4),
             format_number(row["sigma_w2_out"], 4), format_number(row["beta"], 4), row["phase"],
             format_number(row["rho_final"], 6), format_number(row["beta_critical"], 4),
             "-" if row["alpha_star"] is None else format_number(row["alpha_star"], 4))
            for row in table]
    print(format_table(("recipe", "norm", "alpha_SA", "sigma_v2", "sigma_o2", "sigma_w2", "sigma_w2_out", "beta",
                        "phase", "rho_L", "beta_c", "alpha*"), rows))
    if arch.sigma_o2 is None:
        print("sigma_o2 = 1 where the base has no output projection (the map of none)")
    print("alpha* = -: the attention branch is zero (no branch for the skip to outweigh)")
    print("wrote " + ", ".join(files))
    return 0
