"""In-place pair maps of the fast causal Gram state (private): one ``T x T`` pass each, on both cores.

The fast causal Gram state (docs/theory.md section 8.1) walks Llama-sized blocks at T in the
thousands, where every ``T x T`` float64 temporary is ``8 T^2`` bytes (0.5 GiB at T = 8192) and
every numpy pass over it a memory sweep. The maps here are the components' own cores
(``dense_core``, ``skip_core``, an MLP's ``hidden_core``) and the pair-moment table's
interpolation (:func:`~remprop.theory.activations.pair_moments.interpolated_moment`) called entry
by entry in compiled loops over the lower triangle (``numba.prange``: all threads), writing into an
array the walker owns and mirroring it; the values are those of the numpy expressions of
:mod:`remprop.theory.gram_state` up to the order of rounding. Used by
:class:`remprop.theory._causal_gram._CausalGramWalker` (``fast=True``) only: the exact method keeps
the numpy maps as its reference.
"""
from __future__ import annotations

import numba
import numpy as np

from ._jit import CACHE, JIT_OPTIONS
from .activations.maps import dense_core
from .activations.pair_moments import interpolated_moment
from .components.gated_mlp import gated_hidden_core
from .components.mlp import own_hidden_core
from .components.residual import skip_core

#: Rows and columns of the tiles in which a lower triangle is mirrored (the transposed reads stay in cache).
TILE = 64


@numba.njit(parallel=True, cache=CACHE, **JIT_OPTIONS)
def symmetrise(g):
    """``g <- (g + g^T) / 2`` in place; True when every entry is finite."""
    t = g.shape[0]
    tiles = (t + TILE - 1) // TILE
    finite = np.ones(tiles, dtype=np.bool_)
    for a in numba.prange(tiles):
        ok = True
        for b in range(a + 1):
            for i in range(a * TILE, min((a + 1) * TILE, t)):
                for j in range(b * TILE, min((b + 1) * TILE, i + 1)):
                    value = 0.5 * (g[i, j] + g[j, i])
                    g[i, j] = value
                    g[j, i] = value
                    ok = ok and np.isfinite(value)
        finite[a] = ok
    return finite.all()


@numba.njit(parallel=True, cache=CACHE, **JIT_OPTIONS)
def mirror_lower(g):
    """The upper triangle of ``g`` from its lower one, in place (tiled)."""
    t = g.shape[0]
    tiles = (t + TILE - 1) // TILE
    for a in numba.prange(tiles):
        for b in range(a + 1):
            for i in range(a * TILE, min((a + 1) * TILE, t)):
                for j in range(b * TILE, min((b + 1) * TILE, i)):
                    g[j, i] = g[i, j]


@numba.njit(parallel=True, cache=CACHE, **JIT_OPTIONS)
def dense_in_place(g, sigma_w2, sigma_b2):
    """A dense layer's ``dense_core`` on every entry of ``g``, in place."""
    t = g.shape[0]
    for i in numba.prange(t):
        for j in range(t):
            g[i, j] = dense_core(g[i, j], g[i, j], sigma_w2, sigma_b2)[1]


@numba.njit(parallel=True, cache=CACHE, **JIT_OPTIONS)
def skip_in_place(branch, g, alpha):
    """``branch <- alpha^2 g + branch`` (the residual's ``skip_core``), in place."""
    t = g.shape[0]
    for i in numba.prange(t):
        for j in range(t):
            branch[i, j] = skip_core(branch[i, j], branch[i, j], g[i, j], g[i, j], alpha)[1]


@numba.njit(parallel=True, cache=CACHE, **JIT_OPTIONS)
def _mlp_pairs(gated, g, q1, m2, roots, fine, token_weights, sigma_w2, sigma_b2, sigma_out, out):
    """The compiled off-diagonal pass of an MLP, its hidden core chosen by ``gated`` (the gated MLP's
    ``gated_hidden_core``, else ``own_hidden_core``; one compiled pass for both, chosen outside the
    entries' loop, as the engine's MLP instruction does): ``out[i, j] = dense_out(hidden(q1_i, p1_ij,
    m2_i, m11(p1_ij)))`` with ``p1_ij = dense(g_ij)`` and ``m11`` the pair-moment table's
    interpolation, lower triangle only (``out`` may be ``g``: entry (i, j) is read before it is
    written, the upper triangle never read)."""
    t = g.shape[0]
    for i in numba.prange(t):
        for j in range(i):
            p1 = dense_core(g[i, j], g[i, j], sigma_w2, sigma_b2)[1]
            m11 = interpolated_moment(p1, roots[i], roots[j], fine, token_weights[i], token_weights[j])
            if gated:
                h11 = gated_hidden_core(q1[i], p1, m2[i], m11)[1]
            else:
                h11 = own_hidden_core(q1[i], p1, m2[i], m11)[1]
            out[i, j] = dense_core(h11, h11, sigma_out, sigma_b2)[1]


def mlp_pairs(comp, g, q1, m2, grid, out):
    """The off-diagonal entries of ``comp``'s Gram map (an MLP, its ``hidden_core``: the own one or the
    gated one, ``comp.gated``) written into ``out`` (both triangles; the diagonal is left to the caller):
    ``q1``, ``m2`` per token, ``grid`` the ``(fine, token_weights, roots)`` of
    :func:`~remprop.theory.activations.pair_moments.pair_grid` at ``q1``."""
    fine, token_weights, roots = grid
    if comp.hidden_core not in (own_hidden_core, gated_hidden_core):
        raise ValueError(f"{type(comp).__name__}: the fast Gram state runs an MLP's own or gated hidden core, "
                         f"got {comp.hidden_core!r}")
    sigma_out = comp.sigma_w2 if comp.sigma_w2_out is None else comp.sigma_w2_out
    _mlp_pairs(comp.hidden_core is gated_hidden_core, g, q1, m2, roots, fine, token_weights, float(comp.sigma_w2),
               float(comp.sigma_b2), float(sigma_out), out)
    mirror_lower(out)
    return out


def masked_softmax(s, seen, cap):
    """Each row of the float32 scores ``s`` in place: capped (``cap tanh(s / cap)`` where ``cap > 0``), the
    keys not ``seen`` masked, softmax (its maximum subtracted; numpy's vectorised exp, which a compiled
    scalar loop runs at half the speed)."""
    if cap > 0:
        np.divide(s, cap, out=s)
        np.tanh(s, out=s)
        s *= cap
    np.copyto(s, -np.inf, where=~seen)
    s -= s.max(axis=1, keepdims=True)
    np.exp(s, out=s)
    s /= s.sum(axis=1, keepdims=True)
    return s
