"""The work of a figure set, estimated before it runs (``remprop figures --max-seconds/--max-memory``).

:func:`figures_seconds` and :func:`figures_bytes` count, from the sizes of each chosen figure of
:func:`~remprop.validation.experiments.paper_figures.make_figures`, its theory part (the theory's
own work estimates), its simulated part (the simulation estimate at the rate measured on the
device) and its training runs (the training estimate), plus a fixed share to draw each part.
Sweep cells and training runs already in the output folder are counted as if redone, so the
estimate is an upper bound. Reference: docs/validation.md.
"""
from __future__ import annotations

import inspect

from remprop.diagrams.paper_figures import PAPER_FIGURES, check_figure_ids

from .paper_figures import _TRAINED, _chosen_sizes, _simulation_threads, _torch_available, _training_runs

__all__ = ["figures_seconds", "figures_bytes", "DRAW_SECONDS"]

#: Seconds to draw one figure part and write its PNG (150 dpi) and data with matplotlib: the
#: fixed share of every part, whatever its sizes (0.3-1.5 s measured on one core).
DRAW_SECONDS = 1.0
#: Floating-point operations per draw, layer and T^3 of the single-initialisation Gram chains
#: that Figs. 1(d, e) set beside text inputs (:func:`remprop.theory.propagate_gram`: one
#: eigendecomposition, about 10 T^3, and five T x T products, 10 T^3).
_GRAM_FLOPS_PER_T3 = 20
#: Seconds of the finite-width theory of Fig. 2 (:mod:`remprop.theory.rem.finite_width`): its energy
#: table, 97 quadratures at the simulated T, computed once (35 s measured on a core shared by
#: about 2.5 processes).
_ENERGY_TABLE_SECONDS = 15.0
#: Gram draws (chains) per sequence of those figures (the default of ``compare``).
_GRAM_DRAWS = 8
#: Fixed seconds per chain and layer of those chains, whatever T (small eigendecompositions and
#: Python per step): Fig. 1(d) at the quick sizes (T = 128, 16 sequences x 8 chains x 60 layers)
#: took 440 s on a loaded core, 57 ms per chain and layer.
_GRAM_CHAIN_LAYER_SECONDS = 0.03


def figures_seconds(sizes=None, only=None, *, quick=False, simulate=None, device=None, workers=0,
                    threads=None) -> dict:
    r"""Estimated seconds of each figure :func:`~remprop.validation.experiments.paper_figures.make_figures` would draw, before anything runs.

    Per figure: :data:`DRAW_SECONDS` per part drawn, plus its computation at ``sizes``:

    * theory -- the diagram of Fig. 1(c): :func:`~remprop.theory.work_estimates.run_seconds` of
      its ``diagram_points^2`` cells through 60 blocks and the alpha* line
      (:func:`~remprop.diagrams.residual_strength.search_seconds`), as ``remprop diagram``
      estimates; the other theory parts are closed forms over small grids (counted 0);
    * simulations -- every simulated stack, :func:`~remprop.theory.work_estimates.simulation_seconds`
      of its width, T, sequences and blocks at the float32 matrix-product rate of ``device``
      (:func:`~remprop.validation.training.work.simulation_flop_rate`): ``runs x``
      the stack, e.g. Fig. 1(d): 2 skip strengths x ``seeds`` stacks of ``sequences``
      sequences through ``depth_1d`` blocks; the sweep of Fig. 1(c) on ``workers`` processes;
      Fig. 7's eigenvalues (``10 T^3`` each) and the Gram chains of Figs. 1(d, e)
      (8 chains per sequence, ``20 T^3`` per chain and layer) at
      :func:`~remprop.theory.work_estimates.flops_seconds`, plus 0.03 s per chain and layer;
      Fig. 2's finite-width theory (its energy table, once: about 15 s); Fig. 12's causal theory
      (:func:`~remprop.theory.work_estimates.run_seconds` of ``T - 1`` positions);
    * training -- :func:`~remprop.validation.training.work.training_seconds` of every run of
      Figs. 1(f), 3, 6 and 8 (their settings in :mod:`remprop.validation.training.paper_runs`).

    Runs and sweep cells already on disk (a second ``remprop figures`` into one folder) are
    counted as if they were redone: an upper estimate.

    Parameters
    ----------
    sizes, only, quick, device, workers, threads
        As :func:`~remprop.validation.experiments.paper_figures.make_figures` (the torch threads change the measured rate).
    simulate : bool, optional
        Count the simulated parts (default: when torch, the validation extra, is installed,
        as :func:`~remprop.validation.experiments.paper_figures.make_figures` draws them).

    Returns
    -------
    dict
        Figure id -> seconds, in the order drawn.
    """
    sizes = _chosen_sizes(sizes, quick)
    chosen = check_figure_ids(only)
    simulate = _torch_available() if simulate is None else bool(simulate)
    seconds = {figure_id: _theory_seconds(figure_id, sizes) for figure_id in chosen}
    if simulate and any(PAPER_FIGURES[k].simulation is not None for k in chosen):
        with _simulation_threads(sizes, threads, True):
            rate = _Rate(device)
            for figure_id in chosen:
                if PAPER_FIGURES[figure_id].simulation is not None:
                    seconds[figure_id] += DRAW_SECONDS + _simulation_seconds(figure_id, sizes, rate, workers)
    return seconds


