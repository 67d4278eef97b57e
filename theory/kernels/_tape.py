"""A block tree lowered to a tape: the ``tape`` object of ``Component.kernel``.

:class:`Tape` walks a tree once. Every component's kernel face,
:meth:`Component.kernel(tape) <remprop.theory.components.Component.kernel>`, appends its
instructions by calling the tape's methods (:meth:`Tape.norm`, :meth:`Tape.dense`,
:meth:`Tape.mlp`, :meth:`Tape.attention`, :meth:`Tape.push`, :meth:`Tape.skip`, ...); a
combinator lowers its children with :meth:`Tape.child`. The result (:class:`Program`) is data:
integer op codes with operand slots, and the constants of the tree. One compiled interpreter
(``_engine``) runs every program, so no tree compiles anything of its own.

Operands. A parameter is a :class:`~remprop.theory.components.Column` (read from the cell's
packed row: slot ``COLUMNS.index(name)``) or a number (a constant of the program: slot
``len(COLUMNS) + k``). Each operand carries a degree in ``-1, 0, 1``: the power of the carried
scale ``s`` it is multiplied by where the kernels carry a no-LN stream's scale (``_sweeps``,
"The carried scale").

The stream state ``(q, p)`` of every cell flows through the instructions; :meth:`Tape.push`
saves it on a per-cell stack, :meth:`Tape.skip` pops the saved input and adds the branch to
it, and the branch sum of a parallel block uses :meth:`Tape.swap_in` and :meth:`Tape.add_pop`.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..activations import activation_spec
from ..components.base import Column, Component

#: The parameter columns a step can read (:class:`~remprop.theory.components.Column` names), in
#: the order of a packed row: ``beta`` the heads' effective beta (with QK-norm the reduced-scale
#: factor), ``sigma_o2`` and ``sigma_w2_out`` read only where the tree has them,
#: ``mean_rope_correlation`` ``cbar_T`` of RoPE and ``qk_norm_dim`` the QK-norm width n, read only
#: by an attention with RoPE or QK-norm (docs/theory.md sections 15 and 19).
COLUMNS = ("beta", "sigma_w2", "sigma_b2", "sigma_v2", "alpha_sa", "alpha_mlp", "sigma_o2", "sigma_w2_out",
           "mean_rope_correlation", "qk_norm_dim")
#: A packed row: :data:`COLUMNS`, then the cell's input state ``(q0, p0) 2**log2_scale``.
PARAMS = COLUMNS + ("q0", "p0", "log2_scale")
#: Carried-scale modes (arguments of the sweeps): none, pre-LN branches, no-LN homogeneous maps.
NO_SCALE, SCALE_BRANCHES, SCALE_INPUTS = range(3)

#: Op codes of the interpreter (``_engine.run_program``); each is one branch there.
OP_NORM, OP_DENSE, OP_MLP, OP_ATTENTION, OP_PUSH, OP_SKIP, OP_SWAP_IN, OP_ADD_POP, OP_DROP = range(9)
#: The most operands an instruction has.
MAX_OPERANDS = 5
#: Flags of :data:`OP_NORM`, :data:`OP_MLP` and :data:`OP_ATTENTION` (bit fields of ``flags``).
NORM_LAYER, NORM_RMS = 0, 1
MLP_GATED = 1
ATTENTION_FINITE, ATTENTION_GAIN_CONTROLLED, ATTENTION_ROPE, ATTENTION_QK_NORM = 1, 2, 4, 8
#: :data:`OP_SKIP` flag: the output is read only up to scale (a norm follows).
SKIP_SCALE_FREE = 1


def stream_scaling(tree):
    """``(mode, rescaled)``: how the kernels carry the scale of ``tree``'s stream (``_sweeps``, "The
    carried scale"): :data:`SCALE_BRANCHES` where skips add branches that do not grow with the
    stream (``tree.carries_scale``), :data:`SCALE_INPUTS` with the columns to rescale
    (``tree.rescaled_parameters()``: ``{name: degree}``, ``beta`` at degree -1 if at all) where the
    map is homogeneous, else :data:`NO_SCALE`."""
    if tree.carries_scale:
        return SCALE_BRANCHES, {}
    rescaled = tree.rescaled_parameters()
    if rescaled is None or rescaled.get("beta", -1) != -1 or not set(rescaled) <= set(COLUMNS):
        return NO_SCALE, {}
    return SCALE_INPUTS, dict(rescaled)


class Program(NamedTuple):
    """A lowered tree: what the interpreter runs.

    Attributes
    ----------
    ops : ndarray of int64, shape (n, 2 + 2 MAX_OPERANDS)
        Per instruction: op code, flags, the operands' slots, the operands' degrees.
    constants : ndarray of float64
        The tree's numeric parameters (slots ``len(COLUMNS) + k``).
    mode : int
        The carried-scale mode (:data:`NO_SCALE`, :data:`SCALE_BRANCHES`, :data:`SCALE_INPUTS`).
    rescale_beta_c : bool
        Whether the critical beta is multiplied by the carried scale (no-LN, ``beta`` rescaled).
    stack : int
        The deepest the per-cell stack gets (>= 1).
    finite : bool
        Whether an attention reads the finite-T table.
    columns : tuple of str
        The :data:`COLUMNS` the program reads.
    user_activation : int
        The code of a user-registered activation the program's MLPs use (-1: none; its moments
        are compiled on their own and passed to the sweeps, ``activations.registry.compiled_user_function``).
    """

    ops: np.ndarray
    constants: np.ndarray
    mode: int
    rescale_beta_c: bool
    stack: int
    finite: bool
    columns: tuple
    user_activation: int = -1


class Tape:
    """The ``tape`` argument of :meth:`Component.kernel <remprop.theory.components.Component.kernel>`.

    ``mode`` and ``rescaled`` are the tree's carried scale (:func:`stream_scaling`): they decide
    the operands' degrees.
    """

    def __init__(self, mode=NO_SCALE, rescaled=None):
        self.mode, self.rescaled = mode, dict(rescaled or {})
        self._ops, self._constants, self._columns = [], [], set()
        self._depth = self._max_depth = 0
        self._finite = False
        self._user = -1
        self._free = [False]

    # -- what a component's kernel face calls ----------------------------------------------------
    def _operand(self, value):
        """``(slot, degree)`` of a parameter: a :class:`Column` reads its slot of the row (at its degree
        where the no-LN scale rescales it), a number (or a 0-d array) is a constant of the program."""
        if isinstance(value, Column):
            if value.name not in COLUMNS:
                raise ValueError(f"Column({value.name!r}): not a column of a packed row {COLUMNS}")
            self._columns.add(value.name)
            degree = self.rescaled.get(value.name, 0) if self.mode == SCALE_INPUTS else 0
            return COLUMNS.index(value.name), degree
        array = np.asarray(value, dtype=np.float64)
        if array.ndim:
            raise ValueError(f"a kernel tree takes numbers or Column placeholders as parameters, got an array "
                             f"of shape {array.shape} (grids go into the packed rows)")
        self._constants.append(float(array))
        return len(COLUMNS) + len(self._constants) - 1, 0

    def _emit(self, code, flags=0, operands=()):
        if len(operands) > MAX_OPERANDS:
            raise ValueError(f"an instruction has at most {MAX_OPERANDS} operands, got {len(operands)}")
        slots, degrees = [0] * MAX_OPERANDS, [0] * MAX_OPERANDS
        for k, value in enumerate(operands):
            slots[k], degrees[k] = self._operand(value)
        self._ops.append([code, flags] + slots + degrees)

    def norm(self, kind=NORM_LAYER):
        """A norm's map ``(1, p / q)`` (``kind``: :data:`NORM_LAYER` LayerNorm's core, :data:`NORM_RMS`
        RMSNorm's)."""
        self._emit(OP_NORM, kind)

    def dense(self, sigma_w2, sigma_b2):
        """``dense_core``: ``(sigma_w2 q + sigma_b2, sigma_w2 p + sigma_b2)``."""
        self._emit(OP_DENSE, 0, (sigma_w2, sigma_b2))

    def mlp(self, sigma_w2, sigma_b2, activation, sigma_w2_out, gated=False):
        """Dense, the activation's Gaussian moments, the hidden units' moments (own or gated), dense."""
        spec = activation_spec(activation)
        if not spec.builtin:
            if self._user >= 0 and self._user != spec.code:
                raise ValueError("a kernel tree may use at most one user-registered activation, got "
                                 f"codes {self._user} and {spec.code}")
            self._user = spec.code
        self._emit(OP_MLP, (MLP_GATED if gated else 0) | (spec.code << 8),
                   (sigma_w2, sigma_b2, sigma_w2_out))

    def attention(self, beta, sigma_v2, sigma_b2, mean_rope_correlation, qk_norm_dim, *, finite,
                  gain_controlled, rope, qk_norm):
        """The attention's map with its critical beta (``components.attention.attention_step_core``)."""
        flags = ((ATTENTION_FINITE if finite else 0) | (ATTENTION_GAIN_CONTROLLED if gain_controlled else 0)
                 | (ATTENTION_ROPE if rope else 0) | (ATTENTION_QK_NORM if qk_norm else 0))
        self._finite |= bool(finite)
        self._emit(OP_ATTENTION, flags, (beta, sigma_v2, sigma_b2, mean_rope_correlation, qk_norm_dim))

    def push(self):
        """Save the state (a skip connection's input) on the cell's stack."""
        self._save(OP_PUSH)

    def skip(self, alpha):
        """``alpha x + F``: pop the saved input ``x`` and add the state ``F`` (times the carried scale of a
        pre-LN stream); read up to scale where :attr:`output_scale_free`."""
        self._pop()
        self._emit(OP_SKIP, SKIP_SCALE_FREE if self.output_scale_free else 0, (alpha,))

    def swap_in(self):
        """Save the state (a branch's output) and restore the input saved beneath it: the next branch of a
        sum reads the same input."""
        self._save(OP_SWAP_IN)

    def _save(self, code):
        """An instruction that pushes the state on the cell's stack."""
        self._depth += 1
        self._max_depth = max(self._max_depth, self._depth)
        self._emit(code)

    def add_pop(self):
        """Pop the saved partial sum and add it to the state."""
        self._pop()
        self._emit(OP_ADD_POP)

    def drop(self):
        """Pop the saved input, keeping the state."""
        self._pop()
        self._emit(OP_DROP)

    def _pop(self):
        if self._depth < 1:
            raise ValueError("kernel tree: a skip or sum pops an empty stack (push the input first)")
        self._depth -= 1

    @property
    def output_scale_free(self):
        """Whether the component being lowered may return its output up to a positive factor: the
        map after it reads only the cosine (a :attr:`~remprop.theory.components.Component.scale_free`
        norm follows, as after a post-LN sublayer). A skip then keeps a finite state where
        ``alpha**2`` would leave float64 (:class:`~remprop.theory.components.Residual`)."""
        return self._free[-1]

    def child(self, component, output_scale_free=False):
        """Lower ``component`` here; ``output_scale_free``: what :attr:`output_scale_free` tells its
        kernel face."""
        if not isinstance(component, Component):
            raise ValueError(f"kernel trees are made of components, got {component!r}")
        self._free.append(bool(output_scale_free))
        try:
            component.kernel(self)
        finally:
            self._free.pop()

    # -- the result ---------------------------------------------------------------------------------
    def program(self, rescale_beta_c=False) -> Program:
        """The lowered program of what has been emitted."""
        if self._depth:
            raise ValueError("kernel tree: a push without its skip")
        ops = np.asarray(self._ops, dtype=np.int64).reshape(-1, 2 + 2 * MAX_OPERANDS)
        ops.setflags(write=False)
        constants = np.asarray(self._constants + [0.0], dtype=np.float64)  # never empty
        constants.setflags(write=False)
        columns = tuple(name for name in COLUMNS if name in self._columns)
        return Program(ops, constants, self.mode, bool(rescale_beta_c), max(self._max_depth, 1), self._finite,
                       columns, self._user)


def lower(tree) -> Program:
    """The :class:`Program` of a block tree (its carried scale from :func:`stream_scaling`)."""
    if not isinstance(tree, Component):
        raise ValueError(f"tree must be a component (remprop.theory.components), got {tree!r}")
    mode, rescaled = stream_scaling(tree)
    tape = Tape(mode, rescaled)
    tape.child(tree)
    return tape.program(rescale_beta_c=mode == SCALE_INPUTS and "beta" in rescaled)
