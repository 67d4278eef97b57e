"""LayerNorm without affine parameters on the token simplex."""
from __future__ import annotations

import numba
import numpy as np
from numba.extending import register_jitable

from .._jit import CACHE, JIT_OPTIONS
from ..checks import check_overlap, output_pair

from .base import Component

__all__ = ["layernorm_map", "LayerNorm", "layer_norm"]


@register_jitable
def layernorm_core(q, p):
    """(1, p / q)."""
    return 1.0 + 0.0 * q, p / q


@numba.njit(parallel=True, cache=CACHE, **JIT_OPTIONS)
def _rescaled_pairs(g, inverse):
    """``G_ij s_i s_j`` (``s = inverse``): one pass over ``g`` into a new array, rows on all threads."""
    t = g.shape[0]
    out = np.empty_like(g)
    for i in numba.prange(t):
        for j in range(t):
            out[i, j] = g[i, j] * inverse[i] * inverse[j]
    return out


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
    #: How reports name it (``post-LN``) and its title (:class:`~remprop.theory.components.block.NormType`).
    short, title = "LN", "LayerNorm"
    #: The norm placements (``Architecture.norm``) where the map holds, and why not elsewhere.
    placements, placement_note = ("post", "pre", "none"), ""
    #: The norm's ``*_core`` map.
    core = staticmethod(layernorm_core)

    @classmethod
    def of_architecture(cls, arch):
        """This norm in a block of ``arch`` (no parameters)."""
        return cls()

    def apply(self, q, p):
        return self.core(q, p)

    def gram(self, walker, g):
        """Pair by pair, exact: ``G_ij / sqrt(G_ii G_jj)`` by the norm's :attr:`core` on
        ``(sqrt(G_ii G_jj), G_ij)``. A walker with a norm epsilon (``walker.norm_eps > 0``: the causal
        Gram state of a model's ``eps``) gets ``G_ij / sqrt((G_ii + eps)(G_jj + eps))``, the token's
        mean square concentrating at ``G_ii`` at large width."""
        if walker.norm_eps > 0:
            # G_ij s_i s_j with s_i = (G_ii + eps)^(-1/2): one T x T array (no outer product, no root of it)
            return _rescaled_pairs(np.ascontiguousarray(g), 1.0 / np.sqrt(np.diag(g) + walker.norm_eps))
        diag = np.diag(g)
        q_out, g_out = self.core(np.sqrt(np.outer(diag, diag)), g)
        np.fill_diagonal(g_out, np.diag(q_out))
        return g_out

    def torch_forward(self, x, sim):
        # torch's fused LayerNorm (no tensor method computes it; validation.layers.layer_norm)
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
