r"""What a model's own weights change against its library's default init, in the theory's terms.

:func:`init_deviations` takes a :class:`~remprop.theory.ModelSpec` measured on its own weights
(``spec.weights``, :func:`~remprop.theory.models.measured_weights.measured_spec`) and returns
the table of every tensor group -- embeddings, query/key, value/output, the MLP's two layers,
the norm gains, the MLP bias -- measured against what the configuration and the library would
initialise (:func:`remprop.theory.models.default_init.init_deviations`: flagged beyond their
sampling error), and for each flagged group what it does: the same stack with that group put
back to its default (:func:`~remprop.theory.models.default_init.reset_roles`; with more than one
group flagged, also all of them: the library's init) beside the model, by the layer maps (the
trainability diagram's theory, for both):

* the theory's parameters the group moves (beta of the query/key product; ``sigma_v2``,
  ``sigma_o2``; ``sigma_w2``, ``sigma_w2_out``; ``sigma_b2``; the input state ``q0``, ``rho0``);
* for a residual branch, its amplitude ``c`` against the default branch: ``x + c F(x)`` is
  ``c (x / c + F(x))``, the default branch under a skip of strength ``alpha / c`` (docs/theory.md
  section 5), so a branch ``c = 5`` times its default is an effective ``alpha_SA = 0.2``
  (a zero branch: ``c = 0``, an infinite one);
* which collapse it moves toward: rank collapse where the final cosine rises (or the skip
  margin ``alpha_SA / alpha*`` falls), entropy collapse where ``beta / beta_c`` rises;
* at what depth it matters: the collapse depth of both, and the layer at which the default
  init's stack reaches the cosine the model ends at (24 layers of the model are as collapsed
  as that many of the default init).

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333; docs/real_models.md section 6.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from remprop.theory import propagate
from remprop.theory.models.default_init import GROUPS, TENSOR_LABELS, family_init, reset_roles
from remprop.theory.models.default_init import init_deviations as tensor_deviations
from remprop.theory.models.measured_weights import measured_spec

from . import residual_strength
from .phases import PHASE_LABELS, classify_phases

__all__ = ["GroupEffect", "InitDeviations", "init_deviations", "BRANCHES", "MOVED_PARAMETERS", "ALL_FLAGGED",
           "effect_seconds"]

#: The effect of every flagged tensor at its default at once (the library's init), listed last.
ALL_FLAGGED = "all flagged"

#: Residual branches: group -> (the branch, its skip's field, the variances whose product is its amplitude^2).
BRANCHES = {"value/output": ("attention", "alpha_sa", ("sigma_v2", "sigma_o2")),
            "MLP": ("MLP", "alpha_mlp", ("sigma_w2", "sigma_w2_out"))}
#: The theory's parameters a group can move (compared between the model and the group at its default).
MOVED_PARAMETERS = ("beta", "sigma_v2", "sigma_o2", "sigma_w2", "sigma_w2_out", "sigma_b2", "q0", "rho0")


def _parameters(run) -> dict:
    arch = run.arch
    return {"beta": float(run.beta), "q0": float(run.q0), "rho0": float(run.rho0),
            **{name: float(getattr(arch, name)) for name in MOVED_PARAMETERS[1:6]}}


def _numbers(run, max_depth) -> dict:
    """The layer maps' verdict of a run: final cosine, phase, alpha*, margins, collapse depth, and the
    cosine through ``max_depth`` layers (``"rho"``, for the equivalent depth)."""
    depth = run.depth
    traj = propagate(run.arch, run.beta, max(max_depth, depth), run.q0, run.rho0)
    rho = np.asarray(traj.rho, dtype=float)
    beta_c = float(run.arch.beta_critical(traj.beta_critical[..., :depth]))
    final = float(rho[depth])
    alpha_star = float(residual_strength.alpha_star(run))
    above = np.flatnonzero(~(rho[1:max_depth + 1] <= run.threshold))
    return {"final_rho": final, "beta_critical": beta_c, "beta_ratio": run.beta / beta_c if math.isfinite(beta_c)
            else 0.0, "alpha_star": alpha_star, "alpha_ratio": math.inf if alpha_star == 0 else
            float(run.arch.alpha_sa) / alpha_star if math.isfinite(alpha_star) else 0.0,
            "phase": PHASE_LABELS[int(classify_phases(run.beta, beta_c, final, run.threshold))],
            "collapse_depth": int(above[0]) + 1 if above.size else None, "rho": rho}


@dataclass(frozen=True)
class GroupEffect:
    """What one flagged group does: the model beside the same stack with the group at its default.

    Attributes
    ----------
    group : str
        A key of :data:`~remprop.theory.models.default_init.GROUPS`.
    tensors : tuple of (str, float)
        The flagged tensors of the group and their std ratio measured / default.
    parameters, default_parameters : dict
        The theory's parameters (:data:`MOVED_PARAMETERS`) the group moves, in the model and at the default.
    amplitude : float or None
        A residual branch's amplitude against its default (``sqrt`` of its variance product ratio).
    model, default : dict
        By the layer maps: ``final_rho``, ``phase``, ``alpha_star``, ``alpha_ratio``, ``beta_ratio``,
        ``collapse_depth``.
    equivalent_depth : int or None
        The first layer at which the stack with the group at its default reaches the model's final
        cosine (None: not within the searched depth).
    max_depth : int
        The depth searched (collapse depths and the equivalent depth).
    skip : float
        The branch's skip strength in the model (``alpha_sa`` or ``alpha_mlp``).
    """

    group: str
    tensors: tuple
    parameters: dict
    default_parameters: dict
    amplitude: float | None
    model: dict
    default: dict
    equivalent_depth: int | None
    max_depth: int
    skip: float = 1.0

    @property
    def effective_alpha(self) -> float | None:
        """A branch's skip strength against the default branch, ``alpha / c`` (inf for a zero branch)."""
        if self.amplitude is None:
            return None
        return math.inf if self.amplitude == 0 else self.skip / self.amplitude

    @property
    def toward(self) -> tuple:
        """The collapses it moves toward (``"rank collapse"``, ``"entropy collapse"``), or away from
        (``"away from rank collapse"``, ...): by the final cosine and ``beta / beta_c``."""
        out = []
        m, d = self.model, self.default
        if not math.isclose(m["final_rho"], d["final_rho"], rel_tol=1e-6, abs_tol=1e-9):
            out.append("rank collapse" if m["final_rho"] > d["final_rho"] else "away from rank collapse")
        if not math.isclose(m["beta_ratio"], d["beta_ratio"], rel_tol=1e-6, abs_tol=1e-12):
            out.append("entropy collapse" if m["beta_ratio"] > d["beta_ratio"] else "away from entropy collapse")
        return tuple(out)

    def line(self, depth) -> str:
        """One report line (and its continuation) in words."""
        tensors = ", ".join(f"{TENSOR_LABELS[r]} x{ratio:.3g}" for r, ratio in self.tensors)
        moved = [f"{name} = {self.parameters[name]:.4g} (default {self.default_parameters[name]:.4g})"
                 for name in MOVED_PARAMETERS if not math.isclose(self.parameters[name], self.default_parameters[name],
                                                                  rel_tol=1e-9, abs_tol=0.0)]
        text = f"{self.group} ({tensors}): " + (", ".join(moved) if moved else "the theory's parameters unchanged")
        if self.amplitude is not None:
            branch, field, _ = BRANCHES[self.group]
            text += (f"; the {branch} branch {self.amplitude:.3g}x its default amplitude: {field} = "
                     f"{self.effective_alpha:.3g} against the default branch")
        m, d = self.model, self.default
        toward = " and ".join(self.toward) or "neither collapse"
        text += (f"\n      -> toward {toward}" if not toward.startswith("away") else f"\n      -> {toward}")
        text += (f": final cosine {m['final_rho']:.4f} (default {d['final_rho']:.4f}), alpha_SA / alpha* "
                 f"{m['alpha_ratio']:.3g} ({d['alpha_ratio']:.3g}), beta / beta_c {m['beta_ratio']:.3g} "
                 f"({d['beta_ratio']:.3g}), rank collapse {_at(m['collapse_depth'], self.max_depth)} "
                 f"({_at(d['collapse_depth'], self.max_depth)})")
        if self.equivalent_depth is not None and self.equivalent_depth != depth:
            text += (f"; its {depth} layers end where the default init's stack is at layer {self.equivalent_depth}")
        elif self.equivalent_depth is None:
            text += f"; the default init's stack does not reach its final cosine within {self.max_depth} layers"
        return text

    def to_dict(self) -> dict:
        return {"group": self.group, "tensors": [{"tensor": TENSOR_LABELS[r], "role": r, "ratio": ratio}
                                                 for r, ratio in self.tensors],
                "parameters": dict(self.parameters), "default_parameters": dict(self.default_parameters),
                "amplitude": self.amplitude, "effective_alpha": self.effective_alpha, "toward": list(self.toward),
                "model": {k: v for k, v in self.model.items() if k != "rho"},
                "default": {k: v for k, v in self.default.items() if k != "rho"},
                "equivalent_depth": self.equivalent_depth, "max_depth": self.max_depth}


