"""The attention maps: order parameters after softmax or gain-controlled self-attention.

A row of the attention matrix at initialisation is a Random Energy Model (REM) with T
states; its participation ratio ``Y2`` (:mod:`remprop.theory.rem`) is all the maps need
(docs/theory.md section 3): values mix the tokens with the row weights, so the output
norm is ``p + (q - p) Y2`` and the output overlap ``p + (q - p) C``, C the cross-overlap
of two rows.

Reference: A. Giorlandino & S. Goldt, "Two failure modes of deep transformers and how
to avoid them" (arXiv 2505.24333), Result 1.

The ``*_core`` functions hold each formula once. They use NumPy ufuncs only, so the
same source broadcasts over arrays and compiles with numba for the depth kernels.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba.extending import register_jitable

from remprop._deprecation import reordered

from ..choices import Choice
from ..checks import as_float_array, check_overlap, check_simplex_cosine, output_pair
from ..rem import (after_table, asymptotic_participation_core, check_seq_len, critical_beta_core, cross_overlap,
                   cross_overlap_at, cross_overlap_table, participation_ratio, participation_table,
                   qk_norm_energy_core, table_lookup_at, table_position)
from .base import Column, Component, kernel_key_of, merge_rescaled, parameter, rescaled_bias

__all__ = [
    "AttentionKind",
    "Positions",
    "softmax_attention_map",
    "gain_controlled_attention_map",
    "softmax_attention_core",
    "softmax_attention_overlap_core",
    "gain_controlled_attention_core", "asymptotic_attention_step_core", "finite_attention_step_core", "Attention",
    "softmax_attention", "gain_controlled_attention"]


class AttentionKind(Choice):
    """Softmax attention, or its centred (gain-controlled) version (``Architecture.attention``)."""

    SOFTMAX = "softmax"
    GAIN_CONTROLLED = "gain-controlled"

    @property
    def gain_controlled(self) -> bool:
        """Whether the rows' sequence mean is removed (``(A - 1 abar^T) V``)."""
        return self is AttentionKind.GAIN_CONTROLLED

    def component(self, *args, **kwargs):
        """The attention component of this kind (arguments of :func:`softmax_attention`)."""
        make = gain_controlled_attention if self.gain_controlled else softmax_attention
        return make(*args, **kwargs)


class Positions(Choice):
    """How tokens know their positions (``Architecture.positions``): added to the embeddings
    (``absolute``, only the input state changes) or rotary (``rope``: queries and keys rotated,
    docs/theory.md section 15)."""

    ABSOLUTE = "absolute"
    ROPE = "rope"

    @property
    def rotary(self) -> bool:
        """Whether queries and keys are rotated (RoPE)."""
        return self is Positions.ROPE


@register_jitable
def softmax_attention_core(q, p, y2, sigma_v2, sigma_b2):
    """(q_A, p_A) of softmax attention with values, given the participation ratio y2."""
    q_out = sigma_v2 * (p + (q - p) * y2) + sigma_b2
    p_out = sigma_v2 * p + sigma_b2
    return q_out, p_out


@register_jitable
def softmax_attention_overlap_core(q, p, y2, cross, sigma_v2, sigma_b2):
    """(q_A, p_A) given Y2 and the cross-overlap of two rows ``cross = <sum_j a_ij a_kj>``.

    ``o_i . o_k / d = sigma_v2 (p + (q - p) sum_j a_ij a_kj) + sigma_b2`` (rows sum to 1).
    ``cross``: :func:`~remprop.theory.rem.cross_overlap` (exact at finite T), or in
    jitted code :func:`~remprop.theory.rem.cross_overlap_core` on its table; 0 as
    T -> infinity (docs/theory.md section 3).
    """
    q_out = sigma_v2 * (p + (q - p) * y2) + sigma_b2
    p_out = sigma_v2 * (p + (q - p) * cross) + sigma_b2
    return q_out, p_out


@register_jitable
def gain_controlled_attention_core(q, p, y2_centred, sigma_v2, sigma_b2):
    """(q_A, p_A) of attention with the sequence mean removed; y2_centred = Y2 - 1/T."""
    q_out = sigma_v2 * (q - p) * y2_centred + sigma_b2
    p_out = sigma_b2 + 0.0 * q
    return q_out, p_out


