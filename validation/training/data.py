"""Masked-language-model data from real text installed with Python: corpus, tokenizer, batches.

* **Corpus.** The standard library's pydoc topic texts
  (:func:`remprop.validation.text.pydoc_topic_texts`, one document per topic, sorted),
  split by document: every :data:`HELD_OUT_EVERY`-th document (0-based index
  ``k % HELD_OUT_EVERY == HELD_OUT_EVERY - 1``) is held out for the test loss, the
  others train. Nothing is downloaded; the texts change only between Python releases
  (the Python version is recorded in ``MaskedLMCorpus.description``).
* **Tokenizer.** A Hugging Face ``tokenizers`` byte-pair-encoding model (BERT normaliser
  and pre-tokeniser, lower case) trained on the *training* documents only, ``vocab_size``
  ids of which the first five are ``[PAD] [UNK] [CLS] [SEP] [MASK]``. BPE, not WordPiece:
  the WordPiece trainer of ``tokenizers`` 0.23 breaks ties in a different order on every
  run, the BPE trainer gives the same file every time. It is cached as
  JSON under ``tokenizers/`` in remprop's cache folder (``$REMPROP_CACHE_DIR``, default ``~/.cache/remprop``),
  keyed by the SHA-256 of the training texts and the settings, and written atomically
  (:func:`~remprop.validation.experiments.cell_store.atomic_write_json`), so two processes never read half a file.
* **Batches.** Documents are encoded and joined with ``[SEP]`` into one stream per
  split; a batch is ``batch_size`` windows of ``seq_len`` consecutive tokens. Training
  windows start at random offsets drawn from ``numpy.random.default_rng([seed, step])``,
  so batch ``step`` of seed ``seed`` is the same in a fresh and in a resumed run. The
  held-out batches are fixed windows spread evenly over the held-out stream with a fixed
  masking (:data:`EVAL_MASK_SEED`), the same for every seed and configuration of one
  ``seq_len``.
* **Masking** (BERT, Devlin et al. 2019): each token is selected with probability
  ``mask_prob`` (at least one per sequence); a selected token becomes ``[MASK]`` with
  probability 0.8, a uniformly random non-special token with 0.1, and stays with 0.1.
  The loss is the cross-entropy of the original token at the selected positions.
"""
from __future__ import annotations

import functools
import hashlib
import json
import platform
import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from remprop.cache import cache_directory

from ..experiments.cell_store import atomic_write_json
from ..text import pydoc_topic_texts

__all__ = ["SPECIAL_TOKENS", "PAD_ID", "MASK_ID", "HELD_OUT_EVERY", "EVAL_MASK_SEED", "MaskedBatch",
           "MaskedLMCorpus", "masked_lm_corpus", "tokenizer_cache_dir", "mask_tokens"]

#: Special tokens, in id order.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
PAD_ID, UNK_ID, CLS_ID, SEP_ID, MASK_ID = range(len(SPECIAL_TOKENS))
#: Every HELD_OUT_EVERY-th document is held out.
HELD_OUT_EVERY = 8
#: Seed of the held-out batches' masking (fixed: every run is tested on the same tokens).
EVAL_MASK_SEED = 20250531
#: Version of the tokenizer recipe, part of the cache key.
_RECIPE = "bpe-bert-lower-v1"
#: Largest vocabulary the BPE trainer is asked for (the pydoc topics give a few thousand
#: tokens at most; a larger request is refused once the trainer stops short of it).
_TRAINER_VOCAB_LIMIT = 2 ** 16


@dataclass(frozen=True)
class MaskedBatch:
    """One masked-LM batch (NumPy, int64).

    Attributes
    ----------
    inputs : ndarray (batch, seq_len)
        Token ids after masking.
    positions : ndarray (n, 2)
        ``(sequence, position)`` of each selected token.
    targets : ndarray (n,)
        The original ids at ``positions``.
    """

    inputs: np.ndarray
    positions: np.ndarray
    targets: np.ndarray


