"""Real English text for the simulations: a deterministic word-level tokenizer.

The corpus is the standard library's pydoc topic texts (:mod:`pydoc_data.topics`,
shipped with every CPython), taken in sorted topic order. Text is lower-cased and split
into words, numbers and single punctuation marks; the vocabulary is ordered by
decreasing frequency, ties alphabetically, after two special ids (padding 0, unknown 1).
The same Python version therefore always gives the same ids (the topic texts change
between Python releases).
"""
from __future__ import annotations

import functools
import re
from collections import Counter
from typing import Iterable, Sequence

import numpy as np

__all__ = ["PAD_ID", "UNKNOWN_ID", "WordTokenizer", "TextCorpus", "pydoc_topic_texts", "pydoc_corpus"]

#: Id of the padding token.
PAD_ID = 0
#: Id of words outside the vocabulary.
UNKNOWN_ID = 1
_SPECIALS = ("<pad>", "<unk>")
_TOKEN = re.compile(r"[a-z]+|[0-9]+|[^\sa-z0-9]")


class WordTokenizer:
    """Lower-cased word/number/punctuation tokenizer with a fixed vocabulary.

    Parameters
    ----------
    vocabulary : sequence of str
        Words, in id order; ids 0 and 1 are reserved for padding and unknown words.
    """

    def __init__(self, vocabulary: Sequence[str]):
        words = list(vocabulary)
        if len(set(words)) != len(words):
            raise ValueError("vocabulary must not repeat words")
        if set(words) & set(_SPECIALS):
            raise ValueError(f"vocabulary must not contain the special tokens {_SPECIALS}")
        self.words = _SPECIALS + tuple(words)
        self._ids = {w: i for i, w in enumerate(self.words)}

    @staticmethod
    def split(text: str) -> list:
        """Lower-case ``text`` and cut it into words, numbers and punctuation marks."""
        if not isinstance(text, str):
            raise ValueError(f"text must be a string, got {type(text).__name__}")
        return _TOKEN.findall(text.lower())

    @classmethod
    def from_texts(cls, texts: Iterable[str], max_size: int | None = None) -> "WordTokenizer":
        """Vocabulary of ``texts`` by decreasing frequency (ties alphabetical), at most ``max_size`` words."""
        counts = Counter(w for text in texts for w in cls.split(text))
        ordered = sorted(counts, key=lambda w: (-counts[w], w))
        if max_size is not None:
            if isinstance(max_size, bool) or not isinstance(max_size, int) or max_size < 1:
                raise ValueError(f"max_size must be an integer >= 1, got {max_size!r}")
            ordered = ordered[:max_size]
        return cls(ordered)

    @property
    def vocab_size(self) -> int:
        """Number of ids, the special ones included."""
        return len(self.words)

    def encode(self, text: str) -> list:
        """Token ids of ``text`` (unknown words get :data:`UNKNOWN_ID`)."""
        return [self._ids.get(w, UNKNOWN_ID) for w in self.split(text)]

    def decode(self, ids: Iterable[int]) -> list:
        """Words of ``ids``."""
        return [self.words[int(i)] for i in ids]


def pydoc_topic_texts() -> tuple:
    """The pydoc topic texts of this Python, in sorted topic order."""
    from pydoc_data.topics import topics

    return tuple(topics[key] for key in sorted(topics))


class TextCorpus:
    """Token ids of a list of documents.

    Parameters
    ----------
    texts : sequence of str
        Documents.
    tokenizer : WordTokenizer, optional
        Default: the vocabulary of ``texts`` (:meth:`WordTokenizer.from_texts`).
    """

    def __init__(self, texts: Sequence[str], tokenizer: WordTokenizer | None = None):
        texts = list(texts)
        if not texts:
            raise ValueError("texts must hold at least one document")
        self.tokenizer = tokenizer if tokenizer is not None else WordTokenizer.from_texts(texts)
        self.documents = [np.asarray(self.tokenizer.encode(t), dtype=np.int64) for t in texts]
        self.stream = np.concatenate(self.documents)

    def windows(self, count: int, length: int) -> np.ndarray:
        """``count`` full windows of ``length`` consecutive tokens, spread evenly over the corpus.

        Window k starts at ``k * (N - length) // (count - 1)`` of the N-token stream
        (documents back to back), so the windows cover the corpus from first to last
        topic. Returns an int64 array ``(count, length)`` without padding.
        """
        count, length = _positive("count", count), _positive("length", length)
        n = self.stream.size
        if length > n:
            raise ValueError(f"length must be <= the corpus size {n}, got {length}")
        starts = [k * (n - length) // max(count - 1, 1) for k in range(count)]
        return np.stack([self.stream[s:s + length] for s in starts])

    def padded_documents(self, count: int, length: int):
        """The first ``count`` documents, cut or padded to ``length`` tokens.

        Returns
        -------
        (ids, mask) : int64 array (count, length), bool array (count, length)
            Padding has id :data:`PAD_ID` and mask False.
        """
        count, length = _positive("count", count), _positive("length", length)
        if count > len(self.documents):
            raise ValueError(f"count must be <= the number of documents {len(self.documents)}, got {count}")
        ids = np.full((count, length), PAD_ID, dtype=np.int64)
        mask = np.zeros((count, length), dtype=bool)
        for k, doc in enumerate(self.documents[:count]):
            n = min(length, doc.size)
            ids[k, :n] = doc[:n]
            mask[k, :n] = True
        return ids, mask


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return int(value)


@functools.lru_cache(maxsize=1)
def pydoc_corpus() -> TextCorpus:
    """The pydoc topic corpus with its own vocabulary (built once per process)."""
    return TextCorpus(pydoc_topic_texts())
