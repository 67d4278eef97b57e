r"""Query/key gradients of one attention layer, measured with torch autograd.

The scalar differentiated is a fixed random readout of the attention output
``S = A X W_V^T + b_V`` (single head, no output projection),

.. math:: \mathcal{L} = \sum_{i,a} R_{ia} S_{ia},\qquad R_{ia} \sim N(0, 1)\ \text{i.i.d.}

drawn once per (seed, readout index) from its own random stream, independent of the
weights and tokens. Then ``E_R |dL/dW_Q|_F^2 = |dS/dW_Q|_F^2``, the squared Frobenius
norm of the Jacobian, which :func:`jacobian_norms` also computes exactly (no readout
noise) by the contraction of ``docs/derivations.md`` (section 1.2):

.. math:: |\partial S/\partial W_Q|_F^2 = \sum_i \frac{|x_i|^2}{d}
          \sum_{l,l'} a_{il} a_{il'} (u_l\cdot u_{l'}) (k_l\cdot k_{l'}),\quad
          u_l = v_l - \textstyle\sum_j a_{ij} v_j,\ k_l = W_K x_l,\ v_l = W_V x_l .

:func:`gradient_sweep` sets the measurements beside
:func:`remprop.theory.gradients.query_gradient_norm`.

Reference: Giorlandino & Goldt, arXiv 2505.24333, Result 2 and Fig. 3(c).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
import torch

from remprop.theory.checks import as_float_array
from remprop.theory.gradients import key_gradient_norm, query_gradient_norm
from remprop.theory.rem.checks import check_seq_len

from . import layers
from .backend import STREAM_READOUTS, STREAM_WEIGHTS, check_positive_int, check_scalar, generator
from .inputs import gaussian_tokens
from .settings import SimulationSettings, check_simulation

__all__ = ["jacobian_norms", "readout_gradient_norms", "GradientSweep", "gradient_sweep"]


def _single_head_parts(x, weights: layers.AttentionWeights):
    d = x.shape[-1]
    scores = (x @ weights.query.T) @ (x @ weights.key.T).transpose(-1, -2) / math.sqrt(d)
    probs = torch.softmax(scores, dim=-1)
    values = x @ weights.value.T
    return probs, values, probs @ values


def jacobian_norms(x: torch.Tensor, weights: layers.AttentionWeights) -> dict:
    r"""Exact squared Frobenius norms of ``dS/dW_Q`` and ``dS/dW_K`` (single head).

    With ``a`` the attention matrix, ``v_l = W_V x_l``, ``S_i = sum_l a_il v_l``,
    ``k_l = W_K x_l`` and ``Q_i = W_Q x_i``:

    .. math::
        |\partial S/\partial W_Q|^2 = \sum_i \frac{|x_i|^2}{d}\, a_i^T\big[(U_i U_i^T)
            \circ (K K^T)\big] a_i,\qquad
        |\partial S/\partial W_K|^2 = \sum_i \frac{|Q_i|^2}{d}\, a_i^T\big[(U_i U_i^T)
            \circ (X X^T)\big] a_i

    where the rows of ``U_i`` are ``v_l - S_i``; expanded so that only T x T matrices
    are formed.

    Parameters
    ----------
    x : Tensor, shape (batch, T, d)
    weights : AttentionWeights

    Returns
    -------
    dict with ``query`` and ``key``: Tensors of shape (batch,), float64.
    """
    x = x.to(torch.float64)
    w = layers.AttentionWeights(*(t.detach().to(torch.float64) for t in (weights.query, weights.key, weights.value,
                                                                         weights.value_bias)))
    probs, values, out = _single_head_parts(x, w)
    d = x.shape[-1]
    value_gram = values @ values.transpose(-1, -2)                    # v_l . v_l'
    cross = out @ values.transpose(-1, -2)                            # S_i . v_l
    out_sq = (out * out).sum(-1)                                      # |S_i|^2

    def contraction(gram):
        ag = probs @ gram                                             # (a_i^T G)_l
        t1 = (probs @ (value_gram * gram) * probs).sum(-1)
        t2 = 2.0 * (probs * cross * ag).sum(-1)
        t3 = out_sq * (probs * ag).sum(-1)
        return t1 - t2 + t3                                           # |M_i|^2, shape (batch, T)

    keys = x @ w.key.T
    queries = x @ w.query.T
    query = ((x * x).sum(-1) / d * contraction(keys @ keys.transpose(-1, -2))).sum(-1)
    key = ((queries * queries).sum(-1) / d * contraction(x @ x.transpose(-1, -2))).sum(-1)
    return {"query": query, "key": key}


def readout_gradient_norms(x: torch.Tensor, weights: layers.AttentionWeights, readouts: torch.Tensor) -> dict:
    r"""``|dL/dW_Q|_F^2`` and ``|dL/dW_K|_F^2`` by autograd, one per readout.

    ``L_r = sum_{b,i,a} R_{r,b,i,a} S_{b,i,a}`` with ``S`` the output of
    :func:`remprop.validation.layers.softmax_attention` (single head).

    Parameters
    ----------
    x : Tensor, shape (batch, T, d)
    weights : AttentionWeights
    readouts : Tensor, shape (n_readouts, batch, T, d)

    Returns
    -------
    dict with ``query`` and ``key``: Tensors of shape (n_readouts,).
    """
    w_q = weights.query.detach().clone().requires_grad_(True)
    w_k = weights.key.detach().clone().requires_grad_(True)
    w = layers.AttentionWeights(w_q, w_k, weights.value.detach(), weights.value_bias.detach())
    with torch.enable_grad():
        out, _ = layers.softmax_attention(x, w, heads=1)
        grads_q, grads_k = [], []
        for r in range(readouts.shape[0]):
            loss = (readouts[r].to(out.dtype) * out).sum()
            g_q, g_k = torch.autograd.grad(loss, (w_q, w_k), retain_graph=r + 1 < readouts.shape[0])
            grads_q.append((g_q.double() ** 2).sum())
            grads_k.append((g_k.double() ** 2).sum())
    return {"query": torch.stack(grads_q), "key": torch.stack(grads_k)}


@dataclass(frozen=True)
class GradientSweep:
    """Gradient norms of one attention layer over beta, for several (T, d).

    Attributes
    ----------
    settings : dict
        JSON-ready run settings.
    betas : ndarray, shape (n_beta,)
    sizes : list of (T, d)
    measured : dict
        ``"query"``, ``"key"`` (autograd readouts), ``"query_exact"``, ``"key_exact"``
        (exact Jacobian norms) and the measured row moments ``"Y2"``, ``"Y3"``, ``"Y4"``,
        ``"Y2_square"``: arrays of shape (len(sizes), n_beta, samples).
    theory : dict
        ``"full"`` (exact finite T, finite width), ``"leading"`` (finite T, d -> infinity),
        ``"asymptotic"`` (T -> infinity moments, finite width) and ``"key"`` (the key
        gradient, finite T and width): shape (len(sizes), n_beta).
    elapsed : float
    """

    settings: dict
    betas: np.ndarray
    sizes: list
    measured: dict
    theory: dict
    elapsed: float = 0.0

    def mean(self, name="query"):
        """Mean over samples, shape (len(sizes), n_beta)."""
        return self.measured[name].mean(axis=-1)

    def std(self, name="query"):
        """Standard deviation over samples (ddof 1)."""
        values = self.measured[name]
        return values.std(axis=-1, ddof=1) if values.shape[-1] > 1 else np.zeros(values.shape[:-1])

    def ratio(self, name="query", theory="full"):
        """Measured mean over theory."""
        return self.mean(name) / self.theory[theory]

    def relevant(self, name="query", fraction=1e-3):
        """Mask of the points whose measured mean exceeds ``fraction`` of its maximum over beta (per size)."""
        mean = self.mean(name)
        return mean > fraction * mean.max(axis=-1, keepdims=True)

    def max_relative_error(self, name="query", theory="full", fraction=1e-3):
        """Largest ``|measured / theory - 1|`` over the relevant points."""
        return float(np.abs(self.ratio(name, theory) - 1.0)[self.relevant(name, fraction)].max())

    def scale(self):
        """``T d^2 sqrt(log T)`` per size, shape (len(sizes), 1): the collapse scale of Fig. 3(c)."""
        return np.array([[t * d * d * math.sqrt(math.log(t))] for t, d in self.sizes])

    def table(self) -> list:
        rows = []
        for s, (t, d) in enumerate(self.sizes):
            for b, beta in enumerate(self.betas):
                rows.append({"T": t, "d": d, "beta": float(beta),
                             "measured": float(self.mean("query")[s, b]),
                             "measured_std": float(self.std("query")[s, b]),
                             "measured_exact_jacobian": float(self.mean("query_exact")[s, b]),
                             "measured_key": float(self.mean("key")[s, b]),
                             "theory_key": float(self.theory["key"][s, b]),
                             "theory": float(self.theory["full"][s, b]),
                             "theory_leading": float(self.theory["leading"][s, b]),
                             "theory_asymptotic": float(self.theory["asymptotic"][s, b]),
                             "ratio": float(self.ratio()[s, b]),
                             "measured_y2": float(self.mean("Y2")[s, b])})
        return rows

    def to_dict(self) -> dict:
        return {"settings": self.settings, "betas": self.betas.tolist(), "sizes": [list(s) for s in self.sizes],
                "table": self.table(),
                "max_relative_error": {name: self.max_relative_error(name, "key" if name.startswith("key") else "full")
                                       for name in ("query", "key", "query_exact", "key_exact")
                                       if np.isfinite(self.measured[name]).all()},
                "elapsed_s": self.elapsed}


def gradient_sweep(betas, sizes=((256, 128), (256, 256), (1024, 128), (1024, 256)), *,
                   sim: SimulationSettings | None = None, readouts=2, sigma_v2=1.0, exact=True,
                   progress=None) -> GradientSweep:
    r"""Measure ``|dL/dW_Q|^2`` of one attention layer against the theory, over beta and (T, d).

    For every seed and size, one sequence of Gaussian tokens (``sim.q0``, ``sim.rho0``; exact sample
    order parameters, :func:`~remprop.validation.inputs.gaussian_tokens`) and one draw of
    the weights, rescaled for each beta (``W_Q, W_K ~ N(0, beta sqrt(log T)/d)``,
    ``W_V ~ N(0, sigma_v2/d)``); ``readouts`` random readouts ``R`` per seed give the
    autograd samples. Theory: :func:`remprop.theory.gradients.query_gradient_norm` at
    ``q = q0``, ``p = q0 rho0``.

    Parameters
    ----------
    betas : array_like
        Query/key scales, > 0.
    sizes : sequence of (T, d)
    sim : remprop.validation.SimulationSettings, optional
        The seeds, the input state ``q0``, ``rho0``, dtype and device (the sizes replace its
        width and seq_len; the other fields are not read). Default
        ``SimulationSettings(seeds=3, dtype="float64")``.
    readouts : int
        Readouts per seed (samples = seeds x readouts).
    sigma_v2 : float
        Value variance (the value bias does not enter the gradient).
    exact : bool
        Also compute the exact Jacobian norms (O(T^3) per point).
    progress : callable, optional
        Called with 1 after each (size, seed).

    Returns
    -------
    GradientSweep

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Result 2, Fig. 3(c).
    """
    betas = np.atleast_1d(as_float_array("betas", betas, positive=True)).ravel()
    sizes = [(check_seq_len(t, allow_none=False), check_positive_int("width", d, 2)) for t, d in sizes]
    if not sizes:
        raise ValueError("sizes must not be empty")
    sim = check_simulation(sim, seeds=3, dtype="float64")
    seed_list, q0, rho0, dtype, device = list(sim.seeds), sim.q0, sim.rho0, sim.dtype, sim.device
    readouts = check_positive_int("readouts", readouts)
    sigma_v2 = check_scalar("sigma_v2", sigma_v2, nonnegative=True)
    samples = len(seed_list) * readouts
    names = ("query", "key", "query_exact", "key_exact", "Y2", "Y3", "Y4", "Y2_square")
    measured = {k: np.full((len(sizes), len(betas), samples), np.nan) for k in names}
    start = time.perf_counter()
    for s, (seq_len, width) in enumerate(sizes):
        for i_seed, seed in enumerate(seed_list):
            cols = slice(i_seed * readouts, (i_seed + 1) * readouts)
            x = gaussian_tokens(q0, rho0, count=1, seq_len=seq_len, width=width, seed=seed, dtype=dtype,
                                device=device).tokens
            gen_r = generator(seed, STREAM_READOUTS, 0, device)
            readout = torch.randn((readouts,) + tuple(x.shape), generator=gen_r, dtype=dtype, device=device)
            for b, beta in enumerate(betas):
                gen = generator(seed, STREAM_WEIGHTS, 0, device)
                weights = layers.draw_attention_weights(gen, width, float(beta), seq_len, sigma_v2, 0.0,
                                                        dtype=dtype, device=device)
                grads = readout_gradient_norms(x, weights, readout)
                measured["query"][s, b, cols] = grads["query"].cpu().numpy()
                measured["key"][s, b, cols] = grads["key"].cpu().numpy()
                with torch.no_grad():
                    probs = _single_head_parts(x, weights)[0].double()
                    rows = {k: (probs ** k).sum(-1) for k in (2, 3, 4)}
                    moments = {"Y2": rows[2].mean(), "Y3": rows[3].mean(), "Y4": rows[4].mean(),
                               "Y2_square": (rows[2] ** 2).mean()}
                    for k, v in moments.items():
                        measured[k][s, b, cols] = float(v)
                    if exact:
                        jac = jacobian_norms(x, weights)
                        measured["query_exact"][s, b, cols] = float(jac["query"].sum())
                        measured["key_exact"][s, b, cols] = float(jac["key"].sum())
            if progress is not None:
                progress(1)
    elapsed = time.perf_counter() - start
    p0 = q0 * rho0
    theory = {name: np.array([function(betas, q0, p0, d, t, sigma_v2=sigma_v2, **kw) for t, d in sizes])
              for name, function, kw in (("full", query_gradient_norm, {}),
                                         ("leading", query_gradient_norm, {"finite_width": False}),
                                         ("asymptotic", query_gradient_norm, {"asymptotic": True}),
                                         ("key", key_gradient_norm, {}))}
    settings = {"sizes": [list(s) for s in sizes], "seeds": seed_list, "readouts": readouts, "q0": q0, "rho0": rho0,
                "sigma_v2": sigma_v2, "readout": "L = sum_ia R_ia S_ia, R_ia ~ N(0, 1) i.i.d., fixed per (seed, r)",
                "dtype": sim.dtype_name, "device": str(device)}
    return GradientSweep(settings, betas, sizes, measured, theory, elapsed)
