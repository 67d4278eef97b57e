r"""Ordered and chaotic phases of deep networks at initialisation (edge of chaos).

Deep fully connected network (Poole et al. 2016; Schoenholz et al. 2017)
------------------------------------------------------------------------
Pre-activations ``h^{l+1} = W phi(h^l) + b``, ``W ~ N(0, sigma_w2 / n)``,
``b ~ N(0, sigma_b2)``. Their variance follows the length map

.. math:: q^{l+1} = \sigma_w^2\, E[\phi(\sqrt{q^l} z)^2] + \sigma_b^2

to a fixed point ``q*``; the correlation of two inputs follows

.. math:: c^{l+1} = \frac{\sigma_w^2\, E[\phi(u)\phi(v)] + \sigma_b^2}{q^*},
          \qquad \mathrm{Var}\,u = \mathrm{Var}\,v = q^*,\ \mathrm{Cov} = c\, q^*,

whose slope at ``c = 1`` is (Price's theorem) ``chi_1 = sigma_w2 E[phi'(u)^2]``.
``chi_1 < 1``: ordered, ``c -> 1`` (inputs become indistinguishable);
``chi_1 > 1``: chaotic, ``c -> c* < 1``. The boundary ``chi_1 = 1`` has the exact
parametrisation by ``q*``:

.. math:: \sigma_w^2 = \frac{1}{E[\phi'(\sqrt{q^*} z)^2]}, \qquad
          \sigma_b^2 = q^* - \frac{E[\phi(\sqrt{q^*} z)^2]}{E[\phi'(\sqrt{q^*} z)^2]},

which :func:`chaos_boundary` inverts in ``q*`` (bisection). For tanh it starts at
``(sigma_w2, sigma_b2) = (1, 0)``; at ``sigma_b2 = 0.05``, ``sigma_w2 = 1.76``.

Residual MLP blocks with LayerNorm (the transformer's MLP sub-block)
--------------------------------------------------------------------
``x <- LN(alpha x + MLP(x))`` (or ``alpha x + MLP(LN(x))``) with the two-layer MLP of
docs/theory.md section 4 on unit-norm tokens: ``q1 = sigma_w2 + sigma_b2`` and, with
``D = sigma_w2 E[phi(u)^2] + sigma_b2`` (``u ~ N(0, q1)``), the cosine map has slope

.. math:: \frac{d\rho'}{d\rho}\Big|_{\rho=1} = \frac{\chi_{\rm MLP} D + \alpha^2}{D + \alpha^2},
          \qquad \chi_{\rm MLP} = \frac{\sigma_w^4 E[\phi'(u)^2]}{\sigma_w^2 E[\phi(u)^2] + \sigma_b^2}

(:func:`mlp_block_chi`). The skip strength only slows the dynamics: the stack is ordered
(``rho -> 1``) for ``chi_MLP < 1`` and chaotic for ``chi_MLP > 1`` whatever alpha.
ReLU gives ``chi_MLP = sigma_w2^2 / (sigma_w2 q1 + 2 sigma_b2) <= sigma_w2 / q1 <= 1``:
it always collapses (polynomially at ``sigma_b2 = 0``), as docs/theory.md section 4 states.

References
----------
B. Poole, S. Lahiri, M. Raghu, J. Sohl-Dickstein & S. Ganguli, "Exponential
expressivity in deep neural networks through transient chaos", NeurIPS 2016.
S. Schoenholz, J. Gilmer, S. Ganguli & J. Sohl-Dickstein, "Deep information
propagation", ICLR 2017. G. Yang & S. Schoenholz, "Mean field residual networks: on the
edge of chaos", NeurIPS 2017. A. Giorlandino & S. Goldt, arXiv 2505.24333 (Fig. 9).
"""
from __future__ import annotations

import numpy as np

from .checks import as_float_array, check_depth, scalar_or_array
from .activations import activation_spec, derivative_moment, moments_array

__all__ = [
    "length_fixed_point", "chi_1", "correlation_map", "correlation_trajectory",
    "chaos_boundary", "mlp_block_chi", "mlp_block_boundary",
]

#: Bisection steps (interval shrinks by 2^-200: down to the float spacing).
_BISECTIONS = 200


