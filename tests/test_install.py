"""Packaging: the regular (non-editable) install works on its own.

The development environment uses an editable install, which would hide packaging
mistakes (a sub-package missing from ``pyproject.toml``, a module that imports from the
source tree, a folder mapped under the wrong name). Here the project is installed with
``pip install --target`` into a temporary directory and used from a process whose
working directory is elsewhere, so only the installed copy can be imported.
"""
from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.packaging

# Paths a fresh clone would not have; never copied into the build tree.
_BUILD_LEFTOVERS = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", ".hypothesis",
    "remprop-*", "*.nbi", "*.nbc", ".ipynb_checkpoints")


def _copy_source_tree(destination: Path) -> Path:
    """Copy what a clone of the repository holds (tracked and not-ignored files).

    Building from a copy keeps ``build/`` and ``*.egg-info`` out of the working tree and
    makes stale build leftovers there unable to leak into the installed package.
    """
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
            cwd=REPO_ROOT, capture_output=True, check=True, timeout=30).stdout.decode().split("\0")
    except (OSError, subprocess.SubprocessError):
        listed = None
    if not listed or listed == [""]:
        shutil.copytree(REPO_ROOT, destination, ignore=_BUILD_LEFTOVERS)
        return destination
    for name in filter(None, listed):
        source = REPO_ROOT / name
        if source.is_file():
            target = destination / name
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target)
    return destination


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Directory holding a regular ``pip install --target`` of the project."""
    pytest.importorskip("setuptools", reason="--no-build-isolation needs setuptools in this environment")
    source = _copy_source_tree(tmp_path_factory.mktemp("source"))
    target = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--no-warn-script-location", "--target", str(target), str(source)],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return target


def _run_installed(target: Path, cwd: Path, *argv):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "REMPROP_DEBUG")}
    env["PYTHONPATH"] = str(target)
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_regular_install_imports_from_the_installed_copy(installed, tmp_path):
    code = (
        "import json, remprop, remprop.theory, remprop.diagrams\n"
        "from remprop.theory import critical_beta\n"
        "print(json.dumps({'theory': remprop.theory.__file__, 'diagrams': remprop.diagrams.__file__,\n"
        "                  'cli': __import__('remprop.cli').cli.__file__,\n"
        "                  'version': remprop.__version__, 'beta_c': critical_beta(1.0, 0.0)}))\n")
    result = _run_installed(installed, tmp_path, "-c", code)
    assert result.returncode == 0, result.stderr
    info = json.loads(result.stdout)
    for module in ("theory", "diagrams", "cli"):
        assert Path(info[module]).resolve().is_relative_to(installed.resolve()), info[module]
    assert not (installed / "theory").exists() and not (installed / "diagrams").exists()  # nothing generic
    assert info["version"] != "0+unknown"  # the distribution metadata was installed
    # docs/theory.md section 3: beta_c(q=1, p=0) = sqrt(2 / (1 * 1)) = sqrt(2)
    assert info["beta_c"] == pytest.approx(math.sqrt(2), rel=1e-15)


def test_regular_install_runs_the_command_line(installed, tmp_path):
    result = _run_installed(installed, tmp_path, "-m", "remprop", "min-alpha", "--depth", "10", "--beta", "0.5",
                            "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["depth"] == 10 and data["beta"] == 0.5
    alpha_star = float(data["alpha_star"])
    assert math.isfinite(alpha_star) and alpha_star > 0


def test_regular_install_ships_the_model_configs(installed, tmp_path):
    """`remprop check bert-base` works offline from the installed copy (package data)."""
    result = _run_installed(installed, tmp_path, "-m", "remprop", "check", "--hf-config", "bert-base",
                            "--depth", "2", "--json", "--no-figure", "--out", str(tmp_path))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["model"]["width"] == 768 and data["model"]["heads"] == 12
    # beta = r^2 d / sqrt(log T) with r = 0.02, d = 768, T = 512
    assert data["beta"] == pytest.approx(0.02 ** 2 * 768 / math.sqrt(math.log(512)))
