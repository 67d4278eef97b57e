"""``remprop check``: a real model (Hugging Face config) at its default initialisation.

Here one sequence length ``--seq-len`` sets everything at once: the query/key scale beta
of the model (``s_qk^2 = beta sqrt(log T) / d``), the theory's finite-T maps and, with
``--simulate``, the tokens of each simulated sequence -- a model is checked at the T it
runs at, so the theory's T and the simulated T cannot differ. Its default is a length a
model is trained at, ``min(maximum context, DEFAULT_SEQ_LEN)``, not the maximum context.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from remprop._files import output_set

from ..converters import cosine, count, file_stem, layer_count, open_unit_real, positive_real
from ..errors import CommandLineError, validation_extra
from ..limits import check_work
from ..options import (ARCHITECTURE_OPTIONS, add_architecture_arguments, add_command, add_output_options,
                       add_progress_option, add_seeds_option, add_threads_option, add_work_limit_options,
                       architecture_overrides, point_at_option, work_limits)
from ..output import (FIGURE_SECONDS, SIMULATION_THREADS_TEXT, dumps, format_number, format_table, name_stem,
                      show_progress, writable_directory)

__all__ = ["add_check_parser", "run_check", "output_stem", "ANSWER_OPTIONS", "DEFAULT_SEQ_LEN"]

#: Default T of ``check``: ``min(the model's maximum context, DEFAULT_SEQ_LEN)``, the length a model is
#: pre-trained at for most of its steps (LLaMA 2 and 3 at 4096 and 8192 before long-context
#: extension, GPT-2 at 1024; 131072 for Llama 3.2 1B is an extension, not the training length).
DEFAULT_SEQ_LEN = 2048


def add_check_parser(commands):
    from remprop.diagrams import DEFAULT_THRESHOLD
    from remprop.diagrams.compared_theory import GRAM_DRAWS
    from remprop.theory import shipped_configs
    from remprop.theory.causal import AUTO_GRAM_FLOPS, CAUSAL_THEORIES, MAX_GRAM_SEQ_LEN
    from remprop.theory.learning_rate import DEFAULT_STEPS
    from remprop.theory.models.pretraining import SCHEDULES

    check = add_command(commands, "check", run_check,
                        help="diagnose a real model (Hugging Face config) at its default initialisation")
    check.add_argument("model", nargs="?", default=None, metavar="MODEL",
                       help="a shipped model name or a config path (same as --hf-config), or a folder with config.json "
                            "and *.safetensors (or pytorch_model.bin): the model measured on its own weights")
    check.add_argument("--hf-config", default=None, metavar="PATH|NAME",
                       help="a config.json (or its folder), or a shipped name: " + ", ".join(shipped_configs()))
    check.add_argument("--seq-len", type=count(2), default=None, metavar="T",
                       help="the model's sequence length T: it sets the model's beta, the theory's finite-T "
                            "maps and the tokens of each --simulate sequence (default: a length a model trains "
                            f"at, the smaller of the model's maximum context and {DEFAULT_SEQ_LEN})")
    check.add_argument("--depth", type=layer_count, default=None, metavar="L",
                       help="override the number of layers (default: the config's)")
    check.add_argument("--width", type=count(2), default=None, metavar="D",
                       help="a reduced (or widened) version: the config's width (hidden size); the MLP width scales "
                            "with it and the heads keep their width unless --heads is given (default: the config's)")
    check.add_argument("--heads", type=count(1), default=None, metavar="H",
                       help="with --width: the number of attention heads (default: the config's head width kept)")
    check.add_argument("--pixel-std", type=positive_real, default=1.0, metavar="S",
                       help="ViT: std of the i.i.d. input pixels (default: %(default)s)")
    check.add_argument("--rho0", type=cosine, default=None,
                       help="override the input cosine of two tokens that the embeddings give (default: "
                            "from the config, e.g. 1/3 for BERT's shared token-type embedding)")
    check.add_argument("--threshold", type=open_unit_real, default=DEFAULT_THRESHOLD, metavar="RHO",
                       help="rank-collapse threshold on the final cosine, in (0, 1) (default: %(default)s)")
    check.add_argument("--max-depth", type=layer_count, default=10_000, metavar="L",
                       help="deepest stack searched for the onset of rank collapse (default: %(default)s)")
    check.add_argument("--steps", type=count(1), default=DEFAULT_STEPS, metavar="S",
                       help="AdamW steps (warm-up and linear decay) of the predicted learning-rate ceiling, "
                            "docs/theory.md section 20 (default: %(default)s)")
    check.add_argument("--warmup", type=count(0), default=None, metavar="W",
                       help="linear warm-up steps of the ceiling's recipe, at most --steps (default: 5 %% of them, "
                            "the measured runs')")
    check.add_argument("--batch-tokens", type=count(1), default=None, metavar="B",
                       help="tokens per optimiser step of the recipe (reported; the measured runs took 1024)")
    check.add_argument("--beta2", type=open_unit_real, default=0.999, metavar="B2",
                       help="AdamW's beta2 of the recipe, in (0, 1) (default: %(default)s; the measured runs took "
                            "0.95 and 0.999)")
    check.add_argument("--schedule", choices=SCHEDULES, default="linear",
                       help="decay after the warm-up (default: %(default)s, the measured runs')")
    check.add_argument("--lr", type=positive_real, default=None, metavar="ETA",
                       help="your AdamW peak rate: the report says whether it lies below, within or above the "
                            "ceiling's measured band")
    check.add_argument("--simulate", action="store_true",
                       help="instantiate the model at random init and overlay measurements (torch, transformers); "
                            "a folder of weights runs those weights, --seeds drawing its inputs")
    add_seeds_option(check, what="initialisation seeds of --simulate")
    check.add_argument("--sequences", type=count(1), default=2, metavar="N",
                       help="random input sequences per initialisation (default: %(default)s)")
    check.add_argument("--device", default=None, help="torch device of --simulate (default: cuda if available)")
    check.add_argument("--causal-theory", choices=CAUSAL_THEORIES, default=None,
                       help="causal models: the theory of the last tokens' cosine, which gives the verdict (phase, "
                            "final cosine, alpha*, collapse depth, changes; the layer maps beside it) and is compared "
                            "with --simulate: 'maps' (per-position maps, fast) or 'gram' (the causal Gram state: each "
                            "late row with its true keys, the accurate one: by its fast method, O(draws T^2) per layer "
                            "and one T^3 / 3 factor); 'auto' "
                            f"(default) takes 'gram' when it runs the model at T <= {MAX_GRAM_SEQ_LEN} and the "
                            f"headline's Gram state (the model to twice its depth) takes at most {AUTO_GRAM_FLOPS:.0e} "
                            "floating-point operations, else 'maps'; alpha* and the changes by 'gram' too when the "
                            "whole verdict (about 9 x the depth) fits the same bound; the report says which and why")
    check.add_argument("--gram-draws", type=count(1), default=None, metavar="N",
                       help=f"Monte Carlo draws per attention layer of the causal Gram state (default: {GRAM_DRAWS})")
    add_output_options(check)
    add_work_limit_options(check)
    _add_what_if_options(check)
    add_progress_option(check)
    add_threads_option(check, what="CPU threads of the theory's numba kernels and of --simulate's torch",
                       default_text=f"all cores; with --simulate {SIMULATION_THREADS_TEXT}")
    check.add_argument("--name", type=file_stem, default=None,
                       help="file name stem (default: check-<model>, then -<option>=<value> for each option given "
                            "that changes the answer, e.g. check-meta-llama_Llama-3.2-1B-depth=64)")
    check.add_argument("--figure", action=argparse.BooleanOptionalAction, default=True,
                       help="write the PNG, or skip it (default: write it)")
    check.add_argument("--diagram", action="store_true",
                       help="also keep the trainability diagram around the model (its architecture, depth and input "
                            "state, as remprop.diagrams.trainability_diagram(model_spec(...)) gives it): "
                            "OUT/NAME.diagram.npz and .json, drawn in the PNG, alpha*(L) at the model's beta printed")
    check.add_argument("--json", action="store_true", help="print the report as JSON")
    # the defaults of the options that change the answer: a run that differs names its files by them
    check.set_defaults(answer_defaults={dest: check.get_default(dest) for dest, _ in ANSWER_OPTIONS + SIMULATE_OPTIONS})


#: (dest, option) of the options besides --seq-len, the what-if overrides and --simulate's
#: --seeds/--sequences that change what ``check`` reports: a value other than the default is part of
#: the default file name (:func:`output_stem`), so that runs that differ do not overwrite each other.
ANSWER_OPTIONS = (("depth", "--depth"), ("width", "--width"), ("heads", "--heads"), ("pixel_std", "--pixel-std"),
                  ("rho0", "--rho0"), ("threshold", "--threshold"), ("max_depth", "--max-depth"),
                  ("steps", "--steps"), ("warmup", "--warmup"), ("batch_tokens", "--batch-tokens"),
                  ("beta2", "--beta2"), ("schedule", "--schedule"), ("lr", "--lr"),
                  ("causal_theory", "--causal-theory"),
                  ("gram_draws", "--gram-draws"))
#: The options of --simulate that change its measurement (named in the file stem as :data:`ANSWER_OPTIONS`).
SIMULATE_OPTIONS = (("seeds", "--seeds"), ("sequences", "--sequences"))


def output_stem(args, spec, length, overrides) -> str:
    """The default file stem of a check: ``check-<model>``, then ``-<option>=<value>`` for every option
    given that changes the answer (:data:`ANSWER_OPTIONS`, ``--seq-len`` other than the default T,
    the what-if overrides, and with --simulate ``--seeds``/``--sequences`` other than their defaults),
    in a fixed order: ``check llama-3.2-1b --depth 64`` writes ``check-meta-llama_Llama-3.2-1B-depth=64.png``,
    the default run ``check-meta-llama_Llama-3.2-1B.png``."""
    import re

    tokens = []
    if length["source"] == "--seq-len" and length["seq_len"] != min(length["max_seq_len"], DEFAULT_SEQ_LEN):
        tokens.append(("--seq-len", length["seq_len"]))
    defaults = getattr(args, "answer_defaults", {})
    tokens += [(option, getattr(args, dest)) for dest, option in ANSWER_OPTIONS
               if dest in defaults and getattr(args, dest) != defaults[dest]]
    tokens += sorted(overrides.items())
    if args.simulate:
        tokens += [(option, getattr(args, dest)) for dest, option in SIMULATE_OPTIONS
                   if dest in defaults and getattr(args, dest) != defaults[dest]]

    def text(value):
        if value is True:
            return ""
        if isinstance(value, (list, tuple)):  # seeds: a count N stands for 0..N-1
            return str(len(value)) if list(value) == list(range(len(value))) else ",".join(map(str, value))
        return format_number(value) if isinstance(value, float) else str(value)

    def token(option, value):  # "depth=64"; a flag given: its name alone
        shown = text(value)
        return re.sub(r"[^A-Za-z0-9._=-]+", "_", option.lstrip("-") + (f"={shown}" if shown else ""))

    suffix = "".join("-" + token(option, value) for option, value in tokens)
    return name_stem(spec.name, "check-") + suffix


def _add_what_if_options(check) -> None:
    """The architecture options (``--alpha``, ``--norm``, ``--sigma-w2``, ...) and ``--beta`` as
    overrides of the model's settings: the report shows the model before and after."""
    group = add_architecture_arguments(check, theory_seq_len=False, model_overrides=True, exclude=("heads",))
    group.add_argument("--beta", type=positive_real, default=None, metavar="B",
                       help="query/key scale beta > 0 (s_qk^2 = beta sqrt(log T) / d) (default: the model's, "
                            "from its initializer_range)")


