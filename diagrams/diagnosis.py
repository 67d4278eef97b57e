"""Diagnose a real model: its place on the trainability diagram and what would move it.

:func:`diagnose` takes a :class:`~remprop.theory.ModelSpec` (a Hugging Face configuration at the library's
default initialisation, :func:`remprop.theory.model_spec`) and predicts, from the theory alone:

* where the model sits: its query/key scale ``beta`` against the critical ``beta_c`` of its attention inputs,
  its skip strength ``alpha_sa = 1`` against the minimum ``alpha*(L)`` that keeps the depth-L stack out of rank
  collapse, and the phase;
* the mean cosine of two tokens layer by layer (causal models: also the average over the last 50 positions,
  docs/theory.md section 8, by the best causal theory affordable at the model's T: the causal Gram state, else
  the per-position maps, :func:`~remprop.diagrams.compared_theory.last_tokens_theory`), and the depth at which
  rank collapse would set in if the stack were deeper; a causal model's phase, final cosine, ``alpha*``,
  collapse depth and changes come from that theory, the layer maps' beside them
  (:mod:`remprop.diagrams.compared_theory`);
* the expected squared norm of the query gradient ``E|dS/dW_Q|^2`` of the first and of the last attention layer
  (Result 2: it vanishes as ``rho -> 1`` and for small beta);
* concrete changes -- skip scaling, query/key std, LayerNorm placement, gain-controlled attention -- each with
  its predicted final cosine and phase.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from remprop.theory import (DEFAULT_THRESHOLD, ModelSpec, RunSettings, key_gradient_norm,
                            model_spec, participation_moment, propagate, query_gradient_norm)
from remprop.theory import softcap
from remprop.theory.learning_rate import DEFAULT_STEPS
from remprop.theory.models.measured_weights import ZERO_BETA
from remprop.theory.causal import LAST_TOKENS
from remprop.theory.checks import check_count, check_depth

from .diagnosis_report import REPORT_LAYERS, report_text
from .compared_theory import CAUSAL_THEORY_LABELS, GRAM_DRAWS, CausalVerdictTheory, last_tokens_theory, margins_theory
from .learning_rate import lr_ceiling_summary
from .phases import PHASE_LABELS, classify_phases
from . import init_deviations, residual_strength

__all__ = ["Change", "Diagnosis", "diagnose", "LAST_TOKENS", "MAX_COLLAPSE_DEPTH", "REPORT_LAYERS",
           "COMFORTABLE_MARGINS", "GRADES"]

#: Deepest stack searched for the onset of rank collapse.
MAX_COLLAPSE_DEPTH = 10_000
#: Safety margin on alpha* when a larger skip strength is recommended.
ALPHA_MARGIN = 1.1
#: Margins of a trainable model that :attr:`Diagnosis.verdict` calls comfortable (docs/real_models.md
#: section 3): ``alpha_SA >= 1.5 alpha*(L)`` (alpha* grows with depth: BERT-base's 48-layer version has
#: ``alpha_SA = 1.13 alpha*`` and ends at cosine 0.97, a thin margin); ``beta <= beta_c / 2`` (the REM's
#: annealed regime ends at beta_c / 2, docs/theory.md section 3.3: above it the rows concentrate and the
#: query gradient starts to fall, section 7); the last attention layer's query gradient at least 1/10
#: of the first's (docs/theory.md section 7: it vanishes through (q - p)^2 as the cosine approaches 1);
#: rank collapse not before twice the model's depth.
COMFORTABLE_MARGINS = {"alpha_ratio": 1.5, "beta_ratio": 0.5, "gradient_decay": 10.0, "collapse_depth_ratio": 2.0}
#: The graded verdicts of :attr:`Diagnosis.verdict` and their words.
GRADES = {"comfortable": "trainable, comfortable margin", "marginal": "trainable, marginal",
          "rank-collapse": "rank collapse", "entropy-collapse": "entropy collapse"}


@dataclass(frozen=True)
class Change:
    """One change of the model and its predicted effect.

    Attributes
    ----------
    name : str
        ``"skip scaling"``, ``"query/key std"``, ``"LayerNorm placement"`` or ``"gain-controlled attention"``.
    action : str
        What to change, in words a practitioner can apply.
    final_rho : float
        Predicted mean cosine after the last block with the change.
    phase : str
        Predicted phase with the change (``"trainable"``, ``"rank-collapse"``, ``"entropy-collapse"``).
    values : dict
        The numbers behind the action (e.g. ``alpha_sa``, ``query_key_std``).
    theory : str
        The theory of ``final_rho`` and ``phase``: the diagnosis' own (:attr:`Diagnosis.theory`), or
        ``"layer maps"`` where a causal model's theory has no map of the change (gain-controlled
        attention).
    """

    name: str
    action: str
    final_rho: float
    phase: str
    values: dict = field(default_factory=dict)
    theory: str = "layer maps"

    def to_dict(self) -> dict:
        return {"name": self.name, "action": self.action, "final_rho": self.final_rho, "phase": self.phase,
                "values": dict(self.values), "theory": self.theory}


@dataclass(frozen=True)
class Diagnosis:
    """The theory's verdict on one model (see :func:`diagnose`).

    Attributes
    ----------
    spec : ModelSpec
    threshold : float
        Rank-collapse threshold on the final cosine.
    q, rho : ndarray, shape (depth + 1,)
        Predicted order parameters per layer by the layer maps, the trainability diagram's theory
        (0 = input of block 1).
    rho_last_tokens : ndarray or None
        Causal models: predicted mean cosine of the last :data:`~remprop.theory.causal.LAST_TOKENS`
        positions, by the theory ``last_tokens_theory`` names.
    beta_critical : float
        Critical beta deciding entropy collapse (first attention layer for post-LN,
        smallest over layers otherwise).
    alpha_star : float
        Minimum ``alpha_sa`` that avoids rank collapse at this depth and beta, by :attr:`theory` (a causal
        model: by ``margins_theory``).
    phase : str
        By :attr:`theory`: its final cosine against ``threshold``, ``beta`` against ``beta_critical``.
    collapse_depth : int or None
        First depth at which :attr:`theory`'s cosine exceeds ``threshold`` (None: not within
        ``max_depth`` layers).
    max_depth : int
        Deepest stack searched for the collapse depth (the causal Gram state:
        :data:`~remprop.diagrams.compared_theory.COLLAPSE_SEARCH_RATIO` times the depth at most).
    y2_first : float
        Participation ratio of the first attention layer's rows (finite T).
    gradient_first, gradient_last : float
        ``E|dS/dW_Q|_F^2`` of the first and last attention layer by the single-head
        formula, before the output projection (:func:`~remprop.theory.query_gradient_norm`).
    key_gradient_first, key_gradient_last : float
        The same for ``W_K`` (:func:`~remprop.theory.key_gradient_norm`).
    changes : tuple of Change
    rho_last_tokens_maps : ndarray or None
        Causal models: the same cosine by the per-position maps (equal to ``rho_last_tokens``
        when they are the theory used; kept for comparison when the Gram state is).
    last_tokens_theory : {"gram", "maps"} or None
        Causal models: the theory of ``rho_last_tokens`` and of the verdict
        (:func:`~remprop.diagrams.compared_theory.last_tokens_theory`).
    last_tokens_reason : str or None
        Why that theory: the work it takes, or why the Gram state cannot run.
    gram_draws : int or None
        Monte Carlo draws per attention layer of the Gram state (when it is used).
    margins_theory, margins_reason : str or None
        Causal models: the theory of ``alpha_star`` and of the changes, and why
        (:func:`~remprop.diagrams.compared_theory.margins_theory`).
    lr_ceiling : dict or None
        The learning-rate ceiling (:func:`~remprop.diagrams.learning_rate.lr_ceiling_summary`).
    layer_maps : dict or None
        Causal models: the layer maps' verdict beside the compared theory's: ``final_rho``,
        ``phase``, ``alpha_star``, ``collapse_depth``, ``max_depth``; None for an encoder, whose
        theory they are.
    alpha_star_error : float
        The causal Gram state: the last step of its ``alpha*`` search
        (:meth:`~remprop.diagrams.compared_theory.CausalVerdictTheory.alpha_star`); 0 otherwise.
    init : remprop.diagrams.init_deviations.InitDeviations or None
        A model measured on its own weights: each tensor group against the library's default init and what
        the deviations do (:func:`~remprop.diagrams.init_deviations.init_deviations`); None otherwise.
    """

    spec: ModelSpec
    threshold: float
    q: np.ndarray
    rho: np.ndarray
    rho_last_tokens: np.ndarray | None
    beta_critical: float
    alpha_star: float
    phase: str
    collapse_depth: int | None
    max_depth: int
    y2_first: float
    gradient_first: float
    gradient_last: float
    key_gradient_first: float
    key_gradient_last: float
    changes: tuple
    rho_last_tokens_maps: np.ndarray | None = None
    last_tokens_theory: str | None = None
    last_tokens_reason: str | None = None
    gram_draws: int | None = None
    margins_theory: str | None = None
    margins_reason: str | None = None
    lr_ceiling: dict | None = None
    layer_maps: dict | None = None
    alpha_star_error: float = 0.0
    init: object = None

    @property
    def theory(self) -> str:
        """The theory of the verdict: ``"layer maps"``, or for a causal model the theory of its last
        tokens (``"causal Gram state"`` or ``"per-position maps"``)."""
        return CAUSAL_THEORY_LABELS[self.last_tokens_theory] if self.last_tokens_theory else "layer maps"

    @property
    def final_rho(self) -> float:
        """The final cosine of the verdict: :attr:`compared_rho` after the last block."""
        return float(self.compared_rho[-1])

    @property
    def alpha_sa(self) -> float:
        """The model's attention skip strength (1 for a plain residual stream)."""
        return float(self.spec.architecture.alpha_sa)

    @property
    def margins(self) -> dict:
        """How far the model sits from each collapse (docs/real_models.md section 3).

        ``alpha_ratio = alpha_SA / alpha*(L)`` (> 1: out of rank collapse; inf when alpha* = 0,
        0 when no alpha_SA avoids it); ``beta_ratio = beta / beta_c`` (< 1: out of entropy
        collapse; 0 when beta_c = inf); ``gradient_decay`` the factor by which the query gradient
        ``E|dS/dW_Q|^2`` falls from the first to the last attention layer (docs/theory.md
        section 7); ``collapse_depth`` the first depth at which rank collapse sets in (None: not
        within ``max_depth``) and ``collapse_depth_ratio`` that depth over the model's.
        """
        a = self.alpha_star
        alpha_ratio = math.inf if a == 0 else self.alpha_sa / a if math.isfinite(a) else 0.0
        beta_c = self.beta_critical
        beta_ratio = self.spec.beta / beta_c if math.isfinite(beta_c) else 0.0
        decay = self.gradient_first / self.gradient_last if self.gradient_last > 0 else math.inf
        depth_ratio = None if self.collapse_depth is None else self.collapse_depth / self.spec.depth
        return {"alpha_ratio": alpha_ratio, "beta_ratio": beta_ratio, "gradient_decay": decay,
                "collapse_depth": self.collapse_depth, "collapse_depth_ratio": depth_ratio}

    @property
    def verdict(self) -> dict:
        """The graded verdict: ``{"grade", "text", "thin"}``.

        ``grade`` is ``"entropy-collapse"`` or ``"rank-collapse"`` (the phase), else
        ``"comfortable"`` when every margin of :attr:`margins` clears
        :data:`COMFORTABLE_MARGINS` and ``"marginal"`` otherwise; ``thin`` names the margins
        that do not (one phrase each: which margin, its ratio, the comfortable bound and the value
        of the model's parameter it stands for), ``text`` says it in words (:data:`GRADES`).
        """
        m, bound = self.margins, COMFORTABLE_MARGINS
        if self.phase == "entropy-collapse":
            return {"grade": "entropy-collapse", "thin": [],
                    "text": f"{GRADES['entropy-collapse']} (beta / beta_c = {m['beta_ratio']:.3g} > 1)"}
        if self.phase == "rank-collapse":
            where = (f"from layer {self.collapse_depth}" if self.collapse_depth is not None
                     else f"final cosine above {self.threshold:g}")
            return {"grade": "rank-collapse", "thin": [], "text": f"{GRADES['rank-collapse']} ({where})"}
        thin, depth = [], self.spec.depth
        if m["alpha_ratio"] < bound["alpha_ratio"]:
            thin.append(f"skip margin alpha_SA / alpha*(L = {depth}) = {m['alpha_ratio']:.3g}, under the comfortable "
                        f"{bound['alpha_ratio']:g} (alpha_SA >= {bound['alpha_ratio']:g} alpha* = "
                        f"{bound['alpha_ratio'] * self.alpha_star:.3g}): the skip is within "
                        f"{bound['alpha_ratio']:g}x of the smallest that avoids rank collapse at {depth} layers")
        if m["beta_ratio"] > bound["beta_ratio"]:
            thin.append(f"query/key margin beta / beta_c = {m['beta_ratio']:.3g}, over the comfortable "
                        f"{bound['beta_ratio']:g} (beta <= {bound['beta_ratio'] * self.beta_critical:.3g}): "
                        f"attention is near entropy collapse")
        if m["gradient_decay"] > bound["gradient_decay"]:
            thin.append(f"gradient margin: the query gradient falls {m['gradient_decay']:.3g}x over the stack, "
                        f"over the comfortable {bound['gradient_decay']:g}x")
        if m["collapse_depth_ratio"] is not None and m["collapse_depth_ratio"] < bound["collapse_depth_ratio"]:
            thin.append(f"depth margin: rank collapse from layer {m['collapse_depth']}, under the comfortable "
                        f"{bound['collapse_depth_ratio']:g} x depth = {bound['collapse_depth_ratio'] * depth:g}")
        grade = "marginal" if thin else "comfortable"
        return {"grade": grade, "thin": thin, "text": GRADES[grade] + (f" ({'; '.join(thin)})" if thin else "")}

    @property
    def compared_rho(self) -> np.ndarray:
        """The predicted cosine per layer that measurements are compared with: ``rho``, or
        for causal models ``rho_last_tokens`` (the late tokens that follow the encoder maps)."""
        return self.rho if self.rho_last_tokens is None else self.rho_last_tokens

    def summary(self) -> dict:
        """The numbers that decide the verdict, for a before/after comparison (``check --alpha``):
        ``theory`` (:attr:`theory`, whose are ``alpha_star``, ``final_rho``, ``collapse_depth`` and
        ``phase``), ``alpha_sa``, ``alpha_star``, ``alpha_ratio``, ``beta``, ``beta_critical``,
        ``beta_ratio``, ``final_rho``, ``final_rho_layer_maps`` (the layer maps' beside it),
        ``collapse_depth``, ``gradient_decay``, ``phase`` and ``verdict`` (its text)."""
        m = self.margins
        return {"theory": self.theory, "alpha_sa": self.alpha_sa, "alpha_star": self.alpha_star,
                "alpha_ratio": m["alpha_ratio"], "beta": float(self.spec.beta), "beta_critical": self.beta_critical,
                "beta_ratio": m["beta_ratio"], "final_rho": self.final_rho, "final_rho_layer_maps": float(self.rho[-1]),
                "collapse_depth": self.collapse_depth, "gradient_decay": m["gradient_decay"],
                "phase": self.phase, "verdict": self.verdict["text"]}

    def to_dict(self) -> dict:
        """JSON-ready content (non-finite numbers stay floats; use ``remprop._json``)."""
        return {
            "model": self.spec.to_dict(), "threshold": self.threshold,
            "q": self.q.tolist(), "rho": self.rho.tolist(),
            "rho_last_tokens": None if self.rho_last_tokens is None else self.rho_last_tokens.tolist(),
            "rho_last_tokens_maps": None if self.rho_last_tokens_maps is None else self.rho_last_tokens_maps.tolist(),
            "last_tokens_theory": self.last_tokens_theory,
            "last_tokens_theory_label": CAUSAL_THEORY_LABELS.get(self.last_tokens_theory),
            "last_tokens_theory_reason": self.last_tokens_reason, "gram_draws": self.gram_draws,
            "margins_theory": self.margins_theory, "margins_theory_reason": self.margins_reason,
            "theory": self.theory, "final_rho": self.final_rho,
            "layer_maps": None if self.layer_maps is None else dict(self.layer_maps),
            "alpha_star_error": self.alpha_star_error,
            "beta": self.spec.beta, "beta_critical": self.beta_critical, "alpha_sa": self.alpha_sa,
            "alpha_star": self.alpha_star, "phase": self.phase, "collapse_depth": self.collapse_depth,
            "margins": self.margins, "verdict": self.verdict, "comfortable_margins": dict(COMFORTABLE_MARGINS),
            "max_depth": self.max_depth, "y2_first": self.y2_first,
            "gradient_first": self.gradient_first, "gradient_last": self.gradient_last,
            "key_gradient_first": self.key_gradient_first, "key_gradient_last": self.key_gradient_last,
            "changes": [c.to_dict() for c in self.changes],
            "lr_ceiling": None if self.lr_ceiling is None else dict(self.lr_ceiling),
            **({} if self.init is None else {"init_deviations": self.init.to_dict()})}

    def report(self) -> str:
        """A plain-text report: placement, per-layer cosine, gradients, recommended changes
        (:func:`remprop.diagrams.diagnosis_report.report_text`)."""
        return report_text(self)



