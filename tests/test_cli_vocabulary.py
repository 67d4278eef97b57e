"""One vocabulary across the ``remprop`` commands (issue 26, item 8), checked on every sub-parser:
help texts without Sphinx markup or internal words, ``--seq-len`` wherever a command has a
sequence length, ``--beta``/``--alpha`` for grids, ``--out`` defaulting to ``remprop-<command>``,
one ``--seeds`` default, ``--threads`` on every command, and the old spellings refused with one
line naming the new option."""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from cli_checks import assert_one_line_error, run_cli  # noqa: E402

from remprop.cli.commands import COMMANDS  # noqa: E402
from remprop.cli.options import RENAMED_OPTIONS, SIMULATION_SEEDS, plain_help  # noqa: E402
from remprop.cli.parser import build_parser  # noqa: E402

#: Commands without a sequence length: figures draws fixed figures (its sizes come with --quick);
#: lr-sweep trains a design fixed before its runs (T 64 in every run); precompile runs fixed command lines.
NO_SEQUENCE = {"figures", "lr-sweep", "precompile"}
#: Commands that write no file (they print their answer, or fill caches), hence have no --out.
NO_FILES = {"min-alpha", "propagate", "precompile"}
#: Commands whose --seeds default differs from SIMULATION_SEEDS, with the documented reason
#: (remprop.cli.options.SIMULATION_SEEDS): a training run per seed; the table's 12.
OTHER_SEEDS = {"trained-diagram": [0], "acceptance": None}
#: Old spellings a command still has: validate's two sequence lengths override --seq-len.
KEPT = {"validate": {"--theory-seq-len", "--sim-seq-len"}}
#: Sphinx roles, inline literals and internal words ("issue 14") that a help text must not show.
MARKUP = re.compile(r":[a-z]+:`|``|\bissue \d+", re.IGNORECASE)


@pytest.fixture(scope="module")
def parsers():
    parser = build_parser()
    subparsers = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    summaries = {choice.dest: choice.help for choice in subparsers._choices_actions}
    return parser, subparsers.choices, summaries


def _option(parser, name):
    action = parser._option_string_actions.get(name)
    return None if action is None or action.help == argparse.SUPPRESS else action


@pytest.mark.parametrize("command", COMMANDS)
def test_help_has_no_markup_and_no_internal_words(parsers, command):
    parser, commands, summaries = parsers
    text = commands[command].format_help() + "\n" + summaries[command]
    found = MARKUP.findall(text)
    assert not found, (command, found)
    assert not MARKUP.findall(parser.format_help())


@pytest.mark.parametrize("command", COMMANDS)
def test_the_common_options(parsers, command):
    _, commands, _ = parsers
    parser = commands[command]
    assert (_option(parser, "--seq-len") is not None) == (command not in NO_SEQUENCE), command
    assert _option(parser, "--threads") is not None, command
    out = _option(parser, "--out")
    assert (out is None) == (command in NO_FILES), command
    assert out is None or out.default == f"remprop-{command}", (command, out.default)
    seeds = _option(parser, "--seeds")
    if seeds is not None:
        assert seeds.default == OTHER_SEEDS.get(command, list(range(SIMULATION_SEEDS))), command
    for old in ("--betas", "--alphas"):  # a grid is --beta / --alpha
        assert _option(parser, old) is None, (command, old)


@pytest.mark.parametrize("command", COMMANDS)
def test_old_spellings_are_refused_naming_the_new_option(capsys, parsers, command):
    for old, new in RENAMED_OPTIONS.items():
        if old in KEPT.get(command, ()):
            continue
        code, out, err = run_cli(capsys, command, old, "1")
        assert_one_line_error(code, err, old, new)
        assert out == ""


def test_validate_seq_len_sets_both_lengths_and_the_overrides_win(parsers):
    from remprop.cli.options import simulated_seq_len

    parser, _, _ = parsers
    args = parser.parse_args(["validate", "--seq-len", "64"])
    assert simulated_seq_len(args) == 64 and args.seq_len == 64 and args.theory_seq_len is None
    args = parser.parse_args(["validate", "--seq-len", "64", "--sim-seq-len", "32", "--theory-seq-len", "128"])
    assert simulated_seq_len(args) == 32 and args.theory_seq_len == 128
    assert simulated_seq_len(parser.parse_args(["validate"])) == 512


def test_a_grid_takes_beta_and_alpha(parsers):
    parser, _, _ = parsers
    args = parser.parse_args(["diagram", "--beta", "0.5,1", "--alpha", "0:2:3"])
    assert list(args.beta) == [0.5, 1.0] and list(args.alpha) == [0.0, 1.0, 2.0]


def test_every_option_is_parsed_under_its_own_name(parsers):
    """``--seq-len`` is ``args.seq_len`` in every command (not ``theory_seq_len`` or ``sim_seq_len``),
    ``--alpha`` ``args.alpha``, ``--figure`` / ``--no-figure`` ``args.figure``: one name for an option and its value."""
    from remprop.cli.options import option_dest

    parser, commands, _ = parsers
    other = [f"{name} {action.option_strings[-1]} -> {action.dest}" for name, command in commands.items()
             for action in command._actions if action.option_strings and action.dest != "help"
             and not action.dest.startswith("renamed_")  # the refused old spellings
             and action.dest != option_dest(action.option_strings[0])]
    assert other == []
    args = parser.parse_args(["propagate", "--alpha", "2", "--seq-len", "64"])
    assert (args.alpha, args.seq_len) == (2.0, 64)


def test_plain_help_drops_the_markup():
    text = ("see :func:`~remprop.theory.causal.choose_causal_theory` and :data:`MAX_SECONDS`, "
            "the ``simulation.causal_theory`` key, :mod:`remprop.validation.streamed_layers`")
    assert plain_help(text) == ("see choose_causal_theory and MAX_SECONDS, the simulation.causal_theory key, "
                                "streamed_layers")


def test_negative_values_are_joined_to_their_option_without_patching_argparse():
    """``--beta -1:1:3`` is read as ``--beta=-1:1:3`` (argparse's spelling of a value with a leading
    minus), by the parser's public ``parse_known_args``; argparse's own matcher is left as it is."""
    from remprop.cli.options import OneLineArgumentParser, join_negative_values

    assert join_negative_values(["propagate", "--beta", "-inf", "--q0", "-1e5", "--json", "--", "--x", "-1"]) == \
        ["propagate", "--beta=-inf", "--q0=-1e5", "--json", "--", "--x", "-1"]
    assert join_negative_values(["--beta=-1", "-2"]) == ["--beta=-1", "-2"]  # a value already given
    parser = OneLineArgumentParser(prog="p")
    parser.add_argument("--shift", type=float)
    plain = argparse.ArgumentParser()
    assert parser._negative_number_matcher.pattern == plain._negative_number_matcher.pattern  # argparse's own
    assert parser.parse_args(["--shift", "-1e-3"]).shift == -1e-3
    assert parser.parse_args(["--shift", "-inf"]).shift == float("-inf")
