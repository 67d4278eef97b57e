r"""Measured trainability diagrams: simulated cells classified as the theory classifies.

A sweep (:mod:`remprop.validation.sweep`) leaves, per cell ``(alpha_sa, beta)``, the
per-layer sample means of the token statistics and each sample's final cosine. The
measured phase of a cell follows the theory's rule (:func:`remprop.diagrams.classify_phases`
and :meth:`remprop.theory.Architecture.critical_beta`) with measured numbers in
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

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from remprop._json import to_jsonable
from remprop.diagrams import PHASE_LABELS, TrainabilityDiagram, classify_phases, trainability_diagram
from remprop.diagrams.phases import confusion
from remprop.theory import Architecture
from remprop.theory.checks import check_choice

from .cell_store import MANIFEST_NAME
from .sweep import SweepSpec, cell_key, load_records

__all__ = ["MeasuredDiagram", "measured_beta_critical", "THEORIES", "resolve_theory"]

#: Theories a measured diagram can be set against.
THEORIES = ("auto", "finite-T", "asymptotic")
_FORMAT = "remprop.measured_diagram/1"


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
    (:meth:`~remprop.theory.Architecture.critical_beta`: the first layer for post-LN, the smallest over the
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
    return np.asarray(arch.critical_beta(arch.block_critical_beta(q, p)), dtype=float)


def _as_float(values):
    return np.array([float(v) for v in values], dtype=float)


@dataclass(frozen=True, eq=False)
class MeasuredDiagram:
    """Measured phases of a simulated sweep beside the theory's.

    Arrays over the grid have axes ``(alpha, beta)`` like
    :class:`~remprop.diagrams.TrainabilityDiagram`.

    Attributes
    ----------
    spec : SweepSpec
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
    predicted : TrainabilityDiagram
        The theory on the same grid.
    devices : tuple of str
        Devices the cells ran on.
    """

    spec: SweepSpec
    theory: str
    cosine_final: np.ndarray
    cosine_final_std: np.ndarray
    beta_critical_cells: np.ndarray
    phase: np.ndarray
    layer_cosine: np.ndarray
    layer_y2: np.ndarray
    input_q: float
    input_rho: float
    predicted: TrainabilityDiagram
    devices: tuple = ()

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
        devices = tuple(sorted({str(r.get("run", {}).get("device", "?")) for r in records.values()}))
        return cls(spec, theory, cosine_final, cosine_final_std, beta_c, phase, layer_cosine, layer_y2,
                   input_q, input_rho, predicted, devices)

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

    # -- comparison -----------------------------------------------------------------------
    @property
    def agrees(self) -> np.ndarray:
        """Per cell: measured phase == predicted phase."""
        return self.phase == self.predicted.phase

    @property
    def agreement(self) -> float:
        """Fraction of cells whose measured phase is the predicted one."""
        return float(self.agrees.mean())

    def confusion(self) -> dict:
        """Counts ``{predicted label: {measured label: cells}}`` (:func:`remprop.diagrams.phases.confusion`)."""
        return confusion(self.predicted.phase, self.phase)

    def fractions(self) -> dict:
        """Fraction of cells in each measured phase, keyed by label."""
        counts = np.bincount(self.phase.ravel(), minlength=len(PHASE_LABELS))
        return {label: counts[code] / self.phase.size for code, label in PHASE_LABELS.items()}

    def summary(self) -> str:
        """One line: grid, sizes, theory and agreement."""
        s = self.spec
        n = self.phase.size
        return (f"measured vs predicted ({self.theory} theory): {int(self.agrees.sum())}/{n} cells agree "
                f"({100 * self.agreement:.1f}%); {s.shape[1]} betas x {s.shape[0]} alphas, depth {s.depth}, "
                f"d={s.width}, T={s.seq_len}, {s.samples} samples per cell")

    # -- output ---------------------------------------------------------------------------
    def figure(self, fine_points=160):
        """Measured against predicted on one figure (see :mod:`remprop.diagrams.measured_figures`)."""
        from remprop.diagrams.measured_figures import measured_diagram_figure

        return measured_diagram_figure(self, fine_points=fine_points)

    def to_dict(self) -> dict:
        """JSON-ready summary: settings, phases (rows alphas, columns betas), agreement."""
        return to_jsonable({
            "format": _FORMAT,
            "sweep": self.spec.manifest(),
            "theory": self.theory,
            "phase_labels": {str(code): label for code, label in PHASE_LABELS.items()},
            "axes": ["alpha", "beta"],
            "measured_phase": self.phase,
            "predicted_phase": self.predicted.phase,
            "agreement": self.agreement,
            "cells_agreeing": int(self.agrees.sum()),
            "cells": int(self.phase.size),
            "confusion_predicted_vs_measured": self.confusion(),
            "measured_cosine_final": self.cosine_final,
            "measured_cosine_final_std": self.cosine_final_std,
            "predicted_rho_final": self.predicted.rho_final,
            "measured_beta_critical": self.beta_critical_cells,
            "predicted_beta_critical": self.predicted.beta_critical_cells,
            "input_q": self.input_q,
            "input_rho": self.input_rho,
            "devices": list(self.devices),
            "rules": {
                "rank_collapse": "measured final mean token cosine (mean over samples) > threshold",
                "entropy_collapse": "beta > critical beta of the measured attention input: first layer "
                                    "(post-LN), smallest over layers (pre-LN, no LN)",
                "both": "entropy collapse",
            },
        })

    def save(self, path, *, figure=True) -> list:
        """Write ``<path>.json`` (summary), ``<path>.npz`` (all arrays) and ``<path>.png``.

        Returns the paths written.
        """
        base = Path(path)
        if base.suffix in (".json", ".npz", ".png"):
            base = base.with_suffix("")
        base.parent.mkdir(parents=True, exist_ok=True)
        json_path, npz_path = base.with_name(base.name + ".json"), base.with_name(base.name + ".npz")
        with open(json_path, "w", encoding="utf-8") as handle:
            json.dump(self.to_dict(), handle, allow_nan=False)
        with open(npz_path, "wb") as handle:
            np.savez(handle, betas=np.asarray(self.spec.betas), alphas=np.asarray(self.spec.alphas),
                     measured_phase=self.phase, predicted_phase=self.predicted.phase,
                     measured_cosine_final=self.cosine_final, measured_cosine_final_std=self.cosine_final_std,
                     predicted_rho_final=self.predicted.rho_final, measured_beta_critical=self.beta_critical_cells,
                     predicted_beta_critical=self.predicted.beta_critical_cells, layer_cosine=self.layer_cosine,
                     layer_y2=self.layer_y2, agreement=self.agreement, theory=np.array(self.theory),
                     sweep_json=np.array(json.dumps(self.spec.manifest())))
        written = [json_path, npz_path]
        if figure:
            png = base.with_name(base.name + ".png")
            self.figure().savefig(png, dpi=150)
            written.append(png)
        return written
