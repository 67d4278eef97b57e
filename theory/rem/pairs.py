r"""Two-key moments of an attention row: ``E[sum_{j != l} a_j^k a_l^m]`` and ``E[Y2^2]``.

The gradients of attention (:mod:`.gradients`) need, besides the one-key moments
``Y_k = E[sum_j a_j^k]`` of :mod:`.finite_size`, the mean square of a row's participation
ratio, ``E[(sum_j a_j^2)^2] = Y_4 + E[sum_{j != l} a_j^2 a_l^2]``. This module computes the
two-key moments exactly at finite T and in closed form as ``T -> infinity``.

Finite T
--------
A row is ``a_j = e^{g_j} / Z`` with T i.i.d. energies ``g_j ~ N(0, v)``,
``v = beta^2 q (q - p) log T`` (THEORY.md section 3). With
``Z^{-n} = Gamma(n)^{-1} int_0^inf t^{n-1} e^{-t Z} dt`` (n = k + m) and independence,

.. math:: E\Big[\sum_{j \ne l} a_j^k a_l^m\Big] = \frac{T (T - 1)}{\Gamma(k + m)}
          \int_0^\infty t^{k+m-1}\, E[e^{k g - t e^g}]\, E[e^{m g - t e^g}]\,
          E[e^{-t e^g}]^{T-2}\, dt .

With ``t = e^{-tau}`` each factor ``E[e^{k g - t e^g}] = e^{k tau} A_k(tau)``,
``A_k(tau) = E[exp(k (g - tau) - e^{g - tau})]``, and the powers of ``e^tau`` cancel:

.. math:: E\Big[\sum_{j \ne l} a_j^k a_l^m\Big] = \frac{T (T - 1)}{\Gamma(k + m)}
          \int_{-\infty}^{\infty} A_k(\tau)\, A_m(\tau)\, L(\tau)^{T-2}\, d\tau,
          \qquad L(\tau) = E[e^{-e^{g - \tau}}] .

The same substitution gives the one-key moments, ``Y_k = T / Gamma(k) int A_k L^{T-1}
dtau`` (the formula of :mod:`.finite_size`, used here as a cross-check). The Gaussian
expectations are trapezoid sums in g on ``[-z sigma, z sigma]``, ``z = max(12,
sqrt(2 (log T + 46)))`` (the Gaussian mass left out, times T, is below ``e^-46``), step
``min(0.2, sigma / 4)``; ``1 - L`` is summed directly (``-expm1``), so ``L^{T-2}`` keeps
full relative precision when ``L`` is close to 1. The tau integrand is log-concave (a
product of log-concave functions): a coarse pass (step 0.5) locates the range where it
is within ``e^-45`` of its maximum, a fine pass (400 steps, at most 0.04) integrates there.
Accuracy (tests/test_gradients.py): the one-key moments from this quadrature agree with
the independent code of :func:`~remprop.theory.rem.finite_t.participation_moment` to 1e-9
(measured 1e-12 for T from 2 to 1e5, x up to 8); exact at ``v = 0``
(``T (T-1) T^{-(k+m)}``), Monte Carlo of T Gaussian energies, and the
``T -> infinity`` limit below.

T -> infinity
-------------
Above the freezing point (``m_c = beta_c / beta < 1``) the weights of a REM row are
Poisson-Dirichlet distributed with parameter ``m_c`` (Derrida 1981; Mezard, Parisi &
Virasoro 1987), whose moments (Pitman & Yor 1997) give

.. math:: Y_k = \frac{\Gamma(k - m_c)}{\Gamma(k)\Gamma(1 - m_c)},\qquad
          E\Big[\sum_{j \ne l} a_j^k a_l^m\Big] = m_c\,
          \frac{\Gamma(k - m_c)\Gamma(m - m_c)}{\Gamma(k + m)\Gamma(1 - m_c)^2},

hence ``E[Y2^2] = (1 - m_c)(3 - 2 m_c) / 3``. Below ``beta_c`` all of them vanish.

References
----------
B. Derrida, Phys. Rev. B 24, 2613 (1981); J. Pitman & M. Yor, Ann. Probab. 25, 855
(1997); A. Giorlandino & S. Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import math
import numbers

import numpy as np
from numba import njit, prange
from scipy.special import gammaln

from ..checks import as_float_array, check_overlap, scalar_or_array
from .finite_t import check_seq_len, participation_moment

__all__ = [
    "pair_participation_moment",
    "participation_square",
    "asymptotic_participation_moment",
]

_Z_CUT = 12.0
_DG_MAX = 0.2
_DTAU_COARSE = 0.5
_DTAU_FINE = 0.04
_DROP = 45.0


def _check_order(name, order):
    if isinstance(order, bool) or not isinstance(order, (numbers.Integral, np.integer)) or order < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {order!r}")
    return int(order)


@njit(cache=True, error_model="numpy")
def _log_integrand(tau, sigma, g0, dg, n, seq_len, k, m, pair):
    """log of A_k(tau) A_m(tau) L(tau)^(T-2) (pair) or A_k(tau) L(tau)^(T-1) (single)."""
    log_norm = -math.log(sigma) - 0.5 * math.log(2.0 * math.pi) + math.log(dg)
    peak_k = -np.inf
    peak_m = -np.inf
    for i in range(n):
        g = g0 + i * dg
        y = g - tau
        base = -0.5 * (g / sigma) ** 2 - math.exp(y)
        peak_k = max(peak_k, base + k * y)
        peak_m = max(peak_m, base + m * y)
    sum_k = 0.0
    sum_m = 0.0
    tail = 0.0
    direct = 0.0
    for i in range(n):
        g = g0 + i * dg
        y = g - tau
        half = 0.5 if (i == 0 or i == n - 1) else 1.0
        gauss = -0.5 * (g / sigma) ** 2
        e = math.exp(y)
        sum_k += half * math.exp(gauss - e + k * y - peak_k)
        sum_m += half * math.exp(gauss - e + m * y - peak_m)
        w = half * math.exp(gauss + log_norm)
        tail += w * -math.expm1(-e)
        direct += w * math.exp(-e)
    log_a_k = peak_k + math.log(sum_k) + log_norm
    log_a_m = peak_m + math.log(sum_m) + log_norm
    if tail < 0.5:
        log_l = math.log1p(-tail)
    elif direct > 0.0:
        log_l = math.log(direct)
    else:
        log_l = -np.inf
    if pair:
        out = log_a_k + log_a_m
        if seq_len > 2:
            out += (seq_len - 2) * log_l
        return out
    return log_a_k + (seq_len - 1) * log_l


@njit(cache=True, error_model="numpy")
def _log_integral(sigma, seq_len, k, m, pair):
    """log int dtau of the integrand: coarse pass for the range, fine trapezoid there."""
    z = max(_Z_CUT, math.sqrt(2.0 * (math.log(seq_len) + 46.0)))
    step = min(_DG_MAX, sigma / 4.0)
    n = int(math.ceil(2.0 * z * sigma / step)) + 1
    g0 = -z * sigma
    dg = 2.0 * z * sigma / (n - 1)
    lo = -z * sigma - 10.0
    hi = z * sigma + math.log(seq_len) + 10.0
    n_coarse = int(math.ceil((hi - lo) / _DTAU_COARSE)) + 1
    coarse = np.empty(n_coarse)
    for j in range(n_coarse):
        coarse[j] = _log_integrand(lo + j * _DTAU_COARSE, sigma, g0, dg, n, seq_len, k, m, pair)
    top = coarse.max()
    first = n_coarse - 1
    last = 0
    for j in range(n_coarse):
        if coarse[j] > top - _DROP:
            first = min(first, j)
            last = max(last, j)
    a = lo + max(first - 1, 0) * _DTAU_COARSE
    b = lo + min(last + 1, n_coarse - 1) * _DTAU_COARSE
    dtau = max(_DTAU_FINE, (b - a) / 400.0)
    n_fine = int(math.ceil((b - a) / dtau)) + 1
    dtau = (b - a) / (n_fine - 1)
    values = np.empty(n_fine)
    for j in range(n_fine):
        values[j] = _log_integrand(a + j * dtau, sigma, g0, dg, n, seq_len, k, m, pair)
    peak = values.max()
    total = 0.0
    for j in range(n_fine):
        total += math.exp(values[j] - peak)
    return peak + math.log(total * dtau)


@njit(parallel=True, cache=True, error_model="numpy")
def _moments(sigma, seq_len, k, m, pair):
    out = np.empty(sigma.size)
    for i in prange(sigma.size):
        s = sigma[i]
        if pair:
            log_prefactor = math.log(seq_len) + math.log(seq_len - 1.0) - math.lgamma(k + m)
            if s <= 0.0:
                out[i] = math.exp(log_prefactor + math.lgamma(k + m) - (k + m) * math.log(seq_len))
                continue
        else:
            log_prefactor = math.log(seq_len) - math.lgamma(k)
            if s <= 0.0:
                out[i] = math.exp((1.0 - k) * math.log(seq_len))
                continue
        out[i] = min(1.0, math.exp(log_prefactor + _log_integral(s, seq_len, k, m, pair)))
    return out


def _pair_scalar(sigma, seq_len, k, m):
    return float(_moments(np.array([sigma]), float(seq_len), float(k), float(m), True)[0])


def _single_scalar(sigma, seq_len, k):
    """Y_k by the same quadrature (a cross-check of :mod:`.finite_size`)."""
    return float(_moments(np.array([sigma]), float(seq_len), float(k), float(k), False)[0])


def _per_scale(x, seq_len, k, m, pair):
    """The moment at each reduced scale x, computing each distinct x once (in parallel)."""
    flat = np.asarray(x, dtype=np.float64).ravel()
    unique, inverse = np.unique(flat, return_inverse=True)
    sigma = unique * math.sqrt(math.log(seq_len))
    values = _moments(sigma, float(seq_len), float(k), float(m), pair)
    return values[inverse].reshape(np.shape(x))


def asymptotic_participation_moment(beta, q, p, orders=(2,)):
    r"""``T -> infinity`` moments of a REM attention row (Poisson-Dirichlet closed forms).

    With ``m_c = beta_c / beta`` and ``beta_c = sqrt(2 / (q (q - p)))``:

    * ``orders=(k,)``: ``Y_k = Gamma(k - m_c) / (Gamma(k) Gamma(1 - m_c))``;
    * ``orders=(k, m)``: ``E[sum_{j != l} a_j^k a_l^m] = m_c Gamma(k - m_c) Gamma(m - m_c) /
      (Gamma(k + m) Gamma(1 - m_c)^2)``;

    for ``beta > beta_c``, and 0 for ``beta <= beta_c`` (every order >= 2 vanishes in the
    spread phase; ``Y_1 = 1``).

    Parameters
    ----------
    beta : array_like
        Query/key scale, > 0.
    q, p : array_like
        Token order parameters (q > 0, |p| <= q).
    orders : tuple of one or two int >= 1

    Returns
    -------
    ndarray or float

    References
    ----------
    Derrida (1981); Pitman & Yor, Ann. Probab. 25, 855 (1997), moments of PD(m_c, 0).
    """
    beta = as_float_array("beta", beta, positive=True)
    q, p = check_overlap(q, p)
    orders = _check_orders(orders)
    with np.errstate(divide="ignore", invalid="ignore"):
        m_c = np.sqrt(2.0 / (q * (q - np.minimum(p, q)))) / beta
        frozen = m_c < 1.0
        mm = np.where(frozen, m_c, 0.5)
        if len(orders) == 1:
            (k,) = orders
            if k == 1:
                return scalar_or_array(np.ones(np.broadcast(beta, q, p).shape))
            value = np.exp(gammaln(k - mm) - gammaln(k) - gammaln(1.0 - mm))
        else:
            k, m = orders
            value = mm * np.exp(gammaln(k - mm) + gammaln(m - mm) - gammaln(k + m) - 2.0 * gammaln(1.0 - mm))
    return scalar_or_array(np.where(frozen, value, 0.0))


def _check_orders(orders):
    try:
        orders = tuple(orders)
    except TypeError:
        raise ValueError(f"orders must be a tuple of one or two integers >= 1, got {orders!r}") from None
    if len(orders) not in (1, 2):
        raise ValueError(f"orders must be a tuple of one or two integers >= 1, got {orders!r}")
    return tuple(_check_order("orders", o) for o in orders)


def pair_participation_moment(beta, q, p, seq_len=None, orders=(2, 2)):
    r"""Two-key moment ``E[sum_{j != l} a_j^k a_l^m]`` of a softmax attention row.

    Finite ``T = seq_len`` (T i.i.d. energies of variance ``v = beta^2 q (q - p) log T``):

    .. math:: \frac{T (T - 1)}{\Gamma(k + m)} \int d\tau\, A_k(\tau) A_m(\tau) L(\tau)^{T-2},
              \quad A_k(\tau) = E[e^{k(g-\tau) - e^{g-\tau}}],\ L(\tau) = E[e^{-e^{g-\tau}}]

    (module notes); ``seq_len=None``: the Poisson-Dirichlet limit of
    :func:`asymptotic_participation_moment`.

    Parameters
    ----------
    beta : array_like
        Query/key scale, >= 0 (``s_qk^2 = beta sqrt(log T) / d``).
    q, p : array_like
        Token order parameters.
    seq_len : int or None
        T >= 2, or None for T -> infinity.
    orders : (int, int)
        The powers (k, m), each >= 1.

    Returns
    -------
    ndarray or float

    References
    ----------
    Derrida (1981); Pitman & Yor (1997); Giorlandino & Goldt, arXiv 2505.24333.
    """
    seq_len = check_seq_len(seq_len)
    orders = _check_orders(orders)
    if len(orders) != 2:
        raise ValueError(f"orders must be two integers (k, m), got {orders!r}")
    if seq_len is None:
        return asymptotic_participation_moment(beta, q, p, orders)
    beta = as_float_array("beta", beta, nonnegative=True)
    q, p = check_overlap(q, p)
    x = beta * np.sqrt(q * (q - np.minimum(p, q)))
    return scalar_or_array(_per_scale(x, seq_len, orders[0], orders[1], True))


def participation_square(beta, q, p, seq_len=None):
    r"""Mean square of a row's participation ratio, ``E[(sum_j a_j^2)^2]``.

    .. math:: E[Y_2^2] = Y_4 + E\Big[\sum_{j \ne l} a_j^2 a_l^2\Big]

    with ``Y_4`` from :func:`~remprop.theory.rem.finite_t.participation_moment` (finite T)
    and the two-key term from :func:`pair_participation_moment`. As ``T -> infinity``
    (``seq_len=None``): ``(1 - m_c)(3 - 2 m_c)/3`` above ``beta_c`` (``m_c = beta_c/beta``),
    0 below. At ``beta = 0``: ``1/T^2``.

    Parameters
    ----------
    beta, q, p : array_like
    seq_len : int or None

    Returns
    -------
    ndarray or float

    References
    ----------
    Derrida (1981); Pitman & Yor (1997).
    """
    seq_len = check_seq_len(seq_len)
    if seq_len is None:
        return scalar_or_array(np.asarray(asymptotic_participation_moment(beta, q, p, (4,)))
                               + asymptotic_participation_moment(beta, q, p, (2, 2)))
    y4 = np.asarray(participation_moment(beta, q, p, seq_len, order=4))
    return scalar_or_array(y4 + pair_participation_moment(beta, q, p, seq_len, (2, 2)))
