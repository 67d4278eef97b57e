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
"""

from dataclasses import dataclass
from typing import Tuple

import numpy as np

from ..checks import as_float_array, check_overlap, output_pair

__all__ = ["Component", "Serial", "serial", "parameter"]


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


@dataclass(repr=False)
class Serial(Component):
    """Layers applied left to right (:func:`serial`)."""

    layers: tuple
    name = "serial"

    def apply(self, q, p):
        for layer in self.layers:
            q, p = layer.apply(q, p)
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


def serial(*layers: Component) -> Component:
    """Compose maps left to right: ``serial(f, g)(q, p) == g(*f(q, p))``."""
    for layer in layers:
        if not isinstance(layer, Component):
            raise ValueError(f"layers must be components, got {layer!r}")
    return Serial(tuple(layers))


def parameter(name, value, **checks):
    """A checked float array (:func:`~remprop.theory.checks.as_float_array`), or a sympy expression kept as it is.

    Sympy parameters are for :meth:`Component.symbolic` only; they are recognised by their
    type's module, so that the numeric core never imports sympy.
    """
    if type(value).__module__.startswith("sympy."):
        return value
    return as_float_array(name, value, **checks)
