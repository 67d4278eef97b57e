"""Causal (decoder) stacks: the late-token theory against simulation, and its error by position.

:func:`causal_comparison` pushes sequences through a causal
:class:`~remprop.validation.simulator.SimulatedStack` and measures, after every block,

* the mean pairwise cosine of the last ``last`` tokens (Fig. 12: last 50 of T = 512);
* the same in consecutive windows of ``window`` positions along the sequence;

and sets beside them :func:`remprop.theory.causal.propagate_causal` (position t: a REM
with t keys at the score scale of T) averaged over the same positions, started from the
measured input state. Position 1 (one key) has no REM; windows average the theory over
their positions >= 2. With ``arch.positions == "rope"`` the stack rotates its queries and
keys and the theory reads each row's rotary correlation ``cbar_t``.

:func:`causal_row_measurement` measures the participation ratio of every row of one causal
attention layer (rotated or not) on Gaussian tokens, beside the per-position REM
(:func:`~remprop.theory.rem.causal_participation_ratio`, with and without RoPE).

Reference: Giorlandino & Goldt, arXiv 2505.24333, Fig. 12 (docs/theory.md section 8).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from remprop.theory import Architecture, gram_width
from remprop.theory.checks import check_choice
from remprop.theory.causal import propagate_causal, propagate_causal_gram
from remprop.theory.rem import ROPE_BASE, causal_participation_table
from remprop.theory.rem.causal import causal_rope_correlation

from .backend import STREAM_WEIGHTS, check_positive_int, generator
from .comparison import OBSERVABLES
from .inputs import gaussian_tokens
from .layers import draw_attention_weights, softmax_attention
from .measurements import last_tokens_statistics, token_statistics, window_statistics
from .rope import rotary
from .settings import SimulationSettings, check_simulation
from .simulator import SimulatedStack

__all__ = ["CausalComparison", "causal_comparison", "causal_row_measurement"]


@dataclass(frozen=True)
class CausalComparison:
    """Late-token theory and measurements of a causal stack, per layer and per position window.

    Attributes
    ----------
    settings : dict
    windows : ndarray of int, shape (n_windows, 2)
        ``[start, stop)`` of each window, 0-based positions.
    measured_last : ndarray, shape (samples, depth + 1)
        Observable of the last ``last`` tokens, per sequence and layer.
    measured_windows : ndarray, shape (samples, depth + 1, n_windows)
    theory_last : ndarray, shape (depth + 1,)
    theory_windows : ndarray, shape (depth + 1, n_windows)
    theory_encoder : ndarray, shape (depth + 1,)
        The encoder's (non-causal) finite-T theory at T, for reference.
    elapsed : float
    theory_gram : ndarray, shape (depth + 1,) or None
        The last tokens from the causal Gram state
        (:func:`~remprop.theory.causal.propagate_causal_gram`), when asked for (``gram=True``).
    """

    settings: dict
    windows: np.ndarray
    measured_last: np.ndarray
    measured_windows: np.ndarray
    theory_last: np.ndarray
    theory_windows: np.ndarray
    theory_encoder: np.ndarray
    elapsed: float = 0.0
    theory_gram: np.ndarray = None

    @property
    def depth(self):
        return self.theory_last.size - 1

    def mean_last(self):
        return self.measured_last.mean(axis=0)

    def std_last(self):
        return self.measured_last.std(axis=0, ddof=1) if self.measured_last.shape[0] > 1 else \
            np.zeros(self.depth + 1)

    @property
    def error_last(self):
        """``|theory - measured mean|`` of the last tokens, per layer."""
        return np.abs(self.theory_last - self.mean_last())

    @property
    def max_abs_error(self):
        """Largest error of the last-token prediction over layers 1..depth."""
        return float(self.error_last[1:].max())

    @property
    def mean_abs_error(self):
        return float(self.error_last[1:].mean())

    @property
    def window_errors(self):
        """Mean over layers 1..depth of ``|theory - measured|`` in each window, shape (n_windows,)."""
        err = np.abs(self.theory_windows - self.measured_windows.mean(axis=0))
        return err[1:].mean(axis=0)

    @property
    def window_max_errors(self):
        err = np.abs(self.theory_windows - self.measured_windows.mean(axis=0))
        return err[1:].max(axis=0)

    def to_dict(self) -> dict:
        return {"settings": self.settings, "windows": self.windows.tolist(),
                "theory_last": self.theory_last.tolist(), "measured_last_mean": self.mean_last().tolist(),
                "measured_last_std": self.std_last().tolist(), "theory_encoder": self.theory_encoder.tolist(),
                "max_abs_error": self.max_abs_error, "mean_abs_error": self.mean_abs_error,
                "window_mean_abs_error": self.window_errors.tolist(),
                "window_max_abs_error": self.window_max_errors.tolist(),
                "theory_windows": self.theory_windows.tolist(),
                "measured_windows_mean": self.measured_windows.mean(axis=0).tolist(), "elapsed_s": self.elapsed,
                **({} if self.theory_gram is None else {"theory_gram": self.theory_gram.tolist()})}


def causal_comparison(arch: Architecture | None = None, beta=0.5, depth=50, *, sim: SimulationSettings | None = None,
                      last=50, window=32, observable="cosine", progress=None, gram=False) -> CausalComparison:
    """Simulate a causal stack and compare its late tokens (and every window) with the theory.

    Parameters
    ----------
    arch : Architecture, optional
        Default BERT defaults; ``attention="softmax"``; ``arch.seq_len`` None or ``sim.seq_len``.
        With ``positions="rope"`` the stack rotates queries and keys (``head_dim = width / heads``)
        and the theory reads each row's rotary correlation (docs/theory.md section 8).
    beta, depth
        As :func:`~remprop.validation.comparison.compare`.
    sim : remprop.validation.SimulationSettings, optional
        As :func:`~remprop.validation.comparison.compare`, with ``seq_len >= 3``; the stack
        is causal whatever ``sim.causal`` says; ``batch_size`` None: at most 4 sequences at
        once. Default ``SimulationSettings(inputs="synthetic")`` (d = 720, T = 512, 2 seeds
        x 2 Gaussian sequences). Its ``window`` (sliding windows) enters the stack and both theories.
    last : int
        Number of final tokens whose average cosine is compared (Fig. 12: 50).
    window : int
        Width of the position windows of the error-by-position measurement.
    observable : {"cosine", "rho"}
        Mean pairwise cosine or p/q of the tokens considered.
    progress : callable, optional
        Called with the number of sequences finished after each batch.
    gram : bool
        Also predict the last tokens with the causal Gram state (``theory_gram``,
        :func:`~remprop.theory.causal.propagate_causal_gram`, Gaussian inputs only; cost
        ``O(T^3)`` per layer), which gives each late row its true keys (docs/theory.md section 8).

    Returns
    -------
    CausalComparison

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 12.
    """
    from remprop.theory import propagate

    arch = Architecture() if arch is None else arch
    sim = check_simulation(sim, inputs="synthetic").replace(causal=True)
    if not isinstance(gram, bool):
        raise ValueError(f"gram must be True or False, got {gram!r}")
    if gram and sim.inputs != "synthetic":
        raise ValueError(f"gram=True needs inputs='synthetic' (the causal Gram state starts from Gaussian tokens), "
                         f"got inputs={sim.inputs!r}")
    check_choice("observable", observable, OBSERVABLES)
    seq_len = check_positive_int("seq_len", sim.seq_len, 3)
    last = check_positive_int("last", last, 2)
    window = check_positive_int("window", window, 2)
    if last > seq_len - 1 or window > seq_len:
        raise ValueError(f"last must be <= seq_len - 1 and window <= seq_len, got last={last}, window={window}")
    if arch.seq_len is not None and arch.seq_len != seq_len:   # before simulating (propagate_causal's rule)
        raise ValueError(f"seq_len must equal arch.seq_len when the architecture sets it, got seq_len={seq_len}, "
                         f"arch.seq_len={arch.seq_len}")
    device = sim.device
    starts = np.arange(0, seq_len - window + 1, window)
    windows = np.stack([starts, starts + window], axis=1)
    stacks = [SimulatedStack(arch, beta, depth, sim=sim, seed=s) for s in sim.seeds]
    batch_size = min(sim.sequences, 4) if sim.batch_size is None else sim.batch_size
    last_rows, window_rows, inputs_q, inputs_rho = [], [], [], []
    start_time = time.perf_counter()
    for stack in stacks:
        for batch in sim.input_batches(stack.seed, batch_size):
            layers_last, layers_windows = [], []

            def observe(layer, hidden, probs):
                if layer == 0:
                    full = token_statistics(hidden, batch.mask)
                    inputs_q.append(full["q"].cpu().numpy())
                    inputs_rho.append(full["rho"].cpu().numpy())
                layers_last.append(last_tokens_statistics(hidden, last, batch.mask)[observable].cpu().numpy())
                layers_windows.append(np.stack([window_statistics(hidden, int(a), int(b), batch.mask)[observable]
                                                .cpu().numpy() for a, b in windows], axis=-1))

            stack.forward(batch.tokens, batch.mask, observe)
            last_rows.append(np.stack(layers_last, axis=1))
            window_rows.append(np.stack(layers_windows, axis=1))
            if progress is not None:
                progress(len(batch))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - start_time
    q_in = float(np.concatenate(inputs_q).mean())
    rho_in = float(np.concatenate(inputs_rho).mean())
    stack = stacks[0]
    positions = np.arange(2, seq_len + 1)
    sliding = sim.window or None  # the stack's sliding windows (SimulationSettings.window), the theory's too
    traj = propagate_causal(arch, stack.beta, stack.depth, seq_len, positions, q0=q_in, rho0=rho_in, window=sliding)
    rho_by_position = np.concatenate([traj.rho[:1], traj.rho], axis=0)   # position 1 -> the theory of position 2
    theory_last = rho_by_position[seq_len - last:].mean(axis=0)
    theory_windows = np.stack([rho_by_position[max(a, 1):b].mean(axis=0) for a, b in windows], axis=-1)
    encoder = propagate(arch.replace(seq_len=seq_len), stack.beta, stack.depth, q0=q_in, rho0=rho_in).rho
    theory_gram = None
    if gram:
        # at the stack's width where a head's query and key directions fit in it (docs/theory.md section 8.2)
        causal_gram = propagate_causal_gram(arch, stack.beta, stack.depth, seq_len, q_in, rho_in, last=last,
                                            window=sliding, width=gram_width(arch, stack.width))
        theory_gram = causal_gram.rho if observable == "rho" else causal_gram.cosine
    settings = {"arch": arch.to_dict(), "beta": stack.beta, "depth": stack.depth, "seq_len": seq_len,
                "width": stack.width, "d_ff": stack.d_ff, "seeds": list(sim.seeds), "sequences": sim.sequences,
                "inputs": sim.inputs, "q0": q_in, "rho0": rho_in, "last": last, "window": window,
                "observable": observable, "dtype": sim.dtype_name, "device": str(device)}
    return CausalComparison(settings, windows, np.concatenate(last_rows), np.concatenate(window_rows),
                            theory_last, theory_windows, np.asarray(encoder), elapsed, theory_gram)


def causal_row_measurement(beta, *, sim: SimulationSettings | None = None, heads=1, rope=True,
                           base=ROPE_BASE) -> dict:
    r"""Measured and predicted participation ratio of every row of one causal attention layer.

    Seed s draws Gaussian tokens with the order parameters ``(q0, q0 rho0)`` of ``sim`` from stream
    ``(s, tokens, 0)`` (:func:`~remprop.validation.inputs.gaussian_tokens`) and the weights
    from ``(s, weights, 0)`` (``s_qk^2 = beta sqrt(log T) / d``, each head at ``beta``), rotates
    the queries and keys when ``rope`` (:func:`~remprop.validation.rope.rotary`,
    ``d_H = width / heads``) and measures ``Y2(t) = sum_m a_tm^2`` of each row, averaged over
    heads. The theory of row t >= 2 (docs/theory.md section 8) at the measured input ``(q, p)``:

    .. math:: Y_2(t) = Y_2^{\rm exact}\Big(\beta\sqrt{q (q - p\,\bar c_t)}\sqrt{\log T/\log t};\ t\Big)

    with ``cbar_t`` of :func:`~remprop.theory.rem.causal.causal_rope_correlation` (``y2_theory``;
    1 without rotation) and with ``cbar_t = 1`` (``y2_unrotated``: the causal REM without
    positions). Row 1 has one key: ``Y2 = 1`` exactly, on both sides.

    Parameters
    ----------
    beta : float
        Query/key scale, > 0.
    sim : remprop.validation.SimulationSettings, optional
        T >= 3 (``seq_len``), d (``width``), the seeds, ``q0``, ``rho0``, dtype and device
        (the other fields are not read). Default
        ``SimulationSettings(width=128, seq_len=256, seeds=4, rho0=0.5)``.
    heads : int
        H (``d_H = d / H``, even with ``rope``).
    rope : bool
        Rotate queries and keys (default) or not.
    base : float
        RoPE base.

    Returns
    -------
    dict of str -> ndarray
        ``positions`` (1..T), ``y2`` (seeds, T) measured, ``q``, ``p`` (seeds,) measured input,
        ``y2_theory`` and ``y2_unrotated`` (T,) at the seed-mean input, ``rope_correlation`` (T,)
        (``cbar_t``; 1 at t = 1 by convention).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 12; Su et al., arXiv 2104.09864.
    """
    if not isinstance(rope, (bool, np.bool_)):
        raise ValueError(f"rope must be True or False, got {rope!r}")
    sim = check_simulation(sim, width=128, seq_len=256, seeds=4, rho0=0.5)
    seq_len = check_positive_int("seq_len", sim.seq_len, 3)
    width, heads = sim.width, check_positive_int("heads", heads)
    if width % heads:
        raise ValueError(f"heads must divide width, got heads={heads}, width={width}")
    head_dim = width // heads
    dtype, device = sim.dtype, sim.device
    rotate = rotary(seq_len, head_dim, base, dtype=dtype, device=device) if rope else None
    rows = {key: [] for key in ("y2", "q", "p")}
    for seed in sim.seeds:
        x = gaussian_tokens(sim.q0, sim.rho0, seq_len=seq_len, width=width, seed=seed, dtype=dtype,
                            device=device).tokens
        weights = draw_attention_weights(generator(seed, STREAM_WEIGHTS, 0, device), width, beta, seq_len,
                                         0.0, 0.0, dtype=dtype, device=device)
        _, probs = softmax_attention(x, weights, heads=heads, causal=True, rotate=rotate)
        rows["y2"].append((probs * probs).sum(dim=-1, dtype=torch.float64).mean(dim=1)[0].cpu().numpy())
        stats = token_statistics(x)
        rows["q"].append(float(stats["q"][0]))
        rows["p"].append(float(stats["p"][0]))
    result = {key: np.array(values) for key, values in rows.items()}
    q, p = float(result["q"].mean()), float(result["p"].mean())
    positions = np.arange(2, seq_len + 1)
    cbar = (np.asarray(causal_rope_correlation(positions, seq_len, head_dim, base)) if rope
            else np.ones(positions.size))
    table = causal_participation_table(seq_len, positions)

    def theory(correlation):
        x = beta * np.sqrt(np.maximum(q * (q - p * correlation), 0.0))
        return np.concatenate([[1.0], table(positions, x)])   # row 1: one key, Y2 = 1

    result.update(positions=np.arange(1, seq_len + 1), y2_theory=theory(cbar),
                  y2_unrotated=theory(np.ones(positions.size)),
                  rope_correlation=np.concatenate([[1.0], cbar]))
    return result
