"""Iterate the block map over depth, broadcast over whole parameter grids."""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass

import numpy as np

from .kernels import PARAMS, kernels_for, packed_table
from .activations import activation_spec
from .checks import ParameterError, as_float_array, check_depth, check_simplex_cosine
from .architecture import NUMERIC_FIELDS, OPTIONAL_FIELDS, Architecture
from .settings import given_run
from . import softcap
from .components import Column, Component

__all__ = ["Trajectory", "propagate", "final_state", "final_state_rows", "pack_parameters", "scaled_state",
           "stack_output_state", "kernel_tree", "CHUNK_ROWS", "PARAMETER_COLUMNS"]

#: Grid cells handed to a kernel at once: bounds the memory of packed parameters.
CHUNK_ROWS = 1 << 16
#: Column of each parameter in a packed row (:func:`pack_parameters`); ``beta`` is the
#: heads' effective beta and ``p0 = q0 rho0``.
PARAMETER_COLUMNS = {name: k for k, name in enumerate(PARAMS)}


@dataclass(frozen=True)
class Trajectory:
    """Order parameters layer by layer.

    Attributes
    ----------
    q, p : ndarray, shape (..., depth + 1)
        Mean squared norm and mean overlap per coordinate; index 0 is the input. A deep
        pre-LN or no-LN stream can leave float64's range (``alpha**(2L)`` growth): there
        q and p read ``inf`` (or 0) while ``rho`` and ``log2_q`` stay exact.
    beta_critical : ndarray, shape (..., depth)
        Critical beta of each layer's attention input (``inf`` for collapsed tokens).
    cosine : ndarray or None
        ``p / q`` computed from the carried scale's mantissas (:mod:`remprop.theory.kernels`);
        None means ``p / q`` of the stored arrays.
    log2_q : ndarray or None
        ``log2 q`` per layer, finite where q itself over- or underflows; None means
        ``log2(q)`` of the stored array.
    """

    q: np.ndarray
    p: np.ndarray
    beta_critical: np.ndarray
    cosine: np.ndarray | None = None
    log2_q: np.ndarray | None = None

    @property
    def rho(self) -> np.ndarray:
        """Mean cosine similarity ``p / q`` of two tokens, per layer."""
        if self.cosine is not None:
            return self.cosine
        return self.p / self.q

    @property
    def depth(self) -> int:
        return self.q.shape[-1] - 1


def scaled_state(q, p, log2_scale):
    """``(q 2**e, p 2**e, p / q, log2 q + e)`` of a carried-scale state (inf or 0 beyond float64).

    The kernels return ``(q, p)`` with a power-of-two exponent ``e`` (see
    :mod:`remprop.theory.kernels`, "The carried scale"); the cosine and ``log2 q`` need no
    rescaling and are exact at any depth.
    """
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        if not np.any(log2_scale):  # no carried scale (post-LN, shallow stacks): the state as it is
            return q.copy(), p.copy(), p / q, np.log2(q) + log2_scale
        exponent = np.clip(log2_scale, -4000, 4000).astype(np.int64)
        return (np.ldexp(q, exponent), np.ldexp(p, exponent), p / q, np.log2(q) + log2_scale)


def stack_output_state(arch: Architecture, q, p, rho, log2_q):
    """``(q, p, rho, log2_q)`` of the stack's output (:meth:`~remprop.theory.Architecture.stack_output`)
    from the last block's :func:`scaled_state`. A scale-free final norm (LayerNorm, RMSNorm) reads only
    the cosine: ``(1, rho)``, exact at any depth. DyT reads the state itself, which its trees carry
    unscaled (no carried scale: the map is not homogeneous)."""
    if arch.norm_type.scale_free:
        q, p = arch.stack_output(np.ones(np.shape(rho)), rho)   # (1, rho): the scale drops out
        return q, p, rho, np.where(np.isnan(rho), log2_q, 0.0)
    q, p = arch.stack_output(q, p)
    with np.errstate(divide="ignore", invalid="ignore"):
        return q, p, p / q, np.log2(q)


