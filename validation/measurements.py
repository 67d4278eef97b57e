"""What the theory predicts, measured on simulated hidden states and attention matrices.

Token statistics of one sequence of n real tokens ``x_1..x_n`` in R^d (padding excluded)
are read off the Gram matrix ``G_ij = x_i . x_j / d``:

* ``q = (1/n) sum_i G_ii``                         (mean squared norm per coordinate)
* ``p = (1/(n(n-1))) sum_{i != j} G_ij``           (mean overlap)
* ``rho = p / q``                                   (the theory's cosine)
* ``cosine = (1/(n(n-1))) sum_{i != j} G_ij / sqrt(G_ii G_jj)`` (mean pairwise cosine)

The off-diagonal sum is ``|sum_i x_i|^2 / d - sum_i G_ii``, so no T x T matrix is formed
(O(n d) work instead of O(n^2 d)); sums run in float64.

Attention statistics, averaged over heads and real query tokens: the participation ratio
``Y2 = sum_j a_ij^2`` of a row and its entropy ``-sum_j a_ij log a_ij``.

Reference: Giorlandino & Goldt, arXiv 2505.24333 (order parameters, Result 1).
"""
from __future__ import annotations

import torch

__all__ = ["TOKEN_STATISTICS", "ATTENTION_STATISTICS", "token_statistics", "attention_statistics",
           "window_statistics", "last_tokens_statistics"]

#: Names of the per-sequence token statistics.
TOKEN_STATISTICS = ("q", "p", "rho", "cosine")
#: Names of the per-sequence attention statistics.
ATTENTION_STATISTICS = ("y2", "entropy")


def _mask_and_count(x, mask):
    if mask is None:
        return None, torch.full(x.shape[:1], x.shape[1], dtype=torch.float64, device=x.device)
    if mask.shape != x.shape[:2] or mask.dtype != torch.bool:
        raise ValueError(f"mask must be a bool tensor of shape {tuple(x.shape[:2])}, "
                         f"got {mask.dtype} {tuple(mask.shape)}")
    mask = mask.to(x.device)
    counts = mask.sum(dim=1).to(torch.float64)
    if bool((counts < 2).any()):
        raise ValueError("mask must leave at least 2 real tokens in every sequence")
    return mask.to(torch.float64)[..., None], counts


def token_statistics(x: torch.Tensor, mask: torch.Tensor | None = None) -> dict:
    r"""Order parameters of each sequence of a batch.

    .. math::
        q = \frac{1}{n d}\sum_i |x_i|^2,\quad
        p = \frac{|\sum_i x_i|^2 - \sum_i |x_i|^2}{n (n - 1) d},\quad
        \rho = p / q,\quad
        \overline{\cos} = \frac{|\sum_i \hat x_i|^2 - n}{n (n - 1)}

    Parameters
    ----------
    x : Tensor, shape (batch, T, d)
        Hidden states.
    mask : Tensor of bool, shape (batch, T), optional
        True for real tokens; padded tokens enter no statistic.

    Returns
    -------
    dict of str -> Tensor of shape (batch,), float64
        ``q``, ``p``, ``rho``, ``cosine``.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, order parameters q, p and rho = p/q.
    """
    if x.ndim != 3:
        raise ValueError(f"x must have shape (batch, T, d), got {tuple(x.shape)}")
    x = x.to(torch.float64)
    m, n = _mask_and_count(x, mask)
    if m is not None:
        x = x * m
    d = x.shape[-1]
    sq_norms = (x * x).sum(dim=-1)                      # (batch, T), 0 on padding
    total = sq_norms.sum(dim=1)
    q = total / (n * d)
    p = ((x.sum(dim=1) ** 2).sum(dim=-1) - total) / (n * (n - 1) * d)
    unit = x / sq_norms.clamp_min(torch.finfo(torch.float64).tiny).sqrt()[..., None]
    cosine = ((unit.sum(dim=1) ** 2).sum(dim=-1) - n) / (n * (n - 1))
    return {"q": q, "p": p, "rho": p / q, "cosine": cosine}


def attention_statistics(probs: torch.Tensor, mask: torch.Tensor | None = None) -> dict:
    r"""Participation ratio and entropy of attention rows, per sequence.

    .. math:: Y_2 = \Big\langle \sum_j a_{ij}^2 \Big\rangle,\qquad
              H = \Big\langle -\sum_j a_{ij} \log a_{ij} \Big\rangle

    averaged over heads and real query tokens i.

    Parameters
    ----------
    probs : Tensor, shape (batch, heads, T, T)
        Attention matrices (rows sum to 1).
    mask : Tensor of bool, shape (batch, T), optional
        True for real tokens; rows of padded queries are left out.

    Returns
    -------
    dict of str -> Tensor of shape (batch,), float64
        ``y2``, ``entropy``.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (REM participation ratio); Derrida 1981.
    """
    if probs.ndim != 4:
        raise ValueError(f"probs must have shape (batch, heads, T, T), got {tuple(probs.shape)}")
    y2_rows = (probs * probs).sum(dim=-1, dtype=torch.float64).mean(dim=1)        # (batch, T)
    entropy_rows = -torch.special.xlogy(probs, probs).sum(dim=-1, dtype=torch.float64).mean(dim=1)
    m, n = _mask_and_count(probs[:, 0], mask)
    if m is not None:
        m = m[..., 0]
        y2_rows, entropy_rows = y2_rows * m, entropy_rows * m
    return {"y2": y2_rows.sum(dim=1) / n, "entropy": entropy_rows.sum(dim=1) / n}


def window_statistics(x: torch.Tensor, start: int, stop: int, mask: torch.Tensor | None = None) -> dict:
    r"""Token statistics (q, p, rho, cosine) of the tokens at positions ``start <= t < stop`` (0-based).

    :func:`token_statistics` of ``x[:, start:stop]``: the pairs are those inside the
    window (for causal stacks, where the statistics depend on the position).

    Parameters
    ----------
    x : Tensor, shape (batch, T, d)
    start, stop : int
        Window ``[start, stop)``, at least two positions.
    mask : Tensor of bool, shape (batch, T), optional

    Returns
    -------
    dict of str -> Tensor of shape (batch,)

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 12.
    """
    if x.ndim != 3:
        raise ValueError(f"x must have shape (batch, T, d), got {tuple(x.shape)}")
    seq = x.shape[1]
    if not (isinstance(start, int) and isinstance(stop, int)) or not 0 <= start < stop <= seq or stop - start < 2:
        raise ValueError(f"window must satisfy 0 <= start < stop <= {seq} with at least 2 tokens, "
                         f"got start={start!r}, stop={stop!r}")
    return token_statistics(x[:, start:stop], None if mask is None else mask[:, start:stop])


def last_tokens_statistics(x: torch.Tensor, last: int, mask: torch.Tensor | None = None) -> dict:
    r"""Token statistics of the last ``last`` tokens of each sequence (causal stacks, Fig. 12).

    ``window_statistics(x, T - last, T)``; ``last`` >= 2.
    """
    if x.ndim != 3:
        raise ValueError(f"x must have shape (batch, T, d), got {tuple(x.shape)}")
    if isinstance(last, bool) or not isinstance(last, int) or not 2 <= last <= x.shape[1]:
        raise ValueError(f"last must be an integer in [2, {x.shape[1]}], got {last!r}")
    return window_statistics(x, x.shape[1] - last, x.shape[1], mask)
