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
    assert abs(namespace["min_residual_strength"](namespace["bert"], depth=60, beta=0.5) - 1.233) < 1e-3
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
