"""The numbers behind the theory figures (no plotting): one attention layer over
(beta, input cosine) (Figs. 2 and 5), and the cosine over depth for the four LayerNorm
placements (Fig. 4). The figures that draw them are in :mod:`remprop.diagrams.theory_figures`;
docs/theory.md section 9 lists the settings."""
from __future__ import annotations

import numpy as np

from remprop.theory import Architecture, RunSettings, participation_ratio, softmax_attention_map
from remprop.theory.checks import as_float_array, check_choice, check_grid_axis, check_real_scalar

__all__ = ["attention_phase_data", "layernorm_placement_data", "LAYERNORM_VARIANTS", "LAYERNORM_REFERENCE_RUN"]

#: The four stacks of the LayerNorm-placement comparison: (norm, attention).
LAYERNORM_VARIANTS = {
    "post-LN": ("post", "softmax"),
    "pre-LN": ("pre", "softmax"),
    "post-LN, gain-controlled": ("post", "gain-controlled"),
    "pre-LN, gain-controlled": ("pre", "gain-controlled"),
}


def attention_phase_data(betas=None, input_cosines=None, *, sigma_v2=1.0, sigma_b2=0.0, q=1.0,
                         y2_cosines=(0.0, 0.5, 0.8, 0.95)) -> dict:
    r"""Output cosine and participation ratio of one softmax attention layer.

    For input tokens with mean squared norm ``q`` and mean cosine ``rho`` (``p = rho q``),
    attention alone (values, value bias; no skip, no LayerNorm; T -> infinity) gives

    .. math::
        \rho_A = \frac{p_A}{q_A}
               = \frac{\sigma_v^2 p + \sigma_b^2}{\sigma_v^2 (p + (q - p) Y_2) + \sigma_b^2},
        \qquad Y_2 = \max\left(0, 1 - \beta_c / \beta\right),\quad
        \beta_c = \sqrt{2 / (q (q - p))}.

    Below ``beta_c`` (``Y2 = 0``) every output token is the mean token and ``rho_A = 1``.
    Without a value bias the output at ``rho = 0`` below ``beta_c`` vanishes
    (``q_A = 0``) and ``rho_A`` is set to its limit ``rho -> 0+``, which is 1.

    Parameters
    ----------
    betas : array_like, optional
        1-d query/key scales, > 0 (default 300 points from 0.05 to 4).
    input_cosines : array_like, optional
        1-d input cosines in [0, 1) (default 300 points from 0 to 0.99).
    sigma_v2, sigma_b2 : float
        Value weight and value bias variances (default 1 and 0).
    q : float
        Input mean squared norm, > 0.
    y2_cosines : sequence of float
        Input cosines of the ``Y2``-against-beta curves.

    Returns
    -------
    dict
        ``betas``, ``input_cosines``, ``output_cosine`` (shape (len(input_cosines),
        len(betas))), ``beta_critical`` (per input cosine), ``y2_cosines``, ``y2``
        (shape (len(y2_cosines), len(betas))), ``y2_beta_critical``, and the settings.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 2 and Result 1; docs/theory.md section 3.
    """
    betas = check_grid_axis("betas", np.linspace(0.05, 4.0, 300) if betas is None else betas, positive=True)
    input_cosines = check_grid_axis("input_cosines", np.linspace(0.0, 0.99, 300) if input_cosines is None
                          else input_cosines, low=0.0, high=1.0)
    y2_cosines = check_grid_axis("y2_cosines", y2_cosines, low=0.0, high=1.0)
    sigma_v2 = float(as_float_array("sigma_v2", check_real_scalar("sigma_v2", sigma_v2), nonnegative=True))
    sigma_b2 = float(as_float_array("sigma_b2", check_real_scalar("sigma_b2", sigma_b2), nonnegative=True))
    q = check_real_scalar("q", q)
    if not q > 0:
        raise ValueError(f"q must be > 0, got {q!r}")
    p = q * input_cosines[:, None]
    q_out, p_out = softmax_attention_map(betas[None, :], q=q, p=p, sigma_v2=sigma_v2, sigma_b2=sigma_b2)
    with np.errstate(invalid="ignore", divide="ignore"):
        cosine = np.where(q_out > 0, p_out / np.where(q_out > 0, q_out, 1.0), 1.0)
        beta_c = np.sqrt(2.0 / (q * (q - q * input_cosines)))
        y2_beta_c = np.sqrt(2.0 / (q * (q - q * y2_cosines)))
    y2 = participation_ratio(betas[None, :], q, q * y2_cosines[:, None])
    return {
        "betas": betas, "input_cosines": input_cosines, "output_cosine": np.asarray(cosine),
        "beta_critical": beta_c, "y2_cosines": y2_cosines, "y2": np.asarray(y2),
        "y2_beta_critical": y2_beta_c, "sigma_v2": sigma_v2, "sigma_b2": sigma_b2, "q": q,
    }


