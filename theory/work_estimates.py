"""How long and how large a computation will be, before it runs: estimates and segments.

The numbers a caller needs before it starts a depth or a grid (docs/theory.md section 6
for the diagrams, section 1 for the propagation it times):

* time -- :func:`kernel_speed` adds up the costs of the instructions of the architecture's
  lowered program (:mod:`remprop.theory.kernels`), constants measured once by
  benchmarks/bench_work_estimates.py (nothing is timed here); :func:`kernel_seconds` scales it
  to ``cells x depth`` (``calls`` kernel calls);
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
from typing import NamedTuple

import numpy as np

from ._fast_gram_attention import ROW_CHUNK, VALUE_WIDTH, nystrom_blocks, score_width
from .activations import activation_spec
from .activations.pair_moments import CORRELATION_NODES
from .checks import check_count
from .components.attention_scale import head_frequencies
from .kernels import kernels_for
from .kernels._engine import BATCH
from .propagation import CHUNK_ROWS, kernel_tree

__all__ = ["SEGMENT_SECONDS", "SEGMENT_BYTES", "SEGMENTED_ABOVE_SECONDS", "MAX_DRAWN_PER_AXIS", "KernelSpeed",
           "WorkInterrupted", "is_ctrl_c", "stops_on_ctrl_c", "kernel_speed", "instruction_kinds",
           "cell_block_seconds", "INSTRUCTION_SECONDS", "BLOCK_SECONDS", "DISPATCH_SECONDS", "CALL_SECONDS",
           "ROPE_FREQUENCY_SECONDS", "kernel_seconds", "run_seconds", "segment_layers", "trajectory_bytes",
           "diagram_bytes", "simulation_bytes", "simulation_flops", "simulation_seconds", "SIMULATION_BLOCK_SECONDS",
           "gram_theory_bytes", "causal_gram_bytes", "causal_score_width", "GRAM_ROW_CHUNK", "rope_seconds",
           "FLOPS_PER_SECOND", "flops_seconds",
           "spread_indices"]

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
#: Work (cells x layers) small enough to count as no time: even the slowest built-in kernel
#: (about 5 microseconds a block) takes well under a second.
_SMALL_WORK = 1 << 16

# The speed of the kernels: constants measured by benchmarks/bench_work_estimates.py on 2026-12-02 (its
# results: docs/data/work-estimates.json), which times the engine on 35 architectures with one thread
# (the least of 2 passes) and fits these costs to the programs' instructions (non-negative least squares
# on relative errors): refitted after the engine's batches grew to 128 cells with their operands filled
# once a depth run, on two cores at a load of 3 (the least of its passes reads about a quiet machine).
# They are a quiet machine's seconds, as every estimate here: the command line multiplies them by the
# machine's load (:mod:`remprop.machine`); nothing here reads the machine. The estimates of the 70
# timings: median 0.995 of the measured,
# 0.49-1.33 with a norm in the stream; without one, smooth activations cost 10-100x more deep in the
# stack than near its input (the benchmark's docstring; down to 0.004 there), which constants measured
# near the input miss.
#: Seconds per cell of one instruction of each kind (:func:`instruction_kinds`), cells in batches (a
#: zero: within the spread of :data:`BLOCK_SECONDS` and :data:`DISPATCH_SECONDS`, into which the fit folds it).
INSTRUCTION_SECONDS = {
    "norm": 6.68e-10, "stack": 1.96e-11,
    "attention": 3.19e-09, "attention_finite": 1.79e-08, "gain_controlled": 0.0, "rope": 0.0, "qk_norm": 1.69e-07,
    "mlp_relu": 6.67e-09, "mlp_linear": 0.0, "mlp_erf": 1.11e-08, "mlp_tanh": 7.13e-07, "mlp_gelu": 3.6e-06,
    "mlp_silu": 8.15e-07, "gated": 0.0,
    "mlp_relu_raw": 3.86e-09, "mlp_linear_raw": 6.19e-09, "mlp_erf_raw": 1.13e-08, "mlp_tanh_raw": 1.33e-05,
    "mlp_gelu_raw": 1.8e-06, "mlp_silu_raw": 7.99e-07,
}
#: Seconds per cell and block besides the instructions (loading the state, the critical beta, the scale;
#: the fit folds it into the instructions at this batch size).
BLOCK_SECONDS = 0.0
#: Seconds per instruction and batch: reading its op code and operands (paid once per batch of cells).
DISPATCH_SECONDS = 4.55e-08
#: Fixed seconds of one kernel call (starting the threads, checking the arguments): the median over
#: the architectures (0 to 12 ms on the shared cores).
CALL_SECONDS = 1.42e-04


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
    """The estimated speed of one architecture's depth kernel (:func:`kernel_speed`).

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
    """The estimated speed of the depth kernel of ``arch``: arithmetic on its lowered program.

    The kernel runs the instructions of the architecture's program (:mod:`remprop.theory.kernels`)
    on batches of ``BATCH`` cells, one batch per thread at a time. With :func:`cell_block_seconds`
    ``c`` (per cell and block) and the per-batch dispatch ``o = n_instructions x``
    :data:`DISPATCH_SECONDS`: ``round_seconds = BATCH c + o``, ``single_seconds = c + o``,
    ``cells_per_round = BATCH x`` ``numba.get_num_threads()`` and ``call_seconds =``
    :data:`CALL_SECONDS`. Nothing is timed: the constants were measured once by
    benchmarks/bench_work_estimates.py (an estimate; the machine's speed and load differ).

    Parameters
    ----------
    arch : Architecture

    Returns
    -------
    KernelSpeed
    """
    import numba

    program = kernels_for(kernel_tree(arch)).program
    per_cell = cell_block_seconds(program)
    dispatch = DISPATCH_SECONDS * len(program.ops)
    return KernelSpeed(CALL_SECONDS, BATCH * per_cell + dispatch, BATCH * max(1, numba.get_num_threads()),
                       per_cell + dispatch)


