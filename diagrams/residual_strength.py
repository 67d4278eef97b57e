"""The minimum residual strength alpha*(L): the weakest attention skip path that keeps a
depth-L stack out of rank collapse.

Rank collapse at the threshold ``t`` means that the mean cosine similarity of two tokens
after the last block, ``rho_L = p_L / q_L``, exceeds ``t`` (the tokens have nearly
aligned). ``alpha*`` is the smallest ``alpha_sa`` with ``rho_L(alpha_sa) <= t``.

The search is a bisection in the numba kernel
:func:`remprop.theory.kernels.min_alpha_bisection`. It returns the smallest alpha when
the set of good alphas is an up-set ``[alpha*, alpha_max]``, which holds when the final
cosine does not increase with ``alpha_sa``:

* softmax attention: the attention branch only ever averages tokens (its output cosine,
  ``(sigma_v2 p + sigma_b2) / (sigma_v2 (p + (q - p) Y2) + sigma_b2)``, is at least
  ``rho`` for ``p >= 0``), so a stronger identity path keeps the stream less aligned.
  That is the heuristic; the tests check ``rho_L`` non-increasing in ``alpha_sa`` (to round-off)
  with hypothesis over norms, activations, variances, betas, depths and input states
  with ``rho0 >= 0``.
* gain-controlled attention: the centred branch *decorrelates* tokens (its output cosine
  is ``sigma_b2 / q_A``), so the identity path can bring correlation back and ``rho_L``
  may rise with ``alpha_sa`` (seen without LayerNorm, where the good alphas can form a
  window). For this variant a scan of :data:`SCAN_POINTS` alphas (0 and a geometric grid up
  to the bound) first locates the first good grid point, and the bisection then runs
  below it: the answer is the smallest alpha up to good windows narrower than one scan
  step (a ratio ``(alpha_max / SCAN_LOW)**(1 / (SCAN_POINTS - 2))``, about 1.04 at the
  default bound).

Pre-LN and no-LN streams grow like ``alpha_sa**(2 L)``; where the final state overflows
float64 at ``alpha_max`` the bound is lowered, per grid cell, to the largest alpha with a
finite final state (to 1e-9 relative; ``inf`` then means that no alpha up to that reduced
bound works). At depth 1000 that edge is near alpha = 1.42 (``alpha**2000 ~ 1e308``).
"""
from __future__ import annotations

import numpy as np

from remprop.theory import DEFAULT_THRESHOLD, Architecture, kernels
from remprop.theory.checks import check_depth, check_open_unit, check_real_scalar, scalar_or_array
from remprop.theory.propagation import CHUNK_ROWS, PARAMETER_COLUMNS, final_state_rows, pack_parameters

__all__ = ["min_residual_strength", "ALPHA_MAX", "DEFAULT_THRESHOLD", "SCAN_POINTS", "SCAN_LOW"]

#: Default upper bound of the search. At alpha_sa = 1e3 the identity path carries 1e6
#: times the variance of an O(1) attention branch: a stack that still collapses there is
#: reported as ``inf`` (no skip strength of practical size avoids collapse).
ALPHA_MAX = 1e3
#: Scan used for gain-controlled attention (where rho_L is not monotone in alpha_sa):
#: alpha = 0 and a geometric grid from SCAN_LOW to the bound, SCAN_POINTS values in all.
SCAN_POINTS = 400
SCAN_LOW = 1e-4
#: Halvings tried when the final state overflows at the bound (pre-LN and no-LN stacks).
_HALVINGS = 64
#: Bisection steps on the edge of finiteness (log scale) after the halving bracket.
_REFINEMENTS = 30


