r"""The fast attention map of the Gram states (private): factor-drawn scores, projected values.

Its public side is ``method="fast"`` of :func:`remprop.theory.causal.propagate_causal_gram` and
:func:`remprop.theory.gram_state.propagate_gram` (docs/theory.md section 8.1); the exact walkers
(``method="exact"``) stay the reference. One attention layer maps a Gram matrix ``G`` (T x T) to
``sigma_v^2 E[A G A^T] + sigma_b^2`` with the same physics as the exact walkers, at ``O(T^2)`` work
per draw in place of ``O(T^3)``:

* **Scores as a product of factor draws.** ``u, v`` (T x m) with i.i.d. columns ``N(0, K)``
  (``u = L Z``, ``L`` the Cholesky factor of the score kernel ``K``) and ``S = c u v^T / sqrt(m)``
  have ``Cov(S_ij, S_kl) = c^2 K_ik K_jl`` for every ``m``, the covariance of the exact walkers;
  the law is Gaussian only as ``m -> inf`` (a real head is ``m = d_H``: these are its queries and
  keys at infinite width). With RoPE the ``m / 2`` column pairs are spread evenly over the head's
  ``d_H / 2`` frequencies and each pair of row i is turned by ``theta_f i``: ``O(T m)`` work, and the
  covariance becomes ``c^2 K_ik K_jl mean_f cos(theta_f ((j - i) - (l - k)))``, exactly section 15's.
* **Values projected, the smooth part exact.** ``G = W W^T + R`` with ``W = G B (B^T G B)^{-1/2}``
  (the Nystrom part of ``G`` on block indicators ``B`` of contiguous positions) and ``R`` its PSD
  remainder; ``E[A G A^T] = E[(A W)(A W)^T] + E[(A X)(A X)^T] / n`` with ``X = L_G (Z - V V^T Z)``,
  ``n`` columns of covariance exactly ``R``. Unbiased given ``A``; its noise is that of ``R`` alone
  (the tokens' own parts), not of the shared ones.
* **Rows in chunks.** Each chunk of query rows draws its scores only over the span of keys its rows
  see (:func:`~remprop.theory.attention_masks.causal_window_mask` read once), so the causal half
  of ``T x T`` is never drawn and no ``T x T`` score matrix is held.

Its BLAS calls run on :data:`~remprop.theory.gram_threads.BLAS_THREADS` threads (one;
:func:`~remprop.theory.gram_threads.gram_blas_threads`).

The draws and the score kernel's Cholesky factor run in float32 (the Monte Carlo error, 1e-3, is far
above float32's rounding: the Gram state moves by about 1e-7 relative against a float64 factor).
"""
from __future__ import annotations

import numpy as np
from scipy.linalg import blas, lapack

from ._gram_in_place import masked_softmax
from .gram_threads import gram_blas_threads
from .activations.pair_moments import CHEBYSHEV_CORRELATIONS

#: Query rows drawn at once (the scores of one chunk: ``ROW_CHUNK x`` its keys' span).
ROW_CHUNK = 256
#: Score width ``m``: at least this many columns (rounded up to a multiple of ``d_H`` with RoPE, so
#: that every frequency carries the same number of column pairs).
SCORE_WIDTH = 64
#: Value columns ``n`` of the projected remainder per draw.
VALUE_WIDTH = 64
#: Blocks of contiguous positions of the Nystrom part (fewer for short sequences: at most T / 4).
NYSTROM_BLOCKS = 32
#: Relative jitter steps of the Cholesky factor of a (nearly) singular kernel, before the eigh root.
JITTER = (0.0, 1e-12, 1e-10, 1e-8)
#: Relative jitter steps of the float32 Cholesky factor (:func:`lower_factor32`), before the float64 one.
JITTER32 = (0.0, 1e-7, 1e-6, 1e-5)