def instruction_kinds(program) -> list:
    """The kind of every instruction of a lowered program: the names of :data:`INSTRUCTION_SECONDS`.

    An MLP is ``"mlp_<activation>"`` (a user-registered activation: ``"mlp_user"``), with ``"_raw"``
    where the program has no norm (the MLP then sees the stream's variance grow with depth, and the
    quadrature rules of tanh, GELU and SiLU take more nodes), plus ``"gated"`` for a gated one; an
    attention ``"attention"`` or ``"attention_finite"`` (the finite-T table), plus ``"rope"``,
    ``"qk_norm"`` and ``"gain_controlled"`` for those flags; the stack's instructions (push, skip,
    sums) ``"stack"``; an op code without a calibrated cost ``"other"``.
    """
    from .activations.registry import ACTIVATIONS
    from .kernels import _tape as tape

    names = {code: name for name, code in ACTIVATIONS.items()}
    ops = np.asarray(program.ops)[:, :2].tolist()
    raw = "_raw" if all(code != tape.OP_NORM for code, _ in ops) else ""
    kinds = []
    for code, flags in ops:
        if code == tape.OP_NORM:
            kinds.append("norm")
        elif code == tape.OP_DENSE:
            kinds.append("dense")
        elif code == tape.OP_MLP:
            activation = names.get(flags >> 8, "user")
            kinds += [f"mlp_{activation}{raw}"] + (["gated"] if flags & tape.MLP_GATED else [])
        elif code == tape.OP_ATTENTION:
            kinds.append("attention_finite" if flags & tape.ATTENTION_FINITE else "attention")
            kinds += [name for flag, name in ((tape.ATTENTION_ROPE, "rope"), (tape.ATTENTION_QK_NORM, "qk_norm"),
                                              (tape.ATTENTION_GAIN_CONTROLLED, "gain_controlled")) if flags & flag]
        elif code in (tape.OP_PUSH, tape.OP_SKIP, tape.OP_SWAP_IN, tape.OP_ADD_POP, tape.OP_DROP):
            kinds.append("stack")
        else:
            kinds.append("other")
    return kinds


def cell_block_seconds(program) -> float:
    """Estimated seconds to advance one cell of a batch by one block of ``program``:
    :data:`BLOCK_SECONDS` plus the :data:`INSTRUCTION_SECONDS` of its :func:`instruction_kinds`.
    A kind without a calibrated cost (a user-registered activation, a new op) costs as much as the
    dearest calibrated one of its class (the MLPs of a stream with or without a norm, or the other
    instructions)."""
    seconds = BLOCK_SECONDS
    for kind in instruction_kinds(program):
        if kind not in INSTRUCTION_SECONDS:
            mlp, raw = kind.startswith("mlp_"), kind.endswith("_raw")
            kind = max((name for name in INSTRUCTION_SECONDS if name.startswith("mlp_") == mlp
                        and (not mlp or name.endswith("_raw") == raw)), key=INSTRUCTION_SECONDS.get)
        seconds += INSTRUCTION_SECONDS[kind]
    return seconds


