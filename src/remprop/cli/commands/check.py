"""``remprop check``: a real model (Hugging Face config) at its default initialisation.

Here one sequence length ``--seq-len`` sets everything at once: the query/key scale beta
of the model (``s_qk^2 = beta sqrt(log T) / d``), the theory's finite-T maps and, with
``--simulate``, the tokens of each simulated sequence -- a model is checked at the T it
runs at, so the theory's T and the simulated T cannot differ.
"""
from __future__ import annotations

from pathlib import Path

from ..converters import cosine, count, file_stem, layer_count, open_unit_real, positive_real
from ..errors import CommandLineError, validation_extra
from ..limits import check_work
from ..options import (add_command, add_output_options, add_progress_option, add_seeds_option, add_threads_option,
                       add_work_limit_options, work_limits)
from ..output import dumps, format_number, format_table, show_progress, writable_directory

__all__ = ["add_check_parser", "run_check"]


def add_check_parser(commands):
    from remprop.diagrams import DEFAULT_THRESHOLD
    from remprop.theory import shipped_configs
    from remprop.theory.causal import CAUSAL_THEORIES

    check = add_command(commands, "check", run_check,
                        help="diagnose a real model (Hugging Face config) at its default initialisation")
    check.add_argument("model", nargs="?", default=None, metavar="MODEL",
                       help="a shipped model name or a config path (same as --hf-config)")
    check.add_argument("--hf-config", dest="config", default=None, metavar="PATH|NAME",
                       help="a config.json (or its folder), or a shipped name: " + ", ".join(shipped_configs()))
    check.add_argument("--seq-len", type=count(2), default=None, metavar="T",
                       help="the model's sequence length T: it sets the model's beta, the theory's finite-T "
                            "maps and the tokens of each --simulate sequence (default: the model's maximum)")
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
    check.add_argument("--simulate", action="store_true",
                       help="instantiate the model at random init and overlay measurements (torch, transformers)")
    add_seeds_option(check, what="initialisation seeds of --simulate")
    check.add_argument("--sequences", type=count(1), default=2, metavar="N",
                       help="random input sequences per initialisation (default: %(default)s)")
    check.add_argument("--device", default=None, help="torch device of --simulate (default: cuda if available)")
    check.add_argument("--causal-theory", choices=CAUSAL_THEORIES, default=None,
                       help="with --simulate on a causal model: the theory the last tokens are compared with, "
                            "'maps' (per-position maps, fast) or 'gram' (the causal Gram state: each late row "
                            "with its true keys, O(draws T^3) per layer); 'auto' (default) takes 'gram' when it "
                            "runs the model at T <= 4096 within 1e12 floating-point operations, else 'maps'")
    check.add_argument("--gram-draws", type=count(1), default=None, metavar="N",
                       help="Monte Carlo draws per attention layer of the causal Gram state (default: 8)")
    add_output_options(check)
    add_work_limit_options(check)
    add_progress_option(check)
    add_threads_option(check, what="CPU threads of the theory's numba kernels and of --simulate's torch")
    check.add_argument("--name", type=file_stem, default=None, help="file name stem (default: check-<model>)")
    check.add_argument("--no-figure", dest="figure", action="store_false", help="skip the PNG")
    check.add_argument("--json", action="store_true", help="print the report as JSON")


