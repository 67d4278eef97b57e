r"""One softmax attention layer at finite width d: the keys' geometry and the measured cosine.

The maps of :mod:`remprop.theory.components.attention` are exact as ``d -> infinity`` at fixed T
(docs/theory.md section 3.4). At finite width the tokens that set a row's energies are the
tokens the row averages, and in d dimensions they are not an orthogonal simplex: their
deviations ``z_j`` from the mean token are (for Gaussian tokens) i.i.d. Gaussian vectors in
the ``d_k = d - 1`` directions orthogonal to the mean token. A row with query direction
``w`` has energies ``g_j = w . z_j``; writing ``z_j = (g_j / |w|^2) w + z_j^perp`` with
``z_j^perp`` independent of the energies,

.. math:: \frac{|\sum_j a_j z_j|^2}{d} \propto \Big(1 - \frac{1}{d_k}\Big)\Big(Y_2 - \frac1T\Big)
          + \frac{D}{d_k},\qquad
          D = \frac{E\big[(\langle g\rangle - \bar g)^2\big]}{v},

where ``<g> = sum_j a_j g_j`` is the row's Gibbs mean energy, ``g_bar`` the plain mean of its
T energies and ``v = x^2 log T`` their variance (docs/theory.md section 18). The weighted
average is pulled towards the direction ``w`` that chose the weights: ``D`` grows from
``v`` (small x) to about ``2 log T`` (frozen rows), against ``Y_2 - 1/T`` of order ``v/T``
and 1, so the relative correction is about ``T/d`` at small beta. Two rows share the
projection on the plane of their two query directions; its mean is ``rho D`` to within
6 % (Monte Carlo, T = 128, x <= 3.8, rho in {0.1, 0.5, 0.9}; exact as x -> 0, and the
leading order in the frozen phase). The rows' energy scales also spread at finite width
(query norms, :func:`query_norm_variance`); the maps average over them.

:func:`gibbs_energy_square` computes ``D`` exactly (1-D quadrature of the Laplace
representation of 1/Z and 1/Z^2, as :mod:`.integral`); :func:`finite_width_attention_map`
is the corrected ``(q_A, p_A)``; :func:`attention_mean_cosine` is the expected *mean
pairwise cosine* of the outputs, the quantity the simulations measure (``cosine`` in
``remprop.validation``): rows of a finite-T REM have fluctuating participation, so the
output norms fluctuate and the mean of the cosines exceeds ``p_A / q_A`` (by 0.05 at
T = 128, beta ~ 1, input cosine 0.1).

References
----------
B. Derrida, Phys. Rev. B 24, 2613 (1981); A. Giorlandino & S. Goldt, arXiv 2505.24333;
docs/theory.md section 18.
"""
from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np

from remprop._deprecation import reordered, warn_renamed

from ..checks import (as_float_array, check_choice, check_count, check_overlap, check_simplex_cosine, output_pair,
                      scalar_or_array)
from .checks import check_seq_len
from .cross_overlap import cross_overlap
from .finite_t import participation_ratio, reduced_scale

__all__ = ["gibbs_energy_square", "finite_width_attention_map", "attention_mean_cosine", "CosineSampling",
           "key_dimension", "query_norm_variance", "ENERGY_X_MAX"]

#: Trapezoid step of the quadrature, in energy units (g and tau). The integrands are
#: analytic in a strip of half-width pi/2 about the real axis, so the error is about
#: exp(-pi^2 / step): halving the step changes D by < 1e-9 relative (tested).
_STEP = 0.25
#: Gaussian range kept below the mean energy, in standard deviations.
_Z_LOW = 11.0
#: tau is integrated this far beyond the largest energy kept (integrand ~ e^{-(tau - g)}).
_TAU_MARGIN = 45.0
#: The tau lattice starts this far below the lowest energy kept (a whole number of steps).
_TAU_BELOW = 10.0
#: Rows of the (tau, g) lattice evaluated at a time.
_CHUNK = 512


