"""The theory a diagnosis is judged by: a causal model's last tokens, by the best causal theory affordable.

An encoder is judged by its layer maps (the trainability diagram's theory). A decoder's late tokens
are not the layer maps' tokens (docs/theory.md section 8): :func:`remprop.diagrams.diagnose` takes
its phase, final cosine, ``alpha*(L)``, collapse depth and the effect of each change from the theory
:func:`last_tokens_theory` names -- the causal Gram state
(:func:`~remprop.theory.causal.propagate_causal_gram`) where it runs within
:data:`~remprop.theory.causal.AUTO_GRAM_FLOPS`, else the per-position maps
(:func:`~remprop.theory.causal.last_tokens_cosine`) -- and reports the layer maps beside it.

The work of that verdict is counted before it runs, in two parts under the one bound
:data:`~remprop.theory.causal.AUTO_GRAM_FLOPS`: the headline (:func:`headline_gram_layers`: the
model through ``COMFORTABLE_MARGINS["collapse_depth_ratio"]`` times its depth, its trajectory, phase,
final cosine and the collapse depth the graded verdict asks about), which decides
:func:`last_tokens_theory`; and with it the margins (:func:`verdict_gram_layers`: the ``alpha*``
search, :data:`GRAM_ALPHA_RUNS` runs of the model's depth, a root search from the per-position
maps' ``alpha*``, and the changes, :data:`GRAM_CHANGE_RUNS` runs), which decide
:func:`margins_theory`. A full-size decoder at T = 2048 affords the first and not always the
second: its headline is the Gram state's, its ``alpha*`` and changes the per-position maps', and
the report says so.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.optimize import brentq

from remprop.theory import gram_width
from remprop.theory.causal import (AUTO_GRAM_FLOPS, causal_gram_support_problem, choose_causal_theory,
                                   compared_last_tokens, last_tokens_cosine, propagate_causal_gram)

from .residual_strength import ALPHA_MAX

__all__ = ["CausalVerdictTheory", "last_tokens_theory", "margins_theory", "headline_gram_layers", "verdict_gram_layers",
           "CAUSAL_THEORY_LABELS",
           "GRAM_DRAWS", "GRAM_ALPHA_RUNS", "GRAM_CHANGE_RUNS", "COLLAPSE_SEARCH_RATIO"]

#: Monte Carlo draws per attention layer of the causal Gram state of a diagnosis.
GRAM_DRAWS = 8
#: What each theory of the last tokens is called in the report, the JSON and the figure.
CAUSAL_THEORY_LABELS = {"maps": "per-position maps", "gram": "causal Gram state"}
#: Runs of the causal Gram state (each through the model's depth) that search ``alpha*(L)``: root
#: steps from the per-position maps' ``alpha*`` and the model's own point.
GRAM_ALPHA_RUNS = 4
#: Runs of the causal Gram state for the changes of a diagnosis (the skip scaling, the query/key std
#: and the other norm placement; gain-controlled attention has no causal theory).
GRAM_CHANGE_RUNS = 3
#: The causal Gram state follows the model to this multiple of its depth for the collapse depth: the
#: margin :data:`~remprop.diagrams.diagnosis.COMFORTABLE_MARGINS` asks whether rank collapse sets in
#: before twice the depth (kept equal to it by a test).
COLLAPSE_SEARCH_RATIO = 2


def headline_gram_layers(depth, max_depth) -> int:
    """Layers of causal Gram state of a diagnosis' headline (trajectory, phase, final cosine, collapse
    depth): the model to ``min(max_depth, COLLAPSE_SEARCH_RATIO depth)``, at least its depth."""
    return max(depth, min(max_depth, COLLAPSE_SEARCH_RATIO * depth))


def verdict_gram_layers(depth, max_depth) -> int:
    """Layers of causal Gram state of a whole diagnosis of a ``depth``-layer model: the headline
    (:func:`headline_gram_layers`) and ``GRAM_ALPHA_RUNS + GRAM_CHANGE_RUNS`` runs of its depth
    (``alpha*`` and the changes)."""
    return headline_gram_layers(depth, max_depth) + (GRAM_ALPHA_RUNS + GRAM_CHANGE_RUNS) * depth


def last_tokens_theory(spec, choice="auto", draws=GRAM_DRAWS, max_depth=None):
    """Which theory judges a causal model in :func:`~remprop.diagrams.diagnose` (its last tokens'
    trajectory, phase, final cosine and collapse depth), and why.

    The causal Gram state (:func:`~remprop.theory.causal.propagate_causal_gram` at the model's width,
    :func:`~remprop.theory.gram_width`: each late row with its true keys, docs/theory.md sections 8 and
    8.2; docs/real_models.md sections 5.4 and 5.6 measure it against the real modules) where it can
    run the model and the headline is affordable, else the per-position maps:
    :func:`~remprop.theory.causal.choose_causal_theory` at the model's architecture and T over the
    headline's layers (:func:`headline_gram_layers`; ``"auto"``: the Gram state up to
    :data:`~remprop.theory.causal.AUTO_GRAM_FLOPS` floating-point operations). The ``alpha*`` and the
    changes follow :func:`margins_theory`.

    Parameters
    ----------
    spec : ModelSpec
    choice : {"auto", "maps", "gram"}
    draws : int
        Monte Carlo draws per attention layer of the Gram state.
    max_depth : int, optional
        Deepest stack searched for the onset of rank collapse (default: twice the model's depth).

    Returns
    -------
    (str, str) or None
        ``("gram" | "maps", reason)``; None for an encoder (no last tokens). An explicit
        ``"gram"`` that cannot run, or one asked of an encoder, is a ValueError naming
        ``causal_theory``.
    """
    if not spec.causal:
        if choice == "gram":
            raise ValueError(f"causal_theory='gram': {spec.name} is not a causal model (its tokens follow the "
                             "layer maps)")
        return None
    layers = headline_gram_layers(spec.depth, _searched(spec, max_depth))
    return _choose(spec, layers, choice, draws, "the headline's")


def margins_theory(spec, choice="auto", draws=GRAM_DRAWS, max_depth=None):
    """Which theory gives a causal model's ``alpha*`` and the changes' effects in
    :func:`~remprop.diagrams.diagnose`, and why: the causal Gram state where :func:`last_tokens_theory`
    takes it and, under ``"auto"``, the whole verdict (:func:`verdict_gram_layers`) is within
    :data:`~remprop.theory.causal.AUTO_GRAM_FLOPS`; else the per-position maps. Parameters and
    return value as :func:`last_tokens_theory`."""
    headline = last_tokens_theory(spec, choice, draws, max_depth)
    if headline is None or headline[0] == "maps" or choice == "gram":
        return headline
    return _choose(spec, verdict_gram_layers(spec.depth, _searched(spec, max_depth)), choice, draws,
                   "the whole verdict's (with alpha* and the changes)")


def _searched(spec, max_depth):
    return COLLAPSE_SEARCH_RATIO * spec.depth if max_depth is None else max_depth


def _choose(spec, layers, choice, draws, what):
    """:func:`~remprop.theory.causal.choose_causal_theory` over ``layers`` of the model at its width."""
    name, reason = choose_causal_theory(spec.architecture, layers, spec.seq_len, draws=draws, choice=choice,
                                        budget=AUTO_GRAM_FLOPS, width=gram_width(spec.architecture, spec.width))
    if "floating-point operations" in reason:
        reason += f" for {what} {layers} layers of Gram state ({layers / spec.depth:.3g} x the depth)"
    return name, reason


@dataclass(frozen=True)
class CausalVerdictTheory:
    """One causal theory of a model's last tokens, run at the model's settings or changed ones.

    Attributes
    ----------
    name : {"gram", "maps"}
    spec : ModelSpec
    draws : int
        Monte Carlo draws per attention layer (the Gram state; seed 0 in every run, so that runs at
        nearby settings share their random numbers).
    """

    name: str
    spec: object
    draws: int = GRAM_DRAWS

    @property
    def label(self) -> str:
        return CAUSAL_THEORY_LABELS[self.name]

    def runs(self, arch) -> bool:
        """Whether this theory has a map of ``arch`` (neither has one of gain-controlled attention)."""
        if arch.attention.gain_controlled:
            return False
        return self.name == "maps" or causal_gram_support_problem(arch) is None

    def cosine(self, run, depth=None) -> np.ndarray:
        """The last tokens' cosine per layer, shape ``(depth + 1,)``, of ``run`` (a RunSettings of the
        model, possibly changed) through ``depth`` blocks (default the run's), each layer with the
        model's sliding windows (:attr:`~remprop.theory.ModelSpec.attention_windows`)."""
        s = self.spec
        depth = run.depth if depth is None else depth
        last = compared_last_tokens(s.seq_len)
        windows = s.attention_windows or None  # the model's sliding windows (per layer, repeated)
        if self.name == "maps":
            return last_tokens_cosine(run.arch, run.beta, depth, s.seq_len, last, run.q0, run.rho0, windows)
        return propagate_causal_gram(run.arch, run.beta, depth, s.seq_len, run.q0, run.rho0, last=last,
                                     draws=self.draws, seed=0, norm_eps=s.layer_norm_eps, window=windows,
                                     width=gram_width(run.arch, s.width)).rho

    def trajectory(self, run, max_depth):
        """(the cosine through the run's depth, collapse depth or None, the depth searched).

        The maps follow the model to ``max_depth``; the Gram state to
        ``min(max_depth, COLLAPSE_SEARCH_RATIO depth)`` (the same run: its first layers are the
        model's)."""
        depth = run.depth
        searched = max_depth if self.name == "maps" else max(depth, min(max_depth, COLLAPSE_SEARCH_RATIO * depth))
        rho = self.cosine(run, searched)
        above = np.flatnonzero(~(rho[1:] <= run.threshold))
        return rho[:depth + 1], (int(above[0]) + 1 if above.size else None), searched

    def alpha_star(self, run, model_final, start):
        """``(alpha*, error)``: the smallest ``alpha_sa`` at which the final cosine is at most the threshold.

        The maps: Brent's root of ``rho_L(alpha) - t`` on ``[0, ALPHA_MAX]`` to 1e-9 (error 0 reported;
        0 when alpha_SA = 0 stays below, inf when ALPHA_MAX does not). The Gram state:
        :data:`GRAM_ALPHA_RUNS` runs of a root search on ``log(1 - rho_L) - log(1 - t)`` (inverse quadratic
        interpolation inside the bracket found) from ``start`` (the maps'
        alpha*) and the model's own point ``(alpha_SA, model_final)``; the error is the last step's length
        (where the maps' alpha* is 0, one run at alpha_SA = 0 first: 0 when it stays below).
        """
        t = run.threshold

        def gap(alpha):
            with np.errstate(over="ignore", invalid="ignore"):  # a stream past float64 is read below
                rho = float(self.cosine(run.replace(arch=run.arch.replace(alpha_sa=alpha)))[-1])
            return math.log1p(-min(rho, 1.0 - 1e-15)) - math.log1p(-t) if math.isfinite(rho) else -math.inf

        if self.name == "maps":
            low = gap(0.0)
            if low >= 0:
                return 0.0, 0.0
            top = ALPHA_MAX   # a stream that leaves float64 there (alpha^2L) reads -inf: the bracket's top comes down
            while gap(top) == -math.inf and top > 1e-6:
                top *= 0.5
            if not gap(top) >= 0:
                return math.inf, 0.0
            return float(brentq(gap, 0.0, top, xtol=1e-9)), 0.0
        if not math.isfinite(start):
            return math.inf, math.nan  # no alpha_SA up to the search bound by the maps: not searched
        if start == 0 and gap(0.0) >= 0:
            return 0.0, 0.0
        points = [(float(run.arch.alpha_sa), math.log1p(-min(model_final, 1.0 - 1e-15)) - math.log1p(-t))]
        guess = start if start > 0 else 0.5 * points[0][0]
        for _ in range(GRAM_ALPHA_RUNS):
            points.append((guess, gap(guess)))
            guess = _next_root_guess(points)
        return guess, abs(guess - points[-1][0])


def _next_root_guess(points):
    """The next estimate of the root of an increasing function from its evaluated ``(x, g)`` points:
    inverse quadratic interpolation through the last three (a secant through the last two while
    fewer), kept inside the tightest bracket where one is known (its midpoint otherwise) and >= 0."""
    finite = [(x, g) for x, g in points if math.isfinite(g)]
    low = max((x for x, g in finite if g < 0), default=None)
    high = min((x for x, g in finite if g >= 0), default=None)
    last = finite[-3:]
    guess = math.nan
    if len(last) == 3 and len({g for _, g in last}) == 3:
        (x0, g0), (x1, g1), (x2, g2) = last
        guess = (x0 * g1 * g2 / ((g0 - g1) * (g0 - g2)) + x1 * g0 * g2 / ((g1 - g0) * (g1 - g2))
                 + x2 * g0 * g1 / ((g2 - g0) * (g2 - g1)))
    elif len(last) >= 2 and last[-1][1] != last[-2][1]:
        (x0, g0), (x1, g1) = last[-2:]
        guess = x1 - g1 * (x1 - x0) / (g1 - g0)
    if low is not None and high is not None and not low < guess < high:
        guess = 0.5 * (low + high)
    elif not math.isfinite(guess):  # no slope yet: away from the last point, towards the root
        x, g = finite[-1] if finite else points[-1]
        guess = 0.5 * x if g >= 0 else 2.0 * max(x, 1e-3)
    return max(guess, 0.0)
