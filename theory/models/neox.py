"""GPT-NeoX (``model_type`` gpt_neox: the Pythia suite): parallel pre-LN blocks with partial rotary positions.

``GPTNeoXLayer`` (``transformers``) with ``use_parallel_residual = true`` computes
``x + attention(input_layernorm(x)) + mlp(post_attention_layernorm(x))``: both branches read a
LayerNorm of the same ``x``, and the two LayerNorms are identical at initialisation (gain 1,
shift 0), so the block is the theory's parallel form (``block_form="parallel"``, ``norm="pre"``,
docs/theory.md section 19); ``use_parallel_residual = false`` is the sequential pre-LN block.
The MLP is dense, ``dense_4h_to_h(gelu(dense_h_to_4h(x)))``; a ``final_layer_norm`` follows the
last block; words are embedded by ``embed_in`` only (rotary positions act on queries and keys).

``GPTNeoXAttention`` rotates the first ``rotary_ndims = int(d_H * rotary_pct)`` coordinates of each
head's queries and keys with the frequencies ``b^{-2i/rotary_ndims}`` (``b = rotary_emb_base``)
and passes the other ``d_H - rotary_ndims`` through: ``Architecture(rotary_dim=rotary_ndims)``,
whose mean rotary correlation mixes the rotated part's with the unrotated part's 1
(:func:`~remprop.theory.rem.rope.partial_rotary_correlation`, exact at the level of the full-RoPE
law). ``transformers`` >= 5 keeps ``rotary_pct`` and ``rotary_emb_base`` as
``rope_parameters["partial_rotary_factor"]`` and ``rope_parameters["rope_theta"]``; both spellings
are read.

Initialisation: ``GPTNeoXPreTrainedModel`` has no ``_init_weights`` of its own (transformers 5.x),
so ``PreTrainedModel._init_weights`` draws every ``nn.Linear`` (the fused ``query_key_value``, the
attention ``dense``, both MLP layers) and the embedding from ``N(0, r^2)``, ``r = initializer_range``,
zeroes the biases and sets the LayerNorms to gain 1, shift 0: the law of the LLaMA reader's
weights (:func:`~remprop.theory.models.hf_config.standard_spec`), whose variances, beta (scores over ``sqrt(d_H)``) and
input state (``q0 = r^2``, ``rho0 = 1/V``) this reader takes. Pythia itself was not trained from
that init: the GPT-NeoX library's ``small_init`` (``N(0, 2 / (5 d))``, Nguyen & Salazar 2019) for
every weight but the residual output layers, which take ``wang_init`` (``N(0, (2 / (L sqrt d))^2)``)
(``init_method`` and ``output_layer_init_method`` of EleutherAI/pythia's ``models/*.yml``); the
report names the difference. Sizes: Biderman et al., "Pythia: A Suite for Analyzing Large Language
Models Across Training and Scaling", arXiv 2304.01373, Table 1.
"""
from __future__ import annotations

import dataclasses
import math

from ..settings import RunSettings
# the LLaMA reader and the field readers of the configuration reader this module extends
from .hf_config import _from_config, _positive_int, _positive_real, _rope_theta, standard_spec
from .decoder_families import _replace_notes

__all__ = ["rotary_fraction", "pythia_init_std"]

#: ``rotary_pct`` of ``transformers``' ``GPTNeoXConfig`` when a config leaves it out.
LIBRARY_ROTARY_PCT = 0.25


def rotary_fraction(cfg) -> float:
    """``rotary_pct`` of a GPT-NeoX config (or ``rope_parameters["partial_rotary_factor"]``), in (0, 1].

    A config whose two spellings disagree is refused; neither: the library default 0.25.
    """
    params = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    values = {}
    for field, source in (("rotary_pct", cfg), ("rope_parameters.partial_rotary_factor", params)):
        key = field.rsplit(".", 1)[-1]
        if source.get(key) is None:
            continue
        value = source[key]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 < value <= 1.0:
            raise ValueError(f"config.{field} must be a fraction in (0, 1] (the share of each head's coordinates "
                             f"that rotary positions turn), got {value!r}")
        values[field] = float(value)
    if len(set(values.values())) > 1:
        raise ValueError(f"config.rotary_pct ({values['rotary_pct']:g}) disagrees with "
                         f"config.rope_parameters.partial_rotary_factor "
                         f"({values['rope_parameters.partial_rotary_factor']:g})")
    return next(iter(values.values()), LIBRARY_ROTARY_PCT)


def _rotary_base(cfg):
    """``rotary_emb_base``, else the ``rope_theta`` of ``rope_parameters`` (transformers >= 5), else 10000."""
    params = cfg.get("rope_parameters") if isinstance(cfg.get("rope_parameters"), dict) else {}
    base = (_rope_theta({"rope_theta": cfg["rotary_emb_base"]}, "rotary_emb_base")
            if cfg.get("rotary_emb_base") is not None else None)
    theta = (_rope_theta(params, "rope_parameters.rope_theta")
             if params.get("rope_theta") is not None else None)
    if base is not None and theta is not None and base != theta:
        raise ValueError(f"config.rotary_emb_base ({base:g}) disagrees with config.rope_parameters.rope_theta "
                         f"({theta:g})")
    return base if base is not None else theta if theta is not None else 10000.0


