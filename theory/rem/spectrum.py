r"""The eigenvalue bulk of the attention matrix at initialisation (docs/theory.md section 13).

The attention matrix ``A`` of one softmax layer is row-stochastic: ``1`` is an eigenvalue
(the Perron eigenvalue, eigenvector the all-ones vector) and the other ``T - 1``
eigenvalues form a bulk around the origin. For any ``w`` with ``sum_j w_j = 1`` the
matrix ``A - 1 w^T`` has the same eigenvalues with the Perron one replaced by 0 (Brauer),
so the bulk is that of the centred matrix ``B = A - 1 1^T / T``. When ``B`` is
bi-unitarily invariant in law (R-diagonal), its eigenvalues fill, as ``T -> infinity``,
a disk (or a ring) whose outer radius is the root mean square of its singular values
(Haagerup & Larsen 2000):

.. math:: R^2 = \frac1T E\,\mathrm{tr}\,B B^T = T\,\mathrm{Var}(A_{ij})
          = Y_2 - \frac1T,\qquad Y_2 = E\Big[\sum_j A_{ij}^2\Big],

the participation ratio of :mod:`.finite_t`. For uniform Dirichlet rows (a random
stochastic matrix) ``Y_2 = 2 / (T + 1)`` and ``R ~ 1/sqrt(T)``; for attention the REM
sets ``Y_2``, so the bulk grows from ``0`` (uniform rows, ``beta = 0``) to
``sqrt(1 - 1/T)`` (frozen rows).

Softmax attention is not R-diagonal at finite width: the scores ``X W_Q^T W_K X^T`` carry
the token Gram matrix ``G = X X^T / (d q)`` on both sides. Split each row into its
first Wiener chaos (linear in the energies, ``E[da_j/dg_l] g_l``), of squared norm
``a = v (1 - Y_2)^2 / (T - 1)`` with ``v = beta^2 q (q - p) log T`` (Gaussian integration
by parts), and the rest, ``b = Y_2 - 1/T - a``, uncorrelated with it. The linear part has
the covariance ``E[B_ij B_kl] ~ G_ik G_jl``, the rest is white; the squared outer radius
is the spectral radius of the covariance map ``K -> E[B K B^T]`` (as for a variance
profile), which leaves ``span(G, 1)`` invariant and is there the 2 x 2 matrix
``[[a m_2, a], [b, b]]``, ``m_2 = tau(G^2) = 1 + T/d`` for Gaussian tokens
(Marchenko-Pastur):

.. math:: R^2 = \tfrac12\Big(a m_2 + b + \sqrt{(a m_2 - b)^2 + 4ab}\Big),

``Y_2 - 1/T`` at ``m_2 = 1`` (``d -> infinity``). Monte Carlo at ``T = 64 .. 1024``
(docs/theory.md section 13) agrees within the seed-to-seed spread below ``beta_c``;
near and above ``beta_c`` at ``T = 1024`` the measured 0.99-quantile of ``|lambda|`` lies
3-4 % below R (a soft edge).

References
----------
U. Haagerup & F. Larsen, J. Funct. Anal. 176, 331 (2000); J. Alt, L. Erdos & T. Kruger,
Ann. Appl. Probab. 28, 148 (2018) (variance profiles: ``R^2`` is the spectral radius of the
covariance map); A. Guionnet, M. Krishnapur & O. Zeitouni, Ann. Math. 174, 1189 (2011)
(single ring theorem); A. Giorlandino &
S. Goldt, arXiv 2505.24333, appendix C.2.
"""
from __future__ import annotations

import numpy as np

from ..checks import as_float_array, check_overlap, scalar_or_array
from .asymptotic import asymptotic_participation_core, critical_beta_core
from .checks import check_seq_len
from .finite_t import participation_moment, reduced_scale

__all__ = ["stochastic_bulk_radius", "attention_bulk_radius"]


def _seq_lens(seq_len):
    """``seq_len`` as an int64 array, every value checked by :func:`.checks.check_seq_len`."""
    if np.ndim(seq_len) == 0:
        return np.asarray(check_seq_len(seq_len, allow_none=False), dtype=np.int64)
    arr = np.asarray(seq_len)
    if arr.size == 0:
        raise ValueError("seq_len must be an integer >= 2 or a non-empty array of them, got an empty array")
    flat = [check_seq_len(v.item() if hasattr(v, "item") else v, allow_none=False) for v in arr.ravel()]
    return np.asarray(flat, dtype=np.int64).reshape(arr.shape)


def stochastic_bulk_radius(y2, seq_len):
    r"""Outer radius of the non-Perron eigenvalues of a T x T row-stochastic matrix.

    .. math:: R = \sqrt{\max\left(0,\ Y_2 - \frac1T\right)},
              \qquad Y_2 = E\Big[\sum_j A_{ij}^2\Big]

    (docs/theory.md section 13), exact as ``T -> infinity`` for a centred matrix
    ``A - 1 1^T / T`` that is bi-unitarily invariant in law (Haagerup & Larsen); a
    matrix of i.i.d. exchangeable rows is one to leading order. Uniform Dirichlet rows
    (``Y_2 = 2/(T + 1)``) give ``R = sqrt((T - 1) / (T (T + 1))) ~ 1/sqrt(T)``.

    Parameters
    ----------
    y2 : array_like
        Mean participation ratio of a row, in ``[1/T, 1]`` (``1/T`` for uniform rows).
    seq_len : int or array_like of int
        T >= 2; broadcast against ``y2``.

    Returns
    -------
    ndarray or float
        R in ``[0, sqrt(1 - 1/T)]``.

    References
    ----------
    U. Haagerup & F. Larsen, J. Funct. Anal. 176, 331 (2000).

    Examples
    --------
    >>> round(stochastic_bulk_radius(2 / 257, 256), 4)
    0.0623
    """
    y2 = as_float_array("y2", y2, low=0.0, high=1.0)
    seq_len = _seq_lens(seq_len)
    return scalar_or_array(np.sqrt(np.maximum(0.0, y2 - 1.0 / seq_len)))


