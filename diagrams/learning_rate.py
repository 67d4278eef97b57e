r"""The learning rate as a third axis of the trainability diagram (docs/theory.md section 20).

A cell that is trainable at initialisation still fails to train when the AdamW peak rate exceeds its
learning-rate ceiling (:func:`remprop.theory.learning_rate_ceiling`). :func:`phases_at_rate` relabels
those cells :data:`LR_ABOVE_CEILING` ("lr above ceiling"), and those below the floor (the rate too small to
move the stack within its steps) :data:`LR_BELOW_FLOOR`; :func:`alpha_star_at_rate` gives the smallest
``alpha_SA`` that is out of rank collapse *and* below the ceiling, and :func:`draw_rate_region` hatches the
relabelled cells on a drawn diagram.
"""
from __future__ import annotations

import math

import numpy as np

from remprop._deprecation import renamed
from remprop.theory import DEFAULT_THRESHOLD, RunSettings, learning_rate_ceiling
from remprop.theory.learning_rate import CEILING_BAND, DEFAULT_STEPS, Recipe, ceiling_validity, rate_verdict
from remprop.theory.checks import as_float_array

from .phases import PHASE_LABELS, TRAINABLE
from . import residual_strength
from .residual_strength import ALPHA_MAX

__all__ = ["LR_ABOVE_CEILING", "LR_BELOW_FLOOR", "LR_LABELS", "diagram_window", "phases_at_rate", "alpha_star_at_rate",
           "check_learning_rate", "draw_rate_region", "rate_cell_label", "lr_ceiling_summary", "lr_line"]

#: Phase code of a cell trainable at initialisation whose learning-rate ceiling is below the rate.
LR_ABOVE_CEILING = 3
#: Phase code of a cell trainable at initialisation whose rate is below its floor (too little movement
#: within the steps to train; ``floor`` of :class:`remprop.theory.LearningRateCeiling`).
LR_BELOW_FLOOR = 4
#: Phase code -> label, with :data:`LR_ABOVE_CEILING` and :data:`LR_BELOW_FLOOR`.
LR_LABELS = {**PHASE_LABELS, LR_ABOVE_CEILING: "lr above ceiling", LR_BELOW_FLOOR: "lr below floor"}


def check_learning_rate(lr):
    """A peak learning rate: finite and > 0 (``ValueError`` naming ``lr``)."""
    return as_float_array("lr", lr, positive=True)


def diagram_window(diagram, width: int, steps: int) -> tuple:
    """``(floor, ceiling)``: the learning-rate window of every cell of a
    :class:`~remprop.diagrams.TrainabilityDiagram`, from one walk of the grid.

    :func:`remprop.theory.learning_rate_ceiling` (its ``floor`` and ``ceiling``) at the cell's ``alpha_SA``
    and ``beta``, the diagram's architecture (its ``seq_len`` gives ``log T``), depth and input state, for
    model width ``width`` and ``steps`` AdamW steps; two arrays of shape ``(len(alphas), len(betas))`` (rows
    alphas, as the diagram's phases).
    """
    arch = diagram.arch.replace(alpha_sa=np.asarray(diagram.alphas, dtype=float)[:, None])
    # the diagram's work is bounded
    result = learning_rate_ceiling(arch, np.asarray(diagram.betas, dtype=float)[None, :], depth=diagram.depth,
                                   width=width, steps=steps, q0=diagram.q0, rho0=diagram.rho0, max_seconds=math.inf)
    return tuple(np.broadcast_to(rate, diagram.phase.shape).copy() for rate in (result.floor, result.ceiling))


