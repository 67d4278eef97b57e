"""Diagnose a real model: its place on the trainability diagram and what would move it.

:func:`diagnose` takes a :class:`~remprop.theory.ModelSpec` (a Hugging Face
configuration at the library's default initialisation, :func:`remprop.theory.model_spec`)
and predicts, from the theory alone:

* where the model sits: its query/key scale ``beta`` against the critical ``beta_c`` of
  its attention inputs, its skip strength ``alpha_sa = 1`` against the minimum
  ``alpha*(L)`` that keeps the depth-L stack out of rank collapse, and the phase;
* the mean cosine of two tokens layer by layer (causal models: also the average over
  the last 50 positions, docs/theory.md section 8), and the depth at which rank collapse would
  set in if the stack were deeper;
* the expected squared norm of the query gradient ``E|dS/dW_Q|^2`` of the first and of
  the last attention layer (Result 2: it vanishes as ``rho -> 1`` and for small beta);
* concrete changes -- skip scaling, query/key std, LayerNorm placement, gain-controlled
  attention -- each with its predicted final cosine and phase.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from remprop.theory import (DEFAULT_THRESHOLD, ModelSpec, RunSettings, key_gradient_norm, last_tokens_cosine,
                            model_spec, participation_moment, propagate, query_gradient_norm)
from remprop.theory import softcap
from remprop.theory.causal import LAST_TOKENS, compared_last_tokens
from remprop.theory.checks import check_depth
from remprop.theory import work_estimates
from remprop.theory.work_estimates import spread_indices

from .phases import PHASE_LABELS, classify_phases
from .residual_strength import min_residual_strength, search_seconds

__all__ = ["Change", "Diagnosis", "diagnose", "LAST_TOKENS", "MAX_COLLAPSE_DEPTH", "REPORT_LAYERS",
           "diagnosis_seconds", "diagnosis_bytes"]

#: Deepest stack searched for the onset of rank collapse.
MAX_COLLAPSE_DEPTH = 10_000
#: Safety margin on alpha* when a larger skip strength is recommended.
ALPHA_MARGIN = 1.1


@dataclass(frozen=True)
class Change:
    """One change of the model and its predicted effect.

    Attributes
    ----------
    name : str
        ``"skip scaling"``, ``"query/key std"``, ``"LayerNorm placement"`` or
        ``"gain-controlled attention"``.
    action : str
        What to change, in words a practitioner can apply.
    final_rho : float
        Predicted mean cosine after the last block with the change.
    phase : str
        Predicted phase with the change (``"trainable"``, ``"rank-collapse"``,
        ``"entropy-collapse"``).
    values : dict
        The numbers behind the action (e.g. ``alpha_sa``, ``query_key_std``).
    """

    name: str
    action: str
    final_rho: float
    phase: str
    values: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"name": self.name, "action": self.action, "final_rho": self.final_rho, "phase": self.phase,
                "values": dict(self.values)}


@dataclass(frozen=True)
class Diagnosis:
    """The theory's verdict on one model (see :func:`diagnose`).

    Attributes
    ----------
    spec : ModelSpec
    threshold : float
        Rank-collapse threshold on the final cosine.
    q, rho : ndarray, shape (depth + 1,)
        Predicted order parameters per layer (0 = input of block 1).
    rho_last_tokens : ndarray or None
        Causal models: predicted mean cosine of the last :data:`~remprop.theory.causal.LAST_TOKENS` positions.
    beta_critical : float
        Critical beta deciding entropy collapse (first attention layer for post-LN,
        smallest over layers otherwise).
    alpha_star : float
        Minimum ``alpha_sa`` that avoids rank collapse at this depth and beta.
    phase : str
    collapse_depth : int or None
        First depth at which the final cosine exceeds ``threshold`` (None: not within
        ``max_depth`` layers).
    max_depth : int
    y2_first : float
        Participation ratio of the first attention layer's rows (finite T).
    gradient_first, gradient_last : float
        ``E|dS/dW_Q|_F^2`` of the first and last attention layer by the single-head
        formula, before the output projection (:func:`~remprop.theory.query_gradient_norm`).
    key_gradient_first, key_gradient_last : float
        The same for ``W_K`` (:func:`~remprop.theory.key_gradient_norm`).
    changes : tuple of Change
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

    @property
    def compared_rho(self) -> np.ndarray:
        """The predicted cosine per layer that measurements are compared with: ``rho``, or
        for causal models ``rho_last_tokens`` (the late tokens that follow the encoder maps)."""
        return self.rho if self.rho_last_tokens is None else self.rho_last_tokens

    def to_dict(self) -> dict:
        """JSON-ready content (non-finite numbers stay floats; use ``remprop._json``)."""
        return {
            "model": self.spec.to_dict(), "threshold": self.threshold,
            "q": self.q.tolist(), "rho": self.rho.tolist(),
            "rho_last_tokens": None if self.rho_last_tokens is None else self.rho_last_tokens.tolist(),
            "beta": self.spec.beta, "beta_critical": self.beta_critical, "alpha_sa": 1.0,
            "alpha_star": self.alpha_star, "phase": self.phase, "collapse_depth": self.collapse_depth,
            "max_depth": self.max_depth, "y2_first": self.y2_first,
            "gradient_first": self.gradient_first, "gradient_last": self.gradient_last,
            "key_gradient_first": self.key_gradient_first, "key_gradient_last": self.key_gradient_last,
            "changes": [c.to_dict() for c in self.changes],
        }

    def report(self) -> str:
        """A plain-text report: placement, per-layer cosine, gradients, recommended changes."""
        s, a = self.spec, self.spec.architecture
        lines = [f"model            {s.name} ({s.family}: {a.norm}-LN, {s.depth} layers, d = {s.width}, "
                 f"d_ff = {s.d_ff}, {s.heads} heads, T = {s.seq_len}{', causal' if s.causal else ''})",
                 f"initialisation   {s.initialisation}",
                 f"query/key        beta = {s.beta:.4f}   beta_c = {self.beta_critical:.4f}   "
                 f"beta / beta_c = {s.beta / self.beta_critical:.3f}   Y2(layer 1) = {self.y2_first:.4f}",
                 f"skip             alpha_SA = 1   alpha*(L = {s.depth}) = {_num(self.alpha_star)}",
                 f"phase            {self.phase} (final cosine {self.rho[-1]:.4f}, threshold {self.threshold:g})",
                 "collapse depth   " + (f"rank collapse sets in at layer {self.collapse_depth}"
                                        if self.collapse_depth is not None
                                        else f"no rank collapse within {self.max_depth} layers"),
                 f"query gradient   E|dS/dW_Q|^2 = {self.gradient_first:.4g} (layer 1), "
                 f"{self.gradient_last:.4g} (layer {s.depth})" + (
                     f"; ratio {self.gradient_last / self.gradient_first:.3g}" if self.gradient_first > 0 else ""),
                 f"key gradient     E|dS/dW_K|^2 = {self.key_gradient_first:.4g} (layer 1), "
                 f"{self.key_gradient_last:.4g} (layer {s.depth})",
                 "", "predicted cosine per layer (rho = p / q)" + (
                     f"; causal: mean over the last {compared_last_tokens(s.seq_len)} positions" if self.rho_last_tokens is not None
                     else "")]
        last = None if self.rho_last_tokens is None else compared_last_tokens(s.seq_len)
        layers = spread_indices(s.depth + 1, REPORT_LAYERS)
        for layer in layers:
            extra = "" if self.rho_last_tokens is None else f"   last {last}: {self.rho_last_tokens[layer]:.4f}"
            lines.append(f"  layer {layer:3d}   rho = {self.rho[layer]:.4f}   q = {self.q[layer]:.4g}{extra}")
        if len(layers) < s.depth + 1:
            lines.append(f"  ({len(layers)} of {s.depth + 1} layers shown, evenly spread; to_dict() and "
                         "remprop check --json give all)")
        lines += ["", "changes and their predicted effect"]
        for change in self.changes:
            lines.append(f"  - {change.name}: {change.action}")
            lines.append(f"      -> final cosine {change.final_rho:.4f}, {change.phase}")
        lines += ["", "assumptions the model breaks"] + [f"  - {text}" for text in s.assumptions]
        return "\n".join(lines)