def min_residual_strength(arch: Architecture, depth: int, beta, threshold=DEFAULT_THRESHOLD, *,
                          q0=1.0, rho0=0.0, alpha_max=ALPHA_MAX, tol=1e-8):
    r"""Smallest attention skip strength that keeps a depth-L stack out of rank collapse.

    .. math::
        \alpha^*(L) = \min\{\alpha_{SA} \ge 0 :\ \rho_L(\alpha_{SA}) \le t\},
        \qquad \rho_L = p_L / q_L

    where ``(q_L, p_L)`` is the state after ``depth`` blocks of ``arch`` with
    ``alpha_sa`` replaced by the candidate (the block map of docs/theory.md sections 3-5,
    asymptotic REM attention). Rank collapse at threshold ``t`` means that the mean
    cosine similarity of two tokens after the last block exceeds ``t``.

    The bisection (numba, parallel over betas) stops when the bracket is narrower than
    ``tol`` and returns its upper end, so ``rho_L(alpha*) <= t`` and, by monotonicity,
    ``rho_L(alpha) > t`` for every ``alpha <= alpha* - tol``. It assumes ``rho_L`` does not increase with
    ``alpha_sa`` (tested for softmax attention, see the module notes); gain-controlled
    attention is not monotone and gets a scan before the bisection.

    Parameters
    ----------
    arch : Architecture
        The stack. Its own ``alpha_sa`` is ignored (that is the quantity searched for);
        every other numeric field may be an array and broadcasts with ``beta``.
    depth : int
        Number of blocks L, >= 1.
    beta : array_like
        Query/key scale(s), > 0.
    threshold : float
        Collapse threshold ``t`` on the final mean cosine, in the open interval (0, 1).
    q0, rho0 : array_like
        Input mean squared norm (> 0) and mean cosine (in [-1, 1]; the tested
        monotonicity covers ``rho0 >= 0``, the physical range of a long sequence).
    alpha_max : float
        Upper end of the search, > 0 (default :data:`ALPHA_MAX` = 1e3).
    tol : float
        Width of the final bracket, > 0 (default 1e-8).

    Returns
    -------
    float or ndarray
        ``alpha*``: ``0.0`` when ``alpha_sa = 0`` already stays below the threshold,
        ``inf`` (``math.inf`` for scalars) when no ``alpha_sa <= alpha_max`` does. A float for scalar inputs,
        otherwise an array of the broadcast shape of ``beta``, the numeric fields other
        than ``alpha_sa``, ``q0`` and ``rho0``.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Sec. on the trainability diagram (the
    minimum residual strength); docs/theory.md section 6.

    Examples
    --------
    >>> from remprop.theory import Architecture
    >>> alpha = min_residual_strength(Architecture(), depth=60, beta=0.5)
    >>> 1.0 < alpha < 1.5
    True
    """
    if not isinstance(arch, Architecture):
        raise ValueError(f"arch must be a remprop.theory.Architecture, got {type(arch).__name__}")
    depth = check_depth(depth)
    threshold = check_open_unit("threshold", threshold)
    alpha_max = _positive_finite("alpha_max", alpha_max)
    tol = _positive_finite("tol", tol)
    # alpha_sa is the unknown: drop the architecture's own value (and any array shape).
    shape, size, rows = pack_parameters(arch.replace(alpha_sa=0.0), beta, q0, rho0)
    out = np.empty(size)
    for start in range(0, size, CHUNK_ROWS):
        stop = min(size, start + CHUNK_ROWS)
        out[start:stop] = _search(arch, rows(start, stop), depth, threshold, alpha_max, tol)
    return scalar_or_array(out.reshape(shape))


def _positive_finite(name, value):
    value = check_real_scalar(name, value)
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return value


def _search(arch, params, depth, threshold, alpha_max, tol):
    """alpha* for each packed parameter row (one chunk)."""
    upper = _finite_bounds(arch, params, depth, alpha_max)
    result = np.full(len(params), np.inf)
    if arch.attention == "gain-controlled":
        upper = _first_good_on_scan(arch, params, depth, threshold, upper, alpha_max)
        result[upper == 0.0] = 0.0
    todo = np.isfinite(upper) & (upper > 0.0)
    # One kernel call per distinct upper bound (a single call in the common case).
    for bound in np.unique(upper[todo]):
        rows = np.flatnonzero(todo & (upper == bound))
        result[rows] = kernels.min_alpha_bisection(*arch.codes, params[rows], depth, threshold,
                                                   float(bound), tol, seq_len=arch.seq_len)
    return result


