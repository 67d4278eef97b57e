r"""Fig. 4 simulated: the mean token cosine over depth for the four LayerNorm placements.

Post-LN, pre-LN and their gain-controlled versions, at the reference settings
(docs/theory.md section 9: ``sigma_w2 = 0.2``, MLP biases ``sigma_b2 = 0.02**2``, *no
value bias*, ``sigma_v2 = 1``, alphas 1, ``beta = 0.1``, ``rho0 = 0.2``, ``q0 = 1``).
:class:`~remprop.theory.Architecture` and :class:`~remprop.validation.SimulatedStack` have
one ``sigma_b2`` for all biases; the stacks here draw the value bias with its own
variance ``sigma_bv2`` (the drawn bias is rescaled, so the random stream is the one of
the plain stack), and the theory is composed from the component maps the same way
(:func:`remprop.diagrams.layernorm_placement_data`).

Theory lines: ``T -> infinity`` (solid family) and, where the theory has it, the exact
finite-T participation ratio at the simulated ``T`` (thin dotted). Simulation: mean
over ``seeds x sequences`` synthetic sequences with exactly ``(q0, q0 rho0)``, error bars
one standard deviation.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333, Fig. 4.
"""
from __future__ import annotations

import dataclasses
import math
import time

import numpy as np
import torch

from remprop.diagrams.comparison_figures import plot_layernorm_comparison
from remprop.diagrams.figure_data import LAYERNORM_REFERENCE_RUN, LAYERNORM_VARIANTS, layernorm_placement_data
from remprop.diagrams.paper_figures import FigureResult
from remprop.diagrams.style import VARIANT_MARKERS
from remprop.theory import RunSettings

from ..backend import check_scalar, generator
from ..layers import BlockWeights
from ..settings import SimulationSettings, check_simulation
from ..simulator import SimulatedStack, StackTrace

__all__ = ["ValueBiasStack", "figure_4", "VARIANT_MARKERS"]

_STREAM_VALUE_BIAS = 3  # a stream of its own when the plain stack draws no bias to rescale


class ValueBiasStack(SimulatedStack):
    """A :class:`~remprop.validation.SimulatedStack` whose value bias has its own variance ``sigma_bv2``.

    The MLP biases keep ``arch.sigma_b2``. The value bias of layer l is the plain
    stack's draw times ``sqrt(sigma_bv2 / sigma_b2)`` (the same random stream); when
    ``sigma_b2 = 0`` it comes from stream ``(seed, 3, l)``.

    Parameters
    ----------
    *args, **kwargs
        As :class:`~remprop.validation.SimulatedStack`.
    sigma_bv2 : float
        Value bias variance, >= 0.
    """

    def __init__(self, *args, sigma_bv2=0.0, **kwargs):
        super().__init__(*args, **kwargs)
        self.sigma_bv2 = check_scalar("sigma_bv2", sigma_bv2, nonnegative=True)

    def weights(self, layer: int) -> BlockWeights:
        plain = super().weights(layer)
        bias = plain.attention.value_bias
        sigma_b2 = self.params["sigma_b2"]
        if self.sigma_bv2 == 0.0:
            bias = torch.zeros_like(bias)
        elif sigma_b2 > 0.0:
            bias = bias * math.sqrt(self.sigma_bv2 / sigma_b2)
        else:
            gen = generator(self.seed, _STREAM_VALUE_BIAS, layer, self.device)
            bias = torch.randn(bias.shape, generator=gen, dtype=bias.dtype, device=bias.device)
            bias.mul_(math.sqrt(self.sigma_bv2))
        return dataclasses.replace(plain, attention=dataclasses.replace(plain.attention, value_bias=bias))


