r"""The ReLU arc-cosine kernel in sympy, and its expansion at ``c = 1``.

.. math:: f(c) = \frac{\sqrt{1 - c^2} + c\,(\pi - \arccos c)}{\pi},\qquad
          E[\mathrm{relu}(u)\,\mathrm{relu}(v)] = \tfrac{q}{2} f(c)

(docs/theory.md section 4; the NumPy kernel is :func:`remprop.theory.relu_kernel`).
Near ``c = 1`` it has half-integer powers of ``delta = 1 - c`` (docs/symbolic.md
section 3), which make the post-LN ReLU stack collapse polynomially.

References
----------
Y. Cho & L. Saul, "Kernel methods for deep learning", NeurIPS 2009 (arc-cosine kernel
of degree 1).
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np
import sympy as sp

from ..checks import as_float_array
from .symbols import DELTA, ROOT, twice_order

__all__ = ["arc_cosine_kernel", "relu_kernel_expansion", "KernelExpansion"]


def arc_cosine_kernel(c):
    r"""The normalised ReLU arc-cosine kernel as a sympy expression of ``c``.

    .. math:: f(c) = \frac{\sqrt{1 - c^2} + c\,(\pi - \arccos c)}{\pi}

    References
    ----------
    Cho & Saul, NeurIPS 2009; docs/theory.md section 4.
    """
    return (sp.sqrt(1 - c**2) + c * (sp.pi - sp.acos(c))) / sp.pi


@dataclass(frozen=True)
class KernelExpansion:
    """Series of ``f(1 - delta)`` in powers ``delta**(k/2)``.

    Attributes
    ----------
    series : sympy.Expr
        Truncated series in the symbol ``delta``.
    coefficients : dict
        ``{power (sympy.Rational): coefficient}``, powers 0, 1, 3/2, 5/2, ...
    order : sympy.Rational
        Highest power kept.
    delta : sympy.Symbol
    """

    series: sp.Expr
    coefficients: dict
    order: sp.Rational
    delta: sp.Symbol = DELTA

    def __call__(self, delta):
        """Evaluate the truncated series numerically (broadcasting over ``delta``)."""
        delta = as_float_array("delta", delta, nonnegative=True)
        out = np.zeros_like(delta)
        for power, coeff in self.coefficients.items():
            out = out + float(coeff) * delta ** float(power)
        return out

    def of(self, delta):
        """The truncated series at a sympy expression ``delta`` (``sum_k c_k delta^k``)."""
        return sum(coeff * delta**power for power, coeff in self.coefficients.items())


@functools.lru_cache(maxsize=None)
def kernel_expansion(twice: int) -> KernelExpansion:
    """:func:`relu_kernel_expansion` to the power ``twice / 2`` (cached, unchecked)."""
    # c = 1 - t^2 is c = cos(theta) with theta = 2 asin(t / sqrt 2) (1 - cos theta = 2 sin^2
    # theta/2), so sqrt(1 - c^2) = t sqrt(2 - t^2) and arccos c = 2 asin(t / sqrt 2): both
    # analytic in t, and the series in t is a series in sqrt(delta).
    t = ROOT
    f_of_t = (t * sp.sqrt(2 - t**2) + (1 - t**2) * (sp.pi - 2 * sp.asin(t / sp.sqrt(2)))) / sp.pi
    poly = sp.expand(sp.series(f_of_t, t, 0, twice + 1).removeO())
    coefficients = {}
    for k in range(twice + 1):
        coeff = sp.simplify(poly.coeff(t, k))
        if coeff != 0:
            coefficients[sp.Rational(k, 2)] = coeff
    series = sum(coeff * DELTA**power for power, coeff in coefficients.items())
    return KernelExpansion(series, coefficients, sp.Rational(twice, 2))


def relu_kernel_expansion(order=sp.Rational(5, 2)) -> KernelExpansion:
    r"""Expansion of the ReLU arc-cosine kernel at ``c = 1``, derived with sympy.

    .. math::
        f(1 - \delta) = 1 - \delta + \frac{2\sqrt 2}{3\pi}\delta^{3/2}
                        + \frac{\sqrt 2}{30\pi}\delta^{5/2}
                        + \frac{3\sqrt 2}{560\pi}\delta^{7/2} + \dots

    Derived by substituting ``c = 1 - t^2 = cos(2 asin(t / sqrt 2))`` into
    ``f(c) = (sqrt(1 - c^2) + c (pi - arccos c)) / pi`` and expanding in ``t``; no
    coefficient is typed in. The half-integer powers (no ``delta^2`` term) come from
    ``sqrt(1 - c^2)`` and ``arccos c``, which are not analytic at ``c = 1``.

    Parameters
    ----------
    order : int, float or sympy.Rational
        Highest power of ``delta`` kept, a multiple of 1/2 (>= 1/2).

    Returns
    -------
    KernelExpansion
        ``.series`` (sympy), ``.coefficients`` ({power: coefficient}); calling it
        evaluates the truncated series.

    References
    ----------
    Y. Cho & L. Saul, "Kernel methods for deep learning", NeurIPS 2009 (arc-cosine
    kernel of degree 1); Giorlandino & Goldt, arXiv 2505.24333.

    Examples
    --------
    >>> relu_kernel_expansion(2).coefficients[sp.Rational(3, 2)]
    2*sqrt(2)/(3*pi)
    """
    return kernel_expansion(twice_order("order", order))
