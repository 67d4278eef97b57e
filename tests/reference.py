"""Plain scalar reference of the signal-propagation maps (``math`` module only).

Written from the formulas of ``docs/theory.md`` (sections 3 to 5), independently of the
``remprop.theory`` source: no NumPy, no numba, one float at a time. The tests compare
the vectorised numba kernels and the component compositions with these functions to
1e-12; the benchmarks use them as the "authors' scalar code" baseline.

Order parameters of a token simplex: ``q`` (mean squared norm per coordinate) and
``p`` (mean overlap per coordinate of two distinct tokens), ``rho = p / q``.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333 (Result 1 and Sec. 4).
"""
import math

import mpmath

NORMS = ("post", "pre", "none")
ATTENTIONS = ("softmax", "gain-controlled")
ACTIVATIONS = ("relu", "linear")
#: Activations with a closed-form kernel here but outside the main kernel sweep.
EXTRA_ACTIVATIONS = ("erf",)


# --- attention as a Random Energy Model (docs/theory.md section 3) ------------------------
def beta_critical(q, p):
    """beta_c = sqrt(2 / (q (q - p))); infinite for fully collapsed tokens (p = q).

    Written sqrt(2) / (sqrt(q) sqrt(q - p)), as the library does, so that q (q - p) cannot
    overflow: the two forms differ by an ulp, which near-collapsed no-LN stacks amplify
    beyond the tests' 1e-12 through the next layers' q - p.
    """
    if q - p <= 0.0:
        return math.inf
    return math.sqrt(2.0) / (math.sqrt(q) * math.sqrt(q - p))


def participation_ratio(beta, q, p):
    """Asymptotic Y2: 0 below beta_c, 1 - beta_c / beta above (T -> infinity)."""
    beta_c = beta_critical(q, p)
    if beta <= beta_c:
        return 0.0
    return 1.0 - beta_c / beta


def softmax_attention(q, p, beta, sigma_v2, sigma_b2):
    """q_A = s_v^2 (p + (q - p) Y2) + s_b^2, p_A = s_v^2 p + s_b^2."""
    y2 = participation_ratio(beta, q, p)
    return sigma_v2 * (p + (q - p) * y2) + sigma_b2, sigma_v2 * p + sigma_b2


def gain_controlled_attention(q, p, beta, sigma_v2, sigma_b2):
    """T -> infinity limit of the centred attention: q_A = s_v^2 (q - p) Y2 + s_b^2, p_A = s_b^2."""
    y2 = participation_ratio(beta, q, p)
    return sigma_v2 * (q - p) * y2 + sigma_b2, sigma_b2


# --- skip connection, LayerNorm, MLP (docs/theory.md section 4) ------------------------------
def skip(q_branch, p_branch, q, p, alpha):
    """alpha x + F(x) with an independent branch: (q_F + alpha^2 q, p_F + alpha^2 p)."""
    return q_branch + alpha * alpha * q, p_branch + alpha * alpha * p


def layernorm(q, p):
    """LayerNorm without affine parameters: (1, p / q)."""
    return 1.0, p / q


def arccos_kernel(c):
    """f(c) = (sqrt(1 - c^2) + c (pi - arccos c)) / pi (Cho & Saul 2009, degree 1).

    Evaluated in 40-digit arithmetic (mpmath) and rounded once: the plain float formula
    loses ``eps / sqrt(1 - c)`` near ``c = 1`` (cancellation in ``1 - c^2`` and ``arccos``),
    which near-collapsed tokens amplify (``beta_c ~ 1 / sqrt(q - p)``).
    """
    c = mpmath.mpf(min(1.0, max(-1.0, c)))
    with mpmath.workdps(40):
        return float((mpmath.sqrt(1 - c * c) + c * (mpmath.pi - mpmath.acos(c))) / mpmath.pi)


def relu_second_moments(q1, p1):
    """(E[relu(u)^2], E[relu(u) relu(v)]) for a centred pair, Var = q1, Cov = p1."""
    return q1 / 2.0, (q1 / 2.0) * arccos_kernel(p1 / q1)


