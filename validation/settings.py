"""The simulation bundle: sizes, precision, device, seeds and inputs of a simulation, validated once.

A simulation needs, beside the theory's :class:`~remprop.theory.Architecture`, the query/key
scale and the depth, the things the theory does not: the width d, the MLP width, the
simulated sequence length T, the causal mask, the precision and device, the seeds and
sequences, and the input sequences (embedded text or Gaussian tokens with ``(q0, rho0)``).
:class:`SimulationSettings` holds them and checks them once, at construction;
:class:`~remprop.validation.simulator.SimulatedStack`,
:func:`~remprop.validation.comparison.compare`, the measurements and the simulated figures
take one instead of listing its fields again (the theory's own bundle is
:class:`~remprop.theory.RunSettings`).
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from remprop.theory.attention_masks import check_windows, windows_json
from remprop.theory.checks import ParameterError, as_float_array, check_choice, check_seeds
from remprop.theory.rem.checks import check_seq_len

from .backend import check_positive_int, check_scalar, resolve_device, resolve_dtype
from .inputs import INPUT_KINDS, input_batches

__all__ = ["SimulationSettings", "check_simulation"]


@dataclass(frozen=True)
class SimulationSettings:
    r"""Sizes, precision, device, seeds and input sequences of a simulation.

    Parameters
    ----------
    width : int
        Model width d >= 2.
    seq_len : int
        Simulated sequence length T >= 2 (sets the ``sqrt(log T)`` of ``s_qk^2``; inputs have
        T tokens).
    d_ff : int, optional
        MLP hidden width (None: the width; :attr:`mlp_width`).
    causal : bool
        Causal attention mask (decoder).
    window : None, int, AttentionMask or sequence, optional
        Attention masks of a causal stack (sliding windows, chunks, a bidirectional prefix), per layer and
        repeated (:func:`~remprop.theory.attention_masks.check_windows`, sizes at most ``seq_len``; None: the
        full causal mask).
    dtype : {"float32", "float64"}
        Precision (stored as the torch dtype).
    device : str or torch.device, optional
        None or ``"auto"``: CUDA when available, else the CPU
        (:func:`~remprop.validation.backend.resolve_device`; stored resolved).
    seeds : int or sequence of int
        A count n (seeds ``0 .. n-1``) or distinct seeds >= 0, one initialisation each
        (stored as a tuple).
    sequences : int
        Input sequences per seed, >= 1.
    batch_size : int, optional
        Sequences pushed through at once (None: each function's default).
    inputs : {"text", "synthetic"}
        Embedded pydoc text windows, or Gaussian tokens with ``q0``, ``rho0``
        (:func:`~remprop.validation.inputs.input_batches`).
    q0 : float
        Mean squared norm per coordinate of Gaussian tokens, > 0.
    rho0 : float
        Mean cosine of Gaussian tokens, in ``[-1/(T - 1), 1]``.
    layer_norm_eps : float
        The epsilon of the norms (LayerNorm or RMSNorm), >= 0.

    Raises
    ------
    ValueError
        Naming the first field out of its domain.

    Notes
    -----
    A single stack is one initialisation: :class:`~remprop.validation.simulator.SimulatedStack`
    takes its ``seed`` beside the settings and reads neither ``seeds``, ``sequences``,
    ``batch_size`` nor the inputs; the functions that run several initialisations read them.

    Examples
    --------
    >>> from remprop.validation import SimulationSettings
    >>> sim = SimulationSettings(width=64, seq_len=32, seeds=3, device="cpu")
    >>> sim.seeds, sim.mlp_width, sim.replace(d_ff=128).mlp_width
    ((0, 1, 2), 64, 128)
    """

    width: int = 720
    seq_len: int = 512
    d_ff: int | None = None
    causal: bool = False
    dtype: Any = "float32"
    device: Any = None
    seeds: Any = 2
    sequences: int = 2
    batch_size: int | None = None
    inputs: str = "text"
    q0: float = 1.0
    rho0: float = 0.0
    layer_norm_eps: float = 1e-12
    window: Any = None

    def __post_init__(self):
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        set_("width", check_positive_int("width", self.width, 2))
        set_("seq_len", check_seq_len(self.seq_len, allow_none=False))
        set_("d_ff", None if self.d_ff is None else check_positive_int("d_ff", self.d_ff))
        if not isinstance(self.causal, (bool, np.bool_)):
            raise ValueError(f"causal must be True or False, got {self.causal!r}")
        set_("causal", bool(self.causal))
        set_("window", check_windows(self.window, seq_len=self.seq_len))
        if self.window and not self.causal:
            raise ParameterError("window", "window needs causal=True (the attention masks of a causal stack)")
        set_("dtype", resolve_dtype(self.dtype))
        set_("device", resolve_device(self.device))
        set_("seeds", check_seeds(self.seeds))
        set_("sequences", check_positive_int("sequences", self.sequences))
        set_("batch_size", None if self.batch_size is None else check_positive_int("batch_size", self.batch_size))
        check_choice("inputs", self.inputs, INPUT_KINDS)
        set_("q0", check_scalar("q0", self.q0, positive=True))
        set_("rho0", float(as_float_array("rho0", self.rho0, low=-1.0 / (self.seq_len - 1), high=1.0)))
        set_("layer_norm_eps", check_scalar("layer_norm_eps", self.layer_norm_eps, nonnegative=True))

    @property
    def mlp_width(self) -> int:
        """MLP hidden width: ``d_ff``, or the width when it is None."""
        return self.width if self.d_ff is None else self.d_ff

    @property
    def dtype_name(self) -> str:
        """``"float32"`` or ``"float64"``."""
        return str(self.dtype).replace("torch.", "")

    @property
    def samples(self) -> int:
        """Simulated sequences in all: seeds x sequences."""
        return len(self.seeds) * self.sequences

    def replace(self, **changes) -> "SimulationSettings":
        """A copy with some fields changed, validated again."""
        return dataclasses.replace(self, **changes)

    def input_batches(self, seed, batch_size=None):
        """The ``sequences`` input sequences of ``seed`` (:func:`~remprop.validation.inputs.input_batches`),
        in batches of at most ``batch_size`` (default the settings' ``batch_size``, else all at once)."""
        return input_batches(self.inputs, seed=seed, sequences=self.sequences,
                             batch_size=self.batch_size if batch_size is None else batch_size,
                             seq_len=self.seq_len, width=self.width, q0=self.q0, rho0=self.rho0,
                             dtype=self.dtype, device=self.device)

    def to_dict(self) -> dict:
        """JSON-ready fields (dtype and device as strings, seeds as a list; ``window`` left out while
        there is none, so that the records of unwindowed runs keep their fields)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out.update(dtype=self.dtype_name, device=str(self.device), seeds=list(self.seeds),
                   window=windows_json(self.window))
        if not self.window:
            del out["window"]
        return out

    @classmethod
    def from_dict(cls, data: dict) -> "SimulationSettings":
        """Inverse of :meth:`to_dict`."""
        return cls(**data)


def check_simulation(sim, **defaults) -> SimulationSettings:
    """``sim`` when it is a :class:`SimulationSettings`; ``SimulationSettings(**defaults)`` when None.

    Raises
    ------
    ValueError
        ``sim`` is something else (the message names ``sim``).
    """
    if sim is None:
        return SimulationSettings(**defaults)
    if not isinstance(sim, SimulationSettings):
        raise ValueError(f"sim must be a remprop.validation.SimulationSettings, got {type(sim).__name__}")
    return sim
