"""Composable layer maps on the order parameters (q, p), in the style of ``stax``.

Every component is a callable ``(q, p) -> (q', p')`` that broadcasts over arrays.
Blocks are compositions::

    from remprop.theory import components as C
    post_ln_block = C.serial(
        C.residual(alpha_sa, C.softmax_attention(beta)), C.layer_norm(),
        C.residual(alpha_mlp, C.mlp()), C.layer_norm(),
    )
    q1, p1 = post_ln_block(1.0, 0.0)

These compositions are the readable reference of the block orders; the numba kernels
in :mod:`remprop.theory.kernels` run the same maps over whole grids and depths.

Every component can also be walked on sympy expressions, ``block.symbolic(q, p, symbols)``:
the same cores (skip, dense, attention given ``Y2``) run on symbols, and what the numeric
map computes from numbers (the participation ratio, the activation's Gaussian moments)
comes from ``symbols`` (:class:`remprop.theory.symbolic.SymbolicContext`). Parameters
may then be sympy expressions too (they are kept as they are, unchecked); such a tree can
only be walked symbolically. This is how :mod:`remprop.theory.symbolic` derives its block
maps from :meth:`Architecture.block <remprop.theory.Architecture.block>`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Tuple


import numpy as np

from .checks import as_float_array, check_overlap, check_simplex_cosine, output_pair
from .activations import activation_spec, dense_core, moments_array
from .attention import gain_controlled_attention_core, softmax_attention_core, softmax_attention_overlap_core
from .rem import (asymptotic_participation_core, check_seq_len, critical_beta_core, cross_overlap_table,
                  participation_table, qk_norm_energy_core)
from .gated_mlp import gated_hidden_core
from .layernorm import layernorm_core
from .residual import skip_core
from .rmsnorm import rmsnorm_core

__all__ = [
    "Component", "serial", "residual", "layer_norm", "rms_norm", "softmax_attention",
    "gain_controlled_attention", "mlp", "gated_mlp", "dense", "output_projection", "parallel",
]


class Component:
    """A map on (q, p). Subclasses implement :meth:`apply` on float arrays."""

    name = "component"

    def __call__(self, q, p) -> Tuple[np.ndarray, np.ndarray]:
        """Apply the map to validated order parameters (``q > 0``, ``|p| <= q``).

        Returns ``(q', p')`` broadcast to their common shape; bad inputs raise
        ``ValueError`` naming ``q`` or ``p``, as the public maps do.
        """
        q, p = check_overlap(q, p)
        self.check_input(q, p)
        with np.errstate(divide="ignore", invalid="ignore"):
            q_out, p_out = self.apply(q, p)
        return output_pair(q_out, p_out)

    def check_input(self, q, p):
        """Further domain checks on validated (q, p); none by default."""

    def apply(self, q, p):  # pragma: no cover - abstract
        """The map ``(q, p) -> (q', p')`` on validated float arrays."""
        raise NotImplementedError

    def symbolic(self, q, p, symbols):  # pragma: no cover - abstract
        """The same map on sympy expressions ``(q, p)``, unchecked.

        ``symbols`` supplies what the numeric map computes from numbers:
        ``symbols.parameter(value)`` (a stored parameter as a sympy expression),
        ``symbols.participation(beta, q, p, seq_len)`` (the attention's ``Y2`` at its input
        ``(q, p)``) and ``symbols.moments(activation, q1, p1)`` (``E[phi(u)^2]``,
        ``E[phi(u) phi(v)]``); :class:`remprop.theory.symbolic.SymbolicContext` is the
        standard one. Returns ``(q', p')`` as sympy expressions.
        """
        raise NotImplementedError

    def __repr__(self):
        return self.name


@dataclass(repr=False)
class _Serial(Component):
    layers: tuple
    name = "serial"

    def apply(self, q, p):
        for layer in self.layers:
            q, p = layer.apply(q, p)
        return q, p

    def symbolic(self, q, p, symbols):
        for layer in self.layers:
            q, p = layer.symbolic(q, p, symbols)
        return q, p

    def check_input(self, q, p):
        # The first layer sees (q, p); a norm (LayerNorm, RMSNorm) keeps the cosine, so the
        # layer after a leading norm sees the same cosine (attention checks only the cosine).
        for layer in self.layers:
            layer.check_input(q, p)
            if not isinstance(layer, _LayerNorm):
                break

    def __repr__(self):
        return "serial(" + ", ".join(map(repr, self.layers)) + ")"


@dataclass(repr=False)
class _Residual(Component):
    alpha: np.ndarray
    branch: Component
    name = "residual"

    def apply(self, q, p):
        q_branch, p_branch = self.branch.apply(q, p)
        return skip_core(q_branch, p_branch, q, p, self.alpha)

    def symbolic(self, q, p, symbols):
        q_branch, p_branch = self.branch.symbolic(q, p, symbols)
        return skip_core(q_branch, p_branch, q, p, symbols.parameter(self.alpha))

    def check_input(self, q, p):
        self.branch.check_input(q, p)

    def __repr__(self):
        return f"residual(alpha, {self.branch!r})"


@dataclass(repr=False)
class _Parallel(Component):
    alpha: np.ndarray
    branches: tuple
    name = "parallel"

    def apply(self, q, p):
        return self._sum(q, p, [branch.apply(q, p) for branch in self.branches], self.alpha)

    def symbolic(self, q, p, symbols):
        return self._sum(q, p, [branch.symbolic(q, p, symbols) for branch in self.branches],
                         symbols.parameter(self.alpha))

    @staticmethod
    def _sum(q, p, outputs, alpha):
        """``alpha x + sum_i F_i(x)``: the branches' (q, p) add (independent weights), then the skip."""
        q_sum, p_sum = outputs[0]
        for q_branch, p_branch in outputs[1:]:
            q_sum, p_sum = q_sum + q_branch, p_sum + p_branch
        return skip_core(q_sum, p_sum, q, p, alpha)

    def check_input(self, q, p):
        for branch in self.branches:
            branch.check_input(q, p)

    def __repr__(self):
        return "parallel(alpha, " + ", ".join(map(repr, self.branches)) + ")"