def run_check(args) -> int:
    """Diagnose a real transformer (Hugging Face config) at its library's default initialisation.

    Reported: its query/key scale beta against beta_c, its skip strength against alpha*(L), the
    phase, the predicted cosine per layer, the depth at which rank collapse sets in, the query
    gradient scale, and changes (skip scaling, query/key std, LayerNorm placement, gain-
    controlled attention) with their predicted effect. Writes OUT/NAME.png (the model on its
    trainability diagram) and OUT/NAME.json. --simulate instantiates the model at random init
    (no weights are downloaded; needs the validation extra) and overlays the measured cosines (a
    folder of weights: those weights run, :mod:`remprop.validation.own_simulation`);
    each finished seed is kept in OUT/NAME.simulation/ (a folder of weights: in its subfolder
    weights-<digest of those weights>/), so an interrupted run resumes; the
    report ends with one verdict line (agree or disagree by
    :func:`remprop.validation.agreement.acceptance_error`, the worst layer).
    A model whose parameters would take more than half the available memory is measured one block
    at a time, the block redrawn for each layer (:mod:`remprop.validation.streamed_layers`).
    T defaults to a length models train at, min(maximum context, 2048), and the report says so.
    A causal model's last tokens are predicted by the best theory affordable at T: the causal
    Gram state where it can run within the work bound, else the per-position maps
    (--causal-theory, see :func:`remprop.diagrams.compared_theory.last_tokens_theory`); the report,
    the JSON (``last_tokens_theory``, ``last_tokens_theory_reason``; with --simulate
    ``simulation.causal_theory``, ``theory_label``, ``theory_reason``) and the figure name it.
    The time and memory of the diagnosis (the causal Gram state included) and the memory of one
    simulated block are estimated first: above --max-seconds or --max-memory the run is refused.
    The report prints at most 1001 evenly spread layers (--json gives all).
    Margins: alpha_SA / alpha*, beta / beta_c, the fall of the query gradient over the stack and
    the collapse depth, with a graded verdict (comfortable, marginal, rank or entropy collapse;
    JSON schema in docs/real_models.md section 3). What-if: the architecture options (--alpha,
    --norm, --sigma-w2, ...) and --beta override the model's settings; the report shows the model
    before and after. --diagram keeps the trainability diagram around the model
    (OUT/NAME.diagram.npz, .json), the one :func:`remprop.diagrams.trainability_diagram` gives
    from the model's spec and input state.
    """
    from .simulation import startup_seconds

    # the one-time costs of --simulate, read before anything imports torch (a reduced --width does, in _model_spec)
    startup = startup_seconds(figure=args.figure, model=True) if args.simulate else 0.0
    spec, length = _model_spec(args)
    directory = writable_directory(args.out)
    theory = _theory_choice(args)
    changed, overrides = _what_if(spec, args)
    stem = directory / (args.name or output_stem(args, spec, length, overrides))
    _check_work(args, spec, theory, startup)
    if overrides:
        _check_work(args, changed, theory)
    before = None
    if overrides:
        before, spec = _diagnose(spec, args, theory), changed
    diagnosis = _diagnose(spec, args, theory)
    measured = None
    if args.simulate:
        compared = _compared_theory(diagnosis)
        progress = show_progress(args)  # the simulated layers, with their ETA (remprop.progress)
        with validation_extra(option="--simulate"):
            from remprop.validation import simulate_model
            from remprop.validation.own_simulation import simulate_own_weights

            if spec.weights is not None:  # a folder of weights: those weights run, the seeds draw the inputs
                measurement = simulate_own_weights(args.model or args.hf_config, spec=spec, seeds=args.seeds,
                                                   sequences=args.sequences, device=args.device,
                                                   theory=compared["rho"], progress=progress is True,
                                                   store=Path(f"{stem}.simulation"))
            else:
                measurement = simulate_model(spec, seeds=args.seeds, sequences=args.sequences, device=args.device,
                                             theory=compared["rho"], progress=progress,
                                             store=Path(f"{stem}.simulation"))
        measured = {**measurement.summary(), "weights": "own" if spec.weights is not None else "random init"}
        measured.update({key: value for key, value in compared.items() if key != "rho"})
    result = diagnosis.to_dict()
    result["seq_len_choice"] = length
    if before is not None:
        result["what_if"] = {"overrides": overrides, "before": before.summary(), "after": diagnosis.summary()}
    if measured is not None:
        result["simulation"] = measured
    # every file of the run is written as one set: staged, then renamed into place under the folder's
    # lock, so that two runs with the same --out and --name leave one run's files, never a mix
    with output_set(directory) as outputs:
        files, diagram = _write_outputs(args, outputs, stem.name, diagnosis, measured, result, spec)
    result["files"] = files
    if args.json:
        print(dumps(result))
        return 0
    print(_length_line(length))
    print(diagnosis.report())
    if before is not None:
        _print_what_if(overrides, before, diagnosis)
    if measured is not None:
        _print_simulation(measured)
    if diagram is not None:
        print(f"\ntrainability diagram around the model ({diagram.betas.size} betas x {diagram.alphas.size} alphas, "
              f"from the model's q0 = {spec.q0:.4g}, rho0 = {spec.rho0:.4g}): alpha*(L = {spec.depth}) at the "
              f"model's beta = {format_number(result['diagram']['alpha_star'], 4)}")
    print("wrote " + ", ".join(files))
    if measured is not None:  # the last line: agree or not, by which rule, and where it is worst
        print(_verdict_text(measured["agreement"]))
    return 0