#: The run of the reference figure (docs/theory.md section 9, Fig. 4): ReLU MLPs with
#: ``sigma_w2 = 0.2`` and biases ``sigma_b2 = 0.02**2``, values ``sigma_v2 = 1``, alphas 1,
#: ``beta = 0.1``, 100 blocks, input ``q0 = 1``, ``rho0 = 0.2``; the norm placement and the
#: attention are each variant's (:data:`LAYERNORM_VARIANTS`).
LAYERNORM_REFERENCE_RUN = RunSettings(Architecture(sigma_w2=0.2, sigma_b2=0.02 ** 2, sigma_v2=1.0), beta=0.1,
                                      depth=100, q0=1.0, rho0=0.2)


def layernorm_placement_data(run: RunSettings | None = None, *, sigma_bv2=0.0) -> dict:
    r"""Mean cosine over depth for post-LN, pre-LN and their gain-controlled versions.

    Blocks (``x`` the residual stream, the REM attention of ``run.arch``: ``T -> infinity``
    unless ``run.arch.seq_len`` is set):

    * post-LN: ``x <- LN(alpha_sa x + SA(x)); x <- LN(alpha_mlp x + MLP(x))``
    * pre-LN: ``x <- alpha_sa x + SA(LN(x)); x <- alpha_mlp x + MLP(LN(x))``
    * gain-controlled: SA replaced by its centred version
      (:math:`q_A = \sigma_v^2 (q - p) Y_2 + \sigma_{bv}^2`, :math:`p_A = \sigma_{bv}^2`).

    The default run is the reference figure's (:data:`LAYERNORM_REFERENCE_RUN`,
    docs/theory.md section 9, Fig. 4): ``sigma_w2 = 0.2``, ``sigma_b2 = 0.02**2``,
    ``sigma_v2 = 1``, alphas 1, ``beta = 0.1``, ``rho0 = 0.2``, ``q0 = 1``, with *no bias on
    the values*. :class:`~remprop.theory.Architecture` has a single ``sigma_b2`` for every
    bias, so these stacks are composed from the public component maps
    (:mod:`remprop.theory.components`) with the MLP biases at ``sigma_b2`` and the value bias
    at ``sigma_bv2`` (default 0). With ``sigma_bv2 == sigma_b2`` they coincide with
    :func:`remprop.theory.propagate` of the corresponding Architecture.

    At ``beta = 0.1`` attention is in its spread phase (``Y2 = 0`` for T -> infinity), so
    without a value bias the centred attention outputs nothing and the gain-controlled
    stacks are driven by the MLPs alone; the finite-T participation ratio (a later
    extension of the theory) would add a small decorrelating branch.

    Parameters
    ----------
    run : remprop.theory.RunSettings, optional
        The architecture (its ``norm`` and ``attention`` replaced by each variant's; scalar
        variances and skip strengths, ``activation`` "relu" or "linear"), a scalar ``beta``,
        the depth and the input state ``(q0, rho0)``. Default :data:`LAYERNORM_REFERENCE_RUN`.
    sigma_bv2 : float
        Value bias variance, >= 0.

    Returns
    -------
    dict
        ``layers`` (0..depth), ``rho`` and ``q``: dicts variant -> array of length
        depth + 1, and ``settings`` (beta, the variances and skip strengths, ``sigma_bv2``,
        q0, rho0, activation and depth).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 4; docs/theory.md sections 5 and 9.
    """
    run = LAYERNORM_REFERENCE_RUN if run is None else run
    if not isinstance(run, RunSettings):
        raise ValueError(f"run must be a remprop.theory.RunSettings, got {type(run).__name__}")
    arch = run.arch
    check_choice("activation", arch.activation, ("relu", "linear"))
    settings = {"beta": check_real_scalar("beta", run.beta)}
    for name in ("sigma_w2", "sigma_b2"):
        settings[name] = check_real_scalar(name, getattr(arch, name))
    settings["sigma_bv2"] = float(as_float_array("sigma_bv2", check_real_scalar("sigma_bv2", sigma_bv2),
                                                 nonnegative=True))
    for name in ("sigma_v2", "alpha_sa", "alpha_mlp"):
        settings[name] = check_real_scalar(name, getattr(arch, name))
    settings.update(q0=run.q0, rho0=run.rho0, activation=arch.activation, depth=run.depth)
    rho, q = {}, {}
    for name, (norm, attention) in LAYERNORM_VARIANTS.items():
        block = arch.replace(norm=norm, attention=attention).block(settings["beta"], sigma_bv2=settings["sigma_bv2"])
        qs, ps = np.empty(run.depth + 1), np.empty(run.depth + 1)
        qs[0], ps[0] = run.q0, run.p0
        for layer in range(run.depth):
            qs[layer + 1], ps[layer + 1] = block(qs[layer], ps[layer])
        q[name], rho[name] = qs, ps / qs
    return {"layers": np.arange(run.depth + 1), "rho": rho, "q": q, "settings": settings}
