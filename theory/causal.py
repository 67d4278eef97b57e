r"""Causal (decoder) attention: the REM of a token that sees only the keys before it.

With a causal mask, the token at position t (1-based) attends to the t keys
``1..t``. Its scores keep the scale of the model's sequence length T, which sets
``s_qk^2 = beta sqrt(log T) / d``: the row is a REM with **t** states and energy variance

.. math:: v = \beta^2 q (q - p) \log T ,

so the participation ratio of row t is the finite-T one of t keys at a rescaled
reduced scale (:mod:`remprop.theory.rem.causal`),

.. math:: Y_2(t) = Y_2^{\rm exact}\Big(x \sqrt{\log T / \log t};\ t\Big),
          \qquad x = \beta \sqrt{q (q - p)} ,

and two rows t, t' near the end of the sequence have the cross-overlap ``1/t`` (independent
rows over about t common keys; the encoder's finite-T map uses the tabulated overlap of
correlated rows, :func:`~remprop.theory.cross_overlap_table`, not tabulated per position yet).
Late tokens (``t`` close to T) see almost the whole simplex of tokens, so their order parameters
follow the encoder's block maps with these two replacements (docs/theory.md section 8);
:func:`propagate_causal` iterates those maps for each position separately, and
:func:`last_tokens_cosine` averages ``rho_t = p_t / q_t`` over the last k positions. Early tokens
break the simplex picture (few keys): the prediction is meant for late positions.

Position 1 has no REM (one key): positions must be >= 2. The late rows' keys are not in the late state (docs/theory.md section 8). :func:`propagate_causal_gram` carries the
whole causal Gram matrix instead (docs/theory.md sections 8, 8.1 and 17; by default the fast method,
``O(T^2)`` per draw, :func:`causal_gram_flops`): rotary scores, QK-normed scores from the kernel
``kappa_n(C)``, capped scores, parallel branches, the norms' eps, the MLP moments at unequal token
norms (:func:`pair_moment`), a finite width (section 8.2). :func:`choose_causal_theory` is the rule of ``remprop check
--causal-theory`` between the maps and the Gram state.

Attention masks (``window``, :mod:`remprop.theory.attention_masks`): a row of a windowed layer sees its
last ``min(t, w)`` keys, of a chunked one ``((t - 1) mod c) + 1``, a prefix row P; the maps read the REM of
that many keys, the Gram state masks the scores. QK-norm: each row's beta at the state it sees
(``Architecture.effective_beta``). RoPE: row t's REM reads ``p cbar_t`` in place of ``p``
(:func:`~remprop.theory.rem.causal.causal_rope_correlation`); the values keep ``p``.

References
----------
A. Giorlandino & S. Goldt, arXiv 2505.24333 (Fig. 12: causal model, last 50 tokens);
B. Derrida (1981).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _causal_gram, components as C, gram_state as _gram, _fast_gram_attention as _fast
from .attention_masks import check_windows, layer_window, window_keys
from ._causal_gram import _CausalGramWalker
from .activations import activation_spec
from .architecture import Architecture
from .components import attention_scale as scale
from .components.attention import softmax_attention_overlap_core
from .checks import as_float_array, check_count, check_depth
from .rem import CausalParticipationTable, causal_participation_table, check_positions, check_seq_len
from .rem.causal import causal_rope_correlation

__all__ = ["row_rope_correlation", "CausalTrajectory", "propagate_causal", "last_tokens_cosine",
           "CausalGramTrajectory", "propagate_causal_gram", "causal_gram_support_problem", "causal_gram_flops",
           "pair_moment", "PAIR_HALF_NODES", "choose_causal_theory", "AUTO_GRAM_FLOPS", "CAUSAL_THEORIES",
           "LAST_TOKENS", "compared_last_tokens", "MAX_GRAM_SEQ_LEN", "CAUSAL_GRAM_METHODS", "gram_width"]

#: Late tokens that follow the encoder maps: the last 50 of T = 512 (docs/theory.md section 8).
LAST_TOKENS = 50


def compared_last_tokens(seq_len) -> int:
    """How many late tokens of a causal model of ``seq_len`` tokens are compared: :data:`LAST_TOKENS`,
    or ``seq_len - 1`` for shorter sequences (every token but the first, which attends to itself
    alone: :func:`last_tokens_cosine` needs ``last <= seq_len - 1``). The one rule of the
    diagnosis, the causal Gram state and the measurement, so that they average the same tokens.
    """
    return min(LAST_TOKENS, check_seq_len(seq_len, allow_none=False) - 1)


@dataclass(repr=False)
class _CausalAttention(C.Component):
    beta: np.ndarray
    sigma_v2: np.ndarray
    sigma_b2: np.ndarray
    positions: np.ndarray
    table: CausalParticipationTable
    #: ``cbar_t`` of each position (RoPE), exactly 1 without rotation.
    rope_correlation: np.ndarray
    #: With QK-norm: the architecture and the model's beta (head beta at the input's state); else None.
    qk_norm_arch: Architecture = None
    model_beta: np.ndarray = None
    name = "causal_softmax_attention"

    def apply(self, q, p):
        beta = self.beta
        if self.qk_norm_arch is not None:
            # QK-norm: the head's beta at the state the attention sees, as the encoder's component
            beta = np.asarray(self.qk_norm_arch.effective_beta(self.model_beta, q=q, p=p), dtype=np.float64)
        x = beta * np.sqrt(np.maximum(q * (q - p * self.rope_correlation), 0.0))
        one = self.positions == 1  # a window of one key: the row is its own value, no key shared with another
        y2 = np.where(one, 1.0, self.table(np.maximum(self.positions, 2), x))
        cross = np.where(one, 0.0, 1.0 / self.positions)
        return softmax_attention_overlap_core(q, p, y2, cross, self.sigma_v2, self.sigma_b2)


def _causal_block(arch, beta, positions, table, rope_correlation, model_beta=None):
    qk = (arch, model_beta) if arch.qk_norm else (None, None)
    return arch.compose(_CausalAttention(beta, np.asarray(arch.sigma_v2, float), np.asarray(arch.sigma_b2, float),
                                         positions, table, rope_correlation, *qk))


def row_rope_correlation(arch, seq_len, positions):
    """``cbar_t`` of each causal row (``positions``, 1-based t in [2, T]): the encoder's factor on ``p``
    (``Architecture.mean_rope_correlation``, 1 without RoPE) for the t keys of row t, partial rotary
    (``rotary_dim``) mixed in."""
    if not arch.positions.rotary:
        return np.ones(positions.shape)
    rows = causal_rope_correlation(positions, seq_len, scale.rotary_width(arch), arch.rope_base)
    return np.asarray(scale.rotary_share(arch, rows), dtype=np.float64)


@dataclass(frozen=True)
class CausalTrajectory:
    """Per-position order parameters of a causal stack.

    Attributes
    ----------
    positions : ndarray of int, shape (n,)
    q, p : ndarray, shape (n, depth + 1)
        Column 0 is the input.
    """

    positions: np.ndarray
    q: np.ndarray
    p: np.ndarray

    @property
    def rho(self):
        return self.p / self.q

    @property
    def depth(self):
        return self.q.shape[-1] - 1


def propagate_causal(arch: Architecture, beta, depth, seq_len, positions, q0=1.0, rho0=0.0,
                     window=None) -> CausalTrajectory:
    r"""Late-token theory of a causal stack: the encoder maps with t keys per position.

    For each position t the block maps of ``arch`` are iterated with the causal
    attention map

    .. math:: q_A = s_v^2 (p + (q - p) Y_2(t)) + s_b^2,\qquad
              p_A = s_v^2 (p + (q - p)/t) + s_b^2,

    ``Y_2(t)`` from :class:`~remprop.theory.rem.CausalParticipationTable` (t states at the score scale of T)
    at ``x_t = beta sqrt(q (q - p cbar_t))``: ``cbar_t = 1`` without rotary positions, the mean
    rotary correlation of t keys with ``arch.positions == "rope"``
    (:func:`~remprop.theory.rem.causal.causal_rope_correlation`, docs/theory.md section 8).

    Parameters
    ----------
    arch : Architecture
        Scalar numeric fields; ``attention="softmax"`` (the centring of gain-controlled
        attention mixes all positions and has no per-position map). ``arch.seq_len`` is
        None or ``seq_len`` (a RoPE architecture has it set). With ``positions="rope"`` each row
        reads ``head_dim`` and ``rope_base``. With ``qk_norm`` the head beta is
        ``arch.effective_beta(beta, q=q, p=p)`` at each row's attention input.
    beta : float
        Query/key scale, > 0.
    depth : int
    seq_len : int
        The model's T.
    positions : array_like of int
        Positions t in [2, T] (1-based).
    q0, rho0 : float
        Input state of every position.
    window : None, int, AttentionMask or sequence, optional
        Attention masks (:func:`~remprop.theory.attention_masks.check_windows`: per layer, repeated; sizes
        at most ``seq_len``): row t of a masked layer is the REM of the keys it sees
        (:func:`~remprop.theory.attention_masks.window_keys`: ``min(t, w)`` in a sliding window, the
        ``((t - 1) mod c) + 1`` of its chunk, ``max(t, P)`` with a prefix).

    Returns
    -------
    CausalTrajectory

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 12 (docs/theory.md section 8).
    """
    if not isinstance(arch, Architecture):
        raise ValueError(f"arch must be a remprop.theory.Architecture, got {type(arch).__name__}")
    if arch.attention.gain_controlled:
        raise ValueError(f"attention must be 'softmax' for the causal theory, got {arch.attention!r}")
    for name, value in arch.numeric().items():
        if value.ndim:
            raise ValueError(f"{name} must be a scalar for the causal theory, got shape {value.shape}")
    depth = check_depth(depth)
    seq_len = check_seq_len(seq_len, allow_none=False)
    if arch.seq_len is not None and arch.seq_len != seq_len:
        raise ValueError(f"seq_len must equal arch.seq_len when the architecture sets it, got seq_len={seq_len}, "
                         f"arch.seq_len={arch.seq_len}")
    positions = check_positions(positions, seq_len)
    beta = as_float_array("beta", beta, positive=True)
    if beta.ndim:
        raise ValueError(f"beta must be a scalar for the causal theory, got shape {beta.shape}")
    q0 = as_float_array("q0", q0, positive=True)
    rho0 = as_float_array("rho0", rho0, low=-1.0, high=1.0)
    pattern, blocks = check_windows(window, seq_len=seq_len), {}

    def block_of(w):  # each head is the single-head REM at the heads' effective beta (one rule: Architecture)
        if w not in blocks:
            keys = window_keys(positions, w)
            blocks[w] = _causal_block(arch, np.asarray(arch.effective_beta(beta), dtype=np.float64),
                                      keys.astype(np.float64), causal_participation_table(seq_len, np.maximum(keys, 2)),
                                      row_rope_correlation(arch, seq_len, np.maximum(keys, 2)), beta)
        return blocks[w]
    q, p = np.empty((2, positions.size, depth + 1))
    q[:, 0], p[:, 0] = q0, q0 * rho0
    cur_q, cur_p = q[:, 0].copy(), p[:, 0].copy()
    with np.errstate(divide="ignore", invalid="ignore"):
        for layer in range(depth):
            cur_q, cur_p = block_of(layer_window(pattern, layer)).apply(cur_q, cur_p)
            q[:, layer + 1] = cur_q
            p[:, layer + 1] = cur_p
    return CausalTrajectory(positions, q, p)


def last_tokens_cosine(arch: Architecture, beta, depth, seq_len, last=None, q0=1.0, rho0=0.0, window=None):
    r"""Predicted average cosine of the last ``last`` tokens of a causal stack, per layer.

    ``(1/k) sum_{t = T-k+1}^{T} rho_t`` with ``rho_t`` from :func:`propagate_causal`; ``last``
    defaults to :func:`compared_last_tokens` (``min(LAST_TOKENS, T - 1)``); ``window`` as there.

    Returns
    -------
    ndarray, shape (depth + 1,)

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 12.
    """
    seq_len = check_seq_len(seq_len, allow_none=False)
    last = compared_last_tokens(seq_len) if last is None else last
    if isinstance(last, bool) or not isinstance(last, (int, np.integer)) or not 1 <= last <= seq_len - 1:
        raise ValueError(f"last must be an integer in [1, seq_len - 1], got {last!r}")
    traj = propagate_causal(arch, beta, depth, seq_len, np.arange(seq_len - last + 1, seq_len + 1), q0, rho0, window)
    return traj.rho.mean(axis=0)


@dataclass(frozen=True)
class CausalGramTrajectory:
    """Order parameters of the last tokens of a causal stack, from its whole Gram matrix.

    Attributes
    ----------
    q, p : ndarray, shape (depth + 1,)
        Mean squared norm and mean pair overlap of the last ``settings["last"]`` tokens per
        layer (column 0 the input).
    cosine : ndarray, shape (depth + 1,)
        Mean pair cosine ``G_ij / sqrt(G_ii G_jj)`` of the same tokens.
    gram : ndarray, shape (T, T)
        The Gram matrix of the sequence after the last block (the replicas' mean).
    settings : dict
    cosine_se : ndarray, shape (depth + 1,), or None
        The Monte Carlo standard error of ``cosine``: the spread of ``replicas`` independent chains over
        ``sqrt(replicas)`` (None for one chain).
    """

    q: np.ndarray
    p: np.ndarray
    cosine: np.ndarray
    gram: np.ndarray
    settings: dict
    cosine_se: np.ndarray = None

    @property
    def rho(self):
        """``p / q`` of the last tokens per layer."""
        return self.p / self.q

    @property
    def depth(self):
        return self.q.size - 1


#: Trapezoid nodes per side of :func:`pair_moment` (65 on [-8, 8], step 1/4; error 3e-9 for SiLU at variance 16).
PAIR_HALF_NODES = _causal_gram.PAIR_HALF_NODES


def pair_moment(activation, var_a, var_b, cov):
    r"""``E[phi(u) phi(v)]`` of a centred Gaussian pair of unequal variances.

    .. math:: E[\phi(u)\phi(v)] = \sum_{k,l} w_k w_l\,\phi(\sqrt a\,z_k)\,
              \phi\big(\sqrt b\,(r z_k + \sqrt{1 - r^2}\,z_l)\big),\qquad r = \frac{c}{\sqrt{ab}}

    (``Var u = a``, ``Var v = b``, ``Cov = c``) with the trapezoid rule of
    :func:`~remprop.theory.quadrature.gaussian_trapezoid` (:data:`PAIR_HALF_NODES` per side). With
    ``a = b`` it is the activation's own ``m11`` (:func:`~remprop.theory.activation_moments`).
    Used by the causal Gram state for an MLP whose input tokens have unequal norms
    (docs/theory.md section 8).

    Parameters
    ----------
    activation : str
        A registered activation.
    var_a, var_b : array_like
        Variances, > 0; broadcast with ``cov``.
    cov : array_like
        Covariance, ``|cov| <= sqrt(var_a var_b)`` (clipped there: rounding).

    References
    ----------
    Trefethen & Weideman, SIAM Review 56, 385 (2014); docs/theory.md section 8.
    """
    return _causal_gram.pair_moment(activation, var_a, var_b, cov)


#: Largest T of :func:`propagate_causal_gram` (its fast method's ``27 T^2`` bytes,
#: :func:`~remprop.theory.work_estimates.causal_gram_bytes`: 1.7 GiB at T = 8192).
MAX_GRAM_SEQ_LEN = 8192


#: Most work (:func:`causal_gram_flops`, fast method) for which ``choose_causal_theory(..., "auto")`` takes
#: the Gram state: about two minutes on two cores (3.8e12, Llama 3.2 1B's whole verdict at T = 2048 and its
#: width, 144 layers: 95 s at load 1; 1.6e12, SmolLM2's 60 layers, 57 s at load 3); every shipped decoder's
#: headline at T 2048 (Gemma 2 2B's 3.7e12 the largest).
AUTO_GRAM_FLOPS = 4e12

#: The causal theories a measurement can be compared with.
CAUSAL_THEORIES = ("auto", "maps", "gram")

#: The methods of :func:`propagate_causal_gram`: the fast one (the default) and the exact reference.
CAUSAL_GRAM_METHODS = _gram.GRAM_METHODS


def causal_gram_flops(arch: Architecture, depth, seq_len, draws=4, method="fast", width=None) -> float:
    r"""Floating-point operations of :func:`propagate_causal_gram`, counted before it runs.

    ``"fast"`` (docs/theory.md section 8.1), per layer: the Cholesky factor of the score kernel
    ``T^3 / 3`` (twice with QK-norm: the values' ``G`` too), per draw the factor draws
    ``T^2 (2 m + n)``, the causal half of the scores ``T^2 m`` and of ``A [W, X]`` ``T^2 (r + n)``, and
    the output ``T^2 (r + n)`` (``m`` score columns, ``n`` value columns, ``r`` Nystrom blocks).
    ``"exact"``: the eigendecomposition ``10 T^3``, per draw the scores ``4 T^3`` (``L Z L``; with RoPE
    ``8 T^3`` per rotating frequency, ``theta_f (T - 1) >= 0.05``, plus ``4 T^3`` for the slow ones)
    and ``E[A G A^T]`` ``4 T^3``. With ``norm="none"`` and an activation that is not positively
    homogeneous the MLP's pair moments: ``"exact"`` the quadrature of :func:`pair_moment` over the
    ``T (T + 1) / 2`` pairs (``N`` nodes per axis, about 30 operations a node), ``15 T (T + 1) N^2``;
    ``"fast"`` its table (:func:`~remprop.theory.activations.pair_moments.pair_moments_table`:
    ``30 K^2 R N^2 + 6 K^2 T^2`` at ``K = 6``). The other ``O(T^2)`` pair maps are left out. At a finite
    ``width`` (fast, docs/theory.md section 8.2) ``m = d_H`` and the values gain ``2 d_H`` columns.

    Parameters
    ----------
    arch : Architecture
    depth, seq_len, draws : int
    method : {"fast", "exact"}
    width : int, optional
        As :func:`propagate_causal_gram`.

    Returns
    -------
    float
    """
    if not isinstance(arch, Architecture):
        raise ValueError(f"arch must be a remprop.theory.Architecture, got {type(arch).__name__}")
    depth = check_depth(depth)
    seq_len = check_seq_len(seq_len, allow_none=False)
    draws = check_count("draws", draws, 1)
    _gram.check_gram_method(method)
    head_dim = (_causal_gram.finite_width(arch, width, method) or (None, None))[1]
    frequencies = scale.head_frequencies(arch) if arch.positions.rotary else None
    quadrature = 0.0
    if not arch.norm.has_norm and not activation_spec(arch.activation).homogeneous:
        quadrature = 15.0 * seq_len * (seq_len + 1.0) * (2 * PAIR_HALF_NODES + 1) ** 2
    if method == "fast":
        return depth * (_fast.draw_work(seq_len, draws, frequencies, bool(arch.qk_norm), head_dim)
                        + (_fast.table_work(seq_len, PAIR_HALF_NODES) if quadrature else 0.0))
    cube, slow = float(seq_len) ** 3, _CausalGramWalker.SLOW
    rotating = 0 if frequencies is None else int(np.count_nonzero(frequencies * (seq_len - 1) >= slow))
    return depth * (10.0 * cube + draws * cube * (8.0 + 8.0 * rotating) + quadrature)


def choose_causal_theory(arch: Architecture, depth, seq_len, *, draws=4, choice="auto", budget=AUTO_GRAM_FLOPS,
                         width=None):
    """Which causal theory a measurement of the last tokens is compared with, and why.

    ``"maps"``: the per-position maps (:func:`last_tokens_cosine`); ``"gram"``: the causal Gram
    state (:func:`propagate_causal_gram`), which gives each late row its true keys (docs/theory.md
    section 8). ``"auto"`` takes the Gram state when :func:`causal_gram_support_problem` has no
    objection, ``3 <= seq_len <=`` :data:`MAX_GRAM_SEQ_LEN` and :func:`causal_gram_flops` is at most
    ``budget`` (default :data:`AUTO_GRAM_FLOPS`); the maps otherwise. An explicit ``"gram"`` that cannot run is a
    ValueError naming ``causal_theory`` and the reason (an explicit ``"gram"`` over the
    work bound runs: the bound only steers ``"auto"``).

    Parameters
    ----------
    arch : Architecture
    depth, seq_len : int
    draws : int
        Monte Carlo draws per attention layer of the Gram state.
    choice : {"auto", "maps", "gram"}
    budget : float
        Most floating-point work ``"auto"`` spends on the Gram state.
    width : int, optional
        The stream width the Gram state runs at (:func:`gram_width`; its work, :func:`causal_gram_flops`).

    Returns
    -------
    (str, str)
        ``"maps"`` or ``"gram"``, and a one-line reason.
    """
    if not isinstance(arch, Architecture):
        raise ValueError(f"arch must be a remprop.theory.Architecture, got {type(arch).__name__}")
    if choice not in CAUSAL_THEORIES:
        raise ValueError(f"causal_theory must be one of {', '.join(CAUSAL_THEORIES)}, got {choice!r}")
    depth = check_depth(depth)
    seq_len = check_seq_len(seq_len, allow_none=False)
    draws = check_count("draws", draws, 1)
    if choice == "maps":
        return "maps", "asked for"
    problem = causal_gram_support_problem(arch)
    if problem is None and not 3 <= seq_len <= MAX_GRAM_SEQ_LEN:
        problem = f"seq_len must be in [3, {MAX_GRAM_SEQ_LEN}] for the causal Gram state, got {seq_len}"
    if problem is not None:
        if choice == "gram":
            raise ValueError(f"causal_theory='gram' cannot run this model: {problem}")
        return "maps", f"the causal Gram state cannot run it ({problem})"
    if choice == "gram":
        return "gram", "asked for"
    flops = causal_gram_flops(arch, depth, seq_len, draws, width=width)
    if flops > budget:
        return "maps", (f"the causal Gram state (fast method) would take {flops:.2g} floating-point operations "
                        f"(auto takes it up to {budget:.0e}; causal_theory='gram' runs it)")
    return "gram", f"fast method, {flops:.2g} floating-point operations (auto takes it up to {budget:.0e})"


def causal_gram_support_problem(arch: Architecture):
    """Why :func:`propagate_causal_gram` cannot run ``arch``, or None when it can.

    :func:`~remprop.theory.gram_state.gram_support_problem` (softmax attention, scalar fields;
    ``norm="none"`` only with a positively homogeneous activation), extended by the causal walker:
    rotary positions (drawn exactly), QK-norm, logit soft-capping, parallel blocks, and
    ``norm="none"`` with any activation (an MLP whose input tokens have unequal norms takes the
    two-dimensional quadrature of :func:`pair_moment`; docs/theory.md sections 8 and 19).

    Returns
    -------
    str or None
        A message naming the field.
    """
    if not isinstance(arch, Architecture):
        return f"arch must be a remprop.theory.Architecture, got {type(arch).__name__}"
    probe = arch.replace(positions="absolute", qk_norm=False, logit_softcap=None)
    if not arch.norm.has_norm:
        probe = probe.replace(activation="relu")   # an MLP at unequal norms: pair_moment's quadrature
    return _gram.gram_support_problem(probe)


def gram_width(arch, width):
    """The ``width`` of :func:`propagate_causal_gram` for a model of stream width ``width``: itself where a head's
    query and key directions are two of its d (``2 d_H <= d``, ``d_H = arch.head_dim`` or ``width / heads``;
    docs/theory.md section 8.2), else None (one head spanning the stream: the infinite-width law)."""
    width = check_count("width", width, 1)
    head_dim = _causal_gram.head_width(arch, width)
    return width if head_dim is not None and width >= 2 * head_dim else None


def propagate_causal_gram(arch: Architecture, beta, depth, seq_len, q0=1.0, rho0=0.0, *, last=None,
                          draws=4, seed=0, norm_eps=0.0, window=None, method="fast",
                          replicas=1, width=None) -> CausalGramTrajectory:
    r"""Causal stack on the Gram matrix of the whole sequence: the late tokens with their true keys.

    The per-position maps of :func:`propagate_causal` give row t keys in the state of row t
    itself. In a causal stack they are not: token s has seen s keys, so after one block the early
    tokens carry large, strongly correlated attention outputs (token 1 its own value, token 2 the
    mean of two, ...), and a late row averages the values of ALL its keys, whose mean pair overlap
    exceeds the late tokens' own (docs/theory.md section 8). Here the whole ``T x T`` Gram matrix
    ``G`` is carried through :meth:`Architecture.block <remprop.theory.Architecture.block>` as in
    docs/theory.md section 17 (norms, dense layers, skips and MLPs pair by pair, exact), with the
    causal attention

    .. math:: G_A = \sigma_v^2\, E\big[A G A^T\big] + \sigma_b^2,\qquad
              A = \mathrm{softmax}_{\rm rows}\big(S + \mathrm{mask}\big),

    the scores ``S`` Gaussian with ``Cov(S_ij, S_kl) = c^2 G_ik G_jl c((j - i) - (l - k))``,
    ``c = beta_eff sqrt(log T)`` and ``c(k)`` the rotary correlation of section 15
    (:func:`~remprop.theory.rem.rope.rope_correlation`; 1 without RoPE): ``S = c L Z L`` with
    ``L = G^{1/2}`` and ``Z`` i.i.d. N(0, 1) without RoPE, one complex draw per rotary frequency
    with it (each query and key rotated by its own position). With QK-norm (OLMo 2, docs/theory.md
    section 16) the queries and keys are normalised before the rotation, so the scores have
    ``Cov(S_ij, S_kl) = c^2 K_ik K_jl c((j - i) - (l - k))`` with ``K = kappa_n(C)`` elementwise
    (``C`` the cosine matrix of the attention input,
    :func:`~remprop.theory.rem.qk_norm.gaussian_cosine_mean`, ``kappa_n(1) = 1``) and ``c = beta g^2``:
    the score of two normalised vectors does not depend on the tokens' norms. With
    ``logit_softcap`` each drawn score is capped, ``cap tanh(s / cap)`` (exact: no tolerance as in
    the uncapped maps). The expectation is a plain Monte Carlo average of ``draws`` draws. The input is
    Gaussian tokens, ``G = q0 ((1 - rho0) I + rho0 1 1^T)``. Reported: ``q``, ``p`` of the last
    ``last`` tokens per layer.

    Parameters
    ----------
    arch : Architecture
        As :func:`~remprop.theory.gram_state.propagate_gram` (softmax attention, scalar fields),
        plus ``positions="rope"``, ``qk_norm``, ``logit_softcap``, ``block_form="parallel"`` and
        ``norm="none"`` with ``branch_norm`` (:func:`causal_gram_support_problem`). The last
        block's output is reported, before any ``final_norm`` (as the probe of a real model
        reads it). ``arch.seq_len`` None or ``seq_len``.
    beta : float
        Query/key scale, > 0.
    depth : int
    seq_len : int
        T, 3 .. :data:`MAX_GRAM_SEQ_LEN`.
    q0, rho0 : float
        Input state of every token.
    last : int, optional
        Last tokens averaged, 2 .. T (default :func:`compared_last_tokens`, ``min(LAST_TOKENS, T - 1)``:
        the tokens the diagnosis and the measurement average).
    draws : int
        Monte Carlo draws per attention layer (default 4; at small beta a few suffice).
    seed : int
    norm_eps : float
        The epsilon of every LayerNorm / RMSNorm of the blocks (QK-norm excepted), >= 0 (default
        0: the theory's norms): ``G_ij / sqrt((G_ii + eps)(G_jj + eps))``, exact as the width grows
        (each token's mean square concentrates at ``G_ii``). It matters where a normalised
        signal is as small as eps: OLMo 2's branch norms after its first attention, whose
        output has mean square ``~ sigma_v^2 sigma_o^2 q0 / t`` (``1e-6``-``1e-7`` at init).
    window : None, int, AttentionMask or sequence, optional
        Attention masks (:func:`~remprop.theory.attention_masks.check_windows`, per layer; sizes at most
        ``seq_len``): row t of a sliding-window layer sees keys ``t - w + 1 .. t``, of a chunked one its
        chunk's keys up to t, with a prefix the first P rows see each other
        (:func:`~remprop.theory.attention_masks.causal_window_mask`).
    method : {"fast", "exact"}
        ``"fast"`` (default): the scores as products of factor draws and the values projected onto
        the part of ``G`` off its Nystrom part (docs/theory.md section 8.1; ``O(T^2)`` per draw, one
        Cholesky factor ``T^3 / 3`` per layer). ``"exact"``: the Gaussian scores ``c L Z L`` and
        ``E[A G A^T]`` by matrix products (the reference; ``O(T^3)`` per draw).
    replicas : int
        Independent chains (seeds spawned from ``seed``), averaged; with 2 or more the result holds
        the standard error ``cosine_se`` (default 1: one chain of the seed ``seed``).
    width : int, optional
        The stream's width ``d`` (fast method): the values are the tokens whose queries and keys made
        the scores, an ``O(T / d)`` effect on late rows (docs/theory.md section 8.2). None: infinite width.

    Returns
    -------
    CausalGramTrajectory

    Notes
    -----
    Work :func:`causal_gram_flops`. ``"exact"``: ``O(draws T^3)`` per layer, times the number of
    rotary frequencies that turn by more than 0.05 over the sequence with RoPE (up to ``d_H / 2``).

    References
    ----------
    docs/theory.md sections 8, 15 and 17; Giorlandino & Goldt, arXiv 2505.24333 (Fig. 12).
    """
    if not isinstance(arch, Architecture):
        raise ValueError(f"arch must be a remprop.theory.Architecture, got {type(arch).__name__}")
    problem = causal_gram_support_problem(arch)
    if problem is not None:
        raise ValueError(problem)
    depth = check_depth(depth)
    seq_len = check_seq_len(seq_len, allow_none=False)
    if not 3 <= seq_len <= MAX_GRAM_SEQ_LEN:
        raise ValueError(f"seq_len must be in [3, {MAX_GRAM_SEQ_LEN}] for the causal Gram state, got {seq_len}")
    if arch.seq_len is not None and arch.seq_len != seq_len:
        raise ValueError(f"seq_len must equal arch.seq_len when the architecture sets it, got seq_len={seq_len}, "
                         f"arch.seq_len={arch.seq_len}")
    last = compared_last_tokens(seq_len) if last is None else last
    if isinstance(last, bool) or not isinstance(last, (int, np.integer)) or not 2 <= last <= seq_len:
        raise ValueError(f"last must be an integer in [2, seq_len], got {last!r}")
    beta = as_float_array("beta", beta, positive=True)
    if beta.ndim:
        raise ValueError(f"beta must be a scalar for the causal theory, got shape {beta.shape}")
    q0 = float(as_float_array("q0", q0, positive=True))
    rho0 = float(as_float_array("rho0", rho0, low=-1.0 / (seq_len - 1), high=1.0))
    draws = check_count("draws", draws, 1)
    seed = check_count("seed", seed, 0)
    norm_eps = float(as_float_array("norm_eps", norm_eps, nonnegative=True))
    pattern = check_windows(window, seq_len=seq_len)
    _gram.check_gram_method(method)
    replicas = check_count("replicas", replicas, 1)
    width = _causal_gram.finite_width(arch, width, method)
    arch = arch.replace(seq_len=seq_len)
    frequencies = scale.head_frequencies(arch) if arch.positions.rotary else None
    # the cap is applied to the drawn scores (exact), so the uncapped maps' tolerance check does not apply
    block = arch.replace(logit_softcap=None).block(float(beta))

    def initial():   # G = q0 ((1 - rho0) I + rho0 1 1^T), one T x T array
        g0 = np.full((seq_len, seq_len), q0 * rho0)
        np.fill_diagonal(g0, q0)
        return g0
    walkers = [_CausalGramWalker(draws, np.random.default_rng(child), arch.activation, frequencies, arch.logit_softcap,
                                 norm_eps, fast=method == "fast", width=width)
               for child in (np.random.SeedSequence(seed).spawn(replicas) if replicas > 1 else [seed])]
    (qs, ps, cosines), g = _causal_gram.walk_chains(walkers, block, initial, depth, pattern, last)
    settings = {"arch": arch.to_dict(), "beta": float(beta), "depth": depth, "seq_len": seq_len, "q0": q0,
                "rho0": rho0, "last": last, "draws": draws, "seed": seed, "norm_eps": norm_eps, "window": pattern,
                "method": method, "replicas": replicas, "width": None if width is None else width[0]}
    se = cosines.std(axis=0, ddof=1) / np.sqrt(replicas) if replicas > 1 else None
    return CausalGramTrajectory(qs.mean(axis=0), ps.mean(axis=0), cosines.mean(axis=0), g, settings, se)