@reordered("(q, p, beta, sigma_v2=0.2, sigma_b2=4e-4, seq_len=None)")
def softmax_attention_map(beta, *, q, p, sigma_v2=0.2, sigma_b2=4e-4, seq_len=None):
    r"""Order parameters after one softmax self-attention layer.

    .. math::
        q_A = \sigma_v^2\,(p + (q - p)\,Y_2) + \sigma_b^2, \qquad
        p_A = \sigma_v^2\,(p + (q - p)\,C) + \sigma_b^2

    with ``Y2 = participation_ratio(beta, q, p, seq_len)`` and the cross-overlap of two
    rows ``C = <sum_j a_ij a_kj>``: ``C = 0`` as T -> infinity (``seq_len=None``); at
    finite T the exact :func:`~remprop.theory.rem.cross_overlap` of two rows whose
    energies are correlated by the token cosine ``rho = p / q`` (docs/theory.md
    section 3.4: from ``1/T`` at ``rho = 0`` to ``Y2`` at ``rho = 1``; ``6.3/T`` at
    T = 512, beta = 1.2, rho = 0.5), read from its table (within ``2e-3 (Y2 - 1/T)``;
    built once per T, seconds). Values ``W_V ~ N(0, sigma_v2/d)``, value bias
    ``N(0, sigma_b2)``, no output projection.

    Domain: the inputs are the order parameters of T tokens, whose mean cosine obeys
    ``p / q >= -1/(T - 1)``: ``p >= 0`` for ``seq_len=None`` (otherwise ``q_A`` could be
    negative) and ``p >= -q/(T - 1)`` at finite T; other ``p`` raise ``ValueError``.

    ``beta`` comes first and ``q``, ``p`` and the rest are keyword-only: the order was ``(q, p, beta, ...)``
    before (an old positional call is a ``TypeError``), and beta comes first wherever the library takes it
    (``participation_ratio(beta, q, p)``, ``propagate(arch, beta, depth)``).

    Returns
    -------
    (q_A, p_A) : tuple of ndarray
        Broadcast to the common shape of all inputs.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Result 1.
    """
    q, p, y2, seq_len, sigma_v2, sigma_b2 = _map_inputs(q, p, beta, sigma_v2, sigma_b2, seq_len)
    cross = 0.0 if seq_len is None else np.asarray(cross_overlap(beta, q, p, seq_len, method="table"))
    return output_pair(*softmax_attention_overlap_core(q, p, y2, cross, sigma_v2, sigma_b2))


@reordered("(q, p, beta, sigma_v2=0.2, sigma_b2=4e-4, seq_len=None)")
def gain_controlled_attention_map(beta, *, q, p, sigma_v2=0.2, sigma_b2=4e-4, seq_len=None):
    r"""Order parameters after gain-controlled attention (sequence mean removed).

    .. math::
        q_A = \sigma_v^2\,(q - p)\,Y_2 + \sigma_b^2, \qquad p_A = \sigma_b^2

    (T -> infinity, ``seq_len=None``; at finite ``T = seq_len``, ``Y2`` becomes the exact
    ``Y2 - 1/T``). In the spread phase the output is the bias alone at T -> infinity: the
    centring removes the collapsed common direction; at finite T it is small but not zero.

    Domain: as :func:`softmax_attention_map` (``p >= 0`` for ``seq_len=None``,
    ``p >= -q/(T - 1)`` at finite T). Arguments: as :func:`softmax_attention_map` (``beta`` first, the
    rest keyword-only).

    Returns
    -------
    (q_A, p_A) : tuple of ndarray
        As :func:`softmax_attention_map`.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Sec. on gain-controlled attention.
    """
    q, p, y2, seq_len, sigma_v2, sigma_b2 = _map_inputs(q, p, beta, sigma_v2, sigma_b2, seq_len)
    if seq_len is not None:
        y2 = y2 - 1.0 / seq_len
    return output_pair(*gain_controlled_attention_core(q, p, y2, sigma_v2, sigma_b2))


def _map_inputs(q, p, beta, sigma_v2, sigma_b2, seq_len):
    """Checked inputs of a map and the row's Y2.

    (q, p) are the order parameters of T tokens: ``|p| <= q`` and ``p / q >= -1/(T - 1)``
    (``>= 0`` as T -> inf).
    """
    q, p = check_overlap(q, p)
    seq_len = check_seq_len(seq_len)
    check_simplex_cosine("p / q", p / q, seq_len)
    y2 = np.asarray(participation_ratio(beta, q, p, seq_len))
    sigma_v2 = as_float_array("sigma_v2", sigma_v2, nonnegative=True)
    sigma_b2 = as_float_array("sigma_b2", sigma_b2, nonnegative=True)
    return q, p, y2, seq_len, sigma_v2, sigma_b2


