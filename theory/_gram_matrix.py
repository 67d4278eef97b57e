"""Matrix helpers of the Gram state (private): cosines, the simplex projection, row softmax, square root.

Used by :mod:`.gram_state` (docs/theory.md section 17) and, through it, by the causal Gram
walker; apart only for the length of one module.
"""
from __future__ import annotations

import numpy as np


def _simplex_distance(g):
    c = _cosine_matrix(g)[np.triu_indices(g.shape[0], 1)]
    return float(np.sqrt(np.mean((c - c.mean()) ** 2)))


def _cosine_matrix(g):
    d = np.sqrt(np.diag(g))
    return g / np.outer(d, d)


def _mean_cosine(g):
    c = _cosine_matrix(g)
    t = g.shape[0]
    return float((c.sum() - np.trace(c)) / (t * (t - 1)))


def _mean_cosine_shift(g, delta):
    """First-order change of the mean pair cosine of ``g`` under a symmetric perturbation ``delta``.

    ``c_ij = G_ij / sqrt(G_ii G_jj)``: ``d cbar = (1/(T(T-1))) [sum_{i!=j} delta_ij / (s_i s_j)
    - sum_i delta_ii (sum_{j!=i} c_ij) / G_ii]`` with ``s_i = sqrt(G_ii)`` (the delta method
    of the Monte Carlo standard error, docs/theory.md section 17).
    """
    t = g.shape[0]
    diag = np.diag(g)
    s = np.sqrt(diag)
    scaled = delta / np.outer(s, s)
    c = g / np.outer(s, s)
    off = scaled.sum() - np.trace(scaled)
    return float((off - np.sum(np.diag(delta) * (c.sum(axis=1) - 1.0) / diag)) / (t * (t - 1)))


def _shift_variance(g, deviations):
    """Variance over the draws of the first-order mean-cosine shift of ``g`` (0 for one draw)."""
    shifts = np.array([_mean_cosine_shift(g, dev) for dev in deviations])
    return float(shifts.var(ddof=1)) if len(shifts) > 1 else 0.0


def _simplex_pair(g):
    """(q, p): mean diagonal and mean off-diagonal of ``g``."""
    t = g.shape[0]
    tr = np.trace(g)
    return tr / t, (g.sum() - tr) / (t * (t - 1))


def _softmax_rows(s):
    s = s - s.max(axis=-1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=-1, keepdims=True)
    return s


def _symmetric_sqrt(g):
    """The symmetric square root ``U sqrt(max(lambda, 0)) U^T`` (G may be singular)."""
    lam, u = np.linalg.eigh(g)
    return (u * np.sqrt(np.maximum(lam, 0.0))) @ u.T


def _gram_factor(g):
    """A factor ``L`` with ``L L^T = G``: the Cholesky factor (6-20 times cheaper than the symmetric
    root by eigendecomposition at T = 512, benchmarks/bench_gram_state.py), the symmetric square
    root where G is singular (exactly repeated tokens).

    For score fields ``S = c L Z L^T`` that need only their law, ``Cov(S_ij, S_kl) =
    c^2 G_ik G_jl`` for any such factor (the sampled chains); a control variate that draws
    the simplex field from the same ``Z`` needs the symmetric root instead.
    """
    try:
        return np.linalg.cholesky(g)
    except np.linalg.LinAlgError:
        return _symmetric_sqrt(g)
