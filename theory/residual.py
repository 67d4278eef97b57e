"""Skip connections of strength alpha: x -> alpha x + F(x)."""
from __future__ import annotations

import numpy as np
from numba.extending import register_jitable

from .checks import as_float_array, check_overlap, output_pair

__all__ = ["skip_map"]


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