@register_jitable
def asymptotic_attention_step_core(q, p, beta, sigma_v2, sigma_b2, cbar, gain_controlled, rope):
    """The attention's map as T -> infinity on one cell's scalars and its critical beta, ``(q_A, p_A,
    beta_c)``: ``Y2 = max(0, 1 - beta_c / beta)``, ``beta_c = sqrt(2 / (q (q - p cbar)))`` (``cbar``
    read with RoPE only)."""
    p_rem = p * cbar if rope else p
    beta_c = critical_beta_core(q, p_rem)
    y2 = asymptotic_participation_core(beta, beta_c)
    if gain_controlled:
        q, p = gain_controlled_attention_core(q, p, y2, sigma_v2, sigma_b2)
    else:
        q, p = softmax_attention_core(q, p, y2, sigma_v2, sigma_b2)
    return q, p, beta_c


@register_jitable
def finite_attention_step_core(q, p, beta, sigma_v2, sigma_b2, cbar, qk_dim, gain_controlled, rope, qk, table):
    """The attention's map at finite T on one cell's scalars and its critical beta: ``(q_A, p_A, beta_c)``.

    ``Y2`` (and the cross-overlap ``C`` of two rows, or ``1/T`` with RoPE) are read from the packed
    ``table`` at ``x = beta sqrt(q (q - p cbar))`` (with QK-norm ``beta sqrt(1 - kappa_n cbar)``).
    ``beta_c`` is the REM's critical beta at the input, ``sqrt(2 / (q (q - p cbar)))`` (QK-norm:
    ``sqrt(2 / (1 - kappa_n cbar))``, docs/theory.md section 19). ``cbar`` is 1 without RoPE,
    ``qk_dim`` read with QK-norm only.
    """
    if qk:
        energy = qk_norm_energy_core(p / q, qk_dim, cbar)
        beta_c = math.sqrt(2.0 / energy) if energy > 0.0 else math.inf
        x = beta * math.sqrt(energy)
    else:
        p_rem = p * cbar if rope else p
        beta_c = critical_beta_core(q, p_rem)
        x = beta * math.sqrt(max(q * (q - p_rem), 0.0))
    position = table_position(table, x)  # one division for both tables (the same u = x / (x + x_s))
    y2 = table_lookup_at(table, x, position)
    if gain_controlled:
        q_a, p_a = gain_controlled_attention_core(q, p, y2 - 1.0 / table[0], sigma_v2, sigma_b2)
    else:
        if rope and cbar < 1.0:
            cross = 1.0 / table[0]
        else:
            cross_table = after_table(table)  # its x position: u / du = position du_Y (1 / du_C)
            cross = cross_overlap_at(cross_table, position * (table[2] * cross_table[3]), p / q, y2)
        q_a, p_a = softmax_attention_overlap_core(q, p, y2, cross, sigma_v2, sigma_b2)
    return q_a, p_a, beta_c


