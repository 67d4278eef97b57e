"""Shared assertion of the test modules: the numba depth kernels against the composed block.

``propagate`` (numba kernels, :mod:`remprop.theory.kernels`) and ``Architecture.block``
(the composition of component maps, iterated here in NumPy over the same grid) evaluate
the same maps in the same order; they may differ by round-off only, accumulated over the
blocks. Tolerance 1e-12 relative: each block is a few dozen float64 operations (error
~1e-16 each) on smooth maps, and a dozen blocks amplify it by far less than 1e4 (the
kink of Y2 at beta_c is continuous). ``p`` is compared relative to the scale ``q``
(it can cancel to ~0 under gain-controlled attention).
"""
import numpy as np

from remprop.theory import propagate

RTOL = 1e-12


def assert_propagate_matches_block(arch, betas, depth, rho0=0.2, q0=1.0, rtol=RTOL):
    """Trajectories of ``propagate(arch, betas, depth, q0, rho0)`` equal the iterated block.

    ``betas``, ``q0``, ``rho0`` and the fields of ``arch`` may be arrays that broadcast
    together; every cell is checked at every layer. Returns the trajectory.
    """
    betas = np.asarray(betas, dtype=float)
    traj = propagate(arch, betas, depth, q0=q0, rho0=rho0)
    shape = traj.q.shape[:-1]
    block = arch.block(betas)
    q = np.broadcast_to(np.asarray(q0, dtype=float), shape)
    p = np.broadcast_to(q * np.asarray(rho0, dtype=float), shape)
    np.testing.assert_array_equal(traj.q[..., 0], q)
    for layer in range(depth):
        q, p = (np.broadcast_to(x, shape) for x in block(q, p))
        err_q = np.abs(traj.q[..., layer + 1] - q)
        err_p = np.abs(traj.p[..., layer + 1] - p)
        assert np.all(err_q <= rtol * np.abs(q)), f"q at layer {layer + 1}: worst relative error " \
            f"{np.max(err_q / np.abs(q)):.3g}"
        assert np.all(err_p <= rtol * np.abs(q)), f"p at layer {layer + 1}: worst error / q " \
            f"{np.max(err_p / np.abs(q)):.3g}"
    return traj
