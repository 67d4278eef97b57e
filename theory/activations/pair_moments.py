"""``E[phi(u) phi(v)]`` of a centred Gaussian pair of unequal variances, by a two-dimensional trapezoid rule.

The public entry is :func:`remprop.theory.causal.pair_moment` (documented there, docs/theory.md
section 8). Here, beside the activations, so that every walker of a Gram matrix (the causal Gram
state's MLP at unequal token norms, the DyT norm's Gram face) reaches the one quadrature without
importing the walkers.
"""
from __future__ import annotations

import functools

import numba
import numpy as np

from .._jit import JIT_OPTIONS, specialised
from ..checks import as_float_array
from ..quadrature import gaussian_trapezoid
from .registry import activation_spec

__all__ = ["PAIR_HALF_NODES", "pair_moment"]


#: Trapezoid nodes per side of :func:`pair_moment` (``remprop.theory.causal.PAIR_HALF_NODES``).
PAIR_HALF_NODES = 32


@functools.lru_cache(maxsize=None)
def _pair_sums(code):
    """The compiled double sum of :func:`pair_moment` for the activation of ``code``: one pass
    over the pairs (on all threads), the K x K nodes of a pair summed in place, no temporaries.
    Kept on disk for a built-in activation (as ``remprop.theory.activations.maps._over_arrays``)."""
    spec = activation_spec(code)
    phi = spec.function

    def pair_sums(root_a, root_b, r, s, z, w, out):
        for n in numba.prange(root_a.size):
            total = 0.0
            for k in range(z.size):
                first = phi(root_a[n] * z[k]) * w[k]
                if first == 0.0:  # ReLU's negative half: no inner sum (exactly 0)
                    continue
                shift = r[n] * z[k]
                inner = 0.0
                for l in range(z.size):
                    inner += phi(root_b[n] * (shift + s[n] * z[l])) * w[l]
                total += first * inner
            out[n] = total

    return numba.njit(parallel=True, cache=spec.builtin, **JIT_OPTIONS)(specialised(pair_sums, f"code{code}"))


def pair_moment(activation, var_a, var_b, cov):
    """``E[phi(u) phi(v)]``, ``Var u = var_a``, ``Var v = var_b``, ``Cov = cov``: the trapezoid rule of
    :func:`remprop.theory.causal.pair_moment` (documented there, docs/theory.md section 8)."""
    spec = activation_spec(activation)
    a, b, c = np.broadcast_arrays(as_float_array("var_a", var_a, positive=True),
                                  as_float_array("var_b", var_b, positive=True), as_float_array("cov", cov))
    z, w = gaussian_trapezoid(PAIR_HALF_NODES)
    scale = np.sqrt(a * b)
    r = np.clip(np.divide(c, scale, out=np.zeros(a.shape), where=scale > 0), -1.0, 1.0)
    s = np.sqrt(1.0 - r * r)
    out = np.empty(a.shape)
    flat = (np.ascontiguousarray(x, dtype=np.float64).ravel() for x in (np.sqrt(a), np.sqrt(b), r, s))
    _pair_sums(spec.code)(*flat, np.ascontiguousarray(z), np.ascontiguousarray(w), out.reshape(-1))
    return out