def kernel_tree(arch: Architecture) -> Component:
    """The block the kernels compile for ``arch``: :meth:`Architecture.compose
    <remprop.theory.Architecture.compose>` around its attention, with every parameter a
    :class:`~remprop.theory.components.Column` of the rows of :func:`pack_parameters`.

    The columns are named after the fields (``beta`` is the heads' effective beta; the attention
    reads ``mean_rope_correlation`` with RoPE and ``qk_norm_dim`` with QK-norm), so the tree is
    the architecture's block (:meth:`~remprop.theory.Architecture.block`) with a placeholder for
    each number, and one compiled kernel serves every grid of the architecture
    (:func:`remprop.theory.kernels.kernels_for`).
    """
    template = copy.copy(arch)  # the same choices, placeholders for the numbers (not validated again)
    for name in NUMERIC_FIELDS + OPTIONAL_FIELDS:
        if getattr(arch, name) is not None:
            object.__setattr__(template, name, Column(name))
    object.__setattr__(template, "logit_softcap", None)  # a check on beta, not a map: not in the tree
    attention = template.attention_map(1.0)
    attention = dataclasses.replace(attention, beta=Column("beta"), **{
        name: Column(name) for name in ("mean_rope_correlation", "qk_norm_dim")
        if getattr(attention, name) is not None})
    return template.compose(attention)


def pack_parameters(arch: Architecture, beta=None, q0=None, rho0=None, **overrides):
    """Validate and broadcast beta, the numeric fields and the input state.

    Returns ``(shape, getter)`` where ``getter(start, stop)`` returns the packed
    parameter rows ``start:stop`` of the flattened grid, shape ``(stop - start, 13)``
    in the order of :data:`remprop.theory.kernels.PARAMS` (``log2_scale`` = 0: the input
    state is ``(q0, p0)``; ``mean_rope_correlation``: ``cbar_T`` with RoPE, 1 without,
    :attr:`~remprop.theory.Architecture.mean_rope_correlation`; ``qk_norm_dim``:
    :attr:`~remprop.theory.Architecture.qk_norm_width`, docs/theory.md section 19; ``beta``:
    :meth:`~remprop.theory.Architecture.effective_beta`, with QK-norm the reduced-scale factor),
    the columns that :func:`kernel_tree` reads. Rows are materialised a
    chunk at a time, so a 2000 x 2000 grid never holds eight full parameter copies.

    ``rho0`` must lie in ``[0, 1]`` when ``arch.seq_len`` is None and in
    ``[-1/(T - 1), 1]`` for ``T = arch.seq_len`` (the mean cosine of T tokens is at least
    ``-1/(T - 1)``, which tends to 0); other values raise ``ValueError`` naming rho0.
    ``q0`` and ``rho0`` default to 1 and 0.

    A :class:`~remprop.theory.RunSettings` may stand for ``arch`` (``beta``, ``q0`` and
    ``rho0`` then left out): its fields were checked when it was made and are packed as
    they are (:func:`~remprop.theory.settings.given_run`); ``overrides`` are checked either way.
    """
    arch, beta, q0, rho0 = _run_inputs(arch, beta, q0, rho0)
    values = {"beta": np.asarray(arch.effective_beta(beta), dtype=np.float64)}
    values.update(arch.numeric())
    values["mean_rope_correlation"] = np.asarray(arch.mean_rope_correlation, dtype=np.float64)
    values["qk_norm_dim"] = np.asarray(float(arch.qk_norm_width))
    for name, value in overrides.items():
        values[name] = as_float_array(name, value, nonnegative=True)
    values["q0"] = q0
    values["rho0"] = rho0
    names = [name for name in PARAMS if name not in ("p0", "log2_scale")] + ["rho0"]
    try:
        shape = np.broadcast_shapes(*(values[n].shape for n in names))
    except ValueError:
        described = ", ".join(f"{n}{values[n].shape}" for n in names if values[n].ndim)
        raise ValueError(f"beta and the numeric fields do not broadcast together: {described}") from None
    values["p0"] = q0 * rho0
    values["log2_scale"] = np.zeros(())
    columns = [values[name] for name in PARAMS]
    # a column constant over the grid is filled with its number; the others read a flat range of their
    # broadcast view (2.5x faster than gathering every column at unravelled indices: 13 ms of a 500 x 500
    # diagram's 0.17 s)
    views = [float(c.ravel()[0]) if c.size == 1 else np.broadcast_to(c, shape) for c in columns]
    size = int(np.prod(shape, dtype=np.int64))

    def rows(start, stop):
        out = np.empty((stop - start, len(views)))
        for k, view in enumerate(views):
            out[:, k] = view if isinstance(view, float) else view.flat[start:stop]
        return out

    return shape, size, rows