def phases_at_rate(phase, ceiling, lr, floor=None) -> np.ndarray:
    """Phase codes at peak rate ``lr``: trainable cells whose ``ceiling`` is below ``lr`` become
    :data:`LR_ABOVE_CEILING`, and (``floor`` given) those whose floor is above it
    :data:`LR_BELOW_FLOOR` (a cell both, an empty window, is above the ceiling); collapsed cells keep
    their phase (they fail at any rate)."""
    lr = float(check_learning_rate(lr))
    phase = np.asarray(phase).copy()
    trainable = phase == TRAINABLE
    if floor is not None:
        phase[trainable & (np.asarray(floor) > lr)] = LR_BELOW_FLOOR
    phase[trainable & (np.asarray(ceiling) < lr)] = LR_ABOVE_CEILING  # an empty window counts as above
    return phase


def alpha_star_at_rate(run: RunSettings, lr, width: int, steps: int, *, alpha_max=ALPHA_MAX, iterations=60,
                       alpha_star=None):
    r"""The minimum residual strength at a learning rate: the smallest ``alpha_SA`` out of rank collapse
    whose learning-rate ceiling is at least ``lr``.

    .. math:: \alpha^*_{\eta} = \max\big(\alpha^*(L),\ \min\{\alpha : \eta_{\max}(\alpha) \ge \eta\}\big)

    The ceiling does not decrease with ``alpha_SA`` (a stronger skip damps every branch's perturbation,
    :func:`~remprop.theory.update_sensitivity`; for post-LN the attention ceiling does not depend on it),
    so a bisection on ``[0, alpha_max]`` finds the second term (``iterations`` halvings, relative width
    ``2^-iterations``, returning the upper end). ``inf`` where even ``alpha_max`` stays below ``lr`` (an
    attention-bound ceiling, or an entropy-collapsed stack) or no ``alpha_SA`` avoids rank collapse.

    Parameters
    ----------
    run : remprop.theory.RunSettings
        The stack (its ``arch.alpha_sa`` is what is searched for; ``arch.seq_len`` set), its ``beta``
        (which broadcasts with ``lr``), depth, input state and rank-collapse threshold.
    lr : array_like
        Peak rate(s), > 0.
    width, steps : int
        Model width d and training steps S.
    alpha_max : float
        Upper end of the search (default :data:`~remprop.diagrams.ALPHA_MAX`).
    iterations : int
        Halvings of the bracket (default 60).
    alpha_star : array_like, optional
        :math:`\alpha^*(L)` at ``beta`` when the caller has it already
        (:func:`~remprop.diagrams.alpha_star` of ``run``); computed otherwise.

    Returns
    -------
    ndarray or float
    """
    if not isinstance(run, RunSettings):
        raise ValueError(f"run must be a remprop.theory.RunSettings, got {type(run).__name__}")
    lr = check_learning_rate(lr)
    arch, beta, depth, q0, rho0 = run.arch, np.asarray(run.beta, dtype=float), run.depth, run.q0, run.rho0
    if alpha_star is None:
        alpha_star = residual_strength.alpha_star(run)
    star = np.asarray(alpha_star, dtype=float)

    def ceiling(alpha):
        return np.asarray(learning_rate_ceiling(arch.replace(alpha_sa=alpha), beta, depth=depth, width=width,
                                                steps=steps, q0=q0, rho0=rho0, max_seconds=math.inf).ceiling)

    shape = np.broadcast_shapes(beta.shape, lr.shape, star.shape)
    low, high = np.zeros(shape), np.full(shape, float(alpha_max))
    reachable = np.broadcast_to(ceiling(high) >= lr, shape)
    for _ in range(iterations):
        middle = 0.5 * (low + high)
        ok = ceiling(middle) >= lr
        low, high = np.where(ok, low, middle), np.where(ok, middle, high)
    at_zero = np.broadcast_to(ceiling(np.zeros(shape)) >= lr, shape)
    alpha_lr = np.where(at_zero, 0.0, np.where(reachable, high, np.inf))
    out = np.maximum(np.broadcast_to(star, shape), alpha_lr)
    return float(out) if out.ndim == 0 else out


