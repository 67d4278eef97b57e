"""The minimum residual strength alpha*(L): the weakest attention skip path that keeps a
depth-L stack out of rank collapse.

Rank collapse at the threshold ``t`` means that the mean cosine similarity of two tokens
after the last block, ``rho_L = p_L / q_L``, exceeds ``t`` (the tokens have nearly
aligned). ``alpha*`` is the smallest ``alpha_sa`` with ``rho_L(alpha_sa) <= t``.

The search is a bisection in the numba kernel (``kernels_for(...).min_alpha_bisection``,
:mod:`remprop.theory.kernels`). It returns the smallest alpha when
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
bound works). The kernels carry the scale of pre-LN and homogeneous no-LN streams
(:mod:`remprop.theory.kernels`), so only other no-LN stacks reach that edge.

Long searches (estimated above
:data:`~remprop.theory.work_estimates.SEGMENTED_ABOVE_SECONDS`, or with ``segment`` given)
run the same bisection from Python, each evaluation advanced in segments of blocks
(:func:`~remprop.theory.work_estimates.segment_layers`): progress is reported and Ctrl-C
stops the search between segments. The kernels resume a segment exactly where the
previous one stopped and the trial alphas are the kernel's, so the answer is the one-call
kernel's, bit for bit. :func:`search_seconds` estimates a search's time up front.
"""
from __future__ import annotations

import numpy as np

from remprop._deprecation import old_order, renamed
from remprop.theory import DEFAULT_THRESHOLD, Architecture, kernels, work_estimates
from remprop.theory.checks import check_depth, check_open_unit, check_real_scalar, scalar_or_array
from remprop.theory.propagation import CHUNK_ROWS, PARAMETER_COLUMNS, final_state_rows, kernel_tree, pack_parameters
from remprop.theory.settings import given_run

__all__ = ["alpha_star", "search_seconds", "search_block_steps", "ALPHA_MAX", "DEFAULT_THRESHOLD",
           "SCAN_POINTS", "SCAN_LOW"]

#: Default upper bound of the search. At alpha_sa = 1e3 the identity path carries 1e6
#: times the variance of an O(1) attention branch: a stack that still collapses there is
#: reported as ``inf`` (no skip strength of practical size avoids collapse).
ALPHA_MAX = 1e3
#: Scan used for gain-controlled attention (where rho_L is not monotone in alpha_sa):
#: alpha = 0 and a geometric grid from SCAN_LOW to the bound, SCAN_POINTS values in all.
SCAN_POINTS = 400
SCAN_LOW = 1e-4
#: Halvings tried when the final state overflows at the bound (no-LN stacks whose scale is not carried).
_HALVINGS = 64
#: Bisection steps on the edge of finiteness (log scale) after the halving bracket.
_REFINEMENTS = 30
_ALPHA, _Q0, _P0, _SCALE = (PARAMETER_COLUMNS[name] for name in ("alpha_sa", "q0", "p0", "log2_scale"))