def _run_inputs(arch, beta, q0, rho0):
    """``(arch, beta, q0, rho0)`` of a call, as float arrays: a RunSettings' own (checked when
    it was made, trusted here) or the arguments, checked."""
    run = given_run(arch, beta=beta, q0=q0, rho0=rho0)
    if run is not None:
        return run.arch, *(np.asarray(v, dtype=np.float64) for v in (run.beta, run.q0, run.rho0))
    if not isinstance(arch, Architecture):
        raise ValueError(f"arch must be a remprop.theory.Architecture (or a RunSettings), got {type(arch).__name__}")
    if beta is None:
        raise ValueError("beta must be given with an Architecture (or pass a RunSettings)")
    beta = as_float_array("beta", beta, positive=True)
    q0 = as_float_array("q0", 1.0 if q0 is None else q0, positive=True)
    rho0 = as_float_array("rho0", 0.0 if rho0 is None else rho0, low=-1.0, high=1.0)
    # T tokens have mean cosine >= -1/(T - 1): rho0 >= 0 for arch.seq_len None (the
    # T -> infinity softmax map would give negative variances), >= -1/(T - 1) otherwise
    rho0 = check_simplex_cosine("rho0", rho0, arch.seq_len)
    softcap.check_logit_softcap(arch, beta, q0)
    return arch, beta, q0, rho0


def _arch_and_depth(arch, depth):
    """The architecture and depth of a call: a RunSettings' own (trusted), or ``depth`` checked."""
    run = given_run(arch, depth=depth)
    return (run.arch, run.depth) if run is not None else (arch, check_depth(depth))