def _old_alpha_star_at_rate(arch, depth, beta, lr, width, steps, threshold=None, *, q0=1.0, rho0=0.0, **rest):
    run = RunSettings(arch, beta, depth, q0, rho0, DEFAULT_THRESHOLD if threshold is None else threshold)
    return (run, lr, width, steps), rest


#: Deprecated spelling of :func:`alpha_star_at_rate`, with its old arguments ``(arch, depth, beta, lr, width,
#: steps, threshold, *, q0, rho0, ...)``; removed in the next release.
min_alpha_at_rate = renamed("min_alpha_at_rate", alpha_star_at_rate, adapt=_old_alpha_star_at_rate)


def draw_rate_region(ax, diagram, phase_at_rate, lr, steps, width):
    """Hatch the :data:`LR_ABOVE_CEILING` (and :data:`LR_BELOW_FLOOR`) cells of ``phase_at_rate`` on a diagram drawn by
    :func:`~remprop.diagrams.trainability_figure` into ``ax``, and add them to its legend.

    The hatched cells are labelled by what they are, "trainable at init, lr above ceiling" (or "... lr
    below floor"), in the legend and in place; the "trainable" label of the region is redrawn inside the
    cells that stay trainable at the rate (none left: no "trainable" label)."""
    from matplotlib.patches import Patch

    from .style import PHASE_STYLE, phase_label
    from .theory_figures import _LABEL_MIN_SHARE, add_to_legend

    phase_at_rate = np.asarray(phase_at_rate)
    trainable = PHASE_STYLE[TRAINABLE]
    for text in list(ax.texts):  # the region's label: its cells are split by the rate now
        if text.get_text() == trainable["text"]:
            text.remove()
    two_d = len(diagram.betas) > 1 and len(diagram.alphas) > 1
    handles = []
    for code, hatch in ((TRAINABLE, None), (LR_ABOVE_CEILING, "xx"), (LR_BELOW_FLOOR, "..")):
        mask = phase_at_rate == code
        what = trainable["text"] if code == TRAINABLE else rate_cell_label(code)
        if two_d and mask.mean() >= _LABEL_MIN_SHARE:
            phase_label(ax, diagram.betas, diagram.alphas, mask, TRAINABLE, fontsize=9, text=what)
        if code == TRAINABLE or (code == LR_BELOW_FLOOR and not mask.any()):
            continue
        if mask.any() and two_d:
            hatched = ax.contourf(diagram.betas, diagram.alphas, mask.astype(float), levels=[0.5, 1.5],
                                  colors="none", hatches=[hatch])
            hatched.set_edgecolor("#6b4c00")
            hatched.set_linewidth(0.0)
        handles.append(Patch(facecolor=trainable["color"], hatch=hatch, edgecolor="#6b4c00",
                             label=f"{what}: lr {lr:.3g} ({steps} steps, d = {width})"))
    add_to_legend(ax, handles)


def rate_cell_label(code) -> str:
    """What a cell of phase ``code`` at a learning rate is, in a figure: "trainable at init, lr above
    ceiling" (:data:`LR_ABOVE_CEILING`), "trainable at init, lr below floor" (:data:`LR_BELOW_FLOOR`),
    else the phase's label (:data:`LR_LABELS`)."""
    if code in (LR_ABOVE_CEILING, LR_BELOW_FLOOR):
        return f"{PHASE_LABELS[TRAINABLE]} at init, {LR_LABELS[code]}"
    return LR_LABELS[code]