def _theory_seconds(figure_id, s) -> float:
    if PAPER_FIGURES[figure_id].theory is None:
        return 0.0
    if figure_id != "1c":
        return DRAW_SECONDS
    from remprop.diagrams.paper_figures import BERT_DIAGRAM
    from remprop.diagrams.residual_strength import search_seconds
    from remprop.theory import Architecture
    from remprop.theory import work_estimates as work

    arch, depth = Architecture(), BERT_DIAGRAM["depth"]
    return DRAW_SECONDS + work.run_seconds(arch, s.diagram_points ** 2, depth) + search_seconds(arch, depth,
                                                                                                 s.diagram_points)


class _Rate:
    """The simulation and training time estimates on one device (its matrix-product rate measured once)."""

    def __init__(self, device):
        from ..backend import resolve_device
        from ..training.work import simulation_flop_rate

        self.device = resolve_device(device)
        self.flops_per_second = simulation_flop_rate(self.device)

    def stack(self, width, seq_len, batch, depth, *, passes=1) -> float:
        """Seconds of one simulated stack: ``batch`` sequences through ``depth`` blocks."""
        from remprop.theory import work_estimates as work

        return work.simulation_seconds(width, seq_len, batch, depth, passes=passes,
                                       flops_per_second=self.flops_per_second)

    def training(self, config) -> float:
        from ..training.work import training_seconds

        return training_seconds(config, device=self.device)


def _simulation_seconds(figure_id, s, rate, workers) -> float:
    """Seconds of the simulated (or trained) part of figure ``figure_id`` at sizes ``s`` (:func:`figures_seconds`)."""
    from remprop.theory import Architecture
    from remprop.theory import work_estimates as work

    if figure_id in _TRAINED:
        return sum(runs * rate.training(config) for config, runs in _training_runs(figure_id, s, rate.device))
    if figure_id == "1ab":
        return len(s.map_betas) * rate.stack(s.map_width, s.map_seq_len, 1, 1)
    if figure_id == "1c":
        cells = int(s.sweep_betas[2]) * int(s.sweep_alphas[2]) * s.sweep_seeds
        return cells * rate.stack(s.sweep_width, s.sweep_seq_len, s.sweep_sequences, s.sweep_depth) / max(workers, 1)
    if figure_id in ("1d", "1e"):
        depth = s.depth_1d if figure_id == "1d" else s.depth_1e
        steps = 2 * s.seeds * s.sequences * depth * _GRAM_DRAWS  # chain-layers of the theory
        chains = steps * (_GRAM_CHAIN_LAYER_SECONDS + work.flops_seconds(_GRAM_FLOPS_PER_T3 * float(s.seq_len) ** 3))
        return 2 * s.seeds * rate.stack(s.width, s.seq_len, s.sequences, depth) + chains
    if figure_id in ("2", "5"):
        points = 3 * s.betas_2 if figure_id == "2" else s.betas_5
        theory = _ENERGY_TABLE_SECONDS if figure_id == "2" else 0.0
        return theory + points * s.attention_seeds * rate.stack(s.attention_width, s.attention_seq_len,
                                                                s.attention_sequences, 1)
    if figure_id == "3c":  # forward and backward (3 passes) of one layer per (T, d), seed and beta, float64
        return sum(2 * s.gradient_seeds * s.gradient_betas * rate.stack(d, t, 1, 1, passes=3)
                   for t, d in s.gradient_sizes)
    if figure_id == "4":
        return 4 * s.ln_seeds * rate.stack(s.ln_width, s.ln_seq_len, s.ln_sequences, s.ln_depth)
    if figure_id == "7":
        one = rate.stack(s.spectrum_width, s.spectrum_seq_len, 1, 1) + work.flops_seconds(10.0 * s.spectrum_seq_len ** 3)
        return len(s.spectrum_betas) * s.spectrum_seeds * one
    if figure_id == "9":  # two tanh stacks at each factor, through the depth of simulate_9's edge_of_chaos_data()
        from remprop.diagrams.edge_of_chaos_figures import edge_of_chaos_data

        defaults = inspect.signature(edge_of_chaos_data).parameters
        runs = 2 * len(defaults["factors"].default) * s.eoc_seeds
        return runs * rate.stack(s.eoc_width, s.eoc_seq_len, 1, defaults["depth"].default)
    if figure_id == "12":  # a causal stack is probed twice; the theory walks T - 1 positions
        settings = 3
        return settings * (s.causal_seeds * rate.stack(s.causal_width, s.causal_seq_len, s.causal_sequences,
                                                        s.causal_depth, passes=2)
                           + work.run_seconds(Architecture(), s.causal_seq_len - 1, s.causal_depth))
    raise AssertionError(f"no estimate for figure {figure_id}")  # a new figure needs its estimate here


