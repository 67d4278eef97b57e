"""Options shared by the ``remprop`` commands, and the parser class that reports one line.

* :class:`OneLineArgumentParser` -- usage errors as one line (``prog: error: message``),
  status 2, no abbreviated options;
* :func:`add_architecture_arguments` / :func:`architecture_from_args` -- the options
  that mirror :class:`remprop.theory.Architecture`, and the Architecture they describe;
* :func:`add_run_options`, :func:`add_grid_options`, :func:`add_simulation_options`,
  :func:`add_output_options`, :func:`add_progress_option`, :func:`add_work_limit_options` --
  the option groups that several commands share, written once.

One vocabulary across the commands (:data:`RENAMED_OPTIONS` lists the spellings it replaced,
refused with a line naming the new one): ``--seq-len`` is the sequence length wherever a
command has one (the theory's finite-T maps, the simulated or trained sequences, a real
model's T); ``validate``, which has both a theory and a simulation, also takes
``--theory-seq-len`` and ``--sim-seq-len`` to set them apart. ``--beta`` and ``--alpha`` take
one value, or a grid where a command sweeps them. ``--out`` is the output folder, by default
``remprop-<command>``; ``--seeds`` defaults to :data:`SIMULATION_SEEDS` where a simulation
averages initialisations; ``--threads`` bounds the CPU threads of every command that computes.

Only the standard library is imported at module level (the theory package is imported
when a parser is built), so ``import remprop.cli`` stays light.
"""
from __future__ import annotations

import argparse
import dataclasses
import inspect
import re
import sys

from .converters import (
    GRID_SYNTAX,
    cosine,
    count,
    file_stem,
    grid_of,
    layer_count,
    nonnegative_real,
    open_unit_real,
    positive_real,
    seed_list,
)
from .errors import CommandLineError, one_line
from .output import JSON_NOTE, LONG_WORK_SECONDS, SIMULATION_THREADS_TEXT

__all__ = [
    "OneLineArgumentParser",
    "join_negative_values",
    "add_command",
    "ARCHITECTURE_OPTIONS",
    "add_architecture_arguments",
    "architecture_from_args",
    "architecture_overrides",
    "add_run_options",
    "add_grid_options",
    "add_simulation_options",
    "add_output_options",
    "add_progress_option",
    "add_cluster_options",
    "add_work_limit_options",
    "add_threads_option",
    "add_seeds_option",
    "simulated_seq_len",
    "work_limits",
    "point_at_option",
    "plain_help",
    "refuse_renamed_options",
    "RENAMED_OPTIONS",
    "SIMULATION_SEEDS",
]

#: Option spellings replaced by the common vocabulary: old -> new. Each command refuses the old
#: spelling with one line naming the new one (exit status 2), unless it still has the option
#: (``validate`` keeps ``--theory-seq-len`` and ``--sim-seq-len`` as overrides of ``--seq-len``).
RENAMED_OPTIONS = {"--betas": "--beta", "--alphas": "--alpha", "--theory-seq-len": "--seq-len",
                   "--sim-seq-len": "--seq-len", "--store": "--out"}

#: Default number of initialisations of the commands that simulate (``sweep``, ``validate``,
#: ``check --simulate``). ``trained-diagram`` defaults to 1 (each seed is a whole training run)
#: and ``acceptance`` to the 12 of its table (docs/validation.md, "Twelve initialisations").
SIMULATION_SEEDS = 2


#: Words that argparse must read as (negative) values: a minus, then a digit, ".digit", inf or nan.
NEGATIVE_VALUE = re.compile(r"^-(\.?\d|inf|nan)", re.IGNORECASE)


class OneLineArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (``prog: error: message``), status 2.

    argparse prints the usage block before the message and exits itself; here the
    error is raised as :class:`~remprop.cli.errors.CommandLineError` instead, so that
    :func:`remprop.cli.main` prints exactly one line and returns 2 (or the caller can
    catch it). Abbreviated long options are refused (``--alpha`` must never silently
    mean ``--alphas``).
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):  # noqa: D102 - argparse's, arguments joined first
        return super().parse_known_args(join_negative_values(sys.argv[1:] if args is None else args), namespace)

    def error(self, message):  # noqa: D102 - argparse hook
        raise CommandLineError(message, prog=self.prog)


