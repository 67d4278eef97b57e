r"""The learning-rate ceiling: the largest AdamW rate at which a stack that is trainable at
initialisation still trains (docs/theory.md section 20).

The training recipe of ``remprop train`` is AdamW at peak rate ``eta`` with a linear warm-up over the
first 5 % of ``S`` steps and a linear decay to 0, so the rates sum to :math:`A \approx \eta S / 2`.
Adam normalises its update: each weight moves by about ``eta_s`` per step, coherently (the same sign)
while its gradient keeps its sign pattern. Two ways for such updates to break a stack:

* **the stack ceiling** (:func:`update_sensitivity`): a coherent update of a fan-in-``d`` matrix moves its
  branch's output by about ``eta d`` in units of the branch input's scale, and that perturbation reaches the
  stack's output with relative size :math:`b_k = \sqrt{q^{\rm in}_k / q^{\rm skip}_k}` (the branch input's
  mean square over the stream's after the skip add). The stack's output moves by order one when
  :math:`A\,d\,\mathcal{S} \approx C_{\rm stack}`, :math:`\mathcal{S} = \sum_k b_k`;
* **the attention ceiling** (:func:`attention_growth_budget`): coherent rank-one updates of ``W_Q`` and
  ``W_K`` grow the effective beta of the scores until it reaches the critical beta of section 3.2:
  entropy collapse during training.

The ceiling is the smaller of the two (:func:`learning_rate_ceiling`); each carries one fitted constant,
:data:`STACK_CONSTANT` and :data:`ATTENTION_CONSTANT`. Adam's updates stay coherent for a limited number
of steps only: the ceilings count the steps up to the horizon :data:`COHERENT_STEPS` (measured: the best
rate of a depth-24 stack does not fall from 300 to 1000 and 3000 steps). Within a fixed budget of steps a
run also needs enough movement to learn: below the **floor** ``A d S = C_floor`` (:data:`FLOOR_CONSTANT`,
all the steps counted) it ends short of what its stack can learn. The constants were fitted on the fit
part of the measured sweep (:mod:`remprop.validation.training.lr_sweep`, docs/training.md).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from remprop._deprecation import renamed_keywords, reordered

from .architecture import NUMERIC_FIELDS, OPTIONAL_FIELDS, Architecture
from .checks import (ParameterError, as_float_array, check_choice, check_count, check_depth, check_open_unit,
                     check_simplex_cosine, scalar_or_array)
from .components.residual import Parallel, Residual
from .components.base import Serial
from .models.pretraining import SCHEDULES
from .rem import check_seq_len
from .work_limits import MAX_SECONDS, check_work

__all__ = ["STACK_CONSTANT", "FLOOR_CONSTANT", "ATTENTION_CONSTANT", "COHERENT_STEPS", "DEFAULT_STEPS",
           "update_sensitivity", "sub_block_sensitivities", "attention_growth_budget", "qk_norm_growth_budget",
           "learning_rate_ceiling", "LearningRateCeiling", "ceiling_seconds", "VALIDATED_RANGE", "CEILING_BAND",
           "MEASURED_RECIPE", "Recipe", "ceiling_validity", "rate_verdict"]

#: ``C_stack``: the update budget ``A d S`` (cumulative rate times width times update sensitivity) at
#: which the stack's output has moved too far to train. Fitted on the six fit families of the scale sweep
#: (:func:`~remprop.validation.training.lr_scale.fit_scale_constants`: widths 32, 128 and 512 at depth 8,
#: post- and pre-LN, 300 steps; the geometric mean of their brackets' centres over the unit stack ceiling,
#: 516.7; docs/training.md, "The ceiling at scale"). The first sweep's window fit (width 32, depth 8 and 24)
#: gave 538. Issue 23's published GPU points, never read by a fit, allow 274 to 1370 with the ceilings
#: counting at most :data:`COHERENT_STEPS` steps (365 to 1827 if every step counted).
STACK_CONSTANT = 517.0
#: ``C_floor``: the update budget ``A d S`` below which a run of the recipe has not moved enough to train
#: within its steps (the lower edge of the same fitted window, 0.189 x 900).
FLOOR_CONSTANT = 170.0
#: ``C_attention``: the coherence of the query/key updates, ``eta_attention = C_attention * 2 a* / S``.
#: Only bounded from below by the sweep: the fit runs that trained (beta 0.5) must stay below their
#: attention ceiling, which needs ``C_attention >= 12.7`` (pre-LN at lr 1e-2); 22 puts that edge half-way
#: (in log) between the largest rate that trained there, 1e-2, and the sweep's next rate, 3e-2: the
#: window's own edge convention (:func:`~remprop.validation.training.lr_sweep.fit_window`).
ATTENTION_CONSTANT = 22.0
#: ``S_c``: the steps over which Adam's updates add up coherently, as the two ceilings count them
#: (``min(steps, S_c)``; the floor counts every step). Measured (docs/training.md, "How the window moves
#: with the steps"): the best rate of the depth-24 fit stacks is the same at 300, 1000 and 3000 steps, so
#: the horizon is at most the 300 steps of the fit runs; the runs cannot place it lower, and at or below
#: 300 steps the ceilings are those fitted.
COHERENT_STEPS = 300
#: Step count that reports use when none is given.
DEFAULT_STEPS = 10000
#: Where the ceiling has been checked against training runs (docs/training.md, "The ceiling at scale"):
#: model widths, optimiser steps and the input stream's mean square ``q0`` of the measured sweeps
#: (widths 16-512, 300-3000 steps, batches of 1024 tokens, input streams of mean square 8e-4 and 1). Outside it
#: the ceiling is an extrapolation, and :func:`ceiling_validity` says which way.
VALIDATED_RANGE = {"width": (16, 512), "steps": (300, 3000), "q0": (5e-4, 2.0)}
#: The recipe of every measured run besides its steps (docs/training.md): a linear warm-up over 5 % (and,
#: in one family, 25 %) of the steps, then a linear decay (in one family a cosine one); AdamW's beta2 0.999
#: (in one family 0.95); 1024 tokens a step.
#: A recipe outside these is reported as such (:func:`ceiling_validity`). None of them is a term of the
#: ceiling: the measured ones (warm-up over 25 %, 1000 steps, beta2 0.95, a cosine decay) left it where it was.
MEASURED_RECIPE = {"warmup_ratio": (0.05, 0.25), "beta2": (0.95, 0.999), "batch_tokens": (1024, 1024),
                   "schedule": ("linear", "cosine")}
#: The measured spread of the true ceiling around the predicted one over the 24 families of the scale
#: sweep (docs/training.md, "The ceiling at scale"; docs/data/lr-scale-sweep.json): in each, the largest
#: rate that trained was at least ``low`` times the prediction and the smallest that failed above it at
#: most ``high`` times it (``low`` from post-LN at width 32 and ``high`` from post-LN at width 512, both
#: fit families; over the 18 held-out families alone 0.60 to 2.16).
CEILING_BAND = (0.44, 2.35)
#: Seconds per block of the NumPy walk (:func:`ceiling_seconds`): a fixed part per block and a part per
#: cell and block, about 3 times what was measured on two loaded cores (2e-4 to 3.5e-4 s per block for one
#: cell; 1.7e-6 s per cell and block on a 50 x 50 grid).
SECONDS_PER_BLOCK, SECONDS_PER_CELL_BLOCK = 1e-3, 5e-6


def ceiling_seconds(cells, depth) -> float:
    """Estimated seconds of :func:`learning_rate_ceiling` over ``cells`` parameter cells at ``depth``
    blocks (for the commands' work limits): two walks, the ceiling's and the floor's."""
    return 2.0 * float(depth) * (SECONDS_PER_BLOCK + SECONDS_PER_CELL_BLOCK * float(cells))   # two walks


def _check_supported(arch):
    """The block forms the derivation covers (docs/theory.md section 20)."""
    if not isinstance(arch, Architecture):
        raise ValueError(f"arch must be a remprop.theory.Architecture, got {type(arch).__name__}")


def _sub_blocks(component):
    """The top-level layers of a block: a serial's layers, or the block itself."""
    return component.layers if isinstance(component, Serial) else (component,)


def _walk(arch, beta, depth, q0, rho0, keep_terms=True, grown_stream=False):
    """Walk ``depth`` blocks in NumPy, sub-block by sub-block.

    Returns ``(gains, first, smallest)``: ``sqrt(q_branch_in / q_after_skip)`` of every residual sub-block
    (one per branch), shape ``(..., n)`` (with ``keep_terms=False`` only their sum, so that memory does
    not grow with depth), and the first and the smallest per-head critical beta of the blocks' attention
    inputs. A pre-LN stream (branches that read only its cosine) is carried as ``(1, rho)`` and ``log q``,
    so that it never leaves float64. ``grown_stream``: such a stream is counted at no less than ``g``
    times the branches' normalised input, ``g = alpha^2 g + 1`` a branch from ``g = 1`` (``1 + m`` after
    ``m`` branches at ``alpha = 1``): its input and each branch grown to unit scale (what the ceiling reads, docs/theory.md section 20, "The stream's scale");
    without it the gains are those at initialisation (the torch check's)."""
    block = arch.block(beta)
    q = np.asarray(q0, dtype=np.float64)
    p = q * np.asarray(rho0, dtype=np.float64)
    log_q = np.log(q)                       # the stream's actual log q (carried streams)
    gains = []
    total = np.zeros(())
    first = smallest = None
    grown = 1.0                             # the grown stream's mean square over a unit branch's
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for _ in range(depth):
            # a carried (pre-LN) stream's attention reads only its cosine: (q, p) serve as they are
            beta_c = np.asarray(arch.block_beta_critical(q, p))
            first = beta_c if first is None else first
            smallest = beta_c if smallest is None else np.minimum(smallest, beta_c)   # nan wins, as in the kernels
            for layer in _sub_blocks(block):
                if not isinstance(layer, (Residual, Parallel)):
                    q, p = layer.apply(q, p)            # a norm: (1, p / q)
                    log_q = np.log(q)
                    continue
                branches = (layer.branch,) if isinstance(layer, Residual) else layer.branches
                q_in, _ = arch.attention_input(q, p)    # what every branch's first matrix reads
                # the scale a branch's perturbation is measured in: its input's, or with branch_norm its
                # normalised output's (a norm ends the branch; docs/theory.md section 20)
                if layer.carries_scale:                 # pre-LN: the branches read only the cosine
                    outputs = [b.apply(q, p) for b in branches]
                    if arch.branch_norm:
                        q_in = outputs[0][0]
                    q_branch, p_branch = sum(o[0] for o in outputs), sum(o[1] for o in outputs)
                    scale = np.exp(-(log_q - np.log(q)))          # 1 / (actual q / carried q)
                    q_new = layer.alpha ** 2 * q + q_branch * scale
                    p_new = layer.alpha ** 2 * p + p_branch * scale
                    log_q = log_q + np.log(q_new / q)
                    # grown_stream: the stream counted at no less than its input and each branch so far
                    # grown to the scale of its normalised input, through the same skips (alpha^2 g + 1 a
                    # branch), a smaller one at init (0.02 embeddings, weak branches) being grown to that
                    # scale by the first updates (docs/theory.md section 20, "The stream's scale"; measured:
                    # the smallemb and deep pre-LN runs)
                    grown = layer.alpha ** 2 * grown + len(branches)
                    counted = np.maximum(log_q, np.log(q_in * grown)) if grown_stream else log_q
                    gain = np.sqrt(q_in) * np.exp(-0.5 * counted)
                    q, p = q_new / q_new, p_new / q_new
                else:
                    if arch.branch_norm:
                        q_in = branches[0].apply(q, p)[0]
                    q_new, p_new = layer.apply(q, p)
                    gain = np.sqrt(q_in / q_new)
                    q, p, log_q = q_new, p_new, np.log(q_new)
                if keep_terms:
                    gains += [gain] * len(branches)
                else:
                    total = total + len(branches) * gain
    terms = np.stack(np.broadcast_arrays(*gains), axis=-1) if keep_terms else total
    return terms, first, smallest


def _inputs(arch, depth, beta, q0, rho0):
    _check_supported(arch)
    depth = check_depth(depth)
    beta = as_float_array("beta", beta, positive=True)
    q0 = as_float_array("q0", q0, positive=True)
    rho0 = check_simplex_cosine("rho0", as_float_array("rho0", rho0, low=-1.0, high=1.0), arch.seq_len)
    arrays = {"beta": beta, "q0": q0, "rho0": rho0}
    arrays.update((name, np.asarray(getattr(arch, name))) for name in NUMERIC_FIELDS + OPTIONAL_FIELDS
                  if getattr(arch, name) is not None)
    try:
        np.broadcast_shapes(*(value.shape for value in arrays.values()))
    except ValueError:
        shaped = ", ".join(f"{name} {value.shape}" for name, value in arrays.items() if value.ndim)
        raise ParameterError("beta", f"beta: beta, q0, rho0 and the architecture's array fields must broadcast "
                             f"together, got shapes {shaped}") from None
    return depth, beta, q0, rho0


@reordered("(arch, depth, beta, q0=1.0, rho0=0.0, *, grown_stream=False)")
def update_sensitivity(arch: Architecture, beta, *, depth: int, q0=1.0, rho0=0.0, grown_stream=False):
    r"""How strongly a coherent update of every branch moves the stack's output.

    .. math:: \mathcal{S} = \sum_{k=1}^{n} \sqrt{\frac{q^{\rm in}_k}{q^{\rm skip}_k}},

    over the ``n = 2 L`` residual sub-blocks (attention and MLP separately; one per block for
    ``block_form="parallel"``, each branch counted), with :math:`q^{\rm in}_k` the mean square of what the
    branch's first matrix reads (1 after a pre-LN norm) and :math:`q^{\rm skip}_k` the stream's after
    the skip add :math:`\alpha_k x + F_k(x)`. A unit update of a fan-in-``d`` matrix moves its branch's
    output by about ``d`` times the branch input's scale; a post-LN norm then divides it by
    :math:`\sqrt{q^{\rm skip}_k}`, and later sub-blocks keep its size relative to the stream when the
    branches' Jacobian gain equals their variance gain (degree-one homogeneous branches). Hence

    * post-LN: :math:`\mathcal{S} = \sum_k 1/\sqrt{\alpha_k^2 + v_k}` (after the first sub-block),
      growing like the depth;
    * pre-LN: :math:`\mathcal{S} = \sum_k 1/\sqrt{q_k}`, :math:`q_k` the stream after sub-block ``k``;
      for ``alpha = 1`` and branch variances ``v``, :math:`q_k = q_0 + k v` and
      :math:`\mathcal{S} \approx 2\sqrt{n / v}`: the square root of the depth (Liu et al. 2020);
    * no norm: the same sum, :math:`q^{\rm in}_k` the stream before the sub-block (the stream's scale may
      leave float64 at large depth and ``alpha``; the result is then nan).

    Parameters
    ----------
    arch : Architecture
        The stack (``branch_norm`` is refused: a norm on the branch output rescales the perturbation).
    beta : array_like
        The model's query/key scale, > 0 (the attention branch's variance depends on it at finite T).
    depth : int
        Blocks L >= 1. It and the arguments after it are keyword-only (the order was ``(arch, depth,
        beta, ...)`` before: an old positional call is a ``TypeError``).
    q0, rho0 : array_like
        Input state (defaults 1 and 0).
    grown_stream : bool
        Count a pre-LN stream at no less than its input and every branch so far grown to unit scale by
        the first updates (``q_m >= 1 + m`` after ``m`` branches at ``alpha = 1``; ``g = alpha^2 g + 1`` a
        branch in general), as the ceiling does (:func:`learning_rate_ceiling`; docs/theory.md section 20, "The stream's scale");
        False (the default): the sensitivity at initialisation.

    Returns
    -------
    ndarray or float
        :math:`\mathcal{S}`, broadcast over ``beta``, ``q0``, ``rho0`` and the architecture's arrays.

    References
    ----------
    docs/theory.md section 20; Liu et al., "Understanding the difficulty of training transformers",
    arXiv 2004.08249 (post-LN amplifies updates with depth, pre-LN like its square root).

    Examples
    --------
    >>> from remprop.theory import Architecture, update_sensitivity
    >>> round(float(update_sensitivity(Architecture(alpha_sa=2.0), 0.5, depth=48)), 1)
    71.4
    """
    depth, beta, q0, rho0 = _inputs(arch, depth, beta, q0, rho0)
    return scalar_or_array(_walk(arch, beta, depth, q0, rho0, keep_terms=False, grown_stream=grown_stream)[0])


@reordered("(arch, depth, beta, q0=1.0, rho0=0.0, *, grown_stream=False)")
def sub_block_sensitivities(arch: Architecture, beta, *, depth: int, q0=1.0, rho0=0.0, grown_stream=False
                            ) -> np.ndarray:
    r"""The terms :math:`b_k = \sqrt{q^{\rm in}_k / q^{\rm skip}_k}` of :func:`update_sensitivity`, one per
    residual branch in stack order (attention, MLP, attention, ...): the relative change of the stack's
    output per unit relative perturbation of branch ``k``'s output (in units of its input's scale).

    Parameters and references as :func:`update_sensitivity`. Returns an array of shape
    ``broadcast + (n,)``, ``n = 2 L`` for sequential blocks.
    """
    depth, beta, q0, rho0 = _inputs(arch, depth, beta, q0, rho0)
    return _walk(arch, beta, depth, q0, rho0, grown_stream=grown_stream)[0]


@renamed_keywords(beta_c="beta_critical")
def attention_growth_budget(beta, beta_critical, width, seq_len, head_dim=None):
    r"""The cumulative update size ``a*`` at which coherent query/key updates reach ``beta_c``.

    Scores :math:`s = x^T M y/\sqrt{d_H}`, :math:`M = W_Q^T W_K` (one head, ``d_H`` rows): at
    initialisation :math:`|M|_F^2 = d_H \beta^2 \log T`, so
    :math:`\beta_{\rm eff} = |M|_F/\sqrt{d_H \log T}` is ``beta`` (docs/theory.md sections 2 and 3.6).
    Adam's coherent updates are rank-one sign matrices, :math:`W_Q \to W_Q + a\,u_Q v_Q^T`,
    :math:`W_K \to W_K + a\,u_K v_K^T` with :math:`u \in \{\pm1\}^{d_H}`, :math:`v \in \{\pm1\}^d` and
    aligned output signs :math:`u_Q = u_K`. The three parts of :math:`M'` are uncorrelated in mean, and

    .. math:: \beta_{\rm eff}^2 = \beta^2 + \frac{2 a^2 d\,\beta}{\sqrt{\log T}}
              + \frac{a^4 d^2 d_H}{\log T}.

    ``a*`` solves :math:`\beta_{\rm eff}(a^*) = \beta_c`, a quadratic in :math:`a^2`:

    .. math:: a^{*2} = \frac{2(\beta_c^2 - \beta^2)}{B + \sqrt{B^2 + 4 D (\beta_c^2 - \beta^2)}},\qquad
              B = \frac{2 d\beta}{\sqrt{\log T}},\ D = \frac{d^2 d_H}{\log T};

    0 where ``beta >= beta_c`` (already collapsed), ``inf`` where ``beta_c`` is.

    Parameters
    ----------
    beta, beta_critical : array_like
        The per-head effective beta at initialisation and the critical beta ``beta_c`` (> 0; it may be
        inf). The keyword ``beta_c`` is a deprecated spelling of ``beta_critical``.
    width : int
        Model width d (the fan-in of W_Q and W_K).
    seq_len : int
        Sequence length T >= 2.
    head_dim : int, optional
        Rows d_H of each head's W_Q (default ``width``: one head).

    Returns
    -------
    ndarray or float

    References
    ----------
    docs/theory.md section 20 (checked by Monte Carlo in tests/test_learning_rate.py).
    """
    beta = as_float_array("beta", beta, positive=True)
    beta_c = as_float_array("beta_critical", beta_critical, positive=True, allow_inf=True)
    width = check_count("width", width, 1)
    seq_len = check_seq_len(seq_len, allow_none=False)
    head_dim = width if head_dim is None else check_count("head_dim", head_dim, 1)
    log_t = math.log(seq_len)
    b = 2.0 * width * beta / math.sqrt(log_t)
    d = float(width) ** 2 * head_dim / log_t
    gap = np.maximum(beta_c ** 2 - beta ** 2, 0.0)
    with np.errstate(invalid="ignore"):
        a2 = np.where(np.isinf(beta_c), np.inf, 2.0 * gap / (b + np.sqrt(b * b + 4.0 * d * gap)))
    return scalar_or_array(np.sqrt(a2))


def qk_norm_growth_budget(beta, beta_critical, gain):
    r"""The cumulative update size ``a*`` at which coherent updates of the QK-norm gains reach ``beta_critical``.

    With normalised queries and keys the weights' scale drops out of the scores, and what Adam can grow
    coherently is the norms' gains: :math:`s = \beta\,g_Q g_K\,\hat q \cdot \hat k / \ldots`, so each head's
    effective beta is proportional to :math:`\beta g^2` (:func:`~remprop.theory.components.attention_scale.effective_beta`,
    docs/theory.md section 19). Every gain moving by ``a`` (the same sign, the one that sharpens the
    scores) multiplies it by :math:`(1 + a/g)^2`; it reaches the stack's critical multiplier ``beta_critical`` at

    .. math:: a^* = g \left(\sqrt{\beta_c / \beta} - 1\right),

    0 where ``beta >= beta_critical`` (already collapsed), ``inf`` where ``beta_critical`` is. (The rotation of the
    normalised directions toward each other is not counted: it cannot raise a score above the gains'
    bound, and at initialisation it is the slower lever.)

    Parameters
    ----------
    beta, beta_critical : array_like
        The model's multiplier on the normalised scores (1 as initialised) and its critical value
        (:meth:`~remprop.theory.Architecture.critical_beta`; > 0, ``beta_critical`` may be inf).
    gain : array_like
        The QK-norm gain ``g`` at initialisation, > 0.

    Returns
    -------
    ndarray or float

    References
    ----------
    docs/theory.md section 20, "QK-norm and branch norms".
    """
    beta = as_float_array("beta", beta, positive=True)
    beta_critical = as_float_array("beta_critical", beta_critical, positive=True, allow_inf=True)
    gain = as_float_array("gain", gain, positive=True)
    with np.errstate(invalid="ignore", over="ignore"):
        budget = np.where(np.isinf(beta_critical), np.inf, gain * (np.sqrt(np.maximum(beta_critical / beta, 1.0)) - 1.0))
    return scalar_or_array(budget)


@dataclass(frozen=True)
class LearningRateCeiling:
    """:func:`learning_rate_ceiling`'s answer; arrays of the broadcast shape.

    Attributes
    ----------
    ceiling : ndarray
        The predicted largest peak rate, ``min(stack, attention)``.
    floor : ndarray
        The smallest peak rate that moves the stack enough to train within the steps,
        ``2 C_floor / (d S_0 steps)`` (:data:`FLOOR_CONSTANT`; every step counts; ``S_0`` the sensitivity
        at initialisation, :func:`update_sensitivity`: updates that small do not grow the stream).
    stack, attention : ndarray
        The two ceilings.
    binding : ndarray of str
        ``"stack"`` or ``"attention"``: which one is smaller.
    sensitivity : ndarray
        :func:`update_sensitivity`.
    budget : ndarray
        :func:`attention_growth_budget` ``a*``.
    beta_critical : ndarray
        The model-level critical beta (the norm placement's rule).
    """

    ceiling: np.ndarray
    floor: np.ndarray
    stack: np.ndarray
    attention: np.ndarray
    binding: np.ndarray
    sensitivity: np.ndarray
    budget: np.ndarray
    beta_critical: np.ndarray


@reordered("(arch, depth, width, steps, beta, q0=1.0, rho0=0.0, *, seq_len=None, max_seconds=MAX_SECONDS)")
def learning_rate_ceiling(arch: Architecture, beta, *, depth: int, width: int, steps: int, q0=1.0, rho0=0.0,
                          seq_len=None, max_seconds=MAX_SECONDS) -> LearningRateCeiling:
    r"""The largest AdamW peak rate at which the stack still trains (docs/theory.md section 20).

    .. math:: \eta_{\rm stack} = \frac{2\,C_{\rm stack}}{d\,\mathcal{S}\,\min(S, S_c)},\qquad
              \eta_{\rm attention} = C_{\rm attention}\,\frac{2 a^*}{\min(S, S_c)},\qquad
              \eta_{\max} = \min(\eta_{\rm stack}, \eta_{\rm attention}),

    for ``S`` steps of the warm-up/linear-decay recipe (cumulative rate :math:`\eta S/2`, coherent over at
    most :math:`S_c` = :data:`COHERENT_STEPS` of them), with
    :math:`\mathcal{S}` from :func:`update_sensitivity` and ``a*`` from :func:`attention_growth_budget`
    at the per-head effective beta and the stack's critical beta (the rule of section 6): 0 for a stack
    entropy-collapsed at initialisation. The constants are :data:`STACK_CONSTANT` and
    :data:`ATTENTION_CONSTANT` (fitted on the measured sweep; the attention one only bounded below); the
    floor :math:`2 C_{\rm floor} / (d\,\mathcal{S}_0\,S)` (every step counted, :math:`\mathcal{S}_0` the
    sensitivity at initialisation: updates that small do not grow the stream) comes with it. Rank collapse at initialisation is not part of the ceiling:
    a rank-collapsed stack fails at any rate (the diagram says so).

    Parameters
    ----------
    arch : Architecture
        The stack (not ``qk_norm``: normalised queries and keys take the weights' scale out of the
        logits, and the attention ceiling has no derivation there; not ``branch_norm``).
    beta : array_like
        The model's query/key scale, > 0.
    depth, width, steps : int
        Blocks L, model width d, training steps S. They and the arguments after them are keyword-only
        (the order was ``(arch, depth, width, steps, beta, ...)`` before: an old positional call is a
        ``TypeError``).
    q0, rho0 : array_like
        Input state.
    seq_len : int, optional
        Sequence length T >= 2 for the logits' ``log T`` (default ``arch.seq_len``; one of them is needed).
    max_seconds : float
        The walk's estimated time (:func:`ceiling_seconds`, linear in the depth and the cells) above which
        it is refused with a ``ValueError`` holding the estimate (default
        :data:`~remprop.theory.work_limits.MAX_SECONDS`, the command line's ``--max-seconds``;
        ``math.inf``: no limit).

    Returns
    -------
    LearningRateCeiling

    References
    ----------
    docs/theory.md section 20; Liu et al., arXiv 2004.08249.

    Examples
    --------
    >>> from remprop.theory import Architecture, learning_rate_ceiling
    >>> c = learning_rate_ceiling(Architecture(alpha_sa=2.0, seq_len=128), 0.5, depth=48, width=256, steps=400)
    >>> str(c.binding)
    'stack'
    """
    _check_supported(arch)
    width = check_count("width", width, 1)
    steps = check_count("steps", steps, 1)
    seq_len = check_seq_len(arch.seq_len if seq_len is None else seq_len, allow_none=True)
    if seq_len is None:
        raise ParameterError("seq_len", "seq_len: the learning-rate ceiling needs a sequence length T (the logits "
                             "scale with log T); set arch.seq_len or pass seq_len")
    depth, beta, q0, rho0 = _inputs(arch, depth, beta, q0, rho0)
    cells = max(np.broadcast(beta, q0, rho0, *(np.asarray(getattr(arch, name)) for name in NUMERIC_FIELDS)).size, 1)
    check_work(f"the learning-rate ceiling's walk through depth {depth} ({cells} cell(s))",
               seconds=ceiling_seconds(cells, depth), max_seconds=max_seconds)
    sensitivity, first, smallest = _walk(arch, beta, depth, q0, rho0, keep_terms=False, grown_stream=True)
    beta_c = np.asarray(arch.beta_critical(first=first, smallest=smallest))
    scale = arch.beta_scale
    head_dim = arch.head_dim if arch.head_dim is not None else max(width // arch.heads, 1)
    if arch.qk_norm:        # beta_c on the model's axis: the multiplier on the normalised scores
        budget = np.asarray(qk_norm_growth_budget(beta * np.ones_like(beta_c),
                                                  np.where(np.isnan(beta_c), np.inf, beta_c), arch.qk_norm_gain))
    else:
        budget = np.asarray(attention_growth_budget(np.asarray(arch.effective_beta(beta)) * np.ones_like(beta_c),
                                                    np.where(np.isnan(beta_c), np.inf, beta_c) * scale,
                                                    width, seq_len, head_dim))
    coherent = min(steps, COHERENT_STEPS)        # the ceilings' steps; the floor counts all of them
    stack = 2.0 * STACK_CONSTANT / (width * np.asarray(sensitivity) * coherent)
    attention = ATTENTION_CONSTANT * 2.0 * budget / coherent
    # the floor's updates are too small to grow the stream within the run: the sensitivity at init
    at_init = _walk(arch, beta, depth, q0, rho0, keep_terms=False)[0]
    floor = 2.0 * FLOOR_CONSTANT / (width * np.asarray(at_init) * steps)
    stack, attention, floor = np.broadcast_arrays(stack, attention, floor)
    ceiling = np.minimum(stack, attention)
    binding = np.where(attention < stack, "attention", "stack")
    return LearningRateCeiling(*(scalar_or_array(x) for x in (ceiling, floor, stack, attention)),
                               binding=binding if binding.ndim else binding[()],
                               sensitivity=scalar_or_array(np.asarray(sensitivity)),
                               budget=scalar_or_array(budget), beta_critical=scalar_or_array(beta_c))


@dataclass(frozen=True)
class Recipe:
    """The training recipe a ceiling is asked for (checked on construction; each bad field a
    :class:`~remprop.theory.checks.ParameterError` naming it).

    Attributes
    ----------
    steps : int
        Optimiser steps S >= 1.
    warmup_steps : int, optional
        Linear warm-up steps, at most ``steps`` (default 5 % of them, the measured runs').
    batch_tokens : int, optional
        Tokens per step, >= 1 (None: not given).
    beta2 : float
        AdamW's second-moment decay, in (0, 1) (default 0.999, torch's).
    schedule : {"linear", "cosine"}
        The decay after the warm-up.
    """

    steps: int = DEFAULT_STEPS
    warmup_steps: int | None = None
    batch_tokens: int | None = None
    beta2: float = 0.999
    schedule: str = "linear"

    def __post_init__(self):
        steps = check_count("steps", self.steps, 1)
        object.__setattr__(self, "steps", steps)
        warmup = round(0.05 * steps) if self.warmup_steps is None else check_count("warmup_steps",
                                                                                     self.warmup_steps, 0)
        if warmup > steps:
            raise ParameterError("warmup_steps", f"warmup_steps must be at most the run's steps ({steps}), "
                                 f"got {warmup}")
        object.__setattr__(self, "warmup_steps", warmup)
        if self.batch_tokens is not None:
            object.__setattr__(self, "batch_tokens", check_count("batch_tokens", self.batch_tokens, 1))
        object.__setattr__(self, "beta2", check_open_unit("beta2", self.beta2))
        check_choice("schedule", self.schedule, SCHEDULES)

    def outside(self) -> tuple:
        """Why the recipe is not the measured runs' (:data:`MEASURED_RECIPE`): one phrase per field."""
        reasons = []
        ratio = self.warmup_steps / self.steps
        low, high = MEASURED_RECIPE["warmup_ratio"]
        if not low - 1e-9 <= ratio <= high + 1e-9:
            reasons.append(f"warm-up {self.warmup_steps} steps ({ratio:.1%} of the run) outside the measured "
                           f"{low:.0%}-{high:.0%}")
        if self.batch_tokens is not None and self.batch_tokens != MEASURED_RECIPE["batch_tokens"][0]:
            measured = MEASURED_RECIPE["batch_tokens"][0]
            reasons.append(f"batch {self.batch_tokens} tokens against the measured {measured}")
        low, high = MEASURED_RECIPE["beta2"]
        if not low <= self.beta2 <= high:
            reasons.append(f"beta2 {self.beta2:g} outside the measured {low:g}-{high:g}")
        if self.schedule not in MEASURED_RECIPE["schedule"]:
            reasons.append(f"{self.schedule} decay against the measured {' and '.join(MEASURED_RECIPE['schedule'])}")
        return tuple(reasons)


def ceiling_validity(width, steps, q0=1.0, recipe=None, arch=None) -> tuple:
    """Why a ceiling at ``width``, ``steps`` and input mean square ``q0`` (and ``recipe``, a
    :class:`Recipe`, and ``arch``, an :class:`~remprop.theory.Architecture`) is outside
    :data:`VALIDATED_RANGE`, the measured recipe and the measured block forms: one phrase per
    quantity outside them (empty when inside). No run measured QK-norm (its attention ceiling,
    :func:`qk_norm_growth_budget`) or norms on the branches' outputs.

    Examples
    --------
    >>> ceiling_validity(768, 300)
    ('width 768 above the widest measured, 512',)
    """
    reasons = []
    for name, value in (("width", width), ("steps", steps), ("q0", q0)):
        value = float(as_float_array(name, value, positive=True))
        low, high = VALIDATED_RANGE[name]
        label = {"q0": "input mean square q0", "steps": "steps", "width": "width"}[name]
        shown = f"{value:.3g}" if name == "q0" else f"{int(value)}"
        if value < low:
            reasons.append(f"{label} {shown} below the smallest measured, {low:g}")
        elif value > high:
            reasons.append(f"{label} {shown} above the {'widest' if name == 'width' else 'largest'} measured, {high:g}")
    if recipe is not None:
        reasons += recipe.outside()
    if arch is not None and arch.qk_norm:
        reasons.append("QK-norm, which no measured run had (its attention ceiling is derived, not measured)")
    if arch is not None and arch.branch_norm:
        reasons.append("norms on the branches' outputs, which no measured run had")
    return tuple(reasons)


def rate_verdict(lr, ceiling, band=CEILING_BAND) -> str:
    """A learning rate against a predicted ceiling: ``"below"`` (under ``band[0]`` times it, where the
    measured ceilings all lay above), ``"above"`` (over ``band[1]`` times it, where every measured run
    failed) or ``"near"`` (within the band: the prediction cannot tell)."""
    lr = float(as_float_array("lr", lr, positive=True))
    ceiling = float(ceiling)
    if lr < band[0] * ceiling:
        return "below"
    return "above" if lr > band[1] * ceiling else "near"