def _second_moment(code, q):
    return moments_array(code, q, q)[0]


def _derivative_moment(code, q):
    return np.asarray(derivative_moment(q, code), dtype=np.float64)


def length_fixed_point(sigma_w2, sigma_b2, activation="tanh"):
    r"""Fixed point ``q*`` of the length map ``q = sigma_w2 E[phi(sqrt(q) z)^2] + sigma_b2``.

    Found by bisection on ``F(q) = sigma_w2 E[phi(sqrt q z)^2] + sigma_b2 - q`` between a
    point where ``F >= 0`` (q -> 0) and one where ``F < 0`` (doubling from 1); the
    largest root if several. ``inf`` when F stays positive up to ``2^60`` (no fixed point,
    e.g. ReLU with ``sigma_w2 >= 2``); ``0`` for ``sigma_b2 = 0`` in the ordered phase.

    Parameters
    ----------
    sigma_w2, sigma_b2 : array_like
        Weight and bias variances, >= 0 (``sigma_w2 > 0``); broadcast together.
    activation : str or callable
        See :data:`~remprop.theory.ACTIVATIONS`.

    Returns
    -------
    ndarray or float

    References
    ----------
    Poole et al., NeurIPS 2016, Eq. (3).
    """
    spec = activation_spec(activation)
    sigma_w2 = as_float_array("sigma_w2", sigma_w2, positive=True)
    sigma_b2 = as_float_array("sigma_b2", sigma_b2, nonnegative=True)
    sigma_w2, sigma_b2 = np.broadcast_arrays(sigma_w2, sigma_b2)
    return scalar_or_array(_length_fixed_point(spec.code, sigma_w2.astype(float), sigma_b2.astype(float)))


def _length_fixed_point(code, sigma_w2, sigma_b2):
    def excess(q):
        return sigma_w2 * _second_moment(code, q) + sigma_b2 - q

    low = np.full(sigma_w2.shape, 1e-300)
    high = np.ones(sigma_w2.shape)
    for _ in range(60):
        grow = excess(high) >= 0
        if not grow.any():
            break
        high = np.where(grow, 2 * high, high)
    unbounded = excess(high) >= 0
    for _ in range(_BISECTIONS):
        mid = 0.5 * (low + high)
        up = excess(mid) >= 0
        low = np.where(up, mid, low)
        high = np.where(up, high, mid)
        if np.all(high - low <= 1e-15 * high):
            break
    q = np.where(unbounded, np.inf, 0.5 * (low + high))
    return np.where(q < 1e-250, 0.0, q)


def chi_1(sigma_w2, sigma_b2, activation="tanh"):
    r"""Slope of the correlation map at ``c = 1``: ``chi_1 = sigma_w2 E[phi'(sqrt(q*) z)^2]``.

    ``q*`` is :func:`length_fixed_point`. ``chi_1 < 1``: ordered phase; ``> 1``: chaotic.

    Parameters
    ----------
    sigma_w2, sigma_b2 : array_like
        Weight (> 0) and bias (>= 0) variances, broadcast together.
    activation : str or callable

    Returns
    -------
    ndarray or float

    References
    ----------
    Poole et al., NeurIPS 2016; Schoenholz et al., ICLR 2017, Eq. (5).
    """
    spec = activation_spec(activation)
    sigma_w2 = as_float_array("sigma_w2", sigma_w2, positive=True)
    sigma_b2 = as_float_array("sigma_b2", sigma_b2, nonnegative=True)
    sigma_w2, sigma_b2 = (a.astype(float) for a in np.broadcast_arrays(sigma_w2, sigma_b2))
    q = _length_fixed_point(spec.code, sigma_w2, sigma_b2)
    out = np.empty(q.shape)
    zero = q == 0.0
    out[zero] = sigma_w2[zero] * float(derivative_moment(1e-300, spec.code))
    ok = ~zero & np.isfinite(q)
    out[ok] = sigma_w2[ok] * _derivative_moment(spec.code, q[ok])
    out[~np.isfinite(q)] = np.inf
    return scalar_or_array(out)