def join_negative_values(args) -> list:
    """``args`` with each ``--option VALUE`` whose value starts with a minus and a number ("-1:1:3",
    "-1e5", "-inf") written ``--option=VALUE``, argparse's spelling of a value that looks like an option.

    argparse itself reads only "-1" and "-.5" as values; joined, "--beta -1:1:3" reaches the
    converter, which says what is wrong with it. No option of remprop starts with a digit, "inf" or
    "nan"; a flag given such a word is an error either way. Nothing after ``--`` is joined.
    """
    out = []
    for arg in args:
        if (out and isinstance(arg, str) and NEGATIVE_VALUE.match(arg) and isinstance(out[-1], str)
                and out[-1].startswith("--") and len(out[-1]) > 2 and "=" not in out[-1] and "--" not in out[:-1]):
            out[-1] = f"{out[-1]}={arg}"
        else:
            out.append(arg)
    return out


def add_command(commands, name, handler, *, help, epilog=JSON_NOTE, **kwargs):
    """Add sub-command ``name`` to ``commands`` (a subparsers action); ``handler(args)`` runs it.

    The handler's docstring is the command's description (one text for ``--help`` and the
    API documentation); the epilog defaults to the note on the JSON outputs; ``kwargs``
    go to ``add_parser``.
    """
    kwargs.setdefault("description", plain_help(inspect.getdoc(handler)))
    parser = commands.add_parser(name, help=help, epilog=epilog, **kwargs)
    parser.set_defaults(handler=handler)
    return parser


#: Sphinx roles (``:func:`~a.b.c```) and inline literals (double backquotes) of the docstrings.
_ROLE = re.compile(r":[a-z]+:`~?([^`<]*?)(?:\s*<[^>]*>)?`")
_LITERAL = re.compile(r"``([^`]*)``")


def plain_help(text):
    """A docstring as plain help text: Sphinx roles become their target's last name
    (``:func:`~remprop.theory.causal.choose_causal_theory``` -> ``choose_causal_theory``),
    double backquotes are dropped. None stays None."""
    if text is None:
        return None

    def name(match):
        target = match.group(1).strip()
        return target.rsplit(".", 1)[-1] if target.startswith(("remprop.", ".")) else target

    return _LITERAL.sub(r"\1", _ROLE.sub(name, text))


class _RenamedOption(argparse.Action):
    """An old spelling: refused at once with one line naming the new option."""

    def __init__(self, option_strings, dest, new=None, **kwargs):
        self.new = new
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS, **kwargs)

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"argument {option_string}: renamed, use {self.new} (same values)")


def refuse_renamed_options(parser) -> None:
    """Add each old spelling of :data:`RENAMED_OPTIONS` that ``parser`` does not have as an
    option that is refused (one line naming the new option, exit status 2)."""
    for old, new in RENAMED_OPTIONS.items():
        if old not in parser._option_string_actions:
            parser.add_argument(old, action=_RenamedOption, new=new, dest=f"renamed_{old.strip('-')}")


def point_at_option(message, options: dict) -> str:
    """Add the option to a library error about one parameter.

    ``message`` is the error or its one-line text; ``options`` maps parameter names to flags:
    ``"seq_len must be >= 2"`` with ``{"seq_len": "--theory-seq-len"}`` becomes ``"seq_len must
    be >= 2 (option --theory-seq-len)"``. The parameter is the error's own
    (:class:`~remprop.theory.checks.ParameterError`), else the message's first word; a message
    naming no known parameter is returned unchanged.
    """
    name = getattr(message, "parameter", None)
    message = one_line(message)
    if name is None:
        name = message.split(" ", 1)[0].rstrip(":")
    option = options.get(name)
    return f"{message} (option {option})" if option else message


#: What each theory compared with a simulation is (``validate --theory``, ``acceptance --theory``).
COMPARED_THEORIES_HELP = ("'mean' the mean-cosine maps from the mean input state; 'gram' the Gram state of each "
                          "input sequence (docs/theory.md section 17); 'sampled' its single-initialisation chains "
                          "(section 17.1)")