def tokenizer_cache_dir() -> Path:
    """``tokenizers/`` in remprop's cache folder (:func:`remprop.cache.cache_directory`:
    ``$REMPROP_CACHE_DIR``, else the user cache, ``~/.cache/remprop`` on Linux)."""
    return cache_directory() / "tokenizers"


def _train_tokenizer(texts, vocab_size):
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False)
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def load_tokenizer(texts, vocab_size):
    """The BPE tokenizer of ``texts`` (trained once, then read from the cache)."""
    from tokenizers import Tokenizer

    digest = hashlib.sha256()
    for text in (_RECIPE, str(vocab_size), *texts):
        digest.update(text.encode("utf-8"))
        digest.update(b"\0")
    path = tokenizer_cache_dir() / f"{digest.hexdigest()[:24]}.json"
    if path.exists():
        try:
            return Tokenizer.from_file(str(path)), path
        except Exception:  # noqa: BLE001 - a damaged cache entry is retrained and replaced
            pass
    tokenizer = _train_tokenizer(texts, vocab_size)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, json.loads(tokenizer.to_str()))
    except OSError as err:  # a cache folder that is a file or read-only: kept in memory only
        warnings.warn(f"cannot keep the tokenizer in {str(path.parent)!r} ({err.strerror or type(err).__name__}; "
                      "REMPROP_CACHE_DIR names the cache folder): it is trained again by the next run",
                      RuntimeWarning, stacklevel=2)
    return tokenizer, path


def mask_tokens(ids: np.ndarray, mask_prob: float, vocab_size: int, rng: np.random.Generator) -> MaskedBatch:
    """BERT masking of a batch of token ids (see the module docstring).

    Parameters
    ----------
    ids : int array (batch, seq_len)
    mask_prob : float in (0, 1)
    vocab_size : int
    rng : numpy.random.Generator
    """
    ids = np.asarray(ids, dtype=np.int64)
    special = ids < len(SPECIAL_TOKENS)
    selected = (rng.random(ids.shape) < mask_prob) & ~special
    for row in np.flatnonzero(~selected.any(axis=1)):  # at least one target per sequence
        candidates = np.flatnonzero(~special[row])
        if candidates.size:
            selected[row, rng.choice(candidates)] = True
    action = rng.random(ids.shape)
    random_ids = rng.integers(len(SPECIAL_TOKENS), vocab_size, size=ids.shape)
    inputs = ids.copy()
    inputs[selected & (action < 0.8)] = MASK_ID
    swap = selected & (action >= 0.8) & (action < 0.9)
    inputs[swap] = random_ids[swap]
    positions = np.argwhere(selected)
    return MaskedBatch(inputs=inputs, positions=positions, targets=ids[selected])


