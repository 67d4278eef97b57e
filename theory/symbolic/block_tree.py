r"""The block of :class:`~remprop.theory.Architecture` walked on sympy expressions.

The block order lives once, in :func:`remprop.theory.components.block.block` (docs/theory.md
section 5). Each component of
:mod:`remprop.theory.components` evaluates its map on sympy expressions as well as on
numbers (:meth:`Component.symbolic <remprop.theory.components.Component.symbolic>`,
the same skip, LayerNorm, dense and attention cores); this module supplies what the
numeric maps compute from numbers:

* the attention's participation ratio ``Y2`` at its input ``(q, p)``: by default the
  undefined function ``Y2(q, p)``; :func:`spread_phase` gives ``Y2 = 0``;
* the activation's Gaussian moments ``(E[phi(u)^2], E[phi(u) phi(v)])`` at
  ``Var = q1``, ``Cov = p1``: ``(q1/2, (q1/2) f(p1/q1))`` for ReLU with the arc-cosine
  kernel ``f``, ``(q1, p1)`` for the identity, undefined functions ``M2(q1)``,
  ``M11(q1, p1)`` otherwise.

:func:`post_ln_block_map` is the post-LN ReLU block of this walk at ``q = 1``,
``p = 1 - epsilon``, ``Y2 = 0``.

References
----------
A. Giorlandino & S. Goldt, arXiv 2505.24333 (the component maps); Y. Cho & L. Saul,
NeurIPS 2009 (arc-cosine kernel).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable

import numpy as np
import sympy as sp

from .. import components as C
from ..architecture import NUMERIC_FIELDS, OPTIONAL_FIELDS, Architecture
from .arc_cosine import arc_cosine_kernel
from .symbols import ALPHA_MLP, ALPHA_SA, EPS, INV_ALPHA2, SIGMA_B2, SIGMA_V2, SIGMA_W2

__all__ = [
    "SymbolicContext", "symbolic_architecture", "symbolic_block_map", "post_ln_block_map",
    "post_ln_sub_blocks", "spread_phase", "gaussian_moments", "Q", "P", "PARTICIPATION",
]

#: Symbols of the block input: mean squared norm ``q`` and mean overlap ``p``.
Q, P = sp.symbols("q p", real=True)
#: The participation ratio ``Y2`` of attention at its input ``(q, p)``, left undefined.
PARTICIPATION = sp.Function("Y2")
_M2, _M11 = sp.Function("M2"), sp.Function("M11")
#: The activations with closed-form Gaussian moments in sympy: ``(q1, p1, kernel) -> (M2, M11)``.
_CLOSED_FORM_MOMENTS = {"relu": lambda q1, p1, kernel: (q1 / 2, q1 / 2 * kernel(p1 / q1)),
                        "linear": lambda q1, p1, kernel: (q1, p1)}


def participation_function(beta, q, p, seq_len):
    """``Y2(q, p)``: the participation ratio left as an undefined sympy function."""
    return PARTICIPATION(q, p)


CROSS_OVERLAP = sp.Function("C")


def cross_overlap_function(beta, q, p, seq_len):
    """``C(q, p)``: the finite-T cross-overlap of two attention rows, an undefined sympy function."""
    return CROSS_OVERLAP(q, p)


def spread_phase(beta, q, p, seq_len):
    """``Y2 = 0``: attention in its spread phase (``beta < beta_c``, ``T -> infinity``)."""
    return sp.Integer(0)


def gaussian_moments(activation, q1, p1, kernel=arc_cosine_kernel):
    r"""``(E[phi(u)^2], E[phi(u) phi(v)])`` for ``Var = q1``, ``Cov = p1``, in sympy.

    .. math:: \mathrm{relu}: \Big(\frac{q_1}{2}, \frac{q_1}{2} f\Big(\frac{p_1}{q_1}\Big)\Big),
              \qquad \mathrm{linear}: (q_1, p_1)

    (docs/theory.md section 4). ``kernel`` is ReLU's ``f`` (default: the arc-cosine kernel;
    a truncated series of it for expansions). Any other activation gives the undefined
    functions ``M2(q1)``, ``M11(q1, p1)``.
    """
    closed_form = _CLOSED_FORM_MOMENTS.get(activation)
    if closed_form is None:
        return _M2(q1), _M11(q1, p1)
    return closed_form(q1, p1, kernel)


@dataclass(frozen=True)
class SymbolicContext:
    """What a component map leaves open on sympy expressions (see module docstring).

    Attributes
    ----------
    participation : callable
        ``(beta, q, p, seq_len) -> Y2`` at the attention input ``(q, p)``; default the
        undefined function ``Y2(q, p)``.
    moments : callable
        ``(activation, q1, p1) -> (E[phi(u)^2], E[phi(u) phi(v)])``; default
        :func:`gaussian_moments`.
    cross_overlap : callable
        ``(beta, q, p, seq_len) -> C``, the overlap of two rows of finite-T softmax
        attention (docs/theory.md section 3); default the undefined function ``C(q, p)``.
    """

    participation: Callable = participation_function
    moments: Callable = gaussian_moments
    cross_overlap: Callable = cross_overlap_function

    @staticmethod
    def parameter(value):
        """A component parameter as a sympy expression (a number must be a scalar)."""
        if isinstance(value, sp.Basic):
            return value
        value = np.asarray(value, dtype=np.float64)
        if value.ndim != 0:
            raise ValueError(f"symbolic evaluation needs scalar parameters, got shape {value.shape}")
        return sp.Float(float(value))


def symbolic_architecture(arch: Architecture, **fields) -> Architecture:
    """A copy of ``arch`` whose numeric fields are sympy expressions.

    ``fields``: numeric fields of :class:`~remprop.theory.Architecture` (``sigma_w2``,
    ``alpha_sa``, ...) -> sympy expressions. They bypass the numeric validation, so the
    copy's :meth:`~remprop.theory.Architecture.block` can only be walked symbolically
    (:func:`symbolic_block_map`). Unknown field names raise ``ValueError``.
    """
    known = NUMERIC_FIELDS + OPTIONAL_FIELDS
    unknown = sorted(set(fields) - set(known))
    if unknown:
        raise ValueError(f"{', '.join(unknown)}: not a numeric field of Architecture ({', '.join(known)})")
    out = copy.copy(arch)
    for name, value in fields.items():
        object.__setattr__(out, name, sp.sympify(value))
    return out


def symbolic_block_map(arch: Architecture, q=Q, p=P, *, beta=1.0, context=None):
    r"""``(q', p')`` of one block of ``arch`` as sympy expressions of its input ``(q, p)``.

    Walks :meth:`Architecture.block <remprop.theory.Architecture.block>` (the block
    order of docs/theory.md section 5) with
    :meth:`Component.symbolic <remprop.theory.components.Component.symbolic>`.

    Parameters
    ----------
    arch : Architecture
        Numeric fields are numbers (0-d) or sympy expressions (:func:`symbolic_architecture`).
    q, p : sympy.Expr
        The block input (default the symbols ``q``, ``p``).
    beta : float
        The model's query/key scale (the architecture's effective beta is what reaches the
        participation ratio).
    context : SymbolicContext, optional
        Participation ratio and activation moments (default: ``Y2(q, p)`` undefined,
        :func:`gaussian_moments`).

    Returns
    -------
    (q', p') : tuple of sympy.Expr

    Examples
    --------
    >>> from remprop.theory import Architecture
    >>> arch = symbolic_architecture(Architecture(norm="none", activation="linear"),
    ...                              sigma_w2=SIGMA_W2, sigma_b2=0, sigma_v2=SIGMA_V2,
    ...                              alpha_sa=1, alpha_mlp=1)
    >>> q1, p1 = symbolic_block_map(arch, context=SymbolicContext(participation=spread_phase))
    >>> sp.factor(p1)
    p*(sigma_v2 + 1)*(sigma_w2**2 + 1)
    """
    context = SymbolicContext() if context is None else context
    return arch.block(beta).symbolic(sp.sympify(q), sp.sympify(p), context)


def post_ln_sub_blocks(attention_weight=False):
    """The two halves of the symbolic post-LN ReLU block: ``LN(alpha x + SA(x))``, ``LN(alpha_M x + MLP(x))``.

    The block is :meth:`Architecture(norm="post").block <remprop.theory.Architecture.block>`
    with the symbols ``sigma_w2, sigma_b2, sigma_v2, alpha_mlp`` and ``alpha_sa`` (or
    ``1 / sqrt(s)`` when ``attention_weight``); post-LN composes
    ``serial(residual(SA), LN, residual(MLP), LN)``, split after the first LayerNorm.
    """
    alpha_sa = 1 / sp.sqrt(INV_ALPHA2) if attention_weight else ALPHA_SA
    arch = symbolic_architecture(Architecture(norm="post", activation="relu"), sigma_w2=SIGMA_W2,
                                 sigma_b2=SIGMA_B2, sigma_v2=SIGMA_V2, alpha_sa=alpha_sa,
                                 alpha_mlp=ALPHA_MLP)
    layers = arch.block(1.0).layers
    if [repr(layer) for layer in layers[1::2]] != ["layer_norm", "layer_norm"]:
        raise RuntimeError(f"not a post-LN block: {arch.block(1.0)!r}")  # pragma: no cover
    return C.serial(*layers[:2]), C.serial(*layers[2:])


def post_ln_block_map(attention_weight=False):
    r"""The exact post-LN ReLU block map ``eps -> eps'`` in the spread phase (sympy).

    .. math::
        \epsilon_1 = \frac{\alpha^2\epsilon}{\alpha^2 + \sigma_v^2 + \sigma_b^2
        - \sigma_v^2\epsilon},\qquad
        \epsilon' = \frac{C\,[1 - f(1 - r\epsilon_1)] + \alpha_M^2\,\epsilon_1}{Q}

    with ``r = sigma_w2 / (sigma_w2 + sigma_b2)``, ``C = sigma_w2 (sigma_w2 + sigma_b2) / 2``,
    ``Q = C + sigma_b2 + alpha_mlp^2``. Derived, not typed in: the block of
    ``Architecture(norm="post")`` (:func:`post_ln_sub_blocks`) walked on the input
    ``q = 1``, ``p = 1 - eps`` with ``Y2 = 0`` and the arc-cosine kernel
    (docs/theory.md sections 3-5): attention ``q_A = p_A = sigma_v2 p + sigma_b2``; skip;
    LayerNorm; MLP ``q_2 = sigma_w2 q_1 / 2 + sigma_b2``,
    ``p_2 = sigma_w2 (q_1 / 2) f(p_1 / q_1) + sigma_b2``; skip; LayerNorm.

    Parameters
    ----------
    attention_weight : bool
        If True, express the map through ``s = 1 / alpha_sa^2`` (symbol ``s``) instead
        of ``alpha_sa``, so that ``s = 0`` (``alpha_sa -> inf``) is the MLP-only block.

    Returns
    -------
    (eps_next, eps_attention) : tuple of sympy.Expr
        ``eps'`` as a function of ``epsilon`` and the parameters, and the intermediate
        ``eps_1`` after the attention sub-block.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (component maps); Cho & Saul 2009 (``f``).
    """
    attention_half, mlp_half = post_ln_sub_blocks(attention_weight)
    spread = SymbolicContext(participation=spread_phase)
    q1, p1 = attention_half.symbolic(sp.Integer(1), 1 - EPS, spread)
    # cancel the skip's 1/s against itself, so that s = 0 (alpha_sa = inf) evaluates
    rho1 = sp.factor(sp.cancel(p1 / q1))
    q2, p2 = mlp_half.symbolic(sp.Integer(1), rho1, spread)
    return 1 - p2 / q2, sp.factor(sp.cancel(1 - rho1))
