"""remprop's process starts its OpenMP threads sleeping when idle (``remprop.OPENMP_DEFAULTS``), unless the
user set the variables: spinning threads took two busy cores from the working ones
(benchmarks/bench_omp_wait.py)."""
from __future__ import annotations

import os
import subprocess
import sys

import remprop

PRINT = "import os, remprop; print(os.environ['OMP_WAIT_POLICY'], os.environ['KMP_BLOCKTIME'])"


def _run(env):
    clean = {k: v for k, v in os.environ.items() if k not in remprop.OPENMP_DEFAULTS}
    result = subprocess.run([sys.executable, "-c", PRINT], env={**clean, **env}, capture_output=True, text=True,
                            check=True)
    return result.stdout.split()


def test_import_sets_passive_waiting_where_unset():
    assert _run({}) == ["PASSIVE", "0"]


def test_a_users_setting_is_kept():
    assert _run({"OMP_WAIT_POLICY": "ACTIVE", "KMP_BLOCKTIME": "200"}) == ["ACTIVE", "200"]