def key_dimension(width) -> int:
    """``d_k = d - 1``: the directions the token deviations span (orthogonal to the mean token).

    ``width`` must be an integer >= 4 (two query directions and a remainder).
    """
    return check_count("width", width, 4) - 1


def _kernels(y):
    """``e^{k y - e^y}`` for k = 0, 1, 2 (``e^y`` capped at ``e^700``: the kernels are 0 there)."""
    e = np.exp(np.minimum(y, 700.0))
    return np.exp(-e), np.exp(y - e), np.exp(2.0 * y - e)


def _lattice_sums(weights, n_g, n_tau, step):
    """``sum_i K_k(g_i - tau_a) w_i`` for every tau_a, g and tau on one lattice of spacing ``step``
    (``tau_a = g_0 - _TAU_BELOW + a step``, ``g_i = g_0 + i step``; ``weights``: name -> (k, w)).

    The differences take the ``n_g + n_tau - 1`` values ``_TAU_BELOW + m step``, so each sum is a
    discrete correlation of the kernel on those values with the weights: the exponentials are
    evaluated once per difference instead of once per (tau, g) pair.
    """
    y = _TAU_BELOW + step * np.arange(-(n_tau - 1), n_g)
    kernels = _kernels(y)
    # c[j] = sum_i K[i + j] w_i belongs to tau index a = n_tau - 1 - j
    return {name: np.correlate(kernels[k], weight, mode="valid")[::-1] for name, (k, weight) in weights.items()}


def _energy_square_at(x, seq_len, step=_STEP):
    """``D`` of one row at reduced scale ``x`` (module docstring), by the trapezoid rule."""
    log_t = math.log(seq_len)
    v = x * x * log_t
    if v == 0.0:
        return 0.0
    s = math.sqrt(v)
    z_top = math.sqrt(2.0 * log_t + 100.0)  # T phi(z_top) ~ e^{-50}
    h_g = min(step, s / 6.0)
    g = np.arange(-_Z_LOW * s, s * z_top + h_g, h_g)
    w = np.exp(-0.5 * (g / s) ** 2) * (h_g / (s * math.sqrt(2.0 * math.pi)))
    taus = np.arange(-_Z_LOW * s - _TAU_BELOW, s * z_top + _TAU_MARGIN, step)
    # name: (k of the kernel e^{k y - e^y}, Gaussian weights)
    weights = {"L": (0, w), "H0": (0, g * w), "G1": (1, g * w), "G21": (1, g * g * w), "G22": (2, g * g * w)}
    if h_g == step:  # g and tau on one lattice: y = g_i - tau_a = _TAU_BELOW + (i - a) step
        f = _lattice_sums(weights, g.size, taus.size, step)
    else:
        f = {k: np.empty(taus.size) for k in weights}
        for a in range(0, taus.size, _CHUNK):
            kernels = _kernels(g[None, :] - taus[a:a + _CHUNK, None])
            for name, (k, weight) in weights.items():
                f[name][a:a + _CHUNK] = kernels[k] @ weight
    log_l = np.log(np.clip(f["L"], 1e-300, 1.0))
    p1, p2 = np.exp((seq_len - 1) * log_l), np.exp((seq_len - 2) * log_l)
    t = seq_len
    # E <g>^2 (1/Z^2) and E[<g> g_bar] (1/Z); E g_bar^2 = v / T
    mean_square = step * (t * (f["G22"] * p1).sum() + t * (t - 1) * (f["G1"] ** 2 * p2).sum())
    with_mean = step * ((f["G21"] * p1).sum() + (t - 1) * (f["G1"] * f["H0"] * p2).sum())
    return max((mean_square - 2.0 * with_mean + v / t) / v, 0.0)


#: The table of D(x) at one T: cubic spline on nodes x = 0, 1/8, ..., X_MAX (larger x: the quadrature).
ENERGY_X_MAX = 12.0
_ENERGY_NODES = 97


