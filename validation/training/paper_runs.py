r"""The training runs behind the paper's training figures, and the numbers they give.

Each function trains the settings of one figure (:func:`~remprop.validation.training.train` of the training core, one
run per seed) and returns the figure's data as plain numbers, ready for
:mod:`remprop.diagrams.training_paper_figures`:

* :func:`loss_curves_1f` -- Fig. 1(f): masked-LM test loss over training, two
  initialisations per phase: a deep stack at two large and two small skip strengths
  ``alpha_SA`` (trainable / rank collapse) and a shallow one at two ``beta`` above
  ``beta_c`` (entropy collapse);
* :func:`beta_sweep_3` -- Fig. 3: a one-layer, one-head transformer trained at several
  ``beta`` across ``beta_c``: final test loss against ``beta``, with ``beta_c`` from
  :meth:`remprop.theory.Architecture.beta_critical`;
* :func:`gain_control_6` -- Fig. 6 (appendix C.1): softmax against gain-controlled
  attention in a deep post-LN stack, at the same skip strengths;
* :func:`learning_rates_8` -- Fig. 8 (appendix C.3): an entropy-collapsed stack
  (``beta > beta_c``) and a trainable reference (``beta = 0.5``) at several learning rates.

Sizes come from :class:`remprop.diagrams.paper_figures.FigureSizes` (the ``train_*``
fields and each figure's own). Every setting records the theory's phase at its
initialisation (:func:`theory_phase`: the rule of :func:`remprop.diagrams.trainability_diagram`
on the one cell, finite-T attention at the trained T, started from ``q0 = 1`` and the measured
input cosine), so a figure shows what the theory predicted beside what training did.

**Cached, resumable.** :class:`RunCache` keeps every run in its own folder
``<cache>/<key>`` (key: the SHA-256 of the run's :meth:`remprop.validation.training.TrainConfig.to_dict`), written by
``train(config, out=...)``: a finished run is read back from its ``result.json``, an
interrupted one resumes from its checkpoint, and figures that share a setting share the run.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333, Figs. 1(f), 3, 6 and 8;
docs/theory.md sections 3 and 6; docs/training.md.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import torch

from remprop.diagrams import PHASE_LABELS, classify_phases
from remprop.theory import DEFAULT_THRESHOLD, Architecture, propagate

from ..backend import torch_threads
from ..experiments.measured_diagram import theory_architecture
from .config import TrainConfig
from .loop import RESULT_NAME, train
from .result import TrainResult

__all__ = ["RunCache", "run_key", "base_config", "theory_phase", "beta_critical_of", "loss_curves_1f",
           "beta_sweep_3", "gain_control_6", "learning_rates_8", "TRAINABLE_BETA", "RUNS_FOLDER"]

#: Query/key scale of the settings meant to be below beta_c (as Fig. 1(d)).
TRAINABLE_BETA = 0.5
#: Sub-folder of a figure folder that holds the cached runs.
RUNS_FOLDER = "training_runs"


def run_key(config: TrainConfig) -> str:
    """The folder name of a run: the first 16 hex digits of the SHA-256 of its settings."""
    return hashlib.sha256(json.dumps(config.to_dict(), sort_keys=True).encode()).hexdigest()[:16]


class RunCache:
    """Training runs kept in a folder, one sub-folder per configuration.

    Parameters
    ----------
    folder : str or Path
        Where the runs live (created when the first run is trained).
    progress : callable, optional
        Called with no argument after each run (trained or read back).
    threads : int, optional
        torch CPU threads of every run (default: the number in effect when the cache is
        made). Held around each run because a numba-parallel theory call between runs
        (:func:`theory_phase`) resets the OpenMP thread count that torch reads; on a busy
        two-core machine two threads ran these runs ten times slower than one.

    Attributes
    ----------
    trained, reused : int
        Runs trained by this cache, and runs read back from a finished ``result.json``.
    """

    def __init__(self, folder, progress=None, threads=None):
        self.folder = Path(folder)
        self.progress = progress
        self.threads = torch.get_num_threads() if threads is None else int(threads)
        self.trained = 0
        self.reused = 0

    def result(self, config: TrainConfig) -> TrainResult:
        """The finished run of ``config``: read back when it is on disk, else trained (or resumed)."""
        out = self.folder / run_key(config)
        cached = _finished(out / RESULT_NAME, config)
        if cached is not None:
            self.reused += 1
        else:
            with torch_threads(self.threads):
                cached = train(config, out=out)
            self.trained += 1
        if self.progress is not None:
            self.progress()
        return cached

    def counts(self) -> dict:
        """``{"runs_trained": ..., "runs_reused": ...}``."""
        return {"runs_trained": self.trained, "runs_reused": self.reused}


def _finished(path: Path, config: TrainConfig):
    """The TrainResult at ``path`` when it is a readable result of ``config``, else None."""
    if not path.exists():
        return None
    try:
        result = TrainResult.load(path)
    except (ValueError, KeyError, TypeError):  # damaged: train() resumes from the checkpoint
        return None
    return result if result.config.to_dict() == config.to_dict() else None


def base_config(sizes, device="auto", **changes) -> TrainConfig:
    """The training run of a figure at ``sizes`` (the ``train_*`` fields), with ``changes``.

    Test loss every ``steps / 10`` steps (at least every step).
    """
    config = TrainConfig(width=sizes.train_width, seq_len=sizes.train_seq_len, batch_size=sizes.train_batch_size,
                         steps=sizes.train_steps, lr=sizes.train_lr, vocab_size=sizes.train_vocab_size,
                         eval_every=max(1, sizes.train_steps // 10), eval_batches=sizes.train_eval_batches,
                         device="auto" if device is None else str(device))
    return config.replace(**changes)


def theory_phase(config: TrainConfig, input_rho: float, threshold=DEFAULT_THRESHOLD) -> str:
    """The theory's phase of ``config`` at initialisation (a name of :data:`remprop.diagrams.PHASE_LABELS`).

    :func:`remprop.diagrams.classify_phases` of the final cosine and the critical beta
    (:meth:`remprop.theory.Architecture.beta_critical`) of :func:`remprop.theory.propagate` through
    ``config.depth`` blocks at ``config.beta``, finite-T attention at ``config.seq_len``,
    from ``q0 = 1`` and ``rho0 = input_rho``: the cell of
    :func:`remprop.diagrams.trainability_diagram` at ``(beta, arch.alpha_sa)``, without the
    grid kernel's compilation (docs/theory.md section 6).
    """
    arch = theory_architecture(config.arch, "finite-T", config.seq_len)
    trajectory = propagate(arch, config.beta, config.depth, q0=1.0, rho0=input_rho)
    phase = classify_phases(config.beta, arch.beta_critical(per_layer=trajectory.beta_critical),
                            trajectory.rho[..., -1], threshold)
    return PHASE_LABELS[int(phase)]


def beta_critical_of(arch: Architecture, depth: int, input_rho: float, seq_len: int) -> float:
    r"""The model-level beta_c of ``arch`` from ``q0 = 1`` and ``rho0 = input_rho``.

    :meth:`remprop.theory.Architecture.beta_critical` of the per-layer critical betas
    :math:`\sqrt{2 / (q_l (q_l - p_l))}` of :func:`remprop.theory.propagate` (at
    ``beta = TRAINABLE_BETA``: for post-LN the first layer decides and its input does not
    depend on beta; docs/theory.md section 6).
    """
    arch = theory_architecture(arch, "finite-T", seq_len)
    trajectory = propagate(arch, TRAINABLE_BETA, depth, q0=1.0, rho0=input_rho)
    return float(arch.beta_critical(per_layer=trajectory.beta_critical))


def _input_rho(results) -> float:
    """Mean token cosine of the embedded input at init (entry 0 of ``token_cosine``), clipped to [0, 1]."""
    return float(np.clip(np.mean([r.init["token_cosine"][0] for r in results]), 0.0, 1.0))


def _spread(values) -> np.ndarray:
    values = np.asarray(values, dtype=float)
    return values.std(axis=0, ddof=1) if values.shape[0] > 1 else np.zeros(values.shape[1:])


def _setting(cache: RunCache, label: str, config: TrainConfig, seeds: int) -> dict:
    """Train ``config`` for seeds 0..seeds-1; its curves, final losses and theory phase."""
    results = [cache.result(config.replace(seed=seed)) for seed in range(seeds)]
    curves = np.array([r.test_loss for r in results])
    finals = curves[:, -1]
    rho0 = _input_rho(results)
    return {"label": label, "depth": config.depth, "width": config.width, "alpha_sa": config.arch.alpha_sa,
            "beta": config.beta, "lr": config.lr, "norm": config.arch.norm, "attention": config.arch.attention,
            "eval_steps": np.asarray(results[0].eval_steps), "test_loss_mean": curves.mean(axis=0),
            "test_loss_std": _spread(curves), "final_test_loss": finals, "final_mean": float(finals.mean()),
            "final_std": float(_spread(finals)), "unigram_loss": float(results[0].unigram_loss),
            "input_rho": rho0, "theory_phase": theory_phase(config, rho0),
            "init_entropy_min": float(np.mean([r.init["attention_entropy"].min() for r in results])),
            "init_cosine_final": float(np.mean([r.init["token_cosine"][-1] for r in results]))}


def _record(figure: str, sizes, cache: RunCache, settings: list, **extra) -> dict:
    return {"figure": figure, "settings": settings, "unigram_loss": settings[0]["unigram_loss"],
            "seeds": sizes.train_seeds, "steps": sizes.train_steps, **extra, **cache.counts()}


def loss_curves_1f(sizes, cache: RunCache, device="auto") -> dict:
    """Fig. 1(f): test-loss curves, two initialisations per phase.

    Post-LN, ReLU (the Architecture defaults). ``sizes.depth_1f = (deep, shallow)``: the
    deep stack at ``beta = 0.5`` with each of ``alphas_1f_trainable`` and ``alphas_1f_rank``,
    the shallow one at ``alpha_SA = 1`` with each of ``betas_1f_entropy``.

    Returns
    -------
    dict
        ``settings``: per setting ``label`` (the phase it is meant to show and its alpha_SA or
        beta), ``theory_phase``,
        ``eval_steps``, ``test_loss_mean``/``std`` over seeds, ``final_test_loss`` per seed,
        ``final_mean``/``std``; ``unigram_loss``; ``runs_trained``/``runs_reused``.
    """
    deep, shallow = sizes.depth_1f
    base = base_config(sizes, device)
    chosen = ([(f"trainable: alpha_SA = {a:g}", deep, a, TRAINABLE_BETA) for a in sizes.alphas_1f_trainable]
              + [(f"rank collapse: alpha_SA = {a:g}", deep, a, TRAINABLE_BETA) for a in sizes.alphas_1f_rank]
              + [(f"entropy collapse: beta = {b:g}", shallow, 1.0, b) for b in sizes.betas_1f_entropy])
    settings = [_setting(cache, label, base.replace(depth=depth, beta=beta, arch=base.arch.replace(alpha_sa=alpha)),
                         sizes.train_seeds) for label, depth, alpha, beta in chosen]
    return _record("figure_1f", sizes, cache, settings)


def beta_sweep_3(sizes, cache: RunCache, device="auto") -> dict:
    """Fig. 3: one layer, one head, trained at ``sizes.betas_3 = (start, stop, count)`` betas.

    Returns
    -------
    dict
        ``betas``; ``final_test_loss`` (betas, seeds), ``final_mean``, ``final_std``;
        ``beta_critical`` (:func:`beta_critical_of` at the measured input cosine),
        ``theory_phase`` per beta, ``unigram_loss``, ``settings`` (as :func:`loss_curves_1f`).
    """
    base = base_config(sizes, device, depth=1, lr=sizes.lr_3, arch=Architecture(heads=1))
    betas = np.linspace(sizes.betas_3[0], sizes.betas_3[1], int(sizes.betas_3[2]))
    settings = [_setting(cache, f"beta = {b:.3g}", base.replace(beta=float(b)), sizes.train_seeds) for b in betas]
    rho0 = float(np.mean([s["input_rho"] for s in settings]))
    return _record("figure_3", sizes, cache, settings, betas=betas,
                   final_test_loss=np.array([s["final_test_loss"] for s in settings]),
                   final_mean=np.array([s["final_mean"] for s in settings]),
                   final_std=np.array([s["final_std"] for s in settings]),
                   theory_phase=[s["theory_phase"] for s in settings], input_rho=rho0,
                   beta_critical=beta_critical_of(base.arch, 1, rho0, base.seq_len))


def gain_control_6(sizes, cache: RunCache, device="auto") -> dict:
    """Fig. 6: softmax and gain-controlled attention, post-LN, ``depth_6`` blocks of width ``width_6``.

    One head, ``beta = 0.5``, each skip strength of ``alphas_6``, learning rate ``lr_6``.
    Returns the dict of :func:`loss_curves_1f` plus ``gap`` per alpha: the softmax final
    loss minus the gain-controlled one (mean over seeds; > 0 where gain control helps).
    """
    base = base_config(sizes, device, depth=sizes.depth_6, width=sizes.width_6, lr=sizes.lr_6,
                       beta=TRAINABLE_BETA)
    settings = [_setting(cache, f"{attention}, alpha_SA = {alpha:g}",
                         base.replace(arch=Architecture(attention=attention, alpha_sa=alpha)), sizes.train_seeds)
                for alpha in sizes.alphas_6 for attention in ("softmax", "gain-controlled")]
    gap = [settings[2 * i]["final_mean"] - settings[2 * i + 1]["final_mean"] for i in range(len(sizes.alphas_6))]
    return _record("figure_6", sizes, cache, settings, alphas=np.asarray(sizes.alphas_6, dtype=float),
                   gap=np.asarray(gap))


def learning_rates_8(sizes, cache: RunCache, device="auto") -> dict:
    """Fig. 8: ``beta_8`` (above beta_c) and ``beta = 0.5`` at each learning rate of ``lrs_8``.

    Post-LN, ``depth_8`` blocks, ``alpha_SA = 1``. Returns the dict of :func:`loss_curves_1f`
    plus ``lrs`` and ``gap`` per learning rate: the entropy-collapsed final loss minus the
    reference's (mean over seeds; the paper's claim: it shrinks as the rate is lowered).
    """
    base = base_config(sizes, device, depth=sizes.depth_8)
    settings = [_setting(cache, f"beta = {beta:g}, lr = {lr:g}", base.replace(beta=beta, lr=lr), sizes.train_seeds)
                for lr in sizes.lrs_8 for beta in (sizes.beta_8, TRAINABLE_BETA)]
    gap = [settings[2 * i]["final_mean"] - settings[2 * i + 1]["final_mean"] for i in range(len(sizes.lrs_8))]
    return _record("figure_8", sizes, cache, settings, lrs=np.asarray(sizes.lrs_8, dtype=float),
                   beta=sizes.beta_8, gap=np.asarray(gap))