@dataclass(repr=False)
class Attention(Component):
    """Softmax or gain-controlled self-attention (:func:`softmax_attention`, :func:`gain_controlled_attention`)."""

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

    def gram(self, walker, g):
        return walker.attention(self, g)

    weight_slot = "attention"
    draw_rank = 0

    def torch_weights(self, sim):
        # the query/key scale is the model's (sim.beta, with its heads' convention): this
        # component holds the effective beta of the maps
        return sim.draw_attention(float(self.sigma_v2), float(self.sigma_b2))

    def torch_forward(self, x, sim):
        forward = sim.ops.gain_controlled_attention if self.gain_controlled else sim.ops.softmax_attention
        return sim.attend(forward, x, sim.weights_of(self), rotary=not self.gain_controlled)

    def rem_overlap(self, p):
        """The overlap in the REM's scale: ``p cbar_T`` with RoPE, ``p`` without
        (docs/theory.md section 15); the output map keeps ``p``."""
        return p if self.mean_rope_correlation is None else p * self.mean_rope_correlation

    def reduced_scale(self, q, p):
        """The REM's reduced scale ``x``: ``beta sqrt(q (q - p cbar))``, or with QK-norm
        ``beta sqrt(1 - kappa_n(p/q) cbar)`` (:func:`~remprop.theory.rem.qk_norm.qk_norm_energy_core`,
        docs/theory.md section 19)."""
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

    # -- the kernel face (remprop.theory.kernels) ---------------------------------------------
    def kernel_key(self):
        # the step reads 1/T from the table it is given: only whether T is finite matters
        return kernel_key_of(self, dict(vars(self), seq_len=self.seq_len is not None))

    def rescaled_parameters(self):
        """The bias at degree 1 and ``beta`` (a column) at degree -1: ``x = beta sqrt(q (q - p))``
        is then unchanged; with QK-norm ``x`` reads the cosine only and ``beta`` is not rescaled."""
        bias = rescaled_bias(self.sigma_b2)
        if bias is None or self.qk_norm_dim is not None:
            return bias
        return merge_rescaled([bias, {self.beta.name: -1}]) if isinstance(self.beta, Column) else None

    def kernel(self, tape):
        """One attention instruction (:func:`asymptotic_attention_step_core` or
        :func:`finite_attention_step_core` on each cell's scalars, with its
        critical beta). As T -> infinity ``Y2 = max(0, 1 - beta_c / beta)``; at finite T ``Y2`` (and the
        cross-overlap ``C`` of two rows, or ``1/T`` with RoPE) are read from the packed table (the
        program then needs the table)."""
        rope, qk = self.mean_rope_correlation is not None, self.qk_norm_dim is not None
        if self.seq_len is None and qk:
            raise ValueError("qk_norm_dim needs seq_len: a QK-normed attention reads the finite-T table")
        tape.attention(self.beta, self.sigma_v2, self.sigma_b2, self.mean_rope_correlation if rope else 1.0,
                       self.qk_norm_dim if qk else 0.0, finite=self.seq_len is not None,
                       gain_controlled=self.gain_controlled, rope=rope, qk_norm=qk)

    def _attend(self, q, p, y2, sigma_v2, sigma_b2):
        """(q_A, p_A) given the participation ratio ``y2`` (numbers or sympy expressions);
        finite-T softmax attention is handled in :meth:`apply` (its cross-overlap)."""
        if self.seq_len is None:
            core = gain_controlled_attention_core if self.gain_controlled else softmax_attention_core
            return core(q, p, y2, sigma_v2, sigma_b2)
        return gain_controlled_attention_core(q, p, y2 - 1.0 / self.seq_len, sigma_v2, sigma_b2)


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
    return Attention(*_attention_args(beta, sigma_v2, sigma_b2), seq_len=check_seq_len(seq_len),
                      mean_rope_correlation=_rope_argument(mean_rope_correlation),
                      qk_norm_dim=_qk_norm_argument(qk_norm_dim, seq_len))


def gain_controlled_attention(beta, sigma_v2=0.2, sigma_b2=4e-4, seq_len=None,
                              mean_rope_correlation=None, qk_norm_dim=None) -> Component:
    """Attention with the sequence mean removed; see :func:`~remprop.theory.gain_controlled_attention_map`.

    ``seq_len``, ``mean_rope_correlation``, ``qk_norm_dim``: as in :func:`softmax_attention`
    (finite T uses ``Y2 - 1/T``).
    """
    return Attention(*_attention_args(beta, sigma_v2, sigma_b2), gain_controlled=True,
                      seq_len=check_seq_len(seq_len), mean_rope_correlation=_rope_argument(mean_rope_correlation),
                      qk_norm_dim=_qk_norm_argument(qk_norm_dim, seq_len))


def _qk_norm_argument(value, seq_len):
    """None, or the QK-norm width n (an integer >= 1, or a kernels :class:`~.base.Column`), which
    needs a finite ``seq_len``."""
    if value is None:
        return None
    if isinstance(value, Column):
        value, column = 1, value
    else:
        column = None
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"qk_norm_dim must be an integer >= 1 or None, got {value!r}")
    if seq_len is None:
        raise ValueError("qk_norm_dim needs seq_len (an integer T >= 2): a QK-normed head's reduced scale "
                         "is g^2 sqrt((1 - kappa_n) / log T) (docs/theory.md section 16)")
    return int(value) if column is None else column


def _rope_argument(value):
    """None, or a correlation in [-1, 1] as a float (or a kernels :class:`~.base.Column`)."""
    if value is None or isinstance(value, Column):
        return value
    return float(as_float_array("mean_rope_correlation", value, low=-1.0, high=1.0))


def _attention_args(beta, sigma_v2, sigma_b2):
    return (parameter("beta", beta, positive=True),
            parameter("sigma_v2", sigma_v2, nonnegative=True),
            parameter("sigma_b2", sigma_b2, nonnegative=True))
