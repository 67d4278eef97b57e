r"""The structured theory state of one real sequence: its T x T Gram matrix.

The maps of :func:`~remprop.theory.propagate` carry one mean overlap ``p``: they assume the
tokens form a regular simplex (all pairwise overlaps equal, docs/theory.md section 1).
Real text is not a simplex (repeated words share their embedding). This module carries
the whole Gram matrix ``G_ij = x_i . x_j / d`` of one sequence through the block tree
:meth:`Architecture.block <remprop.theory.Architecture.block>` (docs/theory.md section 17):

* skip, dense layers, output projection, the norms (LayerNorm / RMSNorm / DyT) and the MLPs
  act pair by pair on ``(G_ii, G_jj, G_ij)`` and are exact; they call the components' own
  ``*_core`` maps (LayerNorm: ``G_ij / sqrt(G_ii G_jj)``), the norms from their own modules;
* softmax attention at finite T: the scores are a Gaussian field with
  ``Cov(S_ij, S_kl) = beta_eff^2 log T G_ik G_jl`` (docs/theory.md sections 2, 3.1, 3.6)
  and the output Gram is ``sigma_v2 E[A G A^T] + sigma_b2``; it is evaluated as the
  closed form on the simplex projection ``G_s`` of ``G`` plus a Monte Carlo estimate of
  ``E[A G A^T] - E[A_s G_s A_s^T]`` with both attention matrices drawn from the same
  Gaussian matrix (a control variate): identically zero for a simplex, so the Gram
  state then reproduces the mean-cosine maps to rounding;
* ``sampled=True``: chains of one initialisation each, one score field per head and
  attention layer (docs/theory.md section 17.1).

Reference: docs/theory.md section 17; Giorlandino & Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from .activations import activation_spec, moments_array
from .architecture import Architecture
from .checks import ParameterError, check_count, check_depth, check_real_scalar
from ._gram_matrix import (_cosine_matrix, _mean_cosine, _shift_variance, _simplex_distance, _simplex_pair,
                           _softmax_rows, _symmetric_sqrt, _gram_factor)
from ._fast_gram_attention import fast_attention_gram
from .components import Component
from .components.residual import skip_core

__all__ = ["GramTrajectory", "propagate_gram", "simplex_distance", "check_gram", "mean_pair_cosine",
           "gram_support_problem", "pair_cosines", "structured_attention_gram", "GRAM_METHODS", "check_gram_method"]

#: The methods of the Gram states (:func:`propagate_gram`, the causal one): the fast one and the exact reference.
GRAM_METHODS = ("fast", "exact")


def check_gram_method(method) -> str:
    """``method`` if it is one of :data:`GRAM_METHODS`, else a ParameterError naming ``method``."""
    if method not in GRAM_METHODS:
        raise ParameterError("method", f"method must be one of {', '.join(GRAM_METHODS)}, got {method!r}")
    return method

#: Relative tolerance of the symmetry and positive-semidefiniteness checks of a Gram matrix
#: (a float32 simulation's x x^T / d carries relative rounding of about 1e-7 per entry).
GRAM_RTOL = 1e-5


def check_gram(gram, name="gram") -> np.ndarray:
    """A checked Gram matrix: float64 (T, T), T >= 2, finite, symmetric, PSD, diagonal > 0.

    Symmetry and positive semidefiniteness are required within rounding: ``|G - G^T| <=
    GRAM_RTOL max|G|`` and the smallest eigenvalue ``>= -GRAM_RTOL`` times the largest.
    Returns the symmetrised matrix ``(G + G^T) / 2``; errors name ``name``.
    """
    if gram is None or isinstance(gram, (str, bytes)):
        raise ValueError(f"{name} must be a (T, T) array of real numbers, got {gram!r}")
    try:
        g = np.array(gram, dtype=np.float64)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a (T, T) array of real numbers, got {type(gram).__name__}") from None
    if g.ndim != 2 or g.shape[0] != g.shape[1] or g.shape[0] < 2:
        raise ValueError(f"{name} must be a square (T, T) matrix with T >= 2, got shape {g.shape}")
    if not np.isfinite(g).all():
        raise ValueError(f"{name} must be finite (it has NaN or infinite entries)")
    scale = float(np.abs(g).max())
    asym = float(np.abs(g - g.T).max())
    if asym > GRAM_RTOL * scale:
        raise ValueError(f"{name} must be symmetric, got max |G - G^T| = {asym:.3g} (max |G| = {scale:.3g})")
    g = 0.5 * (g + g.T)
    diag = np.diag(g)
    if (diag <= 0).any():
        raise ValueError(f"{name} must have a positive diagonal (token norms), got min {diag.min():.3g}")
    eig = np.linalg.eigvalsh(g)
    if eig[0] < -GRAM_RTOL * eig[-1]:
        raise ValueError(f"{name} must be positive semidefinite, got smallest eigenvalue {eig[0]:.3g} "
                         f"(largest {eig[-1]:.3g})")
    return g


def pair_cosines(gram) -> np.ndarray:
    r"""The cosines of the token pairs ``i < j``: :math:`G_{ij}/\sqrt{G_{ii}G_{jj}}`, shape (T (T-1)/2,).

    Row-major upper triangle (``numpy.triu_indices(T, 1)``). docs/theory.md section 17.
    """
    g = check_gram(gram)
    return _cosine_matrix(g)[np.triu_indices(g.shape[0], 1)]


def mean_pair_cosine(gram) -> float:
    r"""Mean over pairs ``i < j`` of :math:`G_{ij}/\sqrt{G_{ii}G_{jj}}`: the measured observable "cosine".

    The same statistic as :func:`remprop.validation.measurements.token_statistics`'
    ``cosine``. docs/theory.md section 17.
    """
    return _mean_cosine(check_gram(gram))


def simplex_distance(gram) -> float:
    r"""How far a sequence is from a simplex: the spread of its token-pair cosines.

    .. math::
        D = \Big(\frac{2}{T(T-1)}\sum_{i<j}(c_{ij} - \bar c)^2\Big)^{1/2},\qquad
        c_{ij} = \frac{G_{ij}}{\sqrt{G_{ii}G_{jj}}}

    the root-mean-square deviation of the pair cosines from their mean ``cbar``, in units
    of cosine: 0 for a regular simplex (every pair at the same cosine, what the
    mean-cosine maps assume), about ``1/sqrt(d)`` for independent Gaussian tokens of width
    ``d`` (finite-width scatter), larger where groups of tokens repeat (embedded text:
    same-word pairs near 0.5, the others near 0). docs/theory.md section 17.

    Parameters
    ----------
    gram : array_like, shape (T, T)
        Gram matrix ``x x^T / d`` (checked by :func:`check_gram`).

    Returns
    -------
    float

    Examples
    --------
    >>> import numpy as np
    >>> from remprop.theory.gram_state import simplex_distance
    >>> simplex_distance(0.7 * np.eye(4) + 0.3)
    0.0
    """
    return _simplex_distance(check_gram(gram))


def _is_gram(g):
    """Positive diagonal and no eigenvalue below ``-GRAM_RTOL`` times the largest."""
    if not np.isfinite(g).all() or (np.diag(g) <= 0).any():
        return False
    eig = np.linalg.eigvalsh(g)
    return bool(eig[0] >= -GRAM_RTOL * eig[-1])


def structured_attention_gram(gram, beta_eff, draws=8, rng=None, *, full=False):
    r"""Monte Carlo of the structure's correction ``E[A G A^T] - E[A_s G_s A_s^T]`` of softmax attention.

    Scores ``S = c L Z L`` with ``Z`` a (T, T) matrix of i.i.d. N(0, 1), ``L = G^{1/2}``
    (symmetric square root) and ``c = beta_eff sqrt(log T)``, so that
    ``Cov(S_ij, S_kl) = beta_eff^2 log T G_ik G_jl`` (docs/theory.md sections 2, 3.1,
    17); ``A = softmax`` of each row. ``S_s`` is the same with the simplex projection
    ``G_s = (q - p) I + p 1 1^T`` (``q`` the mean diagonal, ``p`` the mean off-diagonal of
    ``G``), ``L_s = a I + (b - a) 1 1^T / T``, ``a = sqrt(q - p)``,
    ``b = sqrt(q - p + T p)``, from the SAME ``Z``, and
    ``A_s G_s A_s^T = (q - p) A_s A_s^T + p 1 1^T`` (rows sum to 1).

    Parameters
    ----------
    gram : ndarray, shape (T, T)
        A checked Gram matrix (:func:`check_gram`) of what the attention sees.
    beta_eff : float
        Each head's beta (:meth:`remprop.theory.Architecture.effective_beta`).
    draws : int
        Gaussian draws ``Z``.
    rng : numpy.random.Generator, optional
        Default ``numpy.random.default_rng(0)``.
    full : bool
        Also return the plain Monte Carlo samples ``A G A^T`` of the same draws.

    Returns
    -------
    (mean, samples) : (ndarray (T, T), ndarray (draws, T, T))
        The mean correction over the draws (symmetrised) and the per-draw corrections,
        identically zero for a simplex (``G == G_s``); ``full=True`` adds the per-draw
        ``A G A^T`` (draws, T, T) (None for a simplex: not drawn).

    References
    ----------
    docs/theory.md section 17 (control variate), section 3.4 (the simplex closed form).
    """
    g = np.asarray(gram, dtype=np.float64)
    t = g.shape[0]
    rng = np.random.default_rng(0) if rng is None else rng
    draws = check_count("draws", draws, 1)
    beta_eff = check_real_scalar("beta_eff", beta_eff)
    if beta_eff <= 0:
        raise ValueError(f"beta_eff must be > 0, got {beta_eff!r}")
    c = beta_eff * math.sqrt(math.log(t))
    q_s, p_s = _simplex_pair(g)
    simplex = np.array_equal(g, (q_s - p_s) * np.eye(t) + p_s) if np.ptp(np.diag(g)) == 0 else False
    samples = np.zeros((draws, t, t))
    plain = np.empty((draws, t, t)) if full else None
    if simplex:
        # G == G_s: the two attention matrices coincide for every draw, the correction is 0
        return (samples[0].copy(), samples, None) if full else (samples[0].copy(), samples)
    root = _symmetric_sqrt(g)
    a = math.sqrt(max(q_s - p_s, 0.0))
    b = math.sqrt(max(q_s - p_s + t * p_s, 0.0))
    for k in range(draws):
        z = rng.standard_normal((t, t))
        attn = _softmax_rows(c * (root @ z @ root))
        # L_s Z L_s up to per-row constants (they cancel in the softmax):
        # a^2 Z + a (b - a) (column means of Z)
        attn_s = _softmax_rows(c * (a * a * z + a * (b - a) * z.mean(axis=0, keepdims=True)))
        sample = (attn @ g) @ attn.T
        samples[k] = sample - ((q_s - p_s) * (attn_s @ attn_s.T) + p_s)
        if full:
            plain[k] = sample
    mean = samples.mean(axis=0)
    mean = 0.5 * (mean + mean.T)
    return (mean, samples, plain) if full else (mean, samples)


@dataclass(frozen=True)
class GramTrajectory:
    """The Gram-matrix state of one sequence, layer by layer (:func:`propagate_gram`).

    Attributes
    ----------
    mean_cosine : ndarray, shape (depth + 1,)
        Mean over pairs ``i < j`` of ``G_ij / sqrt(G_ii G_jj)`` (the measured "cosine").
    mean_cosine_se : ndarray, shape (depth + 1,)
        Monte Carlo standard error of ``mean_cosine`` (0 at the input; the root sum of
        squares of each attention layer's own standard error, docs/theory.md section 17;
        sampled chains: their spread over ``sqrt(draws)``).
    q : ndarray, shape (depth + 1,)
        Mean diagonal ``(1/T) sum_i G_ii``.
    rho : ndarray, shape (depth + 1,)
        Mean off-diagonal over mean diagonal, ``p / q``.
    grams : dict of int -> ndarray (T, T)
        The Gram matrix at the kept layers.
    settings : dict
        ``beta``, ``depth``, ``seq_len``, ``draws``, ``seed``, ``simplex_distance`` (of the input),
        ``plain_monte_carlo_layers`` (attention layers where the plain Monte Carlo mean
        replaced the control variate, docs/theory.md section 17), ``sampled`` (True: the
        averages over sampled chains of :func:`propagate_gram`, section 17.1) and the
        architecture (``arch``, as ``Architecture.to_dict``).
    """

    mean_cosine: np.ndarray
    mean_cosine_se: np.ndarray
    q: np.ndarray
    rho: np.ndarray
    grams: dict
    settings: dict = field(default_factory=dict)

    @property
    def depth(self) -> int:
        return len(self.q) - 1

    @property
    def p(self) -> np.ndarray:
        """Mean off-diagonal overlap ``rho q``."""
        return self.rho * self.q

    def cosines(self, layer: int) -> np.ndarray:
        """The pair cosines ``i < j`` at a kept layer (:func:`pair_cosines` order)."""
        if layer not in self.grams:
            raise ValueError(f"layer must be one of the kept layers {sorted(self.grams)}, got {layer!r}")
        g = self.grams[layer]
        return _cosine_matrix(g)[np.triu_indices(g.shape[0], 1)]


class _GramWalker:
    """Walks a block tree (:mod:`remprop.theory.components`) on a Gram matrix.

    Elementwise components call their own cores pair by pair; the norms (LayerNorm, RMSNorm, DyT)
    hold their Gram maps in their own modules and read only :attr:`norm_eps` here; softmax
    attention is :meth:`attention`. The per-draw deviations of the last attention layer are
    carried (scaled by linear maps) to the enclosing residual, which records the Monte Carlo
    variance of the mean cosine there.
    """

    #: The epsilon of a norm ``x / sqrt(|x|^2 / d + eps)`` that a norm's Gram face adds to each token's
    #: mean square (0: the norms' own maps; the causal Gram state sets a model's).
    norm_eps = 0.0

    def __init__(self, draws, rng, activation):
        self.draws, self.rng = draws, rng
        self.homogeneous = activation_spec(activation).homogeneous
        self.deviations = None
        self.variances = []
        #: Attention layers that used the plain Monte Carlo mean instead of the control variate.
        self.plain_layers = 0

    def block_step(self, block: Component, g, layer, what="Gram state"):
        """Block ``layer + 1`` on ``g``: the walk, symmetrised; a ValueError naming ``what`` if it
        leaves float64."""
        with np.errstate(divide="ignore", invalid="ignore"):
            g = self.apply(block, g)
        g = 0.5 * (g + g.T)
        if not np.isfinite(g).all():
            raise ValueError(f"the {what} is not finite after block {layer + 1} (beta or the variances "
                             "too large for float64)")
        return g

    def apply(self, comp: Component, g):
        """``comp`` on the Gram matrix ``g``: the component's Gram face (``comp.gram``) calls back
        this walker's method for its kind (:meth:`serial`, :meth:`residual`, :meth:`dense`,
        :meth:`mlp`, :meth:`attention`, :meth:`parallel`) or computes its map itself (the norms)."""
        return comp.gram(self, g)

    def serial(self, comp, g):
        for layer in comp.layers:
            g = self.apply(layer, g)
        return g

    def residual(self, comp, g):
        self.deviations = None
        branch = self.apply(comp.branch, g)
        out = _skip(comp, branch, g)
        if self.deviations is not None:
            self.variances.append(_shift_variance(out, self.deviations) / len(self.deviations))
            self.deviations = None
        return out

    def parallel(self, comp, g):
        raise ValueError(f"the Gram state has no map for the component {comp.name!r}")

    def dense(self, comp, g):
        q_out, g_out = comp.apply(g, g)
        if self.deviations is not None:
            self.deviations = [comp.sigma_w2 * dev for dev in self.deviations]
        return g_out

    def mlp(self, comp, g):
        diag = np.diag(g)
        if np.ptp(diag) == 0:
            q_out, g_out = comp.apply(np.full_like(g, diag[0]), g)
        elif self.homogeneous:
            # unequal norms: phi(c x) = c phi(x) makes the moments of a pair those at the
            # geometric mean of the two pre-activation variances (exact)
            code = activation_spec(comp.activation).code
            rows = np.broadcast_to(diag[:, None], g.shape)

            def moments(q1, p1):
                geometric = np.sqrt(q1 * q1.T)
                # |p1| <= geometric mean by Cauchy-Schwarz; clip its rounding
                return moments_array(code, geometric, np.clip(p1, -geometric, geometric))

            q_out, g_out = comp._two_layers(rows, g, moments, lambda value: value)
        else:
            raise ValueError(f"activation={comp.activation!r}: the Gram state needs equal token norms at the "
                             "input of an MLP whose activation is not positively homogeneous (use "
                             "norm='post' or 'pre', or activation 'relu' or 'linear' with norm='none')")
        g_out = np.array(g_out)
        np.fill_diagonal(g_out, np.diag(q_out))
        return g_out

    def attention(self, comp, g):
        _check_attention(comp)
        beta = float(comp.beta)
        q_s, p_s = _simplex_pair(g)
        q_a, p_a = comp.apply(np.float64(q_s), np.float64(p_s))
        t = g.shape[0]
        out = np.full((t, t), float(p_a))
        np.fill_diagonal(out, float(q_a))
        mean, samples, plain = structured_attention_gram(g, beta, self.draws, self.rng, full=True)
        sigma_v2 = float(comp.sigma_v2)
        if not mean.any():
            self.deviations = None
            return out
        controlled = out + sigma_v2 * mean
        deviations = [sigma_v2 * (s - mean) for s in samples]
        # Far from a simplex or in the frozen phase (the REM is chaotic in its energies, so A
        # and A_s decorrelate) the control variate can cost variance or leave a matrix that is
        # no Gram matrix; then the plain Monte Carlo mean of the same draws (PSD by
        # construction, unbiased) is used (docs/theory.md section 17).
        plain_mean = plain.mean(axis=0)
        plain_out = sigma_v2 * 0.5 * (plain_mean + plain_mean.T) + float(comp.sigma_b2)
        plain_devs = [sigma_v2 * (s - plain_mean) for s in plain]
        if not _is_gram(controlled) or (_shift_variance(plain_out, plain_devs)
                                        < _shift_variance(controlled, deviations)):
            self.plain_layers += 1
            self.deviations = plain_devs
            return plain_out
        self.deviations = deviations
        return controlled


class _FastGramWalker(_GramWalker):
    """:class:`_GramWalker` with the fast attention (``method="fast"``, docs/theory.md section 8.1): every
    row sees every key; no control variate (the Monte Carlo error is the spread of replicas)."""

    def attention(self, comp, g):
        _check_attention(comp)
        t = g.shape[0]
        total = fast_attention_gram(g, g, float(comp.beta) * math.sqrt(math.log(t)), np.ones((t, t), dtype=bool),
                                    self.rng, self.draws)
        self.deviations = None
        return float(comp.sigma_v2) * total + float(comp.sigma_b2)


class _SampledGramWalker(_GramWalker):
    """One sampled chain: ``G_A = (sigma_v^2/H) sum_h A_h G A_h^T + sigma_b^2``, ``A_h = softmax(c L Z_h L^T)``
    with one ``Z_h`` per head and ``L L^T = G`` (the Cholesky factor; docs/theory.md section 17.1); other
    components as :class:`_GramWalker`."""

    def __init__(self, rng, activation, heads):
        super().__init__(1, rng, activation)
        self.heads = heads

    def attention(self, comp, g):
        _check_attention(comp)
        if getattr(comp, "qk_norm_dim", None) is not None:
            raise ValueError("qk_norm=True is not supported by the sampled Gram chains")
        t = g.shape[0]
        c = float(comp.beta) * math.sqrt(math.log(t))
        factor, self.deviations = _gram_factor(g), None  # no control variate: any L with L L^T = G
        attns = (_softmax_rows(c * (factor @ self.rng.standard_normal((t, t)) @ factor.T)) for _ in range(self.heads))
        out = float(comp.sigma_v2) / self.heads * sum((a @ g) @ a.T for a in attns) + float(comp.sigma_b2)
        return 0.5 * (out + out.T)


def _check_attention(comp):
    if comp.gain_controlled:
        raise ValueError(f"the Gram state has no map for the component {comp.name!r} (softmax attention only)")
    if comp.mean_rope_correlation is not None:
        raise ValueError("positions='rope' is not supported by the Gram state")


def _skip(comp, branch, g):
    """``alpha x + F(x)`` pair by pair: the residual's skip core on the Gram entries."""
    return skip_core(branch, branch, g, g, comp.alpha)[1]


