r"""Query and key gradients of softmax attention at initialisation (Result 2).

One single-head attention layer with values and no output projection,

.. math:: S = A\,X W_V^T + 1 b_V^T,\qquad a_{ij} = \mathrm{softmax}_j\big(
          (W_Q x_i)\cdot(W_K x_j) / \sqrt{d}\big),

``W_Q, W_K ~ N(0, s_qk^2)`` with ``s_qk^2 = beta sqrt(log T) / d``, ``W_V ~ N(0, s_v^2/d)``,
on T tokens of order parameters ``q = |x_i|^2/d`` and ``p = x_i.x_j/d``. The scalar
differentiated is a fixed random readout of S,

.. math:: \mathcal{L} = \sum_{i,a} R_{ia} S_{ia}, \qquad R_{ia} \sim N(0, 1)\ \text{i.i.d.},

for which ``E_R |dL/dW_Q|_F^2 = |dS/dW_Q|_F^2`` (the Frobenius norm of the Jacobian).
The derivation is in ``docs/derivations.md`` (section 1); its algebra is checked with
sympy in ``tests/test_gradients.py``. Result:

.. math:: E\,|\partial S/\partial W_Q|_F^2 = T d^2 q\, s_v^2\, \beta \sqrt{\log T}\,
          \big[(q - p)^2 K + \sigma_\Delta^2 F\big]

with the row moments ``Y_k = <sum_j a_j^k>`` and ``<Y_2^2> = <(sum_j a_j^2)^2>``,

* ``K = Y_2 - 2 Y_3 + <Y_2^2>`` (infinite width; docs/theory.md section 7),
* ``F = 1 - 3 Y_2 + 2 Y_3 - 2 Y_4 + 2 <Y_2^2>`` (finite width),
* ``sigma_Delta^2`` the variance of the off-diagonal overlaps ``x_l.x_l'/d - p``:
  ``(q - p)^2 / d`` for tokens that are independent Gaussian vectors of width d.

``F -> 1`` in the spread phase while ``K ~ Y_2``: the finite-width term dominates once
``Y_2 < 1/d`` (relative size ``(1 - Y_2)^2 / (d Y_2)``). As ``T -> infinity`` (Poisson-
Dirichlet moments, ``m = beta_c / beta``): ``K = m (1 - m) / 3`` and
``F = m (m^2 + m + 1) / 3`` above ``beta_c``; ``K = 0``, ``F = 1`` below.

The key gradient has the same expectation to this order (``docs/derivations.md``).

References
----------
A. Giorlandino & S. Goldt, arXiv 2505.24333, Result 2 and Fig. 3(c); L. Noci et al.,
NeurIPS 2022 (vanishing query/key gradients under rank collapse); B. Derrida (1981).
"""
from __future__ import annotations

import math

import numpy as np

from .checks import as_float_array, check_overlap, scalar_or_array
from .quadrature import gauss_hermite
from .rem import asymptotic_participation_moment, check_seq_len, participation_moment, participation_square

__all__ = [
    "gradient_row_moments",
    "query_gradient_norm",
    "key_gradient_norm",
    "scaled_query_gradient_norm",
]


def _check_width(width):
    value = as_float_array("width", width, positive=True)
    if (value < 1).any():
        raise ValueError(f"width must be >= 1, got {value.min()!r}")
    return value


def gradient_row_moments(beta, q, p, seq_len=None):
    r"""Row moments of the attention matrix that enter its gradients.

    Returns ``Y2``, ``Y3``, ``Y4`` (``<sum_j a_j^k>``), ``Y2_square`` (``<(sum_j a_j^2)^2>``),
    ``signal`` ``K = Y2 - 2 Y3 + Y2_square`` and ``finite_width``
    ``F = 1 - 3 Y2 + 2 Y3 - 2 Y4 + 2 Y2_square``.

    Parameters
    ----------
    beta, q, p : array_like
        Query/key scale (> 0) and the token order parameters (``q > 0``, ``|p| <= q``).
    seq_len : int or None
        T >= 2: exact finite-T moments (:func:`~remprop.theory.rem.participation_moment`,
        :func:`~remprop.theory.rem.participation_square`); None: the
        ``T -> infinity`` Poisson-Dirichlet closed forms (``Y_k = Gamma(k - m) /
        (Gamma(k) Gamma(1 - m))``, ``<Y2^2> = (1 - m)(3 - 2m)/3``, ``m = beta_c/beta``,
        all 0 below ``beta_c``).

    Returns
    -------
    dict of str -> ndarray or float

    References
    ----------
    Derrida (1981); Pitman & Yor (1997); Giorlandino & Goldt, arXiv 2505.24333.
    """
    seq_len = check_seq_len(seq_len)
    beta = as_float_array("beta", beta, positive=True)
    q, p = check_overlap(q, p)
    if seq_len is None:
        y = {k: np.asarray(asymptotic_participation_moment(beta, q, p, (k,))) for k in (2, 3, 4)}
    else:
        y = {k: np.asarray(participation_moment(beta, q, p, seq_len, order=k)) for k in (2, 3, 4)}
    y22 = np.asarray(participation_square(beta, q, p, seq_len))
    out = {"Y2": y[2], "Y3": y[3], "Y4": y[4], "Y2_square": y22,
           "signal": y[2] - 2.0 * y[3] + y22,
           "finite_width": 1.0 - 3.0 * y[2] + 2.0 * y[3] - 2.0 * y[4] + 2.0 * y22}
    return {k: scalar_or_array(v) for k, v in out.items()}


