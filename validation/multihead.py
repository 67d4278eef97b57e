"""Multi-head attention: measured participation ratios under both query/key conventions.

:func:`multihead_participation` runs one softmax attention layer with H heads
(:func:`~remprop.validation.comparison.attention_sweep`) for each number of heads and
each ``qk_scaling`` ("model": ``s_qk^2 = beta sqrt(log T)/d``; "head": ``/ d_H``) and sets the
measured Y2 (averaged over heads and rows) beside the exact finite-T theory at the heads'
effective beta (:func:`remprop.theory.rem.heads.head_participation_ratio`).

Reference: Giorlandino & Goldt, arXiv 2505.24333 (docs/theory.md section 2: d = 768, T = 512,
beta = 0.5; Y2 = 0.009 for H = 1; over d_H 0.41 (H = 4) and 0.79 (H = 12); over d 0.009).
"""
from __future__ import annotations

import numpy as np

from remprop.theory import Architecture
from remprop.theory.checks import check_choice
from remprop.theory.rem import QK_SCALINGS, effective_beta, head_participation_ratio

from .backend import check_positive_int
from .comparison import attention_sweep
from .settings import SimulationSettings, check_simulation

__all__ = ["multihead_participation"]


def multihead_participation(heads=(1, 4, 12), betas=(0.5,), *, qk_scalings=QK_SCALINGS,
                            sim: SimulationSettings | None = None) -> list:
    """Measured and predicted Y2 of H-head attention, for each H, convention and beta.

    Parameters
    ----------
    heads : sequence of int
        Numbers of heads (each dividing ``width``).
    betas : sequence of float
    qk_scalings : sequence of {"model", "head"}
    sim : remprop.validation.SimulationSettings, optional
        Width, tokens, seeds, sequences per seed, the Gaussian tokens' ``q0`` and ``rho0``,
        dtype and device (:func:`~remprop.validation.comparison.attention_sweep`). Default
        ``SimulationSettings(width=768)`` (T = 512, 2 seeds x 2 sequences, ``rho0 = 0``).

    Returns
    -------
    list of dict
        One row per (qk_scaling, H, beta): ``effective_beta``, ``measured_y2``,
        ``measured_y2_std`` (over seeds x sequences), ``theory_y2`` (exact finite T),
        ``theory_y2_asymptotic``.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (docs/theory.md section 2).
    """
    heads = [check_positive_int("heads", h) for h in heads]
    for scaling in qk_scalings:
        check_choice("qk_scaling", scaling, QK_SCALINGS)
    betas = np.atleast_1d(np.asarray(betas, dtype=float))
    sim = check_simulation(sim, width=768)
    arch = Architecture(sigma_b2=0.0, sigma_v2=1.0)
    q0, rho0, seq_len = sim.q0, sim.rho0, sim.seq_len
    p0 = q0 * rho0
    rows = []
    for scaling in qk_scalings:
        for h in heads:
            sweep = attention_sweep(betas, (rho0,), arch=arch.replace(heads=h, qk_scaling=scaling), sim=sim)
            finite = np.atleast_1d(head_participation_ratio(betas, q0, p0, h, seq_len, scaling))
            asymptotic = np.atleast_1d(head_participation_ratio(betas, q0, p0, h, None, scaling))
            for b, beta in enumerate(betas):
                rows.append({"qk_scaling": scaling, "heads": h, "beta": float(beta),
                             "effective_beta": float(effective_beta(beta, h, scaling)),
                             "measured_y2": float(sweep.measured["y2"][0, b]),
                             "measured_y2_std": float(sweep.spread["y2"][0, b]),
                             "theory_y2": float(finite[b]), "theory_y2_asymptotic": float(asymptotic[b]),
                             "width": sim.width, "seq_len": seq_len,
                             "samples": len(sweep.settings["seeds"]) * sweep.settings["sequences"]})
    return rows
