"""remprop in a training loop: a ``transformers`` ``TrainerCallback`` that checks the model before it trains.

:class:`RempropCallback` runs :func:`remprop.check <remprop.validation.own_weights.check>` at
``on_train_begin`` on the model the ``Trainer`` is about to train, with the ``Trainer``'s own
recipe (:func:`trainer_recipe`): its peak learning rate, warm-up, total steps, tokens per step
and AdamW ``beta2``. It logs the report through ``logging`` (logger ``remprop``), appends the
verdict's numbers to the ``Trainer``'s ``state.log_history`` (saved in ``trainer_state.json``),
writes the figure beside the checkpoints, and warns in one line when the rate lies above the
predicted ceiling's band or the initialisation is collapsed. Without ``transformers``, use
``remprop.check(model, lr=..., steps=...)`` before the loop.

Reference: docs/real_models.md section 6; docs/theory.md section 20 (the ceiling).
"""
from __future__ import annotations

import logging
import warnings
from pathlib import Path

from transformers import TrainerCallback

from remprop.theory.models.pretraining import SCHEDULES

__all__ = ["RempropCallback", "trainer_recipe", "RempropWarning"]

LOGGER = logging.getLogger("remprop")
#: ``lr_scheduler_type`` values whose decay the ceiling's recipe has (others: read as linear, and said).
_SCHEDULES = {"linear": "linear", "cosine": "cosine", "cosine_with_restarts": "cosine",
              "cosine_with_min_lr": "cosine"}


class RempropWarning(UserWarning):
    """A training run that the theory expects not to train (the rate above its ceiling, a collapsed init)."""


def trainer_recipe(args, state, seq_len=None) -> dict:
    """The recipe a ``Trainer`` will run, as :func:`~remprop.validation.own_weights.check` takes it.

    Parameters
    ----------
    args : transformers.TrainingArguments
    state : transformers.TrainerState
        At ``on_train_begin`` (``max_steps`` set: ``args.max_steps`` or the computed total).
    seq_len : int, optional
        Tokens per sequence (batch tokens: per-device batch x devices x gradient accumulation x T).

    Returns
    -------
    dict
        ``lr``, ``steps``, ``warmup``, ``batch_tokens`` (None without ``seq_len``), ``beta2``,
        ``schedule``, and ``notes`` (what the ceiling's recipe does not have).
    """
    steps = int(state.max_steps) if getattr(state, "max_steps", 0) else int(args.max_steps)
    steps = max(steps, 1)
    warmup = args.get_warmup_steps(steps) if hasattr(args, "get_warmup_steps") else int(args.warmup_steps)
    batch = args.per_device_train_batch_size * max(int(getattr(args, "world_size", 1)), 1) \
        * args.gradient_accumulation_steps
    kind = str(getattr(args.lr_scheduler_type, "value", args.lr_scheduler_type))
    notes = []
    schedule = _SCHEDULES.get(kind)
    if schedule is None:
        schedule = "linear"
        notes.append(f"lr_scheduler_type {kind!r} is read as {SCHEDULES[0]} decay (the ceiling's recipes: "
                     f"{', '.join(SCHEDULES)})")
    optimiser = str(getattr(args.optim, "value", args.optim))
    if "adamw" not in optimiser:
        notes.append(f"optim {optimiser!r}: the ceiling is derived for AdamW")
    return {"lr": float(args.learning_rate), "steps": steps, "warmup": min(int(warmup), steps),
            "batch_tokens": None if seq_len is None else int(batch * seq_len), "beta2": float(args.adam_beta2),
            "schedule": schedule, "notes": notes}


class RempropCallback(TrainerCallback):
    """Check the model at the ``Trainer``'s recipe when training begins.

    Parameters
    ----------
    seq_len : int, optional
        The sequence length the model trains at (default: the model's maximum; required for a
        plain module). Also gives the tokens per step.
    figure : bool
        Write the model on its trainability diagram to ``OUTPUT_DIR/remprop-check.png``.
    **options
        Passed to :func:`~remprop.validation.own_weights.check` (``threshold``, ``max_depth``,
        ``block``, ``q0``, ``rho0``, ...).

    Attributes
    ----------
    diagnosis : remprop.diagrams.Diagnosis or None
        The check, once training began.
    figure_path : pathlib.Path or None

    Examples
    --------
    ``Trainer(model, args, train_dataset=..., callbacks=[RempropCallback(seq_len=512)])``.
    """

    def __init__(self, *, seq_len=None, figure=True, **options):
        self.seq_len = seq_len
        self.figure = bool(figure)
        self.options = options
        self.diagnosis = None
        self.figure_path = None

    def on_train_begin(self, args, state, control, model=None, **kwargs):
        """Check ``model`` at the recipe :func:`trainer_recipe` reads; log, record and warn."""
        from .own_weights import check

        if model is None or not state.is_world_process_zero:
            return control
        recipe = trainer_recipe(args, state, self.seq_len)
        notes = recipe.pop("notes")
        diagnosis = check(model, seq_len=self.seq_len, **recipe, **self.options)
        self.diagnosis = diagnosis
        if self.figure:
            from remprop.diagrams import model_figure

            self.figure_path = Path(args.output_dir) / "remprop-check.png"
            self.figure_path.parent.mkdir(parents=True, exist_ok=True)
            model_figure(diagnosis).savefig(self.figure_path, dpi=100)
        ceiling = diagnosis.lr_ceiling or {}
        record = {"remprop/phase": diagnosis.phase, "remprop/verdict": diagnosis.verdict["text"],
                  "remprop/final_rho": float(diagnosis.final_rho), "remprop/lr_ceiling": ceiling.get("value"),
                  "remprop/lr_verdict": ceiling.get("verdict"), "step": state.global_step}
        if self.figure_path is not None:
            record["remprop/figure"] = str(self.figure_path)
        state.log_history.append(record)
        LOGGER.info("remprop check at the Trainer's recipe (lr %g, %d steps, warm-up %d, %s decay, beta2 %g)%s:\n%s%s",
                    recipe["lr"], recipe["steps"], recipe["warmup"], recipe["schedule"], recipe["beta2"],
                    "".join(f"; {note}" for note in notes), diagnosis.report(),
                    f"\nfigure: {self.figure_path}" if self.figure_path else "")
        for line in _warnings(diagnosis):
            LOGGER.warning(line)
            warnings.warn(line, RempropWarning, stacklevel=2)
        return control


def _warnings(diagnosis) -> list:
    """One line per reason the theory expects the run not to train."""
    lines = []
    ceiling = diagnosis.lr_ceiling or {}
    if ceiling.get("verdict") == "above":
        lines.append(f"remprop: learning rate {ceiling['lr']:.3g} is above the predicted ceiling's band "
                     f"(eta_max = {ceiling['value']:.3g}, band up to {ceiling['band'][1]:.3g}): expected not to train")
    if diagnosis.phase != "trainable":
        lines.append(f"remprop: the initialisation is in {diagnosis.phase} (final cosine {diagnosis.final_rho:.4f}; "
                     f"verdict: {diagnosis.verdict['text']})")
    return lines
