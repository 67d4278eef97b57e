r"""QK-norm: the REM of attention when queries and keys are RMS-normalised (OLMo 2, Gemma 3).

With QK-norm the query and the key of a head are RMS-normalised, with a learnable gain
``g`` (1 at initialisation), before the scores:

.. math:: \hat u = g\,\frac{u}{\sqrt{|u|^2/n}}, \qquad
          s_{ij} = \frac{\hat u_i \cdot \hat k_j}{\sqrt{S}},

``u = W_Q x_i``, ``k_j = W_K x_j``, normalised over ``n`` coordinates (``n = d_H``, one
head: Gemma 3; ``n = H d_H``, all heads at once: OLMo 2), scores over ``sqrt(S)``
(``S = d_H``: OLMo 2; ``S = query_pre_attn_scalar``: Gemma 2/3). Since ``W_Q`` and
``W_K`` are independent, the query direction ``e = u/|u|`` is independent of the keys,
and by rotation invariance only the key directions ``f_j = k_j/|k_j|`` enter:

.. math:: \mathrm{Var}\, s_{ij} = g^4\,\frac{d_H}{S}, \qquad
          \mathrm{Cov}(s_{ij}, s_{il}) = g^4\,\frac{d_H}{S}\,\kappa_n(\rho),

with ``rho = p/q`` the cosine of the tokens ``x_j, x_l`` (the components of ``k_j`` and
``k_l`` have that correlation) and ``kappa_n(rho) = E[f_j . f_l]`` the mean cosine of two
Gaussian vectors of correlation ``rho`` in ``n`` dimensions (:func:`gaussian_cosine_mean`).
The weights' scale and the tokens' norm ``q`` drop out: after normalisation the scores
depend on the token cosine only. The part shared by the keys cancels in the softmax
(docs/theory.md section 3.1), so the REM's energies have the variance

.. math:: v = g^4\,\frac{d_H}{S}\,\bigl(1 - \kappa_n(\rho)\bigr) = x^2 \log T,

against ``beta^2 q (q - p) log T`` in the engine's convention (``s_qk^2 = beta sqrt(log T)/d``,
docs/theory.md sections 2-3): the effective beta is

.. math:: \beta_{\rm qk} = \frac{g^2}{q}\sqrt{\frac{d_H}{S}\,
          \frac{1 - \kappa_n(\rho)}{(1 - \rho)\log T}}
          \;\xrightarrow{n \to \infty}\; \frac{g^2}{q}\sqrt{\frac{d_H}{S \log T}} .

At initialisation (``g = 1``, ``S = d_H``) ``x^2 = (1 - kappa)/log T < 2`` for every
``T >= 3`` (and for every T when ``rho >= 0``):
a QK-normed head never reaches the REM's freezing point ``x = sqrt(2)``, whatever the
weights' scale; entropy collapse needs ``g^4 (d_H/S)(1 - kappa) > 2 log T``.

Accuracy: the two moments are exact for every ``n`` (RMSNorm without eps; an eps adds the
factor ``(1 + eps/m)^{-2}`` to both, ``m = E|u|^2/n`` the queries' mean square). The
energies are exactly Gaussian only as ``n -> infinity`` (``s = g^2 sqrt(d_H^2/S) e.f`` is
bounded); with OLMo 2's normalisation over ``n = H d_H`` the per-head query norm
fluctuates by ``O(1/sqrt(d_H))`` between rows, so the moments above are row averages.

References
----------
A. Henry et al., "Query-Key Normalization for Transformers", Findings of EMNLP 2020
(QK-norm); M. Dehghani et al., ICML 2023 (QK-layernorm at scale); Team OLMo, "2 OLMo 2
Furious", arXiv 2501.00656 (RMSNorm of the full query/key projections); Gemma Team,
"Gemma 3 Technical Report", arXiv 2503.19786 (per-head QK-norm, scores over
``query_pre_attn_scalar``); W. F. Sheppard, Phil. Trans. R. Soc. A 192, 101 (1899)
(``kappa_1 = (2/pi) arcsin rho``); docs/theory.md section 16.
"""
from __future__ import annotations

import math

