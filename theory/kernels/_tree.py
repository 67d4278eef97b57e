"""The block step composed from a component tree: the ``build`` object of ``Component.kernel``.

:class:`KernelBuilder` walks a tree once. Every component returns its step from
``component.kernel(build)`` (:meth:`remprop.theory.components.Component.kernel`); the builder
names it after the component's :meth:`~remprop.theory.components.Component.kernel_key`
(``remprop.theory._jit.specialised``) and registers it with numba: compiled once per process
and inlined by LLVM (``remprop.theory._jit.inline_jitable``), so that the whole tree sits in the
sweeps' loop over a batch of cells. Equal subtrees share one step (the two LayerNorms of a
post-LN block are one function).
"""
from __future__ import annotations

import hashlib
from typing import NamedTuple

import numpy as np

from .._jit import inline_jitable, specialised
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
#: The step's ``row`` is :data:`COLUMNS` followed by the carried scale ``s = 2**-log2_scale``.
SCALE_SLOT = len(COLUMNS)
#: Carried-scale modes (compile-time constants of the sweeps): none, pre-LN branches, no-LN homogeneous maps.
NO_SCALE, SCALE_BRANCHES, SCALE_INPUTS = range(3)


def stream_scaling(tree):
    """``(mode, rescaled)``: how the kernels carry the scale of ``tree``'s stream (module docstring
    of ``remprop.theory.kernels._sweeps``): :data:`SCALE_BRANCHES` where skips add branches that
    do not grow with the stream (``tree.carries_scale``), :data:`SCALE_INPUTS` with the columns to
    rescale (``tree.rescaled_parameters()``: ``{name: degree}``, ``beta`` at degree -1 if at all)
    where the map is homogeneous, else :data:`NO_SCALE`."""
    if tree.carries_scale:
        return SCALE_BRANCHES, {}
    rescaled = tree.rescaled_parameters()
    if rescaled is None or rescaled.get("beta", -1) != -1 or not set(rescaled) <= set(COLUMNS):
        return NO_SCALE, {}
    return SCALE_INPUTS, dict(rescaled)


class Step(NamedTuple):
    """A compiled step of a tree: the function, whether it reads the finite-T table, whether it may
    be cached on disk (no user activation) and the columns it reads."""

    function: object
    reads_table: bool
    cacheable: bool
    columns: frozenset


class _Frame:
    """What the component being built has declared so far."""

    def __init__(self):
        self.reads_table, self.cacheable, self.columns = False, True, set()

    def add(self, step):
        self.reads_table |= step.reads_table
        self.cacheable &= step.cacheable
        self.columns |= step.columns


#: Steps by (kernel key, scaling): one function per structure, shared by every tree that has it.
_STEPS: dict = {}
#: Registered step function -> its Step (a component may return a child's step as its own).
_REGISTERED: dict = {}
_READERS: dict = {}


def digest(key) -> str:
    """Sixteen hex digits of SHA-256 over ``repr(key)`` (a kernel key: the same in every process)."""
    return hashlib.sha256(repr(key).encode()).hexdigest()[:16]


