r"""Rotary position embeddings (RoPE) in the REM of an attention row.

RoPE (Su et al. 2021) rotates the coordinate pairs ``(2i, 2i+1)`` of the query at
position n and of the key at position m by the angles ``n theta_i`` and ``m theta_i``,

.. math:: \theta_i = b^{-2i/d_H},\qquad i = 0, \dots, d_H/2 - 1,

with the base ``b`` (10000 by default) and the head width ``d_H``. The score is
``s_nm = (W_Q x_n)^T R_{m-n} (W_K x_m) / sqrt(d_H)``: only the distance enters.

Covariance of one query's scores (docs/theory.md section 15). Fix the query
``u = W_Q x_n``; over ``W_K ~ N(0, s_qk^2)`` the keys are Gaussian with
``E[k_m k_l^T] = s_qk^2 (x_m . x_l) I``, and ``R_{m-n}^T R_{l-n} = R_{l-m}``, so

.. math:: \mathrm{Cov}(s_{nm}, s_{nl}) = \beta^2 q \log T\,\big[(q - p)\,\delta_{ml}
          + p\, c(m - l)\big],\qquad
          c(k) = \frac{2}{d_H}\sum_{i} \cos(k\,\theta_i)

for tokens with the simplex statistics (q, p) and ``s_qk^2 = beta sqrt(log T) / d``
(``|u_i|^2`` of each pair replaced by its mean ``2 s_qk^2 d q``: relative fluctuations
``O(d_H^{-1/2})``, as for the REM's ``|u|^2``). The variance ``beta^2 q^2 log T`` is that
of every score at every distance; the query position drops out. Without rotation
``c = 1`` and the part ``beta^2 q p log T`` is shared by all keys and cancels in the
softmax (section 3). With RoPE it is a stationary field over the keys whose correlation
decays with the distance, logarithmically for ``1 << k << b``:
``c(k) ~ 1 - (log k + gamma - Ci(k)) / log b`` (``d_H -> infinity``).

Participation ratio. The key-specific energy variance, averaged over the pairs of keys,
``E[(s_m - s_l)^2] / 2`` over ``m != l``, is ``beta^2 q (q - p cbar_T) log T`` with the
mean pair correlation ``cbar_T`` (:func:`rope_mean_correlation`). remprop takes the REM
with this variance,

.. math:: x_{\rm rope} = \beta\sqrt{q\,(q - p\,\bar c_T)},\qquad
          \beta_c^{\rm rope} = \sqrt{\frac{2}{q\,(q - p\,\bar c_T)}},

which is (i) the REM itself for ``p = 0`` or ``c = 1``; (ii) exact to second order in
the energies at small beta (``Y_2 = T^{-1}[1 + (1 - 1/T) x^2 log T]`` depends on the
covariance only through the mean pair variance); (iii) exact as ``T -> infinity``: the
log-correlated field with ``lambda = log T / log b`` is a continuous GREM whose
variance profile has a linear concave hull, so the row is a REM (Poisson-Dirichlet with
``m = beta_c / beta``) with ``cbar -> 1 - min(lambda, 1)`` (Derrida & Gardner 1986;
Bovier & Kurkova 2004; Arguin & Zindy 2014), and ``cbar -> 0`` at fixed base. At finite T
it overestimates ``Y_2`` where the correlated part dominates (cosine ``rho >= 0.8``):
the log-correlated field has larger finite-size corrections than the REM (measured in
docs/theory.md section 15).

References
----------
J. Su et al., "RoFormer: enhanced transformer with rotary position embedding",
arXiv 2104.09864 (2021). B. Derrida, Phys. Rev. B 24, 2613 (1981); B. Derrida & E.
Gardner, J. Phys. C 19, 2253 (1986); A. Bovier & I. Kurkova, Ann. Inst. H. Poincare
Probab. Statist. 40, 481 (2004); L.-P. Arguin & O. Zindy, Ann. Appl. Probab. 24, 1446
(2014). A. Giorlandino & S. Goldt, arXiv 2505.24333 (the REM of attention).
"""
from __future__ import annotations

import functools

import numpy as np

from remprop._deprecation import renamed, reordered

from ..checks import as_float_array, check_count, check_overlap, scalar_or_array
from .asymptotic import asymptotic_participation_core, critical_beta_core
from .checks import check_seq_len
from .finite_t import participation_moment
from .heads import score_variance