def _verdict(run: RunSettings, source, **changes):
    """(final rho, deciding beta_c on the model's beta axis, phase label, trajectory) of a run.

    A trajectory that leaves the float64 range (an initialisation far outside any trained
    model's, e.g. ``initializer_range = 1e100``) is an error naming ``source``, the config
    field it comes from, not a NaN verdict.
    """
    run = run.replace(**changes) if changes else run
    traj = propagate(run)
    if not (np.all(np.isfinite(traj.q)) and np.all(np.isfinite(traj.rho))):
        raise ValueError(f"{source} gives an unusable model: the layer maps leave the float64 range "
                         f"(sigma_w2 = {run.arch.sigma_w2:.3g}, beta = {run.beta:.3g})")
    beta_c = float(run.arch.beta_critical(traj.beta_critical))
    return float(traj.rho[-1]), beta_c, _phase(run.beta, beta_c, traj.rho[-1], run.threshold), traj


def _phase(beta, beta_c, final_rho, threshold) -> str:
    return PHASE_LABELS[int(classify_phases(beta, beta_c, final_rho, threshold))]


def _judge(run: RunSettings, source, theory, **changes):
    """(final rho, phase label, theory label) of the run with ``changes``: by ``theory`` (a
    :class:`~remprop.diagrams.compared_theory.CausalVerdictTheory`, or None: the layer maps) where it
    has a map of the changed architecture, else by the layer maps; beta_c from the layer maps."""
    rho, beta_c, phase, _ = _verdict(run, source, **changes)
    changed = run.replace(**changes)
    if theory is None or not theory.runs(changed.arch):
        return rho, phase, "layer maps"
    final = float(theory.cosine(changed)[-1])
    return final, _phase(changed.beta, beta_c, final, run.threshold), theory.label