def _write_outputs(args, outputs, name, diagnosis, measured, result, spec):
    """Write the run's files into ``outputs`` (an :class:`~remprop._files.OutputSet`, names ``name.*``):
    with --diagram ``name.diagram.npz``/``.json``, the PNG unless --no-figure, and the JSON. Returns
    the files' final paths and the diagram (or None)."""
    files, diagram = [], None
    if args.diagram:
        diagram, staged = _diagram(diagnosis, outputs.path(name))
        written = [str(outputs.final(path)) for path in staged]
        files += written
        result["diagram"] = {"files": written, "alpha_star": _diagram_alpha_star(diagram, spec.beta),
                             "betas": [float(diagram.betas[0]), float(diagram.betas[-1]), int(diagram.betas.size)],
                             "alphas": [float(diagram.alphas[0]), float(diagram.alphas[-1]), int(diagram.alphas.size)]}
    if args.figure:
        from remprop.diagrams import model_figure

        figure = model_figure(diagnosis, measured, diagram=diagram)
        figure.savefig(outputs.path(f"{name}.png"), dpi=120)
        files.append(str(outputs.final(f"{name}.png")))
    outputs.path(f"{name}.json").write_text(dumps(result) + "\n")
    files.append(str(outputs.final(f"{name}.json")))
    return files, diagram