class KernelBuilder:
    """The ``build`` argument of :meth:`Component.kernel <remprop.theory.components.Component.kernel>`.

    ``mode`` and ``rescaled`` are the tree's carried scale (:func:`stream_scaling`): they decide
    what :attr:`stream_scale` and the column readers return.
    """

    def __init__(self, mode=NO_SCALE, rescaled=None):
        self.mode, self.rescaled = mode, dict(rescaled or {})
        self._context = (mode, tuple(sorted(self.rescaled.items())))
        self._frames = []
        self._free = [False]

    # -- what a component's kernel face calls ----------------------------------------------------
    def parameter(self, value):
        """A jitable reader ``read(row) -> float`` of a parameter: a :class:`Column` reads its slot
        of the row (times ``s**degree`` where the no-LN scale rescales it), a number (or a 0-d
        array) is a compile-time constant."""
        if isinstance(value, Column):
            if value.name not in COLUMNS:
                raise ValueError(f"Column({value.name!r}): not a column of a packed row {COLUMNS}")
            self._frames[-1].columns.add(value.name)
            degree = self.rescaled.get(value.name, 0) if self.mode == SCALE_INPUTS else 0
            return _reader(COLUMNS.index(value.name), degree)
        array = np.asarray(value, dtype=np.float64)
        if array.ndim:
            raise ValueError(f"a kernel tree takes numbers or Column placeholders as parameters, got an array "
                             f"of shape {array.shape} (grids go into the packed rows)")
        return _reader(None, float(array))

    @property
    def stream_scale(self):
        """Reader of the carried scale ``s`` by which a skip connection multiplies its branch's
        output: the row's scale slot for a pre-LN stream (:data:`SCALE_BRANCHES`), else 1."""
        return _reader(SCALE_SLOT, 0) if self.mode == SCALE_BRANCHES else _reader(None, 1.0)

    def moments(self, activation):
        """The jitable Gaussian moments ``(q1, p1) -> (E[phi^2], E[phi phi'])`` of ``activation``
        (a user activation's keep its kernels off the disk cache)."""
        spec = activation_spec(activation)
        self._frames[-1].cacheable &= spec.builtin
        return spec.moments

    def reads_table(self):
        """Declare that the step being built reads the finite-T table (an attention at finite T):
        the tree's kernels then need the table (:func:`remprop.theory.kernels.packed_table`)."""
        self._frames[-1].reads_table = True

    @property
    def output_scale_free(self):
        """Whether the step being built may return its output up to a positive factor: the
        map after it reads only the cosine (a :attr:`~remprop.theory.components.Component.scale_free`
        norm follows, as after a post-LN sublayer; :meth:`Component.apply_up_to_scale
        <remprop.theory.components.Component.apply_up_to_scale>`). A skip then keeps a finite
        state where ``alpha**2`` would leave float64 (:class:`~remprop.theory.components.Residual`)."""
        return self._free[-1]

    def child(self, component, output_scale_free=False):
        """The step function of ``component`` (built once per structure); ``output_scale_free``:
        what :attr:`output_scale_free` tells its kernel face."""
        step = self.build(component, output_scale_free)
        self._frames[-1].add(step)
        return step.function

    # -- the walk ---------------------------------------------------------------------------------
    def build(self, component, output_scale_free=False) -> Step:
        """The :class:`Step` of ``component``'s subtree (its output read up to scale with
        ``output_scale_free``, :attr:`output_scale_free`)."""
        if not isinstance(component, Component):
            raise ValueError(f"kernel trees are made of components, got {component!r}")
        key = (component.kernel_key(), self._context) + (("output_scale_free",) if output_scale_free else ())
        if key in _STEPS:
            return _STEPS[key]
        frame = _Frame()
        self._frames.append(frame)
        self._free.append(bool(output_scale_free))
        try:
            function = component.kernel(self)
        finally:
            self._frames.pop()
            self._free.pop()
        if function in _REGISTERED:  # a child's step returned as this component's own
            step = _REGISTERED[function]
        elif not callable(function):
            raise ValueError(f"{component!r}.kernel(build) must return a step function, got {function!r}")
        else:
            specialised(function, f"{type(component).__name__}_{digest(key)}")
            inline_jitable(function)
            step = _REGISTERED[function] = Step(function, frame.reads_table, frame.cacheable,
                                                frozenset(frame.columns))
        _STEPS[key] = step
        return step


def _reader(index, value):
    """``row[index] * s**value`` (``value`` a degree in -1, 0, 1) or, with ``index`` None, the constant
    ``value``; compiled once per process and inlined by LLVM, so a constant folds into the caller."""
    key = (index, repr(value))
    if key not in _READERS:
        if index is None:
            def read(row):
                return value
        elif value == 0:
            def read(row):
                return row[index]
        elif value == 1:
            def read(row):
                return row[index] * row[SCALE_SLOT]
        elif value == -1:
            def read(row):
                return row[index] / row[SCALE_SLOT]
        else:
            raise ValueError(f"a rescaled column has degree -1, 0 or 1, got {value!r}")
        tag = f"constant_{float(value).hex()}" if index is None else f"column{index}_degree{value}"
        _READERS[key] = inline_jitable(specialised(read, tag))
    return _READERS[key]
