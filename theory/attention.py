"""Softmax self-attention at initialisation as a Random Energy Model (REM).

For a fixed query the scores over the T keys are correlated Gaussians; the part
shared by all keys cancels in the softmax and the independent part has variance
``beta**2 q (q - p) log T``. A row of the attention matrix is therefore a REM with T
states (Derrida 1981) whose freezing point sets the critical query/key scale.

Reference: A. Giorlandino & S. Goldt, "Two failure modes of deep transformers and how
to avoid them" (arXiv 2505.24333), Result 1.

The ``*_core`` functions hold each formula once. They use NumPy ufuncs only, so the
same source broadcasts over arrays and compiles with numba for the depth kernels.
"""
from __future__ import annotations

import numpy as np
from numba.extending import register_jitable

from .checks import (
    as_float_array,
    check_overlap,
    check_simplex_cosine,
    output_pair,
    scalar_or_array,
)
from .rem.finite_t import check_seq_len, participation_moment

__all__ = [
    "critical_beta",
    "participation_ratio",
    "softmax_attention_map",
    "gain_controlled_attention_map",
]


@register_jitable
def critical_beta_core(q, p):
    """beta_c = sqrt(2 / (q (q - p))); +inf for collapsed tokens (p = q).

    ``q - p`` is clipped at 0: rounding can leave p an ulp above q at collapse (e.g.
    activation moments from quadrature), which must give +inf, not NaN.
    """
    return np.sqrt(2.0 / (q * np.maximum(q - p, 0.0)))


@register_jitable
def asymptotic_participation_core(beta, beta_c):
    """Y2 = max(0, 1 - beta_c / beta) (T -> infinity)."""
    return np.maximum(0.0, 1.0 - beta_c / beta)


@register_jitable
def softmax_attention_core(q, p, y2, sigma_v2, sigma_b2):
    """(q_A, p_A) of softmax attention with values, given the participation ratio y2."""
    q_out = sigma_v2 * (p + (q - p) * y2) + sigma_b2
    p_out = sigma_v2 * p + sigma_b2
    return q_out, p_out


@register_jitable
def softmax_attention_overlap_core(q, p, y2, cross, sigma_v2, sigma_b2):
    """(q_A, p_A) given Y2 and the cross-overlap of two rows ``cross = <sum_j a_ij a_kj>``.

    ``o_i . o_k / d = sigma_v2 (p + (q - p) sum_j a_ij a_kj) + sigma_b2`` (rows sum to 1).
    """
    q_out = sigma_v2 * (p + (q - p) * y2) + sigma_b2
    p_out = sigma_v2 * (p + (q - p) * cross) + sigma_b2
    return q_out, p_out


@register_jitable
def gain_controlled_attention_core(q, p, y2_centred, sigma_v2, sigma_b2):
    """(q_A, p_A) of attention with the sequence mean removed; y2_centred = Y2 - 1/T."""
    q_out = sigma_v2 * (q - p) * y2_centred + sigma_b2
    p_out = sigma_b2 + 0.0 * q
    return q_out, p_out


def critical_beta(q, p):
    r"""Critical inverse temperature of the attention REM.

    .. math:: \beta_c(q, p) = \sqrt{\frac{2}{q\,(q - p)}}

    Below ``beta_c`` an attention row spreads over all keys (participation ratio
    ``Y2 -> 0`` as ``T -> inf``, the rank-collapse side); above it the row freezes onto
    a few keys (entropy collapse). For normalised, orthogonal tokens (q = 1, p = 0)
    ``beta_c = sqrt(2)``. Collapsed tokens (p = q) give ``+inf``.

    Parameters
    ----------
    q : array_like
        Mean squared token norm per coordinate, > 0.
    p : array_like
        Mean overlap per coordinate of two distinct tokens, ``|p| <= q``.

    Returns
    -------
    ndarray or float
        ``beta_c``, broadcast over the inputs.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Eq. for the REM transition; Derrida (1981).

    Examples
    --------
    >>> float(critical_beta(1.0, 0.0))  # doctest: +ELLIPSIS
    1.41421356...
    """
    q, p = check_overlap(q, p)
    with np.errstate(divide="ignore"):
        return scalar_or_array(critical_beta_core(q, p))


