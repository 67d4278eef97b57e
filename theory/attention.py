"""The attention maps: order parameters after softmax or gain-controlled self-attention.

A row of the attention matrix at initialisation is a Random Energy Model (REM) with T
states; its participation ratio ``Y2`` (:mod:`remprop.theory.rem`) is all the maps need
(docs/theory.md section 3): values mix the tokens with the row weights, so the output
norm is ``p + (q - p) Y2`` and the output overlap ``p + (q - p) C``, C the cross-overlap
of two rows.

Reference: A. Giorlandino & S. Goldt, "Two failure modes of deep transformers and how
to avoid them" (arXiv 2505.24333), Result 1.

The ``*_core`` functions hold each formula once. They use NumPy ufuncs only, so the
same source broadcasts over arrays and compiles with numba for the depth kernels.
"""
from __future__ import annotations

import numpy as np
from numba.extending import register_jitable

from .checks import as_float_array, check_overlap, check_simplex_cosine, output_pair
from .rem import check_seq_len, cross_overlap, participation_ratio

__all__ = [
    "softmax_attention_map",
    "gain_controlled_attention_map",
    "softmax_attention_core",
    "softmax_attention_overlap_core",
    "gain_controlled_attention_core",
]


@register_jitable
def softmax_attention_core(q, p, y2, sigma_v2, sigma_b2):
    """(q_A, p_A) of softmax attention with values, given the participation ratio y2."""
    q_out = sigma_v2 * (p + (q - p) * y2) + sigma_b2
    p_out = sigma_v2 * p + sigma_b2
    return q_out, p_out


@register_jitable
def softmax_attention_overlap_core(q, p, y2, cross, sigma_v2, sigma_b2):
    """(q_A, p_A) given Y2 and the cross-overlap of two rows ``cross = <sum_j a_ij a_kj>``.

    ``o_i . o_k / d = sigma_v2 (p + (q - p) sum_j a_ij a_kj) + sigma_b2`` (rows sum to 1).
    ``cross``: :func:`~remprop.theory.rem.cross_overlap` (exact at finite T), or in
    jitted code :func:`~remprop.theory.rem.cross_overlap_core` on its table; 0 as
    T -> infinity (docs/theory.md section 3).
    """
    q_out = sigma_v2 * (p + (q - p) * y2) + sigma_b2
    p_out = sigma_v2 * (p + (q - p) * cross) + sigma_b2
    return q_out, p_out


@register_jitable
def gain_controlled_attention_core(q, p, y2_centred, sigma_v2, sigma_b2):
    """(q_A, p_A) of attention with the sequence mean removed; y2_centred = Y2 - 1/T."""
    q_out = sigma_v2 * (q - p) * y2_centred + sigma_b2
    p_out = sigma_b2 + 0.0 * q
    return q_out, p_out


def softmax_attention_map(q, p, beta, sigma_v2=0.2, sigma_b2=4e-4, seq_len=None):
    r"""Order parameters after one softmax self-attention layer.

    .. math::
        q_A = \sigma_v^2\,(p + (q - p)\,Y_2) + \sigma_b^2, \qquad
        p_A = \sigma_v^2\,(p + (q - p)\,C) + \sigma_b^2

    with ``Y2 = participation_ratio(beta, q, p, seq_len)`` and the cross-overlap of two
    rows ``C = <sum_j a_ij a_kj>``: ``C = 0`` as T -> infinity (``seq_len=None``); at
    finite T the exact :func:`~remprop.theory.rem.cross_overlap` of two rows whose
    energies are correlated by the token cosine ``rho = p / q`` (docs/theory.md
    section 3.4: from ``1/T`` at ``rho = 0`` to ``Y2`` at ``rho = 1``; ``6.3/T`` at
    T = 512, beta = 1.2, rho = 0.5), read from its table (within ``2e-3 (Y2 - 1/T)``;
    built once per T, seconds). Values ``W_V ~ N(0, sigma_v2/d)``, value bias
    ``N(0, sigma_b2)``, no output projection.

    Domain: the inputs are the order parameters of T tokens, whose mean cosine obeys
    ``p / q >= -1/(T - 1)``: ``p >= 0`` for ``seq_len=None`` (otherwise ``q_A`` could be
    negative) and ``p >= -q/(T - 1)`` at finite T; other ``p`` raise ``ValueError``.

    Returns
    -------
    (q_A, p_A) : tuple of ndarray
        Broadcast to the common shape of all inputs.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Result 1.
    """
    q, p, y2, seq_len, sigma_v2, sigma_b2 = _map_inputs(q, p, beta, sigma_v2, sigma_b2, seq_len)
    cross = 0.0 if seq_len is None else np.asarray(cross_overlap(beta, q, p, seq_len, method="table"))
    return output_pair(*softmax_attention_overlap_core(q, p, y2, cross, sigma_v2, sigma_b2))


def gain_controlled_attention_map(q, p, beta, sigma_v2=0.2, sigma_b2=4e-4, seq_len=None):
    r"""Order parameters after gain-controlled attention (sequence mean removed).

    .. math::
        q_A = \sigma_v^2\,(q - p)\,Y_2 + \sigma_b^2, \qquad p_A = \sigma_b^2

    (T -> infinity, ``seq_len=None``; at finite ``T = seq_len``, ``Y2`` becomes the exact
    ``Y2 - 1/T``). In the spread phase the output is the bias alone at T -> infinity: the
    centring removes the collapsed common direction; at finite T it is small but not zero.

    Domain: as :func:`softmax_attention_map` (``p >= 0`` for ``seq_len=None``,
    ``p >= -q/(T - 1)`` at finite T).

    Returns
    -------
    (q_A, p_A) : tuple of ndarray
        As :func:`softmax_attention_map`.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Sec. on gain-controlled attention.
    """
    q, p, y2, seq_len, sigma_v2, sigma_b2 = _map_inputs(q, p, beta, sigma_v2, sigma_b2, seq_len)
    if seq_len is not None:
        y2 = y2 - 1.0 / seq_len
    return output_pair(*gain_controlled_attention_core(q, p, y2, sigma_v2, sigma_b2))


def _map_inputs(q, p, beta, sigma_v2, sigma_b2, seq_len):
    """Checked inputs of a map and the row's Y2.

    (q, p) are the order parameters of T tokens: ``|p| <= q`` and ``p / q >= -1/(T - 1)``
    (``>= 0`` as T -> inf).
    """
    q, p = check_overlap(q, p)
    seq_len = check_seq_len(seq_len)
    check_simplex_cosine("p / q", p / q, seq_len)
    y2 = np.asarray(participation_ratio(beta, q, p, seq_len))
    sigma_v2 = as_float_array("sigma_v2", sigma_v2, nonnegative=True)
    sigma_b2 = as_float_array("sigma_b2", sigma_b2, nonnegative=True)
    return q, p, y2, seq_len, sigma_v2, sigma_b2