@functools.lru_cache(maxsize=32)
def _energy_table(seq_len):
    nodes = np.linspace(0.0, ENERGY_X_MAX, _ENERGY_NODES)
    from scipy.interpolate import CubicSpline  # lazily: 0.4 s of import

    return CubicSpline(nodes, [_energy_square_at(float(x), seq_len) for x in nodes])


def _energy_square(x, seq_len, method="table"):
    """``D`` at an array of reduced scales ``x`` (table inside its range, else the quadrature)."""
    x = np.asarray(x, dtype=float)
    values, inverse = np.unique(x.ravel(), return_inverse=True)
    out = np.empty(values.shape)
    inside = values <= ENERGY_X_MAX if method == "table" else np.zeros(values.shape, dtype=bool)
    if inside.any():
        out[inside] = np.maximum(_energy_table(seq_len)(values[inside]), 0.0)
    out[~inside] = [_energy_square_at(float(v), seq_len) for v in values[~inside]]
    return out[np.ravel(inverse)].reshape(x.shape)


def gibbs_energy_square(beta, q, p, seq_len, method="exact"):
    r"""``D = E[(<g> - g_bar)^2] / v``: the squared Gibbs mean energy of an attention row.

    For T i.i.d. energies ``g_j ~ N(0, v)``, ``v = x^2 log T``, ``x = beta sqrt(q (q - p))``,
    weights ``a_j = e^{g_j} / Z``, ``<g> = sum_j a_j g_j`` and ``g_bar = sum_j g_j / T``:

    .. math:: E\langle g\rangle^2 = T\!\int\! d\tau\, E\big[g^2 e^{2(g-\tau) - e^{g-\tau}}\big] L^{T-1}
              + T(T-1)\!\int\! d\tau\, E\big[g\,e^{(g-\tau) - e^{g-\tau}}\big]^2 L^{T-2},

    .. math:: E\big[\langle g\rangle \bar g\big] = \int\! d\tau\, E\big[g^2 e^{(g-\tau) - e^{g-\tau}}\big]
              L^{T-1} + (T-1)\!\int\! d\tau\, E\big[g\,e^{(g-\tau) - e^{g-\tau}}\big]
              E\big[g\,e^{-e^{g-\tau}}\big] L^{T-2},

    ``L(tau) = E[e^{-e^{g - tau}}]`` (Laplace identities ``1/Z^k = Gamma(k)^{-1} int t^{k-1}
    e^{-tZ} dt``, ``t = e^{-tau}``, docs/theory.md section 3.3), and ``E g_bar^2 = v / T``.
    ``D = v (1 - 1/T^2) + O(v^2)`` as x -> 0; about ``2 log T`` for frozen rows (6.7 at
    T = 128, x = 3.8). Trapezoid rule on a lattice of step 0.25 (relative error < 1e-9).

    Parameters
    ----------
    beta : array_like
        Query/key scale (per head: the effective beta), >= 0.
    q, p : array_like
        Token order parameters, ``|p| <= q``.
    seq_len : int
        T >= 2.
    method : {"exact", "table"}
        ``"exact"``: one quadrature per distinct x (1 to 50 ms); ``"table"``: a cubic spline
        through the quadrature at ``x = 0, 1/8, ..., 12`` (built once per T, about 2 s;
        absolute error below 1e-4, tested), the quadrature beyond.

    Returns
    -------
    ndarray or float
        ``D >= 0``, broadcast over the inputs.

    References
    ----------
    Derrida (1981); docs/theory.md section 18.

    Examples
    --------
    >>> round(gibbs_energy_square(1.5, 1.0, 0.1, seq_len=128), 3)
    5.227
    """
    seq_len = check_seq_len(seq_len, allow_none=False)
    check_choice("method", method, ("exact", "table"))
    beta = as_float_array("beta", beta, nonnegative=True)
    q, p = check_overlap(q, p)
    x = np.asarray(reduced_scale(beta, q, p), dtype=float)
    if not np.all(np.isfinite(x)):
        raise ValueError("beta * sqrt(q (q - p)) must be finite")
    return scalar_or_array(_energy_square(x, seq_len, method))


