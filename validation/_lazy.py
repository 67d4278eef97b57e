"""Lazy package attributes: a name is imported from its module on first use (torch stays unloaded until then)."""
from __future__ import annotations

import importlib


def lazy_attributes(package: str, exports: dict):
    """``(__getattr__, __dir__)`` for package ``package`` whose ``exports`` map a public name to
    the submodule defining it; the value is cached in the package's namespace on first use."""
    import sys

    def __getattr__(name):
        if name in exports:
            value = getattr(importlib.import_module(f".{exports[name]}", package), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__():
        return sorted(set(vars(sys.modules[package])) | set(exports))

    return __getattr__, __dir__
