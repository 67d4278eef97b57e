"""Every ``remprop ...`` command of the bash blocks of README.md and docs/getting_started.md runs as written.

Each command is run in-process (``remprop.cli.main``, as a user types it, in a temporary working
folder), and must exit 0; where the docs quote a number next to it, the number is checked against
what it prints. A command whose full run takes more than a few seconds runs at a size stated in
:data:`SIZES`: options appended to the line as written (argparse keeps the last value of an option,
so ``--depth 2`` after ``--depth 8`` runs two layers; every other option stays as the docs write it).
``remprop precompile`` (a minute or two of compiling in subprocesses) is only parsed here: its parts
run in tests/test_cold_start.py.
The two commands that run for many minutes by design (``figures --quick``, ``lr-sweep``) are run with
``--max-seconds 1`` appended: they are refused before any work, and the estimate in the refusal must
lie within the ``--max-seconds`` the docs give them, so that as written they start rather than being
refused. Placeholders (``path/to/config.json``, ``path/to/saved_model/``) become a shipped
configuration file and a tiny saved BERT.

A command added to the docs fails :func:`test_every_documented_command_is_sized` until it is listed here
(with ``()`` when it runs as written). Total: about 40 s on two cores at load 4, 90 s at load 11.
"""
from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from cli_checks import run_cli

ROOT = Path(__file__).resolve().parents[1]
DOCS = (ROOT / "README.md", ROOT / "docs" / "getting_started.md")

#: The size each documented command runs at in this test: the options appended to it as written.
SIZES = {
    "precompile": None,  # parsed only: tests/test_cold_start.py runs precompile_parts (a minute or two here)
    "check bert-base": (),
    "check gpt2 --seq-len 256 --json": ("--depth", "1"),           # the causal Gram state of one layer at T = 256
    "check bert-48 --simulate": ("--depth", "3", "--width", "64", "--seq-len", "32"),
    "check path/to/config.json --depth 96": ("--max-depth", "1000"),  # the collapse-depth search: 1000 blocks
    "check path/to/saved_model/": (),
    "train --alpha 0.1 --depth 10 --width 32 --seq-len 32 --steps 300 --lr 3e-3 --out run": ("--steps", "10"),
    "trained-diagram --depth 10 --beta 0.5,6 --alpha 0.1,1 --seeds 3 --width 32 --seq-len 32 --steps 300 --lr 3e-3 "
    "--batch-size 16 --vocab-size 1024 --device cpu --out phases-L10": ("--steps", "5", "--seeds", "1", "--depth", "2",
                                                                      "--workers", "0"),  # in this process
    "recipes --depth 48": ("--depth", "6", "--no-figure"),  # the figure: tests/test_figure_defects.py
    "lr-sweep --out lrsweep --max-seconds 3600": ("--max-seconds", "1"),   # refused: its estimate is checked
    "diagram": (),
    "min-alpha --depth 60 --beta 0.5": (),
    "propagate --depth 12 --beta 0.5 --alpha 1.2": (),
    "min-alpha --heads 4 --qk-scaling head --beta 0.3": (),
    "figures --quick --out figs/ --max-seconds 3600": ("--max-seconds", "1"),   # refused: its estimate is checked
    "validate --depth 8 --width 128 --seq-len 128": ("--depth", "2", "--width", "64", "--seq-len", "32"),
    "check gpt2 --simulate": ("--depth", "2", "--width", "64", "--seq-len", "32"),
    "min-alpha --depth 12 --beta 0.5": (),
    "diagram --depth 12 --beta 0.05:3:60 --alpha 0:3:60 --out first": (),
    "check gpt2 --json": (),  # T = 1024: the causal Gram state (its fast method, 108 layers for the verdict)
    "validate --depth 4 --width 128 --sim-seq-len 64 --seeds 2 --out first-sim": ("--width", "64"),
}
#: Commands that need torch (the ``validation`` extra).
NEEDS_TORCH = ("--simulate", "validate ", "train ", "trained-diagram ", "lr-sweep ", "figures ", "saved_model")
#: Commands refused by design in this test (``--max-seconds 1``): the limit the docs give them.
REFUSED = ("lr-sweep ", "figures ")