def query_norm_variance(width, heads=1, cosine=0.0):
    r"""Relative variance of a row's energy variance over the weights and its query token.

    A row's energies have variance ``v lambda`` with
    ``lambda = (chi^2_{d_H} / d_H) (chi^2_{d_k} / d_k) (|x_i|^2 / (d q))``: the squared norm of
    the head's query ``W_Q x_i``, of its image ``W_K^T u`` in the ``d_k`` key directions, and
    the query token's norm (relative variance ``2 (1 - rho)^2 / d`` for Gaussian tokens), so

    .. math:: \mathrm{Var}\,\lambda = \Big(1 + \frac{2}{d_H}\Big)\Big(1 + \frac{2}{d_k}\Big)
              \Big(1 + \frac{2 (1 - \rho)^2}{d}\Big) - 1.

    Parameters
    ----------
    width : int
        d >= 4.
    heads : int
        H >= 1, dividing d (``d_H = d / H``).
    cosine : array_like
        The tokens' cosine ``rho = p / q``.

    Returns
    -------
    ndarray or float

    References
    ----------
    Docs/theory.md section 18.
    """
    d_k = key_dimension(width)
    heads = check_count("heads", heads, 1)
    if (d_k + 1) % heads:
        raise ValueError(f"heads must divide width, got heads={heads}, width={d_k + 1}")
    d_head = (d_k + 1) // heads
    rho = as_float_array("cosine", cosine, low=-1.0, high=1.0)
    return scalar_or_array((1 + 2 / d_head) * (1 + 2 / d_k) * (1 + 2 * (1 - rho) ** 2 / (d_k + 1)) - 1)


#: Nodes of the average over lambda (Gauss-Hermite in log lambda).
_LAMBDA_NODES = 8
_HERMITE_Z, _HERMITE_W = np.polynomial.hermite_e.hermegauss(_LAMBDA_NODES)
_HERMITE_W = _HERMITE_W / _HERMITE_W.sum()


def _log_normal(variance):
    """``(mu, s)`` of the log-normal law of mean 1 and ``variance``: ``lambda = exp(mu + s z)``."""
    s2 = math.log1p(variance)
    return -0.5 * s2, math.sqrt(s2)


def _lambda_rule(variance):
    """Nodes and weights of ``E f(lambda)``, lambda log-normal of mean 1 and ``variance``."""
    mu, s = _log_normal(variance)
    return np.exp(mu + s * _HERMITE_Z), _HERMITE_W


def _row_means(x, rho, seq_len, lam_var):
    """``E_lambda Y_2(x sqrt(lambda))`` and ``E_lambda D(x sqrt(lambda))`` (arrays like x)."""
    x, lam_var = np.broadcast_arrays(np.asarray(x, dtype=float), np.asarray(lam_var, dtype=float))
    y2, energy = np.zeros(x.shape), np.zeros(x.shape)
    for var in np.unique(lam_var):
        at = lam_var == var
        if var == 0.0:
            nodes, weights = np.ones(1), np.ones(1)
        else:
            nodes, weights = _lambda_rule(float(var))
        scaled = x[at][..., None] * np.sqrt(nodes)
        y2[at] = (np.asarray(participation_ratio(np.maximum(scaled, 1e-300), 1.0, 0.0, seq_len)) * weights).sum(-1)
        energy[at] = (_energy_square(scaled, seq_len) * weights).sum(-1)
    return y2, energy


def _map_inputs(q, p, beta, sigma_v2, sigma_b2, seq_len):
    q, p = check_overlap(q, p)
    seq_len = check_seq_len(seq_len, allow_none=False)
    check_simplex_cosine("p / q", p / q, seq_len)
    beta = as_float_array("beta", beta, positive=True)
    sigma_v2 = as_float_array("sigma_v2", sigma_v2, nonnegative=True)
    sigma_b2 = as_float_array("sigma_b2", sigma_b2, nonnegative=True)
    return q, p, beta, sigma_v2, sigma_b2, seq_len


