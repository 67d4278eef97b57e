"""The outcome of one training run, as arrays and as strict JSON."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from remprop._json import to_jsonable

from ..experiments.cell_store import atomic_write_json
from .config import TrainConfig

__all__ = ["TrainResult", "PROBE_FIELDS"]

#: The per-layer measurements of ``TrainResult.init`` and ``TrainResult.final``.
PROBE_FIELDS = ("qk_grad_norm", "attention_entropy", "token_cosine")


def _arrays(probes: dict) -> dict:
    return {name: np.asarray(probes[name], dtype=float) for name in PROBE_FIELDS}


@dataclass(frozen=True)
class TrainResult:
    r"""Loss curves and per-layer measurements of a masked-LM training run.

    Attributes
    ----------
    config : TrainConfig
    eval_steps : ndarray of int
        Steps of the test loss: 0 (at initialisation), every ``eval_every``, and the last.
    train_loss : ndarray, shape (steps,)
        Training loss (nats per masked token) of steps 1..steps, before each update.
    test_loss : ndarray, shape (len(eval_steps),)
        Mean cross-entropy of the masked tokens of the held-out batches.
    unigram_loss : float
        The same cross-entropy under the training split's add-one smoothed unigram
        frequencies: what a model that learned nothing but frequencies reaches.
    init, final : dict of str -> ndarray
        Measured on the held-out batches at step 0 and at the end:
        ``qk_grad_norm`` (depth,) the norm ``sqrt(|dL/dW_Q|^2 + |dL/dW_K|^2)`` of block l's
        query/key weights; ``attention_entropy`` (depth,) the mean row entropy
        ``-sum_j a_ij log a_ij`` of block l's attention; ``token_cosine`` (depth + 1,) the
        mean pairwise token cosine of the residual stream, entry 0 the embedded input,
        entry l the output of block l (:mod:`remprop.validation.measurements`).
    corpus : dict
        The corpus and tokenizer (Python version, documents, tokens).
    run : dict
        Device, precision, seconds, training tokens per second.
    diverged : dict or None
        None for a run that finished; for a run whose numbers stopped being finite,
        ``{"step": s, "reason": "..."}``: it stopped at step ``s`` (0: at
        initialisation), its curves end there and its final measurements are NaN.
    """

    config: TrainConfig
    eval_steps: np.ndarray
    train_loss: np.ndarray
    test_loss: np.ndarray
    unigram_loss: float
    init: dict
    final: dict
    corpus: dict = field(default_factory=dict)
    run: dict = field(default_factory=dict)
    diverged: dict | None = None

    @property
    def final_test_loss(self) -> float:
        """The test loss after the last step (NaN for a diverged run)."""
        return math.nan if self.diverged is not None else float(self.test_loss[-1])

    def to_dict(self) -> dict:
        """JSON-ready dict (non-finite numbers as the strings of ``remprop._json``)."""
        return to_jsonable({"config": self.config.to_dict(), "eval_steps": self.eval_steps,
                            "train_loss": self.train_loss, "test_loss": self.test_loss,
                            "final_test_loss": self.final_test_loss, "unigram_loss": self.unigram_loss,
                            "init": _arrays(self.init), "final": _arrays(self.final),
                            "corpus": self.corpus, "run": self.run, "diverged": self.diverged})

    @classmethod
    def from_dict(cls, data: dict) -> "TrainResult":
        """The inverse of :meth:`to_dict`."""
        def floats(value):
            return np.asarray([float(v) for v in value], dtype=float)

        return cls(config=TrainConfig.from_dict(data["config"]),
                   eval_steps=np.asarray(data["eval_steps"], dtype=np.int64),
                   train_loss=floats(data["train_loss"]), test_loss=floats(data["test_loss"]),
                   unigram_loss=float(data["unigram_loss"]),
                   init={k: floats(v) for k, v in data["init"].items()},
                   final={k: floats(v) for k, v in data["final"].items()},
                   corpus=dict(data.get("corpus", {})), run=dict(data.get("run", {})),
                   diverged=data.get("diverged"))

    def save(self, path) -> Path:
        """Write :meth:`to_dict` as strict JSON to ``path``, atomically; returns the path."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        return atomic_write_json(path, self.to_dict())

    @classmethod
    def load(cls, path) -> "TrainResult":
        """Read a file written by :meth:`save`."""
        return cls.from_dict(json.loads(Path(path).read_text()))