def alpha_star(arch: Architecture, beta=None, depth: int = None, threshold=None, *,
               q0=None, rho0=None, alpha_max=ALPHA_MAX, tol=1e-8, progress=None, segment=None):
    r"""The minimum residual strength: the smallest attention skip strength that keeps a depth-L
    stack out of rank collapse.

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
    arch : Architecture or RunSettings
        The stack. Its own ``alpha_sa`` is ignored (that is the quantity searched for);
        every other numeric field may be an array and broadcasts with ``beta``. Or a
        :class:`~remprop.theory.RunSettings`, which holds ``depth``, ``beta``,
        ``threshold``, ``q0`` and ``rho0`` (then left out) and is trusted: its fields were
        checked when it was made.
    beta : array_like
        Query/key scale(s), > 0.
    depth : int
        Number of blocks L, >= 1.
    threshold : float, optional
        Collapse threshold ``t`` on the final mean cosine, in the open interval (0, 1)
        (default :data:`~remprop.theory.DEFAULT_THRESHOLD`, 0.99).
    q0, rho0 : array_like, optional
        Input mean squared norm (> 0, default 1) and mean cosine (in [-1, 1], default 0; the
        tested monotonicity covers ``rho0 >= 0``, the physical range of a long sequence).
    alpha_max : float
        Upper end of the search, > 0 (default :data:`ALPHA_MAX` = 1e3).
    tol : float
        Width of the final bracket, > 0 (default 1e-8).
    progress : callable, optional
        Called with the number of blocks advanced times the cells advanced, after each
        segment (after each kernel call when the search is short); the expected total is
        :func:`search_block_steps`.
    segment : int, optional
        Blocks per kernel call. Default: one call for the whole bisection when the search is
        estimated short, calls of about a quarter second otherwise
        (:func:`~remprop.theory.work_estimates.segment_layers`).

    Returns
    -------
    float or ndarray
        ``alpha*``: ``0.0`` when ``alpha_sa = 0`` already stays below the threshold,
        ``inf`` (``math.inf`` for scalars) when no ``alpha_sa <= alpha_max`` does. A float for scalar inputs,
        otherwise an array of the broadcast shape of ``beta``, the numeric fields other
        than ``alpha_sa``, ``q0`` and ``rho0`` (empty for an empty ``beta``).

    Raises
    ------
    remprop.theory.work_estimates.WorkInterrupted
        On Ctrl-C during a segmented search (a KeyboardInterrupt naming where it stopped).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Sec. on the trainability diagram (the
    minimum residual strength); docs/theory.md section 6.

    Examples
    --------
    >>> from remprop.theory import Architecture
    >>> alpha = alpha_star(Architecture(), 0.5, 60)
    >>> 1.0 < alpha < 1.5
    True
    """
    run = given_run(arch, depth=depth, beta=beta, threshold=threshold, q0=q0, rho0=rho0)
    if run is not None:  # checked once, when the run was made
        arch, depth, threshold = run.arch, run.depth, run.threshold
    elif not isinstance(arch, Architecture):
        raise ValueError(f"arch must be a remprop.theory.Architecture (or a RunSettings), got {type(arch).__name__}")
    else:
        depth = check_depth(depth)
        threshold = check_open_unit("threshold", DEFAULT_THRESHOLD if threshold is None else threshold)
    alpha_max = _positive_finite("alpha_max", alpha_max)
    tol = _positive_finite("tol", tol)
    if progress is not None and not callable(progress):
        raise ValueError(f"progress must be callable or None, got {progress!r}")
    # alpha_sa is the unknown: drop the architecture's own value (and any array shape).
    shape, size, rows = pack_parameters(run if run is not None else arch, beta, q0, rho0, alpha_sa=0.0)
    if size == 0:  # an empty beta (or field) array: nothing to search, as propagate and final_state
        return np.empty(shape)
    if segment is None:
        cells, chunks = min(size, CHUNK_ROWS), -(-size // CHUNK_ROWS)
        passes = search_block_steps(arch, depth, cells, alpha_max, tol) // (cells * depth)
        segment = work_estimates.segment_layers(arch, cells, depth, passes * chunks)
    elif isinstance(segment, bool) or not isinstance(segment, (int, np.integer)) or segment < 1:
        raise ValueError(f"segment must be an integer >= 1, got {segment!r}")
    search = _Search(arch, depth, threshold, alpha_max, tol, min(int(segment), depth), progress)
    out = np.empty(size)
    for start in range(0, size, CHUNK_ROWS):
        stop = min(size, start + CHUNK_ROWS)
        out[start:stop] = search.run(rows(start, stop))
    return scalar_or_array(out.reshape(shape))


#: Deprecated spelling of :func:`alpha_star` (one name per idea), with its old argument order
#: ``(arch, depth, beta, threshold)``; removed in the next release.
min_residual_strength = renamed("min_residual_strength", alpha_star,
                                adapt=old_order("arch", "depth", "beta", "threshold"))


def search_block_steps(arch: Architecture, depth: int, cells: int, alpha_max=ALPHA_MAX, tol=1e-8) -> int:
    """Blocks a search for ``alpha*`` advances over ``cells`` grid cells (cells x layers x evaluations).

    The bisection evaluates every cell at 0, at the bound and at ``ceil(log2(alpha_max /
    tol))`` midpoints; pre-LN and no-LN stacks first check the bound (and, where the stream
    overflows there, up to 93 more evaluations, not counted); gain-controlled attention
    first scans :data:`SCAN_POINTS` alphas.
    """
    evaluations = 2 + kernels.bisection_steps(alpha_max, tol) + (not arch.norm.normalises_stream)
    evaluations += SCAN_POINTS if arch.attention.gain_controlled else 0
    return int(cells) * int(depth) * evaluations


def search_seconds(arch: Architecture, depth: int, cells: int, alpha_max=ALPHA_MAX, tol=1e-8) -> float:
    """Estimated seconds of :func:`alpha_star` on ``cells`` grid cells (this machine).

    :func:`~remprop.theory.work_estimates.run_seconds` of the evaluations counted by
    :func:`search_block_steps` (the scan of gain-controlled attention runs its alphas side
    by side, as many cells).
    """
    depth = check_depth(depth)
    passes = search_block_steps(arch, depth, 1, alpha_max, tol) // depth
    scan = SCAN_POINTS if arch.attention.gain_controlled else 0
    return (work_estimates.run_seconds(arch, cells, depth, passes - scan)
            + work_estimates.run_seconds(arch, cells * scan, depth))


def _positive_finite(name, value):
    value = check_real_scalar(name, value)
    if not value > 0:
        raise ValueError(f"{name} must be > 0, got {value!r}")
    return value


class _Search:
    """The search for alpha* of one architecture, depth and threshold, a chunk of packed rows at a time.

    Every evaluation of final cosines goes through :meth:`final_cosine`, which advances
    the rows ``segment`` blocks per kernel call (one call when ``segment == depth``),
    reports progress and turns Ctrl-C into :class:`~remprop.theory.work_estimates.WorkInterrupted`.
    """

    def __init__(self, arch, depth, threshold, alpha_max, tol, segment, progress):
        self.arch, self.depth, self.threshold = arch, depth, threshold
        self.alpha_max, self.tol = alpha_max, tol
        self.segment, self.progress = segment, progress
        self.iterations = kernels.bisection_steps(alpha_max, tol)
        self.evaluations = 0  # full-depth evaluations started, for the message of an interruption

    def run(self, params):
        """alpha* for each packed parameter row (one chunk)."""
        upper = self.finite_bounds(params)
        result = np.full(len(params), np.inf)
        if self.arch.attention.gain_controlled:
            upper = self.first_good_on_scan(params, upper)
            result[upper == 0.0] = 0.0
        todo = np.isfinite(upper) & (upper > 0.0)
        # One bisection per distinct upper bound (a single one in the common case).
        for bound in np.unique(upper[todo]):
            rows = np.flatnonzero(todo & (upper == bound))
            result[rows] = self.bisect(params[rows], float(bound))
        return result

    # -- evaluations ---------------------------------------------------------------------
    def final_cosine(self, rows):
        """Final cosine ``p_L / q_L`` of packed rows (their own alpha_sa), segment by segment."""
        rows = np.array(rows, dtype=np.float64)
        self.evaluations += 1
        done = 0
        with work_estimates.stops_on_ctrl_c(lambda: (done, self.depth, "layer", self._where())):
            while done < self.depth:
                step = min(self.segment, self.depth - done)
                state = final_state_rows(self.arch, rows, step)
                rows[:, _Q0], rows[:, _P0], rows[:, _SCALE] = state[:, 0], state[:, 1], state[:, 4]
                done += step
                if self.progress is not None:
                    self.progress(len(rows) * step)
        with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
            return state[:, 1] / state[:, 0]

    def _where(self):
        return f" in evaluation {self.evaluations} of the alpha* search (about {2 + self.iterations} per bound)"

    def final_rho(self, params, alphas):
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
        for start in range(0, n, rows_per_call):
            part = params[start:start + rows_per_call]
            alpha = alphas[start:start + len(part)] if per_row else alphas
            rows = np.repeat(part, m, axis=0)
            rows[:, _ALPHA] = np.broadcast_to(alpha, (len(part), m)).ravel()
            out[start:start + len(part)] = self.final_cosine(rows).reshape(len(part), m)
        return out

    # -- the steps of the search -------------------------------------------------------
    def finite_bounds(self, params):
        """Per row: alpha_max, or (to 1e-9 relative) the largest alpha with a finite final state.

        Rows whose final state overflows at alpha_max are bracketed by halving, then the
        edge of finiteness is bisected in log(alpha). ``nan`` when even alpha_max / 2**63
        overflows (no finite bound: the answer is inf).
        """
        alpha_max = self.alpha_max
        bounds = np.full(len(params), alpha_max)
        if self.arch.norm.normalises_stream:  # LayerNorm after every sub-block keeps q = 1: no overflow
            return bounds
        rho = self.final_rho(params, np.array([[alpha_max]]))[:, 0]
        bad = np.flatnonzero(~np.isfinite(rho))
        if bad.size == 0:
            return bounds
        candidates = alpha_max * 0.5 ** np.arange(1, _HALVINGS)
        finite = np.isfinite(self.final_rho(params[bad], candidates[None, :]))
        found = finite.any(axis=1)
        bounds[bad[~found]] = np.nan
        bad, low = bad[found], candidates[np.argmax(finite[found], axis=1)]
        high = 2.0 * low
        for _ in range(_REFINEMENTS):  # 2**-30 of a factor 2 in log(alpha): ~1e-9 relative
            trial = np.sqrt(low * high)
            ok = np.isfinite(self.final_rho(params[bad], trial[:, None])[:, 0])
            low, high = np.where(ok, trial, low), np.where(ok, high, trial)
        bounds[bad] = low
        return bounds

    def first_good_on_scan(self, params, bounds):
        """Per row: the first scan alpha with rho_L <= threshold (0.0 possible), else inf.

        The scan is 0 and a geometric grid from SCAN_LOW to alpha_max; points above the row's
        finite bound are skipped. A nan bound (no finite state) gives inf.
        """
        low = min(SCAN_LOW, self.alpha_max / 10.0)
        scan = np.concatenate([[0.0], np.geomspace(low, self.alpha_max, SCAN_POINTS - 1)])
        rho = self.final_rho(params, scan[None, :])
        with np.errstate(invalid="ignore"):
            good = (rho <= self.threshold) & (scan[None, :] <= bounds[:, None])
        return np.where(good.any(axis=1), scan[np.argmax(good, axis=1)], np.inf)

    def bisect(self, params, alpha_max):
        """Smallest alpha in [0, alpha_max] with final cosine <= threshold, per row (0.0 or inf at the ends).

        The kernel's bisection (``Kernels.min_alpha_bisection``): ``alpha = 0`` and
        ``alpha_max`` first, then :func:`remprop.theory.kernels.bisection_steps` midpoints, the bracket's upper end
        returned. In one kernel call when the search is not segmented, else the same
        midpoints evaluated segment by segment from Python.
        """
        if self.segment >= self.depth:
            compiled = kernels.kernels_for(kernel_tree(self.arch))
            self.evaluations += 2 + self.iterations
            result = compiled.min_alpha_bisection(params, self.depth, self.threshold, alpha_max,
                                                  self.iterations, kernels.packed_table(self.arch.seq_len))
            if self.progress is not None:
                self.progress(len(params) * self.depth * (2 + self.iterations))
            return result

        def good(rows, alpha):
            rows = rows.copy()
            rows[:, _ALPHA] = alpha
            return self.final_cosine(rows) <= self.threshold

        at_zero, at_bound = good(params, 0.0), good(params, alpha_max)
        result = np.where(at_zero, 0.0, np.where(at_bound, -1.0, np.inf))
        todo = np.flatnonzero(result < 0.0)
        low, high = np.zeros(todo.size), np.full(todo.size, alpha_max)
        for _ in range(self.iterations if todo.size else 0):
            trial = 0.5 * (low + high)
            below = good(params[todo], trial)
            high, low = np.where(below, trial, high), np.where(below, low, trial)
        result[todo] = high
        return result
