"""Skip connections of strength alpha: x -> alpha x + F(x)."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numba.extending import register_jitable

from ..checks import as_float_array, check_overlap, output_pair
from .base import Component, least, merge_rescaled, parameter

__all__ = ["skip_map", "Residual", "Parallel", "BranchSum", "residual", "parallel", "SCALED_SKIP_ABOVE"]

#: Skip strength above which a skip read only up to scale (a norm follows it: post-LN) is
#: computed divided by ``alpha**2`` (``skip_over_alpha2_core``): ``alpha**2 q`` leaves
#: float64 from ``alpha`` about 1.3e154, while the normalised state has a finite limit (the skip
#: dominates, the cosine is the input's). Below it the skip is the plain ``skip_core``,
#: bit for bit (:meth:`Residual.apply_up_to_scale`, the kernel step of :class:`Residual`).
SCALED_SKIP_ABOVE = 2.0 ** 64


@register_jitable
def skip_core(q_branch, p_branch, q, p, alpha):
    """(q', p') = (q_F + alpha^2 q, p_F + alpha^2 p)."""
    a2 = alpha * alpha
    return q_branch + a2 * q, p_branch + a2 * p


@register_jitable
def skip_over_alpha2_core(q_branch, p_branch, q, p, alpha):
    """``(q_F / alpha^2 + q, p_F / alpha^2 + p)``: :func:`skip_core` divided by ``alpha^2``, finite
    where ``alpha^2`` overflows (the branch's share then underflows to 0)."""
    r = 1.0 / alpha
    return q_branch * r * r + q, p_branch * r * r + p


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

    def apply_up_to_scale(self, q, p):
        """The map (``apply``) divided by ``alpha**2`` where ``alpha`` exceeds :data:`SCALED_SKIP_ABOVE`
        (a norm follows, which reads only the cosine)."""
        return scaled_skip(self.branch.apply(q, p), q, p, self.alpha)

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

    def kernel(self, tape):
        """Save the input, the branch, then the skip (the branch's output times the stream's carried scale
        where the kernels carry a pre-LN stream's scale, :mod:`remprop.theory.kernels`; past
        :data:`SCALED_SKIP_ABOVE` divided by ``alpha**2`` where a norm follows)."""
        tape.push()
        tape.child(self.branch)
        tape.skip(self.alpha)


@dataclass(repr=False)
class Parallel(Component):
    """``alpha x + sum_i branch_i(x)`` (:func:`parallel`)."""

    alpha: np.ndarray
    branches: tuple
    name = "parallel"

    def apply(self, q, p):
        return self._sum(q, p, [branch.apply(q, p) for branch in self.branches], self.alpha)

    def apply_up_to_scale(self, q, p):
        """:meth:`Residual.apply_up_to_scale` around the branches' sum."""
        return scaled_skip(BranchSum(self.branches).apply(q, p), q, p, self.alpha)

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

    def kernel(self, tape):
        """The residual (:meth:`Residual.kernel`) around the branches' summed outputs
        (:class:`BranchSum`): their sum times the stream's carried scale, then the skip."""
        Residual(self.alpha, BranchSum(self.branches)).kernel(tape)


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

    def kernel(self, tape):
        """The branches on one saved input, summed in order: ``((F_1 + F_2) + F_3) ...``."""
        if len(self.branches) == 1:
            tape.child(self.branches[0])
            return
        tape.push()
        tape.child(self.branches[0])
        for branch in self.branches[1:]:
            tape.swap_in()
            tape.child(branch)
            tape.add_pop()
        tape.drop()


def scaled_skip(branch_out, q, p, alpha):
    """The skip around ``branch_out = (q_F, p_F)``, divided by ``alpha**2`` where ``alpha`` exceeds
    :data:`SCALED_SKIP_ABOVE` (elementwise; the plain :func:`skip_core` elsewhere)."""
    q_branch, p_branch = branch_out
    huge = np.asarray(alpha) > SCALED_SKIP_ABOVE
    if not np.any(huge):
        return skip_core(q_branch, p_branch, q, p, alpha)
    with np.errstate(over="ignore", invalid="ignore"):
        plain = skip_core(q_branch, p_branch, q, p, alpha)
    scaled = skip_over_alpha2_core(q_branch, p_branch, q, p, np.where(huge, alpha, 1.0))
    return np.where(huge, scaled[0], plain[0]), np.where(huge, scaled[1], plain[1])


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
