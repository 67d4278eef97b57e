"""Shared assertion of the test modules: the numba depth kernels against the components.

``propagate`` (numba kernels, one cell per beta) and ``Architecture.block`` (the
composition of component maps, iterated in Python) evaluate the same maps; they may differ
by round-off only, accumulated over the blocks: 1e-11 relative (and 1e-12 q absolute for p,
which can cross 0).
"""
import numpy as np
import pytest

from remprop.theory import propagate


def assert_propagate_matches_block(arch, betas, depth, rho0=0.2):
    """Trajectories of ``propagate(arch, betas, depth, q0=1, rho0)`` equal the iterated block."""
    traj = propagate(arch, np.asarray(betas), depth, rho0=rho0)
    for k, beta in enumerate(betas):
        q, p = 1.0, rho0
        block = arch.block(beta)
        for layer in range(depth):
            q, p = block(q, p)
            assert traj.q[k, layer + 1] == pytest.approx(q, rel=1e-11)
            assert traj.p[k, layer + 1] == pytest.approx(p, rel=1e-11, abs=1e-12 * q)
    return traj