# -- architecture ------------------------------------------------------------------------
#: Command-line option of every Architecture field (field name -> option).
ARCHITECTURE_OPTIONS = {
    "norm": "--norm",
    "attention": "--attention",
    "activation": "--activation",
    "sigma_w2": "--sigma-w2",
    "sigma_b2": "--sigma-b2",
    "sigma_v2": "--sigma-v2",
    "alpha_sa": "--alpha",
    "alpha_mlp": "--alpha-mlp",
    "sigma_o2": "--sigma-o2",
    "sigma_w2_out": "--sigma-w2-out",
    "seq_len": "--seq-len",
    "heads": "--heads",
    "qk_scaling": "--qk-scaling",
    "norm_type": "--norm-type",
    "mlp": "--mlp",
    "positions": "--positions",
    "rope_base": "--rope-base",
    "head_dim": "--head-dim",
    "rotary_dim": "--rotary-dim",
    "kv_heads": "--kv-heads",
    "qk_norm": "--qk-norm",
    "qk_norm_gain": "--qk-norm-gain",
    "qk_norm_dim": "--qk-norm-dim",
    "block_form": "--block-form",
    "branch_norm": "--branch-norm",
    "final_norm": "--final-norm",
    "logit_softcap": "--logit-softcap",
    "dyt_alpha0": "--dyt-alpha0",
}

def option_dest(option: str) -> str:
    """The parsed-argument name of an option: its name (``--seq-len`` -> ``seq_len``), as argparse makes it."""
    return option.lstrip("-").replace("-", "_")


def architecture_dests(args) -> dict:
    """Architecture field -> parsed-argument name, of the options :func:`add_architecture_arguments` added
    to the parser of ``args`` (every field's option, by default)."""
    return getattr(args, "architecture_dests", None) or {name: option_dest(option)
                                                         for name, option in ARCHITECTURE_OPTIONS.items()}


def add_architecture_arguments(parser, *, alpha_sa=True, theory_seq_len=True, model_overrides=False, exclude=()):
    """Add the options that mirror :class:`remprop.theory.Architecture` to ``parser``.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        Parser (or subparser) that receives an "architecture" argument group.
    alpha_sa : bool
        Add ``--alpha`` (``alpha_sa``). Commands that sweep or solve for alpha_sa
        (``diagram``, ``min-alpha``, ``sweep``) leave it out.
    theory_seq_len : bool or str
        True: add ``--seq-len`` (``seq_len``: the T of the theory's finite-T attention maps);
        ``"override"``: add it as ``--theory-seq-len`` (``validate``, whose ``--seq-len`` sets
        the theory's and the simulation's T together); False: leave it out (``sweep``: its
        ``--theory`` compares at the simulated T).
    model_overrides : bool
        The options change a given model's settings (``check``): every default is None, "the
        model's", and :func:`architecture_overrides` reads back the options given.
    exclude : tuple of str
        Fields whose option the command defines itself (``check``: ``heads``).

    Returns
    -------
    argparse._ArgumentGroup
        The group, with options ``--norm``, ``--norm-type``, ``--mlp``, ``--attention``, ``--activation``,
        ``--sigma-w2``, ``--sigma-b2``, ``--sigma-v2``, ``--sigma-o2``, ``--sigma-w2-out``,
        ``--alpha`` (optional), ``--alpha-mlp``, ``--heads``, ``--qk-scaling``, ``--positions``,
        ``--rope-base``, ``--head-dim``, ``--rotary-dim``, the decoder block forms (``--kv-heads``,
        ``--qk-norm``, ``--qk-norm-gain``, ``--qk-norm-dim``, ``--block-form``, ``--branch-norm``,
        ``--final-norm``, ``--logit-softcap``: docs/theory.md section 19) and ``--seq-len`` (optional);
        defaults are those of the Architecture class (post-LN BERT, one head, absolute positions). Choices come
        from :data:`remprop.theory.NORMS`, ``ATTENTIONS``, ``ACTIVATIONS``, ``QK_SCALINGS`` and
        :data:`remprop.theory.architecture.POSITIONS`.
    """
    from remprop.theory import Architecture

    defaults = {f.name: f.default for f in dataclasses.fields(Architecture)}
    if model_overrides:
        group = parser.add_argument_group(
            "what-if", "overrides of the model's settings; the report shows the model before and after")
    else:
        group = parser.add_argument_group(
            "architecture", "the transformer block (defaults: post-LN BERT of the reference experiments)")
    skipped = {ARCHITECTURE_OPTIONS[name] for name in exclude}
    fields = {option: name for name, option in ARCHITECTURE_OPTIONS.items()}
    dests = {}
    for option, kwargs in _architecture_options(defaults, alpha_sa=alpha_sa, theory_seq_len=theory_seq_len):
        if option in skipped:  # the one place where model_overrides and exclude act
            continue
        if model_overrides:
            kwargs["default"] = None
            kwargs["help"] = re.sub(r"default: [^()]*(\([^()]*\)[^()]*)*\)$", "default: the model's)", kwargs["help"])
        group.add_argument(option, **kwargs)
        dests[fields.get(option, "seq_len")] = option_dest(option)  # --theory-seq-len: the field seq_len
    parser.set_defaults(architecture_dests=dests)
    return group


