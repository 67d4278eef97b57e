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
from dataclasses import dataclass
from typing import Any

import numpy as np

from .checks import as_float_array, check_overlap, scalar_or_array
from .quadrature import gauss_hermite
from .rem import asymptotic_participation_moment, check_seq_len, reduced_scale
from .rem.integral import row_moment

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


def _row_moments(beta, q, p, seq_len):
    r"""The moments of :func:`gradient_row_moments` on validated, broadcast arrays.

    ``K`` and ``F`` vanish like ``1/x`` in a frozen row while every ``Y_k -> 1``: there
    they are summed from the complements ``C_k = 1 - Y_k`` and the two-key moment
    ``P = E[sum_{j != l} a_j^2 a_l^2]`` (``<Y2^2> = Y_4 + P``, :func:`~remprop.theory.rem.participation_square`),

    .. math:: K = -C_2 + 2 C_3 - C_4 + P, \qquad F = 3 C_2 - 2 C_3 + 2 P,

    which keeps their relative precision at any x (directly, ``Y2 - 2 Y3 + <Y2^2>`` would
    be rounding noise, even negative, beyond ``x ~ 1e16``).
    """
    beta, q, p = np.broadcast_arrays(beta, q, p)
    if seq_len is None:
        def moment(orders, mask=Ellipsis, complement=False):
            return np.asarray(asymptotic_participation_moment(beta[mask], q[mask], p[mask], orders,
                                                              complement=complement), dtype=np.float64)
    else:
        x = reduced_scale(beta, q, p)

        def moment(orders, mask=Ellipsis, complement=False):
            return row_moment(x[mask], seq_len, orders, complement=complement)
    y = {k: moment((k,)) for k in (2, 3, 4)}
    pair = moment((2, 2))
    signal = np.array(y[2] - 2.0 * y[3] + y[4] + pair, dtype=np.float64)
    finite_width = np.array(1.0 - 3.0 * y[2] + 2.0 * y[3] + 2.0 * pair, dtype=np.float64)
    frozen = y[2] > 0.5
    if frozen.any():
        c = {k: moment((k,), frozen, complement=True) for k in (2, 3, 4)}
        signal[frozen] = -c[2] + 2.0 * c[3] - c[4] + pair[frozen]
        finite_width[frozen] = 3.0 * c[2] - 2.0 * c[3] + 2.0 * pair[frozen]
    return {"Y2": y[2], "Y3": y[3], "Y4": y[4], "Y2_square": y[4] + pair, "signal": signal,
            "finite_width": finite_width}


def gradient_row_moments(beta, q, p, seq_len=None):
    r"""Row moments of the attention matrix that enter its gradients.

    Returns ``Y2``, ``Y3``, ``Y4`` (``<sum_j a_j^k>``), ``Y2_square`` (``<(sum_j a_j^2)^2>``),
    ``signal`` ``K = Y2 - 2 Y3 + Y2_square`` and ``finite_width``
    ``F = 1 - 3 Y2 + 2 Y3 - 2 Y4 + 2 Y2_square``. In a frozen row (``Y2 > 1/2``) K and F
    are summed from ``1 - Y_k`` instead, so that they keep their relative precision where
    every ``Y_k`` rounds to 1 (``K, F ~ 1/x`` as ``x = beta sqrt(q (q - p)) -> inf``).

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
        Bounded time at every accepted input: at most 7 quadratures per distinct
        ``x`` plus 9 per call (:mod:`remprop.theory.rem.integral`, each at most ~10 ms).

    References
    ----------
    Derrida (1981); Pitman & Yor (1997); Giorlandino & Goldt, arXiv 2505.24333.
    """
    seq_len = check_seq_len(seq_len)
    beta = as_float_array("beta", beta, positive=True)
    q, p = check_overlap(q, p)
    return {k: scalar_or_array(v) for k, v in _row_moments(beta, q, p, seq_len).items()}


#: Relative variance, times d, of ``|W_K^T W_Q u|^2`` over unit directions u (square
#: Gaussian W_Q, W_K): ``2 (m_2 - m_1^2)`` with the Fuss-Catalan moments ``m_1 = 1``,
#: ``m_2 = 3`` of ``(W_K^T W_Q)^T (W_K^T W_Q)``; half of it (2/d) is ``|W_Q u|^2``.
WEIGHT_SPREAD = 4.0
#: Gauss-Hermite nodes of the average over the rows' energy scale.
_ROW_NODES = 9
#: log of the largest float64.
_LOG_MAX = math.log(np.finfo(np.float64).max)