#: Most layers :meth:`Diagnosis.report` prints (evenly spread, both ends included).
REPORT_LAYERS = 1001


def _num(value) -> str:
    return "inf (no alpha_SA up to the search bound)" if not math.isfinite(value) else f"{value:.4f}"


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
    beta_c = float(run.arch.critical_beta(traj.beta_critical))
    code = int(classify_phases(run.beta, beta_c, traj.rho[-1], run.threshold))
    return float(traj.rho[-1]), beta_c, PHASE_LABELS[code], traj


def _collapse_depth(run: RunSettings, max_depth):
    rho = propagate(run.arch, run.beta, max_depth, run.q0, run.rho0).rho  # another depth than the run's
    above = np.flatnonzero(~(rho[1:] <= run.threshold))
    return int(above[0]) + 1 if above.size else None


def diagnose(spec, threshold=DEFAULT_THRESHOLD, *, max_depth=MAX_COLLAPSE_DEPTH) -> Diagnosis:
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
    alpha_star = float(min_residual_strength(run))
    rho_last = (last_tokens_cosine(arch, beta, depth, spec.seq_len, compared_last_tokens(spec.seq_len), q0, rho0)
                if spec.causal else None)

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
    rho_b, _, phase_b, traj_b = _verdict(run, source, beta=target)
    # E|dS/dW_Q|^2 of layer 1 and layer L, and of layer 1 at the recommended scale: one call
    inputs = np.array([attention_input(traj, 0), attention_input(traj, depth - 1), attention_input(traj_b, 0)])
    gradient_args = dict(sigma_v2=arch.sigma_v2, norm_variance=0.0 if arch.norm.has_norm else None)
    gradient_first, gradient_last, gradient_b = (float(g) for g in query_gradient_norm(
        arch.effective_beta(np.array([beta, beta, target])), inputs[:, 0], inputs[:, 1], spec.width, spec.seq_len,
        **gradient_args))
    key_first, key_last = (float(g) for g in key_gradient_norm(
        head_beta, inputs[:2, 0], inputs[:2, 1], spec.width, spec.seq_len, **gradient_args))

    changes = []
    # 1. skip scaling
    if not math.isfinite(alpha_star):
        changes.append(Change("skip scaling", "no alpha_SA up to the search bound avoids rank collapse at this "
                              "depth: reduce the depth or change the block", final_rho, phase,
                              {"alpha_star": alpha_star}))
    elif phase == "rank-collapse":
        alpha = ALPHA_MARGIN * alpha_star
        rho_a, _, phase_a, _ = _verdict(run, source, arch=arch.replace(alpha_sa=alpha))
        changes.append(Change(
            "skip scaling", f"scale the attention skip path to alpha_SA = {alpha:.3f} ({ALPHA_MARGIN:g} alpha*): "
            f"x -> {alpha:.3f} x + SA(x), or equivalently the attention branch by 1/{alpha:.3f}",
            rho_a, phase_a, {"alpha_sa": alpha, "alpha_star": alpha_star}))
    else:
        changes.append(Change(
            "skip scaling", (f"none needed: alpha_SA = 1 is {1.0 / alpha_star:.3g}x the minimum alpha* = "
                             f"{alpha_star:.3f} (at alpha_SA = alpha* the final cosine reaches {threshold:g})"
                             if alpha_star > 0 else "none needed: even alpha_SA = 0 avoids rank collapse"),
            final_rho, phase, {"alpha_sa": 1.0, "alpha_star": alpha_star}))
    # 2. query/key std
    if not math.isfinite(beta_c):
        changes.append(Change("query/key std", "none helps: the tokens entering attention are identical "
                              "(beta_c = inf), so no query/key scale changes the attention", final_rho, phase,
                              {"beta": beta}))
    else:
        # a layer-1 gradient that underflows to 0 (initializer_range ~ 1e-150): the factor is unbounded
        factor = gradient_b / gradient_first if gradient_first > 0 else math.inf
        changes.append(_query_key_change(spec, beta, target, beta_c, inputs[2], rho_b, phase_b, factor))
    # 3. LayerNorm placement
    other = arch.norm.other.value
    norm_name = arch.norm_type.title
    if arch.block_form.parallel:  # a parallel block is defined with pre-norm only
        changes.append(Change("LayerNorm placement", f"none: a parallel block reads one pre-{norm_name} "
                              "(no other placement is defined for it)", final_rho, phase, {"norm": arch.norm}))
    else:
        rho_n, _, phase_n, _ = _verdict(run, source, arch=arch.replace(norm=other))
        changes.append(Change("LayerNorm placement",
                              f"move {norm_name} to {other}-{arch.norm_type.short}",
                              rho_n, phase_n, {"norm": other}))
    # 4. gain-controlled attention
    rho_g, _, phase_g, _ = _verdict(run, source, arch=arch.replace(attention="gain-controlled"))
    changes.append(Change("gain-controlled attention",
                          "subtract the sequence mean of the attention output (gain-controlled attention)",
                          rho_g, phase_g, {"attention": "gain-controlled"}))

    return Diagnosis(spec=spec, threshold=threshold, q=traj.q, rho=traj.rho, rho_last_tokens=rho_last,
                     beta_critical=beta_c, alpha_star=alpha_star, phase=phase,
                     collapse_depth=_collapse_depth(run, max_depth),
                     max_depth=max_depth, y2_first=y2_first, gradient_first=gradient_first,
                     gradient_last=gradient_last, key_gradient_first=key_first, key_gradient_last=key_last,
                     changes=tuple(changes))


