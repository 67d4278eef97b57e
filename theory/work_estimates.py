"""How long and how large a computation will be, before it runs: estimates and segments.

The numbers a caller needs before it starts a depth or a grid (docs/theory.md section 6
for the diagrams, section 1 for the propagation it times):

* time -- :func:`kernel_speed` times a short call of the compiled depth kernel of the
  architecture (:mod:`remprop.theory.kernels`) on this machine, once per kernel and day
  (kept on disk beside the compiled code); :func:`kernel_seconds` scales it to
  ``cells x depth`` (``calls`` kernel calls);
* memory -- :func:`trajectory_bytes`, :func:`diagram_bytes` and :func:`simulation_bytes`
  count the arrays a computation keeps alive;
* segments -- long runs advance the kernels :func:`segment_layers` blocks per call, so
  that progress is reported and Ctrl-C is honoured between calls (a compiled call cannot
  be interrupted); :class:`WorkInterrupted` says where the work stopped, for any caller
  (a notebook as well as the command line);
* drawing -- a figure cannot show more cells than its pixels: :func:`spread_indices`
  picks the rows and columns drawn (at most :data:`MAX_DRAWN_PER_AXIS`) and the layers
  a table prints.

What a command does with the estimates -- refuse work above ``--max-seconds`` or
``--max-memory``, exit 130 on Ctrl-C -- is the command line's
(:mod:`remprop.cli.limits`, :mod:`remprop.cli.entry`).
"""
from __future__ import annotations

import contextlib
import hashlib
import json
import time
from typing import NamedTuple

import numpy as np

from .checks import check_count
from ._jit import source_digest
from .kernels import kernels_for
from .kernels._engine import BATCH
from .rem.disk_cache import cache_directory, write_atomically
from .propagation import CHUNK_ROWS, final_state_rows, kernel_tree, pack_parameters

__all__ = ["SPEED_MAX_AGE", "SEGMENT_SECONDS", "SEGMENT_BYTES", "SEGMENTED_ABOVE_SECONDS",
           "MAX_DRAWN_PER_AXIS", "KernelSpeed", "WorkInterrupted", "is_ctrl_c", "stops_on_ctrl_c",
           "kernel_speed", "kernel_seconds", "run_seconds", "segment_layers", "trajectory_bytes", "diagram_bytes",
           "simulation_bytes", "simulation_flops", "simulation_seconds", "SIMULATION_BLOCK_SECONDS", "gram_theory_bytes", "causal_gram_bytes", "rope_seconds", "FLOPS_PER_SECOND", "flops_seconds", "spread_indices"]

#: Target duration of one kernel call of a segmented run: the delay before Ctrl-C is
#: honoured and between two progress updates.
SEGMENT_SECONDS = 0.25
#: Most memory the per-layer arrays of one segment may take (a trajectory segment keeps
#: q, p, the scale exponent and beta_c of every layer: 32 bytes per cell and layer).
SEGMENT_BYTES = 64 * 2 ** 20
#: Runs estimated longer than this are cut into segments; shorter ones make one call.
SEGMENTED_ABOVE_SECONDS = 2.0
#: Most rows and columns of a grid a figure draws (a saved grid keeps them all).
MAX_DRAWN_PER_AXIS = 1000
#: Work (cells x layers) small enough to run in one call without timing the kernel:
#: even the slowest built-in kernel (about 5 microseconds a block) takes well under a second.
_SMALL_WORK = 1 << 16
#: Wall time a calibration aims at: long enough to dwarf the ~10 ms cost of a parallel call.
_CALIBRATION_SECONDS = 0.03
#: A kernel's timing read from disk is used for this long (seconds), then timed again.
SPEED_MAX_AGE = 86400.0


class WorkInterrupted(KeyboardInterrupt):
    """Ctrl-C between two segments of a long run; the message says where it stopped.

    A :class:`KeyboardInterrupt` (so it stops whatever catches those), with ``done`` and
    ``total`` (layers) and the message ``"interrupted at layer done of total"``.
    """

    def __init__(self, done, total, unit="layer", detail=""):
        self.done, self.total = int(done), int(total)
        super().__init__(f"interrupted at {unit} {self.done} of {self.total}{detail}")


