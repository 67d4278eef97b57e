"""The three phases of a transformer stack at initialisation and how a cell is classified.

* ``TRAINABLE`` (0): neither failure mode.
* ``RANK_COLLAPSE`` (1): the mean cosine of two tokens after the last block exceeds the
  collapse threshold (all tokens have nearly aligned; attention sees identical keys).
* ``ENTROPY_COLLAPSE`` (2): beta exceeds the critical beta of the attention input
  (attention rows freeze onto a few keys, the REM's low-temperature phase).

When both hold, the cell is entropy-collapsed: the criterion is met already at the first
attention layer (post-LN) or at some layer of the stack (pre-LN, no LN), i.e. before the
stream has travelled through the whole depth, while rank collapse is a statement about
the last layer. Attention with frozen rows is the failure a user meets first.
"""
from __future__ import annotations

import numpy as np

__all__ = ["TRAINABLE", "RANK_COLLAPSE", "ENTROPY_COLLAPSE", "PHASE_LABELS", "classify_phases", "confusion"]

#: Phase code of a trainable cell.
TRAINABLE = 0
#: Phase code of a rank-collapsed cell (final mean cosine above the threshold).
RANK_COLLAPSE = 1
#: Phase code of an entropy-collapsed cell (beta above the critical beta).
ENTROPY_COLLAPSE = 2
#: Phase code -> label.
PHASE_LABELS = {TRAINABLE: "trainable", RANK_COLLAPSE: "rank-collapse",
                ENTROPY_COLLAPSE: "entropy-collapse"}


def classify_phases(beta, beta_critical, rho_final, threshold):
    r"""Phase code of each cell.

    .. math::
        \text{phase} = \begin{cases}
            \text{ENTROPY\_COLLAPSE} & \beta > \beta_c \\
            \text{RANK\_COLLAPSE} & \text{else if not } \rho_L \le t \\
            \text{TRAINABLE} & \text{otherwise}
        \end{cases}

    Parameters
    ----------
    beta, beta_critical, rho_final : array_like
        Query/key scale, the critical beta that decides entropy collapse, and the final
        mean cosine; broadcast together.
    threshold : float
        Collapse threshold ``t`` on the final mean cosine, in (0, 1). A ``nan`` final
        cosine (the stream vanished or overflowed) counts as rank-collapsed.

    Returns
    -------
    ndarray of int8
        Codes :data:`TRAINABLE`, :data:`RANK_COLLAPSE`, :data:`ENTROPY_COLLAPSE`.

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333 (two failure modes); docs/theory.md section 6.
    """
    beta, beta_critical, rho_final = np.broadcast_arrays(beta, beta_critical, rho_final)
    phase = np.full(beta.shape, TRAINABLE, dtype=np.int8)
    with np.errstate(invalid="ignore"):
        phase[~(rho_final <= threshold)] = RANK_COLLAPSE
        phase[beta > beta_critical] = ENTROPY_COLLAPSE
    return phase


def confusion(predicted, observed, observed_labels=None) -> dict:
    """Counts ``{predicted label: {observed label: cells}}`` of two phase arrays of one grid.

    ``predicted`` holds theory phase codes (:data:`PHASE_LABELS`); ``observed`` the phases a
    measurement or a training run assigned, labelled by ``observed_labels`` (code -> label;
    default :data:`PHASE_LABELS`). Used by the measured and the trained diagrams alike.
    """
    observed_labels = PHASE_LABELS if observed_labels is None else observed_labels
    predicted, observed = np.asarray(predicted), np.asarray(observed)
    return {PHASE_LABELS[p]: {observed_labels[m]: int(np.sum((predicted == p) & (observed == m)))
                              for m in observed_labels} for p in PHASE_LABELS}