def run_check(args) -> int:
    """Diagnose a real transformer (Hugging Face config) at its library's default initialisation.

    Reported: its query/key scale beta against beta_c, its skip strength against alpha*(L), the
    phase, the predicted cosine per layer, the depth at which rank collapse sets in, the query
    gradient scale, and changes (skip scaling, query/key std, LayerNorm placement, gain-
    controlled attention) with their predicted effect. Writes OUT/NAME.png (the model on its
    trainability diagram) and OUT/NAME.json. --simulate instantiates the model at random init
    (no weights are downloaded; needs the validation extra) and overlays the measured cosines;
    each finished initialisation is kept in OUT/NAME.simulation/, so an interrupted run resumes.
    A model whose parameters would take more than half the available memory is measured one block
    at a time, the block redrawn for each layer (:mod:`remprop.validation.streamed_layers`).
    Causal models are compared with the per-position maps or the causal Gram state
    (--causal-theory, see :func:`remprop.theory.causal.choose_causal_theory`); the report, the
    JSON (``simulation.causal_theory``, ``theory_label``, ``theory_reason``) and the figure name it.
    The time and memory of the diagnosis, the memory of one simulated block and the time of the
    causal Gram state are estimated first: above --max-seconds or --max-memory the run is refused.
    The report prints at most 1001 evenly spread layers (--json gives all).
    """
    import re

    from remprop.diagrams import diagnose
    from remprop.theory import model_spec

    if (args.config is None) == (args.model is None):
        raise CommandLineError("give the model once: a shipped name or config path as MODEL or --hf-config")
    spec = model_spec(args.config if args.config is not None else args.model, seq_len=args.seq_len, pixel_std=args.pixel_std)
    if args.width is not None or args.heads is not None:
        with validation_extra(option="--width"):
            from remprop.validation.hf_models import reduced_spec

            spec = reduced_spec(spec, depth=args.depth, width=args.width, heads=args.heads)
    elif args.depth is not None:
        spec = spec.with_depth(args.depth)
    if args.rho0 is not None:
        spec = spec.with_settings(rho0=args.rho0)
    directory = writable_directory(args.out)
    stem = directory / (args.name or "check-" + re.sub(r"[^A-Za-z0-9._-]+", "_", spec.name).strip("_"))
    for option, value in (("--causal-theory", args.causal_theory), ("--gram-draws", args.gram_draws)):
        if value is not None and not args.simulate:
            raise CommandLineError(f"{option} chooses the theory compared with --simulate: give --simulate too")
    _check_work(args, spec)
    diagnosis = diagnose(spec, args.threshold, max_depth=args.max_depth)
    measured = None
    if args.simulate:
        theory = _compared_theory(spec, diagnosis, args.causal_theory, args.gram_draws)
        progress = show_progress(args)  # the simulated layers, with their ETA (remprop.progress)
        with validation_extra(option="--simulate"):
            from remprop.validation import simulate_model

            measurement = simulate_model(spec, seeds=args.seeds, sequences=args.sequences, device=args.device,
                                         theory=theory["rho"], progress=progress,
                                         store=Path(f"{stem}.simulation"))
        measured = measurement.summary()
        measured.update({key: value for key, value in theory.items() if key != "rho"})
    result = diagnosis.to_dict()
    if measured is not None:
        result["simulation"] = measured
    files = []
    if args.figure:
        from remprop.diagrams import model_figure

        png = Path(f"{stem}.png")
        figure = model_figure(diagnosis, measured)
        figure.savefig(png, dpi=120)
        files.append(str(png))
    json_path = Path(f"{stem}.json")
    json_path.write_text(dumps(result) + "\n")
    files.append(str(json_path))
    result["files"] = files
    if args.json:
        print(dumps(result))
        return 0
    print(diagnosis.report())
    if measured is not None:
        streamed = ", one block redrawn per layer (the model does not fit)" if measured.get("streamed") else ""
        print(f"\nsimulated at random init ({len(measured['seeds'])} seeds x {measured['sequences']} "
              f"sequences, {measured['compared']}{streamed}): |theory - measured| max {measured['max_error']:.4f}, "
              f"mean {measured['mean_error']:.4f}" + _z_text(measured["max_abs_z"]))
        print(f"theory compared: {measured['theory_label']}" + (
            f" ({measured['theory_reason']})" if measured.get("theory_reason") else ""))
        rows = [(str(layer), format_number(t, 4), format_number(m, 4), format_number(e, 3))
                for layer, (t, m, e) in enumerate(zip(measured["theory"], measured["rho_mean"], measured["rho_std"]))]
        print(format_table(("layer", "theory", "measured", "std over seeds"), rows))
    print("wrote " + ", ".join(files))
    return 0