def _architecture_options(defaults, *, alpha_sa, theory_seq_len):
    """``(option, add_argument keywords)`` of each option of :func:`add_architecture_arguments`, in the
    order of the help; ``defaults``: the Architecture's field defaults."""
    from remprop.theory import ACTIVATIONS, ATTENTIONS, MLPS, NORM_TYPES, NORMS, QK_SCALINGS
    from remprop.theory.architecture import BLOCK_FORMS, POSITIONS

    yield "--norm", dict(choices=tuple(NORMS), default=defaults["norm"],
                       help="LayerNorm placement: post (BERT), pre (GPT-2) or none (default: %(default)s)")
    yield "--norm-type", dict(choices=tuple(NORM_TYPES), default=defaults["norm_type"],
                       help="the norm at --norm: LayerNorm, RMSNorm (no centring, LLaMA) or DyT, tanh(a0 x) "
                            "(Dynamic Tanh, no statistics) (default: %(default)s)")
    yield "--dyt-alpha0", dict(type=positive_real, default=defaults["dyt_alpha0"], metavar="A0",
                       help="initial scale a0 > 0 of --norm-type dyt, tanh(a0 x) (default: 0.5)")
    yield "--mlp", dict(choices=tuple(MLPS), default=defaults["mlp"],
                       help="dense MLP W2 act(W1 x), or gated W_down (act(W_gate x) * W_up x): SwiGLU with "
                            "--activation silu, GeGLU with gelu (default: %(default)s)")
    yield "--attention", dict(choices=tuple(ATTENTIONS), default=defaults["attention"],
                       help="softmax attention or its centred gain-controlled version (default: %(default)s)")
    yield "--activation", dict(choices=tuple(ACTIVATIONS), default=defaults["activation"],
                       help="MLP activation (default: %(default)s)")
    yield "--sigma-w2", dict(type=nonnegative_real, default=defaults["sigma_w2"], metavar="S2",
                       help="MLP weight variance times fan-in, W ~ N(0, S2/d) (default: %(default)s)")
    yield "--sigma-b2", dict(type=nonnegative_real, default=defaults["sigma_b2"], metavar="S2",
                       help="bias variance of values and MLP (default: %(default)s)")
    yield "--sigma-v2", dict(type=nonnegative_real, default=defaults["sigma_v2"], metavar="S2",
                       help="value weight variance times fan-in (default: %(default)s)")
    yield "--sigma-o2", dict(type=nonnegative_real, default=None, metavar="S2",
                       help="attention output projection W_O ~ N(0, S2/d), no bias (default: no projection)")
    yield "--sigma-w2-out", dict(type=nonnegative_real, default=None, metavar="S2",
                       help="variance times fan-in of the MLP's second layer, W2 ~ N(0, S2/d_ff) "
                            "(default: --sigma-w2)")
    if alpha_sa:
        yield "--alpha", dict(type=nonnegative_real, default=defaults["alpha_sa"],
                           metavar="A", help="alpha_SA: strength of the identity path around attention, "
                           "x -> A x + SA(x) (default: %(default)s)")
    yield "--alpha-mlp", dict(type=nonnegative_real, default=defaults["alpha_mlp"], metavar="A",
                       help="strength of the identity path around the MLP (default: %(default)s)")
    yield "--heads", dict(type=count(1), default=defaults["heads"], metavar="H",
                       help="attention heads H (default: %(default)s)")
    yield "--qk-scaling", dict(choices=tuple(QK_SCALINGS), default=defaults["qk_scaling"],
                       help="query/key variance of each head over the model width (model: every head runs at "
                            "beta) or over the head width (head: each head runs at H beta) "
                            "(default: %(default)s)")
    yield "--positions", dict(choices=POSITIONS, default=defaults["positions"],
                       help="absolute (added to the embeddings: only the input state) or rope (rotary: queries "
                            "and keys rotated; needs the theory's finite T and --head-dim) (default: %(default)s)")
    yield "--rope-base", dict(type=positive_real, default=defaults["rope_base"], metavar="B",
                       help="RoPE base b > 1 of the frequencies b^(-2i/d_H) (default: %(default)g)")
    yield "--head-dim", dict(type=count(2), default=defaults["head_dim"], metavar="D_H",
                       help="width of one head's queries and keys, even (usually width / heads); "
                            "needed with --positions rope and --qk-norm (default: none)")
    yield "--rotary-dim", dict(type=count(2), default=defaults["rotary_dim"], metavar="R",
                 help="coordinates of each head that --positions rope turns, even, <= --head-dim (GPT-NeoX's "
                      "rotary_pct d_H); the rest pass unrotated (default: all of --head-dim)")
    yield "--kv-heads", dict(type=count(1), default=defaults["kv_heads"], metavar="H_KV",
                       help="key/value heads of grouped-query attention, dividing --heads; the mean maps are "
                            "those of ungrouped heads (default: --heads)")
    yield "--qk-norm", dict(action="store_true",
                       help="RMS-normalised queries and keys (OLMo 2, Gemma 3): beta then multiplies the "
                            "normalised scores; needs the theory's finite T and --head-dim")
    yield "--qk-norm-gain", dict(type=positive_real, default=defaults["qk_norm_gain"], metavar="G",
                       help="gain of the query/key norm (default: %(default)s)")
    yield "--qk-norm-dim", dict(type=count(1), default=defaults["qk_norm_dim"], metavar="N",
                       help="coordinates normalised together, >= --head-dim (OLMo 2: heads x head dim; "
                            "default: --head-dim)")
    yield "--block-form", dict(choices=tuple(BLOCK_FORMS), default=defaults["block_form"],
                       help="sequential branches, or parallel: x + SA(LN x) + MLP(LN x) (GPT-J, NeoX; "
                            "--norm pre only) (default: %(default)s)")
    yield "--branch-norm", dict(action="store_true",
                       help="a norm on each branch's output before the skip add (Gemma 2 sandwich with --norm "
                            "pre, OLMo 2 with --norm none)")
    yield "--final-norm", dict(action="store_true",
                       help="a norm after the last block: the reported final state is its output (q = 1)")
    yield "--logit-softcap", dict(type=positive_real, default=defaults["logit_softcap"], metavar="C",
                       help="attention-logit soft-cap C tanh(s/C) (Gemma 2: 50), accepted where the theory "
                            "bounds its effect on Y2 (default: none)")
    if theory_seq_len:
        override = theory_seq_len == "override"
        yield ("--theory-seq-len" if override else "--seq-len"), dict(type=count(2),
                           default=None, metavar="T",
                           help="sequence length T of the theory's attention maps (exact finite-T "
                                "participation ratios; default: " + ("--seq-len, else " if override else "")
                                + "T -> infinity)")


