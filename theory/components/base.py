"""Composable layer maps on the order parameters (q, p), in the style of ``stax``.

Every component is a callable ``(q, p) -> (q', p')`` that broadcasts over arrays.
Blocks are compositions::

    from remprop.theory import components as C
    post_ln_block = C.serial(
        C.residual(alpha_sa, C.softmax_attention(beta)), C.layer_norm(),
        C.residual(alpha_mlp, C.mlp()), C.layer_norm(),
    )
    q1, p1 = post_ln_block(1.0, 0.0)

These compositions are the readable reference of the block orders; the numba kernels
in :mod:`remprop.theory.kernels` run the same maps over whole grids and depths.

Every component can also be walked on sympy expressions, ``block.symbolic(q, p, symbols)``:
the same cores (skip, dense, attention given ``Y2``) run on symbols, and what the numeric
map computes from numbers (the participation ratio, the activation's Gaussian moments)
comes from ``symbols`` (:class:`remprop.theory.symbolic.SymbolicContext`). Parameters
may then be sympy expressions too (they are kept as they are, unchecked); such a tree can
only be walked symbolically. This is how :mod:`remprop.theory.symbolic` derives its block
maps from :meth:`Architecture.block <remprop.theory.Architecture.block>`.

The kernel face: ``block.kernel(build)`` returns the component's step for the numba depth
kernels, a plain function ``step(q, p, row, table) -> (q', p', beta_c)`` that numba compiles
(:mod:`remprop.theory.kernels` explains the protocol and the ``build`` object). A
combinator's step calls the steps of its children (``build.child(component)``), so the
kernels' block update is composed from the tree itself. Parameters of a tree built for the
kernels may be :class:`Column` placeholders (kept as they are, unchecked, like sympy
objects): the step then reads that column of the cell's packed row instead of a constant.
"""

import dataclasses
import enum
import hashlib
import sys
from dataclasses import dataclass
from typing import Tuple

import numpy as np
from numba.extending import register_jitable

from ..checks import as_float_array, check_overlap, output_pair

__all__ = ["Component", "Serial", "serial", "parameter", "Column", "kernel_key_of", "kernel_value_key", "least",
           "merge_rescaled", "rescaled_bias"]


@dataclass(frozen=True)
class Column:
    """A parameter read by the depth kernels from each cell's packed row: the column ``name``
    of :data:`remprop.theory.kernels.COLUMNS` (e.g. ``Column("sigma_w2")``).

    A tree whose parameters are columns is a template: one compiled kernel runs it on every
    row of a parameter grid. Such a tree has no numeric map (its ``apply`` fails); it is for
    :func:`remprop.theory.kernels.kernels_for` only.
    """

    name: str

    def __repr__(self):
        return f"Column({self.name!r})"


@register_jitable
def least(a, b):
    """The smaller of two critical betas, ``nan`` if either is (``np.minimum``'s rule on scalars):
    how a combinator's step merges its children's ``beta_c``."""
    if a != a or a <= b:
        return a
    return b