class _LayerNorm(Component):
    name = "layer_norm"
    #: The norm's ``*_core`` map.
    core = staticmethod(layernorm_core)

    def apply(self, q, p):
        return self.core(q, p)

    def symbolic(self, q, p, symbols):
        # layernorm_core's (1, p / q); its 1.0 + 0.0 q (a float broadcast to the shape of q)
        # would put a float 1.0 into exact expressions, q / q is the exact 1
        return q / q, p / q


class _RMSNorm(_LayerNorm):
    """RMSNorm: the map of LayerNorm, ``(1, p / q)``, from its own core (docs/theory.md section 14)."""

    name = "rms_norm"
    core = staticmethod(rmsnorm_core)


@dataclass(repr=False)
class _Attention(Component):
    beta: np.ndarray
    sigma_v2: np.ndarray
    sigma_b2: np.ndarray
    gain_controlled: bool = False
    seq_len: int = None
    #: ``cbar_T`` of RoPE (the REM sees ``p cbar_T``), None without RoPE.
    mean_rope_correlation: float = None
    #: QK-norm: the number n of coordinates normalised together; ``beta`` is then the
    #: reduced-scale factor, ``x = beta sqrt(1 - kappa_n(p/q) cbar)`` (None: no QK-norm).
    qk_norm_dim: int = None

    @property
    def name(self):
        return "gain_controlled_attention" if self.gain_controlled else "softmax_attention"

    def check_input(self, q, p):
        # T tokens: mean cosine >= -1/(T - 1) (>= 0 as T -> infinity)
        check_simplex_cosine("p / q", p / q, self.seq_len)

    def rem_overlap(self, p):
        """The overlap in the REM's scale: ``p cbar_T`` with RoPE, ``p`` without
        (docs/theory.md section 15); the output map keeps ``p``."""
        return p if self.mean_rope_correlation is None else p * self.mean_rope_correlation

    def reduced_scale(self, q, p):
        """The REM's reduced scale ``x``: ``beta sqrt(q (q - p cbar))``, or with QK-norm
        ``beta sqrt(1 - kappa_n(p/q) cbar)`` (:func:`~remprop.theory.rem.qk_norm.qk_norm_energy_core`, docs/theory.md section 19)."""
        if self.qk_norm_dim is None:
            return self.beta * np.sqrt(q) * np.sqrt(np.maximum(q - self.rem_overlap(p), 0.0))
        cbar = 1.0 if self.mean_rope_correlation is None else self.mean_rope_correlation
        energy = np.vectorize(qk_norm_energy_core, otypes=[np.float64])(p / q, self.qk_norm_dim, cbar)
        return self.beta * np.sqrt(energy)

    def apply(self, q, p):
        p_rem = self.rem_overlap(p)
        if self.qk_norm_dim is not None:  # QK-norm needs a finite T (checked by the architecture)
            x = self.reduced_scale(q, p)
            y2 = participation_table(self.seq_len)(x)
            if not self.gain_controlled:
                return softmax_attention_overlap_core(q, p, y2, self._cross_overlap(x, q, p), self.sigma_v2,
                                                      self.sigma_b2)
            return self._attend(q, p, y2, self.sigma_v2, self.sigma_b2)
        if self.seq_len is None:
            y2 = asymptotic_participation_core(self.beta, critical_beta_core(q, p_rem))
        else:
            # the tabulated Y2 that the depth kernels read (relative error <= 1e-6)
            x = self.beta * np.sqrt(q) * np.sqrt(np.maximum(q - p_rem, 0.0))
            y2 = participation_table(self.seq_len)(x)
            if not self.gain_controlled:
                return softmax_attention_overlap_core(q, p, y2, self._cross_overlap(x, q, p), self.sigma_v2,
                                                      self.sigma_b2)
        return self._attend(q, p, y2, self.sigma_v2, self.sigma_b2)

    def _cross_overlap(self, x, q, p):
        """C of two rows at finite T: tabulated like Y2 (section 3.4); ``1/T`` with RoPE, whose
        rows see differently rotated keys (section 15, as
        :func:`~remprop.theory.rope_softmax_attention_map`)."""
        if self.mean_rope_correlation is not None:
            return 1.0 / self.seq_len
        return cross_overlap_table(self.seq_len)(x, p / q)

    def symbolic(self, q, p, symbols):
        if self.qk_norm_dim is not None:
            raise ValueError("qk_norm: the symbolic walk has no QK-normed attention (its energy variance "
                             "1 - kappa_n(rho) is not a closed form); use the numeric maps")
        beta = symbols.parameter(self.beta)
        y2 = symbols.participation(beta, q, self.rem_overlap(p), self.seq_len)
        sigma_v2, sigma_b2 = symbols.parameter(self.sigma_v2), symbols.parameter(self.sigma_b2)
        if self.seq_len is not None and not self.gain_controlled:
            cross = (symbols.cross_overlap(beta, q, p, self.seq_len) if self.mean_rope_correlation is None
                     else 1 / symbols.parameter(self.seq_len))
            return softmax_attention_overlap_core(q, p, y2, cross, sigma_v2, sigma_b2)
        return self._attend(q, p, y2, sigma_v2, sigma_b2)

    def _attend(self, q, p, y2, sigma_v2, sigma_b2):
        """(q_A, p_A) given the participation ratio ``y2`` (numbers or sympy expressions);
        finite-T softmax attention is handled in :meth:`apply` (its cross-overlap)."""
        if self.seq_len is None:
            core = gain_controlled_attention_core if self.gain_controlled else softmax_attention_core
            return core(q, p, y2, sigma_v2, sigma_b2)
        return gain_controlled_attention_core(q, p, y2 - 1.0 / self.seq_len, sigma_v2, sigma_b2)


