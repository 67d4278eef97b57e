"""remprop in training loops: ``from remprop.integrations import RempropCallback``.

A thin, lazy re-export of :mod:`remprop.validation.integrations` (``transformers`` and torch are
imported on first use, never by ``import remprop``). Without them the import is one
``ImportError`` naming ``pip install 'remprop[validation]'``. Plain PyTorch loops need no
callback: ``remprop.check(model, lr=..., steps=...)`` before the loop.
"""
from __future__ import annotations

__all__ = ["RempropCallback", "RempropWarning", "trainer_recipe"]


def __getattr__(name):
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from remprop import validation

    value = getattr(validation, name)  # its lazy exports name the validation extra when torch/transformers lack
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(__all__))
