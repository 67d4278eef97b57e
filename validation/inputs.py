"""Input sequences for the simulations: synthetic Gaussian tokens and embedded real text.

* :func:`gaussian_tokens`: T tokens whose sample order parameters equal the prescribed
  ``q0`` and ``p0 = q0 rho0`` exactly (see the construction there).
* :func:`text_tokens`: windows (or padded documents) of the pydoc corpus
  (:mod:`remprop.validation.text`), embedded through random word and position tables
  ``N(0, 0.1^2)`` as in the reference experiments: ``x_t = E_word[id_t] + E_pos[t]``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from remprop.theory.checks import as_float_array
from remprop.theory.rem.checks import check_seq_len

from .backend import STREAM_EMBEDDINGS, STREAM_TOKENS, check_positive_int, generator, resolve_device, resolve_dtype
from .text import TextCorpus, pydoc_corpus

__all__ = ["TokenBatch", "INPUT_KINDS", "gaussian_tokens", "embedding_tables", "text_tokens", "input_batches"]


@dataclass(frozen=True)
class TokenBatch:
    """A batch of sequences.

    Attributes
    ----------
    tokens : Tensor, shape (batch, T, d)
    mask : Tensor of bool, shape (batch, T), or None
        True for real tokens; None when nothing is padded.
    """

    tokens: torch.Tensor
    mask: torch.Tensor | None = None

    def __len__(self):
        return self.tokens.shape[0]


def gaussian_tokens(q0=1.0, rho0=0.0, *, count=1, seq_len=512, width=720, seed=0, index=0,
                    dtype="float32", device=None) -> TokenBatch:
    r"""Gaussian token sequences with sample order parameters exactly ``(q0, q0 rho0)``.

    Each sequence is ``x_i = a c + b z_i`` with a random direction ``c`` (``|c|^2 = d``)
    and Gaussian vectors ``z_i`` projected orthogonal to ``c``, centred over the tokens
    (``sum_i z_i = 0``) and scaled to ``sum_i |z_i|^2 = T d``. Then

    .. math:: q = a^2 + b^2,\qquad p = a^2 - \frac{b^2}{T - 1},

    so ``b^2 = q0 (1 - rho0) (T - 1) / T`` and ``a^2 = q0 - b^2`` give ``q = q0`` and
    ``p = q0 rho0`` to rounding. The mean pairwise cosine is ``rho0`` up to
    O(1/sqrt(d)) fluctuations of the individual norms.

    Parameters
    ----------
    q0 : float
        Mean squared norm per coordinate, > 0.
    rho0 : float
        Mean overlap over q0, in ``[-1/(T-1), 1]``.
    count, seq_len, width : int
        Batch size, tokens T >= 2, width d >= 2.
    seed, index : int
        Random stream ``(seed, tokens, index)``.
    dtype, device
        As :class:`~remprop.validation.simulator.SimulatedStack`.

    Returns
    -------
    TokenBatch
        No padding (``mask`` None).
    """
    q0 = float(as_float_array("q0", q0, positive=True))
    count = check_positive_int("count", count)
    seq_len = check_seq_len(seq_len, allow_none=False)
    width = check_positive_int("width", width, 2)
    rho0 = float(as_float_array("rho0", rho0, low=-1.0 / (seq_len - 1), high=1.0))
    dtype, device = resolve_dtype(dtype), resolve_device(device)
    gen = generator(seed, STREAM_TOKENS, check_positive_int("index", index, 0), device)
    c = torch.randn(count, 1, width, generator=gen, dtype=torch.float64, device=device)
    z = torch.randn(count, seq_len, width, generator=gen, dtype=torch.float64, device=device)
    c = c * (math.sqrt(width) / c.norm(dim=-1, keepdim=True))
    z = z - (z * c).sum(-1, keepdim=True) * c / width            # orthogonal to c
    z = z - z.mean(dim=1, keepdim=True)                          # centred over tokens
    z = z * torch.sqrt(seq_len * width / (z * z).sum(dim=(1, 2), keepdim=True))
    b2 = q0 * (1.0 - rho0) * (seq_len - 1) / seq_len
    a2 = max(q0 - b2, 0.0)
    x = math.sqrt(a2) * c + math.sqrt(b2) * z
    return TokenBatch(x.to(dtype))


def embedding_tables(vocab_size, seq_len, width, *, seed=0, std=0.1, dtype="float32", device=None):
    """Word ``(vocab_size, d)`` and position ``(T, d)`` tables with i.i.d. ``N(0, std^2)`` entries.

    Drawn from stream ``(seed, embeddings, 0)``, word table first.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (embeddings of the reference experiments, std 0.1).
    """
    vocab_size = check_positive_int("vocab_size", vocab_size)
    seq_len = check_positive_int("seq_len", seq_len)
    width = check_positive_int("width", width)
    std = float(as_float_array("std", std, nonnegative=True))
    dtype, device = resolve_dtype(dtype), resolve_device(device)
    gen = generator(seed, STREAM_EMBEDDINGS, 0, device)
    word = torch.randn(vocab_size, width, generator=gen, dtype=dtype, device=device).mul_(std)
    position = torch.randn(seq_len, width, generator=gen, dtype=dtype, device=device).mul_(std)
    return word, position


def text_tokens(count=1, *, seq_len=512, width=720, seed=0, corpus: TextCorpus | None = None, padded=False,
                std=0.1, dtype="float32", device=None) -> TokenBatch:
    """Embedded real-text sequences.

    Parameters
    ----------
    count : int
        Number of sequences.
    seq_len, width : int
        Tokens per sequence T and width d.
    seed : int
        Seed of the embedding tables (the text is the same for every seed).
    corpus : TextCorpus, optional
        Default: :func:`~remprop.validation.text.pydoc_corpus`.
    padded : bool
        False: ``count`` full windows spread over the corpus (no padding). True: the
        first ``count`` documents cut or padded to T tokens, with their mask.
    std : float
        Standard deviation of the embedding entries.
    dtype, device
        As :func:`gaussian_tokens`.

    Returns
    -------
    TokenBatch
    """
    corpus = pydoc_corpus() if corpus is None else corpus
    count = check_positive_int("count", count)
    seq_len = check_seq_len(seq_len, allow_none=False)
    device = resolve_device(device)
    if padded:
        ids, mask = corpus.padded_documents(count, seq_len)
    else:
        ids, mask = corpus.windows(count, seq_len), None
    word, position = embedding_tables(corpus.tokenizer.vocab_size, seq_len, width, seed=seed, std=std,
                                      dtype=dtype, device=device)
    x = word[torch.as_tensor(ids, device=device)] + position
    return TokenBatch(x, None if mask is None else torch.as_tensor(mask, device=device))


#: Input kinds of :func:`input_batches`.
INPUT_KINDS = ("text", "synthetic")


def input_batches(inputs="text", *, seed=0, sequences=1, batch_size=None, seq_len=512, width=720, q0=1.0,
                  rho0=0.0, dtype="float32", device=None):
    """The ``sequences`` input sequences of one seed, in batches of at most ``batch_size``.

    Sequence k is the same whatever the batching: for ``"text"`` the k-th corpus window
    (the same text for every seed, embedded through the tables of ``seed``), for
    ``"synthetic"`` :func:`gaussian_tokens` from stream ``(seed, tokens, k)`` with the
    prescribed ``q0`` and ``rho0`` (ignored for text).

    Yields
    ------
    TokenBatch
    """
    if inputs not in INPUT_KINDS:
        raise ValueError(f"inputs must be one of {', '.join(map(repr, INPUT_KINDS))}, got {inputs!r}")
    sequences = check_positive_int("sequences", sequences)
    batch_size = sequences if batch_size is None else check_positive_int("batch_size", batch_size)
    device = resolve_device(device)
    if inputs == "text":
        corpus = pydoc_corpus()
        ids = torch.as_tensor(corpus.windows(sequences, check_seq_len(seq_len, allow_none=False)), device=device)
        word, position = embedding_tables(corpus.tokenizer.vocab_size, seq_len, width, seed=seed,
                                          dtype=dtype, device=device)
    for start in range(0, sequences, batch_size):
        stop = min(sequences, start + batch_size)
        if inputs == "text":
            yield TokenBatch(word[ids[start:stop]] + position)
        else:
            yield TokenBatch(torch.cat([
                gaussian_tokens(q0, rho0, count=1, seq_len=seq_len, width=width, seed=seed, index=k,
                                dtype=dtype, device=device).tokens for k in range(start, stop)]))
