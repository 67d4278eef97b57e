"""Token-pair cosines of one text sequence, layer by layer: the Gram-matrix theory against a simulation.

:func:`pair_cosine_comparison` embeds one pydoc text window (:mod:`remprop.validation.text`,
the tables of :func:`~remprop.validation.inputs.embedding_tables`), pushes it through a
simulated stack, and reads the cosine of every token pair at the chosen layers. The
theory is :func:`remprop.theory.propagate_gram` started from the same input's Gram matrix
(docs/theory.md section 17). The pairs are split into repeated words (equal token ids) and
the rest, the split the structured state exists for; :func:`pair_cosine_figure` draws the
two distributions per layer with :func:`remprop.diagrams.gram_figures.plot_pair_cosines`.

Reference: issue 14 ("per-pair predictions a user can look at"); docs/validation.md.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import torch

from remprop.diagrams.gram_figures import plot_pair_cosines, repeated_pair_mask
from remprop.theory import Architecture, propagate_gram
from remprop.theory.checks import check_depth
from remprop.theory.gram_state import pair_cosines

from .backend import check_positive_int
from .inputs import embedding_tables
from .settings import SimulationSettings, check_simulation
from .simulator import SimulatedStack
from .text import pydoc_corpus

__all__ = ["PairCosines", "pair_cosine_comparison", "pair_cosine_figure"]


@dataclass(frozen=True)
class PairCosines:
    """Pair cosines of one sequence at a few layers, simulated and predicted.

    Attributes
    ----------
    measured, theory : dict of int -> ndarray
        Per layer, the cosines of the pairs ``i < j`` (``numpy.triu_indices`` order).
    repeated : ndarray of bool
        True for pairs of equal token ids.
    settings : dict
        Sizes, seed, sequence, ``simplex_distance`` of the input and the theory's draws.
    """

    measured: dict
    theory: dict
    repeated: np.ndarray
    settings: dict

    def means(self) -> dict:
        """Per layer and group ("repeated", "rest"): (measured mean, theory mean) of the pair cosines."""
        out = {}
        for layer in sorted(self.theory):
            for group, mask in (("repeated", self.repeated), ("rest", ~self.repeated)):
                if mask.any():
                    out[(layer, group)] = (float(self.measured[layer][mask].mean()),
                                           float(self.theory[layer][mask].mean()))
        return out


def pair_cosine_comparison(arch: Architecture | None = None, beta=0.5, depth=4, *, layers=None,
                           sim: SimulationSettings | None = None, seed=0, sequence=0, draws=8) -> PairCosines:
    """Simulate one embedded text window and predict its pair cosines with the Gram state.

    Parameters
    ----------
    arch : remprop.theory.Architecture, optional
        Default BERT defaults (post-LN). Its ``seq_len`` is set to ``sim.seq_len`` for the theory.
    beta : float
        Query/key scale.
    depth : int
        Blocks simulated and propagated.
    layers : sequence of int, optional
        Layers to compare (0 = input), default ``(1, depth // 2, depth)`` without repeats.
    sim : remprop.validation.SimulationSettings, optional
        Width d, tokens T, dtype and device of the simulation, and ``sequences``: the number of
        evenly spread corpus windows (:meth:`~remprop.validation.text.TextCorpus.windows`)
        ``sequence`` picks from (its seeds and inputs are not read: one text window, one
        initialisation). Default ``SimulationSettings(width=256, seq_len=128, sequences=8)``.
    seed : int
        Initialisation and embedding tables.
    sequence : int
        Which of the ``sim.sequences`` windows.
    draws : int
        Monte Carlo draws per attention layer of the theory.

    Returns
    -------
    PairCosines

    References
    ----------
    docs/theory.md section 17 (the Gram-matrix state).
    """
    arch = Architecture() if arch is None else arch
    sim = check_simulation(sim, width=256, seq_len=128, sequences=8)
    depth = check_depth(depth)
    width, seq_len, sequences, dtype = sim.width, sim.seq_len, sim.sequences, sim.dtype
    sequence = check_positive_int("sequence", sequence, 0)
    if sequence >= sequences:
        raise ValueError(f"sequence must be < sequences = {sequences}, got {sequence}")
    layers = sorted({1, max(1, depth // 2), depth} if layers is None else {int(layer) for layer in layers})
    if layers[0] < 0 or layers[-1] > depth:
        raise ValueError(f"layers must lie in 0..depth = {depth}, got {layers}")
    arch = replace(arch, seq_len=seq_len) if arch.seq_len != seq_len else arch
    stack = SimulatedStack(arch, beta, depth, sim=sim, seed=seed)
    corpus = pydoc_corpus()
    ids = corpus.windows(sequences, seq_len)[sequence]
    word, position = embedding_tables(corpus.tokenizer.vocab_size, seq_len, width, seed=seed, dtype=dtype,
                                      device=stack.device)
    x = (word[torch.as_tensor(ids, device=stack.device)] + position)[None]
    hidden = {}

    def observe(layer, h, probs):
        if layer in layers or layer == 0:
            g = h[0].to(torch.float64)
            hidden[layer] = (g @ g.T / g.shape[-1]).cpu().numpy()

    with torch.no_grad():
        stack.forward(x, observe=observe)
    trajectory = propagate_gram(arch, beta, hidden[0], depth, draws=draws, seed=seed, keep_layers=layers)
    settings = {"arch": arch.to_dict(), "beta": float(beta), "depth": depth, "width": width, "seq_len": seq_len,
                "seed": seed, "sequence": sequence, "sequences": sequences, "draws": draws,
                "simplex_distance": trajectory.settings.get("simplex_distance")}
    return PairCosines(measured={layer: pair_cosines(hidden[layer]) for layer in layers},
                       theory={layer: trajectory.cosines(layer) for layer in layers},
                       repeated=repeated_pair_mask(np.asarray(ids, dtype=np.int64)), settings=settings)


def pair_cosine_figure(result: PairCosines, path=None, *, bins=40):
    """Draw :func:`remprop.diagrams.gram_figures.plot_pair_cosines` of ``result``; save to ``path`` if given.

    Returns the matplotlib Figure.
    """
    s = result.settings
    title = (f"pair cosines, {s['arch']['norm']}-LN, beta = {s['beta']:g}, d = {s['width']}, T = {s['seq_len']} "
             f"(simplex distance of the input {s['simplex_distance']:.3f})")
    axes = plot_pair_cosines(result.theory, result.measured, result.repeated, bins=bins, title=title)
    figure = axes[0].figure
    if path is not None:
        figure.savefig(path, dpi=120, bbox_inches="tight")
    return figure
