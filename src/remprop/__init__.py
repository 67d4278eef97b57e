"""remprop: signal propagation through transformers at initialisation.

Self-attention at initialisation is a Random Energy Model: a query's scores over the
keys are Gaussian energies, and the query/key scale beta plays the inverse temperature.
Iterating the maps of attention, skip connections, LayerNorm and MLP on the order
parameters (q, p) of the token simplex over depth predicts the two failure modes of
deep transformers -- rank collapse (all tokens align, rho -> 1) and entropy collapse
(beta above the critical beta_c, attention locks onto one key) -- and the smallest
skip strength alpha* that avoids rank collapse at depth L.

Sub-packages, imported on first access (``import remprop`` itself stays light and never
imports torch or matplotlib):

``remprop.theory``
    the maps and their iteration over depth and parameter grids (NumPy, numba, sympy)
``remprop.diagrams``
    trainability diagrams, minimum residual strength, figures
``remprop.validation``
    finite-size checks against simulated networks (torch; the ``validation`` extra)
``remprop.cli``
    the ``remprop`` command line

``remprop.check(model)`` diagnoses a ``transformers`` model (or a folder of its
safetensors weights) as its weights are (:func:`remprop.validation.own_weights.check`;
imports torch on first use); ``remprop.simulate_own_weights(model)`` runs those weights forward
beside that theory (:func:`remprop.validation.own_simulation.simulate_own_weights`).

Reference: A. Giorlandino & S. Goldt, "Two failure modes of deep transformers and how
to avoid them: a unified theory of signal propagation at initialisation",
arXiv 2505.24333.
"""
from __future__ import annotations

import os as _os

from ._lazy import lazy_attributes as _lazy_attributes

#: OpenMP settings remprop's process starts with unless they are set already (they are read when the
#: OpenMP runtime loads, at numba's first parallel kernel): idle threads sleep instead of spinning.
#: With spinning threads, on two cores shared with other work, a parallel pass over a 256 x 256 Gram
#: matrix took 7 ms against 0.02 ms, and ``check gpt2 --seq-len 256`` 22 s against 12 s
#: (benchmarks/bench_omp_wait.py); on a quiet machine the two are alike.
OPENMP_DEFAULTS = {"OMP_WAIT_POLICY": "PASSIVE", "KMP_BLOCKTIME": "0"}
for _name, _value in OPENMP_DEFAULTS.items():
    _os.environ.setdefault(_name, _value)

try:
    from importlib.metadata import PackageNotFoundError as _PackageNotFoundError
    from importlib.metadata import version as _distribution_version

    __version__ = _distribution_version("remprop")
except _PackageNotFoundError:  # running from a source tree that is not installed
    __version__ = "0+unknown"

#: Sub-packages and modules reachable as attributes of ``remprop``, imported lazily.
_LAZY_SUBMODULES = ("theory", "diagrams", "validation", "cli")

#: Functions reachable as attributes of ``remprop``, imported on first use (torch stays unloaded).
_LAZY_EXPORTS = {"check": "validation.own_weights", "simulate_own_weights": "validation.own_simulation"}

__all__ = ["__version__", "check", "simulate_own_weights"]

__getattr__, __dir__ = _lazy_attributes(__name__, exports=_LAZY_EXPORTS, submodules=_LAZY_SUBMODULES)
