"""The settings of one masked-LM training run, validated once.

Every field of ``TrainConfig.arch`` (a :class:`remprop.theory.Architecture`) and
``beta`` mean what they mean in the theory and in
:class:`~remprop.validation.simulator.SimulatedStack` (docs/theory.md sections 2-5);
the other fields are sizes and the optimiser's settings (the reference experiments:
AdamW, linear schedule with warm-up ratio 0.05, weight decay 0.01, gradient clipping
1.0, masking probability 0.15; Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(f), 3).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from remprop.theory import Architecture
from remprop.theory.checks import check_choice, check_depth
from remprop.theory.models.pretraining import SCHEDULES  # the decays after the warm-up (TrainConfig.schedule)
from remprop.theory.rem.checks import check_seq_len

from ..backend import check_positive_int, check_scalar, check_seed

__all__ = ["TrainConfig", "MODELS", "SEED_LIMIT", "COMPILE_MODES", "SCHEDULES"]

#: Models :func:`~remprop.validation.training.train` can train.
MODELS = ("remprop", "bert")
#: ``torch.compile`` modes ``TrainConfig.compile`` may name (True: "reduce-overhead" on CUDA, "default" elsewhere).
COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: Seeds are below this: torch's generators take 64-bit seeds.
SEED_LIMIT = 2 ** 64


def _unit_interval(name, value, *, closed_low=True):
    value = check_scalar(name, value, **({"nonnegative": True} if closed_low else {"positive": True}))
    if value >= 1.0:
        raise ValueError(f"{name} must be < 1, got {value!r}")
    return value


@dataclass(frozen=True)
class TrainConfig:
    """One training run (frozen; every field validated on construction).

    Attributes
    ----------
    arch : remprop.theory.Architecture
        Block order, attention, activation, variances, skip strengths, heads, qk_scaling.
    beta : float
        Query/key scale of the initialisation, > 0.
    depth, width, seq_len : int
        Blocks L >= 1, width d >= 2 (divisible by ``arch.heads``), tokens per sequence T >= 2.
    batch_size, steps : int
        Sequences per step, optimiser steps (>= 1).
    lr, warmup_ratio, weight_decay, grad_clip : float
        AdamW peak learning rate (> 0); fraction of the steps of linear warm-up in [0, 1);
        decoupled weight decay (>= 0) of the matrices (not of biases); gradient-norm clip
        (> 0; ``inf`` = none).
    mask_prob : float
        Probability that a token is selected for the masked-LM loss, in (0, 1).
    eval_every, eval_batches : int
        Test loss (and checkpoint) every ``eval_every`` steps, on ``eval_batches`` held-out
        batches of ``batch_size`` sequences.
    seed : int
        Initialisation (the simulator's weight streams) and data order, in ``[0, 2**64)``.
    device : str
        ``"cpu"``, ``"cuda[:n]"`` or ``"auto"`` (CUDA with bf16 autocast when present).
    model : {"remprop", "bert"}
        Our simulated stack with trainable weights, or Hugging Face BERT at the same init
        (an architecture BERT cannot run is refused here,
        :func:`~remprop.validation.hf_bert.check_bert_architecture`).
    vocab_size : int
        BPE vocabulary of the corpus (>= 64).
    d_ff : int, optional
        MLP hidden width (default ``width``, as the simulator).
    embedding_std : float, optional
        Std of the word and position tables' entries (default ``sqrt(1/2)``: an input of unit mean square,
        ``q0 = 1``; GPT-2's and LLaMA's 0.02 gives ``q0 = 8e-4``). Left out of :meth:`to_dict` while None.
    beta2 : float, optional
        AdamW's second-moment decay, in (0, 1) (default torch's 0.999; GPT-3's and LLaMA's recipes use
        0.95). Left out of :meth:`to_dict` while None.
    schedule : {"linear", "cosine"}, optional
        The decay after the warm-up: linear to 0 (the default) or a half cosine to 0. Left out of
        :meth:`to_dict` while None.
    compile : bool or str
        Run the training steps' blocks through ``torch.compile`` (``model="remprop"``): False (the
        default), True (mode "reduce-overhead", i.e. CUDA graphs, on CUDA; "default" elsewhere) or
        one of :data:`COMPILE_MODES`. How the steps run, not what they compute: it is left out of
        :meth:`to_dict` while False, so the runs' keys and JSON stay those of before the option.
    """

    arch: Architecture = field(default_factory=Architecture)
    beta: float = 0.5
    depth: int = 4
    width: int = 64
    seq_len: int = 64
    batch_size: int = 32
    steps: int = 300
    lr: float = 1e-3
    warmup_ratio: float = 0.05
    weight_decay: float = 0.01
    grad_clip: float = 1.0
    mask_prob: float = 0.15
    eval_every: int = 25
    eval_batches: int = 4
    seed: int = 0
    device: str = "cpu"
    model: str = "remprop"
    vocab_size: int = 4096
    d_ff: int | None = None
    compile: bool | str = False
    embedding_std: float | None = None
    beta2: float | None = None
    schedule: str | None = None

    def __post_init__(self):
        if not isinstance(self.arch, Architecture):
            raise ValueError(f"arch must be a remprop.theory.Architecture, got {type(self.arch).__name__}")
        put = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 - frozen
        put("beta", check_scalar("beta", self.beta, positive=True))
        put("depth", check_depth(self.depth))
        put("width", check_positive_int("width", self.width, 2))
        if self.width % self.arch.heads:
            raise ValueError(f"width must be divisible by arch.heads = {self.arch.heads}, got {self.width}")
        put("seq_len", check_seq_len(self.seq_len, allow_none=False))
        for name in ("batch_size", "steps", "eval_every", "eval_batches"):
            put(name, check_positive_int(name, getattr(self, name)))
        put("lr", check_scalar("lr", self.lr, positive=True))
        put("warmup_ratio", _unit_interval("warmup_ratio", self.warmup_ratio))
        put("weight_decay", check_scalar("weight_decay", self.weight_decay, nonnegative=True))
        put("grad_clip", check_scalar("grad_clip", self.grad_clip, positive=True, allow_inf=True))
        put("mask_prob", _unit_interval("mask_prob", self.mask_prob, closed_low=False))
        put("seed", check_seed(self.seed))
        if self.seed >= SEED_LIMIT:
            raise ValueError(f"seed must be an integer in [0, 2**64) (torch's seeds are 64-bit), got {self.seed}")
        if not isinstance(self.device, str):
            raise ValueError(f"device must be 'auto', 'cpu' or 'cuda[:n]', got {self.device!r}")
        put("model", check_choice("model", self.model, MODELS))
        if self.model == "bert":
            from ..hf_bert import check_bert_architecture

            check_bert_architecture(self.arch)
        put("vocab_size", check_positive_int("vocab_size", self.vocab_size, 64))
        put("d_ff", None if self.d_ff is None else check_positive_int("d_ff", self.d_ff))
        if not isinstance(self.compile, bool) and self.compile not in COMPILE_MODES:
            raise ValueError(f"compile must be True, False or one of {', '.join(COMPILE_MODES)}, got {self.compile!r}")
        if self.embedding_std is not None:
            put("embedding_std", check_scalar("embedding_std", self.embedding_std, positive=True))
            if self.model != "remprop":
                raise ValueError(f"embedding_std needs model='remprop' (got model={self.model!r})")
        if self.beta2 is not None:
            put("beta2", check_scalar("beta2", self.beta2, positive=True))
            if not self.beta2 < 1.0:
                raise ValueError(f"beta2 must lie in (0, 1), got {self.beta2}")
        if self.schedule is not None:
            put("schedule", check_choice("schedule", self.schedule, SCHEDULES))
        if self.compile is not False and self.model != "remprop":
            raise ValueError(f"compile needs model='remprop' (got model={self.model!r})")

    @property
    def warmup_steps(self) -> int:
        """Steps of linear warm-up: ``round(warmup_ratio * steps)``."""
        return int(round(self.warmup_ratio * self.steps))

    def replace(self, **changes) -> "TrainConfig":
        """A copy with some fields changed (validated again)."""
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """JSON-ready fields (``arch`` as :meth:`remprop.theory.Architecture.to_dict`; ``compile`` only when set)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["arch"] = self.arch.to_dict()
        if out["compile"] is False:  # how it runs: the keys of uncompiled runs are those of before the option
            del out["compile"]
        for name in ("embedding_std", "beta2", "schedule"):  # defaults: the keys of such runs are those of before
            if out[name] is None:
                del out[name]
        return out

    @classmethod
    def from_dict(cls, data) -> "TrainConfig":
        """The inverse of :meth:`to_dict`."""
        data = dict(data)
        data["arch"] = Architecture(**data["arch"])
        if isinstance(data.get("grad_clip"), str):  # strict JSON writes no clipping as "inf"
            data["grad_clip"] = float(data["grad_clip"])
        return cls(**data)
