"""Shared tools of the Monte Carlo tests: exact token simplices, order parameters, errors.

Used by ``test_theory_montecarlo.py`` and ``test_projection_maps.py`` (NumPy only).
"""
import math

import numpy as np


def mean_and_se(samples):
    """Mean over the first axis and its standard error (sample std / sqrt(n))."""
    samples = np.asarray(samples, dtype=np.float64)
    return samples.mean(axis=0), samples.std(axis=0, ddof=1) / math.sqrt(len(samples))


def simplex_times(W, T, q, p):
    """X @ W for T tokens X with EXACT order parameters |x_i|^2 / d = q, x_i . x_j / d = p.

    x_j = sqrt(d) (sqrt(p) e_0 + sqrt(q - p) e_j) with basis vectors e_0..e_T (needs
    T + 1 <= d), so X @ W combines rows of W (no matrix product needed). The weights are
    i.i.d. Gaussian, hence rotation invariant: a fixed orthonormal frame gives the same
    output distribution as a random one, and the measurements carry no O(1/sqrt(d))
    fluctuation of the input Gram matrix; the network-to-network spread is what the
    standard error measures.
    """
    d = W.shape[0]
    assert T + 1 <= d
    return math.sqrt(d * p) * W[0] + math.sqrt(d * (q - p)) * W[1:T + 1]


def order_parameters(Y):
    """(q, p) of a token matrix: mean |y_i|^2 / d and mean y_i . y_k / d over i != k."""
    T, d = Y.shape
    squares = np.einsum("ij,ij->", Y, Y)
    total = Y.sum(axis=0)
    return squares / (T * d), (total @ total - squares) / (T * (T - 1) * d)


def mlp_on_simplex(rng, phi, T, q, p, d, d_ff, sigma_w2, sigma_b2, sigma_w2_out=None):
    """(q', p') of ``phi(X W1 + b1) W2 + b2`` on an exact simplex, for one draw of the weights.

    ``W1 ~ N(0, sigma_w2 / d)``, ``W2 ~ N(0, sigma_w2_out / d_ff)`` (default ``sigma_w2``),
    biases ``N(0, sigma_b2)``, drawn from ``rng`` in the order W1, W2, b1, b2.
    """
    out = sigma_w2 if sigma_w2_out is None else sigma_w2_out
    W1 = rng.standard_normal((d, d_ff)) * math.sqrt(sigma_w2 / d)
    W2 = rng.standard_normal((d_ff, d)) * math.sqrt(out / d_ff)
    b1 = rng.standard_normal(d_ff) * math.sqrt(sigma_b2)
    b2 = rng.standard_normal(d) * math.sqrt(sigma_b2)
    return order_parameters(phi(simplex_times(W1, T, q, p) + b1) @ W2 + b2)
