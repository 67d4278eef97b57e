"""The README's Python tour runs as written."""
from __future__ import annotations

import re
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_python_blocks_run(tmp_path, monkeypatch):
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)  # the tour saves files into the working directory
    namespace: dict = {}
    for block in blocks:
        exec(compile(block, str(README), "exec"), namespace)
    # the numbers the tour quotes in its comments
    assert abs(namespace["traj"].rho[-1] - 0.9996) < 1e-4
    assert abs(namespace["alpha_star"](namespace["bert"], depth=60, beta=0.5) - 1.233) < 1e-3
    assert namespace["grid"].rho.shape == (4, 50, 61)
    assert (tmp_path / "bert60.npz").exists() and (tmp_path / "bert60.json").exists()
    # the real-model section: BERT-base numbers quoted in the prose
    report = namespace["report"]
    assert round(report.spec.beta, 3) == 0.123 and round(report.beta_critical, 2) == 1.73
    assert round(report.alpha_star, 2) == 0.41 and report.phase == "trainable"
    assert round(report.rho[0], 3) == 0.333 and round(report.rho[-1], 3) == 0.615
    assert report.collapse_depth == 62
    assert round(report.gradient_first / report.gradient_last, 1) == 2.7
    assert namespace["trace"].rho.shape == (2, 5)


# -- the training numbers: what the README's own command prints ----------------------------
DATA = README.parent / "docs" / "data"


def _readme_commands(command: str) -> list[list[str]]:
    """argv (without ``remprop``) of each ``remprop COMMAND ...`` of the README's bash blocks."""
    import shlex

    found = []
    for block in re.findall(r"```bash\n(.*?)```", README.read_text(), flags=re.S):
        for line in block.replace("\\\n", " ").splitlines():
            argv = shlex.split(line, comments=True)
            if argv[:2] == ["remprop", command]:
                found.append(argv[1:])
    return found


def test_readme_training_numbers_are_what_its_command_prints():
    """The README quotes final test losses and an agreement count of a trained grid. They
    must be the numbers of the file its own ``remprop trained-diagram`` command writes
    (``OUT/trained_diagram.json``, kept as ``docs/data/trained-diagram-OUT.json``), and that
    file must hold the settings of the command as the README writes it (parsed by the CLI's
    own parser, so a renamed option fails here too)."""
    import json

    from remprop.cli.parser import build_parser

    text = " ".join(README.read_text().split())
    quoted = [argv for argv in _readme_commands("trained-diagram")
              if f"docs/data/trained-diagram-{argv[argv.index('--out') + 1]}.json" in text]
    assert len(quoted) == 1, "the README names the file of one trained-diagram command"
    args = build_parser().parse_args(quoted[0])
    data = json.loads((DATA / f"trained-diagram-{args.out}.json").read_text())
    grid = data["settings"]["grid"]
    config = grid["config"]
    assert (config["depth"], config["width"], config["seq_len"], config["steps"], config["lr"],
            config["batch_size"], config["vocab_size"], config["arch"]["norm"]) == \
        (args.depth, args.width, args.seq_len, args.steps, args.lr, args.batch_size, args.vocab_size, args.norm)
    assert (grid["betas"], grid["alphas"], grid["seeds"]) == (list(args.beta), list(args.alpha), list(args.seeds))
    assert args.device == "cpu" and grid["threads"] == 1  # the CPU numbers, one thread (reproducible)

    loss, spread = data["arrays"]["final_test_loss"], data["arrays"]["final_test_loss_std"]
    predicted = data["predicted"]["arrays"]["phase"]
    labels = data["predicted"]["labels"]
    cells = re.findall(r"(trainable|rank collapse|entropy collapse) \(alpha_SA = (\d+(?:\.\d+)?), beta = (\d+(?:\.\d+)?)\) "
                       r"(\d+(?:\.\d+)?) \+- (\d+(?:\.\d+)?)", text)
    assert [cell[0] for cell in cells] == ["trainable", "rank collapse", "entropy collapse"]
    for phase, alpha, beta, mean, std in cells:
        a, b = grid["alphas"].index(float(alpha)), grid["betas"].index(float(beta))
        assert labels[str(predicted[a][b])] == phase.replace(" ", "-")  # the theory's phase at init
        assert (f"{loss[a][b]:.2f}", f"{spread[a][b]:.2f}") == (mean, std), phase
    (unigram,) = re.findall(r"unigram baseline (\d+(?:\.\d+)?)", text)
    assert f"{data['values']['unigram_loss']:.2f}" == unigram
    (agree, cells_total), = re.findall(r"agrees with the theory in (?:only )?(\d+) of (\d+) cells", text)
    phase = data["arrays"]["phase"]
    agreeing = sum(phase[i][j] == predicted[i][j] for i in range(len(phase)) for j in range(len(phase[0])))
    assert (int(agree), int(cells_total)) == (agreeing, len(phase) * len(phase[0]))
