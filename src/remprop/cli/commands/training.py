"""``remprop train``: one masked-LM training run of the simulated stack (validation extra).

The stack is the simulator's (``--norm``, ``--alpha``, ``--heads``, ... and ``--beta``
mean what they mean everywhere else); it is trained on the pydoc topics with the
reference recipe (:mod:`remprop.validation.training`). Writes ``OUT/NAME.json``
(:meth:`remprop.validation.training.TrainResult.to_dict`) and ``OUT/NAME.png`` (:func:`remprop.diagrams.training_figures.training_figure`);
``OUT/checkpoint.pt`` makes an interrupted run resume where it stopped (a damaged one is
moved aside with a warning and the run starts again; a second run on the same folder is
refused). ``--model bert`` trains Hugging Face ``BertForMaskedLM`` holding the same initial
weights (:mod:`remprop.validation.training.hf_model`; post-LN BERT only: options it has no
place for are refused).

Before it starts, the run's memory and time are estimated
(:mod:`remprop.validation.training.work`) and refused above ``--max-memory`` /
``--max-seconds`` (exit status 2, one line with the estimate). A run whose loss or weights
stop being finite stops there, writes its files (``diverged`` in the JSON) and exits with
status 2, one line saying at which step and why.
"""
from __future__ import annotations

import contextlib

from remprop.progress import progress_bar

from ..converters import count, layer_count, nonnegative_real, positive_real
from ..errors import CommandLineError, one_line, validation_extra
from ..limits import check_work
from ..options import (ARCHITECTURE_OPTIONS, add_architecture_arguments, add_command, add_output_options,
                       add_progress_option, add_work_limit_options, architecture_from_args, point_at_option,
                       work_limits)
from ..output import dumps, show_progress, writable_directory, writable_file

__all__ = ["add_train_parser", "run_train", "TRAIN_OPTIONS", "training_architecture", "check_training_work"]

#: TrainConfig field -> option, to name the option of a rejected value.
TRAIN_OPTIONS = {"beta": "--beta", "depth": "--depth", "width": "--width", "seq_len": "--seq-len",
                 "batch_size": "--batch-size", "steps": "--steps", "lr": "--lr", "warmup_ratio": "--warmup-ratio",
                 "weight_decay": "--weight-decay", "grad_clip": "--grad-clip", "mask_prob": "--mask-prob",
                 "eval_every": "--eval-every", "eval_batches": "--eval-batches", "seed": "--seed",
                 "device": "--device", "model": "--model", "vocab_size": "--vocab-size", "d_ff": "--d-ff",
                 "compile": "--compile", "width must be divisible": "--width"}


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
    where.add_argument("--compile", nargs="?", const=True, default=False, metavar="MODE",
                       help="run the training steps' blocks through torch.compile (mode: reduce-overhead on "
                            "CUDA, default elsewhere; or name one: default, reduce-overhead, max-autotune, "
                            "max-autotune-no-cudagraphs); off unless given")
    where.add_argument("--threads", type=count(1), default=1, metavar="N",
                       help="torch CPU threads (default: %(default)s; more rarely helps at these sizes)")
    train.add_argument("--json", action="store_true", help="print the result as JSON instead of a summary")
    add_output_options(train, out="remprop-train", name="train",
                       out_help="output folder, created if needed; a checkpoint there resumes the run")
    add_progress_option(train)
    add_work_limit_options(train)
    add_architecture_arguments(train, theory_seq_len=False)


def training_architecture(args, **overrides):
    """The Architecture of a training command: its T is ``--seq-len`` where the architecture
    needs one (rotary positions, QK-norm), as the trained sequences have that length."""
    if getattr(args, "positions", None) == "rope" or getattr(args, "qk_norm", False):
        overrides.setdefault("seq_len", args.seq_len)
    return architecture_from_args(args, **overrides)


