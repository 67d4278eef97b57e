r"""The paper's simulated figures: theory as lines, simulation as dots with std error bars.

Each ``figure_*`` function runs the simulation behind one figure of Giorlandino & Goldt
(arXiv 2505.24333) at the paper's sizes by default (d = 720, T = 512, BERT defaults) and
draws it with the one drawing function of :mod:`remprop.diagrams.comparison_figures`:

* :func:`figure_1d`: per-layer cosine of a 60-layer post-LN BERT, beta = 0.5,
  alpha_sa = 1 (rank collapse) and a trainable alpha_sa (1.3);
* :func:`figure_1e`: the same at beta = 3 (above beta_c: entropy collapse), 12 layers;
* :func:`figure_2`: one attention layer, output cosine against beta and the input cosine;
* :func:`figure_3c`: query/key gradient norms against autograd, collapsed over (T, d);
* :func:`figure_5`: participation ratio Y2 against beta;
* :func:`figure_12`: causal stack, last-token cosine per layer and the error by position.

Fig. 4 is :func:`remprop.validation.experiments.layernorm_figure.figure_4`, Fig. 9's simulation
:func:`remprop.validation.experiments.edge_of_chaos_simulation.simulate_edge_of_chaos`. Theory lines
are the ``T -> infinity`` theory of the paper and, dashed, the exact finite-T theory at the
simulated T (docs/theory.md section 3). Each function returns a :class:`FigureResult`
(a matplotlib ``Figure`` and JSON-ready data); :meth:`FigureResult.save` writes
``<name>.png`` and ``<name>.json``.
"""
from __future__ import annotations

import numpy as np
from scipy.interpolate import CubicSpline

from remprop.diagrams.comparison_figures import (
    finite_betas,
    plot_attention_sweep,
    plot_causal,
    plot_gradient_collapse,
    plot_layer_comparisons,
)
from remprop.diagrams.paper_figures import FigureResult
from remprop.diagrams.style import NORM_TITLES
from remprop.theory import Architecture, participation_ratio, propagate, softmax_attention_map

from ..causal import causal_comparison
from ..comparison import attention_sweep, compare
from ..gradients import GradientSweep, gradient_sweep
from ..settings import SimulationSettings, check_simulation

__all__ = ["FigureResult", "FIGURES", "DEFAULT_GRADIENT_BETAS", "figure_1d", "figure_1e", "figure_2", "figure_3c",
           "figure_5", "figure_12"]

#: beta grid of Fig. 3(c) (0.05 to 3).
DEFAULT_GRADIENT_BETAS = np.array([0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9, 1.1, 1.3, 1.5, 1.75, 2.0, 2.5, 3.0])


def _layer_figure(name, alphas, arch, beta, depth, sim, progress):
    arch = Architecture() if arch is None else arch
    sim = check_simulation(sim)
    comparisons = [compare(arch.replace(alpha_sa=float(a)), beta, depth, sim=sim, progress=progress) for a in alphas]
    # the exact finite-T theory at the simulated T, from the measured input state
    finite = [propagate(arch.replace(alpha_sa=float(a), seq_len=sim.seq_len), beta, depth, q0=c.settings["q0"],
                        rho0=c.settings["rho0"]).rho for a, c in zip(alphas, comparisons)]
    title = (f"{NORM_TITLES[arch.norm]} BERT, " rf"$\beta = {beta:g}$, $d = {sim.width}$, $T = {sim.seq_len}$, "
             f"{comparisons[0].samples} {sim.inputs} sequences")
    ax = plot_layer_comparisons(comparisons, finite=finite, finite_label=f"mean-cosine maps, $T = {sim.seq_len}$",
                                title=title)
    data = {"figure": name, "comparisons": [c.to_dict(per_sequence=False) for c in comparisons],
            "max_abs_error": {f"{a:g}": c.max_abs_error for a, c in zip(alphas, comparisons)},
            "theory_rho_finite_t": {f"{a:g}": rho for a, rho in zip(alphas, finite)},
            "elapsed_s": sum(c.elapsed for c in comparisons)}
    return FigureResult(name, ax.figure, data)