import numpy as np
from numba.extending import register_jitable

from ..checks import as_float_array, check_simplex_cosine, scalar_or_array
from .checks import check_seq_len

__all__ = ["gaussian_cosine_mean", "qk_norm_score_moments", "qk_norm_beta", "qk_norm_energy_core"]

#: Below this distance from rho = 1, qk_norm_beta uses the limit (1 - kappa)/(1 - rho) -> kappa'(1).
_NEAR_ONE = 1e-8


def _check_dim(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


def _dims(head_dim, norm_dim, scale_dim):
    head_dim = _check_dim("head_dim", head_dim)
    norm_dim = head_dim if norm_dim is None else _check_dim("norm_dim", norm_dim)
    if norm_dim < head_dim:
        raise ValueError(f"norm_dim must be >= head_dim ({head_dim}): a head's coordinates are normalised "
                         f"together, got {norm_dim}")
    scale = float(head_dim) if scale_dim is None else float(as_float_array("scale_dim", scale_dim, positive=True))
    return head_dim, norm_dim, scale


def _cosine_constant(dim):
    """``(2/n) (Gamma((n+1)/2) / Gamma(n/2))^2``: kappa_n(rho) = c rho 2F1(1/2, 1/2; n/2 + 1; rho^2)."""
    from scipy.special import poch  # lazily: scipy.special costs 0.25 s of import

    return 2.0 / dim * float(poch(dim / 2.0, 0.5)) ** 2   # poch: no cancellation of two log-gammas


def gaussian_cosine_mean(rho, dim):
    r"""Mean cosine ``kappa_n(rho) = E[a.b / (|a||b|)]`` of two Gaussian vectors of correlation ``rho``.

    ``a, b`` in ``R^n`` with i.i.d. pairs of components, ``E a_k b_k = rho``, unit variances:

    .. math:: \kappa_n(\rho) = \frac{2}{n}\left(\frac{\Gamma(\frac{n+1}{2})}{\Gamma(\frac n2)}\right)^2
              \rho\; {}_2F_1\!\left(\tfrac12, \tfrac12; \tfrac n2 + 1; \rho^2\right)
              = \rho\left(1 - \frac{1 - \rho^2}{2n}\right) + O(n^{-2}).

    ``kappa_1 = (2/pi) arcsin rho`` (Sheppard 1899), ``kappa_n(+-1) = +-1``, odd in rho,
    ``|kappa_n(rho)| <= |rho|``. Obtained by averaging over the two norms (chi variables) at a
    fixed angle; checked against these limits and by Monte Carlo (tests/test_qk_norm.py).

    Parameters
    ----------
    rho : array_like
        Correlation of the components, in [-1, 1].
    dim : int
        Dimension n >= 1.

    Returns
    -------
    ndarray or float

    References
    ----------
    W. F. Sheppard, Phil. Trans. R. Soc. A 192, 101 (1899); docs/theory.md section 16.
    """
    rho = as_float_array("rho", rho, low=-1.0, high=1.0)
    dim = _check_dim("dim", dim)
    inside = np.abs(rho) < 1.0   # kappa_n(+-1) = +-1 exactly
    series = _hypergeometric_half(dim / 2.0 + 1.0, np.where(inside, rho * rho, 0.0))
    return scalar_or_array(np.where(inside, _cosine_constant(dim) * rho * series, rho))


#: From this c on, 2F1(1/2, 1/2; c; z) is summed as its series (scipy's hyp2f1 returns NaN
#: for c >~ 129 and z >~ 0.95); the k-th term is below c^-k k! <~ e^-c for k <= c, so the
#: sum has converged to rounding long before _SERIES_TERMS even at z = 1.
_SERIES_FROM_C, _SERIES_TERMS = 40.0, 256


def _hypergeometric_half(c, z):
    """``2F1(1/2, 1/2; c; z)`` for ``0 <= z < 1``."""
    if c < _SERIES_FROM_C:
        from scipy.special import hyp2f1

        return hyp2f1(0.5, 0.5, c, z)
    k = np.arange(1, _SERIES_TERMS + 1, dtype=np.float64)
    ratios = (k - 0.5) ** 2 / ((c + k - 1.0) * k)
    coefficients = np.concatenate(([1.0], np.cumprod(ratios)))
    z = np.asarray(z, dtype=np.float64)
    # the terms a_k z^k fall monotonically (every ratio < 1, z <= 1): those below 1e-20 of the first at the
    # largest z are dropped (at c = 65, n = 128, about 30 of the 256 remain; each is a pass over z)
    top = float(z.max()) if z.size else 0.0
    kept = int(np.count_nonzero(coefficients * top ** np.arange(coefficients.size) > _SERIES_CUT)) if top > 0 else 1
    return np.polynomial.polynomial.polyval(z, coefficients[:max(kept, 1)])


#: Relative size of the last series term :func:`_hypergeometric_half` sums.
_SERIES_CUT = 1e-20


def _gauss_at_one(a, b, c):
    """``2F1(a, b; c; 1) = Gamma(c) Gamma(c - a - b) / (Gamma(c - a) Gamma(c - b))`` (Gauss), c > a + b."""
    from scipy.special import gammaln

    return math.exp(gammaln(c) + gammaln(c - a - b) - gammaln(c - a) - gammaln(c - b))


def _cosine_slope_at_one(dim):
    """``kappa_n'(1) = c [F(1) + 2 F'(1)]``, ``F = 2F1(1/2, 1/2; n/2 + 1; .)``: the limit of
    ``(1 - kappa)/(1 - rho)`` as rho -> 1 (infinite for n <= 2, where ``F'(1)`` diverges)."""
    if dim <= 2:
        return math.inf
    c, a = _cosine_constant(dim), dim / 2.0 + 1.0
    return c * (_gauss_at_one(0.5, 0.5, a) + 2.0 * (0.25 / a) * _gauss_at_one(1.5, 1.5, a + 1.0))


def qk_norm_score_moments(rho, head_dim, gain=1.0, *, norm_dim=None, scale_dim=None):
    r"""Variance of a QK-normed score and covariance of two scores of one query.

    .. math:: \mathrm{Var}\, s_{ij} = g^4\,\frac{d_H}{S}, \qquad
              \mathrm{Cov}(s_{ij}, s_{il}) = g^4\,\frac{d_H}{S}\,\kappa_n(\rho)

    over the query/key weights (any scale), for keys of cosine ``rho``; exact for every
    ``n`` (module docstring), independent of the tokens' norm ``q``.

    Parameters
    ----------
    rho : array_like
        Cosine ``p/q`` of the two key tokens, in [-1, 1].
    head_dim : int
        Head width ``d_H``.
    gain : array_like
        RMSNorm gain g of queries and keys (the same for both; 1 at initialisation), > 0.
    norm_dim : int, optional
        Coordinates normalised together, ``n >= d_H`` (default ``d_H``, per head as in
        Gemma 3; OLMo 2 normalises all heads at once, ``n = H d_H``).
    scale_dim : float, optional
        ``S`` of the scores' ``1/sqrt(S)`` (default ``d_H``; Gemma: ``query_pre_attn_scalar``).

    Returns
    -------
    variance, covariance : ndarray or float
        Broadcast over ``rho`` and ``gain``.

    References
    ----------
    Henry et al. 2020; Team OLMo, arXiv 2501.00656; Gemma Team, arXiv 2503.19786;
    docs/theory.md section 16.
    """
    head_dim, norm_dim, scale = _dims(head_dim, norm_dim, scale_dim)
    gain = as_float_array("gain", gain, positive=True)
    kappa = np.asarray(gaussian_cosine_mean(rho, norm_dim))
    variance = gain ** 4 * (head_dim / scale)
    variance, kappa = np.broadcast_arrays(variance, kappa)
    return scalar_or_array(variance * 1.0), scalar_or_array(variance * kappa)


def qk_norm_beta(rho, head_dim, seq_len, gain=1.0, *, q=1.0, norm_dim=None, scale_dim=None):
    r"""The beta of the engine's convention that a QK-normed head behaves like.

    The REM's energy variance (the key-dependent part of :func:`qk_norm_score_moments`)
    set equal to ``beta^2 q (q - p) log T`` (docs/theory.md sections 2-3):

    .. math:: \beta_{\rm qk} = \frac{g^2}{q}\sqrt{\frac{d_H}{S}\,
              \frac{1 - \kappa_n(\rho)}{(1 - \rho)\log T}},

    so that ``participation_ratio(beta_qk, q, rho q, T)`` is the QK-normed head's Y2 and
    ``beta_qk > beta_critical(q, rho q)`` its entropy collapse. At ``rho = 1`` the limit
    ``(1 - kappa)/(1 - rho) -> kappa_n'(1)`` is taken (infinite for ``n <= 2``; the energies
    vanish there, so the row is uniform for any beta). Depends on ``q`` only through the
    convention's ``1/q``: the reduced scale ``x = beta_qk sqrt(q (q - p))`` does not.

    Parameters
    ----------
    rho : array_like
        Mean cosine ``p/q`` of the tokens the attention sees, in ``[-1/(T - 1), 1]``.
    head_dim : int
        Head width ``d_H``.
    seq_len : int
        Sequence length T >= 2.
    gain : array_like
        RMSNorm gain g (1 at initialisation), > 0.
    q : array_like
        Mean squared norm of the tokens the attention sees (1 after a pre-norm), > 0.
    norm_dim, scale_dim
        As in :func:`qk_norm_score_moments`.

    Returns
    -------
    ndarray or float
        Broadcast over ``rho``, ``gain`` and ``q``.

    References
    ----------
    Henry et al. 2020; Team OLMo, arXiv 2501.00656; Gemma Team, arXiv 2503.19786;
    docs/theory.md sections 3 and 16.
    """
    head_dim, norm_dim, scale = _dims(head_dim, norm_dim, scale_dim)
    seq_len = check_seq_len(seq_len, allow_none=False)
    rho = check_simplex_cosine("rho", as_float_array("rho", rho, high=1.0), seq_len)
    gain = as_float_array("gain", gain, positive=True)
    q = as_float_array("q", q, positive=True)
    near = rho > 1.0 - _NEAR_ONE
    safe = np.where(near, 0.0, rho)
    ratio = np.where(near, _cosine_slope_at_one(norm_dim),
                     (1.0 - np.asarray(gaussian_cosine_mean(safe, norm_dim))) / (1.0 - safe))
    return scalar_or_array(gain ** 2 / q * np.sqrt(head_dim / scale * ratio / math.log(seq_len)))


@register_jitable
def qk_norm_energy_core(rho, dim, cbar):
    r"""``1 - kappa_n(rho) cbar``: the REM energy variance of a QK-normed head over ``g^4 d_H/S``.

    .. math:: \kappa_n(\rho) = \frac{2}{n}\Big(\frac{\Gamma(\frac{n+1}{2})}{\Gamma(\frac n2)}\Big)^2
              \rho\,{}_2F_1\big(\tfrac12, \tfrac12; \tfrac n2 + 1; \rho^2\big)

    (:func:`~remprop.theory.rem.gaussian_cosine_mean`, summed here as its series so that the
    numba kernels and the block tree share one scalar function; ``cbar`` is RoPE's mean
    rotary correlation, 1 without RoPE). Clipped at 0; ``kappa_n(+-1) = +-1``. Scalars only
    (``register_jitable``: plain Python outside numba).

    References
    ----------
    docs/theory.md sections 16 and 19; W. F. Sheppard, Phil. Trans. R. Soc. A 192, 101 (1899).
    """
    if rho >= 1.0:
        kappa = 1.0
    elif rho <= -1.0:
        kappa = -1.0
    else:
        c = 0.5 * dim + 1.0
        z = rho * rho
        total = 1.0
        term = 1.0
        k = 1
        while k < 200000:
            term = term * (k - 0.5) * (k - 0.5) / ((c + k - 1.0) * k) * z
            total += term
            if term < 1e-17 * total:
                break
            k += 1
        constant = 2.0 / dim * math.exp(2.0 * (math.lgamma(0.5 * (dim + 1.0)) - math.lgamma(0.5 * dim)))
        kappa = constant * rho * total
    return max(1.0 - kappa * cbar, 0.0)