def propagate(arch: Architecture, beta=None, depth: int = None, q0=None, rho0=None) -> Trajectory:
    r"""Propagate the order parameters (q, p) through ``depth`` blocks.

    Each block applies the maps of its components in the order given by
    ``arch.norm`` (see :class:`~remprop.theory.Architecture`); the attention uses the REM
    participation ratio of its own input: asymptotic, ``Y2 = max(0, 1 - beta_c / beta)``
    with ``beta_c = sqrt(2 / (q (q - p)))``, when ``arch.seq_len`` is None, else the
    exact finite-T ``Y2`` (tabulated, relative error <= 1e-6; see
    :func:`~remprop.theory.rem.participation_table`).

    Parameters
    ----------
    arch : Architecture or RunSettings
        The stack; or a :class:`~remprop.theory.RunSettings`, which holds ``beta``,
        ``depth``, ``q0`` and ``rho0`` (then left out) and is trusted: its fields were
        checked when it was made.
    beta : array_like
        Query/key scale (``s_qk^2 = beta sqrt(log T) / d``), > 0.
    depth : int
        Number of blocks, >= 1.
    q0 : array_like, optional
        Input mean squared norm per coordinate, > 0 (default 1).
    rho0 : array_like, optional
        Input mean cosine of two tokens (default 0): in ``[0, 1]`` when ``arch.seq_len`` is None
        (T tokens have mean cosine ``>= -1/(T - 1) -> 0``; a negative cosine would make
        the T -> infinity softmax map return negative variances), in
        ``[-1/(T - 1), 1]`` for ``T = arch.seq_len``.

    Returns
    -------
    Trajectory
        ``q``, ``p``, ``rho`` of shape ``broadcast(beta, arch fields, q0, rho0) +
        (depth + 1,)``; the last axis is depth (0 = input). With ``arch.final_norm`` the last
        entry is the stack's output after its final norm (``q = 1``, ``log2_q = 0``, the
        cosine unchanged: :meth:`~remprop.theory.Architecture.stack_output`, docs/theory.md
        section 19); ``beta_critical`` is that of the blocks.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Result 1 and Sec. 4.

    Examples
    --------
    >>> from remprop.theory import Architecture, propagate
    >>> traj = propagate(Architecture(), beta=[0.5, 1.0], depth=60)
    >>> traj.rho.shape
    (2, 61)
    """
    run, (arch, depth) = arch, _arch_and_depth(arch, depth)
    shape, size, rows = pack_parameters(run, beta, q0, rho0)
    q = np.empty((size, depth + 1))
    p = np.empty((size, depth + 1))
    exponent = np.empty((size, depth + 1))
    beta_c = np.empty((size, depth))
    kernels = kernels_for(kernel_tree(arch))
    table = packed_table(arch.seq_len)
    for start in range(0, size, CHUNK_ROWS):
        stop = min(size, start + CHUNK_ROWS)
        q[start:stop], p[start:stop], exponent[start:stop], beta_c[start:stop] = kernels.trajectories(
            rows(start, stop), depth, table)
    _check_activation_finite(arch, q, exponent)
    q, p, rho, log2_q = scaled_state(q, p, exponent)
    if arch.final_norm:
        q[:, -1], p[:, -1], rho[:, -1], log2_q[:, -1] = stack_output_state(arch, q[:, -1], p[:, -1], rho[:, -1],
                                                                           log2_q[:, -1])
    layers = shape + (depth + 1,)
    return Trajectory(q.reshape(layers), p.reshape(layers), beta_c.reshape(shape + (depth,)),
                      cosine=rho.reshape(layers), log2_q=log2_q.reshape(layers))


def final_state(arch: Architecture, beta=None, depth: int = None, q0=None, rho0=None, progress=None):
    """Final-layer (q, p) and critical betas without storing trajectories.

    Returns a dict of arrays of the broadcast shape: ``q``, ``p``, ``rho``,
    ``beta_critical_first`` (first attention layer) and ``beta_critical_min``
    (smallest over layers). ``progress``, if given, is called with the number of
    cells finished after each chunk. Inputs as in :func:`propagate` (``rho0 >= 0`` when
    ``arch.seq_len`` is None, ``>= -1/(T - 1)`` otherwise). ``log2_q`` is ``log2`` of the
    final q, finite where a deep pre-LN or no-LN stream leaves float64 (q reads inf there;
    ``rho`` is exact at any depth, see :class:`Trajectory`). With ``arch.final_norm`` the final
    state is the output of the final norm, as in :func:`propagate`. A
    :class:`~remprop.theory.RunSettings` may stand for ``arch``, ``beta``, ``depth``, ``q0``
    and ``rho0``, trusted as in :func:`propagate`.
    """
    run, (arch, depth) = arch, _arch_and_depth(arch, depth)
    if progress is not None and not callable(progress):
        raise ValueError(f"progress must be callable or None, got {progress!r}")
    shape, size, rows = pack_parameters(run, beta, q0, rho0)
    out = np.empty((size, 5))
    kernels = kernels_for(kernel_tree(arch))
    table = packed_table(arch.seq_len)
    for start in range(0, size, CHUNK_ROWS):
        stop = min(size, start + CHUNK_ROWS)
        out[start:stop] = kernels.final_states(rows(start, stop), depth, table)
        if not activation_spec(arch.activation).builtin and np.isnan(out[start:stop, 0]).any():
            row = start + int(np.flatnonzero(np.isnan(out[start:stop, 0]))[0])
            q_row, _, e_row, _ = kernels.trajectories(rows(row, row + 1), depth, table)
            _check_activation_finite(arch, q_row, e_row)
        if progress is not None:
            progress(stop - start)
    q, p, rho, log2_q = scaled_state(out[:, 0], out[:, 1], out[:, 4])
    if arch.final_norm:
        q, p, rho, log2_q = stack_output_state(arch, q, p, rho, log2_q)
    return {"q": q.reshape(shape), "p": p.reshape(shape), "rho": rho.reshape(shape),
            "log2_q": log2_q.reshape(shape),
            "beta_critical_first": out[:, 2].reshape(shape),
            "beta_critical_min": out[:, 3].reshape(shape)}