@dataclass(repr=False)
class _MLP(Component):
    sigma_w2: np.ndarray
    sigma_b2: np.ndarray
    activation: str = "relu"
    sigma_w2_out: np.ndarray = None
    name = "mlp"

    def apply(self, q, p):
        code = activation_spec(self.activation).code
        return self._two_layers(q, p, lambda q1, p1: moments_array(code, q1, p1), lambda value: value)

    def symbolic(self, q, p, symbols):
        return self._two_layers(q, p, lambda q1, p1: symbols.moments(self.activation, q1, p1),
                                symbols.parameter)

    def _two_layers(self, q, p, moments, parameter):
        """dense -> activation (its Gaussian moments) -> dense, for numbers or sympy alike."""
        sigma_w2, sigma_b2 = parameter(self.sigma_w2), parameter(self.sigma_b2)
        q1, p1 = dense_core(q, p, sigma_w2, sigma_b2)
        m2, m11 = self.hidden(q1, p1, *moments(q1, p1))
        out = sigma_w2 if self.sigma_w2_out is None else parameter(self.sigma_w2_out)
        return dense_core(m2, m11, out, sigma_b2)

    def hidden(self, q1, p1, m2, m11):
        """Second moments of the hidden units from the activation's ``(m2, m11)``: phi's own."""
        return m2, m11


class _GatedMLP(_MLP):
    """``W_down (phi(W_gate x + b) * (W_up x + b)) + b``: the hidden kernel is
    ``gated_mlp.gated_hidden_core`` (docs/theory.md section 14)."""

    name = "gated_mlp"

    def hidden(self, q1, p1, m2, m11):
        return gated_hidden_core(q1, p1, m2, m11)