def _verdict_text(agreement) -> str:
    """The verdict line of a --simulate comparison (:func:`remprop.validation.agreement.verdict_line`)."""
    with validation_extra(option="--simulate"):
        from remprop.validation.agreement import verdict_line

    return verdict_line(agreement)


def _model_spec(args):
    """The checked model (MODEL or --hf-config at --seq-len, reduced by --depth/--width/--heads,
    --rho0) and how its T was chosen: ``{"seq_len", "max_seq_len", "source"}`` with source
    ``"--seq-len"`` or ``"default"`` (``min(max_seq_len, DEFAULT_SEQ_LEN)``)."""
    from remprop.theory import model_spec
    from remprop.theory.models.measured_weights import TORCH_WEIGHT_FILES, holds_weights, unread_weight_files

    if (args.hf_config is None) == (args.model is None):
        raise CommandLineError("give the model once: a shipped name or config path as MODEL or --hf-config")
    config = args.hf_config if args.hf_config is not None else args.model
    if holds_weights(config):  # a folder with the model's own weights: measured, not the library's init
        from remprop.theory.models.hf_config import load_hf_config

        longest = model_spec(load_hf_config(config)).seq_len  # its maximum context, from config.json alone
        seq_len = args.seq_len if args.seq_len is not None else min(longest, DEFAULT_SEQ_LEN)
        spec = _own_weights_spec(args, config, seq_len)  # the weights are read and measured once
        if args.rho0 is not None:
            spec = spec.with_settings(rho0=args.rho0)
        return spec, {"seq_len": spec.seq_len, "max_seq_len": longest,
                      "source": "--seq-len" if args.seq_len is not None else "default"}
    unread = unread_weight_files(config)
    if unread:  # checked at the default init, these weights would be silently ignored
        raise CommandLineError(f"{config} holds {unread[0].name} but no weights remprop reads (*.safetensors, "
                               f"{', '.join(TORCH_WEIGHT_FILES)}): save them with save_pretrained, or give "
                               f"--hf-config {Path(config) / 'config.json'} to check the configuration at its "
                               "default initialisation")
    spec = model_spec(config, pixel_std=args.pixel_std)  # at the model's maximum context
    longest = spec.seq_len
    seq_len = args.seq_len if args.seq_len is not None else min(longest, DEFAULT_SEQ_LEN)
    # a ViT's T is fixed by its image: its default stays, a --seq-len is checked by model_spec
    if args.seq_len is not None or (seq_len != longest and spec.family != "vit"):
        spec = model_spec(config, seq_len=seq_len, pixel_std=args.pixel_std)
    if args.width is not None or args.heads is not None:
        with validation_extra(option="--width"):
            from remprop.validation.hf_models import reduced_spec

            spec = reduced_spec(spec, depth=args.depth, width=args.width, heads=args.heads)
    elif args.depth is not None:
        spec = spec.with_depth(args.depth)
    if args.rho0 is not None:
        spec = spec.with_settings(rho0=args.rho0)
    return spec, {"seq_len": spec.seq_len, "max_seq_len": longest,
                  "source": "--seq-len" if args.seq_len is not None else "default"}


