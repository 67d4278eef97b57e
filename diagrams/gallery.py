"""Write every theory figure, with the data it shows, into one folder."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from remprop.theory import Architecture

from .curves import attention_phase_data, layernorm_placement_data
from .figures import attention_phase_figure, layernorm_placement_figure, trainability_figure
from .trainability import trainability_diagram

__all__ = ["make_theory_figures", "BERT_DIAGRAM"]

#: The reference diagram: 60-layer post-LN BERT (defaults of Architecture), collapse
#: threshold 0.99, beta in [0.05, 3], alpha_sa in [0, 3].
BERT_DIAGRAM = dict(depth=60, threshold=0.99, beta_range=(0.05, 3.0), alpha_range=(0.0, 3.0),
                    points=200, quick_points=60)
_DPI = 150


def make_theory_figures(out_dir, *, quick=False, progress=False):
    """Write the theory figures as PNG plus their data.

    * ``trainability_bert_L60.{png,npz,json}`` -- the 60-layer post-LN BERT trainability
      diagram (200 x 200 grid, 60 x 60 with ``quick``), see
      :meth:`TrainabilityDiagram.save` for the data files;
    * ``attention_phase.{png,npz}`` -- one attention layer (output cosine over beta and
      input cosine, Y2 against beta);
    * ``layernorm_placement.{png,json}`` -- mean cosine over 100 layers for the four
      LayerNorm placements.

    Parameters
    ----------
    out_dir : str or Path
        Folder to write into (created if missing).
    quick : bool
        Coarser grids (for tests and previews).
    progress : bool
        Progress bar while computing the diagram.

    Returns
    -------
    list of Path
        Every file written.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Figs. 1(c), 2 and 4.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []

    n = BERT_DIAGRAM["quick_points"] if quick else BERT_DIAGRAM["points"]
    diagram = trainability_diagram(
        Architecture(), np.linspace(*BERT_DIAGRAM["beta_range"], n), np.linspace(*BERT_DIAGRAM["alpha_range"], n),
        BERT_DIAGRAM["depth"], BERT_DIAGRAM["threshold"], progress=progress)
    base = out / f"trainability_bert_L{BERT_DIAGRAM['depth']}"
    written += _save_figure(trainability_figure(diagram), base)
    written += list(diagram.save(base))

    points = 80 if quick else 300
    data = attention_phase_data(np.linspace(0.05, 4.0, points), np.linspace(0.0, 0.99, points))
    base = out / "attention_phase"
    written += _save_figure(attention_phase_figure(data=data), base)
    np.savez(base.with_suffix(".npz"), **{k: np.asarray(v) for k, v in data.items()})
    written.append(base.with_suffix(".npz"))

    data = layernorm_placement_data(100)
    base = out / "layernorm_placement"
    written += _save_figure(layernorm_placement_figure(data=data), base)
    with open(base.with_suffix(".json"), "w", encoding="utf-8") as handle:
        json.dump({"layers": data["layers"].tolist(),
                   "rho": {k: v.tolist() for k, v in data["rho"].items()},
                   "q": {k: v.tolist() for k, v in data["q"].items()},
                   "settings": data["settings"]}, handle, indent=1, allow_nan=False)
    written.append(base.with_suffix(".json"))
    return written


def _save_figure(figure, base):
    path = base.with_suffix(".png")
    figure.savefig(path, dpi=_DPI)
    return [path]
