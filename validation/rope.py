r"""Rotary position embeddings (RoPE) on real attention, measured against the REM with RoPE.

:func:`rotary` rotates the coordinate pairs ``(2i, 2i+1)`` of queries and keys at
position m by ``m theta_i``, ``theta_i = base^{-2i/d_H}`` (the frequencies of
:func:`remprop.theory.rem.rope_frequencies`); it is the ``rotate`` hook of
:func:`remprop.validation.layers.softmax_attention`. (Llama's "rotate half" pairs
``(i, i + d_H/2)`` instead: the same law, the weights being i.i.d.)

:func:`rope_measurement` draws Gaussian tokens with the order parameters ``(q0, q0 rho0)``
(:func:`~remprop.validation.inputs.gaussian_tokens`), one attention layer per seed
(:func:`~remprop.validation.layers.draw_attention_weights`), and measures the
participation ratio ``Y2`` of the rows and the output cosine ``p_A / q_A`` with three
kinds of positions: ``"none"``, ``"absolute"`` (a table ``N(0, position_std^2)`` added to
the tokens, as the reference experiments' position embeddings) and ``"rope"``. The theory
(docs/theory.md section 15) is evaluated at the measured input ``(q, p)``: the REM of
section 3 for ``"none"`` and ``"absolute"``, the REM with RoPE for ``"rope"``.

References
----------
J. Su et al., arXiv 2104.09864 (RoPE); A. Giorlandino & S. Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import numpy as np
import torch

from remprop.theory import rope_softmax_attention_map, softmax_attention_map
from remprop.theory.checks import check_choice
from remprop.theory.rem import ROPE_BASE, participation_ratio, rope_frequencies, rope_participation_ratio

from .backend import STREAM_EMBEDDINGS, STREAM_WEIGHTS, check_positive_int, generator, resolve_device
from .inputs import gaussian_tokens
from .layers import draw_attention_weights, softmax_attention
from .measurements import attention_statistics, token_statistics
from .settings import SimulationSettings, check_simulation

__all__ = ["POSITIONS", "rotary", "rope_measurement"]

#: The kinds of positions compared: none, an added absolute table, rotary.
POSITIONS = ("none", "absolute", "rope")


def rotary(seq_len, head_dim, base=ROPE_BASE, *, dtype=torch.float32, device=None):
    r"""The RoPE rotation of queries or keys, as a function of a tensor ``(..., T, d_H)``.

    .. math:: \begin{pmatrix} y_{m,2i} \\ y_{m,2i+1}\end{pmatrix} =
              \begin{pmatrix}\cos m\theta_i & -\sin m\theta_i \\ \sin m\theta_i & \cos m\theta_i\end{pmatrix}
              \begin{pmatrix} x_{m,2i} \\ x_{m,2i+1}\end{pmatrix},\qquad \theta_i = b^{-2i/d_H}

    so that ``(R_n u) . (R_m k) = u^T R_{m-n} k``.

    Parameters
    ----------
    seq_len : int
        T, the positions ``m = 0 .. T-1``.
    head_dim : int
        ``d_H``, even.
    base : float
        RoPE base.
    dtype, device
        Of the tensors it will rotate.

    Returns
    -------
    callable
        ``x -> rotated x``, same shape.

    References
    ----------
    Su et al., arXiv 2104.09864, Eq. (34).
    """
    theta = torch.as_tensor(rope_frequencies(head_dim, base), dtype=torch.float64)
    angles = torch.arange(check_positive_int("seq_len", seq_len, 1), dtype=torch.float64)[:, None] * theta
    cos = angles.cos().to(dtype=dtype, device=resolve_device(device))
    sin = angles.sin().to(dtype=dtype, device=resolve_device(device))

    def rotate(x):
        even, odd = x[..., 0::2], x[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = even * cos - odd * sin
        out[..., 1::2] = even * sin + odd * cos
        return out

    return rotate


def rope_measurement(beta, *, positions="rope", sim: SimulationSettings | None = None, heads=1, base=ROPE_BASE,
                     sigma_v2=0.2, sigma_b2=4e-4, position_std=0.1) -> dict:
    r"""Measured and predicted ``Y2`` and output cosine of one attention layer, per seed.

    Seed s draws the tokens from stream ``(s, tokens, 0)``, the absolute position table
    from ``(s, embeddings, 0)`` and the weights from ``(s, weights, 0)`` with
    ``s_qk^2 = beta sqrt(log T) / d`` (``qk_scaling="model"``: each head is at ``beta``).

    Parameters
    ----------
    beta : float
        Query/key scale, > 0.
    positions : {"none", "absolute", "rope"}
    sim : remprop.validation.SimulationSettings, optional
        T (``seq_len``), d (``width``), the seeds, the token order parameters ``q0``,
        ``rho0`` (before positions), dtype and device (the other fields are not read).
        Default ``SimulationSettings(width=256, seq_len=512, seeds=4, rho0=0.5)``.
    heads : int
        H (``d_H = d / H`` even for RoPE).
    base : float
        RoPE base.
    sigma_v2, sigma_b2 : float
        Values and value bias.
    position_std : float
        Standard deviation of the absolute position table.

    Returns
    -------
    dict of str -> ndarray, shape (seeds,)
        ``y2``, ``cosine`` (measured ``p_A / q_A``), ``q``, ``p`` (measured input),
        ``y2_theory`` and ``cosine_theory`` at the measured input.
    """
    check_choice("positions", positions, POSITIONS)
    sim = check_simulation(sim, width=256, seq_len=512, seeds=4, rho0=0.5)
    seq_len, width, heads = sim.seq_len, sim.width, check_positive_int("heads", heads)
    torch_dtype, device = sim.dtype, sim.device
    head_dim = width // heads
    rotate = rotary(seq_len, head_dim, base, dtype=torch_dtype, device=device) if positions == "rope" else None
    rows = {key: [] for key in ("y2", "cosine", "q", "p")}
    for seed in sim.seeds:
        x = gaussian_tokens(sim.q0, sim.rho0, seq_len=seq_len, width=width, seed=seed, dtype=torch_dtype,
                            device=device).tokens
        if positions == "absolute":
            gen = generator(seed, STREAM_EMBEDDINGS, 0, device)
            x = x + position_std * torch.randn(seq_len, width, generator=gen, dtype=torch_dtype, device=device)
        weights = draw_attention_weights(generator(seed, STREAM_WEIGHTS, 0, device), width, beta, seq_len,
                                         sigma_v2, sigma_b2, dtype=torch_dtype, device=device)
        out, probs = softmax_attention(x, weights, heads=heads, rotate=rotate)
        inputs, outputs = token_statistics(x), token_statistics(out)
        rows["y2"].append(float(attention_statistics(probs)["y2"][0]))
        rows["cosine"].append(float(outputs["rho"][0]))
        rows["q"].append(float(inputs["q"][0]))
        rows["p"].append(float(inputs["p"][0]))
    result = {key: np.array(values) for key, values in rows.items()}
    q, p = result["q"], result["p"]
    if positions == "rope":
        y2 = rope_participation_ratio(beta, q, p, seq_len, head_dim, base)
        q_a, p_a = rope_softmax_attention_map(beta, q=q, p=p, sigma_v2=sigma_v2, sigma_b2=sigma_b2, seq_len=seq_len,
                                              head_dim=head_dim, base=base)
    else:
        y2 = participation_ratio(beta, q, p, seq_len)
        q_a, p_a = softmax_attention_map(beta, q=q, p=p, sigma_v2=sigma_v2, sigma_b2=sigma_b2, seq_len=seq_len)
    result["y2_theory"] = np.asarray(y2, dtype=np.float64)
    result["cosine_theory"] = np.asarray(p_a, dtype=np.float64) / np.asarray(q_a, dtype=np.float64)
    return result
