"""The sympy symbols of the symbolic theory, and the numbers they stand for.

The parameters of the post-LN block (``sigma_w2``, ``sigma_b2``, ``sigma_v2``,
``alpha_sa``, ``alpha_mlp``: docs/theory.md section 2), the distance from collapse
``epsilon = 1 - rho`` and the kernel's ``delta = 1 - c``, and the helpers that turn an
expression in these symbols into a NumPy function of named parameters.
"""
from __future__ import annotations

import functools

import sympy as sp

from ..checks import as_float_array

__all__ = [
    "EPS", "DELTA", "SIGMA_W2", "SIGMA_B2", "SIGMA_V2", "ALPHA_SA", "ALPHA_MLP", "INV_ALPHA2",
    "ROOT", "BERT", "PARAM_SYMBOLS", "numeric_parameters", "lambdify_parameters", "twice_order",
]

#: ``epsilon = 1 - rho``: the distance of the token cosine from collapse.
EPS = sp.Symbol("epsilon", positive=True)
#: ``delta = 1 - c``: the distance of a kernel's correlation from 1.
DELTA = sp.Symbol("delta", positive=True)
#: The variances ``sigma_w2``, ``sigma_b2``, ``sigma_v2`` of the Architecture fields.
SIGMA_W2, SIGMA_B2, SIGMA_V2 = sp.symbols("sigma_w2 sigma_b2 sigma_v2", positive=True)
#: The skip strengths ``alpha_sa``, ``alpha_mlp``.
ALPHA_SA, ALPHA_MLP = sp.symbols("alpha_sa alpha_mlp", positive=True)
#: ``s = 1 / alpha_sa**2``: the attention's weight in the block; ``s = 0`` is ``alpha_sa = inf``.
INV_ALPHA2 = sp.Symbol("s", nonnegative=True)
#: ``t = sqrt(epsilon)`` or ``sqrt(delta)`` inside the expansions in half-integer powers.
ROOT = sp.Symbol("t", positive=True)

#: Default numeric parameters: the BERT settings of docs/theory.md section 2.
BERT = {"sigma_w2": 0.2, "sigma_b2": 4e-4, "sigma_v2": 0.2, "alpha_mlp": 1.0}
#: Architecture field -> symbol.
PARAM_SYMBOLS = {"sigma_w2": SIGMA_W2, "sigma_b2": SIGMA_B2, "sigma_v2": SIGMA_V2,
                 "alpha_sa": ALPHA_SA, "alpha_mlp": ALPHA_MLP}


def numeric_parameters(params, need_alpha_sa):
    """Checked float arrays of the named parameters, the BERT defaults filling the rest.

    ``alpha_sa`` defaults to 1 when ``need_alpha_sa``; an unknown name raises
    ``ValueError`` naming it.
    """
    allowed = set(BERT) | ({"alpha_sa"} if need_alpha_sa else set())
    for name in params:
        if name not in allowed:
            raise ValueError(f"{name} is not a parameter here; use one of {sorted(allowed)}")
    values = dict(BERT)
    if need_alpha_sa:
        values["alpha_sa"] = 1.0
    values.update(params)
    out = {}
    for name, value in values.items():
        positive = name in ("sigma_w2", "alpha_sa")
        out[name] = as_float_array(name, value, positive=positive, nonnegative=not positive)
    return out


@functools.lru_cache(maxsize=None)
def lambdify_parameters(expr):
    """A NumPy function ``call(**values)`` of an expression in the parameter symbols."""
    names = list(PARAM_SYMBOLS)
    fn = sp.lambdify([PARAM_SYMBOLS[n] for n in names], expr, modules="numpy")

    def call(**values):
        return fn(*(values[n] for n in names))
    return call


def twice_order(name, order):
    """``2 * order`` as an int for a series order that is a multiple of 1/2 in [1/2, 20]."""
    try:
        twice = sp.Rational(order) * 2
    except (TypeError, ValueError, sp.SympifyError):
        raise ValueError(f"{name} must be a multiple of 1/2, got {order!r}") from None
    if not twice.is_integer or twice < 1 or twice > 40:
        raise ValueError(f"{name} must be a multiple of 1/2 between 1/2 and 20, got {order!r}")
    return int(twice)