def kernel_seconds(arch, cells, depth, calls=None) -> float:
    r"""Estimated wall time of the depth kernels on ``cells`` cells through ``depth`` blocks.

    .. math::
        t = n_{calls}\, t_{call} + L \lceil n / n_{round} \rceil t_{round}

    with the speeds of :func:`kernel_speed` (``n_round`` cells advance together, one batch
    per thread; fewer cells than a round: :meth:`KernelSpeed.layer_seconds`). ``calls``
    defaults to one call per :data:`~remprop.theory.propagation.CHUNK_ROWS` cells. An
    estimate: another machine, or other processes on the cores, run at another speed.
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

    ``passes x`` :func:`kernel_seconds`; work of at most 2**16 block steps in all counts as 0
    (it takes well under a second with every built-in kernel).
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
    r"""Bytes of one run of the causal Gram state (:func:`~remprop.theory.causal.propagate_causal_gram`,
    its default fast method).

    The fast walk holds at most three float64 ``T x T`` arrays at once (the block's input, its branch's
    input -- the norm's output -- and one result; while the attention draws, its float32 Cholesky factor
    in place of the result) and the layers' key mask (``T^2`` booleans), ``25 T^2``, counted as ``27 T^2``
    (the dense layers, skips, the MLP and the symmetrisation run
    in place, remprop.theory._gram_in_place). With QK-norm the kernel ``kappa_n(C)``, its cosine
    matrix's temporaries and the values' own factor add ``32 T^2``; an MLP that takes the numpy pair maps
    (a positively homogeneous activation at unequal token norms, or variances spread wider than the
    table's: only without any norm) about seven ``T x T`` temporaries, ``56 T^2``. Beside them the draws'
    values ``4 T draws (r + n)`` (``r`` Nystrom blocks, ``n`` value columns), the score chunks
    (``GRAM_ROW_CHUNK x T`` float32, four copies) and for an activation that is not positively homogeneous
    a new pair-moment table of three variance nodes (``9 N_r`` float64; the tables and their resampling
    matrix are kept for the process, at most ``pair_moments.KEPT_TABLES`` of them, and the resampling's
    three ``N_r x R`` temporaries, 6.2 MB, are built once a process):

    .. math:: b = (27 + 32 [\text{QK-norm}] + 56 [\text{numpy MLP}])\, T^2 + 4 T\, n_{\rm draws} (r + n)
              + 16\, C\, T + 72\, N_r

    Measured (tracemalloc peak, benchmarks/bench_causal_gram.py, Llama 3.2 1B): 31.4, 28.2, 26.6 and
    25.8 T^2 at T = 1024, 2048, 4096 and 8192, 0.79-0.92 of the estimate (80 T^2 before the in-place walk).
    """
    seq_len = check_count("seq_len", seq_len, 1)
    check_count("depth", depth, 1)
    draws = check_count("draws", draws, 1)
    square = seq_len ** 2
    homogeneous = activation_spec(arch.activation).homogeneous
    numpy_mlp = homogeneous or not (arch.norm.has_norm or arch.branch_norm)
    per_square = 27 + (32 if arch.qk_norm else 0) + (56 if numpy_mlp else 0)
    values = 4 * seq_len * draws * (nystrom_blocks(seq_len) + VALUE_WIDTH)
    table = 0 if homogeneous else 72 * CORRELATION_NODES
    return per_square * square + values + 16 * ROW_CHUNK * seq_len + table


def causal_score_width(arch) -> int:
    """Score columns ``m`` of the fast causal Gram state for ``arch`` (docs/theory.md section 8.1): at least
    64, a multiple of ``head_dim`` with RoPE (every rotary frequency the same number of column pairs)."""
    return score_width(head_frequencies(arch) if arch.positions.rotary else None)


#: Query rows the fast causal Gram state draws at once (the shape of its score products).
GRAM_ROW_CHUNK = ROW_CHUNK


def rope_seconds(head_dim) -> float:
    """Estimated seconds of the mean rotary correlation ``cbar_T`` of one head of width ``head_dim``.

    :func:`~remprop.theory.rem.rope_mean_correlation` sums ``head_dim / 2`` frequencies (in
    bounded memory, once per ``(T, d_H, base)``: it is cached), at :data:`ROPE_FREQUENCY_SECONDS`
    each. Heads up to ``2**21`` wide count as 0 (well under a second).
    """
    head_dim = check_count("head_dim", head_dim, 2)
    if head_dim <= _SMALL_ROPE_HEAD:
        return 0.0
    return head_dim // 2 * ROPE_FREQUENCY_SECONDS


#: Head widths whose rotary sum counts as no time (:func:`rope_seconds`).
_SMALL_ROPE_HEAD = 1 << 21
#: Seconds per frequency of the rotary sum (:func:`rope_seconds`), measured by
#: benchmarks/bench_work_estimates.py (``_mean_correlation`` at T = 512 over 2**18 frequencies).
ROPE_FREQUENCY_SECONDS = 8.31e-08
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
