"""Skip connections of strength alpha: x -> alpha x + F(x)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba.extending import register_jitable

from ..checks import as_float_array, check_overlap, output_pair
from .base import Component, least, merge_rescaled, parameter

__all__ = ["skip_map", "Residual", "Parallel", "BranchSum", "residual", "parallel"]


@register_jitable
def skip_core(q_branch, p_branch, q, p, alpha):
    """(q', p') = (q_F + alpha^2 q, p_F + alpha^2 p)."""
    a2 = alpha * alpha
    return q_branch + a2 * q, p_branch + a2 * p


def skip_map(q_branch, p_branch, q, p, alpha=1.0):
    r"""Order parameters of ``alpha x + F(x)``.

    .. math:: q' = q_F + \alpha^2 q, \qquad p' = p_F + \alpha^2 p

    Branch and skip are uncorrelated at initialisation (the branch weights are
    independent of x), so the cross terms vanish. ``alpha`` multiplies the identity
    path (the reference convention); Noci et al. (2022) scale the branch instead,
    ``x + gamma F(x)``, which is ``gamma`` times ``(1/gamma) x + F(x)``.

    Parameters
    ----------
    q_branch, p_branch : array_like
        Order parameters of the branch output F(x).
    q, p : array_like
        Order parameters of the block input x.
    alpha : array_like
        Skip strength, >= 0.

    Returns
    -------
    (q', p') : tuple of ndarray
        Broadcast to the common shape of all inputs.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333; Noci et al., NeurIPS 2022.
    """
    q_branch, p_branch = check_overlap(q_branch, p_branch, "q_branch", "p_branch")
    q, p = check_overlap(q, p)
    alpha = as_float_array("alpha", alpha, nonnegative=True)
    return output_pair(*skip_core(q_branch, p_branch, q, p, alpha))


@dataclass(repr=False)
class Residual(Component):
    """``alpha x + branch(x)`` (:func:`residual`)."""

    alpha: np.ndarray
    branch: Component
    name = "residual"

    def apply(self, q, p):
        q_branch, p_branch = self.branch.apply(q, p)
        return skip_core(q_branch, p_branch, q, p, self.alpha)

    def symbolic(self, q, p, symbols):
        q_branch, p_branch = self.branch.symbolic(q, p, symbols)
        return skip_core(q_branch, p_branch, q, p, symbols.parameter(self.alpha))

    def gram(self, walker, g):
        return walker.residual(self, g)

    @property
    def children(self):
        return (self.branch,)

    def torch_forward(self, x, sim):
        return sim.ops.skip(x, self.branch.torch_forward(x, sim), float(self.alpha))

    def check_input(self, q, p):
        self.branch.check_input(q, p)

    def __repr__(self):
        return f"residual(alpha, {self.branch!r})"

    @property
    def carries_scale(self):
        return self.branch.scale_free

    def rescaled_parameters(self):
        return self.branch.rescaled_parameters()

    def kernel(self, build):
        """The branch's step, its output times the stream's carried scale (``build.stream_scale``:
        1 unless the kernels carry a pre-LN stream's scale, :mod:`remprop.theory.kernels`), then
        the skip."""
        alpha, branch, scale = build.parameter(self.alpha), build.child(self.branch), build.stream_scale

        def step(q, p, row, table):
            q_branch, p_branch, beta_c = branch(q, p, row, table)
            s = scale(row)
            q, p = skip_core(s * q_branch, s * p_branch, q, p, alpha(row))
            return q, p, beta_c

        return step


@dataclass(repr=False)
class Parallel(Component):
    """``alpha x + sum_i branch_i(x)`` (:func:`parallel`)."""

    alpha: np.ndarray
    branches: tuple
    name = "parallel"

    def apply(self, q, p):
        return self._sum(q, p, [branch.apply(q, p) for branch in self.branches], self.alpha)

    def symbolic(self, q, p, symbols):
        return self._sum(q, p, [branch.symbolic(q, p, symbols) for branch in self.branches],
                         symbols.parameter(self.alpha))

    @staticmethod
    def _sum(q, p, outputs, alpha):
        """``alpha x + sum_i F_i(x)``: the branches' (q, p) add (independent weights), then the skip."""
        q_sum, p_sum = outputs[0]
        for q_branch, p_branch in outputs[1:]:
            q_sum, p_sum = q_sum + q_branch, p_sum + p_branch
        return skip_core(q_sum, p_sum, q, p, alpha)

    def gram(self, walker, g):
        return walker.parallel(self, g)

    @property
    def children(self):
        return self.branches

    def torch_forward(self, x, sim):
        return sim.ops.parallel(x, [branch.torch_forward(x, sim) for branch in self.branches], float(self.alpha))

    def check_input(self, q, p):
        for branch in self.branches:
            branch.check_input(q, p)

    def __repr__(self):
        return "parallel(alpha, " + ", ".join(map(repr, self.branches)) + ")"

    @property
    def carries_scale(self):
        return all(branch.scale_free for branch in self.branches)

    def rescaled_parameters(self):
        return merge_rescaled(branch.rescaled_parameters() for branch in self.branches)

    def kernel(self, build):
        """The residual step (:meth:`Residual.kernel`) around the branches' summed outputs
        (:class:`BranchSum`): their sum times the stream's carried scale, then the skip."""
        return Residual(self.alpha, BranchSum(self.branches)).kernel(build)


@dataclass(repr=False)
class BranchSum(Component):
    """``sum_i F_i(x)``: the branches of :class:`Parallel` before the skip, added in the order of
    ``Parallel._sum`` (the sum of all but the last branch, then the last). Its kernel step
    is how a parallel block composes any number of branches."""

    branches: tuple
    name = "branch_sum"

    def apply(self, q, p):
        outputs = [branch.apply(q, p) for branch in self.branches]
        q_sum, p_sum = outputs[0]
        for q_branch, p_branch in outputs[1:]:
            q_sum, p_sum = q_sum + q_branch, p_sum + p_branch
        return q_sum, p_sum

    def kernel(self, build):
        if len(self.branches) == 1:
            return build.child(self.branches[0])
        head, last = build.child(BranchSum(self.branches[:-1])), build.child(self.branches[-1])

        def step(q, p, row, table):
            q_head, p_head, beta_c = head(q, p, row, table)
            q_last, p_last, beta_c_last = last(q, p, row, table)
            return q_head + q_last, p_head + p_last, least(beta_c, beta_c_last)

        return step


def residual(alpha, branch: Component) -> Component:
    r"""``x -> alpha x + branch(x)``: :math:`q' = q_F + \alpha^2 q`, :math:`p' = p_F + \alpha^2 p`."""
    if not isinstance(branch, Component):
        raise ValueError(f"branch must be a component, got {branch!r}")
    return Residual(parameter("alpha", alpha, nonnegative=True), branch)


def parallel(alpha, *branches: Component) -> Component:
    r"""``x -> alpha x + sum_i F_i(x)``: branches that read the same input (GPT-J, NeoX, Falcon).

    .. math:: q' = \alpha^2 q + \sum_i q_{F_i}, \qquad p' = \alpha^2 p + \sum_i p_{F_i}

    At initialisation the branches' weights are independent of each other and of ``x``, so
    the cross terms ``E[F_i(x_a) . F_j(x_b)]`` (``i != j``) and ``E[x_a . F_i(x_b)]``
    vanish and the overlaps add (docs/theory.md section 19).

    References
    ----------
    B. Wang & A. Komatsuzaki, GPT-J-6B (2021); S. Black et al., arXiv 2204.06745 (GPT-NeoX).
    """
    if not branches:
        raise ValueError("branches: parallel needs at least one branch")
    for branch in branches:
        if not isinstance(branch, Component):
            raise ValueError(f"branches must be components, got {branch!r}")
    return Parallel(parameter("alpha", alpha, nonnegative=True), tuple(branches))