def _check_activation_finite(arch: Architecture, q, log2_scale):
    """Refuse trajectories in which a user-registered activation broke a finite state.

    A registered activation is checked on ``[-32, 32]`` only (:func:`~remprop.theory.register_activation`);
    where it raises or returns a non-finite value at a quadrature node beyond, the kernels
    (which cannot raise) read ``nan``. A state that turns ``nan`` from a finite positive ``q`` (a
    stream leaving float64 reads ``inf`` first) is that failure: :class:`~remprop.theory.checks.ParameterError`
    naming ``activation``, the block and the input ``q``. Built-in activations are defined
    everywhere and pass. ``q``, ``log2_scale``: the kernels' trajectories, shape ``(n, depth + 1)``.
    """
    if activation_spec(arch.activation).builtin:
        return
    with np.errstate(invalid="ignore"):
        broken = np.isnan(q[:, 1:]) & np.isfinite(q[:, :-1]) & (q[:, :-1] > 0.0)
    if broken.any():
        row, layer = np.argwhere(broken)[0]
        with np.errstate(over="ignore"):
            q_in = float(q[row, layer] * np.exp2(log2_scale[row, layer]))
        raise ParameterError("activation", f"activation {arch.activation!r}: the state turned nan in block "
                             f"{layer + 1} from a finite input (q = {q_in:.4g}): the activation raised or returned "
                             "a non-finite value at an input beyond [-32, 32], the range it was checked on; "
                             "register a function that is finite on the whole real line")


def final_state_rows(arch: Architecture, rows, depth: int):
    """Final states of packed parameter rows, as the kernels compute them.

    ``rows`` has shape ``(n, len(PARAMETER_COLUMNS))``, laid out as
    :func:`pack_parameters` returns them (effective beta already applied: nothing is
    re-validated or re-packed, so no factor is applied twice). Only ``arch``'s
    structure (its :func:`kernel_tree`) and ``seq_len`` are read; its numeric
    fields are ignored in favour of the rows. Returns shape ``(n, 5)``: ``q``, ``p``, the
    first layer's and the smallest per-head critical beta, and ``log2_scale``: the final
    state is ``(q, p) * 2**log2_scale`` and its cosine ``p / q``. A run continues from it by
    writing columns 0, 1 and 4 into the rows' ``q0``, ``p0`` and ``log2_scale``. Callers that vary one column
    (e.g. ``alpha_sa`` in a search) edit the rows and call this; keep ``n`` to about
    :data:`CHUNK_ROWS` per call. ``arch.final_norm`` is not applied here (the rows are the
    last block's output, from which a run continues; :meth:`~remprop.theory.Architecture.stack_output`
    gives the stack's output).
    """
    depth = check_depth(depth)
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[1] != len(PARAMETER_COLUMNS):
        raise ValueError(f"rows must have shape (n, {len(PARAMETER_COLUMNS)}), got {rows.shape}")
    kernels = kernels_for(kernel_tree(arch))
    with np.errstate(all="ignore"):
        return kernels.final_states(rows, depth, packed_table(arch.seq_len))


# Keep the field list in one place for callers that broadcast over it.
assert set(NUMERIC_FIELDS) | set(OPTIONAL_FIELDS) <= set(PARAMS)
