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
from remprop.diagrams.figure_data import LAYERNORM_VARIANTS, layernorm_placement_data
from remprop.diagrams.paper_figures import FigureResult
from remprop.diagrams.style import VARIANT_MARKERS
from remprop.theory import Architecture
from remprop.theory.rem.checks import check_seq_len

from .backend import check_positive_int, check_scalar, generator, resolve_device, resolve_dtype
from .inputs import input_batches
from .layers import BlockWeights
from .simulator import SimulatedStack, StackTrace

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


def _finite_t_rho(settings, seq_len):
    """Theory rho over depth with the exact finite-T participation ratio (T = seq_len).

    Each variant's block is :func:`~remprop.theory.components.block.block`
    (docs/theory.md section 5) around a finite-T attention map whose value bias has its own
    variance ``sigma_bv2`` (the MLP biases keep ``sigma_b2``).
    """
    s = settings
    out = {}
    for name, (norm, attention) in LAYERNORM_VARIANTS.items():
        arch = Architecture(norm=norm, attention=attention, activation=s["activation"], sigma_w2=s["sigma_w2"],
                            sigma_b2=s["sigma_b2"], sigma_v2=s["sigma_v2"], alpha_sa=s["alpha_sa"],
                            alpha_mlp=s["alpha_mlp"], seq_len=seq_len)
        block = arch.block(s["beta"], sigma_bv2=s["sigma_bv2"])
        q, p = np.empty(s["depth"] + 1), np.empty(s["depth"] + 1)
        q[0], p[0] = s["q0"], s["q0"] * s["rho0"]
        for layer in range(s["depth"]):
            q[layer + 1], p[layer + 1] = block(q[layer], p[layer])
        out[name] = p / q
    return out


def figure_4(*, depth=100, width=720, seq_len=512, seeds=2, sequences=2, beta=0.1, sigma_w2=0.2,
             sigma_b2=0.02 ** 2, sigma_bv2=0.0, sigma_v2=1.0, alpha_sa=1.0, alpha_mlp=1.0, q0=1.0, rho0=0.2,
             activation="relu", every=None, dtype="float32", device=None, progress=None) -> FigureResult:
    """Fig. 4: mean token cosine over depth, four LayerNorm placements, theory and simulation.

    Parameters
    ----------
    depth, width, seq_len : int
        Blocks, width d, tokens T.
    seeds, sequences : int
        Initialisations (seeds 0..n-1) and synthetic sequences per seed.
    beta, sigma_w2, sigma_b2, sigma_bv2, sigma_v2, alpha_sa, alpha_mlp, q0, rho0, activation
        As :func:`remprop.diagrams.layernorm_placement_data` (reference defaults).
    every : int, optional
        Simulated points drawn every ``every`` layers (default: about 25 points).
    dtype, device, progress
        As :func:`remprop.validation.compare` (``progress`` is called with the number of
        sequences finished).

    Returns
    -------
    FigureResult
        ``figure_4``; data: settings, layers, theory (asymptotic and finite-T) and the
        measured means and standard deviations per variant.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 4.
    """
    theory = layernorm_placement_data(depth, beta=beta, sigma_w2=sigma_w2, sigma_b2=sigma_b2, sigma_bv2=sigma_bv2,
                                      sigma_v2=sigma_v2, alpha_sa=alpha_sa, alpha_mlp=alpha_mlp, q0=q0, rho0=rho0,
                                      activation=activation)
    settings = dict(theory["settings"])
    seeds = check_positive_int("seeds", seeds)
    sequences = check_positive_int("sequences", sequences)
    width = check_positive_int("width", width, 2)
    seq_len = check_seq_len(seq_len, allow_none=False)
    dtype, device = resolve_dtype(dtype), resolve_device(device)
    finite = _finite_t_rho(settings, seq_len)
    measured, spread = {}, {}
    start = time.perf_counter()
    for name, (norm, attention) in LAYERNORM_VARIANTS.items():
        arch = Architecture(norm=norm, attention=attention, activation=activation, sigma_w2=sigma_w2,
                            sigma_b2=sigma_b2, sigma_v2=sigma_v2, alpha_sa=alpha_sa, alpha_mlp=alpha_mlp)
        traces = []
        for seed in range(seeds):
            stack = ValueBiasStack(arch, beta, depth, width=width, seq_len=seq_len, dtype=dtype, device=device,
                                   seed=seed, sigma_bv2=sigma_bv2)
            for batch in input_batches("synthetic", seed=seed, sequences=sequences, seq_len=seq_len, width=width,
                                       q0=q0, rho0=rho0, dtype=dtype, device=device):
                traces.append(stack.trace(batch.tokens))
                if progress is not None:
                    progress(len(batch))
        trace = StackTrace.concatenate(traces)
        measured[name] = trace.cosine.mean(axis=0)
        spread[name] = trace.cosine.std(axis=0, ddof=1) if trace.cosine.shape[0] > 1 else 0 * measured[name]
    elapsed = time.perf_counter() - start

    layers = theory["layers"]
    title = (f"LayerNorm placement and gain control: $d = {width}$, $T = {seq_len}$, {seeds * sequences} sequences\n"
             rf"$\beta = {beta:g}$, $\sigma_w^2 = {sigma_w2:g}$, $\sigma_v^2 = {sigma_v2:g}$, "
             rf"$\sigma_b^2 = {sigma_b2:g}$ (MLP), $\sigma_{{b,V}}^2 = {sigma_bv2:g}$, $\rho_0 = {rho0:g}$")
    ax = plot_layernorm_comparison(layers, theory["rho"], measured, spread, finite=finite,
                                   finite_label=f"theory at finite $T = {seq_len}$", every=every, title=title)
    errors = {name: float(np.max(np.abs(measured[name] - theory["rho"][name])[1:])) for name in LAYERNORM_VARIANTS}
    data = {"figure": "figure_4", "settings": {**settings, "width": width, "seq_len": seq_len, "seeds": seeds,
                                               "sequences": sequences, "dtype": str(dtype).replace("torch.", ""),
                                               "device": str(device)},
            "layers": layers.tolist(),
            "theory_rho": {k: v.tolist() for k, v in theory["rho"].items()},
            "theory_rho_finite_t": None if finite is None else {k: v.tolist() for k, v in finite.items()},
            "measured_cosine_mean": {k: v.tolist() for k, v in measured.items()},
            "measured_cosine_std": {k: v.tolist() for k, v in spread.items()},
            "max_abs_error_asymptotic": errors,
            "elapsed_s": elapsed}
    return FigureResult("figure_4", ax.figure, data)