@dataclass(repr=False)
class _Dense(Component):
    sigma_w2: np.ndarray
    sigma_b2: np.ndarray
    name = "dense"

    def apply(self, q, p):
        return dense_core(q, p, self.sigma_w2, self.sigma_b2)

    def symbolic(self, q, p, symbols):
        return dense_core(q, p, symbols.parameter(self.sigma_w2), symbols.parameter(self.sigma_b2))


def serial(*layers: Component) -> Component:
    """Compose maps left to right: ``serial(f, g)(q, p) == g(*f(q, p))``."""
    for layer in layers:
        if not isinstance(layer, Component):
            raise ValueError(f"layers must be components, got {layer!r}")
    return _Serial(tuple(layers))


def residual(alpha, branch: Component) -> Component:
    r"""``x -> alpha x + branch(x)``: :math:`q' = q_F + \alpha^2 q`, :math:`p' = p_F + \alpha^2 p`."""
    if not isinstance(branch, Component):
        raise ValueError(f"branch must be a component, got {branch!r}")
    return _Residual(_parameter("alpha", alpha, nonnegative=True), branch)


def parallel(alpha, *branches: Component) -> Component:
    r"""``x -> alpha x + sum_i F_i(x)``: branches that read the same input (GPT-J, NeoX, Falcon).

    .. math:: q' = \alpha^2 q + \sum_i q_{F_i}, \qquad p' = \alpha^2 p + \sum_i p_{F_i}

    At initialisation the branches' weights are independent of each other and of ``x``, so
    the cross terms ``E[F_i(x_a) . F_j(x_b)]`` (``i != j``) and ``E[x_a . F_i(x_b)]``
    vanish and the overlaps add (docs/theory.md section 19).

    References
    ----------
    B. Wang & A. Komatsuzaki, GPT-J-6B (2021); S. Black et al., arXiv 2204.06745 (GPT-NeoX).
    """
    if not branches:
        raise ValueError("branches: parallel needs at least one branch")
    for branch in branches:
        if not isinstance(branch, Component):
            raise ValueError(f"branches must be components, got {branch!r}")
    return _Parallel(_parameter("alpha", alpha, nonnegative=True), tuple(branches))


def layer_norm() -> Component:
    """LayerNorm without affine parameters: ``(q, p) -> (1, p/q)``."""
    return _LayerNorm()


def rms_norm() -> Component:
    """RMSNorm without a gain: ``(q, p) -> (1, p/q)``; see :func:`~remprop.theory.rmsnorm_map`."""
    return _RMSNorm()


def softmax_attention(beta, sigma_v2=0.2, sigma_b2=4e-4, seq_len=None, mean_rope_correlation=None,
                      qk_norm_dim=None) -> Component:
    """Softmax self-attention (REM); see :func:`~remprop.theory.softmax_attention_map`.

    ``seq_len=None``: T -> infinity; an integer T >= 2: the tabulated exact finite-T
    participation ratio (:func:`~remprop.theory.rem.participation_table`).
    ``mean_rope_correlation``: ``cbar_T`` of rotary positions
    (:func:`~remprop.theory.rem.rope_mean_correlation`), in [-1, 1]: the REM's scale is
    ``beta sqrt(q (q - p cbar_T))`` and the finite-T cross-overlap ``1/T``, the map of
    :func:`~remprop.theory.rope_softmax_attention_map` (docs/theory.md section 15);
    None (default): no rotation.
    ``qk_norm_dim``: QK-norm over n coordinates (an integer >= 1; needs ``seq_len``): ``beta``
    is then the reduced-scale factor, ``x = beta sqrt(1 - kappa_n(rho) cbar_T)``
    (:func:`~remprop.theory.rem.qk_norm.qk_norm_energy_core`; ``beta = beta_model g^2 / sqrt(log T)``, as
    :meth:`Architecture.effective_beta <remprop.theory.Architecture.effective_beta>` packs it;
    docs/theory.md sections 16 and 19). None (default): no QK-norm.
    """
    return _Attention(*_attention_args(beta, sigma_v2, sigma_b2), seq_len=check_seq_len(seq_len),
                      mean_rope_correlation=_rope_argument(mean_rope_correlation),
                      qk_norm_dim=_qk_norm_argument(qk_norm_dim, seq_len))


def gain_controlled_attention(beta, sigma_v2=0.2, sigma_b2=4e-4, seq_len=None,
                              mean_rope_correlation=None, qk_norm_dim=None) -> Component:
    """Attention with the sequence mean removed; see :func:`~remprop.theory.gain_controlled_attention_map`.

    ``seq_len``, ``mean_rope_correlation``, ``qk_norm_dim``: as in :func:`softmax_attention`
    (finite T uses ``Y2 - 1/T``).
    """
    return _Attention(*_attention_args(beta, sigma_v2, sigma_b2), gain_controlled=True,
                      seq_len=check_seq_len(seq_len), mean_rope_correlation=_rope_argument(mean_rope_correlation),
                      qk_norm_dim=_qk_norm_argument(qk_norm_dim, seq_len))


