"""``remprop train``: one masked-LM training run of the simulated stack (validation extra).

The stack is the simulator's (``--norm``, ``--alpha``, ``--heads``, ... and ``--beta``
mean what they mean everywhere else); it is trained on the pydoc topics with the
reference recipe (:mod:`remprop.validation.training`). Writes ``OUT/NAME.json``
(:meth:`remprop.validation.training.TrainResult.to_dict`) and ``OUT/NAME.png`` (:func:`remprop.diagrams.training_figures.training_figure`);
``OUT/checkpoint.pt`` makes an interrupted run resume where it stopped. ``--model bert``
trains Hugging Face ``BertForMaskedLM`` holding the same initial weights
(:mod:`remprop.validation.training.hf_model`; post-LN only).
"""
from __future__ import annotations

import contextlib
import sys

from ..converters import count, layer_count, nonnegative_real, positive_real
from ..errors import CommandLineError, one_line, validation_extra
from ..options import (ARCHITECTURE_OPTIONS, add_architecture_arguments, add_command, add_output_options,
                       add_progress_option, architecture_from_args, point_at_option)
from ..output import dumps, show_progress, writable_directory

__all__ = ["add_train_parser", "run_train", "TRAIN_OPTIONS"]

#: TrainConfig field -> option, to name the option of a rejected value.
TRAIN_OPTIONS = {"beta": "--beta", "depth": "--depth", "width": "--width", "seq_len": "--seq-len",
                 "batch_size": "--batch-size", "steps": "--steps", "lr": "--lr", "warmup_ratio": "--warmup-ratio",
                 "weight_decay": "--weight-decay", "grad_clip": "--grad-clip", "mask_prob": "--mask-prob",
                 "eval_every": "--eval-every", "eval_batches": "--eval-batches", "seed": "--seed",
                 "device": "--device", "model": "--model", "vocab_size": "--vocab-size", "d_ff": "--d-ff",
                 "width must be divisible": "--width"}


def add_train_parser(commands):
    train = add_command(commands, "train", run_train,
                        help="train the simulated stack as a masked language model on the pydoc topics "
                             "(needs the validation extra)")
    run = train.add_argument_group("model and run")
    run.add_argument("--model", choices=("remprop", "bert"), default="remprop",
                     help="our simulated stack, or Hugging Face BERT at the same init (default: %(default)s)")
    run.add_argument("--beta", type=positive_real, default=0.5, help="query/key scale beta > 0 (default: %(default)s)")
    run.add_argument("--depth", type=layer_count, default=4, metavar="L", help="blocks (default: %(default)s)")
    run.add_argument("--width", type=count(2), default=64, metavar="D", help="model width d (default: %(default)s)")
    run.add_argument("--d-ff", type=count(1), default=None, metavar="N", help="MLP width (default: --width)")
    run.add_argument("--seq-len", type=count(2), default=64, metavar="T",
                     help="tokens per sequence (default: %(default)s)")
    run.add_argument("--vocab-size", type=count(64), default=4096, metavar="V",
                     help="BPE vocabulary of the corpus (default: %(default)s)")
    opt = train.add_argument_group("optimiser (AdamW, linear warm-up and decay)")
    opt.add_argument("--steps", type=count(1), default=300, help="optimiser steps (default: %(default)s)")
    opt.add_argument("--batch-size", type=count(1), default=32, metavar="B",
                     help="sequences per step (default: %(default)s)")
    opt.add_argument("--lr", type=positive_real, default=1e-3, help="peak learning rate (default: %(default)s)")
    opt.add_argument("--warmup-ratio", type=nonnegative_real, default=0.05, metavar="R",
                     help="fraction of the steps of linear warm-up, in [0, 1) (default: %(default)s)")
    opt.add_argument("--weight-decay", type=nonnegative_real, default=0.01, metavar="W",
                     help="decoupled weight decay of the matrices (default: %(default)s)")
    opt.add_argument("--grad-clip", type=positive_real, default=1.0, metavar="C",
                     help="gradient-norm clip, 'inf' for none (default: %(default)s)")
    opt.add_argument("--mask-prob", type=positive_real, default=0.15, metavar="P",
                     help="masking probability, in (0, 1) (default: %(default)s)")
    opt.add_argument("--eval-every", type=count(1), default=25, metavar="N",
                     help="test loss and checkpoint every N steps (default: %(default)s)")
    opt.add_argument("--eval-batches", type=count(1), default=4, metavar="N",
                     help="held-out batches of the test loss (default: %(default)s)")
    opt.add_argument("--seed", type=count(0), default=0, help="initialisation and data order (default: %(default)s)")
    where = train.add_argument_group("where it runs")
    where.add_argument("--device", default="auto", help="auto (CUDA with bf16 autocast where available), cpu or "
                                                        "cuda[:n] (default: auto)")
    where.add_argument("--threads", type=count(1), default=1, metavar="N",
                       help="torch CPU threads (default: %(default)s; more rarely helps at these sizes)")
    train.add_argument("--json", action="store_true", help="print the result as JSON instead of a summary")
    add_output_options(train, out="remprop-train", name="train",
                       out_help="output folder, created if needed; a checkpoint there resumes the run")
    add_progress_option(train)
    add_architecture_arguments(train, theory_seq_len=False)


def _config(args, arch):
    from remprop.validation.training import TrainConfig

    fields = {name: getattr(args, name) for name in TRAIN_OPTIONS if " " not in name}
    try:
        return TrainConfig(arch=arch, **fields)
    except ValueError as err:
        message = one_line(err)
        option = next((o for k, o in TRAIN_OPTIONS.items() if " " in k and message.startswith(k)), None)
        if option:
            raise CommandLineError(f"{message} (option {option})") from None
        raise CommandLineError(point_at_option(message, TRAIN_OPTIONS)) from None


def run_train(args) -> int:
    """Train one stack; write OUT/NAME.json and OUT/NAME.png; print a summary (or --json)."""
    arch = architecture_from_args(args)
    directory = writable_directory(args.out)
    with validation_extra():
        from tqdm import tqdm

        from remprop.diagrams.training_figures import training_figure
        from remprop.validation.backend import torch_threads
        from remprop.validation.training import train

        config = _config(args, arch)
        try:
            from remprop.validation.backend import resolve_device

            resolve_device(config.device)
        except ValueError as err:
            raise CommandLineError(f"{one_line(err)} (option --device)") from None
        threads = contextlib.nullcontext() if args.threads is None else torch_threads(args.threads)
        with threads, tqdm(total=config.steps, disable=not show_progress(args), desc="train", unit="step",
                           file=sys.stderr) as bar:
            def progress(step, total):
                bar.update(step - bar.n)

            try:
                result = train(config, out=directory, progress=progress)
            except ValueError as err:
                # ARCHITECTURE_OPTIONS: model 'bert' refuses a block order other than post-LN ("norm must be ...")
                raise CommandLineError(point_at_option(err, {**ARCHITECTURE_OPTIONS, **TRAIN_OPTIONS,
                                                                        "out": "--out"})) from None
    summary = result.to_dict()
    json_path = directory / f"{args.name}.json"
    result.save(json_path)
    png_path = directory / f"{args.name}.png"
    training_figure(summary).savefig(png_path, dpi=120)
    if args.json:
        print(dumps({"files": [str(json_path), str(png_path)], **summary}))
    else:
        print(f"final test loss {result.final_test_loss:.4f} nats (unigram baseline {result.unigram_loss:.4f}, "
              f"at init {result.test_loss[0]:.4f}) after {config.steps} steps")
        print(f"wrote {json_path} and {png_path}")
    return 0
