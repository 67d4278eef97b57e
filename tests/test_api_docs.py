"""The API reference (docs/api, part of the ``make docs`` site) builds from the docstrings
without a warning.

The build is nitpicky with warnings as errors: a cross-reference to a name that is not
documented, a numpydoc section error, a Parameters section that disagrees with the
signature, or a public name (``__all__``) documented nowhere fails it. The reference is
built once, as part of the whole site that executes its settings
(``tests/test_docs_site.py::test_the_site_builds_without_warnings``); the tests here show
that the checks can fail, on throwaway projects with the same settings.
"""
from __future__ import annotations

import importlib
import os
import pkgutil
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("sphinx", reason="the docs extra builds the API reference")
pytest.importorskip("numpydoc", reason="the docs extra builds the API reference")

DOCS = Path(__file__).resolve().parents[1] / "docs" / "api"


def sphinx_build(source: Path, out: Path, pythonpath: Path | None = None):
    """``python -m sphinx -n -W --keep-going -b html`` (as ``make docs``) into ``out``."""
    env = dict(os.environ, MPLBACKEND="Agg")
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(pythonpath), env.get("PYTHONPATH")]))
    command = [sys.executable, "-m", "sphinx", "-n", "-W", "--keep-going", "-q", "-b", "html",
               "-d", str(out / "doctrees"), str(source), str(out / "html")]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)


def throwaway_project(tmp_path: Path, index: str) -> Path:
    """A Sphinx project whose conf.py is the API reference's own, with one page."""
    source = tmp_path / "source"
    source.mkdir()
    (source / "conf.py").write_text(f"exec(compile(open({str(DOCS / 'conf.py')!r}).read(), 'conf.py', 'exec'))\n")
    (source / "index.rst").write_text(textwrap.dedent(index))
    return source


def test_every_public_module_has_a_section():
    """The pages are written by hand: a new module must be added to one (a moved one
    fails the build itself, as its ``automodule`` no longer imports)."""
    documented = set()
    for page in DOCS.glob("*.rst"):
        documented |= set(re.findall(r"^\.\. automodule:: (\S+)$", page.read_text(), flags=re.M))
    public = {"remprop.theory", "remprop.diagrams", "remprop.validation", "remprop.cli"}
    for name in sorted(public):
        package = importlib.import_module(name)
        public |= {info.name for info in pkgutil.walk_packages(package.__path__, name + ".")
                   if not any(part.startswith("_") for part in info.name.split("."))}
    assert sorted(public - documented) == []


def test_broken_cross_reference_fails_the_build(tmp_path):
    source = throwaway_project(tmp_path, """
        Broken
        ======

        See :func:`remprop.theory.nope`.
        """)
    result = sphinx_build(source, tmp_path)
    assert result.returncode != 0
    assert "remprop.theory.nope" in result.stderr


def test_stale_parameter_list_fails_the_build(tmp_path):
    (tmp_path / "stale_module.py").write_text(textwrap.dedent('''
        def scale(x, factor):
            """Scale x.

            Parameters
            ----------
            x : float
                The value.
            gain : float
                A parameter that the signature no longer has.
            """
            return factor * x
        '''))
    source = throwaway_project(tmp_path, """
        Stale
        =====

        .. autofunction:: stale_module.scale
        """)
    result = sphinx_build(source, tmp_path, pythonpath=tmp_path)
    assert result.returncode != 0
    assert "gain documented but not in the signature" in result.stderr
    assert "factor not documented" in result.stderr


def test_public_name_documented_nowhere_fails_the_build(tmp_path):
    package = tmp_path / "public_package"
    package.mkdir()
    (package / "__init__.py").write_text('"""A package."""\n__all__ = ["hidden"]\n\n\ndef hidden():\n    pass\n')
    source = throwaway_project(tmp_path, """
        Public
        ======

        .. automodule:: public_package

        .. public-names:: public_package
        """)
    result = sphinx_build(source, tmp_path, pythonpath=tmp_path)
    assert result.returncode != 0
    assert "public name public_package.hidden is documented nowhere" in result.stderr
