r"""Fig. 9 simulated: mean token cosine through tanh stacks on both sides of the edge of chaos.

Two stacks, at the settings of :func:`remprop.diagrams.edge_of_chaos_figures.edge_of_chaos_data`
(one weight variance per ``factor`` times the boundary value):

* residual MLP blocks with LayerNorm, ``x <- LN(alpha x + W2 phi(W1 x + b1) + b2)``,
  ``W1, W2 ~ N(0, sigma_w2 / d)``, biases ``N(0, sigma_b2)``, from unit-norm tokens with
  cosine ``rho0`` (the theory's ``chi_MLP = 1`` boundary separates ``rho -> 1`` from a
  fixed point ``rho* < 1``);
* the deep network without skips, pre-activations ``h <- W phi(h) + b``,
  ``W ~ N(0, sigma_w2 / d)``, ``b ~ N(0, sigma_b2)``, started at the length fixed point
  ``q*`` with cosine ``rho0`` (Poole et al.'s ``chi_1 = 1``).

Tokens: :func:`~remprop.validation.inputs.gaussian_tokens` with exactly the input
``(q, q rho0)``; the measured quantity is the mean pairwise cosine of the T tokens.
Layer ``l`` of seed ``s`` draws from stream ``(s, weights, l)``.

References: B. Poole et al., NeurIPS 2016; S. Schoenholz et al., ICLR 2017;
A. Giorlandino & S. Goldt, arXiv 2505.24333 (Fig. 9).
"""
from __future__ import annotations

import numpy as np
import torch

from remprop.theory import edge_of_chaos as eoc
from remprop.theory.rem.checks import check_seq_len

from .. import layers
from ..backend import STREAM_WEIGHTS, check_positive_int, generator, resolve_device, resolve_dtype
from ..inputs import gaussian_tokens
from ..measurements import token_statistics

__all__ = ["simulate_edge_of_chaos"]


def _cosine(x):
    return token_statistics(x)["cosine"].cpu().numpy()


def simulate_edge_of_chaos(data, *, width=256, seq_len=32, seeds=2, dtype="float32", device=None,
                           progress=None) -> dict:
    """Simulate both stacks of the edge-of-chaos figure at the settings in ``data``.

    Parameters
    ----------
    data : dict
        From :func:`remprop.diagrams.edge_of_chaos_figures.edge_of_chaos_data` (uses
        ``block_sigma_w2``, ``deep_sigma_w2``, ``sigma_b2``, ``alpha``, ``depth``,
        ``rho0``, ``activation``).
    width, seq_len, seeds : int
        Width d, tokens T, initialisations (one sequence each).
    dtype, device
        As :class:`~remprop.validation.SimulatedStack`.
    progress : callable, optional
        Called with 1 after each (stack, setting, seed).

    Returns
    -------
    dict
        ``block_mean``, ``block_std``, ``deep_mean``, ``deep_std``: arrays of shape
        (len(factors), depth + 1) (mean and std over seeds of the mean token cosine),
        and the sizes.

    References
    ----------
    Poole et al., NeurIPS 2016; Giorlandino & Goldt, arXiv 2505.24333, Fig. 9.
    """
    width = check_positive_int("width", width, 2)
    seq_len = check_seq_len(seq_len, allow_none=False)
    seeds = check_positive_int("seeds", seeds)
    dtype, device = resolve_dtype(dtype), resolve_device(device)
    activation, depth, rho0 = data["activation"], int(data["depth"]), float(data["rho0"])
    sigma_b2, alpha = float(data["sigma_b2"]), float(data["alpha"])
    if activation not in layers.ACTIVATION_FUNCTIONS:
        raise ValueError(f"activation {activation!r} has no torch counterpart to simulate")
    phi = layers.ACTIVATION_FUNCTIONS[activation]
    kw = dict(dtype=dtype, device=device)
    out = {}
    with torch.no_grad():
        for stack, widths in (("block", data["block_sigma_w2"]), ("deep", data["deep_sigma_w2"])):
            runs = np.empty((len(widths), seeds, depth + 1))
            for k, sigma_w2 in enumerate(np.asarray(widths, dtype=float)):
                q0 = 1.0 if stack == "block" else float(eoc.length_fixed_point(sigma_w2, sigma_b2, activation))
                for seed in range(seeds):
                    x = gaussian_tokens(q0, rho0, count=1, seq_len=seq_len, width=width, seed=seed, **kw).tokens
                    runs[k, seed, 0] = _cosine(x)[0]
                    for layer in range(depth):
                        gen = generator(seed, STREAM_WEIGHTS, layer, device)
                        if stack == "block":
                            w = layers.draw_mlp_weights(gen, width, width, sigma_w2, sigma_b2, **kw)
                            x = layers.layer_norm(layers.skip(x, layers.mlp(x, w, activation), alpha))
                        else:
                            w = layers.draw_dense_weights(gen, width, sigma_w2, sigma_b2, **kw)
                            x = layers.dense(phi(x), w)
                        runs[k, seed, layer + 1] = _cosine(x)[0]
                    if progress is not None:
                        progress(1)
            out[f"{stack}_mean"] = runs.mean(axis=1)
            out[f"{stack}_std"] = runs.std(axis=1, ddof=1) if seeds > 1 else np.zeros_like(runs[:, 0])
    out.update(width=width, seq_len=seq_len, seeds=seeds, dtype=str(dtype).replace("torch.", ""),
               device=str(device))
    return out