@reordered("(q, p, beta, sigma_v2=0.2, sigma_b2=4e-4, *, width, seq_len, heads=1)")
def finite_width_attention_map(beta, *, q, p, sigma_v2=0.2, sigma_b2=4e-4, width, seq_len, heads=1):
    r"""Order parameters after one softmax attention layer of width d at sequence length T.

    .. math::
        q_A = \sigma_v^2\Big(p + (q - p)\Big[\bar Y_2 + \frac{\bar D - (\bar Y_2 - 1/T)}{d_k}\Big]\Big)
              + \sigma_b^2,

    .. math::
        p_A = \sigma_v^2\Big(p + (q - p)\Big[C + \frac{\rho \bar D - 2 (C - 1/T)}{d_k}\Big]\Big) + \sigma_b^2,

    ``d_k = d - 1`` (:func:`key_dimension`), ``rho = p / q``, ``C`` the exact finite-T
    cross-overlap (:func:`~remprop.theory.rem.cross_overlap`), and the row averages
    ``bar Y_2 = E_lambda Y_2(x sqrt(lambda))``, ``bar D = E_lambda D(x sqrt(lambda))`` of the
    participation ratio and of :func:`gibbs_energy_square` over the row's energy scale
    ``lambda`` (log-normal law of mean 1 and the variance of :func:`query_norm_variance`,
    8-node Gauss-Hermite rule in ``log lambda``). Two effects of order ``1/d``: the keys' geometry (the
    ``D / d_k`` terms, module docstring) and the spread of the query norms (``bar Y_2``; not
    applied to ``C``, whose change is below 5e-4 at T = d = 128). As ``d -> infinity`` it
    tends to :func:`~remprop.theory.softmax_attention_map` with ``seq_len=T``, the
    difference times ``d`` tending to a finite limit (tested). At T = d = 128, beta = 0.67,
    rho = 0.1 it lowers ``p_A / q_A`` from 0.788 to 0.726 (simulated: 0.726 +- 0.002). Heads: pass the
    effective beta (:meth:`~remprop.theory.Architecture.effective_beta`) and ``heads``.

    Parameters
    ----------
    beta : array_like
        Query/key scale, > 0. The arguments after it are keyword-only (the order was ``(q, p, beta,
        ...)`` before: an old positional call is a ``TypeError``).
    q, p : array_like
        Input order parameters, ``p / q >= -1/(T - 1)``.
    sigma_v2, sigma_b2 : array_like
        Value weight and value bias variances, >= 0.
    width : int
        Model width d >= 4.
    seq_len : int
        Sequence length T >= 2.
    heads : int
        Number of heads H, dividing d.

    Returns
    -------
    (q_A, p_A) : tuple of ndarray or float
        Broadcast over all inputs.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Result 1; docs/theory.md sections 3.4 and 18.
    """
    q, p, beta, sigma_v2, sigma_b2, seq_len = _map_inputs(q, p, beta, sigma_v2, sigma_b2, seq_len)
    d_k = key_dimension(width)
    rho = p / q
    lam_var = np.asarray(query_norm_variance(width, heads, np.clip(rho, -1.0, 1.0)))
    y2, energy = _row_means(reduced_scale(beta, q, p), rho, seq_len, lam_var)
    cross = np.asarray(cross_overlap(beta, q, p, seq_len, method="table"))
    spread = q - p
    y_eff = y2 + (energy - (y2 - 1.0 / seq_len)) / d_k
    c_eff = cross + (rho * energy - 2.0 * (cross - 1.0 / seq_len)) / d_k
    return output_pair(sigma_v2 * (p + spread * y_eff) + sigma_b2, sigma_v2 * (p + spread * c_eff) + sigma_b2)


