r"""The registry of the paper's reference figures, their sizes, and their theory parts.

Every reference figure of docs/theory.md section 9 has one row in :data:`PAPER_FIGURES`:
its description, the function that draws its theory part (here, no torch) and the
dotted name of the function that simulates it (in :mod:`remprop.validation`, resolved
only when a figure set is drawn with the validation extra). The theory parts write
``fig<id>_theory_*``; the simulated parts ``fig<id>_*`` with theory and simulation
together.

* :func:`make_theory_figures` -- every theory part, here (no torch);
* :func:`remprop.validation.paper_figures.make_figures` -- every figure, theory and
  simulation, plus an index ``figures.json`` (``remprop figures``).

:data:`SIZES` holds the two presets of :class:`FigureSizes`: ``"full"`` (the paper's
sizes: d = 720, T = 512, 10 initialisations x 10 sequences for Fig. 1(d, e)) and
``"quick"`` (d = T = 128, two seeds; under a minute on two cores).

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
                         causal_depth=12, causal_seeds=1, causal_sequences=2, causal_last=20),
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
    from .figure_data import layernorm_placement_data
    from .theory_figures import layernorm_placement_figure

    data = layernorm_placement_data(sizes.ln_depth)
    record = {"layers": data["layers"], "rho": data["rho"], "q": data["q"], "settings": data["settings"]}
    return FigureResult("fig4_theory_layernorm_placement", layernorm_placement_figure(data=data),
                        record).paths(out)


def theory_9(out, sizes, progress=False) -> list:
    """Fig. 9, theory: tanh stacks on both sides of the edge of chaos (PNG, json)."""
    from .edge_of_chaos_figures import edge_of_chaos_data, edge_of_chaos_figure

    data = edge_of_chaos_data()
    return FigureResult("fig9_theory_edge_of_chaos", edge_of_chaos_figure(data),
                        {"figure": "figure_9", "theory": data}).paths(out)


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


_PARTS = "remprop.validation.paper_figures"
#: (id, theory part, description) of each figure; the simulated part of figure ``id`` is
#: ``remprop.validation.paper_figures.simulate_<id>``.
_ROWS = (
    ("1c", theory_1c, "trainability diagram, 60-layer post-LN BERT: theory, and measured vs predicted"),
    ("1d", None, "per-layer cosine, theory vs simulated BERT, beta = 0.5, 60 layers"),
    ("1e", None, "per-layer cosine, theory vs simulated BERT, beta = 3 (entropy collapse), 12 layers"),
    ("2", theory_2, "one attention layer: output cosine over beta and input cosine, theory and simulation"),
    ("3c", None, "query gradient norm against beta, collapsed over (T, d): theory and autograd"),
    ("4", theory_4, "cosine over 100 layers for post-LN, pre-LN and their gain-controlled versions"),
    ("5", None, "participation ratio Y2 against beta, theory and simulation"),
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

    The files are those :func:`remprop.validation.paper_figures.make_figures` writes for
    the theory parts: ``fig1c_theory_bert_L60.{png,npz,json}`` (the 60-layer post-LN BERT
    trainability diagram, 200 x 200 grid, 60 x 60 with ``quick``; see
    :meth:`~remprop.diagrams.TrainabilityDiagram.save`), ``fig2_theory_attention_phase.{png,npz}`` (one
    attention layer), ``fig4_theory_layernorm_placement.{png,json}`` (four LayerNorm
    placements over 100 layers) and ``fig9_theory_edge_of_chaos.{png,json}``.

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
    Giorlandino & Goldt, arXiv 2505.24333, Figs. 1(c), 2, 4 and 9.
    """
    sizes = SIZES["quick" if quick else "full"] if sizes is None else sizes
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for figure_id in check_figure_ids(only):
        if PAPER_FIGURES[figure_id].theory is not None:
            written += PAPER_FIGURES[figure_id].theory(out, sizes, progress)
    return written
