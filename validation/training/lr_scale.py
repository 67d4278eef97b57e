r"""The learning-rate sweep at scale: how the largest rate that trains moves with width, depth and recipe.

The first sweep (:mod:`~remprop.validation.training.lr_sweep`,
:data:`~remprop.validation.training.lr_sweep.LR_SWEEP_DESIGN`) fitted the ceiling's constants at
width 16-32 only, and its width law (``1/d``, docs/theory.md section 20) put the ceiling of
GPT-2-sized models 8-22x below the rates they were pre-trained at. This module holds the sweep that
measures the width law instead of assuming it, and a few recipe axes beside it. Every run is a run
of the first sweep's kind (a one-cell trained grid,
:class:`~remprop.validation.training.lr_sweep.LRSweepRun`; masked-LM, T 64, batch 16, vocabulary
4096, one seed, seed 0), read by the same rule, fixed before the runs: a run *trains at its rate*
when its trained fraction ``f = (U - L) / (U - R) >= 3/4``, ``R`` the best final test loss of its
family (norm placement, depth and width, within one recipe), and it did not diverge.

**The design** (:data:`LR_SCALE_DESIGN`, fixed before any run finished). Each *recipe* is a
training dict and a list of groups, trained under ``OUT/<recipe>/``:

* ``base`` (300 steps, warm-up 5 %, the first sweep's recipe): depth 8, post- and pre-LN,
  ``alpha_SA = 1`` (the skip strength of real models), ``beta = 0.5``, at widths 32, 128 and
  512 (the **fit** part) and 64 and 256 (**held out**), rates ``1e-4 .. 1e-1`` by half-decades
  (width <= 128) or ``1e-4 .. 3e-2`` (width 256 and 512, where the largest rates diverge);
  and depth 24 at width 64 (held out: the depth law);
* ``warm25`` (warm-up 25 % of the steps): depth 8, width 128 (held out: the warm-up term);
* ``long`` (1000 steps): depth 8, width 128, rates ``1e-3 .. 3e-2`` (held out: the step term);
* ``smallemb`` (embeddings of std 0.02, GPT-2's and LLaMA's, an input stream of ``q0 = 8e-4``): depth 8,
  width 64 (held out: the input scale that the ceiling's sensitivity reads). Added after the first
  outcomes of ``base`` were read, to test what they pointed at; the rule is the same.

Reference: docs/theory.md section 20; docs/training.md, "The ceiling at scale".
"""
from __future__ import annotations

import math
from pathlib import Path

from .lr_sweep import LR_SWEEP_TRAINING, LRSweepGroup, lr_sweep_outcomes, pending_runs, run_lr_sweep

__all__ = ["LR_SCALE_DESIGN", "scale_recipes", "scale_pending", "run_scale_sweep", "scale_outcomes", "family_edges",
           "record_ceiling", "record_floor", "fit_scale_constants", "scale_summary", "summary_tables", "fill_markers"]