class Component:
    """A map on (q, p). Subclasses implement :meth:`apply` on float arrays."""

    name = "component"
    #: Whether the map leaves the cosine ``p / q`` unchanged (the norms): the layer after it
    #: then sees the same cosine, which ``Serial.check_input`` uses.
    keeps_cosine = False

    def __call__(self, q, p) -> Tuple[np.ndarray, np.ndarray]:
        """Apply the map to validated order parameters (``q > 0``, ``|p| <= q``).

        Returns ``(q', p')`` broadcast to their common shape; bad inputs raise
        ``ValueError`` naming ``q`` or ``p``, as the public maps do.
        """
        q, p = check_overlap(q, p)
        self.check_input(q, p)
        with np.errstate(divide="ignore", invalid="ignore"):
            q_out, p_out = self.apply(q, p)
        return output_pair(q_out, p_out)

    def check_input(self, q, p):
        """Further domain checks on validated (q, p); none by default."""

    def apply(self, q, p):  # pragma: no cover - abstract
        """The map ``(q, p) -> (q', p')`` on validated float arrays."""
        raise NotImplementedError

    def apply_up_to_scale(self, q, p):
        """The map up to a positive factor, for a consumer that reads only its cosine (a
        :attr:`scale_free` map follows it: the norm after a post-LN sublayer). :meth:`apply` by
        default; a skip whose ``alpha**2`` would leave float64 returns its state divided by
        ``alpha**2`` (:class:`~remprop.theory.components.Residual`), so that its cosine stays
        finite. The kernel face gets the same request through ``build.output_scale_free``."""
        return self.apply(q, p)

    def symbolic(self, q, p, symbols):  # pragma: no cover - abstract
        """The same map on sympy expressions ``(q, p)``, unchecked.

        ``symbols`` supplies what the numeric map computes from numbers:
        ``symbols.parameter(value)`` (a stored parameter as a sympy expression),
        ``symbols.participation(beta, q, p, seq_len)`` (the attention's ``Y2`` at its input
        ``(q, p)``) and ``symbols.moments(activation, q1, p1)`` (``E[phi(u)^2]``,
        ``E[phi(u) phi(v)]``); :class:`remprop.theory.symbolic.SymbolicContext` is the
        standard one. Returns ``(q', p')`` as sympy expressions.
        """
        raise NotImplementedError

    def gram(self, walker, g):
        """The Gram-state face: this component's map on a Gram matrix ``g`` (T x T), by the
        ``walker``'s method for its kind (:func:`remprop.theory.gram_state.propagate_gram`,
        docs/theory.md section 17). A component without one is refused by name."""
        raise ValueError(f"the Gram state has no map for the component {self.name!r}")

    # -- the torch face (remprop.validation.simulator) ----------------------------------
    #: Where a block keeps this component's weights: a field of
    #: :class:`remprop.validation.layers.BlockWeights` (``"attention"``, ``"mlp"``, ``"output"``) or a
    #: key of its ``extra``; None for a component without weights.
    weight_slot = None
    #: Order of the draws within a block, smaller first (attention, MLP, output projection), so a
    #: component's seeded weights do not depend on where it sits in the tree.
    draw_rank = 0

    @property
    def children(self) -> tuple:
        """The components this one runs (a combinator's); ``()`` for a layer."""
        return ()

    def torch_weights(self, sim):
        """Draw this component's weights through ``sim``, the simulator's block context
        (:class:`remprop.validation.registry.BlockContext`: its generator, sizes, dtype, device and
        the torch functions ``sim.ops``); None for a component without weights."""
        return None

    def torch_forward(self, x, sim):
        """This component on a tensor ``x`` of shape (batch, T, d), in torch: written with tensor
        methods and the functions of ``sim.ops`` (theory never imports torch); its weights are
        ``sim.weights_of(self)``, a combinator's children run through their own ``torch_forward``."""
        raise NotImplementedError(f"{self!r}: this component has no torch face (torch_forward)")

    def __repr__(self):
        return self.name

    # -- the kernel face (remprop.theory.kernels) ------------------------------------------
    #: ``F(l q, l p) = F(q, p)`` for every ``l > 0`` (the norms): a skip around this map adds an
    #: output that does not grow with the stream, which the kernels' carried scale uses.
    scale_free = False
    #: The map commutes with the kernels' carried scale ``s`` when every skip connection in it
    #: multiplies its branch's output by ``s`` (a residual around a :attr:`scale_free` branch;
    #: a serial of such maps): pre-LN streams, :mod:`remprop.theory.kernels`.
    carries_scale = False

    def kernel(self, tape):
        """This map's instructions for the depth kernels (:mod:`remprop.theory.kernels`).

        Appends to ``tape`` (``remprop.theory.kernels._tape.Tape``) what the map does, through
        the tape's methods: ``tape.norm()``, ``tape.dense(sigma_w2, sigma_b2)``, ``tape.mlp(...)``,
        ``tape.attention(...)``; a combinator lowers its children with ``tape.child(component)``
        and keeps a skip's input with ``tape.push()`` / ``tape.skip(alpha)``. Parameters are numbers
        or :class:`Column` placeholders (read from the cell's packed row). One compiled interpreter
        runs every tape: a new component composes the existing instructions (a map of its own is a
        new instruction in ``remprop.theory.kernels._engine``).
        """
        raise NotImplementedError(f"{self!r}: this component has no kernel face (kernel(tape))")

    def kernel_key(self):
        """What the compiled step depends on, hashable and the same in every process: the
        class and every attribute (:func:`kernel_value_key`; numbers are compile-time
        constants, :class:`Column` placeholders row reads). Components override it to drop
        what the step does not read (the attention's sequence length)."""
        return kernel_key_of(self, vars(self))

    def rescaled_parameters(self):
        """How the map stays homogeneous of degree one when the kernels carry the scale of a
        no-LN stream: ``{column name: degree}`` such that ``F(s q, s p)``, with each named column
        multiplied by ``s**degree``, equals ``s F(q, p)`` (a bias ``sigma_b2``: degree 1; the
        attention's ``beta``: degree -1), or None where no rescaling does (the default)."""
        return None


def kernel_key_of(component, fields):
    """:meth:`Component.kernel_key` from the attributes ``fields`` (a dict): the class's module,
    qualified name and a digest of its module's source (an edit to a component outside
    :mod:`remprop.theory` then compiles afresh, ``remprop.theory._jit``), then each field's
    :func:`kernel_value_key`, by name."""
    cls = type(component)
    return (cls.__module__, cls.__qualname__, _module_digest(cls.__module__)) + tuple(
        (name, kernel_value_key(value)) for name, value in sorted(fields.items()))


_MODULE_DIGESTS = {}


def _module_digest(module_name):
    if module_name not in _MODULE_DIGESTS:
        path = getattr(sys.modules.get(module_name), "__file__", None)
        try:
            with open(path, "rb") as source:
                _MODULE_DIGESTS[module_name] = hashlib.sha256(source.read()).hexdigest()[:12]
        except (OSError, TypeError):
            _MODULE_DIGESTS[module_name] = ""
    return _MODULE_DIGESTS[module_name]