def erf_second_moments(q1, p1):
    """(E[erf(u)^2], E[erf(u) erf(v)]) = (2/pi) arcsin(2 (q1, p1) / (1 + 2 q1)) (Williams 1997)."""
    return (2.0 / math.pi) * math.asin(2.0 * q1 / (1.0 + 2.0 * q1)), \
        (2.0 / math.pi) * math.asin(2.0 * p1 / (1.0 + 2.0 * q1))


def mlp(q, p, sigma_w2, sigma_b2, activation):
    """Two-layer MLP W2 phi(W1 x + b1) + b2 with W ~ N(0, s_w^2/d), b ~ N(0, s_b^2)."""
    q1 = sigma_w2 * q + sigma_b2
    p1 = sigma_w2 * p + sigma_b2
    if activation == "relu":
        m_uu, m_uv = relu_second_moments(q1, p1)
    elif activation == "linear":
        m_uu, m_uv = q1, p1
    elif activation == "erf":
        m_uu, m_uv = erf_second_moments(q1, p1)
    else:
        raise ValueError(f"activation must be 'relu', 'linear' or 'erf', got {activation!r}")
    return sigma_w2 * m_uu + sigma_b2, sigma_w2 * m_uv + sigma_b2


# --- block orders (docs/theory.md section 5) -----------------------------------------------
def block(norm, attention, activation, q, p, beta, sigma_w2, sigma_b2, sigma_v2,
          alpha_sa, alpha_mlp):
    """One transformer block; returns (q', p', beta_c of the attention's input).

    post: x <- LN(alpha_sa x + SA(x));    x <- LN(alpha_mlp x + MLP(x))
    pre:  x <- alpha_sa x + SA(LN(x));    x <- alpha_mlp x + MLP(LN(x))
    none: x <- alpha_sa x + SA(x);        x <- alpha_mlp x + MLP(x)
    """
    if attention == "softmax":
        attend = softmax_attention
    elif attention == "gain-controlled":
        attend = gain_controlled_attention
    else:
        raise ValueError(f"attention must be 'softmax' or 'gain-controlled', got {attention!r}")
    if norm not in NORMS:
        raise ValueError(f"norm must be one of {NORMS}, got {norm!r}")

    # attention sub-block
    q_in, p_in = layernorm(q, p) if norm == "pre" else (q, p)
    beta_c = beta_critical(q_in, p_in)
    q_f, p_f = attend(q_in, p_in, beta, sigma_v2, sigma_b2)
    q, p = skip(q_f, p_f, q, p, alpha_sa)
    if norm == "post":
        q, p = layernorm(q, p)
    # MLP sub-block
    q_in, p_in = layernorm(q, p) if norm == "pre" else (q, p)
    q_f, p_f = mlp(q_in, p_in, sigma_w2, sigma_b2, activation)
    q, p = skip(q_f, p_f, q, p, alpha_mlp)
    if norm == "post":
        q, p = layernorm(q, p)
    return q, p, beta_c


def propagate(norm, attention, activation, beta, depth, q0=1.0, rho0=0.0, sigma_w2=0.2,
              sigma_b2=4e-4, sigma_v2=0.2, alpha_sa=1.0, alpha_mlp=1.0):
    """Lists q, p (length depth + 1, index 0 = input) and beta_c per layer (length depth)."""
    q, p = q0, q0 * rho0
    qs, ps, beta_cs = [q], [p], []
    for _ in range(depth):
        q, p, beta_c = block(norm, attention, activation, q, p, beta, sigma_w2, sigma_b2,
                             sigma_v2, alpha_sa, alpha_mlp)
        qs.append(q)
        ps.append(p)
        beta_cs.append(beta_c)
    return qs, ps, beta_cs


def final_state(norm, attention, activation, beta, depth, q0=1.0, rho0=0.0, **fields):
    """dict with the final q, p, rho and the first and smallest beta_c over layers."""
    qs, ps, beta_cs = propagate(norm, attention, activation, beta, depth, q0, rho0, **fields)
    return {"q": qs[-1], "p": ps[-1], "rho": ps[-1] / qs[-1],
            "beta_critical_first": beta_cs[0], "beta_critical_min": min(beta_cs)}
