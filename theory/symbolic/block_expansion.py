r"""The post-LN ReLU block map near rank collapse, expanded in ``sqrt(1 - rho)``.

Every post-LN block after the first sees ``q = 1``, ``p = rho = 1 - eps``; in the spread
phase of attention (``Y2 = 0``) the block is the composition of its two halves,
``eps' = E_M(E_A(eps))`` (:func:`~remprop.theory.symbolic.block_tree.post_ln_sub_blocks`,
walked from :meth:`Architecture.block <remprop.theory.Architecture.block>`). ``E_A`` is
analytic in ``eps``; ``E_M`` inherits the half-integer powers of the ReLU kernel at
``c = 1`` (:mod:`~remprop.theory.symbolic.arc_cosine`), so

.. math:: \epsilon' = \lambda\epsilon + \kappa\epsilon^{3/2} + \mu\epsilon^2 + O(\epsilon^{5/2})

(docs/symbolic.md section 4).

References
----------
A. Giorlandino & S. Goldt, arXiv 2505.24333 (the block maps); Y. Cho & L. Saul,
NeurIPS 2009 (arc-cosine kernel).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import sympy as sp

from ..checks import as_float_array
from .arc_cosine import kernel_expansion
from .block_tree import SymbolicContext, gaussian_moments, post_ln_sub_blocks, spread_phase
from .symbols import EPS, PARAM_SYMBOLS, ROOT, lambdify_parameters, numeric_parameters, twice_order

__all__ = ["BlockMapExpansion", "block_map_expansion"]


@dataclass(frozen=True)
class BlockMapExpansion:
    r"""``eps' = lam eps + kappa eps^(3/2) + mu eps^2 + ...`` for the post-LN ReLU block.

    Attributes
    ----------
    lam, kappa, mu : sympy.Expr
        Coefficients of ``eps``, ``eps^(3/2)``, ``eps^2`` (exact, in the symbols
        ``sigma_w2, sigma_b2, sigma_v2, alpha_sa, alpha_mlp``).
    lam_attention, lam_mlp, kappa_mlp : sympy.Expr
        Factors: ``lam = lam_attention * lam_mlp``,
        ``kappa = kappa_mlp * lam_attention^(3/2)``.
    series : sympy.Expr
        The truncated series in the symbol ``epsilon``.
    coefficients : dict
        ``{power: coefficient}`` for every power kept.
    order : sympy.Rational
        Highest power kept.
    """

    lam: sp.Expr
    kappa: sp.Expr
    mu: sp.Expr
    lam_attention: sp.Expr
    lam_mlp: sp.Expr
    kappa_mlp: sp.Expr
    series: sp.Expr
    coefficients: dict
    order: sp.Rational
    eps: sp.Symbol = EPS
    symbols: dict = field(default_factory=lambda: dict(PARAM_SYMBOLS))

    def numeric(self, **params):
        """Float values of ``lam``, ``kappa``, ``mu`` at the given parameters.

        Parameters missing from ``params`` take the BERT defaults (``alpha_sa = 1``).
        Arrays broadcast.
        """
        values = numeric_parameters(params, need_alpha_sa=True)
        out = {}
        for name in ("lam", "kappa", "mu", "lam_attention", "lam_mlp", "kappa_mlp"):
            fn = lambdify_parameters(getattr(self, name))
            out[name] = np.asarray(fn(**values), dtype=np.float64) + 0.0 * sum(values.values())
        return out

    def numeric_coefficients(self, **params):
        """``{power (float): value}`` of every coefficient of the series at ``params``."""
        values = numeric_parameters(params, need_alpha_sa=True)
        return {float(power): np.asarray(lambdify_parameters(coeff)(**values), dtype=np.float64)
                for power, coeff in self.coefficients.items()}

    def evaluate(self, eps, **params):
        """The truncated series at ``eps`` (numeric; parameters as in :meth:`numeric`)."""
        eps = as_float_array("eps", eps, nonnegative=True)
        total = 0.0
        for power, value in self.numeric_coefficients(**params).items():
            total = total + value * eps**power
        return np.asarray(total, dtype=np.float64)




def _attention_half():
    """``E_A(eps)``: 1 - cosine after ``LN(alpha x + SA(x))`` from ``(1, 1 - eps)``, ``Y2 = 0``."""
    attention_half, _ = post_ln_sub_blocks()
    q1, p1 = attention_half.symbolic(sp.Integer(1), 1 - EPS, SymbolicContext(participation=spread_phase))
    return sp.cancel(1 - p1 / q1)


def _mlp_half_coefficients(kernel):
    """``{k: m_k}`` of ``E_M(x) = sum_k m_k x^k``: ``LN(alpha_M x + MLP(x))`` from ``(1, 1 - x)``.

    The MLP's ReLU kernel is the truncated series ``kernel`` of ``f(1 - delta)``; the walk
    runs at ``x = u^2`` so that ``x^(k/2)`` are integer powers of ``u``.
    """
    _, mlp_half = post_ln_sub_blocks()
    u = ROOT

    def kernel_series(c):
        return kernel.of(sp.factor(1 - c))

    def moments(activation, q1, p1):
        return gaussian_moments(activation, q1, p1, kernel=kernel_series)

    q2, p2 = mlp_half.symbolic(sp.Integer(1), 1 - u**2, SymbolicContext(participation=spread_phase,
                                                                          moments=moments))
    numerator, denominator = sp.fraction(sp.together(1 - p2 / q2))
    numerator = sp.expand(numerator)
    if u in denominator.free_symbols or sp.simplify(numerator.coeff(u, 0)) != 0:
        raise RuntimeError("the MLP half is not a series in sqrt(x) without constant term")  # pragma: no cover
    coefficients = {}
    for k in range(1, int(2 * kernel.order) + 1):
        coeff = sp.factor(numerator.coeff(u, k) / denominator)
        if coeff != 0:
            coefficients[sp.Rational(k, 2)] = coeff
    return coefficients


@functools.lru_cache(maxsize=None)
def _block_map_expansion(twice: int) -> BlockMapExpansion:
    # Compose the two halves of the tree term by term (exact to the order kept):
    #   E_A(eps) = eps h(eps), h analytic with h(0) = lam_A;
    #   E_M(x)   = sum_k m_k x^k (k = 1, 3/2, 5/2, ...: the kernel has no delta^2);
    # x^k = eps^k h(eps)^k, each h^k a power series in eps = t^2.
    t = ROOT
    h = sp.cancel(_attention_half() / EPS)
    lam_a = sp.simplify(h.subs(EPS, 0))
    mlp_coeffs = _mlp_half_coefficients(kernel_expansion(twice))
    poly = 0
    for power, coeff in mlp_coeffs.items():
        if power > sp.Rational(twice, 2):
            continue
        h_pow = sp.series(h.subs(EPS, t**2) ** power, t, 0, twice + 2).removeO()
        poly += coeff * t ** int(2 * power) * h_pow
    poly = sp.expand(poly)
    coefficients = {}
    for k in range(2, twice + 1):
        coeff = sp.factor(poly.coeff(t, k))
        if coeff != 0:
            coefficients[sp.Rational(k, 2)] = coeff
    series = sum(coeff * EPS**power for power, coeff in coefficients.items())
    half = sp.Rational(1, 2)
    return BlockMapExpansion(
        lam=coefficients[sp.Integer(1)],
        kappa=coefficients.get(3 * half, sp.Integer(0)),
        mu=coefficients.get(sp.Integer(2), sp.Integer(0)),
        lam_attention=lam_a, lam_mlp=mlp_coeffs[sp.Integer(1)],
        kappa_mlp=mlp_coeffs.get(3 * half, sp.Integer(0)),
        series=series, coefficients=coefficients, order=sp.Rational(twice, 2))


def block_map_expansion(order=2) -> BlockMapExpansion:
    r"""Expansion of the post-LN ReLU block map near collapse, ``eps = 1 - rho -> 0``.

    Input ``q = 1``, ``p = rho = 1 - eps`` (every post-LN block after the first); the
    attention is in its spread phase (``Y2 = 0``: ``beta_c = sqrt(2 / eps)`` diverges, so
    this holds for any fixed ``beta`` once ``eps < 2 / beta^2``). Then

    .. math::
        \epsilon' = \lambda\epsilon + \kappa\epsilon^{3/2} + \mu\epsilon^2 + O(\epsilon^{5/2}),

    .. math::
        \lambda = \underbrace{\frac{\alpha^2}{\alpha^2 + \sigma_v^2 + \sigma_b^2}}_{\lambda_A}
                  \underbrace{\frac{\sigma_w^4/2 + \alpha_M^2}
                  {\sigma_w^2(\sigma_w^2 + \sigma_b^2)/2 + \sigma_b^2 + \alpha_M^2}}_{\lambda_M},
        \quad
        \kappa = -\frac{2\sqrt 2}{3\pi}\,
                  \frac{\sigma_w^5 / (2\sqrt{\sigma_w^2 + \sigma_b^2})}
                  {\sigma_w^2(\sigma_w^2 + \sigma_b^2)/2 + \sigma_b^2 + \alpha_M^2}\,
                  \lambda_A^{3/2},
        \quad
        \mu = \lambda\,\frac{\sigma_v^2}{\alpha^2 + \sigma_v^2 + \sigma_b^2}

    (``sigma_w^5`` means ``sigma_w2^(5/2)``). The attention contributes only the linear
    factor ``lambda_A < 1`` (exponential collapse at rate ``-log lambda_A``); the MLP's
    linear factor ``lambda_M`` is 1 without bias and slightly below 1 with it; the
    ``eps^(3/2)`` term (always negative) comes from the kernel's ``delta^(3/2)`` and is
    what makes the bias-free MLP collapse polynomially (:func:`~remprop.theory.symbolic.polynomial_collapse_law`).

    Parameters
    ----------
    order : int, float or sympy.Rational
        Highest power of ``eps`` kept, a multiple of 1/2, >= 2.

    Returns
    -------
    BlockMapExpansion
        sympy expressions ``lam``, ``kappa``, ``mu``, their factors, the ``series`` and
        all ``coefficients``; ``.numeric(**params)`` and ``.evaluate(eps, **params)``
        give numbers.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (block maps); Cho & Saul 2009 (kernel).

    Examples
    --------
    >>> exp = block_map_expansion()
    >>> round(float(exp.numeric(alpha_sa=1.0)["lam"]), 4)
    0.8327
    """
    twice = twice_order("order", order)
    if twice < 4:
        raise ValueError(f"order must be >= 2 (lambda, kappa and mu), got {order!r}")
    return _block_map_expansion(twice)