#: Relative variance, times d, of ``|W_K^T W_Q u|^2`` over unit directions u (square
#: Gaussian W_Q, W_K): ``2 (m_2 - m_1^2)`` with the Fuss-Catalan moments ``m_1 = 1``,
#: ``m_2 = 3`` of ``(W_K^T W_Q)^T (W_K^T W_Q)``; half of it (2/d) is ``|W_Q u|^2``.
WEIGHT_SPREAD = 4.0
#: Gauss-Hermite nodes of the average over the rows' energy scale.
_ROW_NODES = 9


def _row_average(function, beta, row_variance, weight):
    """``E_eps[(1 + weight eps) function(beta exp((eps - s^2/2)/2))]``, ``eps ~ N(0, s^2)``."""
    nodes, weights = gauss_hermite(_ROW_NODES)
    total = 0.0
    for z, w in zip(nodes, weights):
        eps = z * np.sqrt(row_variance)
        scale = np.exp(0.5 * (eps - 0.5 * row_variance))
        total = total + w * (1.0 + weight * eps) * function(beta * scale)
    return total


def _scaled_norm(beta, q, p, width, seq_len, sigma_v2, asymptotic, finite_width, overlap_variance, norm_variance,
                 which):
    seq_len = check_seq_len(seq_len, allow_none=False)
    width = _check_width(width)
    beta = as_float_array("beta", beta, positive=True)
    q, p = check_overlap(q, p)
    sigma_v2 = as_float_array("sigma_v2", sigma_v2, nonnegative=True)
    if overlap_variance is None:
        overlap_variance = (q - p) ** 2 / width
    if norm_variance is None:
        norm_variance = 2.0 * ((q - p) / q) ** 2 / width
    overlap_variance = as_float_array("overlap_variance", overlap_variance, nonnegative=True)
    norm_variance = as_float_array("norm_variance", norm_variance, nonnegative=True)
    moments_t = None if asymptotic else seq_len

    def bracket(b, with_width=True):
        m = gradient_row_moments(b, q, p, moments_t)
        out = (q - p) ** 2 * np.asarray(m["signal"])
        if with_width:
            out = out + overlap_variance * np.asarray(m["finite_width"])
        return out

    if not finite_width:
        return scalar_or_array(q * sigma_v2 * beta * bracket(beta, False))
    row_variance = norm_variance + WEIGHT_SPREAD / width
    # the prefactor |x_i|^2/d (query) or |W_Q x_i|^2/d (key) shares part of the row's fluctuation
    shared = norm_variance + (0.0 if which == "query" else 0.5 * WEIGHT_SPREAD / width)
    weight = np.where(row_variance > 0, shared / np.where(row_variance > 0, row_variance, 1.0), 0.0)
    return scalar_or_array(q * sigma_v2 * beta * _row_average(bracket, beta, row_variance, weight))


def scaled_query_gradient_norm(beta, q, p, width, seq_len, *, sigma_v2=0.2, asymptotic=False,
                               finite_width=True, overlap_variance=None, norm_variance=None):
    r"""The gradient norm on the collapse scale of Fig. 3(c).

    .. math:: \frac{E|\partial S/\partial W_Q|_F^2}{T d^2 \sqrt{\log T}}
              = q\, s_v^2\, \beta\, \big\langle (1 + \lambda\epsilon)\,
              \big[(q - p)^2 K + \sigma_\Delta^2 F\big]\big\rangle_\epsilon

    This is ``|dL/dW_Q|^2 T / (d^2 sqrt(log T))`` in expectation for the token-averaged
    readout ``L = (1/T) sum_{i,a} R_ia S_ia``. Parameters and the row average
    ``<.>_eps`` as :func:`query_gradient_norm`.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 3(c).
    """
    return _scaled_norm(beta, q, p, width, seq_len, sigma_v2, asymptotic, finite_width, overlap_variance,
                        norm_variance, "query")


