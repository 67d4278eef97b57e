"""A BERT-style transformer stack at initialisation, simulated in torch.

The stack is built from a :class:`remprop.theory.Architecture` (block order, attention
variant, activation, variances, skip strengths, heads and their query/key convention)
plus the query/key scale ``beta``, the depth, the sizes the theory does not need and the
run conditions (:class:`~remprop.validation.SimulationSettings`: width, MLP width, simulated
sequence length, causal mask, precision, device) and the initialisation seed.
Each block is the theory's own composition :meth:`Architecture.block
<remprop.theory.Architecture.block>` (docs/theory.md section 5), run component by
component through the components' own torch faces (:mod:`remprop.validation.registry`).

Weights are drawn layer by layer while the inputs pass through: a 60-layer stack with
d = 720, T = 512 holds one layer's weights at a time. Layer ``l`` of seed ``s`` always
gets the same weights (stream ``(s, weights, l)`` of :func:`~remprop.validation.backend.generator`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np
import torch

from remprop.theory import Architecture
from remprop.theory.attention_masks import layer_window
from remprop.theory.checks import check_depth

from . import layers
from .backend import STREAM_WEIGHTS, check_positive_int, check_scalar, check_seed, generator
from .measurements import attention_statistics, token_statistics
from .registry import BlockContext, BlockSizes, draw_block_weights, simulate_component
from .rope import rotary
from .settings import SimulationSettings, check_simulation

__all__ = ["SimulatedStack", "StackTrace", "trace_stack"]


@dataclass(frozen=True)
class StackTrace:
    """Per-sequence statistics of every layer of a stack.

    Attributes
    ----------
    q, p, rho, cosine : ndarray, shape (batch, depth + 1)
        Token statistics (see :func:`~remprop.validation.measurements.token_statistics`);
        column 0 is the input, column l the output of block l.
    y2, entropy : ndarray, shape (batch, depth)
        Attention statistics of block l + 1's attention (column l).
    """

    q: np.ndarray
    p: np.ndarray
    rho: np.ndarray
    cosine: np.ndarray
    y2: np.ndarray
    entropy: np.ndarray

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @staticmethod
    def concatenate(traces) -> "StackTrace":
        """Stack the batches of several traces."""
        traces = list(traces)
        return StackTrace(**{f.name: np.concatenate([getattr(t, f.name) for t in traces])
                             for f in fields(StackTrace)})


class SimulatedStack:
    r"""A depth-L stack of transformer blocks at initialisation.

    Every block runs, in torch, the tree of components that
    :meth:`Architecture.block <remprop.theory.Architecture.block>` composes for the theory
    (docs/theory.md section 5; :attr:`theory_block`): each component draws its weights and runs
    through its own torch face (:func:`~remprop.validation.registry.draw_block_weights`,
    :func:`~remprop.validation.registry.simulate_component`), so the block orders exist
    once, in :func:`remprop.theory.components.block.block`:

    * post-LN: ``x <- LN(alpha_sa x + SA(x)); x <- LN(alpha_mlp x + MLP(x))``
    * pre-LN:  ``x <- alpha_sa x + SA(LN(x)); x <- alpha_mlp x + MLP(LN(x))``
    * no LN:   ``x <- alpha_sa x + SA(x);     x <- alpha_mlp x + MLP(x)``

    with SA softmax or gain-controlled attention, initialised as in
    :mod:`remprop.validation.layers` (``s_qk^2 = beta sqrt(log T) / d``, scores over
    ``sqrt(d_H)``). When ``arch.sigma_o2`` is set, SA ends with the bias-free output
    projection ``W_O ~ N(0, sigma_o2 / d)`` of the concatenated heads (before the skip);
    otherwise there is none, as in the reference experiments. The MLP's second layer is
    ``W2 ~ N(0, sigma_w2_out / d_ff)`` (``arch.sigma_w2_out``, default ``sigma_w2``). LN is
    LayerNorm or RMSNorm (``arch.norm_type``), the MLP dense or gated (``arch.mlp``:
    ``W_down (phi(W_gate x) * W_up x)``, gate and up ``N(0, sigma_w2 / d)``). With
    ``arch.positions == "rope"`` the queries and keys of every softmax attention are rotated
    (:func:`remprop.validation.rope.rotary`, base ``arch.rope_base``, ``d_H = width / heads``,
    which must equal ``arch.head_dim``; docs/theory.md section 15). The block forms of
    docs/theory.md section 19 come with the tree (``block_form="parallel"``: both branches on
    ``LN(x)``, one skip; ``branch_norm``: a norm on each branch's output); the attention reads
    ``arch.kv_heads`` (grouped key/value heads, drawn ``(kv_heads d_H, d)``), ``arch.qk_norm``
    (queries and keys RMS-normalised over ``arch.qk_norm_dim`` coordinates, default ``d_H``,
    with gain ``arch.qk_norm_gain``; ``beta`` then multiplies the normalised scores) and
    ``arch.logit_softcap`` (``c tanh(s / c)``); ``arch.final_norm`` normalises the last
    block's output, which is what layer ``depth`` then reports (as the theory's trajectory).

    Parameters
    ----------
    arch : remprop.theory.Architecture, optional
        Block order, attention, activation, variances, skip strengths (scalars), and the
        heads H (``arch.heads``, dividing ``sim.width``) with their query/key convention
        ``arch.qk_scaling``: ``s_qk^2 = beta sqrt(log T) / d`` ("model": every head is the
        single-head REM at beta) or ``/ d_H`` ("head": each head behaves as beta H;
        :mod:`remprop.theory.rem.heads`). ``arch.seq_len`` (the theory's T) is not used:
        the simulated T is ``sim.seq_len`` (with RoPE, compare with a theory at the same T: its
        ``cbar_T`` depends on T). Default: BERT defaults ``Architecture()``.
    beta : float
        Query/key scale, > 0.
    depth : int
        Number of blocks L, >= 1.
    sim : remprop.validation.SimulationSettings, optional
        Width d, MLP width, simulated sequence length T, causal mask, dtype, device and the
        norms' epsilon (its seeds, sequences and inputs are not read). Default
        ``SimulationSettings()``.
    seed : int
        Initialisation seed, >= 0.

    Attributes
    ----------
    sim : remprop.validation.SimulationSettings
    width, d_ff, seq_len, causal, dtype, device, layer_norm_eps
        Of ``sim`` (``d_ff``: :attr:`SimulationSettings.mlp_width
        <remprop.validation.SimulationSettings.mlp_width>`).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (reference experiments' initialisation).
    """

    def __init__(self, arch: Architecture | None = None, beta=0.5, depth=12, *, sim: SimulationSettings | None = None,
                 seed=0):
        arch = Architecture() if arch is None else arch
        if not isinstance(arch, Architecture):
            raise ValueError(f"arch must be a remprop.theory.Architecture, got {type(arch).__name__}")
        sim = check_simulation(sim)
        self.arch = arch
        self.sim = sim
        self.beta = check_scalar("beta", beta, positive=True)
        self.depth = check_depth(depth)
        self.width, self.d_ff, self.seq_len = sim.width, sim.mlp_width, sim.seq_len
        if self.width % self.heads:
            raise ValueError(f"heads must divide width, got heads={self.heads} (arch.heads), width={self.width}")
        self.causal, self.dtype, self.device = sim.causal, sim.dtype, sim.device
        self.seed = check_seed(seed)
        self.layer_norm_eps = sim.layer_norm_eps
        self.params = {name: check_scalar(name, value) for name, value in arch.numeric().items()}
        #: The theory's block, whose components every simulated block runs in torch.
        self.theory_block = arch.block(self.beta)
        #: The rotation of queries and keys (RoPE), or None.
        self.rotate = self._rotary()
        #: Grouped key/value heads (``arch.kv_heads``), or None: one per head.
        self.kv_heads = arch.kv_heads
        #: QK-norm of every attention (:class:`~remprop.validation.layers.QKNorm`), or None.
        self.qk_norm = None
        if arch.qk_norm:
            self.qk_norm = layers.QKNorm(gain=float(arch.qk_norm_gain), dim=arch.qk_norm_dim,
                                         scale=self.beta, eps=self.layer_norm_eps)
        #: Attention-logit soft-capping c, or None.
        self.logit_softcap = arch.logit_softcap
        #: The norm after the last block (a component, ``arch.final_norm``), or None.
        self.final_norm = arch.final_layer()

    def _rotary(self):
        """:func:`~remprop.validation.rope.rotary` with rotary positions (``arch.positions``), else None."""
        if not self.arch.positions.rotary:
            return None
        if self.arch.attention.gain_controlled:
            raise ValueError(f"positions='rope' is simulated with softmax attention only (the torch "
                             f"{self.arch.attention} attention has no rotation hook), got "
                             f"attention={self.arch.attention!r}")
        d_head = self.width // self.heads
        if self.arch.head_dim != d_head:
            raise ValueError(f"head_dim = {self.arch.head_dim} (arch.head_dim) must equal width / heads = "
                             f"{self.width} / {self.heads} = {d_head}, the simulated heads' width")
        width = d_head if self.arch.rotary_dim is None else self.arch.rotary_dim
        turn = rotary(self.seq_len, width, self.arch.rope_base, dtype=self.dtype, device=self.device)
        if width == d_head:
            return turn
        # partial rotary (GPT-NeoX's rotary_pct): the first rotary_dim coordinates turn, the rest pass
        return lambda x: torch.cat([turn(x[..., :width]), x[..., width:]], dim=-1)

    @property
    def heads(self) -> int:
        """Attention heads H: ``arch.heads``."""
        return self.arch.heads

    @property
    def qk_scaling(self) -> str:
        """Query/key variance convention: ``arch.qk_scaling``."""
        return self.arch.qk_scaling

    def __repr__(self):
        return f"SimulatedStack({self.arch!r}, beta={self.beta}, depth={self.depth}, sim={self.sim!r}, seed={self.seed})"

    # -- weights ------------------------------------------------------------------------
    def weights(self, layer: int) -> layers.BlockWeights:
        """The weights of block ``layer`` (0-based), drawn from stream ``(seed, weights, layer)``.

        Drawn in the order attention, MLP (dense, or gated: gate, up, down), then (only
        when ``arch.output_projection``) the output projection: an architecture without one
        gets the same weights as before the projection existed, and adding one leaves the
        other weights unchanged.
        """
        layer = check_positive_int("layer", layer, 0)
        if layer >= self.depth:
            raise ValueError(f"layer must be < depth = {self.depth}, got {layer}")
        sizes = BlockSizes(generator(self.seed, STREAM_WEIGHTS, layer, self.device), self.width, self.d_ff,
                           self.dtype, self.device, self.beta, self.seq_len, self.qk_scaling, self.kv_heads)
        return draw_block_weights(self.theory_block, BlockContext(heads=self.heads, sizes=sizes))

    # -- forward ------------------------------------------------------------------------
    def block(self, x, weights: layers.BlockWeights, mask=None, need_probs=True, layer=0):
        """One block: :attr:`theory_block` run in torch; returns ``(x_out, attention_probabilities)``.

        ``layer`` (0-based) picks the block's sliding window from the settings' ``window`` pattern.

        ``need_probs=False`` (a training step, which reads no probabilities) lets softmax attention
        run fused (:func:`~remprop.validation.layers.fused_attention`); its probabilities are then None.
        """
        causal = (layer_window(self.sim.window, layer) or True) if self.causal else False
        context = BlockContext(weights, heads=self.heads, mask=mask, causal=causal,
                               layer_norm_eps=self.layer_norm_eps, rotate=self.rotate, qk_norm=self.qk_norm,
                               logit_softcap=self.logit_softcap, need_probs=need_probs)
        x = simulate_component(self.theory_block, x, context)
        return x, context.probs

    def prepare_inputs(self, x, mask=None):
        """Check ``x`` (batch, seq_len, width) and ``mask``; move them to this stack's device and dtype."""
        if not isinstance(x, torch.Tensor) or x.ndim != 3 or x.shape[1:] != (self.seq_len, self.width):
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise ValueError(f"x must be a tensor of shape (batch, seq_len={self.seq_len}, "
                             f"width={self.width}), got {shape}")
        x = x.to(device=self.device, dtype=self.dtype)
        if mask is not None:
            if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool or mask.shape != x.shape[:2]:
                raise ValueError(f"mask must be a bool tensor of shape {tuple(x.shape[:2])}")
            mask = mask.to(self.device)
            if bool((mask.sum(dim=1) < 2).any()):
                raise ValueError("mask must leave at least 2 real tokens in every sequence")
        return x, mask

    def forward(self, x, mask=None, observe=None):
        """Push a batch through the stack.

        Parameters
        ----------
        x : Tensor, shape (batch, seq_len, width)
        mask : Tensor of bool, shape (batch, seq_len), optional
            True for real tokens (padding is masked out as attention keys).
        observe : callable, optional
            Called as ``observe(layer, hidden, probs)``: layer 0 with the input and
            ``probs=None``, then after each block l = 1..depth (the last one through the
            final norm when ``arch.final_norm``).

        Returns
        -------
        Tensor, the output of the last block (through the final norm when ``arch.final_norm``).
        """
        x, mask = self.prepare_inputs(x, mask)
        with torch.no_grad():
            if observe is not None:
                observe(0, x, None)
            for layer in range(self.depth):
                try:
                    x, probs = self.block(x, self.weights(layer), mask, layer=layer)
                except RuntimeError as err:  # e.g. a skip strength beyond the dtype's range
                    if "overflow" not in str(err):
                        raise
                    raise self.overflow_error(layer + 1) from None
                if not bool(torch.isfinite(x).all()):
                    raise self.overflow_error(layer + 1)
                if self.final_norm is not None and layer + 1 == self.depth:
                    x = simulate_component(self.final_norm, x, BlockContext(layer_norm_eps=self.layer_norm_eps))
                if observe is not None:
                    observe(layer + 1, x, probs)
        return x

    __call__ = forward

    #: The fields that scale the stream, named (largest first) when it overflows.
    SCALE_FIELDS = ("alpha_sa", "alpha_mlp", "sigma_v2", "sigma_w2", "sigma_o2", "sigma_w2_out", "sigma_b2")

    def overflow_error(self, layer) -> ValueError:
        """The error of a stream that left the dtype's range after block ``layer``.

        Its message starts with the largest scale field of the Architecture (a command
        line points it at its option), then names the layer, the dtype and its range.
        """
        scales = {name: float(getattr(self.arch, name)) for name in self.SCALE_FIELDS
                  if getattr(self.arch, name) is not None}
        largest = max(scales, key=scales.get)
        return ValueError(f"{largest} = {scales[largest]:g}: the simulated stream is not finite after block "
                          f"{layer} of {self.depth} in {str(self.dtype).replace('torch.', '')} (an overflow beyond "
                          f"{torch.finfo(self.dtype).max:.3g}, or 0/0 of a vanished stream); use smaller "
                          f"values or a shallower stack")

    def trace(self, x, mask=None) -> StackTrace:
        """Per-sequence statistics of every layer (see :class:`StackTrace`)."""
        return trace_stack(self, x, mask)


def trace_stack(stack, x, mask=None) -> StackTrace:
    """Run ``stack.forward(x, mask, observe)`` and collect :class:`StackTrace` statistics.

    Works for any stack with that ``forward`` signature (the simulator and the Hugging
    Face adapter).
    """
    tokens, attention = [], []

    def observe(layer, hidden, probs):
        tokens.append({k: v.cpu().numpy() for k, v in token_statistics(hidden, mask).items()})
        if probs is not None:
            attention.append({k: v.cpu().numpy() for k, v in attention_statistics(probs, mask).items()})

    stack.forward(x, mask, observe)
    stat = lambda rows, name: np.stack([r[name] for r in rows], axis=1)  # noqa: E731
    return StackTrace(q=stat(tokens, "q"), p=stat(tokens, "p"), rho=stat(tokens, "rho"),
                      cosine=stat(tokens, "cosine"), y2=stat(attention, "y2"),
                      entropy=stat(attention, "entropy"))