def _final_rho(arch, params, alphas, depth):
    """Final cosine of the rows of ``params`` at the skip strengths ``alphas``.

    ``alphas`` is 2-d: shape (1, m) evaluates every row at every alpha, shape
    (len(params), 1) one alpha per row. Returns shape (len(params), m). The packed rows
    (effective beta already applied by :func:`~remprop.theory.pack_parameters`) go to the
    kernels as they are, with only the ``alpha_sa`` column replaced, a bounded number of
    cells at a time.
    """
    n, m = len(params), alphas.shape[1]
    per_row = alphas.shape[0] == n and n > 1
    out = np.empty((n, m))
    rows_per_call = max(1, CHUNK_ROWS // m)
    alpha_column = PARAMETER_COLUMNS["alpha_sa"]
    for start in range(0, n, rows_per_call):
        part = params[start:start + rows_per_call]
        alpha = alphas[start:start + len(part)] if per_row else alphas
        rows = np.repeat(part, m, axis=0)
        rows[:, alpha_column] = np.broadcast_to(alpha, (len(part), m)).ravel()
        state = final_state_rows(arch, rows, depth)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            out[start:start + len(part)] = (state[:, 1] / state[:, 0]).reshape(len(part), m)
    return out


def _finite_bounds(arch, params, depth, alpha_max):
    """Per row: alpha_max, or (to 1e-9 relative) the largest alpha with a finite final state.

    Rows whose final state overflows at alpha_max are bracketed by halving, then the
    edge of finiteness is bisected in log(alpha). ``nan`` when even alpha_max / 2**63
    overflows (no finite bound: the answer is inf).
    """
    bounds = np.full(len(params), alpha_max)
    if arch.norm == "post":  # LayerNorm after every sub-block keeps q = 1: no overflow
        return bounds
    rho = _final_rho(arch, params, np.array([[alpha_max]]), depth)[:, 0]
    bad = np.flatnonzero(~np.isfinite(rho))
    if bad.size == 0:
        return bounds
    candidates = alpha_max * 0.5 ** np.arange(1, _HALVINGS)
    finite = np.isfinite(_final_rho(arch, params[bad], candidates[None, :], depth))
    found = finite.any(axis=1)
    bounds[bad[~found]] = np.nan
    bad, low = bad[found], candidates[np.argmax(finite[found], axis=1)]
    high = 2.0 * low
    for _ in range(_REFINEMENTS):  # 2**-30 of a factor 2 in log(alpha): ~1e-9 relative
        trial = np.sqrt(low * high)
        ok = np.isfinite(_final_rho(arch, params[bad], trial[:, None], depth)[:, 0])
        low, high = np.where(ok, trial, low), np.where(ok, high, trial)
    bounds[bad] = low
    return bounds


def _first_good_on_scan(arch, params, depth, threshold, bounds, alpha_max):
    """Per row: the first scan alpha with rho_L <= threshold (0.0 possible), else inf.

    The scan is 0 and a geometric grid from SCAN_LOW to alpha_max; points above the row's
    finite bound are skipped. A nan bound (no finite state) gives inf.
    """
    low = min(SCAN_LOW, alpha_max / 10.0)
    scan = np.concatenate([[0.0], np.geomspace(low, alpha_max, SCAN_POINTS - 1)])
    rho = _final_rho(arch, params, scan[None, :], depth)
    with np.errstate(invalid="ignore"):
        good = (rho <= threshold) & (scan[None, :] <= bounds[:, None])
    return np.where(good.any(axis=1), scan[np.argmax(good, axis=1)], np.inf)
