r"""Per-layer pictures of probed models in the style of muP's ``coord_check``, theory overlaid.

:func:`probe_figure` draws, for one or several probed forward passes (models of several
widths or depths, :func:`remprop.validation.probe`), the mean squared token norm

.. math:: q_\ell = \frac1n \sum_i \frac{x_i \cdot x_i}{d}

and the token cosine :math:`\rho_\ell = p_\ell / q_\ell` against the layer :math:`\ell`
(mean over the sequences of the batch, error bars their standard deviation), one colour and
marker per model, with the theory's :math:`q_\ell` and :math:`\rho_\ell` (lines with ``gid="theory"``; a
:class:`~remprop.theory.Trajectory` of :func:`~remprop.theory.propagate`, docs/theory.md
section 5) drawn as lines over them. Where the curves of growing widths close in on the
theory line, the mean-field description holds; where they drift with the width, it does not.
Nothing here imports torch: a trace is anything with ``q`` and ``rho`` arrays of shape
``(batch, L + 1)``.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333; G. Yang et al., "Tensor Programs V",
arXiv 2203.03466 (the coord_check picture).
"""
from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from .style import CURVE_MARKERS, curve_colours, new_figure

__all__ = ["probe_figure"]

#: A q axis whose values span more than this ratio is drawn logarithmic.
_LOG_Q_RATIO = 20.0


def _as_mapping(value, name):
    if value is None:
        return {}
    if isinstance(value, Mapping):
        return {str(label): item for label, item in value.items()}
    return {name: value}


def _per_layer(trace, field, label):
    """``field`` of a trace as (mean, std) over its batch, per layer."""
    values = np.asarray(getattr(trace, field), dtype=float)
    if values.ndim == 1:
        values = values[None, :]
    if values.ndim != 2 or values.shape[1] < 1:
        raise ValueError(f"traces[{label!r}].{field} must have shape (batch, L + 1), got {values.shape}")
    return values.mean(axis=0), values.std(axis=0)


def probe_figure(traces, theory=None, *, axes=None, title=None):
    r"""q and the token cosine per layer of probed models, the theory's lines over them.

    Parameters
    ----------
    traces : ProbeTrace or mapping of str to ProbeTrace
        One probed forward pass, or several keyed by their legend label (say ``"d = 64"``,
        ``"d = 256"``: a coord_check across widths, or across depths). Anything with arrays
        ``q`` and ``rho`` of shape ``(batch, L + 1)`` (layer 0: the stream entering block 1)
        will do: :class:`~remprop.validation.ProbeTrace`, :class:`~remprop.validation.StackTrace`.
    theory : Trajectory or mapping of str to Trajectory, optional
        The theory's ``q`` and ``rho`` per layer (shape ``(L + 1,)``), e.g.
        ``propagate(arch, beta, depth, q0=trace.q[:, 0].mean(), rho0=trace.rho[:, 0].mean())``
        started from the probed input. One trajectory is drawn as one black dashed line; a
        mapping with the labels of ``traces`` draws each model's theory in its colour
        (depths that differ, or a finite-width theory per width).
    axes : pair of matplotlib Axes, optional
        Axes to draw into (q, cosine), e.g. those of an earlier call: the new traces take the
        next colours and markers. A new figure when omitted.
    title : str, optional
        Figure title.

    Returns
    -------
    matplotlib.figure.Figure

    Raises
    ------
    ValueError
        ``traces`` is empty, an array has the wrong shape, or ``axes`` is not two Axes.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333; Yang et al., arXiv 2203.03466 (coord_check).
    """
    traces = _as_mapping(traces, "probe")
    if not traces:
        raise ValueError("traces must hold at least one trace")
    theories = _as_mapping(theory, "theory")
    if axes is None:
        figure = new_figure(10.0, 4.4)
        axes = figure.subplots(1, 2)
    else:
        axes = list(axes)
        if len(axes) != 2:
            raise ValueError(f"axes must be two Axes (q, cosine), got {len(axes)}")
        figure = axes[0].figure
    q_ax, rho_ax = axes
    first = len(q_ax.containers)  # traces drawn by earlier calls: take the next styles
    palette = curve_colours(len(CURVE_MARKERS))
    q_values = []
    for k, (label, trace) in enumerate(traces.items(), start=first):
        colour, marker = palette[k % len(palette)], CURVE_MARKERS[k % len(CURVE_MARKERS)]
        for ax, field in ((q_ax, "q"), (rho_ax, "rho")):
            mean, std = _per_layer(trace, field, label)
            layers = np.arange(mean.size)
            ax.errorbar(layers, mean, yerr=std, fmt=marker, markersize=5, color=colour, markerfacecolor="white",
                        capsize=2, linestyle="none", label=label, zorder=3)
            if field == "q":
                q_values.append(mean)
            own = theories.get(label)
            if own is not None:
                values = np.asarray(getattr(own, field), dtype=float)
                ax.plot(np.arange(values.size), values, color=colour, linewidth=1.6, zorder=2, gid="theory")
                if field == "q":
                    q_values.append(values)
    shared = [trajectory for label, trajectory in theories.items() if label not in traces]
    for trajectory in shared:
        for ax, field in ((q_ax, "q"), (rho_ax, "rho")):
            values = np.asarray(getattr(trajectory, field), dtype=float)
            ax.plot(np.arange(values.size), values, color="black", linestyle="--", linewidth=1.6, zorder=2,
                    label="theory", gid="theory")
            if field == "q":
                q_values.append(values)
    if any(label in traces for label in theories):
        rho_ax.plot([], [], color="0.3", linewidth=1.6, label="theory (line in each colour)")
    finite = np.concatenate([v[np.isfinite(v) & (v > 0)] for v in q_values]) if q_values else np.array([])
    if finite.size and finite.max() > _LOG_Q_RATIO * finite.min():
        q_ax.set_yscale("log")
    q_ax.set_xlabel(r"layer $\ell$")
    q_ax.set_ylabel(r"mean squared token norm $q_\ell$")
    rho_ax.set_xlabel(r"layer $\ell$")
    rho_ax.set_ylabel(r"token cosine $\rho_\ell = p_\ell / q_\ell$")
    for ax in axes:
        ax.grid(alpha=0.3)
    q_ax.set_title("per-layer q (mean $\\pm$ std over sequences)", fontsize=10)
    rho_ax.set_title("per-layer token cosine", fontsize=10)
    rho_ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3, fontsize=8, frameon=False)
    if title is not None:
        figure.suptitle(title, fontsize=11)
    return figure
