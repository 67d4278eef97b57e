r"""Attention matrices of one softmax layer at initialisation: maps and eigenvalue spectra.

The simulated parts of Fig. 1(a, b) and Fig. 7 (appendix C.2) of the reference paper.
One layer, one head: Gaussian tokens with order parameters ``(q0, q0 rho0)``
(:func:`~remprop.validation.inputs.gaussian_tokens`), query/key/value weights drawn by
:func:`~remprop.validation.layers.draw_attention_weights` and the probabilities computed
by :func:`~remprop.validation.layers.softmax_attention`, the same functions the
simulated stacks use.

* :func:`attention_matrices` -- the ``T x T`` matrices of several initialisations;
* :func:`bulk_radius` -- the measured outer radius of the non-Perron eigenvalues;
* :func:`attention_map_data` -- Fig. 1(a, b): one matrix per beta and its ``Y_2``;
* :func:`attention_spectrum_data` -- Fig. 7: eigenvalues and radii per beta, against
  :func:`remprop.theory.attention_bulk_radius` (docs/theory.md section 13).

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333, Figs. 1(a, b) and 7.
"""
from __future__ import annotations

import numpy as np
import torch

from remprop.theory import attention_bulk_radius, beta_critical, participation_moment
from remprop.theory.checks import as_float_array, check_grid_axis, check_open_unit, check_seeds

from .backend import STREAM_WEIGHTS, check_positive_int, check_scalar, generator, resolve_device, resolve_dtype
from .inputs import gaussian_tokens
from .layers import draw_attention_weights, softmax_attention
from .measurements import attention_statistics

__all__ = ["attention_matrices", "bulk_radius", "attention_map_data", "attention_spectrum_data"]


def attention_matrices(beta, *, seq_len=512, width=720, seeds=1, q0=1.0, rho0=0.0, dtype="float64",
                       device=None) -> torch.Tensor:
    r"""Softmax attention matrices of one head at initialisation, one per seed.

    .. math:: A_{ij} = \mathrm{softmax}_j\Big(\frac{(W_Q x_i)\cdot(W_K x_j)}{\sqrt d}\Big),
              \qquad W_Q, W_K \sim N(0, \beta\sqrt{\log T}/d)

    Parameters
    ----------
    beta : float
        Query/key scale, >= 0.
    seq_len, width : int
        Tokens T >= 2 and width d >= 2.
    seeds : int or sequence of int
        A count n (seeds ``0 .. n-1``) or the seeds; seed s draws the tokens of stream
        ``(s, tokens, 0)`` and the weights of ``(s, weights, 0)``.
    q0, rho0 : float
        Token order parameters (:func:`~remprop.validation.inputs.gaussian_tokens`).
    dtype, device
        As :class:`~remprop.validation.simulator.SimulatedStack` (float64 by default:
        the eigenvalues of a frozen row-stochastic matrix are ill-conditioned).

    Returns
    -------
    Tensor, shape (seeds, T, T)
        Row-stochastic matrices.
    """
    beta = check_scalar("beta", beta, nonnegative=True)
    seq_len = check_positive_int("seq_len", seq_len, 2)
    width = check_positive_int("width", width, 2)
    torch_dtype, device = resolve_dtype(dtype), resolve_device(device)
    matrices = []
    for seed in check_seeds(seeds):
        x = gaussian_tokens(q0, rho0, seq_len=seq_len, width=width, seed=seed, dtype=dtype, device=device).tokens
        weights = draw_attention_weights(generator(seed, STREAM_WEIGHTS, 0, device), width, beta, seq_len, 1.0, 0.0,
                                         dtype=torch_dtype, device=device)
        matrices.append(softmax_attention(x, weights)[1][0, 0])
    return torch.stack(matrices)


def bulk_radius(eigenvalues, quantile=0.99) -> np.ndarray:
    """The ``quantile`` of ``|lambda|`` over the eigenvalues of each matrix, the Perron one left out.

    The Perron eigenvalue of a row-stochastic matrix is 1; the one nearest to 1 is
    removed. A disk of radius R filled uniformly has its 0.99-quantile at 0.995 R; the
    ``1/|z|`` density of a product of Gaussian matrices (the spread phase) at 0.99 R.

    Parameters
    ----------
    eigenvalues : array_like, shape (..., T)
        Complex eigenvalues, one row per matrix.
    quantile : float
        In (0, 1).

    Returns
    -------
    ndarray, shape (...)
    """
    quantile = check_open_unit("quantile", quantile)
    return np.quantile(np.abs(_without_perron(eigenvalues)), quantile, axis=-1)


def _without_perron(eigenvalues):
    """The eigenvalues of each row but the one nearest to 1: shape ``(..., T - 1)``."""
    values = np.asarray(eigenvalues, dtype=np.complex128)
    keep = np.ones(values.shape, dtype=bool)
    np.put_along_axis(keep, np.argmin(np.abs(values - 1.0), axis=-1)[..., None], False, axis=-1)
    return values[keep].reshape(*values.shape[:-1], values.shape[-1] - 1)


