"""The order parameters at chosen layers of a deep stack, streamed: memory independent of depth.

:func:`~remprop.theory.propagate` keeps every layer (``64 x cells x depth`` bytes, see
:func:`~remprop.theory.work_estimates.trajectory_bytes`): 7.5 GiB and more for one cell at
a depth of 10**9. :func:`propagate_at_layers` keeps only the layers asked for. It advances
the depth kernels segment by segment, feeding each segment's final state (with its carried
scale, :mod:`remprop.theory.kernels`) back into the packed rows; a segment that holds
requested layers keeps its own layers (at most
:data:`~remprop.theory.work_estimates.SEGMENT_BYTES`), the others only their final state.
Between segments it reports progress and honours Ctrl-C
(:class:`~remprop.theory.work_estimates.WorkInterrupted`). Because the kernels carry the
state exactly from one call to the next, the result does not depend on the segments: it is
that of :func:`~remprop.theory.propagate` at the same layers (docs/theory.md sections 1, 5).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .kernels import kernels_for, packed_table
from .propagation import CHUNK_ROWS, PARAMETER_COLUMNS, kernel_tree, pack_parameters, scaled_state, stack_output_state
from .work_estimates import SEGMENT_BYTES, segment_layers, stops_on_ctrl_c

__all__ = ["SampledTrajectory", "propagate_at_layers"]

_Q0, _P0, _SCALE = PARAMETER_COLUMNS["q0"], PARAMETER_COLUMNS["p0"], PARAMETER_COLUMNS["log2_scale"]
#: Bytes per cell and layer of a segment that keeps its layers (q, p, scale, beta_c).
_LAYER_BYTES = 32


@dataclass(frozen=True)
class SampledTrajectory:
    """Order parameters at selected layers (the last axis runs over ``layers``).

    Attributes
    ----------
    layers : ndarray of int, shape (k,)
        The layers, increasing (0 = the input).
    q, p, rho : ndarray, shape (..., k)
        Mean squared norm, mean overlap and mean cosine ``p / q`` at those layers (q and p
        read inf or 0 where a deep pre-LN or no-LN stream leaves float64; rho and
        ``log2_q`` stay exact, as in :class:`~remprop.theory.Trajectory`).
    log2_q : ndarray, shape (..., k)
        ``log2 q``, finite at any depth.
    beta_critical : ndarray, shape (..., k)
        Per-head critical beta of the attention input of each layer (as
        ``Trajectory.beta_critical[..., layer - 1]``); nan at layer 0, which has no attention.
    beta_critical_min : ndarray, shape (..., k)
        Smallest per-head critical beta over layers ``1 .. layer`` (inf at layer 0).
    beta_critical_first : ndarray, shape (...)
        Per-head critical beta of the first layer (nan when only layer 0 was asked for).
    """

    layers: np.ndarray
    q: np.ndarray
    p: np.ndarray
    rho: np.ndarray
    log2_q: np.ndarray
    beta_critical: np.ndarray
    beta_critical_min: np.ndarray
    beta_critical_first: np.ndarray

    @property
    def depth(self) -> int:
        """The deepest layer computed."""
        return int(self.layers[-1])


def propagate_at_layers(arch, beta, layers, q0=1.0, rho0=0.0, *, progress=None,
                        segment=None) -> SampledTrajectory:
    r"""Propagate (q, p) through ``max(layers)`` blocks and keep only the given layers.

    The same maps as :func:`~remprop.theory.propagate` (docs/theory.md sections 1-5),
    evaluated in segments of blocks: memory ``O(cells x len(layers))`` whatever the depth,
    progress and Ctrl-C between segments. The values equal those of ``propagate`` at the
    same layers (the kernels resume a segment exactly where the previous one stopped).

    Parameters
    ----------
    arch : Architecture
    beta : array_like
        Query/key scale(s), > 0.
    layers : int or sequence of int
        Layers to keep, >= 0 (0 = the input); sorted, duplicates dropped. The depth is
        their maximum.
    q0, rho0 : array_like
        Input state, as in :func:`~remprop.theory.propagate`.
    progress : callable, optional
        Called after each segment with the number of blocks advanced times the cells
        advanced (the total is ``cells x depth``).
    segment : int, optional
        Blocks per kernel call; default :func:`~remprop.theory.work_estimates.segment_layers`
        (one call for a short run, calls of about a quarter second otherwise).

    Returns
    -------
    SampledTrajectory
        Arrays of shape ``broadcast(beta, arch fields, q0, rho0) + (len(layers),)``.

    Raises
    ------
    WorkInterrupted
        On Ctrl-C (a KeyboardInterrupt), naming the last layer finished.

    Examples
    --------
    >>> from remprop.theory import Architecture, propagate_at_layers
    >>> sampled = propagate_at_layers(Architecture(), 0.5, [0, 30, 60])
    >>> sampled.rho.shape, sampled.depth
    ((3,), 60)
    """
    layers = _check_layers(layers)
    if progress is not None and not callable(progress):
        raise ValueError(f"progress must be callable or None, got {progress!r}")
    shape, size, rows = pack_parameters(arch, beta, q0, rho0)
    depth = int(layers[-1])
    if segment is None:
        segment = segment_layers(arch, min(size, CHUNK_ROWS), depth, -(-size // CHUNK_ROWS)) if depth else 1
    elif isinstance(segment, bool) or not isinstance(segment, (int, np.integer)) or segment < 1:
        raise ValueError(f"segment must be an integer >= 1, got {segment!r}")
    kernels = kernels_for(kernel_tree(arch))
    table = packed_table(arch.seq_len)
    k = layers.size
    mantissa_q, mantissa_p, exponent = (np.empty((size, k)) for _ in range(3))
    beta_c, beta_c_min = np.full((size, k), np.nan), np.full((size, k), np.inf)
    first = np.full(size, np.nan)
    for start in range(0, size, CHUNK_ROWS):
        stop = min(size, start + CHUNK_ROWS)
        chunk = _Chunk(rows(start, stop), layers, int(segment), kernels, table)
        detail = f" (cells {start + 1}-{stop} of {size})" if size > CHUNK_ROWS else ""
        with stops_on_ctrl_c(lambda: (chunk.current, depth, "layer", detail)):
            chunk.run(progress)
        part = slice(start, stop)
        mantissa_q[part], mantissa_p[part], exponent[part] = chunk.q, chunk.p, chunk.e
        beta_c[part], beta_c_min[part], first[part] = chunk.beta_c, chunk.beta_c_min, chunk.first
    q, p, rho, log2_q = scaled_state(mantissa_q, mantissa_p, exponent)
    if arch.final_norm and depth > 0 and arch.norm_type.scale_free:  # the stack's output at its last layer
        q[:, -1], p[:, -1] = arch.stack_output(np.ones(size), rho[:, -1])
        log2_q[:, -1] = 0.0
    elif arch.final_norm and depth > 0:   # as propagate reports it
        q[:, -1], p[:, -1], rho[:, -1], log2_q[:, -1] = stack_output_state(arch, q[:, -1], p[:, -1], rho[:, -1],
                                                                           log2_q[:, -1])
    out = shape + (k,)
    return SampledTrajectory(layers, q.reshape(out), p.reshape(out), rho.reshape(out), log2_q.reshape(out),
                             beta_c.reshape(out), beta_c_min.reshape(out), first.reshape(shape))


def _check_layers(layers) -> np.ndarray:
    """Sorted distinct integers >= 0, at least one."""
    arr = np.atleast_1d(np.asarray(layers))
    if arr.ndim != 1 or arr.size == 0 or arr.dtype.kind not in "iuf" or arr.dtype == bool:
        raise ValueError(f"layers must be a non-empty sequence of integers >= 0, got {layers!r}")
    if arr.dtype.kind == "f":
        if not (np.isfinite(arr).all() and (arr == np.round(arr)).all()):
            raise ValueError(f"layers must be integers >= 0, got {layers!r}")
        if arr.max() >= 2.0 ** 62:
            raise ValueError(f"layers must be integers below 2**62, got {arr.max()!r}")
    arr = np.unique(arr.astype(np.int64))
    if arr[0] < 0:
        raise ValueError(f"layers must be integers >= 0, got {int(arr[0])}")
    return arr


class _Chunk:
    """The segments of one chunk of cells: state in ``rows``, results at the requested layers."""

    def __init__(self, rows, layers, segment, kernels, table):
        n = len(rows)
        self.rows, self.layers, self.kernels, self.table = rows, layers, kernels, table
        self.segment = segment
        # a segment that keeps its layers is bounded in memory as well as in time
        self.kept_segment = max(1, min(segment, SEGMENT_BYTES // (_LAYER_BYTES * n)))
        self.q, self.p, self.e = (np.empty((n, layers.size)) for _ in range(3))
        self.beta_c = np.full((n, layers.size), np.nan)
        self.beta_c_min = np.full((n, layers.size), np.inf)
        self.first = np.full(n, np.nan)
        self.running_min = np.full(n, np.inf)
        self.current = 0
        if layers[0] == 0:
            self.q[:, 0], self.p[:, 0], self.e[:, 0] = rows[:, _Q0], rows[:, _P0], rows[:, _SCALE]

    def run(self, progress):
        depth = int(self.layers[-1])
        while self.current < depth:
            following = int(self.layers[np.searchsorted(self.layers, self.current, side="right")])
            if following - self.current <= self.kept_segment:
                stop = min(depth, self.current + self.kept_segment)
                self._keep_layers(stop)
            else:  # up to the block before the next requested layer, keeping only the final state
                stop = min(following - 1, self.current + self.segment)
                self._advance(stop)
            advanced, self.current = stop - self.current, stop
            if progress is not None:
                progress(len(self.rows) * advanced)

    def _advance(self, stop):
        with np.errstate(all="ignore"):
            out = self.kernels.final_states(self.rows, stop - self.current, self.table)
        if self.current == 0:
            self.first[:] = out[:, 2]
        self.running_min = np.fmin(self.running_min, out[:, 3])
        self._resume_from(out[:, 0], out[:, 1], out[:, 4])

    def _keep_layers(self, stop):
        with np.errstate(all="ignore"):
            q, p, e, beta_c = self.kernels.trajectories(self.rows, stop - self.current, self.table)
        if self.current == 0:
            self.first[:] = beta_c[:, 0]
        lo, hi = np.searchsorted(self.layers, [self.current, stop], side="right")
        offsets = self.layers[lo:hi] - self.current  # 1 .. stop - current
        self.q[:, lo:hi], self.p[:, lo:hi], self.e[:, lo:hi] = q[:, offsets], p[:, offsets], e[:, offsets]
        self.beta_c[:, lo:hi] = beta_c[:, offsets - 1]
        smallest = np.fmin.accumulate(beta_c, axis=1)
        self.beta_c_min[:, lo:hi] = np.fmin(self.running_min[:, None], smallest[:, offsets - 1])
        self.running_min = np.fmin(self.running_min, smallest[:, -1])
        self._resume_from(q[:, -1], p[:, -1], e[:, -1])

    def _resume_from(self, q, p, log2_scale):
        self.rows[:, _Q0], self.rows[:, _P0], self.rows[:, _SCALE] = q, p, log2_scale
