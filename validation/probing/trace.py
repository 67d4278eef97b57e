"""The record of one probed forward pass: :class:`ProbeTrace`.

Reference: Giorlandino & Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..measurements import ATTENTION_STATISTICS, TOKEN_STATISTICS
from ..simulator import StackTrace

__all__ = ["ProbeTrace"]


@dataclass(frozen=True, eq=False)
class ProbeTrace(StackTrace):
    r"""Per-sequence, per-layer statistics of one forward pass, as recorded by :func:`~remprop.validation.probe`.

    The statistics of a :class:`~remprop.validation.StackTrace` (so code written for our
    simulated stacks reads a probed model too), plus the names of the blocks, whether their
    attention was read, and the token window.

    Layer 0 is the residual stream entering the first block, layer l = 1..L the output of
    block l. With the Gram matrix :math:`G_{ij} = x_i \cdot x_j / d` of the n real tokens
    (or of the last ``last`` tokens):

    .. math::
        q = \frac{1}{n}\sum_i G_{ii},\quad
        p = \frac{1}{n(n-1)}\sum_{i\ne j} G_{ij},\quad
        \rho = p/q,\quad
        Y_2 = \Big\langle \sum_j a_{ij}^2 \Big\rangle_{\text{heads, rows } i}

    Attributes
    ----------
    q, p, rho, cosine : ndarray, shape (batch, L + 1), float64
        Token statistics of layers 0..L (``cosine``: mean pairwise cosine).
    y2, entropy : ndarray, shape (batch, L), float64
        Attention statistics of blocks 1..L; NaN for blocks whose attention probabilities
        could not be read.
    layer_names : tuple of str
        Qualified module names of the L blocks.
    attention_recorded : bool
        True when the attention probabilities of every block were read.
    last : int or None
        The statistics cover the last ``last`` tokens only (causal models); None: all tokens.

    The arrays are read-only.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333.
    """

    layer_names: tuple = ()
    attention_recorded: bool = False
    last: int | None = None

    def __post_init__(self):
        object.__setattr__(self, "layer_names", tuple(str(name) for name in self.layer_names))
        depth = len(self.layer_names)
        shape = None
        for name in TOKEN_STATISTICS + ATTENTION_STATISTICS:
            array = np.array(getattr(self, name), dtype=np.float64)  # a private copy
            expected = depth + 1 if name in TOKEN_STATISTICS else depth
            if array.ndim != 2 or array.shape[1] != expected:
                raise ValueError(f"{name} must have shape (batch, {expected}), got {array.shape}")
            if shape is not None and array.shape[0] != shape:
                raise ValueError(f"{name} has {array.shape[0]} sequences, expected {shape}")
            shape = array.shape[0]
            array.flags.writeable = False
            object.__setattr__(self, name, array)
        object.__setattr__(self, "attention_recorded", bool(self.attention_recorded))

    @property
    def depth(self) -> int:
        """Number of blocks L."""
        return len(self.layer_names)

    @property
    def batch_size(self) -> int:
        """Number of sequences."""
        return self.q.shape[0]

    def mean(self) -> dict:
        """Means over the batch, per layer.

        Returns
        -------
        dict of str -> ndarray
            ``q, p, rho, cosine`` of shape (L + 1,), ``y2, entropy`` of shape (L,).
        """
        return {name: getattr(self, name).mean(axis=0) for name in TOKEN_STATISTICS + ATTENTION_STATISTICS}

    def plot(self, theory=None, *, label=None, axes=None, title=None):
        """q and the token cosine per layer (mean and std over the batch), the theory overlaid:
        :func:`remprop.diagrams.probe_figures.probe_figure` drawn through ``pyplot.figure``, so
        Jupyter shows it.

        Parameters
        ----------
        theory : Trajectory, optional
            The theory's ``q`` and ``rho`` per layer (e.g. :func:`remprop.theory.propagate`
            from this trace's layer-0 state), drawn as a dashed line.
        label : str, optional
            Legend label of this trace (default: ``"probe"``).
        axes : pair of Axes, optional
            The axes of an earlier plot (``fig.axes[:2]``): traces of several widths or depths
            on one coord_check picture, each in the next colour and marker.
        title : str, optional

        Returns
        -------
        matplotlib.figure.Figure

        Examples
        --------
        >>> figure = small.plot(label="d = 64")  # doctest: +SKIP
        >>> large.plot(propagate(arch, beta, depth), label="d = 512", axes=figure.axes[:2])  # doctest: +SKIP
        """
        from remprop.diagrams.probe_figures import probe_figure
        from remprop.diagrams.style import pyplot_figures

        with pyplot_figures():
            return probe_figure({label or "probe": self}, theory, axes=axes, title=title)

    def as_dict(self) -> dict:
        """All fields, arrays as writable copies and ``layer_names`` as a list."""
        out = {name: getattr(self, name).copy() for name in TOKEN_STATISTICS + ATTENTION_STATISTICS}
        out.update(layer_names=list(self.layer_names), attention_recorded=self.attention_recorded,
                   last=self.last)
        return out