def _diagram(diagnosis, stem):
    """The trainability diagram around the diagnosed model (:func:`remprop.diagrams.model_diagram`:
    the model's architecture, depth and input state), saved as ``STEM.diagram.npz`` and ``.json``."""
    from remprop.diagrams import model_diagram

    diagram = model_diagram(diagnosis)
    return diagram, [str(path) for path in diagram.save(f"{stem}.diagram")]


def _diagram_alpha_star(diagram, beta) -> float:
    """alpha*(L) of the diagram at the model's beta (linear between the two nearest grid betas)."""
    import numpy as np

    alpha_star = np.asarray(diagram.alpha_star, dtype=float)
    return float(np.interp(beta, diagram.betas, alpha_star))


def _what_if(spec, args):
    """(the model with the what-if options applied, {option: value} of those given); ({}: none given).

    The architecture options replace the fields of ``spec.architecture``, ``--beta`` its query/key
    scale; a value the Architecture refuses is one line naming the option. --simulate measures
    the model its config builds, so it does not combine with overrides.
    """
    fields = architecture_overrides(args)
    fields.pop("heads", None)  # check's own --heads sizes a reduced model (with --width), not a what-if
    options = {ARCHITECTURE_OPTIONS[name]: value for name, value in fields.items()}
    if args.beta is not None:
        options["--beta"] = args.beta
    if not options:
        return spec, {}
    if args.simulate:
        raise CommandLineError(f"{', '.join(options)}: what-if overrides change the theory's model only; "
                               "--simulate measures the model its config builds (leave one out)")
    try:
        arch = spec.architecture.replace(**fields)
    except ValueError as err:
        raise CommandLineError(point_at_option(err, ARCHITECTURE_OPTIONS)) from None
    changes = {"arch": arch}
    if args.beta is not None:
        changes["beta"] = args.beta
    return spec.with_settings(**changes), {option: _plain(value) for option, value in options.items()}


