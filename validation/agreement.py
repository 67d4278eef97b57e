"""Whether a theory and a measurement agree: one rule, for every comparison the package prints.

The rule (issue 14, kept for ``validate``, ``check --simulate`` and the acceptance table): with
``e_l = |theory_l - mean measured_l|`` and ``s_l`` the standard error of that mean over the
seeds (initialisations; of one set of weights -- ``check DIR --simulate`` -- its input draws), theory and
measurement agree when

.. math:: e_l \\le \\max(\\text{tolerance}, k\\, s_l) \\quad \\text{for every layer } l = 1..L,

tolerance :data:`ACCEPTANCE_TOLERANCE` (0.02) and k :data:`STANDARD_ERRORS` (2).
:func:`acceptance_error` applies it to one curve (:func:`agreement`: to whole curves, which may not
be finite), :func:`verdict_line` says its outcome in one line.

Reference: docs/validation.md, "Acceptance on real text (issue 14 settings)".
"""
from __future__ import annotations

import numpy as np

from remprop.theory.checks import as_float_array, check_count

__all__ = ["ACCEPTANCE_TOLERANCE", "STANDARD_ERRORS", "SEED_DRAWS", "acceptance_error", "agreement", "agreement_rule",
           "verdict_line"]

#: The absolute tolerance of the rule on ``|theory - measured mean cosine|``.
ACCEPTANCE_TOLERANCE = 0.02
#: Standard errors of the measured mean that count as agreement where they exceed the tolerance.
STANDARD_ERRORS = 2.0
#: What one seed draws -> (plural, singular) in words: a fresh initialisation of the model, or (a
#: model's own weights, one set) the random inputs it is fed.
SEED_DRAWS = {"initialisations": ("initialisations", "initialisation"), "input draws": ("input draws", "input draw")}


def _seed_draw(seed_draws):
    if seed_draws not in SEED_DRAWS:
        raise ValueError(f"seed_draws must be one of {', '.join(map(repr, SEED_DRAWS))}, got {seed_draws!r}")
    return seed_draws


