r"""Softmax attention with rotary position embeddings (RoPE): the map on (q, p).

RoPE rotates queries and keys only; the values see the tokens as they are. The map is
therefore the softmax attention map of docs/theory.md section 3.4 with the row's
participation ratio taken from the REM with RoPE
(:func:`~remprop.theory.rem.rope_participation_ratio`, docs/theory.md section 15):

.. math:: q_A = \sigma_v^2\big(p + (q - p)\,Y_2^{\rm rope}\big) + \sigma_b^2,\qquad
          p_A = \sigma_v^2\big(p + (q - p)\,C\big) + \sigma_b^2,

``C = 0`` as ``T -> infinity`` and ``1/T`` at finite T, the convention of
:func:`~remprop.theory.softmax_attention_map`.

References
----------
J. Su et al., arXiv 2104.09864 (RoPE); A. Giorlandino & S. Goldt, arXiv 2505.24333, Result 1.
"""
from __future__ import annotations

import numpy as np

from remprop._deprecation import reordered

from .components.attention import softmax_attention_overlap_core
from .checks import as_float_array, check_overlap, check_simplex_cosine, output_pair
from .rem import check_seq_len
from .rem.rope import ROPE_BASE, rope_participation_ratio

__all__ = ["rope_softmax_attention_map"]


@reordered("(q, p, beta, sigma_v2=0.2, sigma_b2=4e-4, seq_len=None, head_dim=64, base=ROPE_BASE)")
def rope_softmax_attention_map(beta, *, q, p, sigma_v2=0.2, sigma_b2=4e-4, seq_len=None, head_dim=64,
                               base=ROPE_BASE):
    r"""Order parameters after one softmax self-attention layer with RoPE.

    .. math:: q_A = \sigma_v^2\big(p + (q - p)\,Y_2^{\rm rope}\big) + \sigma_b^2,\qquad
              p_A = \sigma_v^2\big(p + (q - p)\,C\big) + \sigma_b^2

    with ``Y2_rope = rope_participation_ratio(beta, q, p, seq_len, head_dim, base)`` and
    ``C = 0`` (``seq_len=None``) or ``1/T``. For ``p = 0`` this is
    :func:`~remprop.theory.softmax_attention_map`; for ``p > 0`` RoPE raises ``Y2``
    (the shared part of the scores no longer cancels), so the output cosine
    ``p_A / q_A`` is lower than without positions.

    Parameters
    ----------
    beta : array_like
        Per-head query/key scale, > 0. The arguments after it are keyword-only (the order was ``(q, p,
        beta, ...)`` before: an old positional call is a ``TypeError``).
    q, p : array_like
        Token order parameters (``p / q >= -1/(T - 1)``, ``>= 0`` as T -> inf).
    sigma_v2, sigma_b2 : array_like
        Value weight and bias variances.
    seq_len : int or None
    head_dim : int
        Head width ``d_H`` (even).
    base : float
        RoPE base.

    Returns
    -------
    (q_A, p_A) : tuple of ndarray or float

    References
    ----------
    docs/theory.md sections 3.4 and 15.

    Examples
    --------
    >>> qa, pa = rope_softmax_attention_map(2.0, q=1.0, p=0.5, seq_len=512, head_dim=128)
    >>> round(pa / qa, 3)
    0.734
    """
    q, p = check_overlap(q, p)
    seq_len = check_seq_len(seq_len)
    check_simplex_cosine("p / q", p / q, seq_len)
    y2 = np.asarray(rope_participation_ratio(beta, q, p, seq_len, head_dim, base))
    sigma_v2 = as_float_array("sigma_v2", sigma_v2, nonnegative=True)
    sigma_b2 = as_float_array("sigma_b2", sigma_b2, nonnegative=True)
    cross = 0.0 if seq_len is None else 1.0 / seq_len
    return output_pair(*softmax_attention_overlap_core(q, p, y2, cross, sigma_v2, sigma_b2))
