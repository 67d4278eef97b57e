r"""The registry of the paper's reference figures, their sizes, and their theory parts.

Every reference figure of docs/theory.md section 9 has one row in :data:`PAPER_FIGURES`:
its description, the function that draws its theory part (here, no torch) and the
dotted name of the function that simulates it (in :mod:`remprop.validation`, resolved
only when a figure set is drawn with the validation extra). The theory parts write
``fig<id>_theory_*``; the simulated parts ``fig<id>_*`` with theory and simulation
together.

* :func:`make_theory_figures` -- every theory part, here (no torch);
* :func:`remprop.validation.experiments.paper_figures.make_figures` -- every figure, theory and
  simulation, plus an index ``figures.json`` (``remprop figures``).

:data:`SIZES` holds the two presets of :class:`FigureSizes`: ``"full"`` (the paper's
sizes: d = 720, T = 512, 10 initialisations x 10 sequences for Fig. 1(d, e)) and
``"quick"`` (d = T = 128, two seeds; the training figures 1(f), 3, 6 and 8 at d = T = 32,
300 steps, three seeds: 1.5 to 3.5 minutes each on one shared core, seconds once their
runs are cached; docs/training.md).

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np

from remprop._json import to_jsonable
from remprop.theory import Architecture

from .trainability import trainability_diagram

__all__ = ["PaperFigure", "PAPER_FIGURES", "FigureSizes", "SIZES", "BERT_DIAGRAM", "FigureResult",
           "make_theory_figures", "check_figure_ids"]

#: The reference diagram of Fig. 1(c): 60-layer post-LN BERT (defaults of Architecture),
#: collapse threshold 0.99, beta in [0.05, 3], alpha_sa in [0, 3].
BERT_DIAGRAM = dict(depth=60, threshold=0.99, beta_range=(0.05, 3.0), alpha_range=(0.0, 3.0))
_DPI = 150


@dataclass(frozen=True)
class FigureSizes:
    """Sizes of the theory grids and of the simulations behind the figures.

    Attributes
    ----------
    width, seq_len, seeds, sequences : int
        Fig. 1(d, e): model width d, tokens T, initialisations, sequences per seed.
    depth_1d, depth_1e : int
        Blocks of Fig. 1(d) and 1(e) (paper: 60 and 12).
    attention_width, attention_seq_len, attention_seeds, attention_sequences : int
        Figs. 2 and 5 (one attention layer).
    betas_2, betas_5 : int
        Number of simulated betas in Figs. 2 and 5.
    ln_width, ln_seq_len, ln_seeds, ln_sequences, ln_depth : int
        Fig. 4.
    diagram_points : int
        Grid points per axis of the theory diagram of Fig. 1(c) (and, 80 or fewer, the
        coarse 80-point grid of the theory part of Fig. 2; else 300 points).
    sweep_width, sweep_seq_len, sweep_seeds, sweep_sequences, sweep_depth : int
        The simulated sweep of Fig. 1(c).
    sweep_betas, sweep_alphas : tuple
        ``(start, stop, count)`` of its grid axes.
    eoc_width, eoc_seq_len, eoc_seeds : int
        Fig. 9 (tanh stacks, one sequence per seed).
    gradient_sizes, gradient_seeds, gradient_betas : tuple, int, int
        Fig. 3(c): the (T, d) pairs, seeds per point and number of betas in [0.05, 3].
    causal_width, causal_seq_len, causal_depth, causal_seeds, causal_sequences, causal_last : int
        Fig. 12 (paper: T = 512, 50 layers, last 50 tokens).
    map_width, map_seq_len : int
        Fig. 1(a, b): one attention matrix at ``map_betas`` (a small and a large beta).
    spectrum_width, spectrum_seq_len, spectrum_seeds : int
        Fig. 7: attention matrices whose eigenvalues are computed, per beta of ``spectrum_betas``.
    train_width, train_seq_len, train_batch_size, train_steps, train_vocab_size, train_seeds, train_eval_batches : int
        Every training run of Figs. 1(f), 3, 6 and 8 (:mod:`remprop.validation.training.paper_runs`):
        width d, tokens T, sequences per step, optimiser steps, BPE vocabulary, seeds per
        setting, held-out batches of the test loss.
    train_lr : float
        AdamW peak learning rate of Figs. 1(f) and 8's reference (paper: 1e-4).
    depth_1f : tuple
        Fig. 1(f): ``(deep, shallow)`` blocks (paper: 60 for trainable / rank collapse, 12 for
        entropy collapse).
    alphas_1f_trainable, alphas_1f_rank, betas_1f_entropy : tuple
        Fig. 1(f): the two initialisations of each phase.
    betas_3 : tuple
        Fig. 3: ``(start, stop, count)`` of the betas of the one-layer, one-head runs.
    lr_3, lr_6 : float
        Learning rates of Figs. 3 and 6 (paper: 5e-4).
    depth_6, width_6 : int
        Fig. 6: blocks and width (paper: 30 and 480).
    alphas_6 : tuple
        Fig. 6: skip strengths at which softmax and gain-controlled attention are compared.
    depth_8, beta_8, lrs_8 : int, float, tuple
        Fig. 8: blocks, the beta above beta_c, the learning rates.
    """

    width: int = 720
    seq_len: int = 512
    seeds: int = 10
    sequences: int = 10
    depth_1d: int = 60
    depth_1e: int = 12
    attention_width: int = 720
    attention_seq_len: int = 512
    attention_seeds: int = 4
    attention_sequences: int = 4
    betas_2: int = 16
    betas_5: int = 25
    ln_width: int = 720
    ln_seq_len: int = 512
    ln_seeds: int = 4
    ln_sequences: int = 2
    ln_depth: int = 100
    diagram_points: int = 200
    sweep_width: int = 256
    sweep_seq_len: int = 256
    sweep_seeds: int = 2
    sweep_sequences: int = 2
    sweep_depth: int = 60
    sweep_betas: tuple = (0.1, 2.6, 14)
    sweep_alphas: tuple = (0.6, 1.8, 13)
    eoc_width: int = 512
    eoc_seq_len: int = 64
    eoc_seeds: int = 4
    gradient_sizes: tuple = ((256, 128), (256, 256), (1024, 128), (1024, 256))
    gradient_seeds: int = 3
    gradient_betas: int = 14
    causal_width: int = 720
    causal_seq_len: int = 512
    causal_depth: int = 50
    causal_seeds: int = 2
    causal_sequences: int = 2
    causal_last: int = 50
    map_width: int = 720
    map_seq_len: int = 512
    map_betas: tuple = (0.5, 3.0)
    spectrum_width: int = 720
    spectrum_seq_len: int = 512
    spectrum_seeds: int = 4
    spectrum_betas: tuple = (0.5, 1.0, 2.0, 3.0)
    train_width: int = 768
    train_seq_len: int = 128
    train_batch_size: int = 64
    train_steps: int = 2000
    train_vocab_size: int = 4096
    train_seeds: int = 3
    train_eval_batches: int = 4
    train_lr: float = 1e-4
    depth_1f: tuple = (60, 12)
    alphas_1f_trainable: tuple = (1.5, 2.0)
    alphas_1f_rank: tuple = (0.3, 0.6)
    betas_1f_entropy: tuple = (2.0, 3.0)
    betas_3: tuple = (0.25, 4.0, 16)
    lr_3: float = 5e-4
    depth_6: int = 30
    width_6: int = 480
    lr_6: float = 5e-4
    alphas_6: tuple = (0.5, 1.0)
    depth_8: int = 12
    beta_8: float = 3.0
    lrs_8: tuple = (1e-4, 3e-5, 1e-5)

    def replace(self, **changes) -> "FigureSizes":
        return dataclasses.replace(self, **changes)

    def preset(self) -> str:
        """``"full"`` or ``"quick"`` when these are one of :data:`~remprop.diagrams.paper_figures.SIZES`, else ``"custom"``."""
        return next((name for name, sizes in SIZES.items() if sizes == self), "custom")


#: Presets: the paper's sizes, and small ones (d = T = 128, two seeds).
SIZES = {
    "full": FigureSizes(),
    "quick": FigureSizes(width=128, seq_len=128, seeds=2, sequences=4, attention_width=128, attention_seq_len=128,
                         attention_seeds=2, attention_sequences=4, betas_2=10, betas_5=13, ln_width=128,
                         ln_seq_len=128, ln_seeds=2, ln_sequences=2, diagram_points=60, sweep_width=128,
                         sweep_seq_len=128,
                         sweep_seeds=2, sweep_sequences=2, sweep_betas=(0.2, 2.4, 8), sweep_alphas=(0.8, 1.6, 9),
                         eoc_width=128, eoc_seq_len=32, eoc_seeds=2, gradient_sizes=((128, 64), (256, 64)),
                         gradient_seeds=2, gradient_betas=8, causal_width=128, causal_seq_len=128,
                         causal_depth=12, causal_seeds=1, causal_sequences=2, causal_last=20, map_width=128,
                         map_seq_len=128, spectrum_width=128, spectrum_seq_len=128, spectrum_seeds=2,
                         train_width=32, train_seq_len=32, train_batch_size=16, train_steps=300,
                         train_vocab_size=1024, train_seeds=3, train_eval_batches=2, train_lr=3e-3,
                         depth_1f=(10, 4), alphas_1f_trainable=(1.0, 1.5), alphas_1f_rank=(0.1, 0.3),
                         betas_1f_entropy=(3.0, 6.0), betas_3=(0.25, 4.0, 8), lr_3=3e-3, depth_6=10, width_6=32,
                         lr_6=3e-3, alphas_6=(0.2, 1.0), depth_8=4, beta_8=4.0, lrs_8=(3e-3, 1e-3, 3e-4)),
}


@dataclass
class FigureResult:
    """A drawn figure and the numbers behind it.

    Attributes
    ----------
    name : str
        File stem.
    figure : matplotlib.figure.Figure
    data : dict
        JSON-ready data (settings, theory, measured means and stds, errors, timings).
    """

    name: str
    figure: object
    data: dict

    def save(self, out_dir) -> dict:
        """Write ``<out_dir>/<name>.png`` and ``.json``; return their paths."""
        os.makedirs(out_dir, exist_ok=True)
        png = os.path.join(out_dir, f"{self.name}.png")
        js = os.path.join(out_dir, f"{self.name}.json")
        self.figure.savefig(png, dpi=_DPI, bbox_inches="tight")
        with open(js, "w", encoding="utf-8") as fh:
            json.dump(to_jsonable(self.data), fh, indent=1, allow_nan=False)
        return {"png": png, "json": js}

    def paths(self, out_dir) -> list:
        """:meth:`save`, returning ``[png, json]`` as Paths."""
        saved = self.save(out_dir)
        return [Path(saved["png"]), Path(saved["json"])]


# -- the theory parts: (out, sizes, progress) -> list of Paths written, PNG first -----------------
def theory_1c(out, sizes, progress=False) -> list:
    """Fig. 1(c), theory: the 60-layer post-LN BERT trainability diagram (PNG, npz, json)."""
    from .theory_figures import trainability_figure

    points = sizes.diagram_points
    diagram = trainability_diagram(Architecture(), np.linspace(*BERT_DIAGRAM["beta_range"], points),
                                   np.linspace(*BERT_DIAGRAM["alpha_range"], points), BERT_DIAGRAM["depth"],
                                   BERT_DIAGRAM["threshold"], progress=progress)
    base = Path(out) / f"fig1c_theory_bert_L{BERT_DIAGRAM['depth']}"
    png = base.with_suffix(".png")
    trainability_figure(diagram).savefig(png, dpi=_DPI, bbox_inches="tight")
    return [png, *(Path(p) for p in diagram.save(base))]


def theory_2(out, sizes, progress=False) -> list:
    """Fig. 2 (and the Y2 panel of Fig. 5), theory: one attention layer (PNG, npz)."""
    from .figure_data import attention_phase_data
    from .theory_figures import attention_phase_figure

    points = 80 if sizes.diagram_points <= 80 else 300
    data = attention_phase_data(np.linspace(0.05, 4.0, points), np.linspace(0.0, 0.99, points))
    base = Path(out) / "fig2_theory_attention_phase"
    attention_phase_figure(data=data).savefig(base.with_suffix(".png"), dpi=_DPI, bbox_inches="tight")
    np.savez(base.with_suffix(".npz"), **{k: np.asarray(v) for k, v in data.items()})
    return [base.with_suffix(".png"), base.with_suffix(".npz")]


def theory_4(out, sizes, progress=False) -> list:
    """Fig. 4, theory: cosine over depth for the four LayerNorm placements (PNG, json)."""
    from .figure_data import LAYERNORM_REFERENCE_RUN, layernorm_placement_data
    from .theory_figures import layernorm_placement_figure

    data = layernorm_placement_data(LAYERNORM_REFERENCE_RUN.replace(depth=sizes.ln_depth))
    record = {"layers": data["layers"], "rho": data["rho"], "q": data["q"], "settings": data["settings"]}
    return FigureResult("fig4_theory_layernorm_placement", layernorm_placement_figure(data=data),
                        record).paths(out)


def theory_9(out, sizes, progress=False) -> list:
    """Fig. 9, theory: tanh stacks on both sides of the edge of chaos (PNG, json)."""
    from .edge_of_chaos_figures import edge_of_chaos_data, edge_of_chaos_figure

    data = edge_of_chaos_data()
    return FigureResult("fig9_theory_edge_of_chaos", edge_of_chaos_figure(data),
                        {"figure": "figure_9", "theory": data}).paths(out)


def theory_7(out, sizes, progress=False) -> list:
    """Fig. 7, theory: the predicted bulk radius of the attention spectrum against beta (PNG, json)."""
    from .attention_figures import bulk_radius_data, bulk_radius_figure

    data = bulk_radius_data(seq_lens=sorted({64, 256, 1024, sizes.spectrum_seq_len}))
    return FigureResult("fig7_theory_spectrum_radius", bulk_radius_figure(data),
                        {"figure": "figure_7", "theory": data}).paths(out)


@dataclass(frozen=True)
class PaperFigure:
    """One reference figure.

    A figure has a theory part, a simulated part or both; ``remprop figures`` draws
    both where it can and records in its index what it left out.

    Attributes
    ----------
    description : str
    theory : callable or None
        ``theory(out, sizes, progress) -> list of Path``: the theory part, drawn without torch.
    simulation : str or None
        Dotted name of the simulated part in :mod:`remprop.validation`
        (``part(context) -> dict`` with ``files`` and optional ``notes``).
    """

    description: str
    theory: Optional[Callable] = None
    simulation: Optional[str] = None


_PARTS = "remprop.validation.experiments.paper_figures"
#: (id, theory part, description) of each figure; the simulated part of figure ``id`` is
#: ``remprop.validation.experiments.paper_figures.simulate_<id>``.
_ROWS = (
    ("1ab", None, "attention maps of one layer at a small and a large beta, Y2 theory vs measured"),
    ("1c", theory_1c, "trainability diagram, 60-layer post-LN BERT: theory, and measured vs predicted"),
    ("1d", None, "per-layer cosine, theory vs simulated BERT, beta = 0.5, 60 layers"),
    ("1e", None, "per-layer cosine, theory vs simulated BERT, beta = 3 (entropy collapse), 12 layers"),
    ("1f", None, "masked-LM test loss over training, two initialisations per phase (trainable, rank, entropy)"),
    ("2", theory_2, "one attention layer: output cosine over beta and input cosine, theory and simulation"),
    ("3", None, "one layer, one head trained at several beta: final test loss against beta, beta_c marked"),
    ("3c", None, "query gradient norm against beta, collapsed over (T, d): theory and autograd"),
    ("4", theory_4, "cosine over 100 layers for post-LN, pre-LN and their gain-controlled versions"),
    ("5", None, "participation ratio Y2 against beta, theory and simulation"),
    ("6", None, "deep post-LN stack trained with softmax and with gain-controlled attention"),
    ("7", theory_7, "eigenvalues of the attention matrix at init: bulk radius, theory and simulation"),
    ("8", None, "entropy-collapsed stack against a trainable one at several learning rates"),
    ("9", theory_9, "tanh MLP, infinite-depth ordered/chaotic transition (edge of chaos)"),
    ("12", None, "causal (decoder) stack: cosine of the last 50 tokens over depth, theory and simulation"),
)
#: Figure id -> the figure (docs/theory.md section 9), in the paper's order.
PAPER_FIGURES = {figure_id: PaperFigure(description, theory, f"{_PARTS}.simulate_{figure_id}")
                 for figure_id, theory, description in _ROWS}


def check_figure_ids(only) -> list:
    """The figure ids of ``only`` (None: all; a comma-separated string or an iterable), checked."""
    if only is None:
        return list(PAPER_FIGURES)
    if isinstance(only, str):
        only = [part.strip() for part in only.split(",") if part.strip()]
    chosen = []
    for figure_id in only:
        figure_id = str(figure_id).strip().lower()
        if figure_id not in PAPER_FIGURES:
            raise ValueError(f"only: unknown figure {figure_id!r}; supported: {', '.join(PAPER_FIGURES)}")
        if figure_id not in chosen:
            chosen.append(figure_id)
    if not chosen:
        raise ValueError("only: name at least one figure")
    return chosen


def make_theory_figures(out_dir, *, quick=False, sizes=None, only=None, progress=False) -> list:
    """Write the theory part of every reference figure (PNG plus data); no torch needed.

    The files are those :func:`remprop.validation.experiments.paper_figures.make_figures` writes for
    the theory parts: ``fig1c_theory_bert_L60.{png,npz,json}`` (the 60-layer post-LN BERT
    trainability diagram, 200 x 200 grid, 60 x 60 with ``quick``; see
    :meth:`~remprop.diagrams.TrainabilityDiagram.save`), ``fig2_theory_attention_phase.{png,npz}`` (one
    attention layer), ``fig4_theory_layernorm_placement.{png,json}`` (four LayerNorm
    placements over 100 layers), ``fig7_theory_spectrum_radius.{png,json}`` (the bulk radius
    of the attention spectrum against beta) and ``fig9_theory_edge_of_chaos.{png,json}``.

    Parameters
    ----------
    out_dir : str or Path
        Folder to write into (created if missing).
    quick : bool
        The ``"quick"`` sizes of :data:`SIZES` (coarser grids, for tests and previews).
    sizes : FigureSizes, optional
        Overrides the preset chosen by ``quick``.
    only : str or iterable of str, optional
        Figure ids (figures without a theory part write nothing).
    progress : bool
        Progress bar while computing the diagram.

    Returns
    -------
    list of Path
        Every file written.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Figs. 1(c), 2, 4, 7 and 9.
    """
    sizes = SIZES["quick" if quick else "full"] if sizes is None else sizes
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for figure_id in check_figure_ids(only):
        if PAPER_FIGURES[figure_id].theory is not None:
            written += PAPER_FIGURES[figure_id].theory(out, sizes, progress)
    return written