def figure_1d(*, alphas=(1.0, 1.3), arch: Architecture | None = None, beta=0.5, depth=60,
              sim: SimulationSettings | None = None, progress=None) -> FigureResult:
    """Fig. 1(d): cosine per layer of a deep post-LN BERT below beta_c, theory vs simulation.

    Parameters
    ----------
    alphas : sequence of float
        Skip strengths alpha_sa (1.0 collapses; 1.3 stays trainable at 60 layers).
    arch : Architecture, optional
        Default BERT defaults (alpha_sa replaced by each of ``alphas``).
    beta, depth, sim, progress
        As :func:`~remprop.validation.comparison.compare` (default ``SimulationSettings()``:
        d = 720, T = 512, 2 seeds x 2 text sequences).

    Returns
    -------
    FigureResult
        ``data``: the comparisons (per-layer tables), the largest error of the
        ``T -> infinity`` theory per alpha and the finite-T theory per alpha.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(d).
    """
    return _layer_figure("figure_1d", alphas, arch, beta, depth, sim, progress)


def figure_1e(*, alphas=(1.0, 1.3), arch: Architecture | None = None, beta=3.0, depth=12,
              sim: SimulationSettings | None = None, progress=None) -> FigureResult:
    """Fig. 1(e): as :func:`figure_1d` above beta_c (beta = 3, 12 layers; entropy collapse).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(e).
    """
    return _layer_figure("figure_1e", alphas, arch, beta, depth, sim, progress)


def _sweep_title(sweep, arch, head):
    s = sweep.settings
    n = len(s["seeds"]) * s["sequences"]
    return (f"{head}, $d = {s['width']}$, $T = {s['seq_len']}$, {n} sequences;" "\n"
            rf"$q = {s['q0']:g}$, $\sigma_v^2 = {arch.sigma_v2:g}$, $\sigma_b^2 = {arch.sigma_b2:g}$ (values), "
            "no skip or LayerNorm")


