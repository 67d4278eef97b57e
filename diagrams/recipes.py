r"""Published depth recipes on the trainability diagram: what the theory predicts for each.

A *recipe* is a published rule that sets the skip strengths, the branch weights' variances, the LayerNorm
placement or the query/key scale of an L-block transformer as a function of L (or of the width). Each recipe
here is one pure function

.. code-block:: python

    recipe(arch, beta, *, depth, width=DEFAULT_WIDTH) -> (Architecture, beta)

that applies the published rule to a *base* architecture (its variances are those before the recipe: Xavier-like
``sigma^2 ~ 1`` weights, or the reference experiments') and a base query/key scale ``beta`` (``s_qk^2 = beta
sqrt(log T) / d``, docs/theory.md section 2), and returns the architecture and the ``beta`` of the recipe in our
conventions. :data:`RECIPES` maps each name to its :class:`Recipe`; :func:`recipe_predictions` propagates each
through ``depth`` blocks and reports its phase, final cosine, critical beta and ``alpha*(L)``;
:func:`recipes_figure` draws every recipe on its own trainability diagram.

How a rule becomes our fields (docs/theory.md sections 2 and 4):

* **gain g on a weight** (DeepNorm's ``beta``, T-Fixup's scale, GPT-2's ``1/sqrt(2L)``): its variance times
  fan-in is multiplied by ``g^2`` (``sigma_v2``, ``sigma_o2`` -- no output projection counts as ``sigma_o2 = 1``
  --, ``sigma_w2``, ``sigma_w2_out``);
* **branch gain gamma**, ``x -> x + gamma F(x)``: the branch's last linear layer carries it (``sigma_o2``,
  ``sigma_w2_out`` times ``gamma^2``; exact, except that the MLP's output bias shares ``sigma_b2`` with every
  bias and is not scaled); after a LayerNorm, where the overall factor cancels exactly, it is our skip strength
  ``alpha = 1 / gamma`` (:func:`~remprop.diagrams.residual_scaling`, convention ``"branch"``), which puts the
  recipe on the diagram's alpha axis. ``gamma = 0`` (ReZero, SkipInit) zeroes the branch output including its
  bias: ``sigma_o2 = sigma_w2_out = sigma_b2 = 0`` is exact;
* **attention scaled by 1/d_H** instead of ``1/sqrt(d_H)`` (muP): the scores shrink by ``sqrt(d_H)``, their
  variance by ``d_H``, so ``beta -> beta / sqrt(d_H)``.

What the recipes change outside the blocks (T-Fixup's input-embedding scale, DeepNorm's encoder-decoder
constants) is not a block field: the docstrings say how to pass it.

References
----------
H. Wang, S. Ma, L. Dong, S. Huang, D. Zhang, F. Wei, "DeepNet: Scaling Transformers to
1,000 Layers", arXiv 2203.00555 (2022); T. Bachlechner et al., "ReZero is all you need",
arXiv 2003.04887 (2020); S. De & S. L. Smith, "Batch normalization biases residual blocks
towards the identity function in deep networks", NeurIPS 2020 (SkipInit); X. S. Huang,
F. Perez, J. Ba, M. Volkovs, "Improving Transformer Optimization Through Better
Initialization", ICML 2020 (T-Fixup); A. Radford et al., "Language Models are Unsupervised
Multitask Learners" (2019, GPT-2); M. Shoeybi et al., "Megatron-LM", arXiv 1909.08053;
G. Yang et al., "Tensor Programs V", arXiv 2203.03466 (muP); L. Noci et al., NeurIPS 2022;
A. Giorlandino & S. Goldt, arXiv 2505.24333 (the diagram).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np

from remprop._deprecation import reordered
from remprop.theory import DEFAULT_THRESHOLD, Architecture, RunSettings, final_state, work_estimates
from remprop.theory.checks import check_depth

from .depth_recipes import inverse_sqrt_depth, residual_scaling, scale_architecture
from .phases import PHASE_LABELS, classify_phases
from . import residual_strength
from .residual_strength import search_seconds

__all__ = ["Recipe", "RecipePrediction", "RECIPES", "DEFAULT_WIDTH", "scaled_variances", "branch_gains",
           "base", "deepnorm", "rezero", "t_fixup", "t_fixup_decoder", "scaled_output_projections",
           "mup_attention", "inverse_sqrt_branches", "recipe_predictions", "check_recipe_names",
           "recipes_figure", "recipes_seconds", "FIGURE_RESOLUTION", "trainable_band", "PANEL_SECONDS"]

#: Model width d used by the recipes that depend on it (muP) when none is given.
DEFAULT_WIDTH = 768
#: Variances a weight gain multiplies (None-valued ones resolved first: see :func:`scaled_variances`).
_VARIANCES = ("sigma_v2", "sigma_o2", "sigma_w2", "sigma_w2_out")


def scaled_variances(arch: Architecture, **factors) -> Architecture:
    r"""``arch`` with weight variances multiplied: ``sigma^2 -> factor * sigma^2``.

    A gain ``g`` on a weight (``W -> g W``) is the factor ``g^2`` on its variance times
    fan-in (docs/theory.md section 2). ``sigma_o2=None`` (no output projection, the map of
    ``sigma_o2 = 1``) becomes ``factor``; ``sigma_w2_out=None`` is read as ``sigma_w2``
    before the factor.

    Parameters
    ----------
    arch : Architecture
    **factors : float
        Keyword per variance: ``sigma_v2``, ``sigma_o2``, ``sigma_w2``, ``sigma_w2_out``;
        factors >= 0.
    """
    unknown = sorted(set(factors) - set(_VARIANCES))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not a weight variance (one of {', '.join(_VARIANCES)})")
    resolved = arch.numeric()
    return arch.replace(**{name: float(factor) * resolved[name] for name, factor in factors.items()})


def branch_gains(arch: Architecture, attention, mlp) -> Architecture:
    r"""``arch`` with its branches multiplied: ``x -> x + g_SA SA(x)``, ``x -> x + g_MLP MLP(x)``.

    The gain rides on each branch's last linear layer, ``sigma_o2 -> g_SA^2 sigma_o2`` and
    ``sigma_w2_out -> g_MLP^2 sigma_w2_out``: exact for the attention branch (its output
    projection has no bias); for the MLP the output bias keeps ``sigma_b2``, which it shares
    with every bias. Zero gains on both branches zero the biases too (``sigma_b2 = 0``):
    a zero branch has no bias either, and the other biases are multiplied by zero.
    """
    arch = scaled_variances(arch, sigma_o2=attention ** 2, sigma_w2_out=mlp ** 2)
    return arch.replace(sigma_b2=0.0) if attention == 0 and mlp == 0 else arch


# -- the recipes ---------------------------------------------------------------------------
def base(arch: Architecture, beta: float, *, depth: int, width=DEFAULT_WIDTH):
    """The base architecture itself, unchanged: the reference point of the table."""
    return arch, beta


def deepnorm(arch: Architecture, beta: float, *, depth: int, width=DEFAULT_WIDTH):
    r"""DeepNorm (Wang et al. 2022): post-LN with an up-weighted skip and down-scaled branches.

    .. math:: x \leftarrow \mathrm{LN}(\alpha x + G(x)),\quad \alpha = (2N)^{1/4};\qquad
              W_V, W_O, W_1, W_2 \leftarrow \beta_{DN} W,\quad \beta_{DN} = (8N)^{-1/4}

    for an N-layer encoder-only or decoder-only model (N = ``depth``; paper, Fig. 2 and
    Table 1; the query and key weights keep gain 1). Here ``alpha_sa = alpha_mlp =
    (2N)^{1/4}`` and ``sigma_v2, sigma_o2, sigma_w2, sigma_w2_out`` are multiplied by
    ``(8N)^{-1/2}``; the query/key scale is unchanged. Encoder-decoder models use other
    constants (encoder ``alpha = 0.81 (N^4 M)^{1/16}``, ``beta = 0.87 (N^4 M)^{-1/16}``;
    decoder ``alpha = (3M)^{1/4}``, ``beta = (12M)^{-1/4}``), not covered here.

    References
    ----------
    H. Wang et al., "DeepNet: Scaling Transformers to 1,000 Layers", arXiv 2203.00555.
    """
    depth = check_depth(depth)
    gain2 = (8.0 * depth) ** -0.5
    alpha = (2.0 * depth) ** 0.25
    arch = scaled_variances(arch, **{name: gain2 for name in _VARIANCES})
    return arch.replace(norm="post", alpha_sa=alpha, alpha_mlp=alpha), beta


def rezero(arch: Architecture, beta: float, *, depth: int, width=DEFAULT_WIDTH):
    r"""ReZero (Bachlechner et al. 2020) and SkipInit (De & Smith 2020): zero branches at init.

    .. math:: x \leftarrow x + a\,F(x),\qquad a = 0 \text{ at initialisation, no LayerNorm}

    Every block is the identity at init, so the theory predicts ``(q_L, p_L) = (q_0, p_0)``
    at any depth: no rank collapse whatever L, and entropy collapse exactly when
    ``beta > beta_c(q_0, p_0) = sqrt(2 / (q_0 (q_0 - p_0)))`` (every layer's attention sees
    the input). Here ``norm="none"`` and :func:`branch_gains` ``(0, 0)``.

    References
    ----------
    T. Bachlechner et al., arXiv 2003.04887; S. De & S. L. Smith, NeurIPS 2020.
    """
    check_depth(depth)
    return branch_gains(arch.replace(norm="none"), 0.0, 0.0), beta


def _t_fixup(arch, gain):
    arch = scaled_variances(arch, **{name: gain ** 2 for name in _VARIANCES})
    return arch.replace(norm="none")


def t_fixup(arch: Architecture, beta: float, *, depth: int, width=DEFAULT_WIDTH):
    r"""T-Fixup, encoder (Huang et al. 2020): no LayerNorm, value/output/MLP weights scaled.

    .. math:: W_V, W_O, W_1, W_2 \leftarrow 0.67\,N^{-1/4}\,W

    with Xavier weights and N = ``depth``. The published rule also scales the input
    embeddings (``N(0, d^{-1/2})``, times ``(9N)^{-1/4}``); that is the input state, not a
    block field: pass ``q0`` accordingly.

    References
    ----------
    X. S. Huang, F. Perez, J. Ba, M. Volkovs, ICML 2020, section 3.2.
    """
    depth = check_depth(depth)
    return _t_fixup(arch, 0.67 * depth ** -0.25), beta


def t_fixup_decoder(arch: Architecture, beta: float, *, depth: int, width=DEFAULT_WIDTH):
    r"""T-Fixup, decoder (Huang et al. 2020): as :func:`t_fixup` with the gain ``(9N)^{-1/4}``.

    .. math:: W_V, W_O, W_1, W_2 \leftarrow (9N)^{-1/4}\,W

    References
    ----------
    X. S. Huang, F. Perez, J. Ba, M. Volkovs, ICML 2020, section 3.2.
    """
    depth = check_depth(depth)
    return _t_fixup(arch, (9.0 * depth) ** -0.25), beta


def scaled_output_projections(arch: Architecture, beta: float, *, depth: int, width=DEFAULT_WIDTH):
    r"""GPT-2 / Megatron-LM: pre-LN, residual output projections scaled by ``1/sqrt(2L)``.

    .. math:: W_O, W_2 \sim N\big(0, \sigma^2 / (2L)\big)

    ("we scale the weights of residual layers at initialization by a factor of 1/sqrt(N)
    where N is the number of residual layers", N = 2L; Megatron's
    ``scaled_init_method_normal``). Here ``norm="pre"`` and ``sigma_o2, sigma_w2_out``
    divided by ``2L``.

    References
    ----------
    A. Radford et al., GPT-2 report (2019), section 2.3; M. Shoeybi et al., arXiv 1909.08053.
    """
    depth = check_depth(depth)
    factor = 1.0 / (2.0 * depth)
    return scaled_variances(arch.replace(norm="pre"), sigma_o2=factor, sigma_w2_out=factor), beta


def mup_attention(arch: Architecture, beta: float, *, depth: int, width=DEFAULT_WIDTH):
    r"""muP's attention (Yang et al. 2021): scores ``q.k / d_H`` instead of ``q.k / sqrt(d_H)``.

    Our scores are ``(W_Q x_i).(W_K x_j) / sqrt(d_H)`` with ``s_qk^2 = beta sqrt(log T) / d``
    (docs/theory.md section 2): dividing by ``d_H`` instead divides every score by
    ``sqrt(d_H)``, i.e. the same weights at

    .. math:: \beta_{\mu P} = \beta / \sqrt{d_H},\qquad d_H = d / H .

    The recipe depends on the width (``width``), not on depth: at ``d_H = 64`` it moves the
    model 8 times closer to uniform attention. (muP also suggests zero-initialised queries,
    ``beta = 0``: uniform attention at every width.)

    References
    ----------
    G. Yang et al., "Tensor Programs V", arXiv 2203.03466, section 4 (attention logit scaling).
    """
    check_depth(depth)
    if not (isinstance(width, (int, np.integer)) and width >= arch.heads and width % arch.heads == 0):
        raise ValueError(f"width must be a positive integer divisible by heads={arch.heads}, got {width!r}")
    return arch, beta / math.sqrt(width // arch.heads)


def inverse_sqrt_branches(arch: Architecture, beta: float, *, depth: int, width=DEFAULT_WIDTH):
    r"""Branches scaled by ``1/sqrt(L)`` (Noci et al. 2022): ``x -> x + F(x) / sqrt(L)``.

    After a LayerNorm (post-LN) the factor is exactly our skip strength
    ``alpha_sa = alpha_mlp = sqrt(L)`` (:func:`~remprop.diagrams.residual_scaling` of
    :class:`~remprop.diagrams.inverse_sqrt_depth`, convention ``"branch"``); pre-LN and no LN
    carry it on the branches' last layers (:func:`branch_gains`, ``gamma^2 = 1/L``).

    References
    ----------
    L. Noci et al., NeurIPS 2022 (residual scaling); docs/theory.md section 4.
    """
    depth = check_depth(depth)
    strength = inverse_sqrt_depth(1.0)
    if arch.norm.normalises_stream:
        return scale_architecture(arch, depth, alpha_sa=strength, alpha_mlp=strength, convention="branch"), beta
    gain = float(strength(depth))
    return branch_gains(arch.replace(alpha_sa=1.0, alpha_mlp=1.0), gain, gain), beta


@dataclass(frozen=True)
class Recipe:
    """A published recipe: its function, the rule in one line and the reference.

    Attributes
    ----------
    name : str
        Registry key (``remprop recipes --only``).
    label : str
        Published name.
    function : callable
        ``function(arch, beta, *, depth, width) -> (Architecture, beta)`` (the order was ``(arch, depth,
        beta, *, width)`` before).
    rule : str
        The published rule in one line.
    reference : str
    """

    name: str
    label: str
    function: Callable
    rule: str
    reference: str

    @reordered("(arch, depth, beta, *, width=DEFAULT_WIDTH)")
    def __call__(self, arch: Architecture, beta: float, *, depth: int, width=DEFAULT_WIDTH):
        if not isinstance(arch, Architecture):
            raise ValueError(f"arch must be a remprop.theory.Architecture, got {type(arch).__name__}")
        return self.function(arch, beta, depth=depth, width=width)


#: Recipe name -> :class:`Recipe`, in the order of the table.
RECIPES = {recipe.name: recipe for recipe in (
    Recipe("base", "base architecture", base, "the architecture as given", "-"),
    Recipe("deepnorm", "DeepNorm", deepnorm,
           "post-LN, alpha = (2L)^(1/4), W_V, W_O, W_1, W_2 gain (8L)^(-1/4)", "Wang et al. 2022"),
    Recipe("rezero", "ReZero / SkipInit", rezero, "no LN, x + a F(x) with a = 0 at init",
           "Bachlechner et al. 2020; De & Smith 2020"),
    Recipe("t-fixup", "T-Fixup (encoder)", t_fixup, "no LN, W_V, W_O, W_1, W_2 gain 0.67 L^(-1/4)",
           "Huang et al. 2020"),
    Recipe("t-fixup-decoder", "T-Fixup (decoder)", t_fixup_decoder, "no LN, W_V, W_O, W_1, W_2 gain (9L)^(-1/4)",
           "Huang et al. 2020"),
    Recipe("gpt2", "GPT-2 / Megatron", scaled_output_projections, "pre-LN, W_O, W_2 gain 1/sqrt(2L)",
           "Radford et al. 2019; Shoeybi et al. 2019"),
    Recipe("mup", "muP attention", mup_attention, "scores q.k / d_H: beta -> beta / sqrt(d_H)",
           "Yang et al. 2021"),
    Recipe("inverse-sqrt-depth", "1/sqrt(L) branches", inverse_sqrt_branches, "x + F(x) / sqrt(L)",
           "Noci et al. 2022"),
)}


def check_recipe_names(names) -> tuple:
    """Validated recipe names (all of :data:`RECIPES` for None), in the order given, each once."""
    if names is None:
        return tuple(RECIPES)
    names = tuple(names)
    unknown = [name for name in names if name not in RECIPES]
    if unknown or not names:
        raise ValueError(f"only must name recipes among {', '.join(RECIPES)}, got {', '.join(unknown) or 'none'}")
    repeated = sorted({name for name in names if names.count(name) > 1}, key=names.index)
    if repeated:
        raise ValueError(f"only must name each recipe once, got {', '.join(repeated)} more than once")
    return names


# -- predictions ---------------------------------------------------------------------------
@dataclass(frozen=True)
class RecipePrediction:
    """What the theory predicts for one recipe at one depth.

    Attributes
    ----------
    recipe : Recipe
    run : RunSettings
        The recipe's architecture and beta, the depth, input state and threshold.
    q_final, rho_final : float
        ``q_L`` and the final mean cosine ``rho_L = p_L / q_L``.
    beta_critical : float
        The critical beta that decides entropy collapse
        (:meth:`~remprop.theory.Architecture.beta_critical`), on the model's beta axis.
    phase : str
        ``"trainable"``, ``"rank-collapse"`` or ``"entropy-collapse"``.
    alpha_star : float or None
        ``alpha*(L)`` of the recipe's architecture at its beta (the ``alpha_sa`` it needs
        against rank collapse); None where the attention branch is zero (ReZero: there is
        no branch for the skip to outweigh).
    """

    recipe: Recipe
    run: RunSettings
    q_final: float
    rho_final: float
    beta_critical: float
    phase: str
    alpha_star: float | None

    arch = property(lambda self: self.run.arch, doc="The recipe's architecture.")
    beta = property(lambda self: self.run.beta, doc="The recipe's query/key scale.")

    def to_dict(self) -> dict:
        """JSON-ready row (non-finite numbers stay floats; write with ``remprop._json``)."""
        arch = self.arch.numeric()
        return {"recipe": self.recipe.name, "label": self.recipe.label, "rule": self.recipe.rule,
                "reference": self.recipe.reference, "norm": self.arch.norm,
                **{name: float(arch[name]) for name in ("alpha_sa", "alpha_mlp", "sigma_v2", "sigma_o2",
                                                         "sigma_w2", "sigma_w2_out", "sigma_b2")},
                "beta": float(self.beta), "depth": self.run.depth, "phase": self.phase,
                "q_final": self.q_final, "rho_final": self.rho_final, "beta_critical": self.beta_critical,
                "alpha_star": self.alpha_star, "architecture": self.arch.to_dict()}


@reordered("(arch, depth, beta, *, names=None, width=DEFAULT_WIDTH, q0=1.0, rho0=0.0, threshold=DEFAULT_THRESHOLD)")
def recipe_predictions(arch: Architecture, beta, *, depth: int, names=None, width=DEFAULT_WIDTH, q0=1.0,
                       rho0=0.0, threshold=DEFAULT_THRESHOLD) -> tuple:
    r"""Apply each recipe to ``arch`` at ``depth`` and predict its phase.

    For every recipe, ``(arch_r, beta_r) = recipe(arch, beta, depth=depth)`` is propagated through
    ``depth`` blocks from ``(q0, rho0)`` (:func:`~remprop.theory.final_state`: the last layer
    alone, in constant memory at any depth); the phase is
    :func:`~remprop.diagrams.classify_phases` of ``beta_r`` against
    ``arch_r.beta_critical`` and of ``rho_L`` against ``threshold`` (docs/theory.md
    section 6), and ``alpha*(L)`` is :func:`~remprop.diagrams.alpha_star`.

    Parameters
    ----------
    arch : Architecture
        Base architecture (scalar fields): the variances before the recipes.
    beta : float
        Base query/key scale, > 0.
    depth : int
        Number of blocks L. It and the arguments after it are keyword-only (the order was ``(arch, depth,
        beta, ...)`` before: an old positional call is a ``TypeError``).
    names : sequence of str, optional
        Recipes to evaluate (default: all of :data:`RECIPES`).
    width : int
        Model width d (muP's ``d_H = d / H``).
    q0, rho0, threshold
        As :class:`~remprop.theory.RunSettings`.

    Returns
    -------
    tuple of RecipePrediction

    Examples
    --------
    >>> from remprop.theory import Architecture
    >>> rows = recipe_predictions(Architecture(), 0.5, depth=24, names=["rezero"], rho0=0.3)
    >>> rows[0].phase, round(rows[0].rho_final, 6)
    ('trainable', 0.3)
    """
    out = []
    for recipe, run in _recipe_runs(arch, depth, beta, names, width, q0, rho0, threshold):
        final = final_state(run)  # the last layer alone: any depth in constant memory
        beta_c = float(run.arch.beta_critical(first=final["beta_critical_first"],
                                              smallest=final["beta_critical_min"]))
        rho_final = float(final["rho"])
        phase = PHASE_LABELS[int(classify_phases(run.beta, beta_c, rho_final, run.threshold))]
        alpha_star = float(residual_strength.alpha_star(run)) if _has_branch(run) else None
        out.append(RecipePrediction(recipe, run, float(final["q"]), rho_final, beta_c, phase, alpha_star))
    return tuple(out)


def _recipe_runs(arch, depth, beta, names, width, q0, rho0, threshold):
    """``(recipe, run)`` of each named recipe applied to the base run."""
    names = check_recipe_names(names)
    base_run = RunSettings(arch, beta, depth, q0, rho0, threshold)
    for name in names:
        recipe = RECIPES[name]
        arch_r, beta_r = recipe(base_run.arch, float(base_run.beta), depth=base_run.depth, width=width)
        yield recipe, base_run.replace(arch=arch_r, beta=beta_r)


def _has_branch(run) -> bool:
    """Whether the recipe leaves an attention branch (ReZero zeroes it: no alpha* to search)."""
    return float(run.arch.numeric()["sigma_o2"]) > 0


@reordered("(arch, depth, beta, *, names=None, width=DEFAULT_WIDTH, figure=True, resolution=None)")
def recipes_seconds(arch: Architecture, beta, *, depth: int, names=None, width=DEFAULT_WIDTH, figure=True,
                    resolution=None) -> float:
    """Estimated seconds of :func:`recipe_predictions` (and, with ``figure``, of :func:`recipes_figure`).

    Per recipe, on this machine (:mod:`remprop.theory.work_estimates`): the final state of one
    cell through ``depth`` blocks and the search for ``alpha*``
    (:func:`~remprop.diagrams.residual_strength.search_seconds`); the figure adds the
    recipe's diagram of ``resolution x resolution`` cells (default :data:`FIGURE_RESOLUTION`)
    with an ``alpha*`` search per beta, and its drawing (``PANEL_SECONDS`` a panel). The memory is bounded whatever the depth (the
    predictions keep the final state alone; a panel's diagram holds its cells).
    """
    resolution = FIGURE_RESOLUTION if resolution is None else int(resolution)
    seconds = 0.0
    for _, run in _recipe_runs(arch, depth, beta, names, width, 1.0, 0.0, DEFAULT_THRESHOLD):
        seconds += work_estimates.run_seconds(run.arch, 1, run.depth)
        seconds += search_seconds(run.arch, run.depth, 1) if _has_branch(run) else 0.0
        if figure:
            seconds += (work_estimates.run_seconds(run.arch, resolution ** 2, run.depth)
                        + search_seconds(run.arch, run.depth, resolution) + PANEL_SECONDS)
    return seconds


#: Seconds to draw and save one panel of :func:`recipes_figure` on a quiet machine (PNG at 130 dpi): 8 panels took
#: about 3 s quiet, 11 s at load 11 on two cores (the command line multiplies the estimate by the machine's load).
PANEL_SECONDS = 0.4


# -- figure --------------------------------------------------------------------------------
#: Grid points per axis of each panel of :func:`recipes_figure`.
FIGURE_RESOLUTION = 48


def recipes_figure(predictions, *, resolution=None, columns=4):
    r"""Every recipe as a marker on the trainability diagram of its own architecture.

    A recipe that changes the branch variances or the block order moves the phase
    boundaries, so one diagram of the base architecture would place the other recipes
    against boundaries that are not theirs. Each recipe gets its own small panel: the
    diagram over ``(beta, alpha_sa)`` of the recipe's architecture (everything but
    ``alpha_sa`` as the recipe sets it; :func:`~remprop.diagrams.trainability_figure`:
    phases, ``beta_c``, ``alpha*(L)``), with the recipe marked at ``(beta_r, alpha_sa)``: where
    the recipe puts the model (both values are grid values, so the cell under the star has the
    recipe's own phase, as in the table). The title gives the band of
    ``alpha_sa`` that is trainable at ``beta_r`` (:func:`~remprop.diagrams.recipes.trainable_band`): the no-LN recipes
    (ReZero, T-Fixup) keep ``alpha_sa = 1``, and at depth L their band is narrow (above 1 the
    stream's scale grows as ``alpha^(2L)`` and entropy collapses; below it rank collapse, or for
    ReZero nothing, since its branches are zero): ReZero sits on the band's upper edge itself,
    T-Fixup inside a band a star covers at a few dozen layers.
    Every panel spans the same ranges, so the panels compare at a glance: betas from
    ``min(0.05, 0.3 min_r beta_r)`` to ``1.6 max_r max(beta_r, beta_c)`` on a logarithmic axis
    (muP's beta is ``sqrt(d_H)`` times smaller), alphas up to
    ``max(2, 1.4 max_r alpha_r, 1.4 max_r alpha*_r)`` on a logarithmic axis from
    ``min(0.1, alpha_r / 2, alpha*_r / 2)`` (the recipes' skip strengths span decades), or,
    when a recipe sets ``alpha = 0``, on a linear axis from a tenth of the top below 0 (so
    that its star is not cut by the edge). One legend below
    the panels names the phases, the lines and the star; the phase labels keep clear of the
    stars (:func:`~remprop.diagrams.style.keep_labels_clear`).

    Parameters
    ----------
    predictions : sequence of RecipePrediction
        From :func:`recipe_predictions`.
    resolution : int, optional
        Grid points per axis of each panel (default :data:`FIGURE_RESOLUTION`).
    columns : int
        Panels per row.

    Returns
    -------
    matplotlib.figure.Figure
    """
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from .style import LINE, NORM_TITLES, PHASE_STYLE, keep_labels_clear, new_figure
    from .theory_figures import ALPHA_STAR_BEYOND_LABEL, trainability_figure
    from .trainability import trainability_diagram

    resolution = FIGURE_RESOLUTION if resolution is None else resolution
    predictions = tuple(predictions)
    if not predictions:
        raise ValueError("predictions must hold at least one RecipePrediction")
    columns = min(int(columns), len(predictions))
    rows = -(-len(predictions) // columns)
    betas, alphas, log_alpha = _shared_axes(predictions, resolution)
    figure = new_figure(3.6 * columns, 3.4 * rows + 1.0)
    axes = np.atleast_1d(figure.subplots(rows, columns, squeeze=False, sharex=True, sharey=True)).ravel()
    star = dict(marker="*", markersize=16, color="#f2c200", markeredgecolor="black", linestyle="none")
    for ax, prediction in zip(axes, predictions):
        run = prediction.run
        diagram = trainability_diagram(run.arch, betas, alphas[alphas >= 0], run.depth, run.threshold,
                                       q0=run.q0, rho0=run.rho0)
        trainability_figure(diagram, ax=ax)
        ax.get_legend().remove()  # one legend for all panels, below them
        ax.set_xscale("log")
        if log_alpha:
            ax.set_yscale("log")
        ax.set_xlim(betas[0], betas[-1])
        ax.set_ylim(alphas[0], alphas[-1])
        alpha_r = float(run.arch.numeric()["alpha_sa"])
        ax.plot([run.beta], [alpha_r], zorder=5, **star)
        ax.set_title(f"{prediction.recipe.label}: {prediction.phase}\n"
                     rf"{NORM_TITLES[run.arch.norm]}, $\rho_L = {prediction.rho_final:.3f}$" "\n"
                     f"{_band_text(trainable_band(diagram, run.beta, alpha_r))}", fontsize=9)
        ax.set_xlabel(r"$\beta$", fontsize=8)
        ax.set_ylabel(r"$\alpha_{SA}$", fontsize=8)
        ax.label_outer()
    for ax in axes[len(predictions):]:
        ax.set_visible(False)
    handles = [Patch(facecolor=style["color"], hatch=style["hatch"], edgecolor=style["hatch_color"] or "0.5",
                     label=style["text"]) for style in PHASE_STYLE.values()]
    handles += [Line2D([], [], label=r"$\beta_c$ (each panel's)", **LINE["beta_critical"]),
                Line2D([], [], label=r"$\alpha^*(L)$", **LINE["alpha_star"]),
                Line2D([], [], label=ALPHA_STAR_BEYOND_LABEL, **LINE["alpha_star_beyond"]),
                Line2D([], [], label=r"the recipe (its $\beta$, $\alpha_{SA}$)", **star)]
    # about 2 inches per entry: as many columns as the figure's width holds
    ncol = max(1, min(len(handles), int(figure.get_figwidth() / 2.0)))
    figure.legend(handles=handles, loc="outside lower center", ncol=ncol, fontsize=9, frameon=False)
    first = predictions[0].run
    figure.suptitle(f"published recipes at L = {first.depth}\n(star: the recipe; each panel is the diagram "
                    f"of the recipe's own architecture)", fontsize=10)
    return keep_labels_clear(figure)


def trainable_band(diagram, beta, alpha):
    """The trainable band of ``alpha_sa`` through ``alpha`` in the column of ``diagram`` nearest
    ``beta``: ``(low, high)``, its first and last trainable grid values (a band at the grid's edge
    ends there), or None where the cell nearest ``(beta, alpha)`` is not trainable."""
    from .phases import TRAINABLE

    column = diagram.phase[:, int(np.abs(np.log(diagram.betas / beta)).argmin())] == TRAINABLE
    row = int(np.abs(diagram.alphas - alpha).argmin())
    if not column[row]:
        return None
    low = high = row
    while low > 0 and column[low - 1]:
        low -= 1
    while high < column.size - 1 and column[high + 1]:
        high += 1
    return float(diagram.alphas[low]), float(diagram.alphas[high])


def _band_text(band) -> str:
    if band is None:
        return r"not trainable at its $\beta$"
    return rf"trainable: $\alpha_{{SA}} \in [{band[0]:.3g}, {band[1]:.3g}]$"


def _shared_axes(predictions, resolution):
    """The grids shared by the panels of :func:`recipes_figure`: betas (geometric), alphas (each with
    every recipe's own value added), and
    whether the alpha axis is logarithmic (every recipe's alpha above 0: the skip strengths of
    the recipes span decades) or linear from 0 (with room below a star at alpha = 0)."""
    recipe_betas = [float(p.run.beta) for p in predictions]
    recipe_alphas = [float(p.run.arch.numeric()["alpha_sa"]) for p in predictions]
    beta_cs = [p.beta_critical if math.isfinite(p.beta_critical) else math.sqrt(2.0) for p in predictions]
    stars = [p.alpha_star for p in predictions if p.alpha_star is not None and math.isfinite(p.alpha_star)]
    # every recipe's own beta and alpha are grid values: the cell under its star is computed at the
    # recipe's point (a grid row next to alpha = 1 lies in another phase for the no-LN recipes)
    betas = np.union1d(np.geomspace(min(0.05, 0.3 * min(recipe_betas)), 1.6 * max(recipe_betas + beta_cs),
                                    resolution), recipe_betas)
    top = max([2.0] + [1.4 * a for a in recipe_alphas] + [1.4 * a for a in stars])
    if min(recipe_alphas) > 0:
        bottom = min([0.1] + [0.5 * a for a in recipe_alphas] + [0.5 * a for a in stars if a > 0])
        return betas, np.union1d(np.geomspace(bottom, top, resolution), recipe_alphas), True
    alphas = np.union1d(np.linspace(0.0, top, resolution), recipe_alphas)
    return betas, np.r_[-0.1 * top, alphas], False  # a star on the bottom edge: room below it