def _verdict_architectures(arch):
    """The architectures :func:`diagnose` propagates through the model's depth, with their passes:
    the model itself (its verdict, the recommended beta, the skip change), the other norm
    placement (not for a parallel block) and gain-controlled attention."""
    runs = [(arch, 3), (arch.replace(attention="gain-controlled"), 1)]
    if not arch.block_form.parallel:
        runs.append((arch.replace(norm=arch.norm.other.value), 1))
    return runs


def diagnosis_seconds(spec, *, max_depth=MAX_COLLAPSE_DEPTH) -> float:
    """Estimated seconds of :func:`diagnose` on this machine, before it runs.

    The depth kernels of the verdicts (the model three times: its verdict, the recommended beta,
    the skip change; the other norm placement; gain-controlled attention), the ``alpha*`` search
    (:func:`~remprop.diagrams.residual_strength.search_seconds`) and the collapse-depth run
    through ``max_depth`` blocks (:func:`~remprop.theory.work_estimates.run_seconds`); with
    rotary positions the mean rotary correlation of the model's T and of each compared late
    token (:func:`~remprop.theory.work_estimates.rope_seconds`); causal models their late
    tokens' per-position maps, as many cells.
    """
    if not isinstance(spec, ModelSpec):
        spec = model_spec(spec)
    max_depth = check_depth(max_depth, name="max_depth")
    arch, depth = spec.architecture, spec.depth
    seconds = sum(work_estimates.run_seconds(a, 1, depth, passes) for a, passes in _verdict_architectures(arch))
    seconds += search_seconds(arch, depth, 1) + work_estimates.run_seconds(arch, 1, max_depth)
    last = compared_last_tokens(spec.seq_len) if spec.causal else 0
    if arch.positions.rotary:
        seconds += (1 + last) * work_estimates.rope_seconds(arch.head_dim)
    if last:
        seconds += work_estimates.run_seconds(arch, last, depth)
    return seconds


