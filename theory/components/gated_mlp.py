r"""The gated MLP (SwiGLU, GeGLU) on the order parameters.

A gated MLP ``W_down (phi(W_gate x + b_gate) * (W_up x + b_up)) + b_down`` (Shazeer 2020;
LLaMA, Mistral, Qwen2 use SwiGLU, phi = SiLU, without biases) multiplies an activated gate
by a linear "up" projection, feature by feature. At initialisation the gate and the up
projection are independent, each a dense layer of the same input
(``W ~ N(0, sigma_w2 / d)``, bias ``N(0, sigma_b2)``), so both pre-activations have the
order parameters ``(q1, p1) = (sigma_w2 q + sigma_b2, sigma_w2 p + sigma_b2)`` and the
hidden unit ``h = phi(g) u`` factorises:

.. math::
    E[h_a h_b] = E[\phi(g_a)\phi(g_b)]\,E[u_a u_b] = M_{11}(q_1, p_1)\, p_1,\qquad
    E[h_a^2] = M_2(q_1)\, q_1

with the Gaussian moments ``M2, M11`` of phi (:mod:`remprop.theory.activations`, their
one home). The down projection ``W_down ~ N(0, sigma_w2_out / d_ff)`` is a dense layer
of the hidden state (docs/theory.md section 14).
"""
from __future__ import annotations

import numpy as np
from numba.extending import register_jitable

from ..activations import activation_moments, activation_spec, dense_map
from ..checks import as_float_array

from .mlp import MLP, mlp_args

__all__ = ["gated_mlp_map", "GatedMLP", "gated_mlp"]


@register_jitable
def gated_hidden_core(q1, p1, m2, m11):
    """``(E[h^2], E[h h'])`` of ``h = phi(g) u`` from the moments ``(m2, m11)`` of phi at ``(q1, p1)``."""
    return m2 * q1, m11 * p1


def gated_mlp_map(q, p, sigma_w2=0.2, sigma_b2=4e-4, activation="silu", sigma_w2_out=None):
    r"""Order parameters after a gated MLP ``W_down (phi(W_gate x) * W_up x)``.

    .. math::
        q_1 = \sigma_w^2 q + \sigma_b^2,\ p_1 = \sigma_w^2 p + \sigma_b^2;\quad
        q_2 = \sigma_{w,out}^2 E[\phi(u)^2]\, q_1 + \sigma_b^2,\
        p_2 = \sigma_{w,out}^2 E[\phi(u)\phi(v)]\, p_1 + \sigma_b^2

    with (u, v) centred Gaussian, Var = q1, Cov = p1: the gate and the up projection are
    independent at initialisation, so the hidden kernel is the gate's activation kernel
    times the up projection's linear one. Gate and up ``W ~ N(0, sigma_w2 / d)``, down
    ``W ~ N(0, sigma_w2_out / d_ff)`` (default ``sigma_w2``), every bias ``N(0, sigma_b2)``
    (the published SwiGLU models have none: ``sigma_b2 = 0``). The hidden width enters
    only through ``sigma_w2_out``. The map is homogeneous of degree two in ``(q, p)`` for
    ReLU or linear phi without biases (a product of two projections), not of degree one
    like the dense MLP.

    Parameters
    ----------
    q, p : array_like
        Input order parameters (q > 0, ``|p| <= q``).
    sigma_w2, sigma_b2 : array_like
        Variance times fan-in of the gate and up weights, and the bias variance, >= 0.
    activation : str or callable
        phi: ``"silu"`` (SwiGLU), ``"gelu"`` (GeGLU), ``"relu"`` (ReGLU), or any name in
        :data:`~remprop.theory.ACTIVATIONS` / a numba-jittable function.
    sigma_w2_out : array_like, optional
        Variance times fan-in ``d_ff`` of the down projection (default ``sigma_w2``).

    Returns
    -------
    (q2, p2) : float or ndarray

    References
    ----------
    N. Shazeer, "GLU variants improve Transformer", arXiv 2002.05202 (2020);
    docs/theory.md section 14.

    Examples
    --------
    >>> from remprop.theory import gated_mlp_map
    >>> q2, p2 = gated_mlp_map(1.0, 0.0, sigma_w2=1.0, sigma_b2=0.0, activation="linear")
    >>> float(q2), float(p2)
    (1.0, 0.0)
    """
    spec = activation_spec(activation)
    q1, p1 = dense_map(q, p, sigma_w2, sigma_b2)
    if (np.asarray(q1) <= 0.0).any():
        raise ValueError("sigma_w2 and sigma_b2 must not both vanish: the pre-activation "
                         "variance sigma_w2 * q + sigma_b2 must be > 0")
    m2, m11 = activation_moments(q1, p1, spec.name)
    h2, h11 = gated_hidden_core(np.asarray(q1), np.asarray(p1), np.asarray(m2), np.asarray(m11))
    if sigma_w2_out is None:
        sigma_w2_out = sigma_w2
    else:
        sigma_w2_out = as_float_array("sigma_w2_out", sigma_w2_out, nonnegative=True)
    return dense_map(h2, h11, sigma_w2_out, sigma_b2)


class GatedMLP(MLP):
    """``W_down (phi(W_gate x + b) * (W_up x + b)) + b``: the hidden kernel is
    ``gated_mlp.gated_hidden_core`` (docs/theory.md section 14)."""

    name = "gated_mlp"
    #: ``h = phi(g) u``: ``gated_hidden_core``.
    hidden_core = staticmethod(gated_hidden_core)
    gated = True

    def rescaled_parameters(self):
        """None: a product of two projections is homogeneous of degree two, not one."""
        return None

    def torch_functions(self, sim):
        return sim.ops.draw_gated_mlp_weights, sim.ops.gated_mlp


def gated_mlp(sigma_w2=0.2, sigma_b2=4e-4, activation="silu", sigma_w2_out=None) -> Component:
    """Gated MLP ``W_down (phi(W_gate x) * W_up x)`` (SwiGLU with ``"silu"``, GeGLU with
    ``"gelu"``); see :func:`~remprop.theory.gated_mlp_map`. Gate and up share ``sigma_w2``;
    ``sigma_w2_out``: the down projection's variance times its fan-in ``d_ff`` (default
    ``sigma_w2``)."""
    return mlp_args(GatedMLP, sigma_w2, sigma_b2, activation, sigma_w2_out)
