r"""Participation moments of an attention row at finite sequence length T (or T -> infinity).

The public one-key entry points of the REM (docs/theory.md section 3): a row with T
i.i.d. ``N(0, v)`` energies, ``v = beta^2 q (q - p) log T = x^2 log T``, has the moments
``Y_k = E[sum_j a_j^k]``, computed exactly by the integral of :mod:`.integral` (or read
from the tables of :mod:`.table`); :func:`participation_ratio` also takes ``seq_len=None``
for the ``T -> infinity`` law of :mod:`.asymptotic`.

References
----------
B. Derrida, Phys. Rev. B 24, 2613 (1981); A. Giorlandino & S. Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import numpy as np

from ..checks import as_float_array, check_choice, check_overlap, scalar_or_array
from .asymptotic import asymptotic_participation_core, critical_beta_core
from .checks import check_order, check_seq_len
from .integral import row_moment
from .table import participation_table

__all__ = ["participation_moment", "participation_ratio", "reduced_scale"]


def reduced_scale(beta, q, p):
    r"""``x = beta sqrt(q (q - p)) = sqrt(2) beta / beta_c``: the moments depend on x and T only.

    Taken as ``beta sqrt(q) sqrt(q - p)``, so that ``q (q - p)`` cannot overflow (q = 1e300)
    or underflow (q = 1e-300); an x beyond the float64 range is ``+inf`` (a frozen row).
    """
    with np.errstate(over="ignore"):
        return beta * np.sqrt(q) * np.sqrt(q - np.minimum(p, q))


def participation_moment(beta, q, p, seq_len, order=2, method="exact"):
    r"""Exact moment ``Y_k = E[sum_j a_j^k]`` of a softmax attention row at finite T.

    The energies of one attention row are T i.i.d. ``N(0, v)`` with
    ``v = beta^2 q (q - p) log T``; with ``t = e^{-tau}`` in
    ``Z^{-k} = Gamma(k)^{-1} int t^{k-1} e^{-tZ} dt``,

    .. math:: Y_k = \frac{T}{\Gamma(k)} \int d\tau\ E\left[e^{k(g-\tau) - e^{g-\tau}}\right]
              \left(E\left[e^{-e^{g-\tau}}\right]\right)^{T-1},
              \qquad g \sim N(0, v),

    evaluated in log space (:mod:`.integral`). ``Y_1 = 1``, ``Y_k = T^{1-k}`` at
    ``beta = 0``; as ``T -> inf``, ``Y_2 -> max(0, 1 - beta_c / beta)``; below
    ``beta_c / 2``, ``Y_2 ~ T^{-(1 - 2 beta^2 / beta_c^2)}`` (annealed).

    Parameters
    ----------
    beta : array_like
        Query/key scale, >= 0 (``s_qk^2 = beta sqrt(log T) / d``).
    q, p : array_like
        Token order parameters, ``q > 0``, ``|p| <= q``.
    seq_len : int
        Sequence length T >= 2 (tested from 2 to 1e7, for ``x`` up to 50); the
        ``T -> infinity`` limits are :func:`~remprop.theory.rem.asymptotic_participation_moment`.
    order : int
        k >= 1; 2 is the participation ratio, 3 the moment entering the gradients.
    method : {"exact", "table"}
        ``"exact"`` integrates for each distinct ``x`` (about 0.3 ms each, parallel);
        ``"table"`` interpolates the cached :func:`~remprop.theory.rem.participation_table` (relative error
        <= 1e-6, microseconds).

    Returns
    -------
    ndarray or float
        ``Y_k`` in ``[T^{1-k}, 1]``, broadcast over ``beta, q, p``.

    References
    ----------
    B. Derrida, Phys. Rev. B 24, 2613 (1981); A. Giorlandino & S. Goldt,
    arXiv 2505.24333 (docs/theory.md section 3).

    Examples
    --------
    >>> round(participation_moment(1.5, 1.0, 0.0, seq_len=512), 3)
    0.279
    """
    seq_len = check_seq_len(seq_len, allow_none=False)
    order = check_order(order)
    check_choice("method", method, ("exact", "table"))
    beta = as_float_array("beta", beta, nonnegative=True)
    q, p = check_overlap(q, p)
    x = reduced_scale(beta, q, p)
    if order == 1:
        return scalar_or_array(np.ones_like(x))
    if method == "table":
        return scalar_or_array(participation_table(seq_len, order)(x))
    return scalar_or_array(row_moment(x, seq_len, (order,)))


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

    (:func:`participation_moment`; ``1/T`` at small beta, ``~ T^{-(1 - 2 beta^2/beta_c^2)}``
    below ``beta_c/2``; 0.279 at T = 512, beta = 1.5, q = 1, p = 0 where the asymptotic
    law gives 0.057).

    Parameters
    ----------
    beta : array_like
        Query/key scale, > 0 (``s_qk^2 = beta sqrt(log T) / d``).
    q, p : array_like
        Token order parameters (see :func:`~remprop.theory.rem.beta_critical`).
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