def _check_work(args, spec) -> None:
    """Refuse a check whose estimated work exceeds --max-seconds or --max-memory (one line with the estimate).

    The diagnosis (:func:`~remprop.diagrams.diagnosis.diagnosis_seconds`, ``diagnosis_bytes``:
    the model's depth, --max-depth, rotary heads); with --simulate the tensors of one block of
    --sequences sequences (:func:`~remprop.theory.work_estimates.simulation_bytes`: a model too
    large for memory is run one block at a time) and, where the causal Gram state is the theory
    compared, its floating-point work (:func:`~remprop.theory.causal.causal_gram_flops`, at
    :data:`~remprop.theory.work_estimates.FLOPS_PER_SECOND`).
    """
    from remprop.diagrams.diagnosis import diagnosis_bytes, diagnosis_seconds
    from remprop.theory import work_estimates as work
    from remprop.theory.causal import causal_gram_flops

    from .simulation import simulation_time

    limits = work_limits(args)
    model = f"{spec.name} ({spec.depth} layers, d = {spec.width}, T = {spec.seq_len})"
    draws = 8 if args.gram_draws is None else args.gram_draws
    # the compared theory first: a choice that cannot run is the input's error, before any estimate
    compared = _causal_theory_name(spec, args.causal_theory, draws) if args.simulate else None
    if args.simulate:
        seconds = len(args.seeds) * simulation_time(args.device, spec.width, spec.seq_len, args.sequences,
                                                    spec.depth, d_ff=spec.d_ff, passes=2 if spec.causal else 1)
        check_work(f"simulating {len(args.seeds)} seed(s) x {args.sequences} sequence(s) of {model} (--seeds, "
                   "--sequences, --seq-len, --width)", seconds=seconds,
                   nbytes=work.simulation_bytes(spec.width, spec.seq_len, args.sequences, 4, d_ff=spec.d_ff,
                                                heads=spec.heads), **limits)
    check_work(f"the diagnosis of {model} with --max-depth {args.max_depth}",
               seconds=diagnosis_seconds(spec, max_depth=args.max_depth),
               nbytes=diagnosis_bytes(spec, max_depth=args.max_depth), **limits)
    if compared is not None and compared[0] == "gram":
        flops = causal_gram_flops(spec.architecture, spec.depth, spec.seq_len, draws)
        check_work(f"the causal Gram state of {model} with {draws} draws (--gram-draws)",
                   seconds=work.flops_seconds(flops), nbytes=work.gram_theory_bytes(spec.seq_len, spec.depth, 1),
                   **limits)


#: What each compared theory is called in the report, the JSON and the figure.
_THEORY_LABELS = {"maps": "per-position maps", "gram": "causal Gram state",
                 "encoder": "layer maps"}


def _compared_theory(spec, diagnosis, choice, draws) -> dict:
    """The predicted cosine per layer that ``--simulate`` compares with, and which theory it is.

    Encoders: the diagnosis' maps (``--causal-theory gram`` is an error). Causal models:
    :func:`remprop.theory.causal.choose_causal_theory` picks the per-position maps of the
    diagnosis or :func:`remprop.theory.causal.propagate_causal_gram` at the spec's architecture,
    beta, depth, T, input state and norm eps (seed 0, ``draws`` draws per attention layer,
    default 8), ``p / q`` of the last tokens as the probe measures them (before any final norm).
    Returns ``{"rho", "causal_theory", "theory_label", "theory_reason"[, "gram_draws"]}``.
    """
    from remprop.theory.causal import compared_last_tokens, propagate_causal_gram

    draws = 8 if draws is None else draws
    if not spec.causal:
        _causal_theory_name(spec, choice, draws)  # --causal-theory gram on an encoder: refused
        return {"rho": diagnosis.compared_rho, "causal_theory": None, "theory_label": _THEORY_LABELS["encoder"],
                "theory_reason": None}
    name, reason = _causal_theory_name(spec, choice, draws)
    out = {"causal_theory": name, "theory_label": _THEORY_LABELS[name], "theory_reason": reason}
    if name == "maps":
        return {"rho": diagnosis.compared_rho, **out}
    try:
        trajectory = propagate_causal_gram(spec.architecture, spec.beta, spec.depth, spec.seq_len, spec.q0,
                                           spec.rho0, last=compared_last_tokens(spec.seq_len), draws=draws, seed=0,
                                           norm_eps=spec.layer_norm_eps)
    except ValueError as err:
        raise CommandLineError(f"--causal-theory gram: {err}") from None
    return {"rho": trajectory.rho, **out, "gram_draws": draws}


def _causal_theory_name(spec, choice, draws):
    """(name, reason) of the causal theory --simulate compares with (None for an encoder), or one
    line naming --causal-theory where the choice cannot run
    (:func:`remprop.theory.causal.choose_causal_theory`)."""
    from remprop.theory.causal import choose_causal_theory

    if not spec.causal:
        if choice == "gram":
            raise CommandLineError(f"--causal-theory gram: {spec.name} is not a causal model (its tokens are "
                                   "compared with the layer maps)")
        return None
    try:
        return choose_causal_theory(spec.architecture, spec.depth, spec.seq_len, draws=draws, choice=choice or "auto")
    except ValueError as err:
        raise CommandLineError(f"--causal-theory: {err}") from None


def _z_text(z) -> str:
    return "" if z is None else f", max |z| {z:.2f}"
