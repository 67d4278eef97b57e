"""Lazy package attributes: a name is imported from its module on first use.

The one mechanism behind ``remprop.theory`` and friends as attributes of ``remprop``, the
figure functions of ``remprop.diagrams`` (matplotlib stays unloaded until drawn) and the
names of ``remprop.validation`` (torch stays unloaded until used). Pure Python: it imports
nothing of remprop, so every layer can use it without an import cycle.
"""
from __future__ import annotations

import importlib
import sys

__all__ = ["lazy_attributes"]


def lazy_attributes(package: str, exports=None, submodules=(), missing_hint=None):
    """``(__getattr__, __dir__)`` for the package ``package`` (module-level hooks, PEP 562).

    Parameters
    ----------
    package : str
        The package's ``__name__``.
    exports : dict, optional
        Public name -> the submodule of ``package`` that defines it (``"simulator"``, no
        leading dot); ``package.<name>`` is that module's attribute of the same name.
    submodules : sequence of str
        Names whose value is the submodule ``package.<name>`` itself.
    missing_hint : str, optional
        What to say when a name needs a package that is not installed (a ``ModuleNotFoundError``
        of a module outside remprop): the error is raised again as a ``ModuleNotFoundError``
        naming the attribute, the missing module and this hint (``"pip install
        'remprop[validation]'"``), with the same ``name``.

    Returns
    -------
    (callable, callable)
        ``__getattr__``, which imports on first access and caches the value in the
        package's namespace (later accesses are plain lookups), and ``__dir__``, which lists
        the lazy names beside the loaded ones. Any other name is an ``AttributeError``.
    """
    exports = dict(exports or {})
    submodules = tuple(submodules)
    lazy = set(exports) | set(submodules)

    def load(name):
        if name in exports:
            return getattr(importlib.import_module(f"{package}.{exports[name]}"), name)
        if name in submodules:
            return importlib.import_module(f"{package}.{name}")
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __getattr__(name):
        try:
            value = load(name)
        except ModuleNotFoundError as err:
            missing = err.name or ""
            if missing_hint is None or missing.split(".")[0] == "remprop" or not missing:
                raise
            raise ModuleNotFoundError(f"{package}.{name} needs {missing}, which is not installed: {missing_hint}",
                                      name=missing) from err
        setattr(sys.modules[package], name, value)
        return value

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | lazy)

    return __getattr__, __dir__
