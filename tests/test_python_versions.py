"""``pip install .`` works alone on Python 3.10-3.13 (issue 26, item 10).

The suite runs on one interpreter (the Makefile's), so what would break an older one is
checked statically: every shipped module parses with Python 3.10's grammar, imports no
standard-library name added after 3.10, and imports at module level only what the core
dependencies of ``pyproject.toml`` install (``pip install .`` without extras); and
``pyproject.toml`` declares the range it is tested for (``requires-python`` and the
classifiers agree). ``tests/test_install.py`` builds and installs the distribution itself.
"""
from __future__ import annotations

import ast
import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
#: The Python versions remprop supports: the oldest is the grammar every module must parse with.
SUPPORTED = ((3, 10), (3, 11), (3, 12), (3, 13))
#: Standard-library names (module, or module.attribute) added after Python 3.10.
NEWER_STDLIB = {
    "tomllib": (3, 11), "wsgiref.types": (3, 11),
    "typing.Self": (3, 11), "typing.LiteralString": (3, 11), "typing.Never": (3, 11),
    "typing.assert_never": (3, 11), "typing.assert_type": (3, 11), "typing.reveal_type": (3, 11),
    "typing.Required": (3, 11), "typing.NotRequired": (3, 11), "typing.TypeVarTuple": (3, 11),
    "typing.Unpack": (3, 11), "typing.dataclass_transform": (3, 11), "enum.StrEnum": (3, 11),
    "enum.ReprEnum": (3, 11), "enum.verify": (3, 11), "enum.member": (3, 11), "enum.nonmember": (3, 11),
    "enum.global_enum": (3, 11), "enum.EnumCheck": (3, 11), "enum.FlagBoundary": (3, 11),
    "datetime.UTC": (3, 11), "hashlib.file_digest": (3, 11), "asyncio.TaskGroup": (3, 11),
    "asyncio.timeout": (3, 11), "contextlib.chdir": (3, 11), "operator.call": (3, 11),
    "itertools.batched": (3, 12), "typing.override": (3, 12), "typing.TypeAliasType": (3, 12),
    "warnings.deprecated": (3, 13), "copy.replace": (3, 13),
}


def _pyproject() -> dict:
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli", reason="reading pyproject.toml on Python 3.10 needs tomli")
    return tomllib.loads((REPO_ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def shipped_modules() -> list[Path]:
    """Every ``.py`` file of the distribution: the folders of ``package-dir``."""
    folders = _pyproject()["tool"]["setuptools"]["package-dir"].values()
    roots = [REPO_ROOT / folder for folder in folders]
    files = {path for root in roots for path in root.rglob("*.py")}
    return sorted(files)


def _modules_in(tree: ast.Module):
    """(module, names) of every import statement of a module, at any depth."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, [alias.name for alias in node.names]


def newer_stdlib_uses(source: str) -> list[str]:
    """The names of :data:`NEWER_STDLIB` that ``source`` imports or reads as ``module.attr``."""
    tree = ast.parse(source)
    found = []
    for module, names in _modules_in(tree):
        found += [module] if module in NEWER_STDLIB else []
        found += [f"{module}.{name}" for name in names if f"{module}.{name}" in NEWER_STDLIB]
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if f"{node.value.id}.{node.attr}" in NEWER_STDLIB:
                found.append(f"{node.value.id}.{node.attr}")
    return sorted(set(found))


def test_supported_versions_are_declared():
    """requires-python admits 3.10-3.13 and nothing older; the classifiers name exactly them."""
    from packaging.specifiers import SpecifierSet

    project = _pyproject()["project"]
    spec = SpecifierSet(project["requires-python"])
    for version in SUPPORTED:
        assert spec.contains(".".join(map(str, version))), version
    assert not spec.contains("3.9")
    classified = {tuple(int(x) for x in match.groups())
                  for c in project["classifiers"]
                  if (match := re.fullmatch(r"Programming Language :: Python :: (\d+)\.(\d+)", c))}
    assert classified == set(SUPPORTED)
    assert "Programming Language :: Python :: 3 :: Only" in project["classifiers"]


def test_the_running_interpreter_is_a_supported_one():
    assert sys.version_info[:2] in SUPPORTED


def test_every_shipped_module_parses_with_python_3_10():
    files = shipped_modules()
    assert len(files) > 100 and any(path.name == "entry.py" for path in files)  # the folders were found
    failures = []
    for path in files:
        try:
            ast.parse(path.read_text(encoding="utf-8"), filename=str(path), feature_version=SUPPORTED[0])
        except SyntaxError as err:
            failures.append(f"{path.relative_to(REPO_ROOT)}:{err.lineno}: {err.msg}")
    assert failures == []


def test_the_grammar_check_can_fail():
    """``feature_version`` does reject newer syntax (here 3.11's ``except*``)."""
    source = "try:\n    pass\nexcept* ValueError:\n    pass\n"
    ast.parse(source, feature_version=(3, 11))
    with pytest.raises(SyntaxError):
        ast.parse(source, feature_version=SUPPORTED[0])


def test_no_shipped_module_uses_a_newer_standard_library_name():
    uses = {str(path.relative_to(REPO_ROOT)): found for path in shipped_modules()
            if (found := newer_stdlib_uses(path.read_text(encoding="utf-8")))}
    assert uses == {}
    # and the scan sees such a use where there is one
    assert newer_stdlib_uses("import tomllib\nfrom typing import Self\nimport enum\nenum.StrEnum") == \
        ["enum.StrEnum", "tomllib", "typing.Self"]


def _requirement_name(requirement: str) -> str:
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_core_modules_import_only_the_core_dependencies():
    """``pip install .`` alone (no extras) must let ``remprop``, its theory, diagrams and
    command line import: their module-level imports are the standard library, remprop, and
    distributions named in ``[project] dependencies`` (torch and transformers, imported by
    ``validation/`` and inside functions, come with the extras)."""
    project = _pyproject()["project"]
    core = {_requirement_name(r) for r in project["dependencies"]}
    providers = importlib.metadata.packages_distributions()
    folders = _pyproject()["tool"]["setuptools"]["package-dir"]
    roots = [REPO_ROOT / folders[name] for name in ("remprop", "remprop.theory", "remprop.diagrams")]
    missing = {}
    for path in sorted({p for root in roots for p in root.rglob("*.py")}):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        top_level = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        for node in top_level:
            if isinstance(node, ast.ImportFrom) and node.level:
                continue
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module]
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top == "remprop":
                    continue
                distributions = {d.lower().replace("_", "-") for d in providers.get(top, [top])}
                if not distributions & core:
                    missing.setdefault(str(path.relative_to(REPO_ROOT)), []).append(name)
    assert missing == {}