def figure_4(*, run: RunSettings | None = None, sim: SimulationSettings | None = None, sigma_bv2=0.0, every=None,
             progress=None) -> FigureResult:
    """Fig. 4: mean token cosine over depth, four LayerNorm placements, theory and simulation.

    Parameters
    ----------
    run : remprop.theory.RunSettings, optional
        Architecture (its ``norm`` and ``attention`` replaced by each variant's), beta, depth
        and input state, as :func:`remprop.diagrams.layernorm_placement_data`; default the
        reference run :data:`~remprop.diagrams.figure_data.LAYERNORM_REFERENCE_RUN`.
    sim : remprop.validation.SimulationSettings, optional
        Width d, tokens T, seeds, synthetic sequences per seed, dtype and device; the inputs
        are Gaussian tokens at the run's ``(q0, rho0)`` (``sim.inputs``, ``sim.q0`` and
        ``sim.rho0`` are not read). Default ``SimulationSettings()`` (d = 720, T = 512,
        2 seeds x 2 sequences).
    sigma_bv2 : float
        Value bias variance, >= 0 (default 0: no value bias, as the reference figure).
    every : int, optional
        Simulated points drawn every ``every`` layers (default: about 25 points).
    progress : callable, optional
        Called with the number of sequences finished.

    Returns
    -------
    FigureResult
        ``figure_4``; data: settings, layers, theory (asymptotic and finite-T) and the
        measured means and standard deviations per variant.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 4.
    """
    run = LAYERNORM_REFERENCE_RUN if run is None else run
    theory = layernorm_placement_data(run, sigma_bv2=sigma_bv2)
    settings = dict(theory["settings"])
    sim = check_simulation(sim).replace(inputs="synthetic", q0=run.q0, rho0=run.rho0)
    width, seq_len = sim.width, sim.seq_len
    # the exact finite-T participation ratio at the simulated T
    finite = layernorm_placement_data(run.replace(arch=run.arch.replace(seq_len=seq_len)),
                                      sigma_bv2=sigma_bv2)["rho"]
    measured, spread = {}, {}
    start = time.perf_counter()
    for name, (norm, attention) in LAYERNORM_VARIANTS.items():
        arch = run.arch.replace(norm=norm, attention=attention)
        traces = []
        for seed in sim.seeds:
            stack = ValueBiasStack(arch, run.beta, run.depth, sim=sim, seed=seed, sigma_bv2=sigma_bv2)
            for batch in sim.input_batches(seed):
                traces.append(stack.trace(batch.tokens))
                if progress is not None:
                    progress(len(batch))
        trace = StackTrace.concatenate(traces)
        measured[name] = trace.cosine.mean(axis=0)
        spread[name] = trace.cosine.std(axis=0, ddof=1) if trace.cosine.shape[0] > 1 else 0 * measured[name]
    elapsed = time.perf_counter() - start

    layers = theory["layers"]
    s = settings
    title = (f"LayerNorm placement and gain control: $d = {width}$, $T = {seq_len}$, {sim.samples} sequences\n"
             rf"$\beta = {s['beta']:g}$, $\sigma_w^2 = {s['sigma_w2']:g}$, $\sigma_v^2 = {s['sigma_v2']:g}$, "
             rf"$\sigma_b^2 = {s['sigma_b2']:g}$ (MLP), $\sigma_{{b,V}}^2 = {s['sigma_bv2']:g}$, "
             rf"$\rho_0 = {s['rho0']:g}$")
    ax = plot_layernorm_comparison(layers, theory["rho"], measured, spread, finite=finite,
                                   finite_label=f"theory at finite $T = {seq_len}$", every=every, title=title)
    errors = {name: float(np.max(np.abs(measured[name] - theory["rho"][name])[1:])) for name in LAYERNORM_VARIANTS}
    data = {"figure": "figure_4", "settings": {**settings, "width": width, "seq_len": seq_len,
                                               "seeds": list(sim.seeds), "sequences": sim.sequences,
                                               "dtype": sim.dtype_name, "device": str(sim.device)},
            "layers": layers.tolist(),
            "theory_rho": {k: v.tolist() for k, v in theory["rho"].items()},
            "theory_rho_finite_t": {k: v.tolist() for k, v in finite.items()},
            "measured_cosine_mean": {k: v.tolist() for k, v in measured.items()},
            "measured_cosine_std": {k: v.tolist() for k, v in spread.items()},
            "max_abs_error_asymptotic": errors,
            "elapsed_s": elapsed}
    return FigureResult("figure_4", ax.figure, data)