def score_width(frequencies):
    """``m``: :data:`SCORE_WIDTH` rounded up to a multiple of ``2 F`` (``F`` rotary frequencies)."""
    if frequencies is None:
        return SCORE_WIDTH
    pair = 2 * len(frequencies)
    return pair * -(-SCORE_WIDTH // pair)


def draw_work(t, draws, frequencies=None, two_factors=False, head_dim=None):
    """Floating-point operations of one layer of :func:`fast_attention_gram` (``t`` tokens, all keys
    causal): the Cholesky factor(s) ``T^3 / 3``, per draw the factor draws ``T^2 (2 m + n)`` (a
    triangular product), the causal half of the scores ``T^2 m`` and of ``A [W, X]`` ``T^2 (r + n)``,
    and the output ``T^2 draws (r + n)`` (a symmetric rank-k update). At finite width (``head_dim``
    given) ``m = d_H`` and the values gain the ``2 m`` columns of the tokens' own score parts."""
    m = score_width(frequencies) if head_dim is None else int(head_dim)
    r = nystrom_blocks(t)
    cols = r + VALUE_WIDTH + (0 if head_dim is None else 2 * m)
    square = float(t) ** 2
    per_draw = square * (2 * m + VALUE_WIDTH) + square * m + square * cols + square * cols
    return (2 if two_factors else 1) * float(t) ** 3 / 3 + draws * per_draw


def table_work(t, half_nodes, variance_nodes=6):
    """Operations of the fast MLP's pair-moment table (``pair_moments_table``) at ``t`` tokens: ``K^2 R``
    quadratures of ``(2 half_nodes + 1)^2`` nodes (30 operations a node) and ``6 K^2`` a pair, counted at
    ``K = 6`` log-variance nodes (a spread of 1; OLMo 2's widest, after its first block, is 0.4: K = 5)."""
    k2 = variance_nodes ** 2
    return 30.0 * k2 * CHEBYSHEV_CORRELATIONS * (2 * half_nodes + 1) ** 2 + 6.0 * k2 * float(t) ** 2


def nystrom_blocks(t):
    """Blocks of the Nystrom part at ``t`` tokens: :data:`NYSTROM_BLOCKS`, at most ``t // 4`` (>= 1)."""
    return max(1, min(NYSTROM_BLOCKS, t // 4))


def lower_factor(k):
    """A lower-triangular ``L`` (float64) with ``L L^T = K``: the Cholesky factor (to the jitter of
    :data:`JITTER`, relative to the mean diagonal), else from the eigendecomposition's root ``S``
    (an exactly singular ``K``): ``S^T = Q R`` gives ``L = R^T``."""
    scale = float(np.mean(np.diag(k)))
    for jitter in JITTER:
        a = k + (jitter * scale) * np.eye(k.shape[0]) if jitter else k
        factor, info = lapack.dpotrf(a, lower=1, clean=1, overwrite_a=0)
        if info == 0:
            return factor
    lam, u = np.linalg.eigh(k)
    root = (u * np.sqrt(np.maximum(lam, 0.0))) @ u.T
    return np.linalg.qr(root.T, mode="r").T


def lower_factor32(k):
    """A lower-triangular float32 ``L`` with ``L L^T = K``: LAPACK's float32 Cholesky of ``K`` (twice the
    speed and half the memory of float64's), to the relative jitter of :data:`JITTER32` (a shift of the
    scores' covariance by at most 1e-5 of its mean diagonal, below the Monte Carlo error of 1e-3), else
    :func:`lower_factor`'s float64 factor rounded."""
    scale = float(np.mean(np.diag(k)))
    for jitter in JITTER32:
        a = k.astype(np.float32).T   # K symmetric: its transpose is K in Fortran order, factored in place
        if jitter:
            a[np.diag_indices_from(a)] += np.float32(jitter * scale)
        factor, info = lapack.spotrf(a, lower=1, clean=1, overwrite_a=1)
        del a
        if info == 0:
            return factor
    return lower_factor(k).astype(np.float32)


def _block_indicators(t):
    """Row index of every position's block: ``r`` contiguous blocks, growing geometrically (the early
    tokens, which differ most, alone)."""
    r = nystrom_blocks(t)
    edges = np.unique(np.round(np.geomspace(1, t, r + 1)).astype(int) - 1)
    edges[0], edges[-1] = 0, t
    return np.searchsorted(edges, np.arange(t), side="right") - 1, len(edges) - 1


def nystrom_part(g):
    """``(W, P)``: the Nystrom factor ``W = G B (B^T G B)^{-1/2}`` of ``g`` on the block indicators and the
    map ``P = (B^T G B)^{-1/2} B^T`` with ``X - W (P X)`` the projection of samples ``X ~ N(0, G)`` onto
    the remainder ``R = G - W W^T`` (eigenvalues of ``B^T G B`` below 1e-12 of the largest dropped)."""
    t = g.shape[0]
    index, r = _block_indicators(t)
    b = np.zeros((t, r))
    b[np.arange(t), index] = 1.0
    gb = g @ b
    lam, u = np.linalg.eigh(b.T @ gb)
    keep = lam > 1e-12 * lam[-1]
    inv_root = u[:, keep] / np.sqrt(lam[keep])
    return gb @ inv_root, inv_root.T @ b.T


def _rotate(x, angles):
    """Turn the column pairs ``(2a, 2a + 1)`` of ``x`` (T x m) at row i by ``angles[i, a]``."""
    cos, sin = np.cos(angles), np.sin(angles)
    even, odd = x[:, 0::2], x[:, 1::2]
    out = np.empty_like(x)
    out[:, 0::2] = even * cos - odd * sin
    out[:, 1::2] = even * sin + odd * cos
    return out


def _key_spans(seen):
    """``[(rows, lo, hi)]``: chunks of :data:`ROW_CHUNK` query rows and the span of keys they see."""
    t = seen.shape[0]
    spans = []
    for start in range(0, t, ROW_CHUNK):
        rows = slice(start, min(start + ROW_CHUNK, t))
        cols = np.flatnonzero(seen[rows].any(axis=0))
        spans.append((rows, int(cols[0]), int(cols[-1]) + 1))
    return spans


def fast_attention_gram(g, kernel, c, seen, rng, draws, frequencies=None, logit_softcap=None, width=None,
                        head_dim=None):
    r"""``E[A G A^T]`` (T x T, float64, symmetric) by factor-drawn scores and projected values; at a
    finite width ``d`` the mean of ``A (X X^T / d) A^T`` over the tokens ``X`` themselves.

    Parameters
    ----------
    g : ndarray (T, T)
        The Gram matrix of the attention input (values).
    kernel : ndarray (T, T)
        The score kernel ``K`` (``g`` itself, or ``kappa_n(C)`` with QK-norm).
    c : float
        The score scale: ``Cov(S_ij, S_kl) = c^2 K_ik K_jl`` (times the rotary correlation).
    seen : ndarray (T, T) of bool
        True where query i sees key j (every row at least one key).
    rng : numpy.random.Generator
    draws : int
        Score draws.
    frequencies : ndarray, optional
        The head's ``theta_f`` (RoPE); None: no rotation.
    logit_softcap : float, optional
        Each drawn score becomes ``cap tanh(s / cap)``.
    width, head_dim : int, optional
        The stream's width ``d`` and a head's ``d_H`` (both or neither): the values are the tokens whose
        queries and keys made the scores (docs/theory.md section 8.2), ``m = d_H`` score columns (a real
        head's), and the result is ``(1 - 2 d_H / d) E[A G A^T] + E[(A U)(A U)^T + (A V)(A V)^T] / d``
        with ``U, V`` the unrotated query and key factors of the tokens. None: infinite width, ``E[A G A^T]``.
    """
    with gram_blas_threads():
        return _fast_attention_gram(g, kernel, c, seen, rng, draws, frequencies, logit_softcap, width, head_dim)


def _fast_attention_gram(g, kernel, c, seen, rng, draws, frequencies, logit_softcap, width, head_dim):
    t = g.shape[0]
    finite = width is not None
    m = int(head_dim) if finite else score_width(frequencies)
    f32 = np.float32
    lk32 = lower_factor32(kernel)
    lg32 = lk32 if kernel is g else lower_factor32(g)
    w, proj = nystrom_part(g)
    r = w.shape[1]
    angles = None
    if frequencies is not None:
        per_pair = np.tile(np.asarray(frequencies, dtype=np.float64), m // (2 * len(frequencies)))
        angles = (np.arange(t)[:, None] * per_pair[None, :]).astype(f32)
    spans = _key_spans(seen)
    cols = r + VALUE_WIDTH + (2 * m if finite else 0)
    out = np.empty((t, draws * cols), dtype=f32)
    scale = f32(c / np.sqrt(m))
    cap = f32(0.0 if logit_softcap is None else logit_softcap)
    if finite:
        # X X^T / d = (1 - 2 d_H / d) G + (U U^T + V V^T) / d: the tokens' parts outside and inside the
        # head's query and key directions; U = L_G Z (with QK-norm the kernel's factor, rescaled to G's norms)
        shrink = f32(np.sqrt(1.0 - 2.0 * m / width))
        own = (np.sqrt(np.diag(g) / np.diag(kernel)) / np.sqrt(width)).astype(f32)[:, None]
    else:
        shrink = f32(1.0)
    for d in range(draws):
        normals = rng.standard_normal((t, 2 * m + VALUE_WIDTH), dtype=f32)
        both = blas.strmm(1.0, lk32, normals[:, :2 * m], lower=1)
        x = blas.strmm(1.0, lg32, normals[:, 2 * m:], lower=1)
        u, v = both[:, :m], both[:, m:]
        parts = [both * own] if finite else []   # before the rotation and the scaling of u (in place)
        if angles is not None:
            u, v = _rotate(u, angles), _rotate(v, angles)
        u *= scale
        # the remainder's samples: X - W (P X), covariance R = G - W W^T; values [W, X / sqrt(n)]
        x = x - (w @ (proj @ x)).astype(f32)
        values = np.concatenate([w.astype(f32) * shrink, x * (shrink / f32(np.sqrt(VALUE_WIDTH)))] + parts, axis=1)
        block = out[:, d * cols:(d + 1) * cols]
        for rows, lo, hi in spans:
            s = u[rows] @ v[lo:hi].T
            masked_softmax(s, seen[rows, lo:hi], cap)
            block[rows] = s @ values[lo:hi]
    del lk32, lg32, normals, both, x, u, v, values
    out *= np.float32(1.0 / np.sqrt(draws))
    return _outer_product(out)


def _outer_product(out):
    """``out out^T`` (float64, T x T) from float32 ``out`` (T x k): the upper triangle by blocks of
    :data:`ROW_CHUNK` rows, each mirrored (about half the work of the full product, one chunk of
    float32 temporaries)."""
    t = out.shape[0]
    result = np.empty((t, t))
    for start in range(0, t, ROW_CHUNK):
        stop = min(start + ROW_CHUNK, t)
        part = out[start:stop] @ out[start:].T
        result[start:stop, start:] = part
        result[start:, start:stop] = part.T
    return result