class MaskedLMCorpus:
    """The train / held-out token streams of the pydoc topics and their tokenizer.

    Parameters
    ----------
    vocab_size : int
        Size of the BPE vocabulary, special tokens included (>= 64). More than the corpus
        yields is a ``ValueError`` naming the largest size (the real size is never less
        than the size asked for).

    Attributes
    ----------
    train_ids, test_ids : ndarray of int64
        The two token streams (documents joined by ``[SEP]``).
    unigram : ndarray (vocab_size,)
        Add-one smoothed frequencies of the training stream's non-special tokens (0 on
        the special ids): the "learned nothing but frequencies" predictor.
    description : dict
        Corpus, Python version, document and token counts, tokenizer file.
    """

    def __init__(self, vocab_size: int = 4096):
        texts = pydoc_topic_texts()
        train = [t for k, t in enumerate(texts) if k % HELD_OUT_EVERY != HELD_OUT_EVERY - 1]
        test = [t for k, t in enumerate(texts) if k % HELD_OUT_EVERY == HELD_OUT_EVERY - 1]
        self.tokenizer, path = load_tokenizer(train, min(vocab_size, _TRAINER_VOCAB_LIMIT))
        self.vocab_size = self.tokenizer.get_vocab_size()
        if self.vocab_size < vocab_size:
            raise ValueError(f"vocab_size must be <= {self.vocab_size}, the most BPE tokens the training split of "
                             f"the pydoc topics yields (Python {platform.python_version()}), got {vocab_size}")
        self.train_ids = self._stream(train)
        self.test_ids = self._stream(test)
        counts = np.bincount(self.train_ids, minlength=self.vocab_size).astype(np.float64)
        counts[:len(SPECIAL_TOKENS)] = 0.0
        counts[len(SPECIAL_TOKENS):] += 1.0
        self.unigram = counts / counts.sum()
        self.description = {"corpus": "pydoc topics (pydoc_data.topics)", "python": platform.python_version(),
                            "train_documents": len(train), "test_documents": len(test),
                            "train_tokens": int(self.train_ids.size), "test_tokens": int(self.test_ids.size),
                            "vocab_size": int(self.vocab_size), "tokenizer": _RECIPE, "tokenizer_file": str(path)}

    def _stream(self, texts):
        pieces = []
        for encoding in self.tokenizer.encode_batch(list(texts)):
            pieces.append(np.asarray(encoding.ids, dtype=np.int64))
            pieces.append(np.array([SEP_ID], dtype=np.int64))
        return np.concatenate(pieces)

    def check_seq_len(self, seq_len):
        """``ValueError`` naming ``seq_len`` unless windows of ``seq_len`` tokens fit both streams."""
        self._check_length(seq_len, self.train_ids, "training")
        self._check_length(seq_len, self.test_ids, "held-out")

    def _check_length(self, seq_len, stream, name):
        if seq_len > stream.size:
            raise ValueError(f"seq_len must be <= the {name} stream's {stream.size} tokens, got {seq_len}")

    def train_batch(self, *, seed, step, batch_size, seq_len, mask_prob) -> MaskedBatch:
        """Training batch ``step`` of ``seed``: random windows, BERT masking, from ``rng([seed, step])``."""
        self._check_length(seq_len, self.train_ids, "training")
        rng = np.random.default_rng([int(seed), int(step)])
        starts = rng.integers(0, self.train_ids.size - seq_len + 1, size=batch_size)
        ids = np.stack([self.train_ids[s:s + seq_len] for s in starts])
        return mask_tokens(ids, mask_prob, self.vocab_size, rng)

    def test_batches(self, *, count, batch_size, seq_len, mask_prob) -> list:
        """``count`` fixed held-out batches: windows spread evenly, masking seeded by :data:`EVAL_MASK_SEED`."""
        self._check_length(seq_len, self.test_ids, "held-out")
        total = count * batch_size
        last = self.test_ids.size - seq_len
        starts = [k * last // max(total - 1, 1) for k in range(total)]
        rng = np.random.default_rng([EVAL_MASK_SEED, int(seq_len)])
        batches = []
        for b in range(count):
            ids = np.stack([self.test_ids[s:s + seq_len] for s in starts[b * batch_size:(b + 1) * batch_size]])
            batches.append(mask_tokens(ids, mask_prob, self.vocab_size, rng))
        return batches

    def unigram_loss(self, batches) -> float:
        """Mean cross-entropy (nats) of the batches' targets under ``unigram``."""
        targets = np.concatenate([b.targets for b in batches])
        return float(-np.log(self.unigram[targets]).mean())


@functools.lru_cache(maxsize=4)
def masked_lm_corpus(vocab_size: int = 4096) -> MaskedLMCorpus:
    """The :class:`MaskedLMCorpus` of ``vocab_size`` (built once per process)."""
    if isinstance(vocab_size, bool) or not isinstance(vocab_size, (int, np.integer)) or vocab_size < 64:
        raise ValueError(f"vocab_size must be an integer >= 64, got {vocab_size!r}")
    return MaskedLMCorpus(int(vocab_size))
