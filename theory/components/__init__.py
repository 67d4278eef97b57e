"""Composable layer maps on the order parameters (q, p), in the style of ``stax``.

Every component is a callable ``(q, p) -> (q', p')`` that broadcasts over arrays.
Blocks are compositions::

    from remprop.theory import components as C
    post_ln_block = C.serial(
        C.residual(alpha_sa, C.softmax_attention(beta)), C.layer_norm(),
        C.residual(alpha_mlp, C.mlp()), C.layer_norm(),
    )
    q1, p1 = post_ln_block(1.0, 0.0)

One module per component, each holding every face of it (docs/architecture.md): the
``*_core`` formula (plain NumPy that numba compiles), the public map, the component class
with its numeric map, its symbolic walk, its kernel step and its torch forward and
weight draw. :mod:`.base` holds the protocol and ``serial``; :mod:`.residual` the skip and
parallel branches; :mod:`.attention`, :mod:`.layer_norm`, :mod:`.rms_norm`, :mod:`.mlp`,
:mod:`.gated_mlp`, :mod:`.dense` and :mod:`.dyt` (Dynamic Tanh, a norm without statistics) the layers.
"""
from .attention import Attention, gain_controlled_attention, softmax_attention
from .base import Column, Component, Serial, serial
from .dense import Dense, dense, output_projection
from .dyt import DyT, dyt
from .gated_mlp import GatedMLP, gated_mlp
from .layer_norm import LayerNorm, layer_norm
from .mlp import MLP, mlp
from .residual import Parallel, Residual, parallel, residual
from .rms_norm import RMSNorm, rms_norm

__all__ = [
    "Component", "serial", "residual", "layer_norm", "rms_norm", "dyt", "softmax_attention",
    "gain_controlled_attention", "mlp", "gated_mlp", "dense", "output_projection", "parallel",
    "Serial", "Residual", "Parallel", "LayerNorm", "RMSNorm", "DyT", "Attention", "MLP", "GatedMLP", "Dense", "Column",
]