def _pair_cosines(x, rho, seq_len, d_k, r, bias, draws, heads):
    """Per-sample cosine of two rows' outputs and the control variates (module docstring)."""
    v = x * x * math.log(seq_len)
    shared, own_i, own_k, lam_i, lam_k = draws
    n = shared.shape[0] // heads
    c, u = math.sqrt(abs(rho)), math.sqrt(1.0 - abs(rho))
    e_i = c * shared + u * own_i  # unit-variance energies; the row's scale sqrt(v lambda) below
    e_k = math.copysign(c, rho) * shared + u * own_k
    s = math.sqrt(v)
    a_i = s * np.sqrt(lam_i) * e_i
    a_i = np.exp(a_i - a_i.max(axis=1, keepdims=True))
    a_i /= a_i.sum(axis=1, keepdims=True)
    a_k = s * np.sqrt(lam_k) * e_k
    a_k = np.exp(a_k - a_k.max(axis=1, keepdims=True))
    a_k /= a_k.sum(axis=1, keepdims=True)
    y_i, y_k, cross = (a_i * a_i).sum(1), (a_k * a_k).sum(1), (a_i * a_k).sum(1)
    y_i_eff, y_k_eff, c_eff = y_i, y_k, cross
    r_i = r_k = np.zeros_like(y_i)
    if d_k is not None:
        # projections on the query plane are scale-free: unit-variance energies
        h_i = e_i - e_i.mean(axis=1, keepdims=True)
        h_k = e_k - e_k.mean(axis=1, keepdims=True)
        m_ii, m_ik = (a_i * h_i).sum(1), (a_i * h_k).sum(1)  # row i's Gibbs means of both energies
        m_ki, m_kk = (a_k * h_i).sum(1), (a_k * h_k).sum(1)
        r_i, r_k = m_ii ** 2, m_kk ** 2
        if abs(rho) > 1.0 - 1e-9:  # one query direction: the two projections coincide
            quad = m_ii * m_kk
        else:  # m_i^T Gamma^{-1} m_k, Gamma = [[1, rho], [rho, 1]]
            quad = (m_ii * m_ki + m_ik * m_kk - rho * (m_ii * m_kk + m_ik * m_ki)) / (1.0 - rho * rho)
        inv_t = 1.0 / seq_len
        y_i_eff = (1.0 - 1.0 / d_k) * (y_i - inv_t) + inv_t + r_i / d_k
        y_k_eff = (1.0 - 1.0 / d_k) * (y_k - inv_t) + inv_t + r_k / d_k
        c_eff = (1.0 - 2.0 / d_k) * (cross - inv_t) + inv_t + quad / d_k
    mean_heads = lambda a: a.reshape(n, heads).mean(axis=1)  # noqa: E731
    norm_i, norm_k = r + mean_heads(y_i_eff) + bias, r + mean_heads(y_k_eff) + bias
    cosines = (r + mean_heads(c_eff) + bias) / np.sqrt(norm_i * norm_k)
    controls = np.stack([mean_heads(y_i + y_k), mean_heads(r_i + r_k)])
    return cosines, controls


@dataclass(frozen=True)
class CosineSampling:
    """How :func:`attention_mean_cosine` samples its expectation: ``samples`` pairs of rows (>= 16)
    drawn with ``seed`` (>= 0); the same draws for every input, so that curves are smooth."""

    samples: int = 2048
    seed: int = 0

    def __post_init__(self):
        object.__setattr__(self, "samples", check_count("samples", self.samples, 16))
        object.__setattr__(self, "seed", check_count("seed", self.seed, 0))


def _sampling_keywords(function):
    """The keywords ``samples`` and ``seed`` of :func:`attention_mean_cosine`, deprecated for
    ``sampling=CosineSampling(samples, seed)``, for one release."""
    @functools.wraps(function)
    def wrapper(*args, **kwargs):
        old = {name: kwargs.pop(name) for name in ("samples", "seed") if name in kwargs}
        if old:
            if "sampling" in kwargs:
                raise TypeError("attention_mean_cosine() got both sampling and its deprecated samples/seed")
            warn_renamed(f"attention_mean_cosine({', '.join(f'{k}=...' for k in old)})",
                         "attention_mean_cosine(sampling=CosineSampling(samples, seed))", stacklevel=4)
            kwargs["sampling"] = CosineSampling(**old)
        return function(*args, **kwargs)

    return wrapper