#: Layers kept by default besides the last: the input and the first two blocks.
DEFAULT_KEPT = (0, 1, 2)

#: Architecture fields the Gram state supports only at one value.
_ONLY = {"attention": "softmax", "positions": "absolute"}


def gram_support_problem(arch: Architecture):
    """Why :func:`propagate_gram` cannot run ``arch``, or None when it can.

    Supported: softmax attention (any heads), absolute positions, scalar numeric fields,
    and ``norm="none"`` only with a positively homogeneous activation (ReLU, linear), whose
    MLP moments at unequal token norms are exact (docs/theory.md section 17).

    Returns
    -------
    str or None
        A message naming the field.
    """
    for name, allowed in _ONLY.items():
        if getattr(arch, name) != allowed:
            return f"{name}={getattr(arch, name)!r} is not supported by the Gram state (only {name}={allowed!r})"
    for name, value in arch.numeric().items():
        if value is not None and np.ndim(value) != 0:
            return f"{name} must be a scalar for the Gram state, got an array of shape {np.shape(value)}"
    if not arch.norm.has_norm and not activation_spec(arch.activation).homogeneous:
        return (f"activation={arch.activation!r} with norm='none' is not supported by the Gram state (unequal "
                "token norms need a positively homogeneous activation: 'relu' or 'linear')")
    return None