def architecture_overrides(args) -> dict:
    """The Architecture fields given on the command line of :func:`add_architecture_arguments`
    with ``model_overrides=True`` (field name -> value; the options left out are absent)."""
    return {name: getattr(args, dest) for name, dest in architecture_dests(args).items()
            if getattr(args, dest, None) is not None}


def architecture_from_args(args, **overrides):
    """The :class:`remprop.theory.Architecture` described by parsed options.

    Fields whose option is absent from ``args`` (e.g. ``alpha_sa`` for commands that
    sweep it) keep the class default; ``overrides`` win over both. An invalid value
    raises :class:`~remprop.cli.errors.CommandLineError` naming the field and its option.
    """
    from remprop.theory import Architecture

    fields = {name: getattr(args, dest) for name, dest in architecture_dests(args).items() if hasattr(args, dest)}
    fields.update(overrides)
    try:
        return Architecture(**fields)
    except ValueError as err:
        raise CommandLineError(point_at_option(err, ARCHITECTURE_OPTIONS)) from None


# -- option groups shared by several commands -------------------------------------------
def add_run_options(parser, *, beta=False, threshold=True, json_help="print JSON instead of a table"):
    """--beta (one value; optional), --depth, --threshold (optional), --q0, --rho0 and --json.

    The inputs of a propagation. Commands over a grid of betas add their own option.
    """
    if beta:
        parser.add_argument("--beta", type=positive_real, default=0.5,
                            help="query/key scale beta > 0 (default: %(default)s)")
    parser.add_argument("--depth", type=layer_count, default=60, metavar="L",
                        help="number of transformer blocks (default: %(default)s)")
    if threshold:
        from remprop.diagrams import DEFAULT_THRESHOLD

        parser.add_argument("--threshold", type=open_unit_real, default=DEFAULT_THRESHOLD, metavar="RHO",
                            help="rank-collapse threshold in (0, 1): the stack is rank-collapsed when the "
                                 "final-layer cosine rho exceeds it (default: %(default)s)")
    parser.add_argument("--q0", type=positive_real, default=1.0,
                        help="input squared norm per coordinate, > 0 (default: %(default)s)")
    parser.add_argument("--rho0", type=cosine, default=0.0,
                        help="input cosine similarity of two tokens, in [-1, 1] (default: %(default)s)")
    parser.add_argument("--json", action="store_true", help=json_help)