def attention_bulk_radius(beta, q=1.0, p=0.0, seq_len=None, width=None):
    r"""Predicted outer radius of the non-Perron eigenvalues of a softmax attention matrix.

    For one attention head at initialisation (REM energies of variance
    ``v = beta^2 q (q - p) log T``, docs/theory.md sections 3 and 13):

    .. math:: R^2 = \tfrac12\Big(a m_2 + b + \sqrt{(a m_2 - b)^2 + 4ab}\Big),\qquad
              a = \frac{v (1 - Y_2)^2}{T - 1},\quad b = Y_2 - \frac1T - a,\quad
              m_2 = 1 + \frac{T}{d},

    with ``Y_2`` the exact finite-T participation ratio
    (:func:`~remprop.theory.rem.participation_moment`): ``a`` is the part of a row linear
    in the scores, which carries the token Gram matrix of Gaussian tokens
    (``tau(G^2) = m_2``), ``b`` the rest (module docstring). ``width=None``
    (``d -> infinity``, orthogonal tokens) gives ``m_2 = 1`` and the circular-law
    radius of a row-stochastic matrix, ``R^2 = Y_2 - 1/T``
    (:func:`stochastic_bulk_radius`). Limits: ``R = 0`` exactly at ``beta = 0``
    (uniform rows), ``R^2 ~ v (T - 1) / T^2 (1 + T/d)`` for small ``v``,
    ``R -> sqrt(1 - 1/T)`` as ``beta -> infinity``, and
    ``R -> sqrt(max(0, 1 - beta_c / beta))`` as ``T -> infinity`` at fixed ``beta``
    (``seq_len=None``; in the spread phase the bulk shrinks to the origin).

    The heads of a multi-head layer are each a REM at the effective beta: pass
    ``Architecture.effective_beta(beta)``.

    Parameters
    ----------
    beta : array_like
        Query/key scale of the head, >= 0 (``s_qk^2 = beta sqrt(log T) / d``).
    q, p : array_like
        Token order parameters, ``q > 0``, ``|p| <= q``.
    seq_len : int, array_like of int, or None
        Sequence length T >= 2, broadcast with ``beta, q, p``; None for ``T -> infinity``.
    width : float, array_like, or None
        Model width d >= 1 (``+inf`` or None: no finite-width term); needs ``seq_len``.

    Returns
    -------
    ndarray or float
        R in ``[0, 1)``, broadcast over ``beta, q, p, seq_len, width``.

    Raises
    ------
    ValueError
        A parameter out of its domain (named in the message), or ``width`` without
        ``seq_len``.

    References
    ----------
    U. Haagerup & F. Larsen, J. Funct. Anal. 176, 331 (2000); B. Derrida, Phys. Rev. B 24,
    2613 (1981); A. Giorlandino & S. Goldt, arXiv 2505.24333, appendix C.2.

    Examples
    --------
    >>> round(attention_bulk_radius(1.0, seq_len=256), 3)
    0.339
    >>> round(attention_bulk_radius(1.0, seq_len=256, width=256), 3)
    0.343
    """
    beta = as_float_array("beta", beta, nonnegative=True)
    q, p = check_overlap(q, p)
    if seq_len is None:
        if width is not None:
            raise ValueError("width needs a finite seq_len (the finite-width term is T/d), got seq_len=None")
        with np.errstate(divide="ignore"):
            y2 = asymptotic_participation_core(beta, critical_beta_core(q, p))
        return scalar_or_array(np.sqrt(y2))
    seq_len = _seq_lens(seq_len)
    width = np.inf if width is None else as_float_array("width", width, low=1.0, allow_inf=True)
    beta, q, p, seq_len, width = np.broadcast_arrays(beta, q, p, seq_len, width)
    y2 = np.empty(beta.shape)
    for t in np.unique(seq_len):
        at = seq_len == t
        y2[at] = participation_moment(beta[at], q[at], p[at], int(t), order=2)
    v = reduced_scale(beta, q, p) ** 2 * np.log(seq_len)
    centred = np.maximum(0.0, y2 - 1.0 / seq_len)
    linear = np.minimum(centred, v * (1.0 - y2) ** 2 / (seq_len - 1))   # first chaos, a
    rest = centred - linear                                              # b
    a_m2 = linear * (1.0 + seq_len / width)
    radius = np.sqrt(0.5 * (a_m2 + rest + np.sqrt((a_m2 - rest) ** 2 + 4.0 * linear * rest)))
    return scalar_or_array(np.where(v == 0.0, 0.0, radius))  # uniform rows: Y2 = 1/T exactly
