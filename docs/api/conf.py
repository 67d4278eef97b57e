"""Sphinx configuration of the remprop API reference.

The documentation site (``docs/conf.py``, ``make docs``) executes this file and adds the
markdown pages; the reference also builds alone (``python -m sphinx docs/api OUT``).

Built with warnings as errors (``-W --keep-going``) and ``nitpicky = True``: a broken
cross-reference, a numpydoc section error, a Parameters section that no longer matches
the signature (numpydoc's checks PR01/PR02, done by :func:`check_parameter_lists`) or a
public name documented nowhere fails the build, and with it ``tests/test_docs_site.py``.
No intersphinx: the build needs no network.
"""
from __future__ import annotations

import importlib
import inspect
import os
import sys

from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

logger = logging.getLogger("remprop.api_docs")

os.environ.setdefault("MPLBACKEND", "Agg")  # the figure modules import pyplot

project = "remprop"
author = "remprop contributors"
copyright = "remprop contributors"

extensions = [
    "sphinx.ext.autodoc",
    "sphinx.ext.mathjax",
    "sphinx.ext.autosummary",  # the tables of public names (no generated stub pages)
    "numpydoc",
]
autosummary_generate = False

root_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
html_static_path: list[str] = []

# --- autodoc: hand-written automodule pages, signatures without type hints -------------------
# (the numpydoc Parameters sections carry the types; hints in signatures would link to
# numpy/torch classes that have no target without intersphinx)
autodoc_default_options = {"member-order": "bysource"}
autodoc_typehints = "none"
autodoc_inherit_docstrings = False
autoclass_content = "class"

# --- numpydoc ------------------------------------------------------------------------------
numpydoc_show_class_members = False  # autodoc :members: lists them; no autosummary tables
numpydoc_xref_param_type = False
numpydoc_class_members_toctree = False
# numpydoc's own validation is off: its PR01 flags every helper without a Parameters
# section (and every dataclass field), and numpydoc 1.11 crashes (StopIteration in
# ``source_file_def_line``) on properties built as ``property(lambda self: ...)``.
# ``check_parameter_lists`` below does PR01 + PR02 where a docstring has a Parameters section.
numpydoc_validation_checks: set[str] = set()

# --- cross-references ----------------------------------------------------------------------
nitpicky = True
# Only names outside remprop, which have no target without intersphinx (never our own):
nitpick_ignore = [
    ("py:class", "matplotlib.figure.Figure"),  # what the figure functions return
    ("py:class", "torch.Generator"),  # validation.backend: the seeded random streams
    ("py:class", "torch.nn.Linear"),  # validation.layers: the initialisation it replaces
    ("py:class", "numpy.random.SeedSequence"),  # validation.backend: the stream derivation
    ("py:class", "argparse.ArgumentTypeError"),  # cli.converters: what a bad value raises
    ("py:func", "os.replace"),  # validation.experiments.cell_store: the atomic write
    ("py:mod", "pydoc_data.topics"),  # validation.text: the standard library's text corpus
    ("py:class", "None.Y2"),  # symbolic.PARTICIPATION: a sympy function class, no module
]


# --- parameter lists against signatures ----------------------------------------------------
def check_parameter_lists(app, what, name, obj, options, lines):
    """Warn when a Parameters section and the signature disagree (numpydoc PR01 + PR02).

    Runs before numpydoc rewrites the docstring. Only docstrings with a Parameters section
    are checked, so one-line helpers need none; a section that names a parameter the
    signature lacks (stale) or omits one it has (missing) fails the ``-W`` build.
    """
    if what not in ("function", "method", "class"):
        return
    from numpydoc.docscrape import NumpyDocString

    try:
        sections = NumpyDocString("\n".join(lines))
    except Exception:  # numpydoc itself reports malformed sections
        return
    entries = list(sections["Parameters"]) + list(sections["Other Parameters"])
    if not entries:
        return
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):
        return
    actual = [p.name for p in signature.parameters.values() if p.name not in ("self", "cls")]
    documented = {part.strip().lstrip("*") for entry in entries for part in entry.name.split(",")}
    missing = [p for p in actual if p not in documented]
    unknown = sorted(documented - set(actual))
    try:
        location = f"{inspect.getsourcefile(obj)}:{inspect.getsourcelines(obj)[1]}"
    except (OSError, TypeError):
        location = None
    for kind, names in (("not documented", missing), ("documented but not in the signature", unknown)):
        if names:
            logger.warning("%s: parameters %s %s", name, ", ".join(names), kind,
                           type="remprop", subtype="parameters", location=location)