def add_grid_options(parser, *, betas, alphas):
    """--beta and --alpha as grids (parsed as ``beta`` and ``alpha``, lists): the (beta, alpha_SA) grid,
    defaults given as grid specifications."""
    parser.add_argument("--beta", type=grid_of(positive_real), default=grid_of(positive_real)(betas),
                        metavar="GRID", help=f"beta values (> 0): {GRID_SYNTAX} (default: {betas})")
    parser.add_argument("--alpha", type=grid_of(nonnegative_real),
                        default=grid_of(nonnegative_real)(alphas), metavar="GRID",
                        help=f"alpha_SA values (>= 0), same syntax (default: {alphas})")


def add_simulation_options(parser, *, width, sim_seq_len, inputs, threads, seeds=None, theory_too=False):
    """The simulated networks of ``sweep`` and ``validate``: sizes, seeds, inputs, precision, device.

    Adds ``--seeds --sequences --width --seq-len --inputs --dtype --threads --device``; the
    keyword arguments are the command's defaults (``seeds=None``: :data:`SIMULATION_SEEDS`,
    ``threads=None``: one per free core, :func:`remprop.cli.output.simulation_threads`). ``theory_too``: ``--seq-len`` (parsed as ``seq_len``,
    default None) sets the theory's T and the simulated T together, and ``--sim-seq-len``
    (``sim_seq_len``) overrides the simulated one (default ``sim_seq_len``, resolved by
    :func:`simulated_seq_len`); else ``--seq-len`` (``seq_len``) is the simulated T.
    """
    add_seeds_option(parser, seeds)
    parser.add_argument("--sequences", type=count(1), default=2, metavar="N",
                        help="input sequences per seed (default: %(default)s)")
    parser.add_argument("--width", type=count(2), default=width, metavar="D",
                        help="model width d (default: %(default)s)")
    if theory_too:
        parser.add_argument("--seq-len", type=count(2), default=None, metavar="T",
                            help=f"sequence length T of the simulated sequences and of the theory's maps "
                                 f"(default: {sim_seq_len} simulated tokens, the theory at T -> infinity)")
        parser.add_argument("--sim-seq-len", type=count(2), default=None, metavar="T",
                            help=f"tokens per simulated sequence, overriding --seq-len (default: --seq-len, "
                                 f"else {sim_seq_len})")
        parser.set_defaults(default_sim_seq_len=sim_seq_len)
    else:
        parser.add_argument("--seq-len", type=count(2), default=sim_seq_len, metavar="T",
                            help="tokens per simulated sequence T; the theory compared runs at the same T "
                                 "(default: %(default)s)")
    parser.add_argument("--inputs", choices=("synthetic", "text"), default=inputs,
                        help="Gaussian tokens with exactly q0, rho0, or embedded pydoc text (default: %(default)s)")
    parser.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                        help="simulation precision (default: %(default)s)")
    add_threads_option(parser, threads, what="torch and numba CPU threads while simulating",
                       default_text=SIMULATION_THREADS_TEXT if threads is None
                       else "%(default)s, fixed so that results are reproducible")
    parser.add_argument("--device", default="auto",
                        help="auto (CUDA where available), cpu or cuda[:n] (default: auto)")