def correlation_map(c, sigma_w2, sigma_b2, activation="tanh", q=None):
    r"""One layer of the correlation map of a deep network.

    .. math:: c' = \frac{\sigma_w^2 E[\phi(u)\phi(v)] + \sigma_b^2}{q'},\quad
              q' = \sigma_w^2 E[\phi(u)^2] + \sigma_b^2

    with ``Var u = Var v = q`` and ``Cov = c q``; ``q`` defaults to the fixed point
    ``q*`` (then ``q' = q*``).

    Parameters
    ----------
    c : array_like
        Input correlation in [-1, 1].
    sigma_w2, sigma_b2 : array_like
    activation : str or callable
    q : array_like, optional
        Pre-activation variance (> 0); default ``q*``.

    Returns
    -------
    ndarray or float

    References
    ----------
    Poole et al., NeurIPS 2016, Eq. (5).
    """
    spec = activation_spec(activation)
    c = as_float_array("c", c, low=-1.0, high=1.0)
    sigma_w2 = as_float_array("sigma_w2", sigma_w2, positive=True)
    sigma_b2 = as_float_array("sigma_b2", sigma_b2, nonnegative=True)
    if q is None:
        w, b = (a.astype(float) for a in np.broadcast_arrays(sigma_w2, sigma_b2))
        q = _length_fixed_point(spec.code, w, b)
    q = as_float_array("q", q, positive=True)
    m2, m11 = moments_array(spec.code, q, c * q)
    return scalar_or_array((sigma_w2 * m11 + sigma_b2) / (sigma_w2 * m2 + sigma_b2))


def correlation_trajectory(c0, depth, sigma_w2, sigma_b2, activation="tanh"):
    r"""``c`` through ``depth`` layers of a deep network at its length fixed point.

    Iterates :func:`correlation_map` at ``q = q*``. Returns an array of shape
    ``broadcast + (depth + 1,)`` (index 0 is ``c0``).

    References
    ----------
    Poole et al., NeurIPS 2016; Schoenholz et al., ICLR 2017.
    """
    spec = activation_spec(activation)
    depth = check_depth(depth)
    c0 = as_float_array("c0", c0, low=-1.0, high=1.0)
    sigma_w2 = as_float_array("sigma_w2", sigma_w2, positive=True)
    sigma_b2 = as_float_array("sigma_b2", sigma_b2, nonnegative=True)
    c, w, b = (a.astype(float) for a in np.broadcast_arrays(c0, sigma_w2, sigma_b2))
    q = _length_fixed_point(spec.code, w, b)
    out = np.empty(c.shape + (depth + 1,))
    out[..., 0] = c
    for layer in range(depth):
        m2, m11 = moments_array(spec.code, q, c * q)
        c = np.clip((w * m11 + b) / (w * m2 + b), -1.0, 1.0)
        out[..., layer + 1] = c
    return out


def chaos_boundary(sigma_b2, activation="tanh"):
    r"""``sigma_w2`` on the order-to-chaos boundary ``chi_1 = 1`` at bias variance ``sigma_b2``.

    Uses the exact parametrisation of the boundary by the length fixed point ``q*``:

    .. math:: \sigma_b^2(q^*) = q^* - \frac{E[\phi(\sqrt{q^*}z)^2]}{E[\phi'(\sqrt{q^*}z)^2]},
              \qquad \sigma_w^2 = \frac{1}{E[\phi'(\sqrt{q^*}z)^2]},

    solving ``sigma_b2(q*) = sigma_b2`` by bisection (``sigma_b2(q*)`` increases with
    ``q*`` for the sigmoidal activations this is meant for: tanh, erf). Below the
    boundary (smaller ``sigma_w2``) the network is ordered, above it chaotic.

    Parameters
    ----------
    sigma_b2 : array_like
        Bias variance(s), >= 0.
    activation : str or callable

    Returns
    -------
    ndarray or float
        Critical ``sigma_w2`` (tanh: 1 at ``sigma_b2 = 0``).

    References
    ----------
    Poole et al., NeurIPS 2016, Fig. 2; Schoenholz et al., ICLR 2017, Fig. 1.
    """
    spec = activation_spec(activation)
    sigma_b2 = as_float_array("sigma_b2", sigma_b2, nonnegative=True).astype(float)

    def boundary_bias(q):
        return q - _second_moment(spec.code, q) / _derivative_moment(spec.code, q)

    low = np.full(sigma_b2.shape, 1e-12)
    high = np.ones(sigma_b2.shape)
    for _ in range(60):
        grow = boundary_bias(high) < sigma_b2
        if not grow.any():
            break
        high = np.where(grow, 2 * high, high)
    for _ in range(_BISECTIONS):
        mid = 0.5 * (low + high)
        below = boundary_bias(mid) < sigma_b2
        low = np.where(below, mid, low)
        high = np.where(below, high, mid)
        if np.all(high - low <= 1e-14 * high):
            break
    q = np.where(sigma_b2 == 0.0, 1e-300, 0.5 * (low + high))
    return scalar_or_array(1.0 / _derivative_moment(spec.code, q))


