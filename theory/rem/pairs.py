r"""Two-key moments of an attention row: ``E[sum_{j != l} a_j^k a_l^m]`` and ``E[Y2^2]``.

The gradients of attention (:mod:`remprop.theory.gradients`) need, besides the one-key
moments ``Y_k = E[sum_j a_j^k]``, the mean square of a row's participation ratio,
``E[(sum_j a_j^2)^2] = Y_4 + E[sum_{j != l} a_j^2 a_l^2]``. At finite T the two-key
moment is the integral (docs/theory.md section 7)

.. math:: E\Big[\sum_{j \ne l} a_j^k a_l^m\Big] = \frac{T (T - 1)}{\Gamma(k + m)}
          \int_{-\infty}^{\infty} A_k(\tau)\, A_m(\tau)\, L(\tau)^{T-2}\, d\tau,

with the ``A_k`` and ``L`` of the one-key moments, evaluated by the same quadrature
(:mod:`.integral`); as ``T -> infinity`` the Poisson-Dirichlet closed forms of
:mod:`.asymptotic`.

References
----------
B. Derrida, Phys. Rev. B 24, 2613 (1981); J. Pitman & M. Yor, Ann. Probab. 25, 855
(1997); A. Giorlandino & S. Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import numpy as np

from ..checks import as_float_array, check_overlap, scalar_or_array
from .asymptotic import asymptotic_participation_moment
from .checks import check_orders, check_seq_len
from .finite_t import participation_moment, reduced_scale
from .integral import row_moment

__all__ = ["pair_participation_moment", "participation_square"]


def pair_participation_moment(beta, q, p, seq_len=None, orders=(2, 2)):
    r"""Two-key moment ``E[sum_{j != l} a_j^k a_l^m]`` of a softmax attention row.

    Finite ``T = seq_len`` (T i.i.d. energies of variance ``v = beta^2 q (q - p) log T``):

    .. math:: \frac{T (T - 1)}{\Gamma(k + m)} \int d\tau\, A_k(\tau) A_m(\tau) L(\tau)^{T-2},
              \quad A_k(\tau) = E[e^{k(g-\tau) - e^{g-\tau}}],\ L(\tau) = E[e^{-e^{g-\tau}}]

    (:mod:`.integral`); ``seq_len=None``: the Poisson-Dirichlet limit of
    :func:`~remprop.theory.rem.asymptotic_participation_moment`. Sum rule: ``(k, 1)`` gives ``Y_k - Y_{k+1}``.

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
    orders = check_orders(orders, count=(2,))
    if seq_len is None:
        return asymptotic_participation_moment(beta, q, p, orders)
    beta = as_float_array("beta", beta, nonnegative=True)
    q, p = check_overlap(q, p)
    return scalar_or_array(row_moment(reduced_scale(beta, q, p), seq_len, orders))


def participation_square(beta, q, p, seq_len=None):
    r"""Mean square of a row's participation ratio, ``E[(sum_j a_j^2)^2]``.

    .. math:: E[Y_2^2] = Y_4 + E\Big[\sum_{j \ne l} a_j^2 a_l^2\Big]

    with ``Y_4`` from :func:`~remprop.theory.rem.participation_moment` and the two-key
    term from :func:`pair_participation_moment`. As ``T -> infinity`` (``seq_len=None``):
    ``(1 - m_c)(3 - 2 m_c)/3`` above ``beta_c`` (``m_c = beta_c/beta``), 0 below. At
    ``beta = 0``: ``1/T^2``.

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
        y4 = np.asarray(asymptotic_participation_moment(beta, q, p, (4,)))
    else:
        y4 = np.asarray(participation_moment(beta, q, p, seq_len, order=4))
    return scalar_or_array(y4 + pair_participation_moment(beta, q, p, seq_len, (2, 2)))