@reordered("(q, p, beta, sigma_v2=0.2, sigma_b2=4e-4, *, seq_len, width=None, heads=1, samples=2048, seed=0, "
           "return_error=False)")
@_sampling_keywords
def attention_mean_cosine(beta, *, q, p, sigma_v2=0.2, sigma_b2=4e-4, seq_len, width=None, heads=1,
                          sampling=CosineSampling(), return_error=False):
    r"""Expected mean pairwise cosine of the outputs of one softmax attention layer.

    The measured cosine averages ``o_i . o_k / (|o_i| |o_k|)`` over pairs of tokens; the
    maps give ``p_A / q_A``, a ratio of averages. At finite T a row's participation
    ``Y_i = sum_j a_ij^2`` fluctuates from row to row (a REM is not self-averaging), so
    do the output norms, and the two differ (docs/theory.md section 18). Averaging over
    the values (exact as ``d -> infinity``),

    .. math:: E\,\cos_{ik} = E\left[\frac{\sigma_v^2 (p + (q - p)\tilde C_{ik}) + \sigma_b^2}
              {\sqrt{(\sigma_v^2 (p + (q - p)\tilde Y_i) + \sigma_b^2)
                     (\sigma_v^2 (p + (q - p)\tilde Y_k) + \sigma_b^2)}}\right],

    the expectation over two rows whose energies are, key by key, Gaussian pairs of
    correlation ``rho = p / q`` and variances ``v lambda_i``, ``v lambda_k``
    (``v = x^2 log T``; as :func:`~remprop.theory.rem.cross_overlap`). ``width=None``
    (``d -> infinity``): ``lambda = 1``, ``tilde Y = Y``, ``tilde C = C``. At width d:
    ``lambda`` log-normal as in :func:`finite_width_attention_map`,
    ``tilde Y_i = (1 - 1/d_k)(Y_i - 1/T) + 1/T + R_i/d_k`` with
    ``R_i = (<g>_i - g_bar_i)^2 / (v lambda_i)``, and
    ``tilde C = (1 - 2/d_k)(C - 1/T) + 1/T + m_i^T Gamma^{-1} m_k / d_k`` (the two rows'
    Gibbs means of both energies, ``Gamma`` their covariance). With H heads each tilde
    quantity is the mean over H independent heads. The expectation is sampled
    (``sampling``: its pairs and seed; the same draws for every input, so curves are smooth),
    with the exact means of ``Y`` and ``R`` as control variates. Sampling error below 3e-3
    at 2048 samples and T = 128, 5e-4 at small beta (``return_error``).

    Parameters
    ----------
    beta, q, p, sigma_v2, sigma_b2
        As :func:`finite_width_attention_map` (``beta`` first, the rest keyword-only).
    seq_len : int
        T >= 2.
    width : int or None
        Model width d >= 4, or None for ``d -> infinity`` (finite T alone).
    heads : int
        Number of heads H >= 1 dividing d (pass the effective beta).
    sampling : CosineSampling
        Pairs of rows sampled (>= 16) and the seed of the sampled energies (>= 0). The keywords
        ``samples`` and ``seed`` are deprecated spellings of it (one release).
    return_error : bool
        Also return the standard error of the sampled mean.

    Returns
    -------
    ndarray or float, or (cosine, error)
        Broadcast over ``q, p, beta, sigma_v2, sigma_b2``.

    Notes
    -----
    The signature is :func:`finite_width_attention_map`'s (five broadcast inputs and the sizes
    ``seq_len``, ``width``, ``heads``) plus the sampling (one :class:`CosineSampling`) and
    ``return_error``, so that the map and its sampled cosine are called side by side on the same
    grids (:func:`remprop.validation.attention_sweep`).

    References
    ----------
    Derrida (1981); Giorlandino & Goldt, arXiv 2505.24333 (Fig. 2); docs/theory.md section 18.
    """
    q, p, beta, sigma_v2, sigma_b2, seq_len = _map_inputs(q, p, beta, sigma_v2, sigma_b2, seq_len)
    d_k = None if width is None else key_dimension(width)
    heads = check_count("heads", heads, 1)
    if not isinstance(sampling, CosineSampling):
        raise ValueError(f"sampling must be a CosineSampling, got {type(sampling).__name__}")
    samples, seed = sampling.samples, sampling.seed
    q, p, beta, sigma_v2, sigma_b2 = np.broadcast_arrays(q, p, beta, sigma_v2, sigma_b2)
    if np.any((sigma_v2 == 0.0) & (sigma_b2 == 0.0)):
        raise ValueError("sigma_v2 and sigma_b2 must not both be 0 (the outputs would be 0, their cosine undefined)")
    x = np.asarray(reduced_scale(beta, q, p), dtype=float)
    if not np.all(np.isfinite(x)):
        raise ValueError("beta * sqrt(q (q - p)) must be finite")
    rho = np.clip(p / q, -1.0, 1.0)
    lam_var = np.zeros(x.shape) if d_k is None else np.asarray(query_norm_variance(width, heads, rho)) + 0.0 * x
    spread = sigma_v2 * (q - p)
    # the cosine depends on (x, rho, Var lambda) and on r = p / (q - p), b = sigma_b2 / (sigma_v2 (q - p))
    with np.errstate(divide="ignore", invalid="ignore"):
        r = np.where(spread > 0, sigma_v2 * p / spread, np.inf)
        bias = np.where(spread > 0, sigma_b2 / spread, np.inf)
    keys = np.stack([x.ravel(), rho.ravel(), lam_var.ravel(), r.ravel(), bias.ravel()], axis=1)
    unique, inverse = np.unique(keys, axis=0, return_inverse=True)
    gen = np.random.default_rng(seed)
    shape = (samples * heads, seq_len)
    normals = tuple(gen.standard_normal(shape) for _ in range(3))
    scales = tuple(gen.standard_normal((samples * heads, 1)) for _ in range(2))  # the rows' log lambda
    y2, energy = _row_means(unique[:, 0], unique[:, 1], seq_len, unique[:, 2])
    means, errors = np.empty(len(unique)), np.empty(len(unique))
    for n, (x_n, rho_n, var_n, r_n, b_n) in enumerate(unique):
        if not np.isfinite(r_n):  # p = q (one token) or sigma_v2 = 0 (the bias alone): equal outputs
            means[n], errors[n] = 1.0, 0.0
            continue
        if x_n == 0.0:  # uniform rows: every output is the mean token
            means[n], errors[n] = 1.0, 0.0
            continue
        lams = (np.ones((samples * heads, 1)),) * 2 if var_n == 0.0 else tuple(
            np.exp(_log_normal(var_n)[0] + _log_normal(var_n)[1] * z) for z in scales)
        cos, controls = _pair_cosines(x_n, rho_n, seq_len, d_k, r_n, b_n, normals + lams, heads)
        exact = np.array([2.0 * y2[n], 2.0 * energy[n] if d_k is not None else 0.0])
        means[n], errors[n] = _controlled_mean(cos, controls, exact)
    out = means[np.ravel(inverse)].reshape(x.shape)
    if return_error:
        return scalar_or_array(out), scalar_or_array(errors[np.ravel(inverse)].reshape(x.shape))
    return scalar_or_array(out)


def _controlled_mean(values, controls, exact):
    """Mean of ``values`` with control variates of known means ``exact``, and its standard error."""
    n = values.size
    keep = controls.std(axis=1) > 0
    if not keep.any():
        return float(values.mean()), float(values.std(ddof=1) / math.sqrt(n))
    z = controls[keep] - controls[keep].mean(axis=1, keepdims=True)
    centred = values - values.mean()
    coef, *_ = np.linalg.lstsq(z.T, centred, rcond=None)
    mean = values.mean() - coef @ (controls[keep].mean(axis=1) - exact[keep])
    resid = centred - z.T @ coef
    return float(mean), float(math.sqrt(resid @ resid / (n - 1 - keep.sum()) / n))
