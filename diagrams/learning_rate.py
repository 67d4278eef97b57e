r"""The learning rate as a third axis of the trainability diagram (docs/theory.md section 20).

A cell that is trainable at initialisation still fails to train when the AdamW peak rate exceeds its
learning-rate ceiling (:func:`remprop.theory.learning_rate_ceiling`). :func:`phases_at_rate` relabels
those cells :data:`LR_ABOVE_CEILING` ("lr above ceiling"), :func:`min_alpha_at_rate` gives the smallest
``alpha_SA`` that is out of rank collapse *and* below the ceiling, and :func:`draw_rate_region` hatches the
relabelled cells on a drawn diagram.
"""
from __future__ import annotations

import numpy as np

from remprop.theory import learning_rate_ceiling
from remprop.theory.checks import as_float_array

from .phases import PHASE_LABELS, TRAINABLE
from .residual_strength import ALPHA_MAX, min_residual_strength

__all__ = ["LR_ABOVE_CEILING", "LR_LABELS", "diagram_ceiling", "phases_at_rate", "min_alpha_at_rate",
           "check_learning_rate", "draw_rate_region"]

#: Phase code of a cell trainable at initialisation whose learning-rate ceiling is below the rate.
LR_ABOVE_CEILING = 3
#: Phase code -> label, with :data:`LR_ABOVE_CEILING`.
LR_LABELS = {**PHASE_LABELS, LR_ABOVE_CEILING: "lr above ceiling"}


def check_learning_rate(lr):
    """A peak learning rate: finite and > 0 (``ValueError`` naming ``lr``)."""
    return as_float_array("lr", lr, positive=True)


def diagram_ceiling(diagram, width: int, steps: int) -> np.ndarray:
    """The learning-rate ceiling of every cell of a :class:`~remprop.diagrams.TrainabilityDiagram`.

    Returns an array of shape ``(len(alphas), len(betas))`` (rows alphas, as the diagram's phases):
    :func:`remprop.theory.learning_rate_ceiling` at the cell's ``alpha_SA`` and ``beta``, the diagram's
    architecture (its ``seq_len`` gives ``log T``), depth and input state, for model width ``width`` and
    ``steps`` AdamW steps.
    """
    arch = diagram.arch.replace(alpha_sa=np.asarray(diagram.alphas, dtype=float)[:, None])
    result = learning_rate_ceiling(arch, diagram.depth, width, steps, np.asarray(diagram.betas, dtype=float)[None, :],
                                   diagram.q0, diagram.rho0)
    return np.broadcast_to(result.ceiling, diagram.phase.shape).copy()


def phases_at_rate(phase, ceiling, lr) -> np.ndarray:
    """Phase codes at peak rate ``lr``: trainable cells whose ``ceiling`` is below ``lr`` become
    :data:`LR_ABOVE_CEILING`; collapsed cells keep their phase (they fail at any rate)."""
    lr = float(check_learning_rate(lr))
    phase = np.asarray(phase).copy()
    phase[(phase == TRAINABLE) & (np.asarray(ceiling) < lr)] = LR_ABOVE_CEILING
    return phase


def min_alpha_at_rate(arch, depth: int, beta, lr, width: int, steps: int, threshold=None, *, q0=1.0, rho0=0.0,
                      alpha_max=ALPHA_MAX, iterations=60):
    r"""Smallest ``alpha_SA`` out of rank collapse whose learning-rate ceiling is at least ``lr``.

    .. math:: \alpha^*_{\eta} = \max\big(\alpha^*(L),\ \min\{\alpha : \eta_{\max}(\alpha) \ge \eta\}\big)

    The ceiling does not decrease with ``alpha_SA`` (a stronger skip damps every branch's perturbation,
    :func:`~remprop.theory.update_sensitivity`; for post-LN the attention ceiling does not depend on it),
    so a bisection on ``[0, alpha_max]`` finds the second term (``iterations`` halvings, relative width
    ``2^-iterations``, returning the upper end). ``inf`` where even ``alpha_max`` stays below ``lr`` (an
    attention-bound ceiling, or an entropy-collapsed stack) or no ``alpha_SA`` avoids rank collapse.

    Parameters
    ----------
    arch : remprop.theory.Architecture
        The stack (its ``alpha_sa`` is what is searched for; ``seq_len`` set).
    depth, width, steps : int
    beta, lr : array_like
        Query/key scale(s) and peak rate (> 0); they broadcast.
    threshold : float, optional
        Rank-collapse threshold (default 0.99).
    q0, rho0 : float
        Input state.
    alpha_max : float
        Upper end of the search (default :data:`~remprop.diagrams.ALPHA_MAX`).
    iterations : int
        Halvings of the bracket (default 60).

    Returns
    -------
    ndarray or float
    """
    lr = check_learning_rate(lr)
    beta = as_float_array("beta", beta, positive=True)
    star = np.asarray(min_residual_strength(arch, depth, beta, threshold, q0=q0, rho0=rho0), dtype=float)

    def ceiling(alpha):
        return np.asarray(learning_rate_ceiling(arch.replace(alpha_sa=alpha), depth, width, steps, beta,
                                                q0, rho0).ceiling)

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


def draw_rate_region(ax, diagram, phase_at_rate, lr, steps, width):
    """Hatch the :data:`LR_ABOVE_CEILING` cells of ``phase_at_rate`` on a diagram drawn by
    :func:`~remprop.diagrams.trainability_figure` into ``ax``, and add them to its legend."""
    from matplotlib.patches import Patch

    from .theory_figures import add_to_legend

    mask = np.asarray(phase_at_rate) == LR_ABOVE_CEILING
    label = f"lr {lr:.3g} above ceiling ({steps} steps, d = {width})"
    if mask.any() and len(diagram.betas) > 1 and len(diagram.alphas) > 1:
        hatched = ax.contourf(diagram.betas, diagram.alphas, mask.astype(float), levels=[0.5, 1.5], colors="none",
                              hatches=["xx"])
        hatched.set_edgecolor("#6b4c00")
        hatched.set_linewidth(0.0)
    add_to_legend(ax, [Patch(facecolor="none", hatch="xx", edgecolor="#6b4c00", label=label)])
