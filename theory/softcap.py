"""Attention-logit soft-capping (Gemma 2): how far the theory's uncapped energies may be trusted.

A soft-capped score ``c tanh(s / c)`` differs from ``s`` by at most ``|s|^3 / (3 c^2)``. The
theory has no capped energies; these functions bound the relative change of an attention
row's Y2 that the cap can cause at a given beta, accept an architecture up to
:data:`SOFTCAP_TOLERANCE`, and give the largest beta accepted. Each takes the
:class:`~remprop.theory.Architecture`.

Reference: Gemma Team, arXiv 2408.00118; docs/theory.md section 19.
"""
from __future__ import annotations

import math

import numpy as np

from .checks import as_float_array, scalar_or_array

__all__ = ["SOFTCAP_TOLERANCE", "logit_softcap_change", "logit_softcap_max_beta", "check_logit_softcap"]

#: The largest relative change of a row's Y2 by soft-capping that the theory accepts.
SOFTCAP_TOLERANCE = 0.05


def logit_softcap_change(arch, beta, q0=1.0):
    r"""Bound on the relative change of an attention row's Y2 by soft-capping its scores.

    A score ``s`` becomes ``c tanh(s/c)``, and ``|c tanh(s/c) - s| <= |s|^3 / (3 c^2)``.
    Shifting every energy of a row by at most ``D`` changes each softmax weight by a factor
    in ``[e^{-2D}, e^{2D}]``, so ``Y2 = sum_j w_j^2`` by one in ``[e^{-4D}, e^{4D}]``:

    .. math:: \frac{|\Delta Y_2|}{Y_2} \le e^{4D} - 1,\qquad
              D = \frac{s_{\max}^3}{3c^2},\qquad s_{\max} = \sigma_s \sqrt{2\log(2T)}

    with ``sigma_s`` the scores' standard deviation (the part shared by the keys included):
    ``beta_eff q sqrt(log T)`` (docs/theory.md section 3.1), ``q`` the attention input's
    mean squared norm (1 after a pre-norm; ``max(q0, 1)`` for post-LN, whose first layer
    sees the input), and ``beta g^2`` with QK-norm. ``s_max`` is the largest of a row's
    T scores except with probability ``<= 1/(sqrt(2 pi) z)``, ``z = sqrt(2 log 2T)``
    (about 0.1; the union bound). Returns 0 without ``logit_softcap``.

    References
    ----------
    Gemma Team, arXiv 2408.00118 (soft-capping at 50); docs/theory.md section 19.
    """
    if arch.logit_softcap is None:
        return scalar_or_array(np.zeros(np.shape(beta)))
    beta = as_float_array("beta", beta, positive=True)
    s_max = beta * _largest_score_per_beta(arch, q0)
    # D = s^3 / (3 c^2) written as (4/3) s (s/c)^2: no c^2 to overflow (c = 1e300) or vanish (c = 1e-300)
    with np.errstate(over="ignore", under="ignore"):
        return scalar_or_array(np.expm1(4.0 / 3.0 * s_max * np.square(s_max / np.float64(arch.logit_softcap))))

def _largest_score_per_beta(arch, q0):
    """``s_max / beta`` of :func:`logit_softcap_change` (linear in beta)."""
    z = math.sqrt(2.0 * math.log(2.0 * arch.seq_len))
    if arch.qk_norm:
        return arch.qk_norm_gain ** 2 * z
    q_in = np.maximum(as_float_array("q0", q0, positive=True), 1.0) if arch.norm.normalises_stream else 1.0
    return arch.head_factor * q_in * math.sqrt(math.log(arch.seq_len)) * z

def logit_softcap_max_beta(arch, q0=1.0):
    r"""The largest ``beta`` that :func:`check_logit_softcap` accepts (``inf`` without a cap):

    .. math:: \beta_{\max} = \frac{1}{s_{\max}/\beta}\Big(\tfrac34 c^2 \log(1 + \epsilon)\Big)^{1/3}

    with ``epsilon`` = :data:`SOFTCAP_TOLERANCE` (docs/theory.md section 19). A diagram or a
    suggested query/key scale of a soft-capped model stays below it.
    """
    if arch.logit_softcap is None:
        return math.inf
    # (3/4 c^2 log(1 + eps))^(1/3) with c^(2/3) apart: no c^2 to overflow or vanish
    limit = float(arch.logit_softcap) ** (2.0 / 3.0) * (0.75 * math.log1p(SOFTCAP_TOLERANCE)) ** (1.0 / 3.0)
    return scalar_or_array(limit / _largest_score_per_beta(arch, q0))

def check_logit_softcap(arch, beta, q0=1.0):
    """ValueError naming ``logit_softcap`` where :func:`logit_softcap_change` exceeds
    :data:`SOFTCAP_TOLERANCE` (the theory has no capped energies); nothing without a cap."""
    if arch.logit_softcap is None:
        return
    change = np.asarray(logit_softcap_change(arch, beta, q0))
    if np.any(~(change <= SOFTCAP_TOLERANCE)):
        worst = float(np.nanmax(np.where(np.isnan(change), np.inf, change)))
        raise ValueError(
            f"logit_softcap = {arch.logit_softcap:g} is too small for the theory at this beta: soft-capping "
            f"may change a row's Y2 by up to {worst:.3g} (relative; accepted up to {SOFTCAP_TOLERANCE:g}), and "
            f"the theory has no capped energies (docs/theory.md section 19). Lower beta or raise the cap")