_RATES = (1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
_WIDE_RATES = _RATES[:-1]
_POINT = ((1.0, 0.5),)
_NORMS = ("post", "pre")


def _group(name, width, depth=8, rates=_RATES, held_out=False):
    return LRSweepGroup(name, _NORMS, depth, width, _POINT, rates, held_out=held_out)


#: recipe name -> (training dict, groups): the scale sweep, fixed before any run (module docstring).
LR_SCALE_DESIGN = {
    "base": (dict(LR_SWEEP_TRAINING), (
        _group("w32", 32), _group("w128", 128), _group("w512", 512, rates=_WIDE_RATES),
        _group("w64", 64, held_out=True), _group("w256", 256, rates=_WIDE_RATES, held_out=True),
        _group("w64-L24", 64, depth=24, held_out=True),
    )),
    "warm25": (dict(LR_SWEEP_TRAINING, warmup_ratio=0.25), (_group("w128", 128, held_out=True),)),
    "long": (dict(LR_SWEEP_TRAINING, steps=1000), (_group("w128", 128, rates=(1e-3, 3e-3, 1e-2, 3e-2),
                                                          held_out=True),)),
    # added after the base recipe's first outcomes were read (the rule unchanged): GPT-2's and LLaMA's
    # embedding std 0.02, an input stream of q0 = 8e-4, which the ceiling's sensitivity reads
    "smallemb": (dict(LR_SWEEP_TRAINING, embedding_std=0.02), (_group("w64", 64, held_out=True),)),
}


#: Added after every half-decade run above had been read (the rule unchanged): one run per family at the
#: geometric middle of its bracket (the largest rate that trained and the smallest above it that did
#: not: 3e-4 | 1e-3 -> 5.5e-4, 1e-3 | 3e-3 -> 1.7e-3, 3e-3 | 1e-2 -> 5.5e-3, 1e-2 | 3e-2 -> 1.7e-2), which
#: narrows each bracket from 3.2x to 1.7-1.8x; each family's part stays its group's.
_MIDDLES = {
    "base": (("w32", "post", 32, 5.5e-3, 8, False), ("w32", "pre", 32, 1.7e-2, 8, False),
             ("w64", "post", 64, 5.5e-3, 8, True), ("w64", "pre", 64, 5.5e-3, 8, True),
             ("w128", "post", 128, 1.7e-3, 8, False), ("w128", "pre", 128, 5.5e-3, 8, False),
             ("w256", "post", 256, 1.7e-3, 8, True), ("w256", "pre", 256, 1.7e-3, 8, True),
             ("w512", "post", 512, 5.5e-4, 8, False), ("w512", "pre", 512, 5.5e-4, 8, False),
             ("w64-L24", "post", 64, 1.7e-3, 24, True), ("w64-L24", "pre", 64, 5.5e-3, 24, True)),
    "warm25": (("w128", "post", 128, 1.7e-3, 8, True), ("w128", "pre", 128, 5.5e-3, 8, True)),
    "long": (("w128", "post", 128, 1.7e-3, 8, True), ("w128", "pre", 128, 5.5e-3, 8, True)),
    "smallemb": (("w64", "post", 64, 5.5e-3, 8, True), ("w64", "pre", 64, 5.5e-3, 8, True)),
}
#: Added with the middles (before any of their runs): the recipe axes of real pre-training runs besides
#: the warm-up and the steps, one at a time at width 128 around its base brackets, both norm placements.
_RECIPE_RATES = {"post": (1e-3, 1.7e-3, 3e-3, 5.5e-3), "pre": (1.7e-3, 3e-3, 5.5e-3, 1e-2)}
#: (A 4x batch, 4096 tokens a step, was designed with them and cut before any of its runs, for the CPU
#: time left: each run costs four base runs.)
for _recipe, _training in (("beta2", dict(LR_SWEEP_TRAINING, beta2=0.95)),       # GPT-3's and LLaMA's
                           ("cosine", dict(LR_SWEEP_TRAINING, schedule="cosine"))):
    LR_SCALE_DESIGN[_recipe] = (_training, tuple(
        LRSweepGroup("w128", (norm,), 8, 128, _POINT, rates, held_out=True) for norm, rates in _RECIPE_RATES.items()))
#: Added with the middles (before any of their runs): depth 48 at width 64, held out, the depth law's test
#: that no rule was chosen on (the depth-24 brackets were read before the middles were chosen), by
#: quarter-decades around where the depth-24 brackets and the two depth laws put the ceiling.
_DEEP = (LRSweepGroup("w64-L48", ("post",), 48, 64, _POINT, (3e-4, 5.5e-4, 1e-3, 1.7e-3, 3e-3), held_out=True),
         LRSweepGroup("w64-L48", ("pre",), 48, 64, _POINT, (1e-3, 1.7e-3, 3e-3, 5.5e-3, 1e-2), held_out=True))
for _recipe, _rows in _MIDDLES.items():
    _training, _groups = LR_SCALE_DESIGN[_recipe]
    LR_SCALE_DESIGN[_recipe] = (_training, _groups + tuple(
        LRSweepGroup(name, (norm,), depth, width, _POINT, (rate,), held_out=held)
        for name, norm, width, rate, depth, held in _rows) + (_DEEP if _recipe == "base" else ()))


def scale_recipes(recipes=None, groups=None) -> list:
    """``(recipe, training, groups)`` of the chosen ``recipes`` (names; default all) and ``groups``
    (names; default all), in design order; an unknown name is a ``ValueError``."""
    names = list(LR_SCALE_DESIGN) if recipes is None else list(recipes)
    unknown = [n for n in names if n not in LR_SCALE_DESIGN]
    if unknown:
        raise ValueError(f"recipes: unknown {', '.join(unknown)} (known: {', '.join(LR_SCALE_DESIGN)})")
    out = []
    for name in names:
        training, design = LR_SCALE_DESIGN[name]
        chosen = tuple(g for g in design if groups is None or g.name in groups)
        if chosen:
            out.append((name, training, chosen))
    if groups is not None:
        known = {g.name for _, (_, design) in LR_SCALE_DESIGN.items() for g in design}
        missing = sorted(set(groups) - known)
        if missing:
            raise ValueError(f"groups: unknown {', '.join(missing)} (known: {', '.join(sorted(known))})")
    return out


def scale_pending(out, recipes=None, groups=None) -> list:
    """``(recipe, run, spec)`` of every run of the chosen part without a finished record under ``out``."""
    return [(name, run, spec) for name, training, design in scale_recipes(recipes, groups)
            for run, spec in pending_runs(Path(out) / name, design, training=training)]


def run_scale_sweep(out, recipes=None, groups=None, *, progress=False) -> dict:
    """Train (or resume) the chosen part of :data:`LR_SCALE_DESIGN` under ``out``, one run after another
    in this process (one torch thread a run, as recorded in each run's settings); returns
    ``{recipe: LRSweepReport}``. Two processes may share ``out`` when they train disjoint groups (each
    run's folder is locked while it trains)."""
    return {name: run_lr_sweep(Path(out) / name, design, training=training, progress=progress)
            for name, training, design in scale_recipes(recipes, groups)}


def scale_outcomes(out, recipes=None, *, require_all=True) -> list:
    """The outcome records of every finished run (:func:`~remprop.validation.training.lr_sweep.lr_sweep_outcomes`,
    recipe by recipe; each record gains ``recipe``). With ``require_all`` an unfinished run is a ``ValueError``."""
    records = []
    for name, training, design in scale_recipes(recipes):
        for record in lr_sweep_outcomes(Path(out) / name, design, training=training, require_all=require_all):
            records.append(dict(record, recipe=name))
    return records


def family_edges(records, ceiling) -> list:
    """Per family (recipe, norm placement, depth, width, steps) of trained runs: the largest rate that
    trained, the smallest rate above it that did not, and both over the predicted ceiling
    ``ceiling(record)``: the measured bracket of the true ceiling in units of the prediction.

    Returns a list of dicts: ``recipe``, ``norm``, ``depth``, ``width``, ``steps``, ``split``, ``predicted``,
    ``trained_up_to``, ``failed_from`` (``inf`` when every rate above trained; NaN when none trained),
    ``low`` and ``high`` (the two over ``predicted``)."""
    families = {}
    for record in records:
        key = (record.get("recipe"), record["norm"], record["depth"], record["width"], record["steps"])
        families.setdefault(key, []).append(record)
    out = []
    for (recipe, norm, depth, width, steps), members in families.items():
        predicted = float(ceiling(members[0]))
        trained = [r["lr"] for r in members if r["trains"]]
        top = max(trained) if trained else math.nan
        above = [r["lr"] for r in members if not r["trains"] and trained and r["lr"] > top]
        failed = min(above) if above else math.inf
        out.append({"recipe": recipe, "norm": norm, "depth": depth, "width": width, "steps": steps,
                    "split": members[0]["split"], "predicted": predicted, "trained_up_to": top,
                    "failed_from": failed, "low": top / predicted, "high": failed / predicted})
    return out


def _theory_of(record):
    """:func:`remprop.theory.learning_rate_ceiling` at the run's architecture, depth, width, steps, beta,
    T and input scale ``q0`` (1, the simulator's, unless the run set its embeddings' std)."""
    from remprop.theory import Architecture, learning_rate_ceiling

    arch = Architecture(**dict(record["arch"], seq_len=record["seq_len"]))
    return learning_rate_ceiling(arch, record["beta"], depth=record["depth"], width=record["width"],
                                 steps=record["steps"], q0=record.get("q0", 1.0))


def record_ceiling(record) -> float:
    """The theory's ceiling of a run (:func:`remprop.theory.learning_rate_ceiling` at its settings)."""
    return float(_theory_of(record).ceiling)


def record_floor(record) -> float:
    """The theory's floor of a run (the lower edge of the window of rates; :func:`remprop.theory.learning_rate_ceiling`
    at its settings)."""
    return float(_theory_of(record).floor)


def _unit_stack(record) -> float:
    """The run's stack ceiling per unit of :data:`~remprop.theory.learning_rate.STACK_CONSTANT`:
    ``2 / (d S min(steps, S_c))``, the scale the constants multiply."""
    from remprop.theory.learning_rate import STACK_CONSTANT

    return float(_theory_of(record).stack) / STACK_CONSTANT


def fit_scale_constants(records) -> dict:
    r"""The ceiling's constant from the fit part of the scale sweep (held-out runs are never read):
    docs/theory.md section 20, docs/training.md "The ceiling at scale".

    ``stack``: the :math:`C_{\rm stack}` that centres the fit families' brackets on the prediction, in
    log: the geometric mean, over the fit families with a finite bracket, of the bracket's geometric
    centre (of the largest rate that trained and the smallest above it that did not) over the unit stack
    ceiling ``2 / (d S min(steps, S_c))`` (:func:`family_edges`): a point estimate of the true ceiling,
    which is what a user reads. (The floor's constant stays the first sweep's,
    :func:`~remprop.validation.training.lr_sweep.fit_window`: the lower rates of this sweep's families
    were not designed to place it.)

    Returns ``{"stack", "families"}`` (the number of fit families read)."""
    from .lr_sweep import FIT

    edges = [e for e in family_edges(records, _unit_stack)
             if e["split"] == FIT and math.isfinite(e["high"]) and e["low"] > 0]
    if not edges:
        raise ValueError("records: no fit family with a measured bracket (a rate that trained and one above it "
                         "that did not)")
    stack = math.exp(sum(0.5 * (math.log(e["low"]) + math.log(e["high"])) for e in edges) / len(edges))
    return {"stack": stack, "families": len(edges)}


def scale_summary(records) -> dict:
    """What the scale sweep says of the theory's ceiling (docs/training.md, "The ceiling at scale").

    ``edges``: :func:`family_edges` against :func:`record_ceiling`; ``band``: the smallest ``low`` and the
    largest finite ``high`` over every family (the measured spread of the true ceiling around the
    predicted one, fit and held-out families together: the wider), ``band_held_out`` the same over the
    held-out families only; ``fit``: :func:`fit_scale_constants` (the stack constant, read from the fit
    part only); ``within_2x_held_out``: of the held-out families with a bracket, how many lie wholly
    within 2x of the prediction (``bracket``) and how many have their geometric centre there
    (``centre``); ``ceiling`` and ``window``: :func:`~remprop.validation.training.lr_sweep.evaluate_ceiling`
    of the ceiling alone and of the window between the floor and the ceiling (per part: runs, correct,
    accuracy, AUROC; and every run the window reads wrong)."""

    from .lr_sweep import evaluate_ceiling

    edges = family_edges(records, record_ceiling)
    def spread(families):
        families = [e for e in families if math.isfinite(e["low"])]
        highs = [e["high"] for e in families if math.isfinite(e["high"])]
        return (min(e["low"] for e in families), max(highs)) if families and highs else None

    band, band_held_out = spread(edges), spread([e for e in edges if e["split"] == "held-out"])
    # within 2x: the whole bracket in [1/2, 2] times the prediction (every true ceiling it allows), or
    # its geometric centre (the measured point estimate)
    bracketed = [e for e in edges if e["split"] == "held-out" and math.isfinite(e["high"]) and e["low"] > 0]
    within = {"families": len(bracketed),
              "bracket": sum(e["low"] >= 0.5 and e["high"] <= 2.0 for e in bracketed),
              "centre": sum(abs(math.log(e["low"] * e["high"])) / 2 <= math.log(2.0) for e in bracketed)}
    ceiling = evaluate_ceiling(records, record_ceiling)
    window = evaluate_ceiling(records, record_ceiling, record_floor)
    strip = lambda part: {k: part[k] for k in ("runs", "correct", "accuracy", "auroc")}  # noqa: E731
    return {"edges": edges, "band": band, "band_held_out": band_held_out, "fit": fit_scale_constants(records),
            "within_2x_held_out": within,
            "ceiling": {name: strip(ceiling[name]) for name in ("fit", "held-out", "all")},
            "window": {name: strip(window[name]) for name in ("fit", "held-out", "all")},
            "window_disagreements": [{k: d[k] for k in ("recipe", "folder", "split", "lr", "fraction", "trains",
                                                        "eta_max", "predicted")} for d in window["disagreements"]]}


def summary_tables(summary) -> dict:
    """The markdown tables of docs/training.md, "The ceiling at scale", from :func:`scale_summary`:
    ``{"scale-table": ..., "scale-scores": ...}`` (tests/test_lr_sweep.py holds the docs to them)."""

    rows = ["| recipe | norm | depth | width | steps | part | predicted ceiling | trained up to | failed from | "
            "bracket / prediction |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    order = {name: k for k, name in enumerate(LR_SCALE_DESIGN)}
    for e in sorted(summary["edges"], key=lambda e: (order.get(e["recipe"], 99), e["norm"], e["depth"], e["width"])):
        # strict JSON stores inf and nan as strings: read back as numbers
        e = dict(e, **{k: float(e[k]) for k in ("predicted", "trained_up_to", "failed_from", "low", "high")})
        failed = "none" if not math.isfinite(e["failed_from"]) else f"{e['failed_from']:.2g}"
        trained = "none" if not math.isfinite(e["trained_up_to"]) else f"{e['trained_up_to']:.2g}"
        high = "-" if not math.isfinite(e["high"]) else f"{e['high']:.2f}"
        low = "-" if not math.isfinite(e["low"]) else f"{e['low']:.2f}"
        rows.append(f"| {e['recipe']} | {e['norm']} | {e['depth']} | {e['width']} | {e['steps']} | {e['split']} | "
                    f"{e['predicted']:.3g} | {trained} | {failed} | {low} - {high} |")
    scores = ["| score | part | runs | right | accuracy | AUROC |", "| --- | --- | --- | --- | --- | --- |"]
    for what in ("window", "ceiling"):
        for part in ("fit", "held-out", "all"):
            p = summary[what][part]
            scores.append(f"| {what} | {part} | {p['runs']} | {p['correct']} | {p['accuracy']:.2f} | "
                          f"{p['auroc']:.3f} |")
    band = summary["band"]
    fit, within = summary["fit"], summary["within_2x_held_out"]
    scores.append("")
    scores.append(f"Stack constant fitted on the {fit['families']} fit families: {fit['stack']:.0f}. Held-out "
                  f"families within 2x of the prediction: {within['bracket']} of {within['families']} with the whole "
                  f"bracket, {within['centre']} of {within['families']} with its centre.")
    scores.append(f"Band over all families: {band[0]:.2f} to {band[1]:.2f} times the prediction (held-out families "
                  f"alone: {summary['band_held_out'][0]:.2f} to {summary['band_held_out'][1]:.2f}).")
    return {"scale-table": "\n".join(rows), "scale-scores": "\n".join(scores)}


def fill_markers(text, tables) -> str:
    """``text`` with each ``<!-- name -->`` ... ``<!-- /name -->`` block's content replaced by ``tables[name]``."""
    for name, table in tables.items():
        start, end = f"<!-- {name} -->", f"<!-- /{name} -->"
        i, j = text.index(start) + len(start), text.index(end)
        text = text[:i] + "\n" + table + "\n" + text[j:]
    return text