def participation_ratio(beta, q, p, seq_len=None):
    r"""Participation ratio ``Y2 = <sum_j a_ij^2>`` of an attention row.

    Asymptotic (``seq_len=None``):

    .. math:: Y_2 = \max\left(0,\ 1 - \frac{\beta_c(q, p)}{\beta}\right),
              \qquad T \to \infty

    Finite ``T = seq_len``: the exact expectation for T i.i.d. Gaussian energies of
    variance ``v = beta^2 q (q - p) log T``, from ``1/Z^2 = int_0^inf t e^{-tZ} dt``,

    .. math:: Y_2 = T \int_0^\infty t\, E\left[e^{2g - t e^{g}}\right]
              \left(E\left[e^{-t e^{g}}\right]\right)^{T-1} dt,
              \qquad g \sim N(0, v)

    (:func:`~remprop.theory.rem.finite_t.participation_moment`; ``1/T`` at small beta,
    ``~ T^{-(1 - 2 beta^2/beta_c^2)}`` below ``beta_c/2``; 0.279 at T = 512, beta = 1.5,
    q = 1, p = 0 where the asymptotic law gives 0.057).

    Parameters
    ----------
    beta : array_like
        Query/key scale, > 0 (``s_qk^2 = beta sqrt(log T) / d``).
    q, p : array_like
        Token order parameters (see :func:`critical_beta`).
    seq_len : int or None
        Sequence length T >= 2, or None for T -> infinity.

    Returns
    -------
    ndarray or float
        Y2 in [0, 1), broadcast over the inputs.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333; Derrida (1981) for the REM overlap.
    """
    seq_len = check_seq_len(seq_len)
    beta = as_float_array("beta", beta, positive=True)
    q, p = check_overlap(q, p)
    if seq_len is not None:
        return participation_moment(beta, q, p, seq_len, order=2)
    with np.errstate(divide="ignore"):
        return scalar_or_array(asymptotic_participation_core(beta, critical_beta_core(q, p)))


def softmax_attention_map(q, p, beta, sigma_v2=0.2, sigma_b2=4e-4, seq_len=None):
    r"""Order parameters after one softmax self-attention layer.

    .. math::
        q_A = \sigma_v^2\,(p + (q - p)\,Y_2) + \sigma_b^2, \qquad
        p_A = \sigma_v^2\,(p + (q - p)\,C) + \sigma_b^2

    with ``Y2 = participation_ratio(beta, q, p, seq_len)`` and the cross-overlap of two
    rows ``C = <sum_j a_ij a_kj>``: ``C = 0`` as T -> infinity (``seq_len=None``) and
    ``C = 1/T`` at finite T (two independent rows; THEORY.md section 3: sub-leading,
    ~1/T; consistent with the ``Y2 - 1/T`` of :func:`gain_controlled_attention_map`).
    Values ``W_V ~ N(0, sigma_v2/d)``, value bias ``N(0, sigma_b2)``, no output
    projection.

    Note: rows of tokens with cosine rho > 0 have correlated energies, and their exact
    cross-overlap exceeds 1/T (Monte Carlo at T = 512, beta = 1.2: 2 to 7 times 1/T for
    rho between 0.2 and 0.8); 1/T is a lower bound that halves the deviation of the
    T -> infinity maps from simulated BERT stacks.

    Domain: the inputs are the order parameters of T tokens, whose mean cosine obeys
    ``p / q >= -1/(T - 1)``: ``p >= 0`` for ``seq_len=None`` (otherwise ``q_A`` could be
    negative) and ``p >= -q/(T - 1)`` at finite T; other ``p`` raise ``ValueError``.

    Returns
    -------
    (q_A, p_A) : tuple of ndarray
        Broadcast to the common shape of all inputs.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Result 1.
    """
    q, p, seq_len = _check_token_state(q, p, seq_len)
    y2 = np.asarray(participation_ratio(beta, q, p, seq_len))
    cross = 0.0 if seq_len is None else 1.0 / seq_len
    sigma_v2 = as_float_array("sigma_v2", sigma_v2, nonnegative=True)
    sigma_b2 = as_float_array("sigma_b2", sigma_b2, nonnegative=True)
    return output_pair(*softmax_attention_overlap_core(q, p, y2, cross, sigma_v2, sigma_b2))


def gain_controlled_attention_map(q, p, beta, sigma_v2=0.2, sigma_b2=4e-4, seq_len=None):
    r"""Order parameters after gain-controlled attention (sequence mean removed).

    .. math::
        q_A = \sigma_v^2\,(q - p)\,Y_2 + \sigma_b^2, \qquad p_A = \sigma_b^2

    (T -> infinity, ``seq_len=None``; at finite ``T = seq_len``, ``Y2`` becomes the exact
    ``Y2 - 1/T``). In the spread phase the output is the bias alone at T -> infinity: the
    centring removes the collapsed common direction; at finite T it is small but not zero.

    Domain: as :func:`softmax_attention_map` (``p >= 0`` for ``seq_len=None``,
    ``p >= -q/(T - 1)`` at finite T).

    Returns
    -------
    (q_A, p_A) : tuple of ndarray
        Broadcast to the common shape of all inputs.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Sec. on gain-controlled attention.
    """
    q, p, seq_len = _check_token_state(q, p, seq_len)
    y2 = np.asarray(participation_ratio(beta, q, p, seq_len))
    if seq_len is not None:
        y2 = y2 - 1.0 / seq_len
    sigma_v2 = as_float_array("sigma_v2", sigma_v2, nonnegative=True)
    sigma_b2 = as_float_array("sigma_b2", sigma_b2, nonnegative=True)
    return output_pair(*gain_controlled_attention_core(q, p, y2, sigma_v2, sigma_b2))


def _check_token_state(q, p, seq_len):
    """(q, p) of T tokens: ``|p| <= q`` and ``p / q >= -1/(T - 1)`` (``>= 0`` as T -> inf)."""
    q, p = check_overlap(q, p)
    seq_len = check_seq_len(seq_len)
    check_simplex_cosine("p / q", p / q, seq_len)
    return q, p, seq_len