def diagnosis_bytes(spec, *, max_depth=MAX_COLLAPSE_DEPTH) -> int:
    """Bytes :func:`diagnose` and its JSON hold at their peak, before it runs.

    Four trajectories through the model's depth alive at once (the verdict's, the
    recommended beta's and their temporaries), the late tokens' trajectories of a causal
    model, the collapse-depth trajectory through ``max_depth`` blocks
    (:func:`~remprop.theory.work_estimates.trajectory_bytes`), and the per-layer lists of
    :meth:`Diagnosis.to_dict` with their JSON text (three numbers a layer, about 100 bytes each).
    """
    if not isinstance(spec, ModelSpec):
        spec = model_spec(spec)
    max_depth = check_depth(max_depth, name="max_depth")
    depth = spec.depth
    last = compared_last_tokens(spec.seq_len) if spec.causal else 0
    return (work_estimates.trajectory_bytes(4 + last, depth + 1) + work_estimates.trajectory_bytes(1, max_depth + 1)
            + 300 * (depth + 1))


def _query_key_change(spec, beta, target, beta_c, attention_input, final_rho, phase, gradient_factor):
    """The query/key std that puts the model at ``target = beta_c / 2``, and its effect."""
    current_std = float(spec.query_key_std(beta))
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
                           "gradient_factor": gradient_factor})
