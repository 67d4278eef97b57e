r"""The update sensitivity of a simulated stack: how far a small rank-one change of one branch's output
moves the stack's output (the torch check of docs/theory.md section 20).

For every residual branch ``k`` in stack order (attention, MLP, attention, ...), the branch's output
``F_k(x)`` gets the perturbation ``delta_i = c u (w . x_i)`` on token ``i``: what a rank-one update
``c u w^T`` of a linear layer reading the branch's input adds, with ``u``, ``w`` Gaussian directions and
``c`` set so that ``mean(delta^2) = eps^2 q_in`` (``q_in``: the mean square of the branch's input, 1
after a pre-LN norm). The measured gain is the stack output's relative change over ``eps``,
``|y_k - y| / (eps |y|)``, which the theory predicts to be :func:`remprop.theory.sub_block_sensitivities`
``b_k = sqrt(q_in / q_skip)``.
"""
from __future__ import annotations

import numpy as np
import torch

from remprop.theory import Architecture

from . import layers
from .backend import check_scalar, check_seed, generator
from .registry import BlockContext, simulate_component
from .simulator import SimulatedStack

__all__ = ["branch_perturbation_gains"]

#: The stream of the perturbations' random directions (distinct from the weights' and inputs').
_STREAM_PERTURBATION = 7


class _PerturbedOps:
    """:mod:`~remprop.validation.layers` with ``skip`` adding a rank-one perturbation to the output of the
    ``target``-th branch (0-based, in call order); every other function is the module's."""

    def __init__(self, target, eps, directions, normalised_inputs):
        self.target, self.eps, self.directions = target, eps, directions
        self.normalised_inputs = normalised_inputs
        self.calls = 0

    def __getattr__(self, name):
        return getattr(layers, name)

    def skip(self, x, branch, alpha=1.0):
        if self.calls == self.target:
            u, w = self.directions
            reads = x / x.pow(2).mean(dim=-1, keepdim=True).sqrt() if self.normalised_inputs else x
            delta = (reads @ w).unsqueeze(-1) * u                     # (batch, T, d): c u (w . x_i)
            q_in = reads.pow(2).mean()
            branch = branch + delta * (self.eps * q_in.sqrt() / delta.pow(2).mean().sqrt())
        self.calls += 1
        return layers.skip(x, branch, alpha)

    def parallel(self, x, outputs, alpha=1.0):  # pragma: no cover - refused before
        raise ValueError("block_form='parallel' is not perturbed branch by branch")


def branch_perturbation_gains(arch: Architecture, beta: float, depth: int, x, *, seed: int = 0, eps: float = 1e-4,
                              sim=None) -> np.ndarray:
    """Measured relative change of a simulated stack's output per unit relative perturbation of each branch.

    Parameters
    ----------
    arch : remprop.theory.Architecture
        Sequential blocks (``block_form="parallel"`` is refused).
    beta : float
        Query/key scale, > 0.
    depth : int
        Blocks L.
    x : Tensor, shape (batch, T, width)
        Input tokens (``sim.seq_len`` and ``sim.width``).
    seed : int
        Initialisation seed of the stack (the perturbation directions use their own stream of it).
    eps : float
        Relative size of the perturbation, > 0 (small: the measurement is of the linear response;
        use float64).
    sim : remprop.validation.SimulationSettings, optional
        Sizes, dtype and device of the stack.

    Returns
    -------
    ndarray, shape (2 L,)
        ``|y_k - y| / (eps |y|)`` for each branch ``k`` in stack order; compare with
        :func:`remprop.theory.sub_block_sensitivities` (docs/theory.md section 20).
    """
    if arch.block_form.parallel:
        raise ValueError("block_form: branch_perturbation_gains perturbs sequential blocks only")
    eps = check_scalar("eps", eps, positive=True)
    seed = check_seed(seed)
    stack = SimulatedStack(arch, beta, depth, sim=sim, seed=seed)
    x, _ = stack.prepare_inputs(x)
    weights = [stack.weights(layer) for layer in range(depth)]
    gen = generator(seed, _STREAM_PERTURBATION, 0, stack.device)
    width = stack.width

    def run(ops):
        y = x
        with torch.no_grad():
            for layer in range(depth):
                context = BlockContext(weights[layer], heads=stack.heads, layer_norm_eps=stack.layer_norm_eps, ops=ops)
                y = simulate_component(stack.theory_block, y, context)
            if stack.final_norm is not None:
                y = simulate_component(stack.final_norm, y, BlockContext(layer_norm_eps=stack.layer_norm_eps))
        return y

    base = run(layers)
    gains = []
    for target in range(2 * depth):
        directions = tuple(torch.randn(width, generator=gen, dtype=stack.dtype, device=stack.device)
                           for _ in range(2))
        out = run(_PerturbedOps(target, eps, directions, arch.norm.normalises_branch_inputs))
        gains.append(float((out - base).norm() / (eps * base.norm())))
    return np.asarray(gains)
