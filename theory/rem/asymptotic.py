r"""The REM of an attention row as ``T -> infinity``: freezing point and Poisson-Dirichlet moments.

For a fixed query the scores over the T keys are correlated Gaussians; the part shared
by all keys cancels in the softmax and the independent part has variance
``beta^2 q (q - p) log T``. A row of the attention matrix is therefore a REM with T
states (Derrida 1981) whose freezing point sets the critical query/key scale
``beta_c = sqrt(2 / (q (q - p)))`` (docs/theory.md section 3).

Above the freezing point (``m_c = beta_c / beta < 1``) the weights of a row are
Poisson-Dirichlet distributed with parameter ``m_c`` (Derrida 1981; Mezard, Parisi &
Virasoro 1987), whose moments (Pitman & Yor 1997) give

.. math:: Y_k = \frac{\Gamma(k - m_c)}{\Gamma(k)\Gamma(1 - m_c)},\qquad
          E\Big[\sum_{j \ne l} a_j^k a_l^m\Big] = m_c\,
          \frac{\Gamma(k - m_c)\Gamma(m - m_c)}{\Gamma(k + m)\Gamma(1 - m_c)^2},

in particular ``Y_2 = 1 - m_c`` and ``E[Y_2^2] = (1 - m_c)(3 - 2 m_c) / 3``. Below
``beta_c`` all of them vanish.

The ``*_core`` functions hold each formula once: NumPy ufuncs only, so the same source
broadcasts over arrays and compiles with numba for the depth kernels.

References
----------
B. Derrida, Phys. Rev. B 24, 2613 (1981); J. Pitman & M. Yor, Ann. Probab. 25, 855
(1997); A. Giorlandino & S. Goldt, arXiv 2505.24333, Result 1.
"""
from __future__ import annotations

import numpy as np
from numba.extending import register_jitable

from remprop._deprecation import renamed

from ..checks import as_float_array, check_overlap, scalar_or_array
from .checks import check_orders

__all__ = ["beta_critical", "asymptotic_participation_moment", "critical_beta_core",
           "asymptotic_participation_core"]


@register_jitable
def critical_beta_core(q, p):
    """beta_c = sqrt(2 / (q (q - p))); +inf for collapsed tokens (p = q).

    ``q - p`` is clipped at 0: rounding can leave p an ulp above q at collapse (e.g.
    activation moments from quadrature), which must give +inf, not NaN. The two square
    roots are taken apart so that ``q (q - p)`` cannot overflow or underflow (q = 1e300
    gives 1.4e-300, not 0).
    """
    return np.sqrt(2.0) / (np.sqrt(q) * np.sqrt(np.maximum(q - p, 0.0)))


@register_jitable
def asymptotic_participation_core(beta, beta_c):
    """Y2 = max(0, 1 - beta_c / beta) (T -> infinity)."""
    return np.maximum(0.0, 1.0 - beta_c / beta)


def beta_critical(q, p):
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
    >>> float(beta_critical(1.0, 0.0))  # doctest: +ELLIPSIS
    1.41421356...
    """
    q, p = check_overlap(q, p)
    with np.errstate(divide="ignore"):
        return scalar_or_array(critical_beta_core(q, p))


#: Below this m_c the complement ``1 - Y_k`` is taken from its series in m_c.
_SERIES_M = 1e-5


def _log_one_key_moment(k, m_c):
    """``log Y_k = log Gamma(k - m) - log Gamma(k) - log Gamma(1 - m)``, accurate also as m -> 0.

    For ``m < 1e-5`` the Taylor series ``-m (psi(k) - psi(1)) - m^2 (psi'(1) - psi'(k)) / 2``
    (relative error below ``m^2 < 1e-10``): the difference of log-gammas would lose the
    digits of a tiny m.
    """
    from scipy.special import digamma, gammaln, polygamma  # lazily, like every scipy.special use in theory

    series = -m_c * (digamma(k) - digamma(1.0)) - 0.5 * m_c ** 2 * (polygamma(1, 1.0) - polygamma(1, k))
    return np.where(m_c < _SERIES_M, series, gammaln(k - m_c) - gammaln(k) - gammaln(1.0 - m_c))


def asymptotic_participation_moment(beta, q, p, orders=(2,), complement=False):
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
        Query/key scale, >= 0 (every moment of order >= 2 is 0 at ``beta = 0``).
    q, p : array_like
        Mean squared token norm and mean overlap (``q > 0``, ``|p| <= q``).
    orders : tuple of one or two int >= 1
    complement : bool
        One-key orders only: return ``1 - Y_k`` (``1`` below ``beta_c``), to full relative
        precision also where ``Y_k`` rounds to 1 (``m_c`` below 1e-16, e.g. q = 1e100).

    Returns
    -------
    ndarray or float
        Closed forms: constant time (microseconds per element) at every input.

    References
    ----------
    Derrida (1981); Pitman & Yor, Ann. Probab. 25, 855 (1997), moments of PD(m_c, 0).
    """
    beta = as_float_array("beta", beta, nonnegative=True)
    q, p = check_overlap(q, p)
    orders = check_orders(orders)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        m_c = critical_beta_core(q, p) / beta
        frozen = m_c < 1.0
        mm = np.where(frozen, m_c, 0.5)
        if len(orders) == 1:
            (k,) = orders
            shape = np.broadcast(beta, q, p).shape
            if k == 1:
                return scalar_or_array(np.zeros(shape) if complement else np.ones(shape))
            log_value = _log_one_key_moment(k, mm)
            if complement:
                return scalar_or_array(np.where(frozen, -np.expm1(log_value), 1.0))
            value = np.exp(log_value)
        else:
            if complement:
                raise ValueError("complement applies to one-key orders only (orders=(k,))")
            k, m = orders
            from scipy.special import gammaln

            value = mm * np.exp(gammaln(k - mm) + gammaln(m - mm) - gammaln(k + m) - 2.0 * gammaln(1.0 - mm))
    return scalar_or_array(np.where(frozen, value, 0.0))


#: Deprecated spelling of :func:`beta_critical` (one name per idea), removed in the next release.
critical_beta = renamed("critical_beta", beta_critical)
