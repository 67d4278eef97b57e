"""The one-time costs of the commands that simulate or train, against the constants their estimates count.

Each cost runs in a fresh process after ``import remprop.cli.entry`` (what every command has imported when
it estimates) and is timed as that process's CPU time (``time.process_time``), the best of ``--repeat``
processes: CPU time is the seconds of one-thread work on a quiet machine, also when other processes share
the cores (the estimates are a quiet machine's seconds; the command line multiplies them by the measured
load, :mod:`remprop.machine`). The costs:

* ``torch stack``: importing what ``validate`` and ``train`` import before they simulate or train (torch,
  the simulated stack, the training loop, the figure module): :data:`TORCH_IMPORT_SECONDS
  <remprop.cli.commands.simulation.TORCH_IMPORT_SECONDS>`;
* ``optimiser``: the first AdamW of a process, which imports ``torch._dynamo`` (a training run's first
  step waits for it): :data:`OPTIMISER_IMPORT_SECONDS <remprop.cli.commands.simulation.OPTIMISER_IMPORT_SECONDS>`;
* ``model build``: ``check --simulate``'s real model, transformers' 4-layer BERT of width 128 at random init,
  its modules imported (torch already imported): :data:`MODEL_BUILD_SECONDS
  <remprop.cli.commands.simulation.MODEL_BUILD_SECONDS>`.

``python benchmarks/bench_startup.py [--repeat N]`` writes ``benchmarks/results/bench_startup.json``
(measured / constant for each; the load average is recorded with the numbers).
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys

from _common import print_table, write_json

#: (name, setup run untimed, the timed code, the constant's name in remprop.cli.commands.simulation)
COSTS = (
    ("torch stack", "",
     "import remprop.validation.backend, remprop.validation.simulator, remprop.validation.training.loop, "
     "remprop.diagrams.training_figures", "TORCH_IMPORT_SECONDS"),
    ("optimiser", "import torch",
     "torch.optim.AdamW([torch.zeros(2, requires_grad=True)])", "OPTIMISER_IMPORT_SECONDS"),
    ("model build", "import torch; from remprop.theory import model_spec; "
                    "from remprop.validation.hf_models import build_model, reduced_spec; "
                    "spec = reduced_spec(model_spec('bert-48', seq_len=64), depth=4, width=128)",
     "build_model(spec)", "MODEL_BUILD_SECONDS"),
)

_CHILD = """
import json, time
import remprop.cli.entry
{setup}
start = time.process_time()
{timed}
print(json.dumps(time.process_time() - start))
"""


def cpu_seconds(setup, timed) -> float:
    """CPU seconds of ``timed`` in a fresh process, after ``import remprop.cli.entry`` and ``setup``."""
    env = dict(os.environ, OMP_NUM_THREADS="1")  # one thread: the CPU time is then the quiet wall time
    done = subprocess.run([sys.executable, "-c", _CHILD.format(setup=setup, timed=timed)], capture_output=True,
                          text=True, env=env, check=True)
    return float(json.loads(done.stdout.strip().splitlines()[-1]))


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per cost, the best kept (default 3)")
    args = parser.parse_args()
    from remprop.cli.commands import simulation

    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
    results, rows = {}, []
    for name, setup, timed, constant in COSTS:
        times = [cpu_seconds(setup, timed) for _ in range(max(1, args.repeat))]
        value = getattr(simulation, constant)
        results[name] = {"cpu_s": times, "best_cpu_s": min(times), "constant": constant, "constant_s": value,
                         "ratio": min(times) / value}
        rows += [(f"{name}: CPU s (best of {len(times)})", min(times), "s"),
                 (f"{name}: measured / {constant} ({value:g} s)", min(times) / value, "x")]
    print_table(f"one-time costs, CPU time of a fresh process (load {load:.1f})", rows)
    write_json("bench_startup", {"costs": results, "load_average_1min": load})


if __name__ == "__main__":
    main()
