"""Command-line option parsing for ``remprop``: one-line errors, value converters, grids.

Every converter turns one command-line string into a checked Python value and raises
:class:`argparse.ArgumentTypeError` with a short reason; argparse prefixes the reason
with ``argument --option:``, so every message names the offending option. The parser
class :class:`OneLineArgumentParser` reports all usage errors as a single line (no usage
block) and exit status 2.

Only the standard library is imported at module level (plus :mod:`remprop.theory` for
the architecture choices), so ``remprop --help`` stays fast.
"""
from __future__ import annotations

import argparse
import math

__all__ = [
    "CommandLineError",
    "OneLineArgumentParser",
    "Grid",
    "real",
    "positive_real",
    "nonnegative_real",
    "open_unit_real",
    "cosine",
    "layer_count",
    "count",
    "seed_list",
    "grid_of",
    "add_architecture_arguments",
    "architecture_from_args",
    "ARCHITECTURE_OPTIONS",
]


class CommandLineError(Exception):
    """A usage error: reported as one line on stderr with exit status 2.

    ``prog`` is the command that failed (``"remprop diagram"``); when it is None the
    caller supplies it.
    """

    def __init__(self, message, prog=None):
        super().__init__(" ".join(str(message).split()))
        self.prog = prog


class OneLineArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line (``prog: error: message``), status 2.

    argparse prints the usage block before the message and exits itself; here the
    error is raised as :class:`CommandLineError` instead, so that :func:`remprop.cli.main`
    prints exactly one line and returns 2 (or the caller can catch it). Abbreviated
    long options are refused (``--alpha`` must never silently mean ``--alphas``).
    """

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def error(self, message):  # noqa: D102 - argparse hook
        raise CommandLineError(message, prog=self.prog)


# -- scalar converters -----------------------------------------------------------------
def real(text: str) -> float:
    """A finite real number (NaN and infinities are refused)."""
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"expected a real number, got {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a finite real number, got {text!r}")
    return value


def positive_real(text: str) -> float:
    """A finite real number > 0."""
    value = real(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text!r}")
    return value


def nonnegative_real(text: str) -> float:
    """A finite real number >= 0 (variances, skip strengths)."""
    value = real(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text!r}")
    return value


def open_unit_real(text: str) -> float:
    """A real number in the open interval (0, 1) (collapse thresholds)."""
    value = real(text)
    if not 0.0 < value < 1.0:
        raise argparse.ArgumentTypeError(f"must lie in the open interval (0, 1), got {text!r}")
    return value


def cosine(text: str) -> float:
    """A cosine similarity in [-1, 1]."""
    value = real(text)
    if not -1.0 <= value <= 1.0:
        raise argparse.ArgumentTypeError(f"must lie in [-1, 1], got {text!r}")
    return value


def layer_count(text: str) -> int:
    """A number of blocks: an integer >= 1."""
    try:
        value = int(text)
    except (TypeError, ValueError):
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def count(minimum):
    """Converter of an integer >= ``minimum`` (sizes, worker counts)."""

    def convert(text: str) -> int:
        try:
            value = int(text)
        except (TypeError, ValueError):
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be an integer >= {minimum}, got {text!r}")
        return value

    convert.__name__ = f"integer >= {minimum}"
    return convert


def seed_list(text: str):
    """Seeds: a count ``N`` (seeds 0..N-1, N >= 1) or a comma list of distinct integers >= 0."""
    parts = [part.strip() for part in str(text).split(",")]
    try:
        values = [int(part) for part in parts]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a count N or a list 'a,b,c' of seeds, got {text!r}") from None
    if len(values) == 1:
        if values[0] < 1:
            raise argparse.ArgumentTypeError(f"a seed count must be >= 1, got {text!r}")
        return list(range(values[0]))
    if min(values) < 0 or len(set(values)) != len(values):
        raise argparse.ArgumentTypeError(f"seeds must be distinct integers >= 0, got {text!r}")
    return values


# -- grids -------------------------------------------------------------------------------
class Grid(tuple):
    """Values parsed from a grid specification; ``.is_list`` is False for one plain number."""

    is_list: bool = True

    def __new__(cls, values, is_list=True):
        grid = super().__new__(cls, values)
        grid.is_list = is_list
        return grid


GRID_SYNTAX = ("a number, a comma list 'a,b,c', or a range 'start:stop:num' "
               "(num evenly spaced values, both ends included; append ':log' for log spacing)")


def grid_of(element):
    """Converter of a grid specification whose values each satisfy ``element``.

    Accepted forms: ``"0.5"`` (one value), ``"0.1,0.5,1"`` (a list), ``"0.05:3:200"``
    (``numpy.linspace(0.05, 3, 200)``) and ``"0.01:10:50:log"`` (geometric spacing).
    """

    def convert(text: str) -> Grid:
        text = text.strip()
        if ":" in text:
            values = _parse_range(text)
            for value in values:
                try:
                    element(repr(value))
                except argparse.ArgumentTypeError as err:
                    rule = str(err).split(", got ")[0]
                    raise argparse.ArgumentTypeError(
                        f"the range {text!r} contains {value:g}, but each value {rule}") from None
            return Grid(values, is_list=True)
        if "," in text:
            return Grid([float(element(part.strip())) for part in text.split(",")], is_list=True)
        return Grid([float(element(text))], is_list=False)

    convert.__name__ = f"grid of {getattr(element, '__name__', 'values')}"
    return convert


def _parse_range(text: str) -> list:
    parts = [part.strip() for part in text.split(":")]
    spacing = "linear"
    if len(parts) == 4 and parts[3].lower() in ("log", "lin"):
        spacing = "log" if parts[3].lower() == "log" else "linear"
        parts = parts[:3]
    if len(parts) != 3:
        raise argparse.ArgumentTypeError(f"a range is 'start:stop:num' or 'start:stop:num:log', got {text!r}")
    start, stop = real(parts[0]), real(parts[1])
    try:
        num = int(parts[2])
    except ValueError:
        raise argparse.ArgumentTypeError(f"the number of values in {text!r} must be an integer >= 1") from None
    if num < 1:
        raise argparse.ArgumentTypeError(f"the number of values in {text!r} must be an integer >= 1")
    if num > 10_000_000:
        raise argparse.ArgumentTypeError(f"too many values in {text!r} (at most 10000000)")
    if num == 1:
        return [start]
    if spacing == "log":
        if start <= 0 or stop <= 0:
            raise argparse.ArgumentTypeError(f"a log range needs start > 0 and stop > 0, got {text!r}")
        ratio = math.log(stop / start)
        return [start * math.exp(ratio * k / (num - 1)) for k in range(num - 1)] + [stop]
    step = (stop - start) / (num - 1)
    return [start + step * k for k in range(num - 1)] + [stop]


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
}


def add_architecture_arguments(parser, *, alpha_sa=True, seq_len=True):
    """Add the options that mirror :class:`remprop.theory.Architecture` to ``parser``.

    Parameters
    ----------
    parser : argparse.ArgumentParser
        Parser (or subparser) that receives an "architecture" argument group.
    alpha_sa : bool
        Add ``--alpha`` (``alpha_sa``). Commands that sweep or solve for alpha_sa
        (``diagram``, ``min-alpha``) leave it out.

    Returns
    -------
    argparse._ArgumentGroup
        The group, with options ``--norm``, ``--attention``, ``--activation``,
        ``--sigma-w2``, ``--sigma-b2``, ``--sigma-v2``, ``--sigma-o2``, ``--sigma-w2-out``,
        ``--alpha`` (optional) and
        ``--alpha-mlp`` and (with ``seq_len=True``) ``--seq-len`` for the theory's finite
        sequence length; defaults are the BERT defaults of the Architecture class.
        Choices come from :data:`remprop.theory.NORMS`, ``ATTENTIONS`` and
        ``ACTIVATIONS``.
    """
    import dataclasses

    from remprop.theory import ACTIVATIONS, ATTENTIONS, NORMS, Architecture

    defaults = {f.name: f.default for f in dataclasses.fields(Architecture)}
    group = parser.add_argument_group(
        "architecture", "the transformer block (defaults: post-LN BERT of the reference experiments)")
    group.add_argument("--norm", choices=tuple(NORMS), default=defaults["norm"],
                       help="LayerNorm placement: post (BERT), pre (GPT-2) or none (default: %(default)s)")
    group.add_argument("--attention", choices=tuple(ATTENTIONS), default=defaults["attention"],
                       help="softmax attention or its centred gain-controlled version (default: %(default)s)")
    group.add_argument("--activation", choices=tuple(ACTIVATIONS), default=defaults["activation"],
                       help="MLP activation (default: %(default)s)")
    group.add_argument("--sigma-w2", type=nonnegative_real, default=defaults["sigma_w2"], metavar="S2",
                       help="MLP weight variance times fan-in, W ~ N(0, S2/d) (default: %(default)s)")
    group.add_argument("--sigma-b2", type=nonnegative_real, default=defaults["sigma_b2"], metavar="S2",
                       help="bias variance of values and MLP (default: %(default)s)")
    group.add_argument("--sigma-v2", type=nonnegative_real, default=defaults["sigma_v2"], metavar="S2",
                       help="value weight variance times fan-in (default: %(default)s)")
    group.add_argument("--sigma-o2", type=nonnegative_real, default=None, metavar="S2",
                       help="attention output projection W_O ~ N(0, S2/d), no bias (default: no projection)")
    group.add_argument("--sigma-w2-out", type=nonnegative_real, default=None, metavar="S2",
                       help="variance times fan-in of the MLP's second layer, W2 ~ N(0, S2/d_ff) "
                            "(default: --sigma-w2)")
    if alpha_sa:
        group.add_argument("--alpha", dest="alpha_sa", type=nonnegative_real, default=defaults["alpha_sa"],
                           metavar="A", help="alpha_SA: strength of the identity path around attention, "
                           "x -> A x + SA(x) (default: %(default)s)")
    group.add_argument("--alpha-mlp", type=nonnegative_real, default=defaults["alpha_mlp"], metavar="A",
                       help="strength of the identity path around the MLP (default: %(default)s)")
    if seq_len:
        group.add_argument("--seq-len", dest="arch_seq_len", type=_sequence_length, default=None,
                           metavar="T", help="sequence length T of the theory's attention maps "
                           "(exact finite-T participation ratios; default: T -> infinity)")
    return group


def _sequence_length(text):
    """An integer T >= 2 for --seq-len."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer >= 2, got {text!r}") from None
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be an integer >= 2, got {value}")
    return value


def architecture_from_args(args, **overrides):
    """The :class:`remprop.theory.Architecture` described by parsed options.

    Fields whose option is absent from ``args`` (e.g. ``alpha_sa`` for commands that
    sweep it) keep the class default; ``overrides`` win over both. Invalid values raise
    ``ValueError`` naming the field.
    """
    from remprop.theory import Architecture

    fields = {name: getattr(args, name) for name in ARCHITECTURE_OPTIONS if hasattr(args, name)}
    if getattr(args, "arch_seq_len", None) is not None:
        fields["seq_len"] = args.arch_seq_len
    fields.update(overrides)
    return Architecture(**fields)
