r"""Finite sequence length: the trainability boundary and the participation ratio at finite T.

* :func:`finite_size_boundary_data` -- the minimum residual strength :math:`\alpha^*(\beta)`
  of a depth-L stack with the T -> infinity attention maps and with the exact finite-T
  ones (:mod:`remprop.theory.rem.finite_t`), plus ``Y2(beta)`` at each T;
* :func:`finite_size_boundary_figure` -- both, side by side.

With T -> infinity, ``Y2 = 0`` below ``beta_c`` and :math:`\alpha^*` does not depend on
beta there (a flat boundary); at finite T the attention rows keep a beta-dependent
self-overlap (``Y2 ~ T^{-(1 - 2 beta^2/beta_c^2)}`` below ``beta_c/2``, large between
``beta_c/2`` and ``beta_c``), and the boundary curves down as beta grows.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333 (Fig. 1(c), Fig. 5); THEORY.md
sections 3 and 6.
"""
from __future__ import annotations

import numpy as np

from remprop.theory import Architecture, _kernels, participation_ratio
from remprop.theory.checks import as_float_array, check_depth, check_open_unit
from remprop.theory.rem.finite_t import check_seq_len
from remprop.theory.propagation import CHUNK_ROWS, pack_parameters

from .residual_strength import DEFAULT_THRESHOLD
from .style import new_figure

__all__ = ["finite_size_boundary_data", "finite_size_boundary_figure"]

#: Line colours per sequence length (dark to light with growing T); asymptotic in black.
_COLOURS = ("#08306b", "#2171b5", "#6baed6", "#9ecae1", "#c6dbef")


def _min_alpha(arch, betas, depth, threshold, alpha_max, tol, seq_len):
    shape, size, rows = pack_parameters(arch.replace(alpha_sa=0.0), betas)
    out = np.empty(size)
    for start in range(0, size, CHUNK_ROWS):
        stop = min(size, start + CHUNK_ROWS)
        out[start:stop] = _kernels.min_alpha_bisection(*arch.codes, rows(start, stop), depth, threshold,
                                                       alpha_max, tol, seq_len=seq_len)
    return out.reshape(shape)


def finite_size_boundary_data(arch=None, depth=60, betas=None, seq_lens=(128, 512, 4096), *,
                              threshold=DEFAULT_THRESHOLD, alpha_max=10.0, tol=1e-5):
    r"""The minimum residual strength against beta, T -> infinity and at finite T.

    .. math:: \alpha^*(\beta) = \min\{\alpha_{SA} \ge 0 : \rho_L(\alpha_{SA}) \le t\}

    computed by the lock-step bisection kernel
    (:func:`remprop.theory._kernels.min_alpha_bisection`, softmax attention: the final
    cosine decreases with alpha_sa).

    Parameters
    ----------
    arch : Architecture, optional
        The stack (its ``alpha_sa`` and ``seq_len`` are ignored); default BERT defaults.
    depth : int
        Number of blocks L.
    betas : array_like, optional
        Query/key scales (default 120 values from 0.05 to 3).
    seq_lens : sequence of int
        Finite sequence lengths T >= 2.
    threshold : float
        Rank-collapse threshold on the final cosine, in (0, 1).
    alpha_max, tol : float
        Search interval ``[0, alpha_max]`` and final bracket width.

    Returns
    -------
    dict
        ``betas``, ``asymptotic`` (alpha*), ``finite`` (dict T -> alpha*), ``y2_asymptotic``,
        ``y2`` (dict T -> Y2 at q = 1, p = 0), ``beta_critical`` (sqrt 2 for unit
        orthogonal inputs), ``depth``, ``threshold``.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333; THEORY.md section 6.
    """
    arch = Architecture() if arch is None else arch
    if not isinstance(arch, Architecture):
        raise ValueError(f"arch must be a remprop.theory.Architecture, got {type(arch).__name__}")
    if arch.attention != "softmax":
        raise ValueError("arch must have softmax attention (the bisection needs a monotone final cosine)")
    depth = check_depth(depth)
    threshold = check_open_unit("threshold", threshold)
    betas = np.linspace(0.05, 3.0, 120) if betas is None else as_float_array("betas", betas, positive=True)
    seq_lens = tuple(check_seq_len(t, "seq_lens", allow_none=False) for t in seq_lens)
    base = arch.replace(seq_len=None)
    finite, y2 = {}, {}
    for seq_len in seq_lens:
        finite[seq_len] = _min_alpha(base, betas, depth, threshold, alpha_max, tol, seq_len)
        y2[seq_len] = participation_ratio(betas, 1.0, 0.0, seq_len=seq_len)
    return {
        "betas": betas,
        "asymptotic": _min_alpha(base, betas, depth, threshold, alpha_max, tol, None),
        "finite": finite,
        "y2_asymptotic": participation_ratio(betas, 1.0, 0.0),
        "y2": y2,
        "beta_critical": float(np.sqrt(2.0)),
        "depth": depth,
        "threshold": threshold,
        "arch": base,
    }


