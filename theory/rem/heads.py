r"""Multi-head attention: which query/key variance keeps beta meaning the same for every H.

With H heads of width ``d_H = d / H`` the score of head h between tokens x and y is

.. math:: s^{(h)}(x, y) = \frac{1}{\sqrt{d_H}} \sum_{k \in h} (W_Q x)_k (W_K y)_k ,

a sum of ``d_H`` products of independent centred Gaussians with variances
``E[(W_Q x)_k^2] = s_qk^2 |x|^2 = s_qk^2 d q`` (and the same for the key), so

.. math:: \mathrm{Var}\, s^{(h)} = \frac{d_H}{d_H} (s_{qk}^2 d q)^2 = s_{qk}^4 d^2 q^2

for every H (``docs/derivations.md``, section 3; checked with sympy in
``tests/test_multihead.py``). Two conventions:

* ``qk_scaling="model"`` (the engine's and the simulator's default):
  ``s_qk^2 = beta sqrt(log T) / d``, so ``Var s = beta^2 q^2 log T`` for every H; each
  head is the single-head REM at ``beta`` (its independent part has variance
  ``beta^2 q (q - p) log T``).
* ``qk_scaling="head"``: ``s_qk^2 = beta sqrt(log T) / d_H = H beta sqrt(log T) / d``,
  so ``Var s = H^2 beta^2 q^2 log T``: each head is the single-head REM at
  ``H beta`` (entropy collapse for H beta > beta_c).

Measured (docs/theory.md section 2, d = 768, T = 512, beta = 0.5): Y2 = 0.009 for H = 1; over
``d_H``: 0.41 (H = 4), 0.79 (H = 12); over ``d``: 0.009 for all H.

References
----------
A. Giorlandino & S. Goldt, arXiv 2505.24333 (initialisation, docs/theory.md section 2);
A. Vaswani et al. 2017 (multi-head attention).
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from ..checks import as_float_array, scalar_or_array
from ..choices import Choice
from .checks import check_heads, check_seq_len
from .finite_t import participation_ratio

__all__ = ["QKScaling", "QK_SCALINGS", "effective_beta", "query_key_variance", "score_variance", "head_participation_ratio"]

class QKScaling(Choice):
    """Query/key variance convention: ``model`` divides by d, ``head`` by ``d_H = d / H``."""

    MODEL = "model"
    HEAD = "head"

    def head_factor(self, heads):
        """``beta_eff / beta`` for H heads: ``H`` per head (``head``), 1 per model (``model``)."""
        return heads if self is QKScaling.HEAD else 1


#: Query/key variance conventions, as spelled: "model" divides by d, "head" by d_H = d / H.
QK_SCALINGS = QKScaling.spellings()


def effective_beta(beta, heads=1, qk_scaling="model"):
    r"""The single-head beta that each of H heads behaves like.

    .. math:: \beta_{\rm eff} = \beta\ (\text{qk\_scaling} = \text{"model"}),\qquad
              \beta_{\rm eff} = H \beta\ (\text{qk\_scaling} = \text{"head"})

    Parameters
    ----------
    beta : array_like
        Query/key scale, > 0.
    heads : int
        Number of heads H >= 1.
    qk_scaling : {"model", "head"}
        ``s_qk^2 = beta sqrt(log T) / d`` or ``/ d_H``.

    Returns
    -------
    ndarray or float

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (docs/theory.md section 2).
    """
    beta = as_float_array("beta", beta, positive=True)
    heads = check_heads(heads)
    factor = QKScaling.parse("qk_scaling", qk_scaling).head_factor(heads)
    return scalar_or_array(beta * factor)


def query_key_variance(beta, width, seq_len, heads=1, qk_scaling="model"):
    r"""Variance of the query and key weights, ``s_qk^2 = beta sqrt(log T) / d`` (or ``/ d_H``).

    Parameters
    ----------
    beta : array_like
        Query/key scale, > 0.
    width : int
        Model width d, divisible by ``heads``.
    seq_len : int
        Sequence length T >= 2.
    heads : int
    qk_scaling : {"model", "head"}

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, initialisation of the reference experiments.
    """
    heads = check_heads(heads)
    if isinstance(width, bool) or not isinstance(width, (numbers.Integral, np.integer)) or width < 1:
        raise ValueError(f"width must be an integer >= 1, got {width!r}")
    if width % heads:
        raise ValueError(f"heads must divide width, got heads={heads}, width={width}")
    seq_len = check_seq_len(seq_len, allow_none=False)
    return scalar_or_array(np.asarray(effective_beta(beta, heads, qk_scaling)) * math.sqrt(math.log(seq_len))
                           / width)


def score_variance(beta, q, seq_len, heads=1, qk_scaling="model"):
    r"""Variance of one head's attention score, ``s_qk^4 d^2 q^2 = beta_eff^2 q^2 log T``.

    Parameters
    ----------
    beta : array_like
    q : array_like
        Mean squared token norm per coordinate, > 0.
    seq_len : int
    heads : int
    qk_scaling : {"model", "head"}

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (docs/theory.md sections 2 and 3).
    """
    q = as_float_array("q", q, positive=True)
    seq_len = check_seq_len(seq_len, allow_none=False)
    b = np.asarray(effective_beta(beta, heads, qk_scaling))
    return scalar_or_array(b ** 2 * q ** 2 * math.log(seq_len))


def head_participation_ratio(beta, q, p, heads=1, seq_len=None, qk_scaling="model"):
    r"""Participation ratio Y2 of one head's attention rows.

    ``participation_ratio(effective_beta(beta, heads, qk_scaling), q, p, seq_len)``: each
    head is a REM with the energy variance ``beta_eff^2 q (q - p) log T`` (finite T exact
    when ``seq_len`` is given, else ``max(0, 1 - beta_c / beta_eff)``).

    Parameters
    ----------
    beta, q, p : array_like
    heads : int
    seq_len : int or None
    qk_scaling : {"model", "head"}

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333; Derrida (1981).
    """
    return participation_ratio(effective_beta(beta, heads, qk_scaling), q, p, seq_len)
