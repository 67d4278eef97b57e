"""The causal Gram walker (private).

Its public side is :mod:`remprop.theory.causal` (``propagate_causal_gram``, ``pair_moment``,
docs/theory.md section 8; the pair moments' quadrature is
:mod:`remprop.theory.activations.pair_moments`); this module holds the walk itself, apart only
for the length of one module, and imports nothing of :mod:`remprop.theory.causal`.
"""
from __future__ import annotations

import numpy as np

from . import _gram_in_place as _in_place
from . import gram_state as _gram
from .activations import activation_spec, dense_core, moments_array
from .activations.pair_moments import PAIR_HALF_NODES, TABLE_SPREAD, pair_grid, pair_moment
from .components import MLP, Dense, Serial
from .attention_masks import causal_window_mask, layer_window
from ._fast_gram_attention import fast_attention_gram
from .checks import check_count
from .rem.qk_norm import gaussian_cosine_mean

__all__ = ["PAIR_HALF_NODES", "pair_moment"]


class _CausalGramWalker(_gram._GramWalker):
    """The Gram walker of :mod:`remprop.theory.gram_state` with a causal mask in the attention.

    Scores are drawn as ``S = c L Z L`` (``L = K^{1/2}``, ``Z`` i.i.d. N(0, 1)) without RoPE; with
    RoPE (``frequencies`` theta_f, f < d_H / 2) as the sum over the frequencies of
    ``sqrt(2 / F) c Re[D_f^* (L Z_f L) D_f]``, ``Z_f`` i.i.d. standard complex Gaussian and
    ``D_f = diag(exp(i theta_f m))``, whose covariance is exactly
    ``c^2 K_ik K_jl c((j - i) - (l - k))`` (section 15: each query rotated by its own position);
    frequencies with ``theta_f (T - 1) < 0.05`` (cos >= 0.9987 over the sequence) are drawn as one
    unrotated term of their summed weight. ``K = G`` and ``c = beta_eff sqrt(log T)`` without
    QK-norm; with QK-norm (``comp.qk_norm_dim = n``) ``K = kappa_n(C)`` elementwise on the cosine
    matrix ``C`` of the attention input and ``c = beta g^2`` (docs/theory.md sections 8 and 16:
    normalised first, then rotated, as OLMo 2). With ``logit_softcap`` each drawn score becomes
    ``cap tanh(s / cap)`` (exact inside the Monte Carlo). The keys a row does not see (the future, and
    those before its sliding window ``window``, set per layer) are masked and
    ``sigma_v^2 E[A G A^T] + sigma_b^2`` averaged over the draws (plain Monte Carlo: a causal Gram
    matrix is far from a simplex, docs/theory.md section 8). Parallel blocks (GPT-J form) add their
    branches' Gram matrices to ``alpha^2 G``.
    """

    #: Largest ``theta_f (T - 1)`` of a frequency drawn without rotation.
    SLOW = 0.05
    #: Relative spread of the token norms below which an MLP's input counts as equal-norm (rounding).
    EQUAL_NORMS = 1e-12

    def __init__(self, draws, rng, activation, frequencies=None, logit_softcap=None, norm_eps=0.0, fast=False,
                 width=None):
        super().__init__(draws, rng, activation)
        #: ``(d, d_H)`` of :func:`finite_width`, or None (infinite width).
        self.width = width
        #: True: the fast attention (``_fast_gram_attention``: factor-drawn scores, projected values).
        self.fast = bool(fast)
        self.frequencies = frequencies
        self.logit_softcap = None if logit_softcap is None else float(logit_softcap)
        self.norm_eps = float(norm_eps)
        #: The sliding window of the layer walked (None: the full causal mask), set per layer.
        self.window = None
        self._mask_of = (None, None)   # ((t, window), its causal_window_mask): see _mask

    def parallel(self, comp, g):
        # x -> alpha x + sum_i F_i(x): independent branches, their Gram matrices add (section 19)
        total = sum(self.apply(branch, g) for branch in comp.branches)
        self.deviations = None
        return _gram._skip(comp, total, g)

    # -- the fast method's walk: the pair maps in place (_gram_in_place), one T x T array a step ----------
    def block_step(self, block, g, layer, what="Gram state"):
        if not self.fast:
            return super().block_step(block, g, layer, what)
        with np.errstate(divide="ignore", invalid="ignore"):
            out = self.apply(block, g)
        if np.may_share_memory(out, g):
            out = out.copy()
        if not _in_place.symmetrise(out):
            raise ValueError(f"the {what} is not finite after block {layer + 1} (beta or the variances "
                             "too large for float64)")
        return out

    def serial(self, comp, g):
        """The layers in turn (nested serials flattened: no frame keeps an intermediate alive); a dense
        layer or an MLP whose input is an intermediate of this walk overwrites it."""
        if not self.fast:
            return super().serial(comp, g)
        current = g
        for layer in _flat_layers(comp):
            owned = current is not g and not np.may_share_memory(current, g)
            if type(layer).gram is Dense.gram:
                current = self.dense(layer, current, overwrite=owned)
            elif isinstance(layer, MLP) and type(layer).gram is MLP.gram:
                current = self.mlp(layer, current, overwrite=owned)
            else:
                current = self.apply(layer, current)
        return current

    def residual(self, comp, g):
        if not self.fast:
            return super().residual(comp, g)
        self.deviations = None
        branch = self.apply(comp.branch, g)
        if np.may_share_memory(branch, g):
            branch = branch.copy()
        _in_place.skip_in_place(branch, g, float(comp.alpha))
        return branch

    def dense(self, comp, g, overwrite=False):
        if not self.fast:
            return super().dense(comp, g)
        out = g if overwrite else g.copy()
        _in_place.dense_in_place(out, float(comp.sigma_w2), float(comp.sigma_b2))
        return out

    def mlp(self, comp, g, overwrite=False):
        if self.fast and not self.homogeneous:
            out = self._fast_mlp(comp, g, overwrite)
            if out is not None:
                return out
        diag = np.diag(g)
        if self._equal_up_to_rounding(diag):
            g = g.copy()
            np.fill_diagonal(g, diag.mean())
            diag = np.diag(g)
        if self.homogeneous or (np.ptp(diag) == 0 and not self.fast):
            return super().mlp(comp, g)
        # unequal norms, any activation: E[phi(u_i) phi(u_j)] at Var u_i = q1_i, Var u_j = q1_j by
        # a two-dimensional quadrature per pair (norm="none" with branch-norm eps)
        spec = activation_spec(comp.activation)
        rows = np.broadcast_to(diag[:, None], g.shape)

        def moments(q1, p1):   # (the fast method's table, :meth:`_fast_mlp`, took the narrower spreads)
            m2 = np.broadcast_to(moments_array(spec.code, np.diag(q1), np.diag(q1))[0][:, None], q1.shape)
            upper = np.triu_indices(q1.shape[0])
            m11 = np.empty(q1.shape)
            m11[upper] = pair_moment(comp.activation, q1[upper], q1.T[upper], p1[upper])
            m11.T[upper] = m11[upper]
            return m2, m11

        q_out, g_out = comp._two_layers(rows, g, moments, lambda value: value)
        g_out = np.array(g_out)
        np.fill_diagonal(g_out, np.diag(q_out))
        return g_out

    def _equal_up_to_rounding(self, diag):
        """Whether the token norms ``diag`` differ by rounding only (norm="none" with branch norms: every
        token ``q0 + k``), so that an MLP takes them as one."""
        return 0 < np.ptp(diag) <= self.EQUAL_NORMS * diag.max()

    def _fast_mlp(self, comp, g, overwrite):
        """The MLP on ``g`` by the pair-moment table (``_gram_in_place.mlp_pairs``), the diagonal by the
        component's own maps per token; None where the token variances spread wider than the table's
        ``TABLE_SPREAD`` (then :meth:`mlp` takes the per-pair quadrature)."""
        diag = np.diag(g).copy()
        if self._equal_up_to_rounding(diag):
            diag[:] = diag.mean()
        sigma_w2, sigma_b2 = float(comp.sigma_w2), float(comp.sigma_b2)
        q1 = dense_core(diag, diag, sigma_w2, sigma_b2)[0]
        if np.ptp(np.log(q1)) > TABLE_SPREAD:
            return None
        spec = activation_spec(comp.activation)
        m2 = moments_array(spec.code, q1, q1)[0]
        out = g if overwrite else np.empty_like(g)
        _in_place.mlp_pairs(comp, g, q1, m2, pair_grid(comp.activation, q1), out)
        h2 = comp.hidden_core(q1, q1, m2, m2)[0]
        sigma_out = sigma_w2 if comp.sigma_w2_out is None else float(comp.sigma_w2_out)
        np.fill_diagonal(out, dense_core(h2, h2, sigma_out, sigma_b2)[0])
        return out

    #: Most doubles of the stacked draws ``L X_f L`` held at once (chunks of rotating frequencies).
    CHUNK_DOUBLES = 2 ** 23

    def _scores(self, root, c, t):
        if self.frequencies is None:
            return c * (root @ self.rng.standard_normal((t, t)) @ root)
        slow = self.frequencies * (t - 1) < self.SLOW
        count = self.frequencies.size
        scores = np.zeros((t, t))
        if slow.any():
            scores += c * np.sqrt(slow.sum() / count) * (root @ self.rng.standard_normal((t, t)) @ root)
        # Z_f = (X_f + i Y_f) / sqrt 2 and D_f = diag(exp(i theta_f m)):
        # sqrt(2 / F) Re[D_f^* (L Z_f L) D_f]_ij = sqrt(1 / F) [cos(theta_f (j - i)) (L X_f L)_ij
        # - sin(theta_f (j - i)) (L Y_f L)_ij]: real products only, and for a chunk of frequencies
        # two matrix products, L [X_1 .. Y_k] then the stacked rows times L (draws laid out (i, f, j));
        # cos(theta (j - i)) = c_i c_j + s_i s_j and sin(theta (j - i)) = s_j c_i - c_j s_i with
        # c_m = cos(theta m), s_m = sin(theta m): trigonometry on T positions, not on T^2 pairs
        rotating = self.frequencies[~slow]
        chunk = max(1, self.CHUNK_DOUBLES // (2 * t * t))
        for start in range(0, rotating.size, chunk):
            angle = rotating[start:start + chunk, None] * np.arange(t)                  # (f, m)
            cos, sin = np.cos(angle), np.sin(angle)
            k = angle.shape[0]
            normals = self.rng.standard_normal((t, 2 * k, t))
            left = (root @ normals.reshape(t, 2 * k * t)).reshape(t * 2 * k, t)
            both = (left @ root).reshape(t, 2 * k, t)
            x, y = both[:, :k], both[:, k:]
            scores += (c / np.sqrt(count)) * (np.einsum("fi,fj,ifj->ij", cos, cos, x)
                                              + np.einsum("fi,fj,ifj->ij", sin, sin, x)
                                              - np.einsum("fi,fj,ifj->ij", cos, sin, y)
                                              + np.einsum("fi,fj,ifj->ij", sin, cos, y))
        return scores

    @staticmethod
    def score_kernel(comp, g):
        """``K`` of the scores' covariance ``c^2 K_ik K_jl``: ``G``, or with QK-norm ``kappa_n(C)``
        (``C`` the cosine matrix of ``g``, :func:`~remprop.theory.rem.qk_norm.gaussian_cosine_mean`;
        positive semidefinite: ``kappa_n`` is a power series in ``rho`` with nonnegative
        coefficients, Schur's product theorem)."""
        if getattr(comp, "qk_norm_dim", None) is None:
            return g
        norms = np.sqrt(np.diag(g))
        cosine = np.clip(g / np.outer(norms, norms), -1.0, 1.0)
        np.fill_diagonal(cosine, 1.0)
        return np.asarray(gaussian_cosine_mean(cosine, int(comp.qk_norm_dim)), dtype=np.float64)

    def _mask(self, t):
        """``causal_window_mask(t, self.window)``, kept for the layers that share the window (one per walk)."""
        if self._mask_of[0] != (t, self.window):
            self._mask_of = ((t, self.window), causal_window_mask(t, self.window))
        return self._mask_of[1]

    def attention(self, comp, g):
        if comp.gain_controlled:
            raise ValueError("attention='gain-controlled' has no causal Gram map (softmax only)")
        t = g.shape[0]
        # comp.beta * sqrt(log T): beta_eff sqrt(log T), or with QK-norm beta g^2 (beta_scale)
        c = float(comp.beta) * np.sqrt(np.log(t))
        seen = self._mask(t)
        self.deviations = None
        if self.fast:
            width, head_dim = self.width or (None, None)
            total = fast_attention_gram(g, self.score_kernel(comp, g), c, seen, self.rng, self.draws,
                                        self.frequencies, self.logit_softcap, width, head_dim)
            _in_place.dense_in_place(total, float(comp.sigma_v2), float(comp.sigma_b2))
            return total
        root = _gram._symmetric_sqrt(self.score_kernel(comp, g))
        mask = ~seen
        total = np.zeros_like(g)
        for _ in range(self.draws):
            scores = self._scores(root, c, t)
            if self.logit_softcap is not None:
                scores = self.logit_softcap * np.tanh(scores / self.logit_softcap)
            scores[mask] = -np.inf
            attn = _gram._softmax_rows(scores)
            total += (attn @ g) @ attn.T
        total /= self.draws
        return float(comp.sigma_v2) * 0.5 * (total + total.T) + float(comp.sigma_b2)


def head_width(arch, width):
    """A head's ``d_H`` at the stream width ``width``: ``arch.head_dim``, else ``width / heads`` (None where
    ``heads`` does not divide ``width``)."""
    if arch.head_dim is not None:
        return int(arch.head_dim)
    return width // arch.heads if width % arch.heads == 0 else None


def finite_width(arch, width, method):
    """``(d, d_H)`` of a causal Gram state at the stream width ``width`` (None: infinite width, None
    returned): ``d_H`` the architecture's ``head_dim``, else ``width / heads``; ``d >= 2 d_H`` (a head's
    query and key directions are two of the ``d``, docs/theory.md section 8.2); the fast method only."""
    if width is None:
        return None
    width = check_count("width", width, 3)
    if method != "fast":
        raise ValueError("width needs method='fast': the exact method is the infinite-width law "
                         "(docs/theory.md section 8.2)")
    head_dim = head_width(arch, width)
    if head_dim is None:
        raise ValueError(f"width must be a multiple of heads ({arch.heads}) when arch.head_dim is None, "
                         f"got {width}")
    if width < 2 * head_dim:
        raise ValueError(f"width must be at least 2 head_dim = {2 * head_dim} (a head's query and key directions), "
                         f"got {width}")
    return width, int(head_dim)


def _last_tokens(g, last):
    """(q, p, mean pair cosine) of the last ``last`` tokens of ``g``."""
    sub = g[-last:, -last:]
    diag = np.trace(sub)
    cos = sub / np.sqrt(np.outer(np.diag(sub), np.diag(sub)))
    pairs = last * (last - 1)
    return diag / last, (sub.sum() - diag) / pairs, (cos.sum() - np.trace(cos)) / pairs


def _flat_layers(comp):
    """The leaf layers of a serial component, nested serials expanded in order."""
    for layer in comp.layers:
        if type(layer).gram is Serial.gram:
            yield from _flat_layers(layer)
        else:
            yield layer


def walk_chains(walkers, block, initial, depth, pattern, last):
    """Each walker's chain from ``initial()`` (a new input Gram matrix per chain: none is kept alive
    beside the walk) through ``depth`` blocks (block ``l`` with the window ``layer_window(pattern, l)``):
    the last tokens' ``(q, p, cosine)``, shape (3, chains, depth + 1), and the chains' mean Gram matrix
    after the last block."""
    stats, total = np.empty((3, len(walkers), depth + 1)), None
    for chain, walker in enumerate(walkers):
        g = initial()
        for layer in range(depth + 1):
            stats[:, chain, layer] = _last_tokens(g, last)
            if layer == depth:
                break
            walker.window = layer_window(pattern, layer)
            g = walker.block_step(block, g, layer, "causal Gram state")
        total = g if total is None else total + g
        del g
    total /= len(walkers)
    return stats, total