def _plain(value):
    """An option's value as JSON writes it (an enum choice as its string)."""
    return getattr(value, "value", value)


def _print_what_if(overrides, before, after) -> None:
    """The before/after table of the what-if options (:meth:`remprop.diagrams.Diagnosis.summary`)."""
    given = " ".join(f"{option} {value}" if value is not True else option for option, value in overrides.items())
    old, new = before.summary(), after.summary()
    rows = [(key, _cell(old[key]), _cell(new[key])) for key in old if key != "verdict"]
    rows.append(("verdict", old["verdict"], new["verdict"]))
    print(f"\nwhat-if: the model as its config builds it, and with {given}")
    print(format_table(("", "model", "with " + given), rows))


def _cell(value) -> str:
    if value is None:
        return "-"
    return format_number(value, 4) if isinstance(value, float) else str(value)


def _length_line(length) -> str:
    """The report's first line: the T checked and where it comes from."""
    if length["source"] == "--seq-len":
        return f"sequence length  T = {length['seq_len']} (--seq-len; the model's maximum context: {length['max_seq_len']})"
    return (f"sequence length  T = {length['seq_len']} (default: the smaller of the model's maximum context "
            f"{length['max_seq_len']} and {DEFAULT_SEQ_LEN}, a length models train at; --seq-len sets it)")