# --- public names: documented once, where they are defined -----------------------------------
# Each object is documented once, on its defining module's section, so that its docstring's
# short cross-references resolve the way Python resolves names there. A package lists its
# public names (its ``__all__``) with ``.. public-names:: package``; every name in the
# ``__all__`` of a documented module becomes a target of its own, an alias of where it is
# documented (``remprop.theory.propagate`` -> ``remprop.theory.propagation.propagate``),
# and a name in a package's ``__all__`` documented nowhere fails the build.
class PublicNames(SphinxDirective):
    """``.. public-names:: package``: a table of the package's ``__all__``."""

    required_arguments = 1

    def run(self):
        package = self.arguments[0]
        names = getattr(importlib.import_module(package), "__all__", [])
        text = "\n".join([".. autosummary::", ""] + [f"   {name}" for name in names])
        return self.parse_text_to_nodes(text)


def _defining_names(package, name):
    """Fully qualified names under which ``package.name`` may be documented."""
    obj = getattr(importlib.import_module(package), name)
    module, qualname = getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)
    if inspect.ismodule(obj):
        return [obj.__name__]
    if isinstance(module, str) and isinstance(qualname, str):
        return [f"{module}.{qualname}"]
    # data: a module attribute of that name holding the same object, where it is defined
    # and documented (remprop.theory.NORMS -> remprop.theory.architecture.NORMS)
    found = []
    for modname in sorted(sys.modules):
        if modname.startswith("remprop.") and getattr(sys.modules[modname], name, None) is obj:
            found.append(f"{modname}.{name}")
    return found


def add_public_aliases(app, env):
    """Make each name in a documented module's ``__all__`` a target (an alias)."""
    python = env.domains.python_domain
    objects = python.objects
    for modname in sorted(python.modules):
        module = importlib.import_module(modname)
        for name in getattr(module, "__all__", []):
            alias = f"{modname}.{name}"
            if alias in objects or alias in python.modules:
                continue
            homes = [home for home in _defining_names(modname, name) if home in objects]
            if not homes:
                if hasattr(module, "__path__"):  # a package's public surface
                    logger.warning("public name %s is documented nowhere", alias,
                                   type="remprop", subtype="public")
                continue
            home = homes[0]
            objects[alias] = objects[home]._replace(aliased=True)
            for member in [key for key in objects if key.startswith(home + ".")]:
                objects[alias + member[len(home):]] = objects[member]._replace(aliased=True)


def share_numpydoc_template_environment(app):
    """Give numpydoc one jinja environment for the whole build.

    numpydoc makes a new environment for each docstring, and so compiles its docstring
    template 2,700 times in this site (a sixth of the build). The environment of the first
    docstring, kept, compiles it once; the template and its loader are the same for every
    docstring of a build, and each build (``builder-inited``) starts with a new one. Left
    alone if numpydoc no longer builds its environment this way."""
    from numpydoc import docscrape_sphinx

    original = getattr(docscrape_sphinx, "SandboxedEnvironment", None)
    if original is None:
        return
    if not hasattr(original, "remprop_environments"):  # not yet wrapped (conf.py runs once a build)
        def one_environment(*args, **kwargs):
            if "environment" not in one_environment.remprop_environments:
                one_environment.remprop_environments["environment"] = original(*args, **kwargs)
            return one_environment.remprop_environments["environment"]

        one_environment.remprop_environments = {}
        docscrape_sphinx.SandboxedEnvironment = one_environment
    shared = docscrape_sphinx.SandboxedEnvironment.remprop_environments
    app.connect("builder-inited", lambda app: shared.clear())


def setup(app):
    share_numpydoc_template_environment(app)
    app.connect("autodoc-process-docstring", check_parameter_lists, priority=400)
    app.add_directive("public-names", PublicNames)
    app.connect("env-updated", add_public_aliases)