def is_ctrl_c(error) -> bool:
    """Whether ``error`` is Ctrl-C: a KeyboardInterrupt, or the SystemError of a compiled call it interrupted.

    Python runs its SIGINT handler at the next bytecode; when that happens inside a numba
    call (which runs a little Python to unpickle its constants), the call returns with the
    KeyboardInterrupt set and Python reports a chain of ``SystemError: ... returned a result
    with an exception set``, each caused by the next, down to the KeyboardInterrupt.
    """
    while isinstance(error, SystemError):
        error = error.__cause__
    return isinstance(error, KeyboardInterrupt)


@contextlib.contextmanager
def stops_on_ctrl_c(where):
    """Turn Ctrl-C in the block (:func:`is_ctrl_c`) into :class:`WorkInterrupted`.

    ``where()`` is called then and returns the arguments of :class:`WorkInterrupted`
    (``done, total[, unit, detail]``): the place the work had reached.
    """
    try:
        yield
    except (KeyboardInterrupt, SystemError) as error:
        if not is_ctrl_c(error) or isinstance(error, WorkInterrupted):
            raise
        raise WorkInterrupted(*where()) from None


class KernelSpeed(NamedTuple):
    """Timing of one architecture's depth kernel on this machine (:func:`kernel_speed`).

    Attributes
    ----------
    call_seconds : float
        Fixed cost of one kernel call (thread start-up, argument checks).
    round_seconds : float
        Wall time for every thread to advance one batch of cells by one block.
    cells_per_round : int
        Cells advanced together in one round: the kernels' batch times the threads.
    single_seconds : float
        Wall time to advance a single cell by one block.
    """

    call_seconds: float
    round_seconds: float
    cells_per_round: int
    single_seconds: float

    def layer_seconds(self, cells) -> float:
        """Seconds to advance ``cells`` cells by one block: whole rounds, and for fewer cells
        than a round a linear interpolation from a single cell's time."""
        if cells >= self.cells_per_round:
            return -(-cells // self.cells_per_round) * self.round_seconds
        share = (max(cells, 1) - 1) / max(self.cells_per_round - 1, 1)
        return self.single_seconds + share * (self.round_seconds - self.single_seconds)


def kernel_speed(arch) -> KernelSpeed:
    """Time the compiled depth kernel of ``arch`` on this machine (cached per kernel and process).

    One untimed call compiles (or loads) the kernel; then one block and ``D`` blocks of
    ``BATCH x threads`` copies of the architecture's first packed row are timed (the best
    of a few calls), with ``D`` grown until the call takes about 30 ms:
    ``call_seconds = t(1) - round_seconds`` and ``round_seconds = (t(D) - t(1)) / (D - 1)``;
    the same for a single row gives ``single_seconds``. The rows hold the architecture's
    numbers, so a slow activation (quadrature moments) is timed as it runs. About 0.5 s.

    The timing is written to disk beside the compiled kernels
    (:func:`remprop.theory.rem.disk_cache.cache_directory`, one small JSON file per kernel and
    numba thread count) and read by later processes for :data:`~remprop.theory.work_estimates.SPEED_MAX_AGE` (a day), so a
    command-line call does not time the kernel again; a file that cannot be read or written
    only means timing again. Kernels with a user-registered activation (not cached on disk
    by numba either) are timed once per process.

    Parameters
    ----------
    arch : Architecture

    Returns
    -------
    KernelSpeed
    """
    tree = kernel_tree(arch)
    key = tree.kernel_key()
    if key not in _SPEEDS:
        import numba

        path = None
        if kernels_for(tree).cacheable:
            path = cache_directory() / f"kernel-speed-{_digest(key)}-{source_digest()}-t{numba.get_num_threads()}.json"
        speed = _read_speed(path)
        if speed is None:
            _, _, rows = pack_parameters(arch, 1.0)
            speed = _calibrate(arch, rows(0, 1))
            _write_speed(path, speed)
        _SPEEDS[key] = speed
    return _SPEEDS[key]


def _digest(key) -> str:
    """Sixteen hex digits of SHA-256 over ``repr(key)`` (a kernel key: the same in every process)."""
    return hashlib.sha256(repr(key).encode()).hexdigest()[:16]


def _read_speed(path):
    """The :class:`KernelSpeed` stored at ``path`` if it is younger than :data:`SPEED_MAX_AGE`, else None."""
    if path is None:
        return None
    try:
        if time.time() - path.stat().st_mtime > SPEED_MAX_AGE:
            return None
        stored = json.loads(path.read_text())
        speed = KernelSpeed(*(float(stored[name]) for name in KernelSpeed._fields))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    finite = all(np.isfinite(value) and value >= 0.0 for value in speed)
    return speed._replace(cells_per_round=int(speed.cells_per_round)) if finite and speed.cells_per_round >= 1 else None


def _write_speed(path, speed):
    """Store ``speed`` at ``path`` (:func:`~remprop.theory.rem.disk_cache.write_atomically`)."""
    if path is not None:
        write_atomically(path, lambda handle: handle.write(json.dumps(speed._asdict()).encode()))


#: Timings by kernel key (the tree's structure): the kernel, not the numbers, decides the speed.
_SPEEDS: dict = {}


def _calibrate(arch, row) -> KernelSpeed:
    import numba

    cells = BATCH * max(1, numba.get_num_threads())

    def timed(params, depth, repeats=1):
        best = np.inf
        for _ in range(repeats):
            start = time.perf_counter()
            final_state_rows(arch, params, depth)
            best = min(best, time.perf_counter() - start)
        return best

    def per_layer(params):
        """(seconds of a one-block call, seconds per further block) for these rows."""
        one, depth = timed(params, 1, 3), 16
        while True:
            many = timed(params, depth)
            if many - one >= _CALIBRATION_SECONDS or depth >= 1 << 22:
                break
            depth *= 4
        many = min(many, timed(params, depth, 2))  # the least disturbed of three
        step = max((many - one) / (depth - 1), 1e-12)
        return max(one - step, 0.0), step

    timed(row, 1)  # compile or load from the cache
    call_seconds, round_seconds = per_layer(np.repeat(row, cells, axis=0))
    _, single_seconds = per_layer(row)
    return KernelSpeed(call_seconds, round_seconds, cells, min(single_seconds, round_seconds))


def kernel_seconds(arch, cells, depth, calls=None) -> float:
    r"""Estimated wall time of the depth kernels on ``cells`` cells through ``depth`` blocks.

    .. math::
        t = n_{calls}\, t_{call} + L \lceil n / n_{round} \rceil t_{round}

    with the timings of :func:`kernel_speed` (``n_round`` cells advance together, one batch
    per thread; fewer cells than a round: :meth:`KernelSpeed.layer_seconds`). ``calls``
    defaults to one call per :data:`~remprop.theory.propagation.CHUNK_ROWS` cells. An
    estimate: the machine's load may change after the timing.
    """
    cells = check_count("cells", cells, 0)
    depth = check_count("depth", depth, 0)
    if cells == 0 or depth == 0:
        return 0.0
    speed = kernel_speed(arch)
    calls = -(-cells // CHUNK_ROWS) if calls is None else check_count("calls", calls, 0)
    return calls * speed.call_seconds + float(depth) * speed.layer_seconds(cells)


def run_seconds(arch, cells, depth, passes=1) -> float:
    """Estimated seconds of ``passes`` runs of ``cells`` cells through ``depth`` blocks, one call per chunk.

    ``passes x`` :func:`kernel_seconds`; work of at most 2**16 block steps in all is not
    timed (it takes well under a second with every built-in kernel) and counts as 0.
    """
    cells = check_count("cells", cells, 0)
    depth = check_count("depth", depth, 0)
    passes = check_count("passes", passes, 0)
    if cells * depth * passes <= _SMALL_WORK:
        return 0.0
    return passes * kernel_seconds(arch, cells, depth)


def segment_layers(arch, cells, depth, work=1):
    """Blocks per kernel call for ``cells`` cells, so that one call takes about :data:`SEGMENT_SECONDS`.

    Returns ``depth`` (a single call) when the whole run -- ``work`` passes of ``cells``
    cells through ``depth`` blocks -- is estimated at most :data:`SEGMENTED_ABOVE_SECONDS`
    (without timing anything when it is tiny), otherwise the number of blocks one call
    advances in :data:`SEGMENT_SECONDS`, at least 1. A segment that keeps every layer
    (a trajectory) is further bounded by :data:`SEGMENT_BYTES` by its caller.
    """
    cells = max(1, check_count("cells", cells, 0))
    depth = check_count("depth", depth, 1)
    if run_seconds(arch, cells, depth, work) <= SEGMENTED_ABOVE_SECONDS:
        return depth
    return int(min(depth, max(1, SEGMENT_SECONDS // kernel_speed(arch).layer_seconds(cells))))


def trajectory_bytes(cells, layers) -> int:
    """Bytes of whole trajectories of ``cells`` cells over ``layers`` layers, as
    :func:`~remprop.theory.propagate` keeps them.

    Eight float64 arrays of ``cells x layers``: the kernel's q, p, scale exponent and
    beta_c, and the rescaled q, p, rho and log2 q made from them (64 bytes per cell and layer).
    """
    return 64 * check_count("cells", cells, 0) * check_count("layers", layers, 0)


def diagram_bytes(n_betas, n_alphas) -> int:
    """Bytes a trainability diagram of ``n_betas x n_alphas`` cells holds at its peak, figure included.

    Per cell (bytes): the kernels' final states (5 float64: 40), the rescaled q, p, rho and
    log2 q (32), the cell's critical beta (8), the phase (1) and the temporaries of its
    classification (16), the phase codes as Python lists for the JSON summary (8); about
    105 bytes. The figure is drawn from at most :data:`MAX_DRAWN_PER_AXIS` rows and columns
    (about 200 bytes per drawn cell: mesh, hatching and contour paths).
    """
    n_betas = check_count("n_betas", n_betas, 1)
    n_alphas = check_count("n_alphas", n_alphas, 1)
    drawn = min(n_betas, MAX_DRAWN_PER_AXIS) * min(n_alphas, MAX_DRAWN_PER_AXIS)
    return 105 * n_betas * n_alphas + 200 * drawn


def simulation_bytes(width, seq_len, batch, dtype_bytes=4, *, d_ff=None, heads=1) -> int:
    r"""Bytes of the tensors alive while one block of a simulated stack runs (torch).

    .. math::
        b \,\big[B T (8 d + 2 d_{ff}) + 3 B H T^2 + 4 d^2 + 2 d\, d_{ff}\big]

    for ``B`` sequences of ``T`` tokens of width ``d`` in a dtype of ``b`` bytes: the
    stream, its normalised copy, queries, keys, values, the attention output and two
    temporaries (``8 B T d``), the MLP's hidden layer before and after the activation,
    scores, probabilities and a temporary of every head (``3 B H T^2``), and one block's
    weights.
    """
    width = check_count("width", width, 1)
    seq_len = check_count("seq_len", seq_len, 1)
    batch = check_count("batch", batch, 1)
    d_ff = width if d_ff is None else check_count("d_ff", d_ff, 1)
    heads = check_count("heads", heads, 1)
    dtype_bytes = check_count("dtype_bytes", dtype_bytes, 1)
    activations = batch * seq_len * (8 * width + 2 * d_ff) + 3 * batch * heads * seq_len ** 2
    return dtype_bytes * (activations + 4 * width ** 2 + 2 * width * d_ff)


def simulation_flops(width, seq_len, batch, depth, *, d_ff=None, passes=1) -> float:
    r"""Floating-point operations of simulating ``batch`` sequences through ``depth`` blocks (torch).

    .. math::
        F = n_{passes}\, L\, 2 B T\big[4 d^2 + 2 d\, d_{ff} + 2 T d\big]

    per block: the query, key, value and output projections (``4 d^2`` per token), the MLP's
    two layers (``2 d d_ff``) and the scores and their weighted sum (``2 T d``), two operations
    per multiply-add; ``passes`` forward passes (a causal model is probed twice). With
    :func:`flops_seconds` it is the time estimate of a simulation (an upper estimate: torch's
    matrix products on several cores or a GPU run faster than one core's
    :data:`FLOPS_PER_SECOND`).
    """
    width = check_count("width", width, 1)
    seq_len = check_count("seq_len", seq_len, 1)
    batch = check_count("batch", batch, 1)
    depth = check_count("depth", depth, 1)
    d_ff = width if d_ff is None else check_count("d_ff", d_ff, 1)
    passes = check_count("passes", passes, 1)
    per_token = 4.0 * width ** 2 + 2.0 * width * d_ff + 2.0 * seq_len * width
    return 2.0 * passes * depth * batch * seq_len * per_token


#: Fixed cost of running one simulated block, whatever its size (a dozen torch operations
#: dispatched, hooks read): about 1-2 ms on a CPU core, measured on the tiny stacks of the tests.
SIMULATION_BLOCK_SECONDS = 2e-3


def simulation_seconds(width, seq_len, batch, depth, *, d_ff=None, passes=1, flops_per_second=None) -> float:
    """Estimated seconds of simulating ``batch`` sequences through ``depth`` blocks:
    :func:`simulation_flops` at ``flops_per_second`` (default :data:`FLOPS_PER_SECOND`, one CPU
    core; the command line measures its device's rate), plus :data:`SIMULATION_BLOCK_SECONDS`
    per block run (``passes x depth``)."""
    flops = simulation_flops(width, seq_len, batch, depth, d_ff=d_ff, passes=passes)
    rate = FLOPS_PER_SECOND if flops_per_second is None else float(flops_per_second)
    return flops / rate + passes * depth * SIMULATION_BLOCK_SECONDS


def gram_theory_bytes(seq_len, depth, draws, *, sampled=False) -> int:
    r"""Bytes of one run of the Gram-matrix theory (:func:`~remprop.theory.gram_state.propagate_gram`).

    The mean Gram state keeps every draw's correction and its plain sample, two float64
    arrays of ``draws x T x T`` (``16 draws T^2``); the sampled chains (``sampled=True``)
    keep the mean cosine, q and p of every chain and layer and one seed sequence per chain
    (``24 draws (L + 1) + 256 draws``). Both add about twenty ``T x T`` temporaries of one
    block (the score kernel's square root, scores, probabilities, products):

    .. math:: b = 160\, T^2 + \begin{cases} 16\, n_{draws} T^2 & \text{mean} \\
              n_{draws} (24 (L + 1) + 256) & \text{sampled} \end{cases}
    """
    seq_len = check_count("seq_len", seq_len, 1)
    depth = check_count("depth", depth, 1)
    draws = check_count("draws", draws, 1)
    kept = draws * (24 * (depth + 1) + 256) if sampled else 16 * draws * seq_len ** 2
    return 160 * seq_len ** 2 + kept


def causal_gram_bytes(arch, depth, seq_len, draws=4) -> int:
    r"""Bytes of one run of the causal Gram state (:func:`~remprop.theory.causal.propagate_causal_gram`).

    The draws are summed as they come (no per-draw array is kept), so the block's ``T x T``
    temporaries, about twenty (``160 T^2``, as :func:`gram_theory_bytes`), and with RoPE the
    stacked draws of one chunk of rotating frequencies: ``2 k T^2`` doubles (``k`` frequencies at
    once, at most ``CHUNK_DOUBLES / (2 T^2)``), held four times at once (the normals, the two
    matrix products and the products' temporaries):

    .. math:: b = 160\, T^2 + 4 \cdot 8 \cdot 2 k T^2, \qquad
              k = \min(F_{\rm rot}, \max(1, \lfloor C / (2 T^2) \rfloor))

    Measured (SmolLM2's rotary heads, draws 8, tracemalloc peak): T = 256, 77 MiB (estimate
    107 MiB); T = 512, 246 MiB (300 MiB). Without the chunk term the estimate was 11 and
    44 MiB: the rotary draws are most of the memory (issue 46).
    """
    from ._causal_gram import _CausalGramWalker
    from .rem.rope import rope_frequencies

    seq_len = check_count("seq_len", seq_len, 1)
    check_count("depth", depth, 1)
    check_count("draws", draws, 1)
    square = seq_len ** 2
    chunk = 0
    if arch.positions.rotary:
        frequencies = np.asarray(rope_frequencies(arch.head_dim, arch.rope_base), dtype=np.float64)
        rotating = int(np.count_nonzero(frequencies * (seq_len - 1) >= _CausalGramWalker.SLOW))
        chunk = min(rotating, max(1, _CausalGramWalker.CHUNK_DOUBLES // (2 * square)))
    return 160 * square + 4 * 8 * 2 * chunk * square


def rope_seconds(head_dim) -> float:
    """Estimated seconds of the mean rotary correlation ``cbar_T`` of one head of width ``head_dim``.

    :func:`~remprop.theory.rem.rope_mean_correlation` sums ``head_dim / 2`` frequencies (in
    bounded memory, once per ``(T, d_H, base)``: it is cached); the time per frequency is
    timed on this machine once per process. Heads up to ``2**21`` wide are not timed (well
    under a second) and count as 0.
    """
    head_dim = check_count("head_dim", head_dim, 2)
    if head_dim <= _SMALL_ROPE_HEAD:
        return 0.0
    global _ROPE_FREQUENCY_SECONDS
    if _ROPE_FREQUENCY_SECONDS is None:
        from .rem.rope import _mean_correlation

        width = 2 * 2 ** 18
        best = np.inf
        for base in (10000.0, 10001.0):  # two bases: the cached first call is not timed again
            start = time.perf_counter()
            _mean_correlation(512, width, base + np.random.default_rng().random())
            best = min(best, time.perf_counter() - start)
        _ROPE_FREQUENCY_SECONDS = best / (width // 2)
    return head_dim // 2 * _ROPE_FREQUENCY_SECONDS


#: Head widths whose rotary sum is not timed (:func:`rope_seconds`).
_SMALL_ROPE_HEAD = 1 << 21
#: Seconds per frequency of the rotary sum on this machine (timed once by :func:`rope_seconds`).
_ROPE_FREQUENCY_SECONDS = None
#: Floating-point operations per second assumed by :func:`flops_seconds`: the low end of the
#: 10-20 GFLOP/s of one CPU core on the matrix products of the causal Gram walker
#: (:data:`remprop.theory.causal.AUTO_GRAM_FLOPS`).
FLOPS_PER_SECOND = 1e10


def flops_seconds(flops) -> float:
    """Estimated seconds of ``flops`` floating-point operations on one CPU core
    (``flops /`` :data:`FLOPS_PER_SECOND`): dense matrix work such as
    :func:`~remprop.theory.causal.causal_gram_flops` counts."""
    return float(flops) / FLOPS_PER_SECOND


def spread_indices(count, at_most):
    """At most ``at_most`` evenly spread indices of ``range(count)``, both ends included.

    >>> spread_indices(11, 3)
    [0, 5, 10]
    """
    count = check_count("count", count, 0)
    at_most = check_count("at_most", at_most, 2)
    if count <= at_most:
        return list(range(count))
    return sorted({round(k * (count - 1) / (at_most - 1)) for k in range(at_most)})
