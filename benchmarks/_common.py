"""Shared helpers of the benchmark scripts: timing, the machine's state, tables, JSON."""
from __future__ import annotations

import importlib.util
import json
import os
import platform
import sys
import time
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parent
RESULTS = BENCHMARKS / "results"
REPO = BENCHMARKS.parent


def best_of(function, repeat=3):
    """(best, all) wall-clock seconds of ``repeat`` calls of ``function()``."""
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        function()
        times.append(time.perf_counter() - start)
    return min(times), times


def machine() -> dict:
    """What the timings depend on: cores, load (other processes share them), threads."""
    info = {
        "python": platform.python_version(),
        "cpu_count": os.cpu_count(),
        "load_average_1min": os.getloadavg()[0] if hasattr(os, "getloadavg") else None,
    }
    try:
        import numba
        info["numba"] = numba.__version__
        info["numba_threads"] = numba.get_num_threads()
    except ImportError:  # pragma: no cover - numba is a dependency
        pass
    return info


def load_reference():
    """The plain scalar reference of the maps (``tests/reference.py``), imported by path."""
    path = REPO / "tests" / "reference.py"
    spec = importlib.util.spec_from_file_location("remprop_scalar_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def print_table(title, rows):
    """Print ``rows`` (a list of (label, value, unit)) as a two-column table."""
    width = max(len(label) for label, _, _ in rows)
    print(title)
    print("-" * len(title))
    for label, value, unit in rows:
        if isinstance(value, float):
            text = f"{value:.4g}"
        else:
            text = str(value)
        print(f"  {label:<{width}}  {text:>12} {unit}")
    print()


def write_json(name, payload):
    """Write ``benchmarks/results/<name>.json`` and return its path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    payload = {"benchmark": name, "machine": machine(), **payload}
    path.write_text(json.dumps(payload, indent=2, default=float) + "\n")
    print(f"results written to {path.relative_to(REPO)}")
    return path


def remprop_executable(python=None):
    """The ``remprop`` console script next to ``python`` (default: this interpreter), or None."""
    candidate = Path(python or sys.executable).parent / "remprop"
    return candidate if candidate.exists() else None