def _at(depth, searched) -> str:
    return f"from layer {depth}" if depth is not None else f"not within {searched}"


@dataclass(frozen=True)
class InitDeviations:
    """The deviation table of a model's own weights and the effect of each flagged group.

    Attributes
    ----------
    rows : tuple of TensorDeviation
        Every measured role against the default (:func:`remprop.theory.models.default_init.init_deviations`).
    effects : tuple of GroupEffect
        One per group with a flagged tensor, in the order of the table.
    source : str
        The default init in words (``FamilyInit.source``, :mod:`remprop.theory.models.default_init`).
    """

    rows: tuple
    effects: tuple
    source: str = "transformers' _init_weights of the config"

    @property
    def flagged(self) -> tuple:
        """The flagged rows."""
        return tuple(row for row in self.rows if row.flagged)

    def branch_amplitudes(self) -> dict:
        """``{"attention": c, "MLP": c}`` of the flagged residual branches (absent: at their default)."""
        return {BRANCHES[e.group][0]: e.amplitude for e in self.effects if e.amplitude is not None}

    def lines(self, depth) -> list:
        """The report's section: the table, then what each flagged group does."""
        lines = ["", f"initialisation against the library's default ({self.source}; "
                 "flagged beyond 5 sampling errors, exact defaults beyond rounding)",
                 f"  {'group':<13} {'tensor':<26} {'measured std':>12} {'default std':>12} {'ratio':>7}  flag"]
        for row in self.rows:
            lines.append(f"  {row.group:<13} {row.tensor:<26} {row.measured_std:12.4g} {row.default_std:12.4g} "
                         f"{row.ratio:7.3g}  {'DEVIATES' if row.flagged else '-'}")
        if self.effects:
            lines.append("what the deviations do (layer maps: the model beside the group at its default)")
            lines += [f"  - {effect.line(depth)}" for effect in self.effects]
        else:
            lines.append("every tensor is within its sampling error of the library's default")
        return lines

    def skip_line(self) -> str:
        """The report's skip line's note on branches away from their default ('' for none)."""
        amplitudes = self.branch_amplitudes()
        return "".join(f"   ({branch} branch x{c:.3g} its default: skip {1 / c if c else math.inf:.3g} against it)"
                       for branch, c in amplitudes.items())

    def skip_advice(self) -> dict | None:
        """The skip change of a model whose residual branches are flagged (None: none is): restoring
        them to the default, with the effect by the layer maps (``action``, ``final_rho``, ``phase``,
        ``values``). The branch groups flagged are reset together."""
        branches = [e for e in self.effects if e.amplitude is not None]
        if not branches:
            return None
        both = next((e for e in self.effects if e.group == ALL_FLAGGED), None)
        effect = branches[0] if len(branches) == 1 or both is None else both
        tensors = ", ".join(f"{TENSOR_LABELS[r]} (std x{ratio:.3g})" for r, ratio in effect.tensors)
        words = ", ".join(f"the {BRANCHES[e.group][0]} branch {e.amplitude:.3g}x its default amplitude "
                          f"({BRANCHES[e.group][1]} = {e.effective_alpha:.3g} against the default branch)"
                          for e in branches)
        m, d = effect.model, effect.default
        action = (f"{words}: at the default std of {tensors} the skip margin alpha_SA / alpha* is "
                  f"{d['alpha_ratio']:.3g} (now {m['alpha_ratio']:.3g}) and the final cosine {d['final_rho']:.4f} "
                  f"(now {m['final_rho']:.4f})"
                  + (", or scale the skip paths by the same factors" if any(e.amplitude > 1 for e in branches) else ""))
        return {"action": action, "final_rho": d["final_rho"], "phase": d["phase"],
                "values": {"amplitudes": self.branch_amplitudes(), "alpha_ratio_default": d["alpha_ratio"],
                           "alpha_ratio": m["alpha_ratio"]}}

    def to_dict(self) -> dict:
        return {"source": self.source, "rows": [row.to_dict() for row in self.rows],
                "effects": [e.to_dict() for e in self.effects]}