def attention_map_data(betas=(0.5, 3.0), *, seq_len=512, width=720, seed=0, q0=1.0, rho0=0.0,
                       device=None) -> dict:
    r"""Fig. 1(a, b): one attention matrix per beta, with the measured and predicted ``Y_2``.

    Measured: the row mean of ``sum_j A_ij^2``
    (:func:`~remprop.validation.measurements.attention_statistics`); predicted: the exact
    finite-T participation ratio (:func:`remprop.theory.participation_moment`, order 2).

    Returns
    -------
    dict
        ``betas``, ``matrices`` (list of ``T x T`` float32 arrays), ``y2_measured``,
        ``y2_theory``, ``beta_critical`` and ``settings``.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(a, b); docs/theory.md section 3.
    """
    betas = check_grid_axis("betas", betas, nonnegative=True)
    seed = check_seeds((seed,))[0]
    p0 = q0 * rho0
    matrices, measured = [], []
    for beta in betas:
        probs = attention_matrices(float(beta), seq_len=seq_len, width=width, seeds=(seed,), q0=q0, rho0=rho0,
                                   device=device)
        measured.append(float(attention_statistics(probs[:, None])["y2"][0]))
        matrices.append(probs[0].to(torch.float32).cpu().numpy())
    theory = participation_moment(betas, q0, p0, seq_len)
    return {"figure": "figure_1ab", "betas": betas, "matrices": matrices, "y2_measured": np.asarray(measured),
            "y2_theory": np.asarray(theory), "beta_critical": float(beta_critical(q0, p0)),
            "settings": dict(seq_len=seq_len, width=width, seed=seed, q0=q0, rho0=rho0, heads=1)}


def attention_spectrum_data(betas=(0.5, 1.0, 2.0, 3.0), *, seq_len=512, width=720, seeds=4, q0=1.0, rho0=0.0,
                            quantile=0.99, device=None, progress=None) -> dict:
    r"""Fig. 7: eigenvalues of attention matrices and their bulk radius against the theory.

    For each beta and seed: the eigenvalues of one attention matrix, its measured radius
    (:func:`bulk_radius`) and ``Y_2``; the predictions of
    :func:`remprop.theory.attention_bulk_radius` at ``d -> infinity`` and at the
    simulated width, and the random-stochastic-matrix reference ``1/sqrt(T)``.

    Parameters
    ----------
    betas : array_like
        Query/key scales, >= 0.
    seq_len, width, seeds, q0, rho0, device
        As :func:`attention_matrices`.
    quantile : float
        Quantile of ``|lambda|`` taken as the measured radius.
    progress : callable, optional
        Called with 1 after each matrix.

    Returns
    -------
    dict
        ``betas``, ``eigenvalues`` (beta x seed x (T - 1), complex, the Perron one
        removed), ``radius`` (beta x seed), ``radius_mean``, ``radius_std`` (over seeds,
        ddof 1 when there are two or more), ``y2_measured`` (beta x seed),
        ``max_modulus`` (beta x seed, the largest non-Perron ``|lambda|``),
        ``radius_theory`` (``d -> infinity``), ``radius_theory_width`` (at ``width``),
        ``y2_theory``, ``random_stochastic_radius``, ``beta_critical`` and ``settings``.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 7 (appendix C.2); docs/theory.md section 13.
    """
    betas = check_grid_axis("betas", betas, nonnegative=True)
    seeds = check_seeds(seeds)
    quantile = check_open_unit("quantile", quantile)
    p0 = q0 * float(as_float_array("rho0", rho0))
    eigenvalues, y2 = [], []
    for beta in betas:
        probs = attention_matrices(float(beta), seq_len=seq_len, width=width, seeds=seeds, q0=q0, rho0=rho0,
                                   device=device)
        y2.append(attention_statistics(probs[:, None])["y2"].cpu().numpy())
        eigenvalues.append(_without_perron(torch.linalg.eigvals(probs.cpu()).numpy()))
        if progress is not None:
            progress(len(seeds))
    eigenvalues = np.stack(eigenvalues)
    radius = np.quantile(np.abs(eigenvalues), quantile, axis=-1)  # bulk_radius, the Perron one already out
    spread = radius.std(axis=1, ddof=1) if len(seeds) > 1 else np.zeros(len(betas))
    return {"figure": "figure_7", "betas": betas, "eigenvalues": eigenvalues, "radius": radius,
            "radius_mean": radius.mean(axis=1), "radius_std": spread, "max_modulus": np.abs(eigenvalues).max(axis=-1), "y2_measured": np.stack(y2),
            "y2_theory": np.asarray(participation_moment(betas, q0, p0, seq_len)),
            "radius_theory": np.asarray(attention_bulk_radius(betas, q0, p0, seq_len)),
            "radius_theory_width": np.asarray(attention_bulk_radius(betas, q0, p0, seq_len, width)),
            "random_stochastic_radius": 1.0 / np.sqrt(seq_len), "beta_critical": float(beta_critical(q0, p0)),
            "settings": dict(seq_len=seq_len, width=width, seeds=list(seeds), q0=q0, rho0=rho0, quantile=quantile,
                             heads=1)}
