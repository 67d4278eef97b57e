"""Decoder families read through the LLaMA reader: Phi-3, Gemma 2, OLMo 2 (and those rejected).

Each reader turns a Hugging Face configuration into a :class:`~remprop.theory.ModelSpec`
by reading it as a LLaMA-style decoder (:func:`~remprop.theory.models.hf_config.standard_spec`) and setting
what differs: fused projections (Phi-3), sandwich norms and soft-capped logits (Gemma 2),
norms inside the residual branch and QK-norm (OLMo 2); docs/theory.md section 19. The table
of readers (:data:`remprop.theory.models.readers.READERS`) names them.
"""
from __future__ import annotations

import dataclasses
import math

from .. import softcap
from ..settings import RunSettings
# the LLaMA reader and the field readers of the configuration reader this module extends
from .hf_config import _from_config, _get, _kv_heads, _positive_int, _positive_real, standard_spec
from .windows import window_note

__all__ = []


def _phi3_spec(cfg, *, seq_len=None, pixel_std=1.0):
    """Phi-3 (``model_type`` phi3): a LLaMA-style decoder whose projections are fused.

    ``Phi3PreTrainedModel`` draws the fused ``qkv_proj`` (``d -> (H + 2 H_kv) d_H``) and
    ``gate_up_proj`` (``d -> 2 d_ff``) from the same ``N(0, r^2)`` as separate projections, so
    every entry has the law of the LLaMA reader's (Abdin et al., "Phi-3 Technical Report",
    arXiv 2404.14219; the sizes of microsoft/Phi-3-mini-4k-instruct's config.json).
    """
    spec = standard_spec(dict(cfg, model_type="llama"), seq_len=seq_len, pixel_std=pixel_std)
    fused = ("fused qkv_proj and gate_up_proj: one N(0, r^2) matrix each, entry by entry the law of separate "
             "q/k/v and gate/up projections (the same maps)")
    partial = cfg.get("partial_rotary_factor")
    if partial is None and isinstance(cfg.get("rope_parameters"), dict):  # transformers >= 5 keeps it there
        partial = cfg["rope_parameters"].get("partial_rotary_factor")
    notes = (fused,)
    if partial not in (None, 1, 1.0):  # Phi3RotaryEmbedding: the first int(d_H f) coordinates turn, at b^(-2i/r)
        arch = spec.architecture
        rotary = int(arch.head_dim * partial) if isinstance(partial, (int, float)) and 0 < partial < 1 else 0
        if rotary < 2 or rotary % 2:
            raise ValueError(f"config.partial_rotary_factor must be in (0, 1] and turn an even number >= 2 of the "
                             f"{arch.head_dim} coordinates of a head, got {partial!r}")
        arch = arch.replace(rotary_dim=rotary)
        spec = dataclasses.replace(spec, settings=spec.settings.replace(arch=arch))
        notes += (f"partial_rotary_factor = {partial:g}: rotary positions turn {rotary} of d_H = {arch.head_dim} "
                  f"coordinates (rotary_dim), cbar_T = {arch.mean_rope_correlation:.3f} (docs/theory.md section 15)",)
    notes += tuple(note for note in [window_note(cfg, spec.seq_len)] if note)
    return dataclasses.replace(spec, family="phi3", config=cfg, assumptions=notes + spec.assumptions)


