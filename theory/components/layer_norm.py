"""LayerNorm without affine parameters on the token simplex."""
from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

from ..checks import check_overlap, output_pair

from .base import Component

__all__ = ["layernorm_map", "LayerNorm", "layer_norm"]


@register_jitable
def layernorm_core(q, p):
    """(1, p / q)."""
    return 1.0 + 0.0 * q, p / q


def layernorm_map(q, p):
    r"""Order parameters after LayerNorm (no gain, no bias).

    .. math:: q' = 1, \qquad p' = p / q

    Each token is rescaled to unit mean square; at large width the per-token mean
    subtracted by LayerNorm is O(1/sqrt(d)) and the cosine is unchanged. The map is
    idempotent. ``q'`` and ``p'`` have the broadcast shape of ``q`` and ``p``.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333.
    """
    q, p = check_overlap(q, p)
    return output_pair(*layernorm_core(q, p))


class LayerNorm(Component):
    """LayerNorm without affine parameters (:func:`layer_norm`)."""

    name = "layer_norm"
    keeps_cosine = True
    #: The norm's ``*_core`` map.
    core = staticmethod(layernorm_core)

    def apply(self, q, p):
        return self.core(q, p)

    def gram(self, walker, g):
        return walker.norm(self, g)

    def torch_forward(self, x, sim):
        return sim.ops.layer_norm(x, sim.layer_norm_eps)

    def symbolic(self, q, p, symbols):
        # layernorm_core's (1, p / q); its 1.0 + 0.0 q (a float broadcast to the shape of q)
        # would put a float 1.0 into exact expressions, q / q is the exact 1
        return q / q, p / q

    #: ``(1, p / q)`` whatever the input's scale.
    scale_free = True

    #: The kernels' norm kind (``Tape.norm``): which core the interpreter runs.
    kernel_kind = 0

    def kernel(self, tape):
        """One norm instruction: the interpreter runs this norm's :attr:`core`."""
        tape.norm(self.kernel_kind)


def layer_norm() -> Component:
    """LayerNorm without affine parameters: ``(q, p) -> (1, p/q)``."""
    return LayerNorm()