def effect_seconds(spec, max_depth) -> float:
    """Estimated seconds of :func:`init_deviations` (its layer-map runs through ``max_depth`` blocks and
    ``alpha*`` searches: the model's and one per flagged group), before it runs; 0 for a spec not measured."""
    from remprop.theory import work_estimates

    if spec.weights is None or family_init(spec) is None:
        return 0.0
    groups = {row.group for row in tensor_deviations(spec, spec.weights) if row.flagged}
    runs = 1 + len(groups) + (len(groups) > 1)
    arch = spec.architecture
    return runs * (work_estimates.run_seconds(arch, 1, max(max_depth, spec.depth))
                   + residual_strength.search_seconds(arch, spec.depth, 1))


def init_deviations(spec, run, max_depth) -> InitDeviations | None:
    """The deviation table of ``spec``'s measured weights and the effect of each flagged group.

    Parameters
    ----------
    spec : ModelSpec
        Measured on its own weights (``spec.weights``).
    run : RunSettings
        The model's run (``spec.settings`` at the diagnosis's threshold).
    max_depth : int
        Deepest stack searched for the collapse depths and the equivalent depth.

    Returns
    -------
    InitDeviations or None
        None where the spec is not measured, or its family's default init is not known.
    """
    weights = spec.weights
    if weights is None or family_init(spec) is None:
        return None
    rows = tensor_deviations(spec, weights)
    model = _numbers(run, max_depth)
    params = _parameters(run)
    effects = []
    flagged_groups = [g for g in GROUPS if any(row.group == g and row.flagged for row in rows)]
    for group in flagged_groups + ([ALL_FLAGGED] if len(flagged_groups) > 1 else []):
        flagged = tuple((row.role, row.ratio) for row in rows if row.flagged and group in (row.group, ALL_FLAGGED))
        reset = measured_spec(spec, reset_roles(spec, weights, [role for role, _ in flagged])).settings
        reset = reset.replace(threshold=run.threshold)
        default = _numbers(reset, max_depth)
        reached = np.flatnonzero(default["rho"] >= model["final_rho"])
        amplitude, skip = None, 1.0
        if group in BRANCHES:
            names = BRANCHES[group][2]
            amplitude = math.sqrt(math.prod(params[n] for n in names)
                                  / math.prod(_parameters(reset)[n] for n in names))
            skip = float(getattr(run.arch, BRANCHES[group][1]))
        effects.append(GroupEffect(group, flagged, params, _parameters(reset), amplitude, model, default,
                                   int(reached[0]) if reached.size else None, max(max_depth, spec.depth), skip))
    return InitDeviations(tuple(rows), tuple(effects), family_init(spec).source)