def pythia_init_std(width, depth) -> dict:
    """The standard deviations of the GPT-NeoX library's init that Pythia trained from:
    ``{"small_init": sqrt(2 / (5 d)), "wang_init": 2 / (L sqrt d)}`` (every weight, and the
    residual output layers: attention ``dense`` and ``dense_4h_to_h``). Facts for the report;
    the reader models ``transformers``' ``N(0, initializer_range^2)``."""
    return {"small_init": math.sqrt(2.0 / (5.0 * width)), "wang_init": 2.0 / (depth * math.sqrt(width))}


def _gpt_neox_spec(cfg, *, seq_len=None, pixel_std=1.0):
    """GPT-NeoX (``model_type`` gpt_neox): see the module docstring."""
    width = _positive_int(cfg, "hidden_size")
    heads = _positive_int(cfg, "num_attention_heads")
    if width % heads:
        raise ValueError(f"config.num_attention_heads ({heads}) must divide hidden_size ({width})")
    head_dim = width // heads
    fraction = rotary_fraction(cfg)
    rotary_dim = int(head_dim * fraction)  # GPTNeoXAttention.rotary_ndims
    if rotary_dim < 2 or rotary_dim % 2:
        raise ValueError(f"config.rotary_pct = {fraction:g} rotates int({head_dim} x {fraction:g}) = {rotary_dim} "
                         "coordinates of each head: RoPE needs an even number >= 2")
    base = _rotary_base(cfg)
    eps = _positive_real(cfg, "layer_norm_eps", default=1e-5, allow_zero=True)
    parallel = cfg.get("use_parallel_residual", True)
    if not isinstance(parallel, bool):
        raise ValueError(f"config.use_parallel_residual must be true or false, got {parallel!r}")
    llama = {key: value for key, value in cfg.items() if key not in ("rope_parameters", "head_dim")}
    if isinstance(cfg.get("rope_parameters"), dict):  # its rope_type (scaling) stays for the LLaMA reader's note
        llama["rope_parameters"] = {key: value for key, value in cfg["rope_parameters"].items()
                                    if key not in ("partial_rotary_factor", "rope_theta")}
    llama.update(model_type="llama", hidden_act=cfg.get("hidden_act", "gelu"), rms_norm_eps=eps, rope_theta=base,
                 num_key_value_heads=heads)
    spec = standard_spec(llama, seq_len=seq_len, pixel_std=pixel_std)
    rotary = None if rotary_dim == head_dim else rotary_dim
    arch = _from_config("config.initializer_range", lambda: spec.architecture.replace(
        norm_type="layer", mlp="dense", block_form="parallel" if parallel else "sequential", rotary_dim=rotary,
        final_norm=True))
    settings = RunSettings(arch, spec.beta, spec.depth, spec.q0, spec.rho0)
    q0 = spec.q0
    share = f"{rotary_dim} of d_H = {head_dim} coordinates (rotary_pct = {fraction:g})"
    notes = _replace_notes(spec.assumptions, {
        "RMSNorm eps": (f"LayerNorm eps = {eps:g} against the embeddings' q0 = r^2 = {q0:.2g}: the first LayerNorm "
                        f"outputs q = {q0 / (q0 + eps):.4f}, not 1 (the engine's LayerNorm has no eps)") if eps > 0
        else None,
        "rotary position embeddings": (
            f"rotary positions (rotary_emb_base = {base:g}) turn {share}: the REM sees the mean rotary correlation "
            f"of the rotated part mixed with 1 for the unrotated part, cbar_T = {arch.mean_rope_correlation:.3f} "
            "(docs/theory.md section 15); the full-RoPE law overestimates Y2 where the tokens' cosine is high "
            "(rho >= 0.8)"),
    })
    block = ("use_parallel_residual = true: x + attention(LN1 x) + mlp(LN2 x); LN1 and LN2 are the same map at "
             "init (gain 1, shift 0), the theory's parallel block" if parallel else
             "use_parallel_residual = false: the sequential pre-LN block")
    std = pythia_init_std(width, spec.depth)
    pythia = (f"transformers' init N(0, initializer_range^2) is modelled; Pythia trained from the GPT-NeoX library's "
              f"small_init (std sqrt(2/(5d)) = {std['small_init']:.3g}) with wang_init on the residual output layers "
              f"(std 2/(L sqrt d) = {std['wang_init']:.3g}): not this report's init")
    fused = "fused query_key_value (d -> 3d): one N(0, r^2) matrix, entry by entry the law of separate q/k/v"
    return dataclasses.replace(spec, family="gpt_neox", settings=settings, config=cfg,
                               assumptions=(block, fused, pythia) + notes)

