"""The house rules of the package layout, checked on the source (no imports run).

* no module outside ``remprop.theory`` imports a private theory module (``theory._x`` or
  any ``_x`` below it): theory gives the rest a public surface;
* ``remprop.theory`` imports nothing from ``diagrams``, ``validation`` or the CLI, and
  torch is imported only in ``remprop.validation``;
* no import cycle between modules, counting imports inside functions too (a lazy import
  that closes a loop is still a loop);
* no library module is longer than 600 lines.
"""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: Package name -> folder, as pyproject.toml maps them.
PACKAGE_DIRS = {"remprop": ROOT / "src" / "remprop", "remprop.theory": ROOT / "theory",
                "remprop.diagrams": ROOT / "diagrams", "remprop.validation": ROOT / "validation"}
MAX_LINES = 600


def _modules() -> dict:
    """Dotted module name -> path, for every library module."""
    out = {}
    for package, folder in PACKAGE_DIRS.items():
        for path in sorted(folder.rglob("*.py")):
            parts = path.relative_to(folder).with_suffix("").parts
            if any(part.startswith(".") or part == "__pycache__" for part in parts):
                continue
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join((package,) + parts)
            if name in out:  # remprop.theory is both a folder of its own and below src/remprop? never
                raise AssertionError(f"two files for {name}: {out[name]}, {path}")
            out[name] = path
    return out


MODULES = _modules()


def _is_package(name) -> bool:
    return MODULES[name].name == "__init__.py"


def _imports(name) -> list:
    """(imported module, line) for every import statement of module ``name`` (any depth)."""
    tree = ast.parse(MODULES[name].read_text(encoding="utf-8"))
    package = name if _is_package(name) else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - (node.level - 1)]
                origin = ".".join(base + ([node.module] if node.module else []))
            else:
                origin = node.module
            for alias in node.names:
                candidate = f"{origin}.{alias.name}"
                found.append((candidate if candidate in MODULES else origin, node.lineno))
    return found


def _graph() -> dict:
    graph = {}
    for name in MODULES:
        targets = set()
        for target, _ in _imports(name):
            while target and target not in MODULES:  # a name inside a module: the module
                target = target.rpartition(".")[0]
            # a submodule importing its own package's __init__ is Python's normal order of
            # initialisation (the parent runs first), not a loop of ours
            if target and target != name and not name.startswith(target + "."):
                targets.add(target)
        graph[name] = targets
    return graph


def test_modules_are_found():
    assert "remprop.theory.architecture" in MODULES and "remprop.diagrams.trainability" in MODULES
    assert len(MODULES) > 40


def test_no_private_theory_import_outside_theory():
    offenders = []
    for name in MODULES:
        if name.startswith("remprop.theory"):
            continue
        for target, line in _imports(name):
            parts = target.split(".")
            if target.startswith("remprop.theory.") and any(p.startswith("_") for p in parts[2:]):
                offenders.append(f"{MODULES[name].relative_to(ROOT)}:{line} imports {target}")
    assert not offenders, "\n".join(offenders)


@pytest.mark.parametrize("forbidden", ["remprop.diagrams", "remprop.validation", "remprop.cli", "torch"])
def test_theory_imports_no_outer_layer(forbidden):
    offenders = [f"{MODULES[name].relative_to(ROOT)}:{line} imports {target}"
                 for name in MODULES if name.startswith("remprop.theory")
                 for target, line in _imports(name) if target == forbidden or target.startswith(forbidden + ".")]
    assert not offenders, "\n".join(offenders)


def test_torch_only_in_validation():
    offenders = [f"{MODULES[name].relative_to(ROOT)}:{line}"
                 for name in MODULES if not name.startswith("remprop.validation")
                 for target, line in _imports(name) if target == "torch" or target.startswith("torch.")]
    assert not offenders, "\n".join(offenders)


def test_no_import_cycle():
    graph = _graph()
    # Tarjan's strongly connected components: any component of more than one module is a cycle
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for other in graph[node]:
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                on_stack.discard(other)
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    assert not cycles, "import cycles: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_cycle_detector_sees_a_cycle(monkeypatch):
    """The check above can fail: two modules importing each other form a component."""
    graph = {"a": {"b"}, "b": {"a"}, "c": set()}
    monkeypatch.setitem(globals(), "_graph", lambda: graph)
    with pytest.raises(AssertionError, match="a <-> b"):
        test_no_import_cycle()


def test_modules_stay_short():
    long = {str(path.relative_to(ROOT)): n for path in MODULES.values()
            if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert not long, f"modules over {MAX_LINES} lines: {long}"


def test_docs_hold_no_control_characters():
    """A Python string written without ``r`` turns ``\\b``/``\\f`` of LaTeX into control characters
    (``\\big`` became backspace + ``ig``): none may sit in the docs or the notebooks' markdown."""
    bad = []
    for path in sorted([*(ROOT / "docs").rglob("*.md"), ROOT / "README.md"]):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if any(ord(ch) < 32 and ch != "\t" for ch in line):
                bad.append(f"{path.relative_to(ROOT)}:{number}")
    assert not bad, f"control characters in: {', '.join(bad)}"