def _row_average(function, beta, row_variance, weight):
    """``E_eps[(1 + weight eps) function(beta exp((eps - s^2/2)/2))]``, ``eps ~ N(0, s^2)``.

    ``function`` is called once, on a trailing axis of the ``_ROW_NODES`` scales.
    """
    nodes, weights = gauss_hermite(_ROW_NODES)
    eps = np.multiply.outer(np.sqrt(row_variance), nodes)
    scale = np.exp(0.5 * (eps - 0.5 * row_variance[..., None]))
    values = function(beta[..., None] * scale)
    return np.sum(weights * (1.0 + weight[..., None] * eps) * values, axis=-1)


@dataclass(frozen=True)
class _NormOptions:
    """The keyword options of the gradient norms (:func:`query_gradient_norm`), and which weight."""

    sigma_v2: Any = 0.2
    asymptotic: bool = False
    finite_width: bool = True
    overlap_variance: Any = None
    norm_variance: Any = None
    which: str = "query"


def _log_scaled_norm(beta, q, p, width, seq_len, options: _NormOptions):
    """log of the magnitude of the scaled norm (:func:`scaled_query_gradient_norm`), its sign, the inputs.

    Written as ``log(q s_v^2 beta S) + log <(1 + lambda eps) B / S>`` with
    ``S = max((q - p)^2, sigma_Delta^2)``, so that no intermediate overflows (q = 1e300).
    """
    asymptotic, finite_width, which = options.asymptotic, options.finite_width, options.which
    overlap_variance, norm_variance = options.overlap_variance, options.norm_variance
    seq_len = check_seq_len(seq_len, allow_none=False)
    width = _check_width(width)
    beta = as_float_array("beta", beta, positive=True)
    q, p = check_overlap(q, p)
    sigma_v2 = as_float_array("sigma_v2", options.sigma_v2, nonnegative=True)
    with np.errstate(divide="ignore"):
        log_gap2 = 2.0 * np.log(q - np.minimum(p, q))  # -inf at p = q
        if overlap_variance is None:
            log_overlap = log_gap2 - np.log(width)
        else:
            log_overlap = np.log(as_float_array("overlap_variance", overlap_variance, nonnegative=True))
        if norm_variance is None:
            norm_variance = 2.0 * ((q - np.minimum(p, q)) / q) ** 2 / width
        norm_variance = as_float_array("norm_variance", norm_variance, nonnegative=True)
        log_scale = np.maximum(log_gap2, log_overlap)
        finite_scale = np.isfinite(log_scale)
        gap_weight = np.where(finite_scale, np.exp(log_gap2 - np.where(finite_scale, log_scale, 0.0)), 0.0)
        overlap_weight = np.where(finite_scale, np.exp(log_overlap - np.where(finite_scale, log_scale, 0.0)), 0.0)
    moments_t = None if asymptotic else seq_len
    shape = np.broadcast(beta, q, p, width, sigma_v2, gap_weight, overlap_weight, norm_variance).shape
    beta, q, p, width, gap_weight, overlap_weight, norm_variance = (
        np.broadcast_to(a, shape) for a in (beta, q, p, width, gap_weight, overlap_weight, norm_variance))

    def bracket(b):
        """``B / S = ((q - p)^2 K + sigma_Delta^2 F) / S`` at the scale(s) b (trailing axes broadcast)."""
        extra = (None,) * (b.ndim - len(shape))
        m = _row_moments(b, q[(..., *extra)], p[(..., *extra)], moments_t)
        out = gap_weight[(..., *extra)] * m["signal"]
        if finite_width:
            out = out + overlap_weight[(..., *extra)] * m["finite_width"]
        return out

    if not finite_width:
        average = bracket(np.asarray(beta, dtype=np.float64))
    else:
        row_variance = norm_variance + WEIGHT_SPREAD / width
        # the prefactor |x_i|^2/d (query) or |W_Q x_i|^2/d (key) shares part of the row's fluctuation
        shared = norm_variance + (0.0 if which == "query" else 0.5 * WEIGHT_SPREAD / width)
        weight = np.where(row_variance > 0, shared / np.where(row_variance > 0, row_variance, 1.0), 0.0)
        average = _row_average(bracket, beta, row_variance, weight)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_value = np.log(q) + np.log(sigma_v2) + np.log(beta) + log_scale + np.log(np.abs(average))
    # a vanishing factor (sigma_v2 = 0, p = q, K = F = 0) gives -inf (or -inf + inf): the norm is 0
    return np.where(np.isnan(log_value), -np.inf, log_value), np.sign(average), (beta, q, p, width, seq_len)