def simulated_seq_len(args) -> int:
    """The simulated T of a command with :func:`add_simulation_options`: ``--sim-seq-len``, else
    ``--seq-len``, else the command's default (``--seq-len`` alone without ``theory_too``)."""
    for value in (getattr(args, "sim_seq_len", None), args.seq_len, getattr(args, "default_sim_seq_len", None)):
        if value is not None:
            return value


def add_seeds_option(parser, seeds=None, *, what="initialisations"):
    """--seeds: a count N (seeds 0..N-1) or a list; default :data:`SIMULATION_SEEDS` (or ``seeds``)."""
    seeds = SIMULATION_SEEDS if seeds is None else seeds
    parser.add_argument("--seeds", type=seed_list, default=seed_list(str(seeds)), metavar="SEEDS",
                        help=f"{what}: a count N (seeds 0..N-1) or a list 'a,b,c' (default: {seeds})")


def add_threads_option(parser, default=None, *, what="CPU threads of the theory's numba kernels",
                       default_text=None):
    """--threads N: the CPU threads of a command (numba's kernels; torch's where it simulates or
    trains). Default ``default`` (None: the libraries' own, all cores)."""
    text = default_text or ("%(default)s" if default is not None else "all cores")
    parser.add_argument("--threads", type=count(1), default=default, metavar="N", help=f"{what} (default: {text})")


def add_output_options(parser, *, out=None, name=None, out_help="output directory, created if needed"):
    """--out DIR (default ``remprop-<command>``, or ``out``) and (when ``name`` is given, the
    default stem) --name."""
    out = out or "remprop-" + parser.prog.split()[-1]
    parser.add_argument("--out", default=out, metavar="DIR", help=f"{out_help} (default: %(default)s)")
    if name is not None:
        parser.add_argument("--name", type=file_stem, default=name, help="file name stem (default: %(default)s)")


def add_cluster_options(parser):
    """--workers / --scheduler: where the cells of a grid run (dask or this process)."""
    where = parser.add_argument_group("where cells run")
    where.add_argument("--workers", type=count(0), default=None, metavar="N",
                       help="dask LocalCluster worker processes, one thread each; 0 = in this process "
                            "(default: one per core, or 0 without dask)")
    where.add_argument("--scheduler", default=None, metavar="ADDRESS",
                       help="address of a running dask scheduler (tcp://host:8786) instead of a LocalCluster")


def add_progress_option(parser):
    """--progress / --no-progress (:func:`remprop.cli.output.show_progress`)."""
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                        help="the estimate and the progress with its ETA on stderr: a bar on a terminal, "
                             f"timestamped lines in a log (default: shown for work estimated at {LONG_WORK_SECONDS:g} s or more)")


def add_work_limit_options(parser, *, seconds=True, memory=True):
    """--max-seconds and --max-memory (each unless turned off): the limits on a command's estimated work.

    Defaults: :data:`remprop.cli.limits.MAX_SECONDS` and ``MAX_BYTES``; the
    estimate is checked before anything runs and a larger one is refused (exit status 2,
    one line with the estimate). :func:`work_limits` reads them back.
    """
    from .limits import MAX_BYTES, MAX_SECONDS

    group = parser.add_argument_group("limits", "estimated before the run; larger work is refused")
    if seconds:
        group.add_argument("--max-seconds", type=positive_real, default=MAX_SECONDS, metavar="S",
                           help="refuse a run estimated to take longer on a quiet machine, in seconds (default: "
                                "%(default)g; the estimate line also gives the time at the machine's load)")
    if memory:
        group.add_argument("--max-memory", type=positive_real, default=MAX_BYTES / 2 ** 30, metavar="GIB",
                           help="refuse a run estimated to need more memory, in GiB (default: %(default)g)")


def work_limits(args) -> dict:
    """The limits of :func:`add_work_limit_options` as keyword arguments of
    :func:`remprop.cli.limits.check_work` (``max_seconds``, ``max_memory`` in bytes), and the
    ``announce`` that prints the estimate (:func:`remprop.cli.output.estimate_announcer`)."""
    from .output import estimate_announcer

    limits = {"announce": estimate_announcer(args)}
    if hasattr(args, "max_memory"):
        limits["max_memory"] = args.max_memory * 2 ** 30
    if hasattr(args, "max_seconds"):
        limits["max_seconds"] = args.max_seconds
    return limits