def _collapse_depth(run: RunSettings, max_depth):
    rho = propagate(run.arch, run.beta, max_depth, run.q0, run.rho0).rho  # another depth than the run's
    above = np.flatnonzero(~(rho[1:] <= run.threshold))
    return int(above[0]) + 1 if above.size else None


def diagnose(spec, threshold=DEFAULT_THRESHOLD, *, max_depth=MAX_COLLAPSE_DEPTH, causal_theory="auto",
             gram_draws=GRAM_DRAWS, lr_steps=DEFAULT_STEPS, lr=None, recipe=None) -> Diagnosis:
    r"""Place a model on its trainability diagram and predict the effect of changes.

    Parameters
    ----------
    spec : ModelSpec or config
        A :class:`~remprop.theory.ModelSpec`, or anything :func:`~remprop.theory.model_spec`
        accepts (a ``transformers`` config, a dict, a path, a shipped name).
    threshold : float
        Rank-collapse threshold on the final cosine, in (0, 1).
    max_depth : int
        Deepest stack searched for the onset of rank collapse.
    causal_theory : {"auto", "maps", "gram"}
        Causal models: the theory of the last tokens' cosine (:func:`~remprop.diagrams.compared_theory.last_tokens_theory`;
        ``"auto"``: the causal Gram state where affordable, else the per-position maps).
    gram_draws : int
        Monte Carlo draws per attention layer of the causal Gram state.
    lr_steps : int
        AdamW steps of the learning-rate ceiling (:func:`~remprop.diagrams.learning_rate.lr_ceiling_summary`, docs/theory.md section 20).
    lr : float, optional
        The user's peak rate: the report then says whether it lies below, within or above the ceiling's band.
    recipe : remprop.theory.learning_rate.Recipe, optional
        The training recipe of the ceiling (its steps replace ``lr_steps``); reported, and named where it
        differs from the measured runs'.

    Returns
    -------
    Diagnosis

    Notes
    -----
    The phase follows :func:`~remprop.diagrams.classify_phases`: entropy collapse when
    ``beta > beta_c`` of the attention input, else rank collapse when
    ``rho_L > threshold``. The recommended query/key std puts the model at
    ``beta = beta_c / 2``, where the annealed (spread) regime of the REM ends and the
    attention rows stop being near-uniform at finite T; the largest safe std is the one
    at ``beta_c``: ``s_qk = sqrt(beta sqrt(log T) / d)``.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (Results 1 and 2, Fig. 1(c)); Noci et al. 2022.
    """
    if not isinstance(spec, ModelSpec):
        spec = model_spec(spec)
    run = spec.settings.replace(threshold=threshold)
    max_depth = check_depth(max_depth, name="max_depth")
    arch, beta, depth, q0, rho0, threshold = run.arch, run.beta, run.depth, run.q0, run.rho0, run.threshold
    source = f"config.initializer_range = {spec.init_range:g}"
    final_rho, beta_c, phase, traj = _verdict(run, source)
    alpha_star, alpha_error = float(residual_strength.alpha_star(run)), 0.0
    collapse_depth, searched = _collapse_depth(run, max_depth), max_depth
    chosen = last_tokens_theory(spec, causal_theory, gram_draws, max_depth)
    last_theory, last_reason = chosen if chosen is not None else (None, None)
    margins_name, margins_reason = margins_theory(spec, causal_theory, gram_draws, max_depth) or (None, None)
    theory = margin = rho_last = rho_last_maps = layer_maps = None
    if chosen is not None:  # a causal model: the verdict by its last tokens' theory, the layer maps beside
        layer_maps = {"final_rho": final_rho, "phase": phase, "alpha_star": alpha_star,
                      "collapse_depth": collapse_depth, "max_depth": max_depth}
        theory = CausalVerdictTheory(last_theory, spec, gram_draws)
        maps = CausalVerdictTheory("maps", spec)
        margin = theory if margins_name == last_theory else maps   # alpha* and the changes
        rho_last, collapse_depth, searched = theory.trajectory(run, max_depth)
        rho_last_maps = rho_last if theory.name == "maps" else maps.cosine(run)
        final_rho = float(rho_last[-1])
        phase = _phase(beta, beta_c, final_rho, threshold)
        alpha_star, alpha_error = maps.alpha_star(run, float(rho_last_maps[-1]), math.nan)
        if margin.name != "maps":
            alpha_star, alpha_error = margin.alpha_star(run, final_rho, alpha_star)

    # attention inputs of the first and last layer (LayerNorm'd for pre-LN); every head
    # runs at the effective beta
    def attention_input(traj, layer):
        return tuple(float(v) for v in arch.attention_input(traj.q[layer], traj.p[layer]))

    q_in, p_in = attention_input(traj, 0)
    head_beta = float(arch.effective_beta(beta, q=q_in, p=p_in))
    y2_first = float(participation_moment(head_beta, q_in, p_in, spec.seq_len))
    # the recommended query/key scale (see Notes); collapsed tokens (beta_c = inf): keep beta
    target = 0.5 * beta_c if math.isfinite(beta_c) else beta
    # a soft-capped model: no larger beta than the theory's cap check accepts (docs/theory.md section 19)
    target = min(target, float(softcap.logit_softcap_max_beta(arch, q0)))
    traj_b = _verdict(run, source, beta=target)[3]
    # E|dS/dW_Q|^2 of layer 1 and layer L, and of layer 1 at the recommended scale: one call
    # (the first and the last give the decay over the stack: each layer costs a quadrature)
    inputs = np.array([attention_input(traj, 0), attention_input(traj, depth - 1), attention_input(traj_b, 0)])
    gradient_args = dict(sigma_v2=arch.sigma_v2, norm_variance=0.0 if arch.norm.has_norm else None)
    gradient_first, gradient_last, gradient_b = (float(g) for g in query_gradient_norm(
        arch.effective_beta(np.array([beta, beta, target])), inputs[:, 0], inputs[:, 1], spec.width, spec.seq_len,
        **gradient_args))
    key_first, key_last = (float(g) for g in key_gradient_norm(
        head_beta, inputs[:2, 0], inputs[:2, 1], spec.width, spec.seq_len, **gradient_args))

    changes, init = [], init_deviations.init_deviations(spec, run, max_depth)
    verdict_theory, advice = "layer maps" if theory is None else theory.label, init and init.skip_advice()
    # 1. skip scaling
    if not math.isfinite(alpha_star):
        changes.append(Change("skip scaling", "no alpha_SA up to the search bound avoids rank collapse at this "
                              "depth: reduce the depth or change the block", final_rho, phase,
                              {"alpha_star": alpha_star}, verdict_theory))
    elif phase == "rank-collapse":
        alpha = ALPHA_MARGIN * alpha_star
        rho_a, phase_a, by = _judge(run, source, margin, arch=arch.replace(alpha_sa=alpha))
        changes.append(Change(
            "skip scaling", f"scale the attention skip path to alpha_SA = {alpha:.3f} ({ALPHA_MARGIN:g} alpha*): "
            f"x -> {alpha:.3f} x + SA(x), or equivalently the attention branch by 1/{alpha:.3f}",
            rho_a, phase_a, {"alpha_sa": alpha, "alpha_star": alpha_star}, by))
    elif advice:  # a residual branch away from its default: the skip margin is the branch's, not the skip's
        changes.append(Change("skip scaling", advice["action"], advice["final_rho"], advice["phase"], advice["values"]))
    else:
        changes.append(Change(
            "skip scaling", (f"none needed: alpha_SA = {arch.alpha_sa:g} is {arch.alpha_sa / alpha_star:.3g}x the "
                             f"minimum alpha* = {alpha_star:.3f} (at alpha_SA = alpha* the final cosine reaches "
                             f"{threshold:g})" if alpha_star > 0 else "none needed: even alpha_SA = 0 avoids rank collapse"),
            final_rho, phase, {"alpha_sa": float(arch.alpha_sa), "alpha_star": alpha_star}, verdict_theory))
    # 2. query/key std
    if not math.isfinite(beta_c):
        changes.append(Change("query/key std", "none helps: the tokens entering attention are identical "
                              "(beta_c = inf), so no query/key scale changes the attention", final_rho, phase,
                              {"beta": beta}, verdict_theory))
    else:
        # a layer-1 gradient that underflows to 0 (initializer_range ~ 1e-150): the factor is unbounded
        factor = gradient_b / gradient_first if gradient_first > 0 else math.inf
        changes.append(_query_key_change(spec, beta, target, beta_c, inputs[2], factor,
                                         _judge(run, source, margin, beta=target)))
    # 3. LayerNorm placement
    other = arch.norm.other.value
    norm_name = arch.norm_type.title
    if arch.block_form.parallel:  # a parallel block is defined with pre-norm only
        changes.append(Change("LayerNorm placement", f"none: a parallel block reads one pre-{norm_name} "
                              "(no other placement is defined for it)", final_rho, phase, {"norm": arch.norm},
                              verdict_theory))
    elif other not in arch.norm_type.kind.placements:
        changes.append(Change("LayerNorm placement", f"none: {norm_name} is not defined at {other}-norm "
                              f"(its map holds at {' and '.join(arch.norm_type.kind.placements)} only)", final_rho,
                              phase, {"norm": arch.norm}, verdict_theory))
    else:
        rho_n, phase_n, by = _judge(run, source, margin, arch=arch.replace(norm=other))
        changes.append(Change("LayerNorm placement",
                              f"move {norm_name} to {other}-{arch.norm_type.short}",
                              rho_n, phase_n, {"norm": other}, by))
    # 4. gain-controlled attention
    rho_g, phase_g, by = _judge(run, source, margin, arch=arch.replace(attention="gain-controlled"))
    changes.append(Change("gain-controlled attention",
                          "subtract the sequence mean of the attention output (gain-controlled attention)",
                          rho_g, phase_g, {"attention": "gain-controlled"}, by))

    return Diagnosis(spec=spec, threshold=threshold, q=traj.q, rho=traj.rho, rho_last_tokens=rho_last,
                     beta_critical=beta_c, alpha_star=alpha_star, phase=phase, collapse_depth=collapse_depth,
                     max_depth=searched, y2_first=y2_first, gradient_first=gradient_first,
                     gradient_last=gradient_last, key_gradient_first=key_first, key_gradient_last=key_last,
                     changes=tuple(changes), rho_last_tokens_maps=rho_last_maps, last_tokens_theory=last_theory,
                     last_tokens_reason=last_reason, gram_draws=gram_draws if last_theory == "gram" else None,
                     margins_theory=margins_name, margins_reason=margins_reason,
                     lr_ceiling=lr_ceiling_summary(spec, check_count("lr_steps", lr_steps), lr=lr, recipe=recipe),
                     layer_maps=layer_maps, alpha_star_error=alpha_error, init=init)


def _query_key_change(spec, beta, target, beta_c, attention_input, gradient_factor, judged):
    """The query/key std that puts the model at ``target = beta_c / 2``, and its effect ``judged``
    (final rho, phase, theory: :func:`_judge`)."""
    final_rho, phase, by = judged
    current_std = 0.0 if beta == ZERO_BETA else float(spec.query_key_std(beta))  # a zero query (muP): beta = 0
    std = float(spec.query_key_std(target))
    std_max = float(spec.query_key_std(beta_c))
    verb = "lower" if beta > target else "raise"
    q_b, p_b = attention_input
    y2 = float(participation_moment(target, q_b, p_b, spec.seq_len))
    return Change(
        "query/key std",
        f"{verb} the query/key weight std from {current_std:.4g} to {std:.4g} (beta = beta_c/2 = {target:.3f}; "
        f"entropy collapse above std {std_max:.4g}): layer-1 query gradient x{gradient_factor:.3g}, Y2 = {y2:.4f}",
        final_rho, phase, {"query_key_std": std, "beta": target, "query_key_std_max": std_max,
                           "gradient_factor": gradient_factor}, by)
