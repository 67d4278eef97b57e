"""One cache folder for everything remprop keeps (issue 43): ``$REMPROP_CACHE_DIR``, else the user cache.

Tables, tokenizers and numba's compiled code go to :func:`remprop.cache.cache_directory`, never
to the package's own ``__pycache__`` (a read-only install lost them silently); a folder that
cannot be written leaves the code compiled in memory, with one warning and no error. That the
engine's compiled code lands in the folder is checked by tests/test_cold_start.py, whose
precompiled process runs on an empty ``REMPROP_CACHE_DIR``.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from remprop import cache


def test_the_cache_folder_is_remprop_cache_dir_else_the_user_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("REMPROP_CACHE_DIR", str(tmp_path / "mine"))
    assert cache.cache_directory() == tmp_path / "mine"
    monkeypatch.delenv("NUMBA_CACHE_DIR", raising=False)
    assert cache.numba_cache_directory() == tmp_path / "mine" / "numba"
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba's own"))  # numba's own setting wins
    assert cache.numba_cache_directory() == tmp_path / "numba's own"
    monkeypatch.setenv("REMPROP_CACHE_DIR", "")  # empty: unset
    assert cache.cache_directory() == cache.user_cache_directory()


def test_the_user_cache_follows_each_platform_rule(tmp_path):
    home = tmp_path / "home"
    assert cache.user_cache_directory("linux", {}, home) == home / ".cache" / "remprop"
    assert cache.user_cache_directory("linux", {"XDG_CACHE_HOME": "/var/xdg"}, home) == Path("/var/xdg/remprop")
    # the XDG rule: a relative XDG_CACHE_HOME is ignored
    assert cache.user_cache_directory("linux", {"XDG_CACHE_HOME": "rel"}, home) == home / ".cache" / "remprop"
    assert cache.user_cache_directory("darwin", {"XDG_CACHE_HOME": "/x"}, home) == home / "Library/Caches/remprop"
    assert cache.user_cache_directory("win32", {"LOCALAPPDATA": str(tmp_path / "L")}, home) == (
        tmp_path / "L" / "remprop" / "Cache")
    assert cache.user_cache_directory("win32", {}, home) == home / "AppData" / "Local" / "remprop" / "Cache"


def test_tables_are_kept_in_the_cache_folder(monkeypatch, tmp_path):
    """:func:`~remprop.cache.cached_array` writes once, reads back, and rebuilds a damaged file."""
    monkeypatch.setenv("REMPROP_CACHE_DIR", str(tmp_path))
    source = tmp_path / "source.py"
    source.write_text("x = 1\n")
    builds = []

    def build():
        builds.append(1)
        return np.arange(4.0)

    first = cache.cached_array("demo", (source,), build, lambda array: array.size == 4)
    (path,) = tmp_path.glob("demo-*.npy")
    again = cache.cached_array("demo", (source,), build, lambda array: array.size == 4)
    assert np.array_equal(first, again) and len(builds) == 1
    path.write_bytes(b"damaged")
    cache.cached_array("demo", (source,), build, lambda array: array.size == 4)
    assert len(builds) == 2 and np.array_equal(np.load(path), first)


#: Imports the theory with an unwritable cache folder, reports the warnings, then compiles and
#: runs one of the theory's disk-cached functions (in memory) and a table lookup.
READ_ONLY = """
import warnings
import numpy as np
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    import remprop.theory
    from remprop.theory import _jit
    from remprop.theory.rem import table
    header = [64.0, 2.0, 0.25, 5.0, 1.0, 50.0]
    value = table._lookup_many(np.array(header + [0.5] * 10), np.array([1.0]))
print("CACHE", _jit.CACHE, type(table._lookup_many._cache).__name__, bool(np.isfinite(value).all()))
for warning in caught:
    print("WARNING", warning.category.__name__, warning.message)
"""


def test_an_unwritable_cache_folder_compiles_in_memory_with_one_warning(tmp_path):
    """Before: the numba code went to the package's ``__pycache__``, lost without a word on a
    read-only install. After: an unwritable ``REMPROP_CACHE_DIR`` (here below a file: even root
    cannot create it) gives one RuntimeWarning naming the folder and the variable; the theory's
    functions are compiled without a disk cache (numba's ``NullCache``) and run."""
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    env = {name: value for name, value in os.environ.items() if name != "NUMBA_CACHE_DIR"}
    env["REMPROP_CACHE_DIR"] = str(blocker / "cache")
    done = subprocess.run([sys.executable, "-c", READ_ONLY], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    assert "CACHE False NullCache True" in lines, done.stdout
    warnings = [line for line in lines if line.startswith("WARNING")]
    assert len(warnings) == 1, warnings
    assert "RuntimeWarning" in warnings[0] and str(blocker / "cache" / "numba") in warnings[0]
    assert "REMPROP_CACHE_DIR" in warnings[0]


def test_a_writable_cache_folder_gets_the_compiled_code(tmp_path):
    """The theory's disk-cached functions are placed in ``numba/`` of the folder (numba's
    ``config.CACHE_DIR``), never beside the package's sources."""
    env = {name: value for name, value in os.environ.items() if name != "NUMBA_CACHE_DIR"}
    env["REMPROP_CACHE_DIR"] = str(tmp_path)
    script = ("import numba, remprop.theory\nfrom remprop.theory.rem import table\n"
              "from remprop.theory._jit import source_digest\n"
              "print(numba.config.CACHE_DIR)\nprint(table._lookup_many._cache._cache_path)\nprint(source_digest())")
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    config_dir, cache_path, digest = done.stdout.split()
    # in numba/ a folder named after the theory's sources (an edit compiles into a fresh one: remprop.theory._jit)
    assert config_dir == str(tmp_path / "numba" / f"theory-{digest}")
    assert Path(cache_path).is_relative_to(config_dir)


def test_the_tokenizers_live_in_the_same_folder(monkeypatch, tmp_path):
    pytest.importorskip("torch")
    from remprop.validation.training.data import tokenizer_cache_dir

    monkeypatch.setenv("REMPROP_CACHE_DIR", str(tmp_path))
    assert tokenizer_cache_dir() == tmp_path / "tokenizers"