def check_training_work(args, config, vocab_size, runs=1, parallel=1, task=None, startup=0.0):
    """Refuse training above --max-memory / --max-seconds (one line with the estimate).

    ``runs`` training runs of ``config`` (``parallel`` at a time), on ``config.device``, and ``startup``
    seconds of the command's one-time costs (``remprop.cli.commands.simulation.startup_seconds``).
    """
    from remprop.validation.backend import resolve_device
    from remprop.validation.training.work import training_bytes, training_seconds

    parallel = max(1, min(parallel, runs))
    nbytes = training_bytes(config, vocab_size) * parallel
    seconds = startup + training_seconds(config, vocab_size, resolve_device(config.device)) * runs / parallel
    task = task or (f"training {config.steps} steps of depth {config.depth}, width {config.width}, "
                    f"{config.batch_size} x {config.seq_len} tokens, vocabulary {vocab_size}")
    check_work(task, seconds=seconds, nbytes=nbytes, **work_limits(args))


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
        raise CommandLineError(point_at_option(message, {**ARCHITECTURE_OPTIONS, **TRAIN_OPTIONS})) from None


def run_train(args) -> int:
    """Train one stack; write OUT/NAME.json and OUT/NAME.png; print a summary (or --json) ending with
    the verdict: the theory's phase at init beside the final test loss against the unigram loss
    (:func:`remprop.validation.training.trained_diagram.run_verdict`). Its estimate counts the one-time costs
    beside the training: importing torch, the first optimiser and the figure
    (``remprop.cli.commands.simulation.startup_seconds``, read before anything imports torch)."""
    from .simulation import startup_seconds

    startup = startup_seconds(figure=True, optimiser=True)
    arch = training_architecture(args)
    directory = writable_directory(args.out)
    json_path, png_path = directory / f"{args.name}.json", directory / f"{args.name}.png"
    for path in (json_path, png_path):
        writable_file(path, "--out")
    with validation_extra():
        from remprop.diagrams.training_figures import training_figure
        from remprop.validation.backend import torch_threads
        from remprop.validation.training import masked_lm_corpus, train

        config = _config(args, arch)
        try:
            from remprop.validation.backend import resolve_device

            resolve_device(config.device)
        except ValueError as err:
            raise CommandLineError(f"{one_line(err)} (option --device)") from None
        threads = contextlib.nullcontext() if args.threads is None else torch_threads(args.threads)
        with threads:
            try:
                corpus = masked_lm_corpus(config.vocab_size)
                corpus.check_seq_len(config.seq_len)
            except ValueError as err:
                raise CommandLineError(point_at_option(err, TRAIN_OPTIONS)) from None
            check_training_work(args, config, corpus.vocab_size, startup=startup)
            with progress_bar(config.steps, enabled=show_progress(args), desc="train", unit="step") as bar:
                def progress(step, total):
                    bar.update(step - bar.n)

                try:
                    result = train(config, out=directory, progress=progress)
                except ValueError as err:
                    # ARCHITECTURE_OPTIONS: model 'bert' refuses a block order other than post-LN ("norm must be ...")
                    raise CommandLineError(point_at_option(err, {**ARCHITECTURE_OPTIONS, **TRAIN_OPTIONS,
                                                                            "out": "--out"})) from None
    summary = result.to_dict()
    result.save(json_path)
    training_figure(summary).savefig(png_path, dpi=120)
    if result.diverged is not None:
        step, reason = result.diverged["step"], result.diverged["reason"]
        where = "at initialisation" if step == 0 else f"at step {step} of {config.steps}"
        raise CommandLineError(f"the run diverged {where}: {reason}; recorded as diverged in {json_path} "
                               "(a smaller --lr, --beta or --alpha may train)")
    from remprop.validation.training.trained_diagram import run_verdict

    verdict = run_verdict(result)
    if args.json:
        print(dumps({"files": [str(json_path), str(png_path)], **summary, "verdict": verdict}))
    else:
        print(f"final test loss {result.final_test_loss:.4f} nats (unigram baseline {result.unigram_loss:.4f}, "
              f"at init {result.test_loss[0]:.4f}) after {config.steps} steps")
        print(f"wrote {json_path} and {png_path}")
        print(verdict["line"])
    return 0