def kernel_value_key(value):
    """A hashable, process-independent description of a component's attribute for
    :meth:`Component.kernel_key`: components by their key, columns by name, numbers as floats,
    enums by name, tuples and dataclasses field by field. Other types raise ValueError
    (override ``kernel_key``)."""
    if isinstance(value, Component):
        return value.kernel_key()
    if isinstance(value, Column):
        return value
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, (int, float, np.integer, np.floating, np.bool_)):
        return value.item() if isinstance(value, np.generic) else value
    if isinstance(value, np.ndarray):
        return float(value) if value.ndim == 0 else ("array", value.shape, tuple(value.ravel().tolist()))
    if isinstance(value, (tuple, list)):
        return tuple(kernel_value_key(item) for item in value)
    if isinstance(value, enum.Enum):
        return (type(value).__qualname__, value.name)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__qualname__,) + tuple((field.name, kernel_value_key(getattr(value, field.name)))
                                                   for field in dataclasses.fields(value))
    raise ValueError(f"{value!r}: a component attribute the kernel key cannot describe (numbers, strings, "
                     "enums, columns, components, dataclasses and tuples of them); override kernel_key")


@dataclass(repr=False)
class Serial(Component):
    """Layers applied left to right (:func:`serial`)."""

    layers: tuple
    name = "serial"

    def apply(self, q, p):
        return self._apply(q, p, False)

    def apply_up_to_scale(self, q, p):
        return self._apply(q, p, True)

    def _apply(self, q, p, free):
        """The layers in turn; a layer followed by a :attr:`~Component.scale_free` one (or the last,
        with ``free``) runs up to scale (:meth:`Component.apply_up_to_scale`)."""
        for index, layer in enumerate(self.layers):
            after = self.layers[index + 1].scale_free if index + 1 < len(self.layers) else free
            q, p = layer.apply_up_to_scale(q, p) if after else layer.apply(q, p)
        return q, p

    def symbolic(self, q, p, symbols):
        for layer in self.layers:
            q, p = layer.symbolic(q, p, symbols)
        return q, p

    def gram(self, walker, g):
        return walker.serial(self, g)

    @property
    def children(self):
        return self.layers

    def torch_forward(self, x, sim):
        for layer in self.layers:
            x = layer.torch_forward(x, sim)
        return x

    def check_input(self, q, p):
        # The first layer sees (q, p); a norm (LayerNorm, RMSNorm) keeps the cosine, so the
        # layer after a leading norm sees the same cosine (attention checks only the cosine).
        for layer in self.layers:
            layer.check_input(q, p)
            if not layer.keeps_cosine:
                break

    def __repr__(self):
        return "serial(" + ", ".join(map(repr, self.layers)) + ")"

    @property
    def scale_free(self):
        return self.layers[0].scale_free

    @property
    def carries_scale(self):
        return all(layer.carries_scale for layer in self.layers)

    def rescaled_parameters(self):
        return merge_rescaled(layer.rescaled_parameters() for layer in self.layers)

    def kernel(self, tape):
        """The layers' instructions in turn. A layer followed by a :attr:`~Component.scale_free` one
        is lowered with ``output_scale_free`` (its output is read only up to scale,
        :meth:`Component.apply_up_to_scale`), as is the last when this serial's own output is."""
        free = tape.output_scale_free
        for index, layer in enumerate(self.layers):
            after = self.layers[index + 1].scale_free if index + 1 < len(self.layers) else free
            tape.child(layer, output_scale_free=after)


def rescaled_bias(value):
    """:meth:`Component.rescaled_parameters` of a bias variance: its column at degree 1, nothing
    for a constant 0, None (not homogeneous) for another constant."""
    if isinstance(value, Column):
        return {value.name: 1}
    return {} if np.all(np.asarray(value) == 0.0) else None


def merge_rescaled(parts):
    """The rescaled columns of maps applied together (:meth:`Component.rescaled_parameters`):
    their union, or None if one is None or two give a column different degrees."""
    merged = {}
    for part in parts:
        if part is None:
            return None
        for name, degree in part.items():
            if merged.setdefault(name, degree) != degree:
                return None
    return merged


def serial(*layers: Component) -> Component:
    """Compose maps left to right: ``serial(f, g)(q, p) == g(*f(q, p))``."""
    for layer in layers:
        if not isinstance(layer, Component):
            raise ValueError(f"layers must be components, got {layer!r}")
    return Serial(tuple(layers))


def parameter(name, value, **checks):
    """A checked float array (:func:`~remprop.theory.checks.as_float_array`), or a sympy expression kept as it is.

    Sympy parameters are for :meth:`Component.symbolic` only; they are recognised by their
    type's module, so that the numeric core never imports sympy. :class:`Column` placeholders
    are for the kernels only (:meth:`Component.kernel`).
    """
    if type(value).__module__.startswith("sympy.") or isinstance(value, Column):
        return value
    return as_float_array(name, value, **checks)