def figure_2(*, betas=np.linspace(0.25, 4.0, 16), input_cosines=(0.1, 0.3, 0.5, 0.7, 0.9),
             arch: Architecture | None = None, sim: SimulationSettings | None = None, progress=None) -> FigureResult:
    r"""Fig. 2: output cosine of one softmax attention layer against beta and the input cosine.

    Inputs are Gaussian tokens with q = 1 and the given cosines; the layer has the values
    ``sigma_v2`` and value bias ``sigma_b2`` of ``arch`` (default the paper's:
    ``sigma_v2 = 1``, no value bias) and no skip or LayerNorm. Theory:
    :math:`p_A / q_A` of :func:`remprop.theory.softmax_attention_map`, ``T -> infinity``
    (solid) and, for softmax attention, the expected mean pairwise cosine at the simulated
    T and d (dashed; :func:`remprop.theory.rem.finite_width.attention_mean_cosine`, the
    quantity measured, docs/theory.md section 18), drawn through 60 betas by a cubic spline.

    Parameters
    ----------
    betas, input_cosines, arch, sim, progress
        As :func:`~remprop.validation.comparison.attention_sweep` (``arch`` default
        ``Architecture(sigma_v2=1.0, sigma_b2=0.0)``).

    Returns
    -------
    FigureResult
        ``data``: the sweep, ``max_abs_error`` (of the ``T -> infinity`` theory; per input
        cosine in ``max_abs_error_per_input_cosine``), the finite-T map's ``p_A / q_A`` and its
        error (``max_abs_error_finite_t``), the finite-T-and-width cosine and its error
        (``max_abs_error_finite_width``), and both errors in standard errors of the measured
        mean at each (input cosine, beta) (``gap_se_finite_t``, ``gap_se_finite_width``).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 2; docs/theory.md sections 3 and 18.
    """
    arch = Architecture(sigma_v2=1.0, sigma_b2=0.0) if arch is None else arch
    softmax = not arch.attention.gain_controlled
    sim = check_simulation(sim)
    seq_len, width = sim.seq_len, sim.width
    sweep = attention_sweep(betas, input_cosines, arch=arch, sim=sim, progress=progress, finite_width=softmax)
    q0 = sweep.settings["q0"]

    def finite_cosine(at):
        q_a, p_a = softmax_attention_map(arch.effective_beta(at)[None, :], q=q0, p=q0 * sweep.input_cosines[:, None],
                                         sigma_v2=arch.sigma_v2, sigma_b2=arch.sigma_b2, seq_len=seq_len)
        return np.asarray(p_a / q_a)

    fine = finite_betas(sweep)
    finite, label = (finite_cosine(fine), f"theory, finite $T = {seq_len}$") if softmax else (None, None)
    with_width = "cosine_finite_width" in sweep.theory
    if with_width:  # the mean cosine is sampled (ms per point): 60 betas, a cubic spline through them
        nodes = np.linspace(fine[0], fine[-1], 60)
        finite = CubicSpline(nodes, sweep.theory_curve("cosine_finite_width", nodes), axis=1)(fine)
        label = f"theory, finite $T = {seq_len}$, $d = {width}$"
    ax = plot_attention_sweep(sweep, "cosine", finite=finite, finite_label=label,
                              title=_sweep_title(sweep, arch, f"one {arch.attention} attention layer"))
    err = np.abs(sweep.theory["cosine"] - sweep.measured["cosine"])
    data = {"figure": "figure_2", **sweep.to_dict(), "max_abs_error": float(err.max()),
            "max_abs_error_per_input_cosine": err.max(axis=1).tolist(), "theory_cosine_finite_t": None}
    se = sweep.spread["cosine"] / np.sqrt(len(sweep.settings["seeds"]) * sweep.settings["sequences"])
    if softmax:
        gap_t = finite_cosine(sweep.betas) - sweep.measured["cosine"]
        with np.errstate(divide="ignore", invalid="ignore"):
            data["gap_se_finite_t"] = (gap_t / se).tolist()
        data["theory_cosine_finite_t"] = {"betas": fine, "cosine": finite_cosine(fine)}
        data["max_abs_error_finite_t"] = float(np.max(np.abs(gap_t)))
    if with_width:
        gap_w = sweep.theory["cosine_finite_width"] - sweep.measured["cosine"]
        with np.errstate(divide="ignore", invalid="ignore"):
            data["gap_se_finite_width"] = (gap_w / se).tolist()
        data["theory_cosine_finite_width"] = {"betas": fine, "cosine": finite}
        data["max_abs_error_finite_width"] = float(np.max(np.abs(gap_w)))
    return FigureResult("figure_2", ax.figure, data)


def figure_5(*, betas=np.linspace(0.2, 5.0, 25), arch: Architecture | None = None,
             sim: SimulationSettings | None = None, progress=None) -> FigureResult:
    r"""Fig. 5: participation ratio Y2 of attention rows against beta, theory overlaid.

    Theory: :math:`Y_2 = \max(0, 1 - \beta_c / \beta)`, :math:`\beta_c = \sqrt{2 / (q (q - p))}`
    (T -> infinity), and the exact finite-T participation ratio at the simulated T
    (:func:`remprop.theory.participation_ratio`), which lies above it near and below beta_c.

    Parameters
    ----------
    betas, arch, sim, progress
        As :func:`~remprop.validation.comparison.attention_sweep`; the input cosine is
        ``sim.rho0`` (default ``SimulationSettings()``: q = 1, p = 0).

    Returns
    -------
    FigureResult
        ``data``: the sweep, the errors of the ``T -> infinity`` theory (``abs_error_y2``,
        ``max_abs_error``) and of the finite-T theory.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 5; docs/theory.md section 3.
    """
    arch = Architecture() if arch is None else arch
    sim = check_simulation(sim)
    seq_len = sim.seq_len
    sweep = attention_sweep(betas, (sim.rho0,), arch=arch, sim=sim, progress=progress)
    q0 = sweep.settings["q0"]
    p0 = q0 * float(sweep.input_cosines[0])

    def finite_y2(at):
        return np.asarray(participation_ratio(arch.effective_beta(np.asarray(at)), q0, p0, seq_len=seq_len))

    fine = finite_betas(sweep)
    finite = finite_y2(fine)
    ax = plot_attention_sweep(sweep, "y2", finite=finite[None, :], finite_label=f"theory, finite $T = {seq_len}$",
                              title=_sweep_title(sweep, arch, "attention rows as a Random Energy Model"))
    err = np.abs(sweep.theory["y2"] - sweep.measured["y2"])[0]
    err_finite = np.abs(finite_y2(sweep.betas) - sweep.measured["y2"][0])
    data = {"figure": "figure_5", **sweep.to_dict(), "abs_error_y2": err.tolist(), "max_abs_error": float(err.max()),
            "theory_y2_finite_t": {"betas": fine, "y2": finite}, "abs_error_y2_finite_t": err_finite,
            "max_abs_error_finite_t": float(err_finite.max())}
    return FigureResult("figure_5", ax.figure, data)