def _decoder_base(cfg, seq_len, pixel_std, **overrides):
    """The LLaMA-style reading of a decoder config whose heads need not split the width
    (``head_dim * heads != hidden_size``): ``(spec, heads, head_dim, width)``."""
    heads = _positive_int(cfg, "num_attention_heads")
    width = _positive_int(cfg, "hidden_size")
    head_dim = _positive_int(cfg, "head_dim", default=width // heads)
    base = dict(cfg, model_type="llama", **overrides)
    base.pop("head_dim", None)
    if width % heads:  # the LLaMA reader wants heads to split the width; its head_dim is replaced below
        base["num_attention_heads"] = 1
        base["num_key_value_heads"] = 1
    spec = standard_spec(base, seq_len=seq_len, pixel_std=pixel_std)
    return spec, heads, head_dim, width


def _replace_notes(notes, replaced):
    """``notes`` with those starting with a key of ``replaced`` swapped for its value (dropped for None)."""
    out = []
    for note in notes:
        key = next((k for k in replaced if note.startswith(k)), None)
        if key is None:
            out.append(note)
        elif replaced[key] is not None:
            out.append(replaced[key])
    return tuple(out)


def _gemma2_spec(cfg, *, seq_len=None, pixel_std=1.0):
    """Gemma 2 (``model_type`` gemma2): sandwich RMSNorms, GeGLU, soft-capped attention logits.

    ``Gemma2DecoderLayer``: ``x + post_attention_layernorm(attn(input_layernorm(x)))``, then
    ``x + post_feedforward_layernorm(mlp(pre_feedforward_layernorm(x)))``: ``norm="pre"``,
    ``branch_norm=True``; RMSNorm weights ``(1 + w)`` with ``w = 0`` at init (gain 1); the final
    ``norm``. Heads of width ``head_dim`` need not split the width (2B: 8 x 256 = 2048 against
    2304): queries, keys and values map ``d -> H d_H``, ``o_proj`` has fan-in ``H d_H``
    (``sigma_o2 = r^2 H d_H``). Scores over ``sqrt(query_pre_attn_scalar)`` (``S``):
    ``beta = r^2 d sqrt(d_H / S) / sqrt(log T)``. Embeddings are multiplied by ``sqrt(d)``:
    ``q0 = r^2 d``. ``attn_logit_softcapping`` is ``logit_softcap`` (checked against the theory's
    bound, docs/theory.md section 19); ``final_logit_softcapping`` acts on the output logits,
    after the stack. Sizes: google/gemma-2-2b's config.json (Gemma Team, arXiv 2408.00118).
    """
    activation = _get(cfg, "hidden_activation", "hidden_act", default="gelu_pytorch_tanh")
    spec, heads, head_dim, width = _decoder_base(cfg, seq_len, pixel_std, hidden_act=activation)
    r, arch = spec.init_range, spec.architecture
    scalar = _positive_real(cfg, "query_pre_attn_scalar", default=head_dim)
    cap = cfg.get("attn_logit_softcapping")
    source = "config.initializer_range"
    kv_heads = _kv_heads(cfg, heads)  # the config's own field, named itself
    new_arch = _from_config(source, lambda: arch.replace(
        heads=heads, kv_heads=kv_heads, head_dim=head_dim, sigma_o2=r * r * heads * head_dim,
        branch_norm=True, final_norm=True))
    beta = r * r * width * math.sqrt(head_dim / scalar) / math.sqrt(math.log(new_arch.seq_len))
    q0 = r * r * width
    if cap is not None:
        capped = new_arch.replace(logit_softcap=_positive_real(cfg, "attn_logit_softcapping"))
        try:
            softcap.check_logit_softcap(capped, beta)
        except ValueError as err:
            raise ValueError(f"config.attn_logit_softcapping: {err}") from None
        new_arch = capped
    settings = _from_config(source, lambda: RunSettings(new_arch, beta, spec.depth, q0, spec.rho0))
    eps = spec.layer_norm_eps
    notes = _replace_notes(spec.assumptions, {
        "RMSNorm eps": (f"RMSNorm eps = {eps:g} against the embeddings' q0 = r^2 d = {q0:.2g} (embeddings times "
                        f"sqrt(d)): the first RMSNorm outputs q = {q0 / (q0 + eps):.4f}, not 1")
                       if q0 / (q0 + eps) < 0.9999 else None,
        "the attention output projection": (
            f"the attention output projection W_O (fan-in H d_H = {heads * head_dim}) is modelled: it scales the "
            f"attention branch by sigma_o2 = {r * r * heads * head_dim:.4g}, before the branch's RMSNorm"),
    })
    extra = []
    if cap is not None:
        extra.append(f"attention logits soft-capped at {float(cap):g}: the theory's uncapped maps, whose Y2 the cap "
                     f"changes by at most {float(softcap.logit_softcap_change(new_arch, beta)):.2g} (relative) at this beta "
                     "(docs/theory.md section 19)")
    if cfg.get("final_logit_softcapping") is not None:
        extra.append(f"final_logit_softcapping = {cfg['final_logit_softcapping']:g} acts on the output logits, "
                     "after the stack: not part of the maps")
    if scalar != head_dim:
        extra.append(f"scores over sqrt(query_pre_attn_scalar = {scalar:g}) instead of sqrt(head_dim = {head_dim}): "
                     "in beta")
    extra += [note for note in [window_note(cfg, settings.arch.seq_len)] if note]
    return dataclasses.replace(spec, family="gemma2", settings=settings, config=cfg,
                               assumptions=tuple(extra) + notes)


def _olmo2_spec(cfg, *, seq_len=None, pixel_std=1.0):
    """OLMo 2 (``model_type`` olmo2): a norm after each branch inside the residual, and QK-norm.

    ``Olmo2DecoderLayer``: ``x + post_attention_layernorm(attn(x))``, then
    ``x + post_feedforward_layernorm(mlp(x))``, no norm before the branches: ``norm="none"``,
    ``branch_norm=True``; the final ``norm``. ``Olmo2Attention`` RMS-normalises the whole
    projected queries and keys (``q_norm`` over ``H d_H``, ``k_norm`` over ``H_kv d_H``):
    ``qk_norm=True``, ``qk_norm_dim = H d_H``, gain 1 at init; ``beta = 1`` (the normalised scores
    as initialised, whatever ``initializer_range``: docs/theory.md sections 16 and 19). SwiGLU,
    RoPE, no biases. Sizes: allenai/OLMo-2-0425-1B's config.json (Team OLMo, arXiv 2501.00656).
    """
    spec, heads, head_dim, width = _decoder_base(cfg, seq_len, pixel_std)
    arch = spec.architecture
    kv_heads = _kv_heads(cfg, heads)  # the config's own field, named itself
    new_arch = _from_config("config.initializer_range", lambda: arch.replace(
        norm="none", heads=heads, kv_heads=kv_heads, head_dim=head_dim, branch_norm=True,
        final_norm=True, qk_norm=True, qk_norm_dim=heads * head_dim))
    settings = RunSettings(new_arch, 1.0, spec.depth, spec.q0, spec.rho0)
    notes = (f"QK-norm over the full projections (n = H d_H = {heads * head_dim}): initializer_range does not enter "
             "the scores; beta = 1 is the normalised scores' own scale, the engine's beta axis multiplies them "
             "(docs/theory.md section 19)",
             "the cross-overlap of two attention rows is that of unnormalised queries and keys at the QK-normed "
             "reduced scale (exact as n -> infinity)")
    notes += _replace_notes(spec.assumptions, {"RMSNorm eps": None})
    return dataclasses.replace(spec, family="olmo2", settings=settings, config=cfg, assumptions=notes)


def _unsupported(feature):
    """A reader that rejects its family with one error naming the feature the engine lacks."""
    def reject(cfg, **_):
        raise ValueError(f"config.model_type = {cfg.get('model_type')!r} is not supported: {feature}")
    reject.refuses = True  # not listed among the families read (remprop.theory.models.readers.FAMILIES)
    return reject


#: Gemma 3 (``model_type`` gemma3_text): refused, naming what the engine does not read.
_gemma3_text_spec = _unsupported(
    "its per-head QK-norm scores over sqrt(query_pre_attn_scalar) are not read here (its local/global layer "
    "pattern is, remprop.theory.models.windows; the block form, pre + branch norms, and QK-norm are: "
    "Architecture(norm='pre', branch_norm=True, qk_norm=True), docs/theory.md section 19)")