def lr_line(ceiling) -> str:
    """The report's line on the learning-rate ceiling (docs/theory.md section 20): the value, its band,
    the recipe it assumes, where it is an extrapolation, and a verdict at the user's rate."""
    if ceiling["value"] is None:
        return f"not predicted: {ceiling['note']}"
    low, high = ceiling["band"]
    recipe = ceiling["recipe"]
    batch = "" if recipe["batch_tokens"] is None else f", {recipe['batch_tokens']} tokens a step"
    line = (f"eta_max = {ceiling['value']:.3g} (band {low:.3g} to {high:.3g}; floor {ceiling['floor']:.3g}) for "
            f"AdamW over {ceiling['steps']} steps at d = {ceiling['width']} (recipe: warm-up "
            f"{recipe['warmup_steps']} steps, {recipe['schedule']} decay, beta2 {recipe['beta2']:g}{batch}; "
            f"bound by the {ceiling['binding']}: stack {ceiling['stack']:.3g}, attention "
            f"{ceiling['attention']:.3g}; docs/theory.md section 20)")
    if ceiling["validated"]:
        line += "; validated: inside the measured range"
    else:
        line += "; NOT validated: " + ", ".join(ceiling["outside"]) + " (an extrapolation)"
    if ceiling.get("lr") is not None:
        words = {"below": "below the ceiling's band: trains as far as the ceiling tells",
                 "near": "within the ceiling's band: the prediction cannot tell",
                 "above": "above the ceiling's band: expected not to train"}
        line += f"; at lr {ceiling['lr']:.3g}: {ceiling['verdict']} ({words[ceiling['verdict']]})"
    return line


def lr_ceiling_summary(spec, steps=DEFAULT_STEPS, lr=None, recipe=None) -> dict:
    """The learning-rate ceiling of a model (:func:`remprop.theory.learning_rate_ceiling` at its
    architecture, depth, width, beta, input state and T) for ``steps`` AdamW steps, as the report and
    the JSON give it: ``value`` (None where the derivation refuses the model, ``note`` says why),
    ``band`` (``value`` times :data:`~remprop.theory.learning_rate.CEILING_BAND`, the measured spread),
    ``floor``, ``stack``, ``attention``, ``binding``, ``steps``, ``width``, ``validated`` and ``outside``
    (:func:`~remprop.theory.learning_rate.ceiling_validity`: why the model is outside the measured range),
    and with ``lr`` the user's rate and its ``verdict`` (:func:`~remprop.theory.learning_rate.rate_verdict`).
    ``recipe`` (a :class:`~remprop.theory.learning_rate.Recipe`, default ``Recipe(steps)``) is reported as
    ``recipe``; its steps are the ceiling's, and a recipe unlike the measured runs' is named in ``outside``."""
    recipe = Recipe(steps) if recipe is None else recipe
    if not isinstance(recipe, Recipe):
        raise ValueError(f"recipe must be a remprop.theory.learning_rate.Recipe, got {type(recipe).__name__}")
    steps = recipe.steps
    run = spec.settings
    out = {"value": None, "band": None, "floor": None, "stack": None, "attention": None, "binding": None,
           "steps": int(steps), "width": int(spec.width), "validated": False, "outside": [], "lr": None,
           "verdict": None, "note": None,
           "recipe": {"warmup_steps": recipe.warmup_steps, "batch_tokens": recipe.batch_tokens, "beta2": recipe.beta2,
                      "schedule": recipe.schedule}}
    if lr is not None:
        out["lr"] = float(as_float_array("lr", lr, positive=True))  # checked even where no ceiling is predicted
    try:
        # bounded with the diagnosis
        ceiling = learning_rate_ceiling(run.arch, run.beta, depth=run.depth, width=spec.width, steps=steps, q0=run.q0,
                                        rho0=run.rho0, seq_len=spec.seq_len, max_seconds=math.inf)
    except ValueError as err:
        out["note"] = str(err)
        return out
    value = float(ceiling.ceiling)
    outside = list(ceiling_validity(spec.width, steps, float(np.max(run.q0)), recipe, run.arch))
    out.update(value=value, band=[CEILING_BAND[0] * value, CEILING_BAND[1] * value], floor=float(ceiling.floor),
               stack=float(ceiling.stack), attention=float(ceiling.attention), binding=str(ceiling.binding),
               validated=not outside, outside=outside)
    if lr is not None:
        out["verdict"] = rate_verdict(lr, value)
    return out