def _checked_exp(log_value, sign, name, arguments):
    """``sign exp(log_value)``, or a ValueError naming the caller's parameters beyond float64."""
    log_value = np.asarray(log_value)
    if np.any(log_value > _LOG_MAX):
        beta, q, p, width, seq_len = (np.broadcast_to(a, log_value.shape) if np.ndim(a) else a for a in arguments)
        i = np.unravel_index(np.argmax(log_value), log_value.shape)
        raise ValueError(
            f"{name} is about 1e{log_value[i] / math.log(10):.0f}, beyond the float64 range, at q = {q[i]:g}, "
            f"p = {p[i]:g}, beta = {beta[i]:g}, width = {width[i]:g}, seq_len = {seq_len}: it grows like "
            "beta q (q - p)^2 (times T width^2); lower q or beta")
    if np.any(sign < 0):
        width = np.broadcast_to(arguments[3], np.shape(sign))
        i = np.unravel_index(np.argmin(sign), np.shape(sign))
        raise ValueError(
            f"{name}: the finite-width row average (first order in 1/width) is negative at width = {width[i]:g}, "
            "outside its range of validity; use a larger width or finite_width=False")
    return scalar_or_array(sign * np.exp(log_value))


def _norm(name, beta, q, p, width, seq_len, options: _NormOptions, scaled):
    log_value, sign, arguments = _log_scaled_norm(beta, q, p, width, seq_len, options)
    if not scaled:
        seq_len, width = arguments[4], arguments[3]
        log_value = log_value + math.log(seq_len) + 2.0 * np.log(width) + 0.5 * math.log(math.log(seq_len))
    return _checked_exp(log_value, sign, name, arguments)


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
    options = _NormOptions(sigma_v2, asymptotic, finite_width, overlap_variance, norm_variance, "query")
    return _norm("scaled_query_gradient_norm", beta, q, p, width, seq_len, options, scaled=True)


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
        Broadcast over beta, q, p, width, sigma_v2. Bounded time at every accepted input
        (measured below 0.25 s per call on 2 shared cores for beta in [1e-8, 1e8], q in
        [1e-300, 1e300], T in [2, 1e7], width in [1, 1e6]; tests/test_reliability_time.py).

    Raises
    ------
    ValueError
        Naming the caller's parameter: an invalid input; a norm beyond the float64 range
        (it grows like ``T d^2 beta q (q - p)^2``, e.g. q = 1e300); a negative row average
        where the first-order width expansion fails (width ~ 1 with frozen rows).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Result 2; Noci et al., NeurIPS 2022.

    Examples
    --------
    The value is a squared norm summed over every output entry ``S_ia`` (``T x d``) and every query
    weight (``d x d``), for input tokens of squared norm ``d q`` per token; it grows like ``T d^2``,
    so divide by ``T d^2`` to compare sizes (an O(1) number per output entry and weight):

    >>> g = query_gradient_norm(1.5, 1.0, 0.0, width=128, seq_len=256, sigma_v2=1.0)  # doctest: +SKIP
    >>> float(g)  # E |dS/dW_Q|_F^2 at q = 1, p = 0  # doctest: +SKIP
    1386350.6...
    >>> float(g) / (256 * 128 ** 2)  # per output entry and query weight  # doctest: +SKIP
    0.3305...
    """
    options = _NormOptions(sigma_v2, asymptotic, finite_width, overlap_variance, norm_variance, "query")
    return _norm("query_gradient_norm", beta, q, p, width, seq_len, options, scaled=False)


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
    options = _NormOptions(sigma_v2, asymptotic, finite_width, overlap_variance, norm_variance, "key")
    return _norm("key_gradient_norm", beta, q, p, width, seq_len, options, scaled=False)