def _qk_norm_argument(value, seq_len):
    """None, or the QK-norm width n (an integer >= 1), which needs a finite ``seq_len``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"qk_norm_dim must be an integer >= 1 or None, got {value!r}")
    if seq_len is None:
        raise ValueError("qk_norm_dim needs seq_len (an integer T >= 2): a QK-normed head's reduced scale "
                         "is g^2 sqrt((1 - kappa_n) / log T) (docs/theory.md section 16)")
    return int(value)


def _rope_argument(value):
    """None, or a correlation in [-1, 1] as a float."""
    if value is None:
        return None
    return float(as_float_array("mean_rope_correlation", value, low=-1.0, high=1.0))


def mlp(sigma_w2=0.2, sigma_b2=4e-4, activation="relu", sigma_w2_out=None) -> Component:
    """Two-layer MLP with the given activation (a name in ``ACTIVATIONS`` or a
    numba-jittable function); see :func:`~remprop.theory.mlp_map`. ``sigma_w2_out``: the second layer's
    variance times its fan-in ``d_ff`` (default ``sigma_w2``)."""
    return _mlp_args(_MLP, sigma_w2, sigma_b2, activation, sigma_w2_out)


def gated_mlp(sigma_w2=0.2, sigma_b2=4e-4, activation="silu", sigma_w2_out=None) -> Component:
    """Gated MLP ``W_down (phi(W_gate x) * W_up x)`` (SwiGLU with ``"silu"``, GeGLU with
    ``"gelu"``); see :func:`~remprop.theory.gated_mlp_map`. Gate and up share ``sigma_w2``;
    ``sigma_w2_out``: the down projection's variance times its fan-in ``d_ff`` (default
    ``sigma_w2``)."""
    return _mlp_args(_GatedMLP, sigma_w2, sigma_b2, activation, sigma_w2_out)


def _mlp_args(kind, sigma_w2, sigma_b2, activation, sigma_w2_out):
    name = activation_spec(activation).name
    out = None if sigma_w2_out is None else _parameter("sigma_w2_out", sigma_w2_out, nonnegative=True)
    return kind(_parameter("sigma_w2", sigma_w2, nonnegative=True),
                _parameter("sigma_b2", sigma_b2, nonnegative=True), name, out)


def dense(sigma_w2=1.0, sigma_b2=0.0) -> Component:
    r"""A dense layer ``W ~ N(0, sigma_w2 / fan_in)``, bias ``N(0, sigma_b2)``; see :func:`~remprop.theory.dense_map`.

    .. math:: q' = \sigma_w^2 q + \sigma_b^2,\qquad p' = \sigma_w^2 p + \sigma_b^2
    """
    return _Dense(_parameter("sigma_w2", sigma_w2, nonnegative=True),
                  _parameter("sigma_b2", sigma_b2, nonnegative=True))


def output_projection(sigma_o2=1.0) -> Component:
    r"""The attention output projection ``W_O ~ N(0, sigma_o2 / d)`` without bias.

    .. math:: q' = \sigma_o^2 q_A,\qquad p' = \sigma_o^2 p_A

    A random linear map of its input: independent of the tokens at initialisation, it
    scales the norms and overlaps alike and leaves the cosine unchanged
    (``E[(W a)_k (W b)_k] = sigma_o2 a.b / d``).

    References
    ----------
    Vaswani et al. 2017 (``MultiHead = Concat(heads) W_O``); Giorlandino & Goldt,
    arXiv 2505.24333 (whose reference experiments drop ``W_O``).
    """
    return _Dense(_parameter("sigma_o2", sigma_o2, nonnegative=True), np.zeros(()))


def _attention_args(beta, sigma_v2, sigma_b2):
    return (_parameter("beta", beta, positive=True),
            _parameter("sigma_v2", sigma_v2, nonnegative=True),
            _parameter("sigma_b2", sigma_b2, nonnegative=True))


def _parameter(name, value, **checks):
    """A checked float array (:func:`as_float_array`), or a sympy expression kept as it is.

    Sympy parameters are for :meth:`Component.symbolic` only; they are recognised by their
    type's module, so that the numeric core never imports sympy.
    """
    if type(value).__module__.startswith("sympy."):
        return value
    return as_float_array(name, value, **checks)
