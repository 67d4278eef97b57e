"""Packaging: the distribution builds, passes ``twine check``, and installs on its own.

The development environment uses an editable install, which would hide packaging
mistakes (a sub-package missing from ``pyproject.toml``, a module that imports from the
source tree, a folder mapped under the wrong name). Here ``python -m build`` makes the
sdist and, from the sdist, the wheel (as a user's ``pip install remprop-*.tar.gz`` would),
``twine check --strict`` reads both, the wheel is compared file by file with the source
folders, and it is installed with ``pip install --target`` into a temporary directory and
used from a process whose working directory is elsewhere, so only the installed copy can
be imported.
"""
from __future__ import annotations

import json
import math
import tarfile
import zipfile
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
def distributions(tmp_path_factory):
    """``python -m build`` of a copy of the source tree: {"sdist": path, "wheel": path}.

    Without build isolation (the environment's setuptools, no download), as the install
    below; the wheel is built from the sdist, so a file the sdist lacks is missing there too.
    """
    pytest.importorskip("setuptools", reason="--no-isolation needs setuptools in this environment")
    pytest.importorskip("build", reason="the test extra installs build")
    source = _copy_source_tree(tmp_path_factory.mktemp("source"))
    out = tmp_path_factory.mktemp("dist")
    result = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    sdists, wheels = sorted(out.glob("remprop-*.tar.gz")), sorted(out.glob("remprop-*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1, sorted(p.name for p in out.iterdir())
    return {"sdist": sdists[0], "wheel": wheels[0], "log": result.stdout + result.stderr}


@pytest.fixture(scope="module")
def installed(distributions, tmp_path_factory):
    """Directory holding a regular ``pip install --target`` of the built wheel."""
    target = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
         "--disable-pip-version-check", "--no-warn-script-location", "--target", str(target),
         str(distributions["wheel"])],
        capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    return target


def _shipped_sources() -> dict:
    """Installed path -> source path of every file the distribution must hold: each ``.py``
    of the ``package-dir`` folders and the package data (the model configurations)."""
    from test_python_versions import _pyproject

    setuptools = _pyproject()["tool"]["setuptools"]
    files = {}
    for package, folder in setuptools["package-dir"].items():
        for path in (REPO_ROOT / folder).rglob("*.py"):
            files["/".join([*package.split("."), *path.relative_to(REPO_ROOT / folder).parts])] = path
    for package, patterns in setuptools["package-data"].items():
        parts = package.split(".")
        # the folder of a package: its longest mapped ancestor's folder, then the rest of its name
        mapped = max((p for p in setuptools["package-dir"] if parts[:len(p.split("."))] == p.split(".")),
                     key=lambda p: len(p.split(".")))
        home = (REPO_ROOT / setuptools["package-dir"][mapped]).joinpath(*parts[len(mapped.split(".")):])
        for pattern in patterns:
            for path in home.glob(pattern):
                files["/".join([*parts, *path.relative_to(home).parts])] = path
    return files


@pytest.mark.slow  # builds the distributions (module fixture): this file's group starts first (tests/conftest.py)
def test_twine_accepts_the_sdist_and_the_wheel(distributions):
    pytest.importorskip("twine", reason="the test extra installs twine")
    result = subprocess.run([sys.executable, "-m", "twine", "check", "--strict",
                             str(distributions["sdist"]), str(distributions["wheel"])],
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.count("PASSED") == 2, result.stdout


def test_the_build_warns_of_nothing(distributions):
    """setuptools' warnings filled the install's output (about 60 lines): ``project.license`` as a table,
    ``Package 'remprop.theory.models.configs' is absent from the packages configuration`` (a data folder not
    listed as a package). ``warning: ... byte-compiling is disabled`` is the build's own note, not a warning."""
    warned = [line.strip() for line in distributions["log"].splitlines()
              if "Warning:" in line or "is absent from" in line]
    assert not warned, warned


def test_the_wheel_holds_every_module_and_the_model_configs(distributions):
    expected = _shipped_sources()
    configs = [name for name in expected if name.startswith("remprop/theory/models/configs/")]
    assert len(configs) >= 10 and all(name.endswith(".json") for name in configs)  # the data was found
    with zipfile.ZipFile(distributions["wheel"]) as wheel:
        names = set(wheel.namelist())
        assert sorted(set(expected) - names) == []
        for name in configs:  # the same bytes as the source's
            assert wheel.read(name) == expected[name].read_bytes(), name
        metadata = next(n for n in names if n.endswith(".dist-info/METADATA"))
        text = wheel.read(metadata).decode()
        entry_points = wheel.read(metadata.replace("METADATA", "entry_points.txt")).decode()
    # every folder holding modules is a package of the wheel (none left out of pyproject.toml)
    packages = {name.rsplit("/", 1)[0] for name in expected if name.endswith(".py")}
    assert sorted(p for p in packages if f"{p}/__init__.py" not in names) == []
    assert not any(name.startswith(("theory/", "diagrams/", "validation/", "tests/")) for name in names)
    assert "Requires-Python: >=3.10" in text and "Classifier: Programming Language :: Python :: 3.13" in text
    assert "Description-Content-Type: text/markdown" in text
    assert "remprop = remprop.cli:main" in entry_points


def test_the_sdist_holds_the_sources_and_the_readme(distributions):
    with tarfile.open(distributions["sdist"]) as sdist:
        names = {name.split("/", 1)[1] for name in sdist.getnames() if "/" in name}
    expected = {str(path.relative_to(REPO_ROOT)) for path in _shipped_sources().values()}
    assert sorted(expected - names) == []
    assert {"pyproject.toml", "README.md", "PKG-INFO"} <= names


def _run_installed(target: Path, cwd: Path, *argv):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "REMPROP_DEBUG")}
    env["PYTHONPATH"] = str(target)
    return subprocess.run([sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def test_regular_install_imports_from_the_installed_copy(installed, tmp_path):
    code = (
        "import json, remprop, remprop.theory, remprop.diagrams\n"
        "from remprop.theory import beta_critical\n"
        "print(json.dumps({'theory': remprop.theory.__file__, 'diagrams': remprop.diagrams.__file__,\n"
        "                  'cli': __import__('remprop.cli').cli.__file__,\n"
        "                  'version': remprop.__version__, 'beta_c': beta_critical(1.0, 0.0)}))\n")
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


def test_the_makefiles_pip_fallback_installs_pip(tmp_path):
    """The venv's pip comes from ``ensurepip`` where the interpreter's own pip cannot install into it (a
    PATH whose ``python3.X`` is the new venv's, without pip): the Makefile's call, run into a new venv without
    pip, must install it (``ensurepip -q`` is refused, ``-q`` is not one of its options: ``make run`` stopped
    there). About 10 s."""
    makefile = (REPO_ROOT / "Makefile").read_text()
    calls = [line.split("-m ensurepip", 1)[1] for line in makefile.splitlines() if "-m ensurepip" in line]
    assert calls, "the Makefile no longer falls back to ensurepip"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "venv")], check=True, timeout=120)
    python = str(tmp_path / "venv" / "bin" / "python")
    for call in calls:
        options = [word for word in call.split(">")[0].split() if word not in ("||", "\\")]
        done = subprocess.run([python, "-m", "ensurepip", *options], capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (options, done.stderr)
        assert subprocess.run([python, "-m", "pip", "--version"], capture_output=True, timeout=60).returncode == 0