def query_gradient_norm(beta, q, p, width, seq_len, *, sigma_v2=0.2, asymptotic=False, finite_width=True,
                        overlap_variance=None, norm_variance=None):
    r"""Expected squared Frobenius norm of ``dS/dW_Q`` for one attention layer at initialisation.

    .. math:: E\,|\partial S/\partial W_Q|_F^2 = T d^2 q\, s_v^2\, \beta \sqrt{\log T}\,
              \Big\langle (1 + \lambda\epsilon)\big[(q - p)^2 (Y_2 - 2Y_3 + \langle Y_2^2\rangle)
              + \sigma_\Delta^2 (1 - 3Y_2 + 2Y_3 - 2Y_4 + 2\langle Y_2^2\rangle)\big]\Big\rangle_\epsilon

    ``S = A X W_V^T + b_V`` (single head, no output projection), ``s_qk^2 = beta sqrt(log T)/d``;
    equal to ``E_R |dL/dW_Q|_F^2`` for the readout ``L = sum_ia R_ia S_ia``, ``R`` i.i.d.
    ``N(0, 1)`` (derivation: ``docs/derivations.md``, section 1). The row moments ``Y_k`` are
    evaluated at the row's own energy scale ``beta e^{(eps - s^2/2)/2}``: at finite width
    the energy variance of row i fluctuates by the factor ``|x_i|^2 (x_i^T M x_i)/|x_i|^2``
    (``M = W_Q^T W_K W_K^T W_Q``), log-normal with variance
    ``s^2 = norm_variance + 4/d`` (token norms, and ``WEIGHT_SPREAD`` ``/d`` from
    the weights); the prefactor ``|x_i|^2/d`` shares the token-norm part, hence the
    weight ``lambda = norm_variance / s^2``.

    Parameters
    ----------
    beta : array_like
        Query/key scale, > 0.
    q, p : array_like
        Order parameters of the layer input (``q > 0``, ``|p| <= q``).
    width : array_like
        Model width d (> 0).
    seq_len : int
        Sequence length T >= 2 (the prefactor and the ``sqrt(log T)`` of ``s_qk^2``).
    sigma_v2 : array_like
        Value variance times fan-in, ``W_V ~ N(0, sigma_v2 / d)``.
    asymptotic : bool
        True: row moments from the ``T -> infinity`` REM closed forms (0 below ``beta_c``:
        only the finite-width term survives there); False: exact finite-T moments.
    finite_width : bool
        Include the finite-width terms (``sigma_Delta^2 F`` and the row average); False:
        the d -> infinity leading term of docs/theory.md section 7 alone.
    overlap_variance : array_like, optional
        ``sigma_Delta^2``, variance of the token overlaps ``x_l.x_l'/d`` about p; default
        ``(q - p)^2 / d`` (independent Gaussian tokens of width d).
    norm_variance : array_like, optional
        Relative variance of the token norms ``|x_i|^2 / (d q)``; default
        ``2 ((q - p)/q)^2 / d`` (Gaussian tokens); 0 for LayerNorm outputs.

    Returns
    -------
    ndarray or float
        Broadcast over beta, q, p, width, sigma_v2.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Result 2; Noci et al., NeurIPS 2022.

    Examples
    --------
    >>> g = query_gradient_norm(1.5, 1.0, 0.0, width=128, seq_len=256, sigma_v2=1.0)  # doctest: +SKIP
    """
    seq_len = check_seq_len(seq_len, allow_none=False)
    scaled = _scaled_norm(beta, q, p, width, seq_len, sigma_v2, asymptotic, finite_width, overlap_variance,
                          norm_variance, "query")
    width = _check_width(width)
    return scalar_or_array(np.asarray(scaled) * seq_len * width ** 2 * math.sqrt(math.log(seq_len)))


def key_gradient_norm(beta, q, p, width, seq_len, *, sigma_v2=0.2, asymptotic=False, finite_width=True,
                      overlap_variance=None, norm_variance=None):
    r"""Expected squared Frobenius norm of ``dS/dW_K``.

    ``dS_ia/dW_K = (W_Q x_i)/sqrt(d) (x) sum_l a_il (v_l - S_i) x_l``; averaging
    ``|W_Q x_i|^2 / d = s_qk^2 d q`` and ``x_l.x_l' = d G_ll'`` gives the contraction of
    :func:`query_gradient_norm` (``docs/derivations.md``, section 1.5). The only difference
    is in the row average: the prefactor ``|W_Q x_i|^2/d`` also shares the ``2/d`` of
    ``|W_Q x_i|^2`` with the row's energy scale (``lambda = (norm_variance + 2/d) / s^2``).
    Parameters as :func:`query_gradient_norm`.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Result 2.
    """
    seq_len = check_seq_len(seq_len, allow_none=False)
    scaled = _scaled_norm(beta, q, p, width, seq_len, sigma_v2, asymptotic, finite_width, overlap_variance,
                          norm_variance, "key")
    width = _check_width(width)
    return scalar_or_array(np.asarray(scaled) * seq_len * width ** 2 * math.sqrt(math.log(seq_len)))
