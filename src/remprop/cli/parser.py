"""The ``remprop`` argument parser: the top level and one sub-parser per command."""
from __future__ import annotations

import argparse
import textwrap

from .commands import PARSERS
from .options import OneLineArgumentParser, refuse_renamed_options
from .output import JSON_NOTE

__all__ = ["build_parser", "DEBUG_VARIABLE"]

#: Environment variable that turns the one-line report of unexpected errors into a traceback.
DEBUG_VARIABLE = "REMPROP_DEBUG"

EPILOG = "\n".join(textwrap.wrap(JSON_NOTE, 79) + textwrap.wrap(
    "Exit status: 0 success, 2 bad input (one line on stderr naming the parameter), "
    f"1 unexpected error ({DEBUG_VARIABLE}=1 shows the traceback).", 79))


def _version() -> str:
    from remprop import __version__

    return __version__


def build_parser() -> OneLineArgumentParser:
    """The ``remprop`` argument parser, with every sub-command.

    Building it imports :mod:`remprop.theory` and :mod:`remprop.diagrams` (for the
    choices and defaults), never torch: ``remprop validate --help`` works without the
    validation extra.
    """
    parser = OneLineArgumentParser(
        prog="remprop", description="Signal propagation through transformers at initialisation "
        "(attention as a Random Energy Model): trainability diagrams and minimum skip strengths.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action="version", version=f"remprop {_version()}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=OneLineArgumentParser)
    for add_parser in PARSERS.values():
        add_parser(commands)
    for command in commands.choices.values():
        refuse_renamed_options(command)
    return parser