def finite_size_boundary_figure(data=None, **settings):
    r"""Trainability boundary and participation ratio, T -> infinity against finite T.

    Left: :math:`\alpha^*(\beta)` (the smallest attention skip strength that keeps the
    final mean cosine below the threshold) for the asymptotic maps (flat below
    :math:`\beta_c`) and for each finite T (curved). Above the dashed line
    :math:`\beta_c = \sqrt 2` the first attention layer is entropy-collapsed whatever
    alpha. Right: ``Y2`` against beta for unit orthogonal tokens; dotted, the annealed law
    :math:`T^{-(1 - \beta^2)}` (= :math:`T^{-(1 - 2\beta^2/\beta_c^2)}`) below
    :math:`\beta_c/2`.

    Parameters
    ----------
    data : dict, optional
        From :func:`finite_size_boundary_data`; computed with ``settings`` otherwise.

    Returns
    -------
    matplotlib.figure.Figure

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(c) and Fig. 5.
    """
    if data is None:
        data = finite_size_boundary_data(**settings)
    betas, beta_c = data["betas"], data["beta_critical"]
    fig = new_figure(11.0, 4.4)
    left, right = fig.subplots(1, 2)
    left.plot(betas, data["asymptotic"], color="black", linewidth=2.2, label=r"$T \to \infty$")
    for colour, (seq_len, alpha) in zip(_COLOURS, data["finite"].items()):
        left.plot(betas, alpha, color=colour, linewidth=1.8, label=f"T = {seq_len}")
    left.axvline(beta_c, color="black", linestyle="--", linewidth=1.2)
    left.text(beta_c + 0.03, 0.04, r"$\beta_c = \sqrt{2}$: entropy collapse beyond",
              transform=left.get_xaxis_transform(), va="bottom", fontsize=8)
    left.set_xlabel(r"query/key scale $\beta$")
    left.set_ylabel(r"minimum skip strength $\alpha^*_{SA}$")
    norm = {"post": "post-LN", "pre": "pre-LN", "none": "no LN"}[data["arch"].norm]
    left.set_title(f"{norm}, {data['arch'].activation}, L = {data['depth']}: rank collapse "
                   f"(final cosine > {data['threshold']:g}) below the curves", fontsize=9)
    left.set_xlim(betas.min(), betas.max())
    curves = np.concatenate([data["asymptotic"], *data["finite"].values()])
    curves = curves[np.isfinite(curves)]
    if curves.size:
        span = max(curves.max() - curves.min(), 0.05)
        left.set_ylim(curves.min() - 0.35 * span, curves.max() + 0.15 * span)
    left.legend(fontsize=8, loc="lower left")
    right.plot(betas, data["y2_asymptotic"], color="black", linewidth=2.2,
               label=r"$T \to \infty$: $\max(0, 1 - \beta_c/\beta)$")
    for colour, (seq_len, y2) in zip(_COLOURS, data["y2"].items()):
        right.plot(betas, y2, color=colour, linewidth=1.8, label=f"T = {seq_len} (exact)")
        low = betas < beta_c / 2
        right.plot(betas[low], float(seq_len) ** -(1 - betas[low] ** 2), color=colour, linestyle=":",
                   linewidth=1.4)
    right.plot([], [], color="grey", linestyle=":", label=r"annealed $T^{-(1-2\beta^2/\beta_c^2)}$")
    for x, name in ((beta_c / 2, r"$\beta_c/2$"), (beta_c, r"$\beta_c$")):
        right.axvline(x, color="grey", linestyle="--", linewidth=1.0)
        right.text(x + 0.03, 0.03, name, transform=right.get_xaxis_transform(), ha="left", fontsize=9)
    right.set_yscale("log")
    right.set_ylim(1e-4, 1.0)
    right.set_xlim(betas.min(), betas.max())
    right.set_xlabel(r"query/key scale $\beta$")
    right.set_ylabel(r"participation ratio $Y_2 = \langle \sum_j a_{ij}^2 \rangle$")
    right.set_title("attention self-overlap, q = 1, p = 0", fontsize=9)
    right.legend(fontsize=7, loc="lower right", framealpha=0.95)
    return fig
