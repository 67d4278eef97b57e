r"""What differs, family by family, when measured weights become the theory's parameters.

:func:`~remprop.theory.models.measured_weights.measured_spec` maps the measured scales through
the rules every family shares (:func:`~remprop.theory.models.measured_weights.weight_parameters`,
:func:`~remprop.theory.models.measured_weights.input_state`); :func:`family_parameters` then
applies what one family's forward does on top, the same facts its configuration reader
(:mod:`.decoder_families`, :func:`~remprop.theory.models.hf_config.standard_spec`) applies at
the default init:

* **Gemma 2**: scores over ``sqrt(query_pre_attn_scalar)``, ``beta`` times ``sqrt(d_H / S)``;
  word embeddings times ``sqrt(d)``, ``q0`` times ``d``. (Its ``1 + w`` norm gains are read as
  such by the torch side.)
* **QK-norm** (OLMo 2): the query and key matrices drop out of the scores; the gains of the
  ``q_norm`` and ``k_norm`` RMSNorms do: ``qk_norm_gain = (g_q^2 g_k^2)^{1/4}`` (mean squares), and
  ``beta`` stays the normalised scores' own 1.
* **Branch gains** ``c^2`` (the mean squared gain of a norm after the branch, times that of a
  LayerScale ``lambda``): without a norm after the branch, ``x + c F(x)`` scales the branch's
  output variance, ``sigma_o2 c_A^2`` and ``sigma_w2_out c_M^2`` (exact: both are linear in the
  branch's last matrix). With one (``branch_norm``), the branch's output norm is fixed and
  ``x + c_A N(A(x)); x + c_M N(M(x))`` is, on ``z = x / c_M``, the engine's
  ``alpha_sa z + N(A(z)); alpha_mlp z + N(M(z))`` with ``alpha_sa = c_M / c_A``,
  ``alpha_mlp = c_A / c_M`` and ``q0 / c_M^2`` -- exact when each branch reads a normalised input
  (pre-norm: Gemma 2), and where it does not (OLMo 2's MLP reads the raw stream) its input is
  ``1 / c_M`` of the model's: noted.

A block described by hand (plain PyTorch, a user's own block) has the configuration
:func:`~remprop.theory.models.module_spec.module_spec` (``family = "module"``).

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333; docs/theory.md sections 5 and 19;
docs/real_models.md section 6; Touvron et al. 2021 (CaiT: LayerScale).
"""
from __future__ import annotations

import math


__all__ = ["family_parameters", "MODULE_FAMILY", "BRANCH_GAIN_ROLES"]

#: The ``family`` of a :func:`~remprop.theory.models.module_spec.module_spec` (a model without a
#: Hugging Face configuration).
MODULE_FAMILY = "module"
#: Gain roles on a branch's output: (norm after the branch, LayerScale) of the attention and of the MLP.
BRANCH_GAIN_ROLES = {"attention": ("attention_branch", "attention_scale"), "mlp": ("mlp_branch", "mlp_scale")}


def _branch_gain2(weights, branch) -> float:
    """``c^2`` of a branch: the product of the mean squared gains on its output (1: none)."""
    norm, scale = BRANCH_GAIN_ROLES[branch]
    return weights.gain2(norm) * weights.gain2(scale)


def family_parameters(spec, weights, params, beta, q0, rho0):
    """The parameters of ``spec``'s family from measured weights (module docstring).

    Parameters
    ----------
    spec : ModelSpec
        The configuration's spec (its architecture and family).
    weights : MeasuredWeights
    params : dict
        The shared rules' ``sigma_v2``, ``sigma_o2``, ``sigma_w2``, ``sigma_w2_out``, ``sigma_b2``.
    beta, q0, rho0 : float
        The shared rules' query/key scale and input state.

    Returns
    -------
    (dict, float, float, float, tuple)
        Architecture fields to set, beta, q0, rho0 and notes for the assumptions.
    """
    arch = spec.architecture
    params = dict(params)
    notes = []
    if spec.family == "gemma2":
        head_dim = arch.head_dim
        scalar = float(spec.config.get("query_pre_attn_scalar") or head_dim)
        beta = beta * math.sqrt(head_dim / scalar)
        q0 = q0 * spec.width
        notes.append(f"Gemma 2: scores over sqrt(query_pre_attn_scalar = {scalar:g}), word embeddings times "
                     f"sqrt(d) = {math.sqrt(spec.width):.4g} (q0 times d)")
    if arch.qk_norm:
        gq, gk = weights.gain2("query_norm"), weights.gain2("key_norm")
        params["qk_norm_gain"] = (gq * gk) ** 0.25
        beta = spec.beta  # the normalised scores' own scale; the weights of W_Q, W_K drop out
        notes.append(f"QK-norm: the query/key matrices drop out of the scores; the q_norm and k_norm gains "
                     f"(mean squares {gq:.4g}, {gk:.4g}) give qk_norm_gain = {params['qk_norm_gain']:.4g}")
    ca, cm = _branch_gain2(weights, "attention"), _branch_gain2(weights, "mlp")
    measured = any(role in weights.gains for pair in BRANCH_GAIN_ROLES.values() for role in pair)
    if arch.branch_norm:
        params["alpha_sa"], params["alpha_mlp"] = math.sqrt(cm / ca), math.sqrt(ca / cm)
        q0 = q0 / cm
        if measured:
            notes.append(f"branch gains after the branch norms (mean squares: attention {ca:.4g}, MLP {cm:.4g}): "
                         f"skips alpha_sa = {params['alpha_sa']:.4g}, alpha_mlp = {params['alpha_mlp']:.4g} on the "
                         f"stream x / c_MLP (q0 / {cm:.4g})" + (
                             "" if arch.norm.normalises_branch_inputs or abs(cm - 1) < 1e-12 else
                             "; the MLP reads the raw stream, here 1 / c_MLP of the model's (not exact)"))
    elif measured:
        params["sigma_o2"] = params["sigma_o2"] * ca
        params["sigma_w2_out"] = params["sigma_w2_out"] * cm
        notes.append(f"branch gains (LayerScale, mean squares: attention {ca:.4g}, MLP {cm:.4g}) scale the branches' "
                     f"outputs: sigma_o2 = {params['sigma_o2']:.4g}, sigma_w2_out = {params['sigma_w2_out']:.4g}")
    return params, beta, q0, rho0, tuple(notes)
