r"""Measured trainability diagrams: simulated cells classified as the theory classifies.

A sweep (:mod:`remprop.validation.experiments.sweep`) leaves, per cell ``(alpha_sa, beta)``, the
per-layer sample means of the token statistics and each sample's final cosine. The
measured phase of a cell follows the theory's rule (:func:`remprop.diagrams.classify_phases`
and :meth:`remprop.theory.Architecture.beta_critical`) with measured numbers in
place of predicted ones:

* **rank collapse**: the measured final mean token cosine -- the mean over the
  ``seeds x sequences`` samples of the mean pairwise cosine after the last block -- is
  above the threshold (a ``nan``, i.e. a vanished stream, counts as collapsed);
* **entropy collapse**: ``beta`` is above the critical beta
  :math:`\beta_c = \sqrt{2 / (\bar q (\bar q - \bar p))}` computed from the *measured*
  attention input -- for post-LN the first attention layer's, i.e. the measured input
  ``(q, p)`` of the stack; for pre-LN and no-LN the smallest over the layers, from the
  measured block inputs (pre-LN: after the LayerNorm map ``(1, p/q)``), exactly as the
  theory takes the smallest over its own trajectory;
* **trainable** otherwise; a cell meeting both criteria is entropy-collapsed.

The prediction is :func:`remprop.diagrams.trainability_diagram` on the same grid, started
from the measured input state, with the finite-T participation ratio at the simulated T
(``theory="finite-T"``, the default) or
the ``T -> infinity`` one (``theory="asymptotic"``). The agreement is the fraction of
cells whose measured phase equals the predicted one.

This module needs no torch (the records are plain JSON).

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333, Fig. 1(c); docs/theory.md section 6.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from remprop.diagrams import PHASE_LABELS, TrainabilityDiagram, classify_phases, trainability_diagram
from remprop.diagrams.grid_result import CELL_AXES, ComparedView, GridResult, cell_array, check_arrays
from remprop.theory import Architecture
from remprop.theory.checks import check_choice

from .cell_store import MANIFEST_NAME
from .sweep import SweepSpec, cell_key, load_records

__all__ = ["MeasuredDiagram", "measured_beta_critical", "THEORIES", "resolve_theory"]

#: Theories a measured diagram can be set against.
THEORIES = ("auto", "finite-T", "asymptotic")
#: The arrays of a measured grid and their axes.
_ARRAYS = {"phase": CELL_AXES, "cosine_final": CELL_AXES, "cosine_final_std": CELL_AXES,
           "beta_critical_cells": CELL_AXES, "layer_cosine": CELL_AXES + ("layer",),
           "layer_y2": CELL_AXES + ("block",)}
#: The arrays its JSON summary lists (the per-layer arrays stay in the npz).
_SUMMARY = ("phase", "cosine_final", "cosine_final_std", "beta_critical_cells")
_RULES = {
    "rank_collapse": "measured final mean token cosine (mean over samples) > threshold",
    "entropy_collapse": "beta > critical beta of the measured attention input: first layer "
                        "(post-LN), smallest over layers (pre-LN, no LN)",
    "both": "entropy collapse",
}


def resolve_theory(theory) -> str:
    """``"auto"`` -> ``"finite-T"``; checks the name."""
    check_choice("theory", theory, THEORIES)
    return "finite-T" if theory == "auto" else theory


def theory_architecture(arch: Architecture, theory: str, seq_len: int) -> Architecture:
    """``arch`` with the attention of the chosen theory (finite T = ``seq_len``, or T -> infinity)."""
    return arch.replace(seq_len=seq_len if resolve_theory(theory) == "finite-T" else None)


def measured_beta_critical(arch: Architecture, layer_q, layer_p):
    r"""Critical beta that decides entropy collapse, from measured block inputs.

    .. math:: \beta_c^{(l)} = \sqrt{\frac{2}{q_l (q_l - p_l)}}

    on the attention input of block ``l`` (:meth:`~remprop.theory.Architecture.attention_input`: the block
    input, or its LayerNorm ``(1, p_l / q_l)`` for pre-LN), reduced by the theory's own rule
    (:meth:`~remprop.theory.Architecture.beta_critical`: the first layer for post-LN, the smallest over the
    layers otherwise) onto the axis of the model's beta.

    Parameters
    ----------
    arch : Architecture
        Supplies the block order and the heads' factor.
    layer_q, layer_p : array_like, shape (..., depth + 1)
        Measured q and p of the input (column 0) and of every block output.

    Returns
    -------
    ndarray, shape (...)

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (REM critical temperature); docs/theory.md sections 3, 6.
    """
    q = np.asarray(layer_q, dtype=float)[..., :-1]
    p = np.asarray(layer_p, dtype=float)[..., :-1]
    return np.asarray(arch.beta_critical(arch.block_beta_critical(q, p)), dtype=float)


def _as_float(values):
    return np.array([float(v) for v in values], dtype=float)


@dataclass(frozen=True, eq=False)
class MeasuredDiagram(ComparedView):
    """Measured phases of a simulated sweep beside the theory's.

    A view on a :class:`~remprop.diagrams.grid_result.GridResult` of kind ``"measured"``
    whose ``predicted`` is the theory's grid. Arrays over the grid have axes
    ``(alpha, beta)`` like :class:`~remprop.diagrams.TrainabilityDiagram`.

    Attributes
    ----------
    grid : GridResult
        The numbers, settings (the sweep's manifest, the theory), files.
    spec : SweepSpec
    predicted : TrainabilityDiagram
        The theory on the same grid.
    theory : str
        ``"finite-T"`` or ``"asymptotic"``: the theory of ``predicted``.
    cosine_final, cosine_final_std : ndarray
        Mean and standard deviation (ddof 1) over samples of the final mean token cosine.
    beta_critical_cells : ndarray
        Measured critical beta of each cell (see :func:`measured_beta_critical`).
    phase : ndarray of int8
        Measured phase codes.
    layer_cosine : ndarray, shape (alphas, betas, depth + 1)
        Mean token cosine after every block (column 0: input).
    layer_y2 : ndarray, shape (alphas, betas, depth)
        Mean participation ratio of every attention layer.
    input_q, input_rho : float
        Measured input state (mean over cells and samples); the theory starts there.
    devices : tuple of str
        Devices the cells ran on.
    """

    grid: GridResult
    spec: SweepSpec
    predicted: TrainabilityDiagram

    KIND = "measured"

    theory = property(lambda self: self.grid.settings["theory"], doc="The theory of ``predicted``.")
    cosine_final = cell_array("cosine_final", "Mean over samples of the final mean token cosine, per cell.")
    cosine_final_std = cell_array("cosine_final_std", "Its standard deviation over samples (ddof 1).")
    beta_critical_cells = cell_array("beta_critical_cells", "Measured critical beta of each cell.")
    layer_cosine = cell_array("layer_cosine", "Mean token cosine after every block (column 0: input).")
    layer_y2 = cell_array("layer_y2", "Mean participation ratio of every attention layer.")
    input_q = property(lambda self: float(self.grid.values["input_q"]), doc="Measured input mean squared norm.")
    input_rho = property(lambda self: float(self.grid.values["input_rho"]), doc="Measured input mean cosine.")
    devices = property(lambda self: tuple(self.grid.provenance.get("devices", ())), doc="Devices of the cells.")

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_records(cls, spec: SweepSpec, records: dict, theory="auto") -> "MeasuredDiagram":
        """Classify the cell records of a complete sweep (see the module docstring)."""
        theory = resolve_theory(theory)
        n_alpha, n_beta = spec.shape
        missing = [cell_key(a, b) for a, b in spec.cells() if cell_key(a, b) not in records]
        if missing:
            raise ValueError(f"records: {len(missing)} of {n_alpha * n_beta} cells are missing "
                             f"(first: {missing[0]})")
        get = lambda name: np.array([[_as_float(records[cell_key(a, b)]["result"][name])  # noqa: E731
                                      for b in range(n_beta)] for a in range(n_alpha)])
        layer_q, layer_p, layer_cosine, layer_y2 = get("layer_q"), get("layer_p"), get("layer_cosine"), get("layer_y2")
        finals = get("final_cosine")
        cosine_final = finals.mean(axis=-1)
        ddof = 1 if finals.shape[-1] > 1 else 0
        cosine_final_std = finals.std(axis=-1, ddof=ddof)
        beta_c = measured_beta_critical(spec.arch, layer_q, layer_p)
        betas = np.asarray(spec.betas)
        phase = classify_phases(betas[None, :], beta_c, cosine_final, spec.threshold)
        input_q = float(layer_q[..., 0].mean())
        input_rho = float(np.clip(layer_p[..., 0].mean() / input_q, -1.0, 1.0))
        predicted = trainability_diagram(theory_architecture(spec.arch, theory, spec.seq_len), betas,
                                         np.asarray(spec.alphas), spec.depth, spec.threshold, q0=input_q,
                                         rho0=input_rho)
        devices = sorted({str(r.get("run", {}).get("device", "?")) for r in records.values()})
        arrays = dict(phase=phase, cosine_final=cosine_final, cosine_final_std=cosine_final_std,
                      beta_critical_cells=beta_c, layer_cosine=layer_cosine, layer_y2=layer_y2)
        values = {"input_q": input_q, "input_rho": input_rho,
                  **cls.comparison_values(phase, predicted.phase, PHASE_LABELS)}
        grid = GridResult("measured", spec.alphas, spec.betas, arrays, dict(_ARRAYS), PHASE_LABELS,
                          {"sweep": spec.manifest(), "theory": theory, "rules": _RULES}, values,
                          {"devices": devices}, _SUMMARY, predicted.grid)
        return cls(grid, spec, predicted)

    @classmethod
    def from_grid(cls, grid: GridResult) -> "MeasuredDiagram":
        """The diagram of a measured grid: the sweep's spec and the prediction checked again."""
        check_arrays(grid, _ARRAYS)
        if grid.predicted is None:
            raise ValueError("predicted: a measured grid carries the theory's prediction")
        spec = SweepSpec.from_manifest(grid.settings["sweep"])
        resolve_theory(grid.settings["theory"])
        if not (np.array_equal(spec.betas, grid.betas) and np.array_equal(spec.alphas, grid.alphas)):
            raise ValueError("settings.sweep: its betas and alphas are not the grid's")
        return cls(grid, spec, TrainabilityDiagram.from_grid(grid.predicted))

    @classmethod
    def _older(cls, data: dict):
        """The measured diagrams of before :data:`~remprop.diagrams.grid_result.GRID_FORMAT` had no reader."""
        if "sweep_json" in data and "measured_phase" in data:
            raise ValueError("a measured diagram in the format before remprop.grid_result/1, which is not read; "
                             "make it again from its sweep folder with `remprop sweep --out FOLDER` and the same "
                             "options (every finished cell is reused)")
        return None

    @classmethod
    def from_folder(cls, out, theory="auto") -> "MeasuredDiagram":
        """Read a finished sweep folder (its manifest and cell records).

        A missing or damaged manifest, a missing cell or a damaged record is one
        ``ValueError`` naming the folder or the file.
        """
        path = Path(out) / MANIFEST_NAME
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"out: {out} holds no sweep (no {MANIFEST_NAME})") from None
        except (OSError, ValueError):
            raise ValueError(f"out: {path} is not a readable sweep manifest") from None
        try:
            if not isinstance(manifest, dict):
                raise ValueError("not a JSON object")
            spec = SweepSpec.from_manifest(manifest)
        except (TypeError, ValueError) as err:
            raise ValueError(f"out: {path} is not a valid sweep manifest ({err})") from None
        return cls.from_records(spec, load_records(spec, out), theory)

    # -- output ---------------------------------------------------------------------------
    def summary(self) -> str:
        """One line: grid, sizes, theory and agreement."""
        s = self.spec
        n = self.phase.size
        return (f"measured vs predicted ({self.theory} theory): {int(self.agrees.sum())}/{n} cells agree "
                f"({100 * self.agreement:.1f}%); {s.shape[1]} betas x {s.shape[0]} alphas, depth {s.depth}, "
                f"d={s.width}, T={s.seq_len}, {s.samples} samples per cell")

    def figure(self, fine_points=160):
        """Measured against predicted on one figure (see :mod:`remprop.diagrams.measured_figures`)."""
        from remprop.diagrams.measured_figures import measured_diagram_figure

        return measured_diagram_figure(self, fine_points=fine_points)

    def save(self, path, *, figure=True) -> list:
        """Write ``<path>.npz`` (all arrays, the prediction's too), ``<path>.json`` (the summary,
        :mod:`remprop.diagrams.grid_result`) and with ``figure`` ``<path>.png``; return the paths.
        :meth:`GridView.load <remprop.diagrams.grid_result.GridView.load>` reads them back."""
        return super().save(path, figure=figure)