def propagate_gram(arch: Architecture, beta, gram, depth, *, draws=8, seed=0, keep_layers=None,
                   sampled=False, method="exact") -> GramTrajectory:
    r"""Propagate the Gram matrix of one sequence through ``depth`` blocks.

    Every block is :meth:`Architecture.block <remprop.theory.Architecture.block>` walked
    on ``G`` (docs/theory.md section 17): skip ``G' = G_F + alpha^2 G``, LayerNorm and
    RMSNorm ``G_ij / sqrt(G_ii G_jj)``, dense layers and MLPs pair by pair through their
    ``*_core`` maps, softmax attention

    .. math::
        G_A = \sigma_v^2\,E[A G A^T] + \sigma_b^2
            = G_A^{\rm simplex}(q, p) + \sigma_v^2\,
              \overline{\big(A G A^T - A_s G_s A_s^T\big)}

    with the finite-T closed form on the simplex projection ``(q, p)`` of ``G`` (the map of
    :func:`~remprop.theory.softmax_attention_map` with ``seq_len = T``) and a Monte Carlo
    average over ``draws`` Gaussian score matrices shared by ``A`` and ``A_s``
    (:func:`structured_attention_gram`). A simplex input reproduces
    :func:`~remprop.theory.propagate` at ``seq_len = T`` to rounding.

    Parameters
    ----------
    arch : Architecture
        norm post / pre / none (none: a positively homogeneous activation, or equal norms),
        layer or rms norm, dense or gated MLP, softmax attention, any heads
        (``effective_beta``), absolute positions; numeric fields scalars. ``seq_len`` must
        be None or T.
    beta : float
        The model's query/key scale, > 0.
    gram : array_like, shape (T, T)
        Input Gram matrix ``x x^T / d`` of one sequence (:func:`check_gram`).
    depth : int
        Blocks, >= 1.
    draws : int
        Monte Carlo draws per attention layer (default 8); with ``sampled=True`` the number
        of chains.
    seed : int
        Seed of the draws' ``numpy.random.Generator`` (sampled: of the chains' ``SeedSequence``).
    keep_layers : iterable of int, optional
        Layers whose Gram matrix is kept (default input, 1, 2 and ``depth``).
    sampled : bool
        False (default): the mean Gram matrix over initialisations (above). True: ``draws``
        chains of one initialisation each, one score field per head and attention layer; their
        average ``mean_cosine``, ``q``, ``rho``, its standard error, the first chain's ``grams``
        (docs/theory.md section 17.1).
    method : {"exact", "fast"}
        ``"exact"`` (default): the control variate above. ``"fast"``: the attention of the fast causal
        Gram state without a mask (docs/theory.md section 8.1; ``mean_cosine_se`` then 0: the spread
        of independent seeds is its error).

    Returns
    -------
    GramTrajectory

    Notes
    -----
    Cost ``O(draws T^3)`` per layer (one eigendecomposition and five T x T products per
    draw); docs/theory.md section 17 gives timings.

    References
    ----------
    docs/theory.md section 17; Giorlandino & Goldt, arXiv 2505.24333 (the simplex maps).
    """
    if not isinstance(arch, Architecture):
        raise ValueError(f"arch must be a remprop.theory.Architecture, got {type(arch).__name__}")
    problem = gram_support_problem(arch)
    if problem is not None:
        raise ValueError(problem)
    beta = check_real_scalar("beta", beta)
    if beta <= 0:
        raise ValueError(f"beta must be > 0, got {beta!r}")
    g = check_gram(gram)
    t = g.shape[0]
    if arch.seq_len is None:
        arch = arch.replace(seq_len=t)
    elif arch.seq_len != t:
        raise ValueError(f"seq_len = {arch.seq_len} (arch.seq_len) must be None or the gram's T = {t}")
    depth = check_depth(depth)
    draws = check_count("draws", draws, 1)
    seed = check_count("seed", seed, 0)
    kept = set(DEFAULT_KEPT) | {depth} if keep_layers is None else {check_count("keep_layers", k, 0)
                                                                    for k in keep_layers}
    if not isinstance(sampled, (bool, np.bool_)):
        raise ValueError(f"sampled must be True or False, got {sampled!r}")
    check_gram_method(method)
    if method == "fast" and sampled:
        raise ValueError("method='fast' has no sampled chains (sampled=True draws its own fields)")
    block = arch.block(beta)
    settings = {"arch": arch.to_dict(), "beta": beta, "depth": depth, "seq_len": t, "draws": draws, "seed": seed,
                "simplex_distance": _simplex_distance(g), "plain_monte_carlo_layers": 0, "sampled": bool(sampled)}
    if sampled:
        return _sampled_chains(arch, block, g, depth, draws, seed, kept, settings)
    walker = (_FastGramWalker if method == "fast" else _GramWalker)(draws, np.random.default_rng(seed),
                                                                    arch.activation)
    cos, var, qs, rhos, grams = [_mean_cosine(g)], [0.0], [], [], {}
    for layer in range(depth + 1):
        q, p = _simplex_pair(g)
        qs.append(q)
        rhos.append(p / q)
        if layer in kept:
            grams[layer] = g.copy()
        if layer == depth:
            break
        walker.variances = []
        g = walker.block_step(block, g, layer)
        cos.append(_mean_cosine(g))
        var.append(var[-1] + sum(walker.variances))
    settings["plain_monte_carlo_layers"] = walker.plain_layers
    return GramTrajectory(np.array(cos), np.sqrt(np.array(var)), np.array(qs), np.array(rhos), grams, settings)


def _sampled_chains(arch, block, g0, depth, draws, seed, kept, settings) -> GramTrajectory:
    """``draws`` sampled chains (:class:`_SampledGramWalker`) from ``g0``, their statistics averaged."""
    stats, grams = np.empty((3, draws, depth + 1)), {}     # mean cosine, q, p of every chain and layer
    for chain, child in enumerate(np.random.SeedSequence(seed).spawn(draws)):
        walker, g = _SampledGramWalker(np.random.default_rng(child), arch.activation, arch.heads), g0
        for layer in range(depth + 1):
            stats[:, chain, layer] = (_mean_cosine(g), *_simplex_pair(g))
            if chain == 0 and layer in kept:
                grams[layer] = g.copy()
            if layer < depth:
                g = walker.block_step(block, g, layer)
    cos, q, p = stats.mean(axis=1)
    se = stats[0].std(axis=0, ddof=1) / math.sqrt(draws) if draws > 1 else np.zeros(depth + 1)
    return GramTrajectory(cos, se, q, p / q, grams, settings)