__all__ = ["ROPE_BASE", "rope_frequencies", "rope_correlation", "rope_mean_correlation",
           "partial_rotary_correlation", "rope_score_covariance", "rope_beta_critical", "rope_participation_ratio"]

#: The RoPE base of RoFormer and Llama 2 (Llama 3 uses 500000).
ROPE_BASE = 10000.0
#: Below this ``T theta`` the Fejer sum is replaced by its series (error < (T theta)^4 ~ 1e-16).
_SMALL_ANGLE = 1e-4


def _check_rope(head_dim, base):
    """An even head width >= 2 and a base > 1 (``inf`` allowed)."""
    head_dim = check_count("head_dim", head_dim, 2)
    if head_dim % 2:
        raise ValueError(f"head_dim must be even (RoPE rotates coordinate pairs), got {head_dim}")
    base = float(as_float_array("base", base, allow_inf=True))
    if not base > 1.0:
        raise ValueError(f"base must be > 1, got {base!r}")
    return head_dim, base


def rope_frequencies(head_dim=64, base=ROPE_BASE):
    r"""Rotation frequencies ``theta_i = base^{-2i/d_H}``, for ``i`` from 0 to ``d_H/2 - 1`` (radians per position).

    ``theta_0 = 1`` for every base: as ``base -> inf`` all pairs but the first stop rotating.

    Parameters
    ----------
    head_dim : int
        Head width ``d_H``, even.
    base : float
        RoPE base ``b > 1``; ``inf`` is accepted.

    Returns
    -------
    ndarray, shape (head_dim // 2,)

    References
    ----------
    Su et al., arXiv 2104.09864, Eq. (15).

    Examples
    --------
    >>> rope_frequencies(4, 100.0).tolist()
    [1.0, 0.1]
    """
    head_dim, base = _check_rope(head_dim, base)
    exponent = 2.0 * np.arange(head_dim // 2) / head_dim
    with np.errstate(divide="ignore"):
        return np.where(exponent == 0.0, 1.0, np.power(base, -exponent))


def rope_correlation(distance, head_dim=64, base=ROPE_BASE):
    r"""Correlation of the shared score part between two keys ``k`` positions apart.

    .. math:: c(k) = \frac{2}{d_H}\sum_{i=0}^{d_H/2-1} \cos(k\,\theta_i),\qquad c(0) = 1,
              \qquad c(-k) = c(k)

    Parameters
    ----------
    distance : array_like
        Key separation ``k = m - l`` (any real; integers in practice).
    head_dim : int
    base : float

    Returns
    -------
    ndarray or float

    References
    ----------
    docs/theory.md section 15; Su et al., arXiv 2104.09864 (long-term decay, Sec. 3.4.3).

    Examples
    --------
    >>> rope_correlation(0, 64)
    1.0
    """
    theta = rope_frequencies(head_dim, base)
    k = as_float_array("distance", distance)
    return scalar_or_array(np.cos(k[..., None] * theta).mean(axis=-1))


def rope_mean_correlation(seq_len, head_dim=64, base=ROPE_BASE):
    r"""Mean of ``c(m - l)`` over the ordered pairs ``m != l`` of T positions.

    By the Fejer kernel ``sum_{m,l<T} cos((m - l) theta) = sin^2(T theta/2) / sin^2(theta/2)``,

    .. math:: \bar c_T = \frac{2}{d_H}\sum_i \frac{\sin^2(T\theta_i/2)/\sin^2(\theta_i/2) - T}{T (T - 1)},

    exact (a series in ``T theta`` below 1e-4). ``seq_len=None``: the ``T -> infinity``
    limit at fixed base, 0 (every ``theta_i > 0``), or ``1 - 2/d_H`` for ``base = inf``.
    With ``T = b^lambda`` and ``d_H`` large, ``cbar_T ~ 1 - (log T - 3/2 + gamma) / log b``
    for ``1 << T << b`` (docs/theory.md section 15).

    Parameters
    ----------
    seq_len : int or None
        T >= 2.
    head_dim : int
    base : float

    Returns
    -------
    float

    Examples
    --------
    >>> round(rope_mean_correlation(512, 128), 3)
    0.414
    """
    seq_len = check_seq_len(seq_len)
    head_dim, base = _check_rope(head_dim, base)
    return _mean_correlation(seq_len, head_dim, base)


def partial_rotary_correlation(correlation, head_dim, rotary_dim):
    r"""The rotary correlation of a head that rotates only ``r`` of its ``d_H`` coordinates.

    GPT-NeoX (``rotary_pct``) and Phi (``partial_rotary_factor``) rotate the first ``r`` coordinates
    of each query and key with the frequencies ``theta_i = b^{-2i/r}`` of a head of width ``r`` and
    pass the other ``d_H - r`` through. In the covariance of section 15 the score's shared part is
    ``u^T R_{l-m} u`` summed over coordinates; an unrotated coordinate contributes its ``u_j^2`` at
    every distance, so with every ``u_j^2`` replaced by its mean

    .. math:: c(k) = \frac{r}{d_H}\, c_r(k) + 1 - \frac{r}{d_H},

    with ``c_r`` the correlation of a fully rotated head of width ``r``
    (:func:`rope_correlation` at ``head_dim = r``). The relation is linear, so it holds for every
    mean over pairs of keys too (``cbar_T``, :func:`rope_mean_correlation` at ``head_dim = r``,
    and the causal rows' ``cbar_t``): the same approximation as full RoPE, nothing more.

    Parameters
    ----------
    correlation : array_like
        ``c_r`` (or a mean of it) of the rotated part.
    head_dim, rotary_dim : int
        ``d_H`` and ``r``, even, ``2 <= r <= d_H``.

    Returns
    -------
    ndarray or float

    Examples
    --------
    >>> partial_rotary_correlation(0.0, 64, 16)
    0.75
    """
    head_dim = check_count("head_dim", head_dim, 2)
    rotary_dim = check_count("rotary_dim", rotary_dim, 2)
    if rotary_dim > head_dim:
        raise ValueError(f"rotary_dim must be <= head_dim ({head_dim}), got {rotary_dim}")
    share = rotary_dim / head_dim
    return scalar_or_array(share * as_float_array("correlation", correlation) + (1.0 - share))


#: Frequencies summed at a time by :func:`rope_mean_correlation`: a head of any width is
#: averaged in bounded memory (a few arrays of this many float64).
_FREQUENCY_CHUNK = 1 << 20


@functools.lru_cache(maxsize=256)
def _mean_correlation(seq_len, head_dim, base):
    """``cbar_T`` of checked arguments, summed :data:`_FREQUENCY_CHUNK` frequencies at a time.

    Cached: a wide head (``d_H = 1e9``) costs seconds once, and every architecture built
    from the same fields asks again (each replace validates).
    """
    half = head_dim // 2
    total = 0.0
    for start in range(0, half, _FREQUENCY_CHUNK):
        exponent = 2.0 * np.arange(start, min(half, start + _FREQUENCY_CHUNK)) / head_dim
        with np.errstate(divide="ignore", under="ignore"):
            theta = np.where(exponent == 0.0, 1.0, np.power(base, -exponent))
        if seq_len is None:
            total += float(np.count_nonzero(theta == 0.0))
            continue
        t = float(seq_len)
        with np.errstate(divide="ignore", invalid="ignore"):
            fejer = (np.sin(0.5 * t * theta) / np.sin(0.5 * theta)) ** 2
            ratio = (fejer - t) / (t * (t - 1.0))
        series = 1.0 - theta ** 2 * t * (t + 1.0) / 12.0
        total += float(np.sum(np.where(t * theta < _SMALL_ANGLE, series, ratio)))
    return total / half


@reordered("(distance_1, distance_2, q, p, beta, seq_len, head_dim=64, base=ROPE_BASE)")
def rope_score_covariance(beta, distance_1, distance_2, *, q, p, seq_len, head_dim=64, base=ROPE_BASE):
    r"""Covariance of the scores of one query with the keys at distances ``k1`` and ``k2``.

    .. math:: \mathrm{Cov}(s_{n,n+k_1}, s_{n,n+k_2}) = \beta^2 q \log T\,
              \big[(q - p)\,\delta_{k_1 k_2} + p\,c(k_1 - k_2)\big]

    over ``W_Q, W_K ~ N(0, beta sqrt(log T) / d)`` (``qk_scaling="model"``; for heads pass
    the per-head beta of :func:`~remprop.theory.rem.effective_beta`). The variance
    ``beta^2 q^2 log T`` (:func:`~remprop.theory.rem.score_variance`) is the same at every
    distance; ``c = 1`` (no rotation) gives the REM's constant shared part.

    Parameters
    ----------
    beta : array_like
        Query/key scale, > 0.
    distance_1, distance_2 : array_like
        Key positions relative to the query, ``k = m - n`` (integers). The arguments after them are
        keyword-only (the order was ``(distance_1, distance_2, q, p, beta, ...)`` before: an old
        positional call is a ``TypeError``).
    q, p : array_like
        Token order parameters, ``q > 0``, ``|p| <= q``.
    seq_len : int
        T >= 2 (sets ``s_qk^2``).
    head_dim : int
    base : float

    Returns
    -------
    ndarray or float

    References
    ----------
    docs/theory.md sections 2, 3 and 15.
    """
    q, p = check_overlap(q, p)
    k1 = as_float_array("distance_1", distance_1)
    k2 = as_float_array("distance_2", distance_2)
    scale = np.asarray(score_variance(beta, q, seq_len)) / q
    same = (k1 == k2).astype(np.float64)
    return scalar_or_array(scale * ((q - p) * same + p * np.asarray(rope_correlation(k1 - k2, head_dim, base))))


def _rope_overlap(q, p, seq_len, head_dim, base):
    """Checked (q, p) and the overlap ``p cbar_T`` left in the key-specific energies."""
    q, p = check_overlap(q, p)
    return q, p, p * rope_mean_correlation(seq_len, head_dim, base)


def rope_beta_critical(q, p, seq_len=None, head_dim=64, base=ROPE_BASE):
    r"""Critical beta of an attention row with RoPE.

    .. math:: \beta_c^{\rm rope} = \sqrt{\frac{2}{q\,(q - p\,\bar c_T)}}

    with ``cbar_T`` of :func:`rope_mean_correlation`; ``seq_len=None`` is ``T -> inf`` at
    fixed base, ``sqrt(2) / q``: all of the score variance counts, and collapsed tokens
    (p = q) freeze at a finite beta. Between, ``beta_c^rope <= beta_c`` (no positions or
    absolute positions, :func:`~remprop.theory.rem.beta_critical`).

    Parameters
    ----------
    q, p : array_like
    seq_len : int or None
    head_dim : int
    base : float

    Returns
    -------
    ndarray or float

    References
    ----------
    docs/theory.md section 15; Derrida & Gardner (1986); Arguin & Zindy (2014).

    Examples
    --------
    >>> round(rope_beta_critical(1.0, 0.0, 512), 6)
    1.414214
    """
    q, _, p_left = _rope_overlap(q, p, seq_len, head_dim, base)
    with np.errstate(divide="ignore"):
        return scalar_or_array(critical_beta_core(q, p_left))


def rope_participation_ratio(beta, q, p, seq_len=None, head_dim=64, base=ROPE_BASE):
    r"""Participation ratio ``Y2`` of an attention row with RoPE.

    The REM with the key-specific energy variance ``beta^2 q (q - p cbar_T) log T``
    (module docstring): at finite T the exact finite-T REM moment
    (:func:`~remprop.theory.rem.participation_moment`) at
    ``x = beta sqrt(q (q - p cbar_T))``; ``seq_len=None`` gives
    ``max(0, 1 - beta_c^rope / beta)``.

    Accuracy against Gaussian energies with the exact RoPE covariance (Monte Carlo,
    ``d_H = 128``, base 1e4, T = 512 and 1024): within 7 % relative for cosines
    ``rho <= 0.5``; up to +50 % near ``beta_c^rope`` and +18 % at ``beta = 4`` for
    ``rho = 0.9`` (docs/theory.md section 15).

    Parameters
    ----------
    beta : array_like
        Per-head query/key scale, > 0.
    q, p : array_like
    seq_len : int or None
    head_dim : int
    base : float

    Returns
    -------
    ndarray or float

    References
    ----------
    docs/theory.md section 15; Derrida (1981).

    Examples
    --------
    >>> round(rope_participation_ratio(1.5, 1.0, 0.0, 512), 3)  # p = 0: the REM
    0.279
    """
    beta = as_float_array("beta", beta, positive=True)
    q, _, p_left = _rope_overlap(q, p, seq_len, head_dim, base)
    seq_len = check_seq_len(seq_len)
    if seq_len is None:
        with np.errstate(divide="ignore"):
            return scalar_or_array(asymptotic_participation_core(beta, critical_beta_core(q, p_left)))
    return participation_moment(beta, q, p_left, seq_len, order=2)


#: Deprecated spelling of :func:`rope_beta_critical`, removed in the next release.
rope_critical_beta = renamed("rope_critical_beta", rope_beta_critical)