def figure_3c(sweep: GradientSweep | None = None, *, betas=DEFAULT_GRADIENT_BETAS,
              sizes=((256, 128), (256, 256), (1024, 128), (1024, 256)), sim: SimulationSettings | None = None,
              readouts=2, sigma_v2=1.0, progress=None) -> FigureResult:
    """Fig. 3(c): gradient norms against beta for several (T, d), collapsed, with the theory.

    Parameters
    ----------
    sweep : GradientSweep, optional
        A finished sweep to draw (then the other arguments are ignored).
    betas, sizes, sim, readouts, sigma_v2, progress
        As :func:`~remprop.validation.gradients.gradient_sweep` (default
        ``SimulationSettings(seeds=3, dtype="float64")``).

    Returns
    -------
    FigureResult
        ``data`` holds the sweep's table and the largest relative error over the points
        above 1e-3 of their size's maximum.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 3(c); docs/theory.md section 7.
    """
    if sweep is None:
        sweep = gradient_sweep(betas, sizes, sim=sim, readouts=readouts, sigma_v2=sigma_v2, progress=progress)
    ax, _ = plot_gradient_collapse(sweep)
    return FigureResult("figure_3c", ax.figure, {"figure": "figure_3c", **sweep.to_dict()})


def figure_12(comparisons=None, *, settings=((0.5, 1.0), (0.5, 1.3), (1.2, 1.0)), arch: Architecture | None = None,
              depth=50, sim: SimulationSettings | None = None, last=50, window=32, progress=None) -> FigureResult:
    """Fig. 12: causal stack, last-token cosine per layer and the error by position.

    Runs :func:`~remprop.validation.causal.causal_comparison` for each (beta, alpha_sa) of
    ``settings``: the late-token theory (REM with t keys at the score scale of T), the
    encoder theory at T and the simulation of the last ``last`` tokens, and the error of
    the theory in windows of ``window`` positions.

    Parameters
    ----------
    comparisons : sequence of CausalComparison, optional
        Finished comparisons to draw (then ``settings`` and the sizes are ignored).
    settings : sequence of (beta, alpha_sa)
    arch : Architecture, optional
        Default BERT defaults (alpha_sa replaced by each setting's).
    depth, sim, last, window, progress
        As :func:`~remprop.validation.causal.causal_comparison` (default
        ``SimulationSettings(inputs="synthetic")``).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 12; docs/theory.md section 8.
    """
    arch = Architecture() if arch is None else arch
    if comparisons is None:
        sim = check_simulation(sim, inputs="synthetic")
        comparisons = [causal_comparison(arch.replace(alpha_sa=float(a)), b, depth, sim=sim, last=last, window=window,
                                         progress=progress) for b, a in settings]
    labels = [f"beta={c.settings['beta']:g}, alpha_sa={c.settings['arch']['alpha_sa']:g}" for c in comparisons]
    ax, _ = plot_causal(comparisons, labels)
    data = {"figure": "figure_12", "comparisons": [c.to_dict() for c in comparisons],
            "max_abs_error_last": {label: c.max_abs_error for label, c in zip(labels, comparisons)}}
    return FigureResult("figure_12", ax.figure, data)


#: Figure id -> function, for the figures of one layer or one stack (1d, 1e, 2, 5).
FIGURES = {"1d": figure_1d, "1e": figure_1e, "2": figure_2, "5": figure_5}
