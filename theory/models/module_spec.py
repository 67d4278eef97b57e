"""The configuration of a block described by hand, for the measured route: :func:`module_spec`.

Plain PyTorch's ``nn.TransformerEncoder`` and a user's own block
(:mod:`remprop.validation.module_weights`) bring no Hugging Face configuration: their sizes,
block order, activation and input state ``(q0, rho0)`` are given, every scale is measured
(:func:`~remprop.theory.models.measured_weights.measured_spec`, family
:data:`~remprop.theory.models.block_weights.MODULE_FAMILY`).

Reference: docs/real_models.md section 6.2.
"""
from __future__ import annotations

from ..architecture import Architecture
from ..checks import ParameterError, as_float_array, check_count, check_depth, check_overlap
from ..rem import check_seq_len
from ..settings import RunSettings
from .block_weights import MODULE_FAMILY
from .hf_config import ModelSpec

__all__ = ["module_spec"]


def module_spec(*, width, depth, heads, d_ff, seq_len, norm="pre", activation="relu", norm_type="layer",
                mlp="dense", causal=False, q0=1.0, rho0=0.0, eps=1e-5, final_norm=False, branch_norm=False,
                name="module", positions="absolute", rope_base=None, default_init=None):
    """The :class:`~remprop.theory.ModelSpec` of a block described by hand, for the measured route.

    Parameters
    ----------
    width, depth, heads, d_ff : int
        Model width d, number of blocks L, attention heads H (dividing d), MLP width.
    seq_len : int
        Sequence length T >= 2 (the model's own; a plain module has no maximum).
    norm : {"pre", "post", "none"}
        Block order (``nn.TransformerEncoderLayer``: ``norm_first=True`` is ``"pre"``).
    activation, norm_type, mlp, positions, rope_base, branch_norm
        As :class:`~remprop.theory.Architecture` takes them.
    causal : bool
        A causal mask.
    q0, rho0 : float
        The input state the first block reads: the mean squared entry of a token (> 0) and the
        mean cosine of two tokens (default 1 and 0: i.i.d. unit-variance tokens).
    eps : float
        The norms' epsilon (reported).
    final_norm : bool
        A norm after the last block.
    name : str
        The report's name.
    default_init : str, optional
        The key of :data:`~remprop.theory.models.default_init.DEFAULT_INITS` of the block's
        default initialisation (``"torch.nn.TransformerEncoder"``); None: not known (a user's own
        block), no deviation table.

    Returns
    -------
    ModelSpec
        ``family = "module"``, its scales placeholders until
        :func:`~remprop.theory.models.measured_weights.measured_spec` measures them.
    """
    width, heads, d_ff = check_count("width", width, 2), check_count("heads", heads, 1), check_count("d_ff", d_ff, 1)
    depth = check_depth(depth)
    if width % heads:
        raise ParameterError("heads", f"heads ({heads}) must divide the width ({width})")
    seq_len = check_seq_len(seq_len, allow_none=False)
    q0 = float(as_float_array("q0", q0, positive=True))
    rho0 = float(as_float_array("rho0", rho0, low=-1.0, high=1.0))
    check_overlap(q0, rho0 * q0, "q0", "rho0 q0")
    eps = float(as_float_array("eps", eps, nonnegative=True))
    rope = {} if positions == "absolute" else {"positions": positions, "head_dim": width // heads,
                                               **({} if rope_base is None else {"rope_base": rope_base})}
    arch = Architecture(norm=norm, norm_type=norm_type, mlp=mlp, attention="softmax", activation=activation,
                        alpha_sa=1.0, alpha_mlp=1.0, seq_len=seq_len, heads=heads, qk_scaling="model",
                        sigma_v2=1.0, sigma_o2=1.0, sigma_w2=1.0, sigma_w2_out=1.0, sigma_b2=0.0,
                        branch_norm=bool(branch_norm), final_norm=bool(final_norm), **rope)
    notes = (f"input: q0 = {q0:g}, rho0 = {rho0:g} as given (a module without embedding tables: the tokens the "
             "first block reads)",)
    return ModelSpec(name=str(name), family=MODULE_FAMILY, settings=RunSettings(arch, 1.0, depth, q0, rho0),
                     width=width, d_ff=d_ff, causal=bool(causal), init_range=float("nan"), embedding_layer_norm=False,
                     final_layer_norm=bool(final_norm), layer_norm_eps=eps, hidden_act=str(activation),
                     assumptions=notes, pixel_std=1.0, config={"model_type": MODULE_FAMILY,
                                                                        "default_init": default_init})
