"""The plain-text report of a diagnosis (:meth:`remprop.diagrams.Diagnosis.report`): the model's place,
its verdict and by which theory, the per-layer cosine, the gradients, the changes and the assumptions."""
from __future__ import annotations

import math

from remprop.theory.causal import compared_last_tokens
from remprop.theory.work_estimates import spread_indices

from .compared_theory import CAUSAL_THEORY_LABELS
from .learning_rate import lr_line

__all__ = ["report_text", "REPORT_LAYERS"]

#: Most layers :meth:`Diagnosis.report <remprop.diagrams.Diagnosis.report>` prints (evenly spread, both ends
#: included).
REPORT_LAYERS = 1001


def report_text(d) -> str:
    """The plain-text report of the diagnosis ``d``: placement, per-layer cosine, gradients, recommended
    changes."""
    s, a = d.spec, d.spec.architecture
    lines = [f"model            {s.name} ({s.family}: {a.norm}-LN, {s.depth} layers, d = {s.width}, "
             f"d_ff = {s.d_ff}, {s.heads} heads, T = {s.seq_len}{', causal' if s.causal else ''})",
             f"initialisation   {s.initialisation}",
             f"query/key        beta = {s.beta:.4f}   beta_c = {d.beta_critical:.4f}   "
             f"beta / beta_c = {s.beta / d.beta_critical:.3f}   Y2(layer 1) = {d.y2_first:.4f}",
             f"skip             alpha_SA = {d.alpha_sa:g}   alpha*(L = {s.depth}) = {_num(d.alpha_star)}"
             + (f" (to {d.alpha_star_error:.2g})" if d.alpha_star_error > 0 else "")
             + f"   alpha_SA / alpha* = {d.margins['alpha_ratio']:.3g}" + _beside(d, "alpha_star")
             + ("" if d.init is None else d.init.skip_line()),
             f"phase            {d.phase} (final cosine {d.final_rho:.4f}, threshold {d.threshold:g})"
             + _beside(d, "phase"),
             f"verdict          {d.verdict['text']}",
             "collapse depth   " + _collapse_text(d.collapse_depth, d.max_depth) + _beside(d, "collapse"),
             f"query gradient   E|dS/dW_Q|^2 = {d.gradient_first:.4g} (layer 1), "
             f"{d.gradient_last:.4g} (layer {s.depth})" + (
                 f"; falls {d.margins['gradient_decay']:.3g}x over the stack" if d.gradient_first > 0 else ""),
             f"key gradient     E|dS/dW_K|^2 = {d.key_gradient_first:.4g} (layer 1), "
             f"{d.key_gradient_last:.4g} (layer {s.depth})"]
    if d.lr_ceiling is not None:
        lines.append("lr ceiling       " + lr_line(d.lr_ceiling))
    if d.layer_maps is not None:
        split = d.margins_theory not in (None, d.last_tokens_theory)
        whose = "phase, collapse depth" if split else "alpha*, phase, collapse depth and changes"
        lines.append(f"theory           {whose}"
                     f" by the {d.theory} of the last tokens (the theory compared with measurements)"
                     + (f"; alpha* and changes by the {CAUSAL_THEORY_LABELS[d.margins_theory]}: "
                        f"{d.margins_reason}" if split else "") + "; the layer maps, the diagram's, beside them")
    lines.append("")
    lines += _cosine_lines(d)
    lines += _changes_lines(d)
    return "\n".join(lines)


def _beside(d, what) -> str:
    """The layer maps' value beside the compared theory's, in a report line (causal models)."""
    maps = d.layer_maps
    if maps is None:
        return ""
    if what == "alpha_star":
        return f"   (layer maps: {_num(maps['alpha_star'])})"
    if what == "phase":
        return f"   (layer maps: {maps['phase']}, {maps['final_rho']:.4f})"
    return f"   (layer maps: {_collapse_text(maps['collapse_depth'], maps['max_depth'])})"


def _cosine_lines(d) -> list:
    """The per-layer cosine of :meth:`report`; causal models with the last tokens' theory named."""
    s = d.spec
    lines = ["predicted cosine per layer (rho = p / q by the layer maps, the diagram's" + (
        "; the verdict by the last tokens' theory)" if d.layer_maps is not None
        else "; phase and alpha* from these layer maps)")]
    gram = d.last_tokens_theory == "gram"
    if d.rho_last_tokens is not None:
        last = compared_last_tokens(s.seq_len)
        lines.append(f"causal: mean over the last {last} positions by the "
                     f"{CAUSAL_THEORY_LABELS[d.last_tokens_theory]}"
                     + (f" ({d.gram_draws} draws per layer)" if gram else "")
                     + f": {d.last_tokens_reason}")
    layers = spread_indices(s.depth + 1, REPORT_LAYERS)
    for layer in layers:
        extra = ""
        if d.rho_last_tokens is not None:
            extra = f"   last {last}: {d.rho_last_tokens[layer]:.4f}"
            if gram:
                extra += f"   (per-position maps {d.rho_last_tokens_maps[layer]:.4f})"
        lines.append(f"  layer {layer:3d}   rho = {d.rho[layer]:.4f}   q = {d.q[layer]:.4g}{extra}")
    if len(layers) < s.depth + 1:
        lines.append(f"  ({len(layers)} of {s.depth + 1} layers shown, evenly spread; to_dict() and "
                     "remprop check --json give all)")
    return lines


def _changes_lines(d) -> list:
    s = d.spec
    lines = ["", "changes and their predicted effect"]
    for change in d.changes:
        lines.append(f"  - {change.name}: {change.action}")
        lines.append(f"      -> final cosine {change.final_rho:.4f}, {change.phase}"
                     + (f" ({change.theory})" if change.theory != d.theory else ""))
    lines += ([] if d.init is None else d.init.lines(s.depth)) + ["", "assumptions the model breaks"]
    lines += [f"  - {text}" for text in s.assumptions]
    return lines


def _collapse_text(depth, searched) -> str:
    return (f"rank collapse sets in at layer {depth}" if depth is not None
            else f"no rank collapse within {searched} layers")


def _num(value) -> str:
    return "inf (no alpha_SA up to the search bound)" if not math.isfinite(value) else f"{value:.4f}"