def _theory_choice(args):
    """(choice, draws) of the causal theory: --causal-theory (default auto) and --gram-draws."""
    from remprop.diagrams.compared_theory import GRAM_DRAWS

    if args.causal_theory == "maps" and args.gram_draws is not None:
        raise CommandLineError("--gram-draws applies to the causal Gram state: --causal-theory maps draws nothing "
                               "(drop --gram-draws, or use --causal-theory gram or auto)")
    return (args.causal_theory or "auto", GRAM_DRAWS if args.gram_draws is None else args.gram_draws)


#: Recipe field -> the option that sets it.
RECIPE_OPTIONS = {"steps": "--steps", "warmup_steps": "--warmup", "batch_tokens": "--batch-tokens", "beta2": "--beta2",
                  "schedule": "--schedule"}


def _recipe(args):
    """The ceiling's :class:`~remprop.theory.learning_rate.Recipe` from --steps, --warmup, --batch-tokens,
    --beta2 and --schedule (a bad combination is one line naming the option)."""
    from remprop.theory.learning_rate import Recipe

    try:
        return Recipe(args.steps, args.warmup, args.batch_tokens, args.beta2, args.schedule)
    except ValueError as err:
        raise CommandLineError(point_at_option(err, RECIPE_OPTIONS)) from None


def _diagnose(spec, args, theory):
    """:func:`remprop.diagrams.diagnose` of ``spec`` with the causal theory ``theory`` = (choice, draws)."""
    from remprop.diagrams import diagnose

    choice, draws = theory
    try:
        return diagnose(spec, args.threshold, max_depth=args.max_depth, causal_theory=choice, gram_draws=draws,
                        lr_steps=args.steps, lr=args.lr, recipe=_recipe(args))
    except ValueError as err:
        if "causal_theory" in str(err):
            raise CommandLineError(f"--causal-theory {choice}: {err}") from None
        raise


def _print_simulation(measured) -> None:
    """The text report of a --simulate run: its comparison with the theory, layer by layer."""
    streamed = ", one block redrawn per layer (the model does not fit)" if measured.get("streamed") else ""
    what = ("on its own weights (input seeds: " if measured.get("weights") == "own" else "at random init (")
    print(f"\nsimulated {what}{len(measured['seeds'])} seeds x {measured['sequences']} "
          f"sequences, {measured['compared']}{streamed}): |theory - measured| max {measured['max_error']:.4f}, "
          f"mean {measured['mean_error']:.4f}" + _z_text(measured["max_abs_z"]))
    print(f"theory compared: {measured['theory_label']}" + (
        f" ({measured['theory_reason']})" if measured.get("theory_reason") else ""))
    rows = [(str(layer), format_number(t, 4), format_number(m, 4), format_number(e, 3))
            for layer, (t, m, e) in enumerate(zip(measured["theory"], measured["rho_mean"], measured["rho_std"]))]
    print(format_table(("layer", "theory", "measured", "std over seeds"), rows))


def _own_weights_spec(args, folder, seq_len):
    """``remprop check DIR`` on a folder of safetensors weights: the model measured on them
    (:func:`remprop.validation.own_weights.own_weights_spec`); options that resize or redraw it are refused."""
    for option, value in (("--width", args.width), ("--heads", args.heads), ("--depth", args.depth)):
        if value is not None:
            raise CommandLineError(f"{option} does not apply to {folder}: its weights are measured as they are")
    with validation_extra(option="MODEL (a folder of weights)"):
        from remprop.validation.own_weights import own_weights_spec

        return own_weights_spec(folder, seq_len=seq_len)