def figures_bytes(sizes=None, only=None, *, quick=False, simulate=None, workers=0) -> int:
    """Estimated peak memory (bytes) of :func:`~remprop.validation.experiments.paper_figures.make_figures`: the largest figure, as they run one at a time.

    The diagram of Fig. 1(c) (:func:`~remprop.theory.work_estimates.diagram_bytes`), each simulated
    stack's tensors (:func:`~remprop.theory.work_estimates.simulation_bytes`, float32; the sweep of
    Fig. 1(c) once per worker), the Gram chains of Figs. 1(d, e)
    (:func:`~remprop.theory.work_estimates.gram_theory_bytes`) and each training run
    (:func:`~remprop.validation.training.work.training_bytes`). Arguments as :func:`figures_seconds`.
    """
    from remprop.theory import work_estimates as work

    s = _chosen_sizes(sizes, quick)
    chosen = check_figure_ids(only)
    simulate = _torch_available() if simulate is None else bool(simulate)
    peak = work.diagram_bytes(s.diagram_points, s.diagram_points) if "1c" in chosen else 0
    if not simulate:
        return peak
    stacks = {"1ab": (s.map_width, s.map_seq_len, 1), "2": (s.attention_width, s.attention_seq_len,
                                                           s.attention_sequences),
              "5": (s.attention_width, s.attention_seq_len, s.attention_sequences),
              "1d": (s.width, s.seq_len, s.sequences), "1e": (s.width, s.seq_len, s.sequences),
              "4": (s.ln_width, s.ln_seq_len, s.ln_sequences), "7": (s.spectrum_width, s.spectrum_seq_len, 1),
              "9": (s.eoc_width, s.eoc_seq_len, 1), "12": (s.causal_width, s.causal_seq_len, s.causal_sequences)}
    stacks.update({"3c": (d, t, 1) for t, d in s.gradient_sizes[-1:]})
    for figure_id in chosen:
        if figure_id in stacks:
            peak = max(peak, work.simulation_bytes(*stacks[figure_id]))
        if figure_id == "1c":
            peak = max(peak, max(workers, 1) * work.simulation_bytes(s.sweep_width, s.sweep_seq_len, s.sweep_sequences))
        if figure_id in ("1d", "1e"):
            peak = max(peak, 8 * 2 * s.seeds * s.sequences * s.seq_len ** 2
                       + work.gram_theory_bytes(s.seq_len, max(s.depth_1d, s.depth_1e), _GRAM_DRAWS, sampled=True))
        if figure_id in _TRAINED:
            from ..training.work import training_bytes

            peak = max(peak, max(training_bytes(config) for config, _ in _training_runs(figure_id, s, None)))
    return int(peak)
