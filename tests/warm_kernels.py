"""Compile the numba kernels most of the suite uses, once, before the xdist workers start.

On a cold numba cache (a fresh clone, or any change to ``theory/``) every process that
needs a kernel specialisation before it is on disk compiles it: both xdist workers start
on files that use the default stacks, and the notebooks' kernels and the command-line
subprocesses compile again what a worker is still compiling. With ``REMPROP_SUITE_WARM=1``,
``tests/conftest.py`` runs the parts below, side by side, while the workers collect the tests, and hands out the
first tests once they are done: each specialisation is then compiled once and loaded
from the disk cache (``cache=True``) everywhere else. On a warm cache a part takes a
few seconds (it loads the kernels), hidden behind the workers' collection.

Measured on the loaded two-core machine with an empty cache: the ``diagram`` part 47 s of
CPU (3 s warm), the ``models`` part 49 s (3 s warm); ``test_diagrams.py`` and
``test_reliability_work.py`` under two workers, cold, 110 s of CPU without, 98 s with.

Run one part: ``python tests/warm_kernels.py diagram`` (or ``models``).
"""
from __future__ import annotations

import sys

#: The parts, each run in its own process.
PARTS = ("diagram", "models")


def warm(part: str) -> None:
    import numpy as np

    if part == "diagram":  # the default stacks, asymptotic and finite T, every norm: most theory tests
        from remprop.diagrams import trainability_diagram
        from remprop.theory import Architecture, propagate

        for arch in (Architecture(), Architecture(seq_len=64), Architecture(norm="pre"), Architecture(norm="none")):
            trainability_diagram(arch, np.array([0.5, 2.0]), np.array([0.5, 1.5]), 4)
            propagate(arch, np.array([0.5, 1.0]), 4)
    elif part == "models":  # an encoder and a decoder as `check` sees them: the CLI tests, notebooks, README
        from remprop.diagrams import diagnose

        for name in ("bert-base", "gpt2"):
            diagnose(name)
    else:
        raise ValueError(f"part must be one of {', '.join(PARTS)}, got {part!r}")


if __name__ == "__main__":
    warm(sys.argv[1])