def documented_commands() -> list[str]:
    """Each ``remprop ...`` line of the docs' bash blocks (continuations joined, comments dropped), without
    ``remprop``, once each, in the order of the docs."""
    found = []
    for path in DOCS:
        for block in re.findall(r"```bash\n(.*?)```", path.read_text(), flags=re.S):
            for line in block.replace("\\\n", " ").splitlines():
                argv = shlex.split(line, comments=True)
                if argv[:1] == ["remprop"] and " ".join(argv[1:]) not in found:
                    found.append(" ".join(argv[1:]))
    return found


def test_every_documented_command_is_sized():
    assert set(documented_commands()) == set(SIZES)


def _argv(command, tmp_path):
    argv = shlex.split(command) + list(SIZES[command] or ())
    if "path/to/config.json" in argv:
        argv[argv.index("path/to/config.json")] = str(ROOT / "theory" / "models" / "configs" / "bert-base.json")
    if "path/to/saved_model/" in argv:
        argv[argv.index("path/to/saved_model/")] = str(_saved_model(tmp_path / "saved_model"))
    return argv


def _saved_model(folder):
    """A two-layer BERT at its own random init, saved as a user's ``save_pretrained`` folder."""
    transformers = pytest.importorskip("transformers")
    config = transformers.BertConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                     num_attention_heads=4, vocab_size=1000, max_position_embeddings=128)
    transformers.BertModel(config).save_pretrained(folder)
    return folder


def _number(pattern, text):
    match = re.search(pattern, text)
    assert match, (pattern, text[:2000])
    return float(match.group(1))


@pytest.mark.parametrize("command", list(SIZES))
def test_documented_command_runs(command, tmp_path, monkeypatch, capsys):
    if any(word in command + " " for word in NEEDS_TORCH):
        pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)  # the commands write their default --out folders here
    if SIZES[command] is None:
        from remprop.cli.parser import build_parser

        assert build_parser().parse_args(shlex.split(command)).command == shlex.split(command)[0]
        return
    code, out, err = run_cli(capsys, *_argv(command, tmp_path))
    if command.startswith(REFUSED):
        # refused at --max-seconds 1 with its estimate, which fits the limit the docs give it
        limit = float(shlex.split(command)[shlex.split(command).index("--max-seconds") + 1])
        match = re.search(r"would take about ([0-9.]+) (s|min|h)", err)
        assert code == 2 and match, err
        seconds = float(match.group(1)) * {"s": 1, "min": 60, "h": 3600}[match.group(2)]
        assert seconds <= limit, err
        return
    assert code == 0, err[-3000:]
    _check_quoted_numbers(command, out, capsys)


def _check_quoted_numbers(command, out, capsys):
    """The numbers the docs quote beside a command."""
    if command == "check bert-base":
        # README: beta = 0.123 against beta_c = 1.73, alpha*(12) = 0.41, cosine 0.333 -> 0.615, 0.99 at layer
        # 62, a query gradient that falls 2.7x
        assert round(_number(r"beta = ([0-9.]+)", out), 3) == 0.123
        assert round(_number(r"beta_c = ([0-9.]+)", out), 2) == 1.73
        assert round(_number(r"alpha\*\(L = 12\) = ([0-9.]+)", out), 2) == 0.41
        assert round(_number(r"layer +0 +rho = ([0-9.]+)", out), 3) == 0.333
        assert round(_number(r"layer +12 +rho = ([0-9.]+)", out), 3) == 0.615
        assert _number(r"rank collapse sets in at layer (\d+)", out) == 62
        assert round(_number(r"falls ([0-9.]+)x over the stack", out), 1) == 2.7
    elif command == "min-alpha --depth 60 --beta 0.5":
        assert round(_number(r"\n *0\.5 +([0-9.]+)", out), 3) == 1.233  # the README's ~1.233
    elif command == "min-alpha --heads 4 --qk-scaling head --beta 0.3":
        # "= one head at beta 1.2"
        code, one_head, err = run_cli(capsys, "min-alpha", "--beta", "1.2")
        assert code == 0, err
        assert _number(r"\n *0\.3 +([0-9.]+)", out) == _number(r"\n *1\.2 +([0-9.]+)", one_head)
    elif command in ("check gpt2 --seq-len 256 --json", "check gpt2 --json"):
        data = json.loads(out)
        assert data["model"]["seq_len"] == (256 if "256" in command else 1024)