def mlp_block_chi(sigma_w2, sigma_b2, activation="tanh"):
    r"""Ordered/chaotic indicator of residual MLP blocks with LayerNorm.

    .. math:: \chi_{\rm MLP} = \frac{\sigma_w^4 E[\phi'(u)^2]}{\sigma_w^2 E[\phi(u)^2] + \sigma_b^2},
              \qquad u \sim N(0, \sigma_w^2 + \sigma_b^2)

    A stack of ``x <- LN(alpha x + MLP(x))`` (or pre-LN) blocks has ``rho -> 1`` for
    ``chi_MLP < 1`` and a fixed point ``rho* < 1`` for ``chi_MLP > 1``, for every skip
    strength alpha (see the module notes for the derivation).

    Parameters
    ----------
    sigma_w2 : array_like
        MLP weight variance (both layers), > 0.
    sigma_b2 : array_like
        Bias variance, >= 0.
    activation : str or callable

    References
    ----------
    Poole et al., NeurIPS 2016 (chi_1); Giorlandino & Goldt, arXiv 2505.24333 (MLP map).
    """
    spec = activation_spec(activation)
    sigma_w2 = as_float_array("sigma_w2", sigma_w2, positive=True)
    sigma_b2 = as_float_array("sigma_b2", sigma_b2, nonnegative=True)
    w, b = (a.astype(float) for a in np.broadcast_arrays(sigma_w2, sigma_b2))
    q1 = w + b
    return scalar_or_array(w * w * _derivative_moment(spec.code, q1)
                           / (w * _second_moment(spec.code, q1) + b))


def mlp_block_boundary(sigma_b2, activation="tanh", sigma_w2_max=100.0):
    r"""``sigma_w2`` where :func:`mlp_block_chi` crosses 1, by bisection on ``(0, sigma_w2_max]``.

    ``nan`` where ``chi_MLP - 1`` has no sign change on the interval (e.g. tanh at
    ``sigma_b2 = 0``, chaotic for every ``sigma_w2 > 0``; ReLU, always ordered).

    References
    ----------
    See :func:`mlp_block_chi`.
    """
    spec = activation_spec(activation)
    sigma_b2 = as_float_array("sigma_b2", sigma_b2, nonnegative=True).astype(float)
    if not (np.isfinite(sigma_w2_max) and sigma_w2_max > 0):
        raise ValueError(f"sigma_w2_max must be a positive number, got {sigma_w2_max!r}")
    low = np.full(sigma_b2.shape, 1e-9)
    high = np.full(sigma_b2.shape, float(sigma_w2_max))
    chi_low = np.asarray(mlp_block_chi(low, sigma_b2, spec.name))
    chi_high = np.asarray(mlp_block_chi(high, sigma_b2, spec.name))
    valid = (chi_low < 1.0) & (chi_high > 1.0)
    for _ in range(_BISECTIONS):
        mid = 0.5 * (low + high)
        ordered = np.asarray(mlp_block_chi(mid, sigma_b2, spec.name)) < 1.0
        low = np.where(ordered, mid, low)
        high = np.where(ordered, high, mid)
        if np.all(high - low <= 1e-13 * high):
            break
    return scalar_or_array(np.where(valid, 0.5 * (low + high), np.nan))
