r"""RMSNorm without a gain on the token simplex.

RMSNorm (Zhang & Sennrich 2019; LLaMA, Mistral, Qwen2, Gemma) rescales each token to
unit mean square without centring it: ``RMS(x) = x / sqrt(mean_k x_k^2 + eps)``. On the
order parameters it is the map of LayerNorm, ``(q, p) -> (1, p / q)``, whenever the
per-token feature mean ``m_a = (1/d) sum_k x_{a,k}`` vanishes at large width, which is
the case for every input that is a sum of random zero-mean projections, biases included
(docs/theory.md section 14).
"""
from __future__ import annotations

from numba.extending import register_jitable

from ..checks import check_overlap, output_pair

from .layer_norm import LayerNorm

__all__ = ["rmsnorm_map", "RMSNorm", "rms_norm"]


@register_jitable
def rmsnorm_core(q, p):
    """(1, p / q): the mean square set to one, the overlap divided by the norm."""
    return 1.0 + 0.0 * q, p / q


def rmsnorm_map(q, p):
    r"""Order parameters after RMSNorm (no gain, ``eps -> 0``).

    .. math:: q' = \frac1d \sum_k \frac{x_{a,k}^2}{q_a} = 1, \qquad
              p' = \frac{x_a \cdot x_b / d}{\sqrt{q_a q_b}} = \frac{p}{q}

    Exact for ``q'`` at every width; ``p'`` at large width, where every token's mean
    square concentrates at ``q``. This is the LayerNorm map
    (:func:`~remprop.theory.layernorm_map`): LayerNorm first subtracts the per-token
    feature mean ``m_a``, giving ``p' = (p - m_a m_b) / (q - m^2)``, and the two differ only
    where ``m_a`` does not vanish. For tokens made by random zero-mean projections (with
    biases drawn independently per feature) ``m_a = O(d^{-1/2})`` and ``E[m_a m_b] = p / d``,
    ``E[m_a^2] = q / d``: the centring rescales the overlap and the norm alike and the two
    norms agree to ``O(1/d)``. They differ at ``O(1)`` when every feature of every token
    carries a common offset ``mu`` (a nonzero-mean activation output, e.g. ReLU's
    ``E[relu(u)] = sqrt(q1 / 2 pi)``, fed to the norm without a projection): then
    LayerNorm gives ``(1, (p - mu^2) / (q - mu^2))`` and RMSNorm keeps ``(1, p / q)``
    (docs/theory.md section 14, measured there at d = 64, 256, 1024).

    Parameters
    ----------
    q, p : array_like
        Mean squared norm (> 0) and mean overlap (``|p| <= q``), broadcast together.

    Returns
    -------
    (q', p') : float or ndarray

    References
    ----------
    B. Zhang & R. Sennrich, "Root mean square layer normalization", NeurIPS 2019;
    docs/theory.md section 14.

    Examples
    --------
    >>> from remprop.theory import rmsnorm_map
    >>> rmsnorm_map(2.0, 0.5)
    (1.0, 0.25)
    """
    q, p = check_overlap(q, p)
    return output_pair(*rmsnorm_core(q, p))


class RMSNorm(LayerNorm):
    """RMSNorm: the map of LayerNorm, ``(1, p / q)``, from its own core (docs/theory.md section 14)."""

    name = "rms_norm"
    short, title = "RMS", "RMSNorm"
    core = staticmethod(rmsnorm_core)
    kernel_kind = 1  # Tape.norm: the interpreter's RMSNorm core

    def torch_forward(self, x, sim):
        return self.torch_normalise(x, sim.layer_norm_eps)

    @staticmethod
    def torch_normalise(x, eps):
        r"""RMSNorm of a tensor over its feature axis, without gain: :math:`x / \sqrt{\overline{x^2} + \epsilon}`
        (tensor methods; :func:`remprop.validation.layers.rms_norm` is this)."""
        return x * (x.pow(2).mean(dim=-1, keepdim=True) + eps).rsqrt()


def rms_norm() -> Component:
    """RMSNorm without a gain: ``(q, p) -> (1, p/q)``; see :func:`~remprop.theory.rmsnorm_map`."""
    return RMSNorm()