def _check_work(args, spec, theory, startup=0.0) -> None:
    """Refuse a check whose estimated work exceeds --max-seconds or --max-memory (one line with the estimate).

    The diagnosis (:func:`~remprop.diagrams.diagnosis_work.diagnosis_seconds`, ``diagnosis_bytes``:
    the model's depth, --max-depth, rotary heads and, where it is the last tokens' theory, the
    causal Gram state: :func:`~remprop.theory.causal.causal_gram_flops` at
    :data:`~remprop.theory.work_estimates.FLOPS_PER_SECOND`); with --simulate the tensors of one
    block of --sequences sequences (:func:`~remprop.theory.work_estimates.simulation_bytes`: a
    model too large for memory is run one block at a time); the figure unless --no-figure
    (:data:`~remprop.cli.output.FIGURE_SECONDS`, and the trainability diagram it draws the model on, as
    --diagram's); ``startup``: --simulate's one-time costs, torch, transformers,
    the model and the figure (:func:`~remprop.cli.commands.simulation.startup_seconds` when the command starts).
    """
    from remprop.diagrams.compared_theory import last_tokens_theory
    from remprop.diagrams.diagnosis_work import diagnosis_bytes, diagnosis_seconds
    from remprop.theory import work_estimates as work

    from .simulation import simulation_time

    limits = work_limits(args)
    model = f"{spec.name} ({spec.depth} layers, d = {spec.width}, T = {spec.seq_len})"
    choice, draws = theory
    # the causal theory first: a choice that cannot run is the input's error, before any estimate
    try:
        chosen = last_tokens_theory(spec, choice, draws, args.max_depth)
    except ValueError as err:
        raise CommandLineError(f"--causal-theory {choice}: {err}") from None
    if args.simulate:
        seconds = startup + len(args.seeds) * simulation_time(args.device, spec.width, spec.seq_len, args.sequences,
                                                              spec.depth, d_ff=spec.d_ff, passes=2 if spec.causal else 1)
        check_work(f"simulating {len(args.seeds)} seed(s) x {args.sequences} sequence(s) of {model} (--seeds, "
                   "--sequences, --seq-len, --width)", seconds=seconds,
                   nbytes=work.simulation_bytes(spec.width, spec.seq_len, args.sequences, 4, d_ff=spec.d_ff,
                                                heads=spec.heads), **limits)
    gram = f" and the causal Gram state with {draws} draws (--gram-draws)" if chosen and chosen[0] == "gram" else ""
    check_work(f"the diagnosis of {model} with --max-depth {args.max_depth}{gram}",
               seconds=diagnosis_seconds(spec, max_depth=args.max_depth, causal_theory=choice, gram_draws=draws)
               + (FIGURE_SECONDS if args.figure and not args.simulate else 0.0),  # --simulate's: in its startup
               nbytes=diagnosis_bytes(spec, max_depth=args.max_depth, causal_theory=choice, gram_draws=draws),
               **limits)
    if args.diagram or args.figure:  # the figure draws the model on the same diagram (96 layers: 10 s of it)
        from remprop.diagrams.model_figures import MODEL_DIAGRAM_RESOLUTION as n
        from remprop.diagrams.residual_strength import search_seconds

        check_work(f"the trainability diagram around {model} ({n} x {n} cells, "
                   f"{'--diagram' if args.diagram else 'for the figure'})",
                   seconds=work.run_seconds(spec.architecture, n * n, spec.depth)
                   + search_seconds(spec.architecture, spec.depth, n),
                   nbytes=work.diagram_bytes(n, n), **limits)


def _compared_theory(diagnosis) -> dict:
    """The predicted cosine per layer that ``--simulate`` compares with -- the diagnosis' own
    (:attr:`~remprop.diagrams.Diagnosis.compared_rho`: for a causal model the last tokens by the
    theory :func:`~remprop.diagrams.compared_theory.last_tokens_theory` chose) -- and which theory it is.

    Returns ``{"rho", "causal_theory", "theory_label", "theory_reason"[, "gram_draws"]}``.
    """
    from remprop.diagrams.compared_theory import CAUSAL_THEORY_LABELS

    name = diagnosis.last_tokens_theory
    out = {"rho": diagnosis.compared_rho, "causal_theory": name,
           "theory_label": CAUSAL_THEORY_LABELS[name] if name else "layer maps",
           "theory_reason": diagnosis.last_tokens_reason}
    if name == "gram":
        out["gram_draws"] = diagnosis.gram_draws
    return out


def _z_text(z) -> str:
    return "" if z is None else f", max |z| {z:.2f}"