def acceptance_error(theory, measured, *, depth=None, tolerance=ACCEPTANCE_TOLERANCE,
                     standard_errors=STANDARD_ERRORS, sequences_per_seed=1, seed_draws="initialisations") -> dict:
    r"""The rule on one curve: the largest error over layers 1..L and whether it passes.

    With ``e_l = |theory_l - mean_n measured_{n,l}|`` and ``s_l`` the standard error of that
    mean, the case passes when

    .. math:: e_l \le \max(\text{tolerance}, k\, s_l) \quad \text{for every } l = 1..L.

    Parameters
    ----------
    theory : array_like, shape (depth + 1,)
        Predicted cosine of layers 0..depth.
    measured : array_like, shape (n, depth + 1)
        Measured mean cosine of each sequence.
    depth : int, optional
        L (default all layers).
    tolerance : float
        Absolute tolerance (0.02).
    standard_errors : float
        k (2).
    sequences_per_seed : int
        Rows of ``measured`` that share one initialisation (seed-major, consecutive). The
        sequences of one seed run through the same weights, so their cosines are correlated
        and are not independent samples: ``s_l`` is the standard deviation of the per-seed
        means over the seeds, divided by sqrt(seeds) (ddof 1; 0 for one seed). 1 (default):
        every row its own initialisation.
    seed_draws : {"initialisations", "input draws"}
        What the seeds draw (:data:`SEED_DRAWS`): fresh initialisations, or the inputs fed to
        one set of weights (a model's own); the rule is the same, its words name it.

    Returns
    -------
    dict
        ``max_error`` and its ``layer``, ``two_se`` (k s.e. at that layer), ``passed``
        (bool), ``worst_layer`` / ``worst_ratio``: the layer where ``e_l /
        max(tolerance, k s_l)`` is largest, and that ratio (> 1: fails there), with
        ``worst_error`` and ``worst_allowed`` (``e_l`` and ``max(tolerance, k s_l)`` there),
        and the rule's ``tolerance``, ``standard_errors``, ``seeds`` and ``seed_draws``.

    References
    ----------
    Issue 14 (acceptance); docs/validation.md, "Acceptance on real text (issue 14 settings)".
    """
    theory = np.asarray(theory, dtype=float)
    measured = np.asarray(measured, dtype=float)
    if theory.ndim != 1 or theory.shape[0] < 2 or measured.ndim != 2 or measured.shape[1] != theory.shape[0]:
        raise ValueError(f"measured must have shape (n, layers) against a theory of shape (layers,), layers >= 2; "
                         f"got theory {theory.shape}, measured {measured.shape}")
    depth = theory.shape[0] - 1 if depth is None else check_count("depth", depth, 1)
    if depth > theory.shape[0] - 1:
        raise ValueError(f"depth must be <= {theory.shape[0] - 1} (the layers given), got {depth}")
    tolerance = float(as_float_array("tolerance", tolerance, nonnegative=True))
    standard_errors = float(as_float_array("standard_errors", standard_errors, nonnegative=True))
    seed_draws = _seed_draw(seed_draws)
    if not (np.isfinite(theory[:depth + 1]).all() and np.isfinite(measured[:, :depth + 1]).all()):
        raise ValueError("theory and measured must be finite at layers 0..depth")
    per_seed = check_count("sequences_per_seed", sequences_per_seed, 1)
    if measured.shape[0] % per_seed:
        raise ValueError(f"sequences_per_seed must divide the {measured.shape[0]} measured rows, got {per_seed}")
    seeds = measured[:, 1:depth + 1].reshape(-1, per_seed, depth).mean(axis=1)   # (seeds, layers)
    n = seeds.shape[0]
    mean = seeds.mean(axis=0)
    se = seeds.std(axis=0, ddof=1) / np.sqrt(n) if n > 1 else np.zeros(depth)
    error = np.abs(theory[1:depth + 1] - mean)
    allowed = np.maximum(tolerance, standard_errors * se)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(error == 0, 0.0, error / allowed)
    i, w = int(np.argmax(error)), int(np.argmax(ratio))
    return {"max_error": float(error[i]), "layer": i + 1, "two_se": float(standard_errors * se[i]),
            "passed": bool((error <= allowed).all()), "worst_layer": w + 1, "worst_ratio": float(ratio[w]),
            "worst_error": float(error[w]), "worst_allowed": float(allowed[w]), "tolerance": tolerance,
            "standard_errors": standard_errors, "seeds": int(n), "seed_draws": seed_draws}


def agreement_rule(result: dict) -> str:
    """The rule of an :func:`acceptance_error` result in words (its tolerance, k and seeds, and what
    the seeds draw: :data:`SEED_DRAWS`)."""
    seeds = result["seeds"]
    plural, singular = SEED_DRAWS[result.get("seed_draws", "initialisations")]
    over = f"over the {seeds} {plural}" if seeds > 1 else f"(one {singular}: no standard error)"
    return (f"every layer 1..L within max({result['tolerance']:g}, {result['standard_errors']:g} standard errors "
            f"{over})")


def verdict_line(result: dict) -> str:
    """One line: agree / disagree, the rule and the worst layer of an :func:`acceptance_error` result.

    ``"verdict: agree (rule: ...); worst layer 7: error 0.0123, allowed 0.0200"``.
    """
    if result.get("problem"):
        return f"verdict: theory and measurement disagree: {result['problem']}"
    word = "agree" if result["passed"] else "disagree"
    return (f"verdict: theory and measurement {word} (rule: {agreement_rule(result)}); worst layer "
            f"{result['worst_layer']}: error {result['worst_error']:.4f}, allowed {result['worst_allowed']:.4f}")


def agreement(theory, measured, *, sequences_per_seed=1, seed_draws="initialisations") -> dict:
    """:func:`acceptance_error` over all layers, or, where the curves are not finite (a run that
    diverged, a damaged record), a failing result that says so: ``{"passed": False, "problem": ...}``.
    """
    theory, measured = np.asarray(theory, dtype=float), np.asarray(measured, dtype=float)
    if not (np.isfinite(theory).all() and np.isfinite(measured).all()):
        return {"passed": False, "problem": "the theory or the measured cosines are not finite (NaN or inf)",
                "tolerance": ACCEPTANCE_TOLERANCE, "standard_errors": STANDARD_ERRORS,
                "seed_draws": _seed_draw(seed_draws)}
    return acceptance_error(theory, measured, sequences_per_seed=sequences_per_seed, seed_draws=seed_draws)
