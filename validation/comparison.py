"""Theory against simulation, layer by layer.

:func:`compare` pushes ``seeds x sequences`` input sequences through simulated stacks
(one initialisation per seed), measures every layer, and sets the means and standard
deviations beside :func:`remprop.theory.propagate` started from the measured input
state. The result is a :class:`Comparison`: a per-layer table and the maximum and mean
absolute error of the theory's cosine ``rho``.

Reference: Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(d, e).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from remprop.theory import Architecture, RunSettings, Trajectory, participation_ratio, propagate
from remprop.theory.gram_state import gram_support_problem, propagate_gram, simplex_distance
from remprop.theory.checks import as_float_array, check_choice, simplex_cosine_floor
from remprop.theory.rem.finite_width import attention_mean_cosine, finite_width_attention_map

from . import layers
from .agreement import agreement, verdict_line
from .backend import STREAM_WEIGHTS, check_positive_int, check_scalar, generator, resolve_dtype
from .inputs import gaussian_tokens
from .measurements import attention_statistics, token_statistics
from .registry import REGISTRY
from .settings import SimulationSettings, check_simulation
from .simulator import SimulatedStack, StackTrace

__all__ = ["Comparison", "AttentionSweep", "OBSERVABLES", "THEORIES", "MEASURED_ROUNDING_EPS", "compare", "attention_sweep",
           "theory_participation", "measured_cosine_on_floor", "measured_input_theory"]

#: Measured cosines the theory's rho may be compared with.
OBSERVABLES = ("cosine", "rho")

#: Theories :func:`compare` can set beside the measurements: the mean-cosine maps, the
#: Gram-matrix state of each input sequence (docs/theory.md section 17), its
#: single-initialisation chains (section 17.1), or "auto" (the chains for text inputs,
#: the mean-cosine maps otherwise).
THEORIES = ("mean", "gram", "sampled", "auto")

#: How :meth:`Comparison.summary` names each theory.
_THEORY_NAMES = {"mean": "mean-cosine maps", "gram": "Gram state of each input (mean over initialisations)",
                 "sampled": "Gram state of each input, single-initialisation chains"}


def theory_participation(arch: Architecture, beta, trajectory: Trajectory) -> np.ndarray:
    r"""Y2 of each layer's attention along a theory trajectory, as the theory's blocks use it.

    The attention of block l sees :meth:`~remprop.theory.Architecture.attention_input` of the block input
    (its LayerNorm for pre-LN); each head runs at the effective beta, and its REM reads the
    overlap ``p cbar_T`` (:attr:`~remprop.theory.Architecture.mean_rope_correlation`: the rotary
    correlation with ``positions="rope"``, 1 otherwise):

    .. math:: Y_2 = \max\Big(0,\ 1 - \frac{\beta_c}{\beta_{\rm eff}}\Big),\qquad
              \beta_c = \sqrt{\frac{2}{q\,(q - p\,\bar c_T)}}

    with ``arch.seq_len`` None, the exact finite-T ``Y2`` at ``T = arch.seq_len``
    (:func:`~remprop.theory.participation_ratio`) otherwise (docs/theory.md sections 3.3 and 15).

    Returns
    -------
    ndarray, shape (..., depth)
    """
    q, p = arch.attention_input(trajectory.q[..., :-1], trajectory.p[..., :-1])
    p_rem = np.minimum(p, q) * arch.mean_rope_correlation
    return np.asarray(participation_ratio(arch.effective_beta(beta), q, p_rem, arch.seq_len))


@dataclass(frozen=True)
class Comparison:
    """Theory and measurements of one architecture, layer by layer.

    Attributes
    ----------
    settings : dict
        Everything that defines the run (JSON-ready): the theory's
        :class:`~remprop.theory.RunSettings` (``run``, started from the measured input
        state) and the simulation's sizes. ``rho0_measured`` is the measured input cosine
        and ``rho0`` the one the theory starts from: equal, except that a cosine within
        ``rho0_clip_tolerance`` (:data:`MEASURED_ROUNDING_EPS` eps of the dtype) below the
        theory's floor is clipped onto it (:func:`measured_cosine_on_floor`).
    trace : StackTrace
        Per-sequence measurements, ``seeds x sequences`` rows (seed-major).
    theory : remprop.theory.Trajectory
        The theory started from the mean measured input ``(q0, rho0)``.
    theory_y2 : ndarray, shape (depth,)
        Participation ratio of each layer's attention (:func:`theory_participation`: finite T and RoPE as
        the architecture's blocks).
    observable : {"cosine", "rho"}
        Measured quantity compared with the theory's ``rho`` (mean pairwise cosine,
        or the Gram-matrix ratio p/q).
    elapsed : float
        Seconds spent simulating.
    """

    settings: dict
    trace: StackTrace
    theory: Trajectory
    theory_y2: np.ndarray
    observable: str = "cosine"
    elapsed: float = 0.0

    @property
    def run(self) -> RunSettings:
        """The theory's run: architecture, the model's beta, depth and the measured input state."""
        return RunSettings.from_dict({k: self.settings[k] for k in ("arch", "beta", "depth", "q0", "rho0")})

    @property
    def depth(self) -> int:
        return self.theory.depth

    @property
    def layers(self) -> np.ndarray:
        """0 (input), 1, ..., depth."""
        return np.arange(self.depth + 1)

    @property
    def samples(self) -> int:
        """Number of simulated sequences, seeds x sequences."""
        return self.trace.q.shape[0]

    def mean(self, name: str) -> np.ndarray:
        """Mean over all sequences of a measured statistic (q, p, rho, cosine, y2, entropy)."""
        return getattr(self.trace, name).mean(axis=0)

    def std(self, name: str) -> np.ndarray:
        """Standard deviation over all sequences (ddof = 1; 0 for a single sequence)."""
        values = getattr(self.trace, name)
        return values.std(axis=0, ddof=1) if values.shape[0] > 1 else np.zeros(values.shape[1])

    @property
    def error(self) -> np.ndarray:
        """``|theory rho - measured mean|`` per layer, shape (depth + 1,)."""
        return np.abs(self.theory.rho - self.mean(self.observable))

    @property
    def max_abs_error(self) -> float:
        """Largest error over layers 1..depth (layer 0 is the input the theory starts from)."""
        return float(self.error[1:].max())

    @property
    def mean_abs_error(self) -> float:
        """Mean error over layers 1..depth."""
        return float(self.error[1:].mean())

    def agreement(self) -> dict:
        """Whether theory and measurement agree, by the package's one rule
        (:func:`~remprop.validation.agreement.acceptance_error`: every layer 1..L within
        ``max(0.02, 2 s.e.)`` of the theory, the standard error over the seeds' means, each seed's
        sequences averaged first: they share its weights)."""
        measured = getattr(self.trace, self.observable)
        return agreement(self.theory.rho, measured, sequences_per_seed=int(self.settings["sequences"]))

    def verdict(self) -> str:
        """One line: agree / disagree, the rule and the worst layer
        (:func:`~remprop.validation.agreement.verdict_line` of :meth:`agreement`)."""
        return verdict_line(self.agreement())

    def table(self) -> list:
        """One dict per layer: theory, measured mean and std, and error of rho; q and Y2 beside."""
        rows = []
        m_obs, s_obs, err = self.mean(self.observable), self.std(self.observable), self.error
        m_q, s_q = self.mean("q"), self.std("q")
        m_y2, s_y2 = self.mean("y2"), self.std("y2")
        for layer in self.layers:
            row = {"layer": int(layer), "theory_rho": float(self.theory.rho[layer]),
                   "measured_mean": float(m_obs[layer]), "measured_std": float(s_obs[layer]),
                   "error": float(err[layer]),
                   "theory_q": float(self.theory.q[layer]), "measured_q": float(m_q[layer]),
                   "measured_q_std": float(s_q[layer])}
            if layer > 0:
                row.update(theory_y2=float(self.theory_y2[layer - 1]), measured_y2=float(m_y2[layer - 1]),
                           measured_y2_std=float(s_y2[layer - 1]))
            rows.append(row)
        return rows

    def to_dict(self, per_sequence: bool = True) -> dict:
        """JSON-ready summary: settings, errors, table and (optionally) the per-sequence measurements."""
        out = {"settings": self.settings, "observable": self.observable, "samples": self.samples,
               "max_abs_error": self.max_abs_error, "mean_abs_error": self.mean_abs_error,
               "elapsed_s": self.elapsed, "agreement": self.agreement(), "table": self.table()}
        if per_sequence:
            out["per_sequence"] = {k: v.tolist() for k, v in self.trace.as_dict().items()}
        return out

    def summary(self) -> str:
        """One line: the architecture and the errors."""
        s = self.settings
        return (f"norm={s['arch']['norm']} attention={s['arch']['attention']} alpha_sa={s['arch']['alpha_sa']} "
                f"beta={s['beta']} depth={s['depth']} d={s['width']} T={s['seq_len']} "
                f"samples={self.samples}: max |theory - measured {self.observable}| = {self.max_abs_error:.4f}, "
                f"mean = {self.mean_abs_error:.4f} ({self.elapsed:.1f} s){self._theory_text()}")

    def _theory_text(self) -> str:
        """Which theory was compared and how far the inputs are from a simplex (older results: nothing)."""
        s = self.settings
        kind = s.get("theory")
        distance = s.get("simplex_distance")
        text = "" if kind is None else f"; theory: {_THEORY_NAMES.get(kind, kind)}"
        if distance is not None:
            text += (f"; inputs {distance:.3f} from a simplex (rms spread of their token-pair cosines; "
                     f"Gaussian tokens: about 1/sqrt(d) = {1 / np.sqrt(s['width']):.3f})")
        return text


#: Measured cosines within this many machine epsilons of the simulation's dtype below the
#: theory's floor are rounding error. The tokens are stored in that dtype (each coordinate
#: rounded to relative eps/2) and the mean cosine is a normalised average of products of two
#: such coordinates, so its first-order rounding error is below about 2 eps; 16 eps leaves
#: a margin of 8 (float32: 1.9e-6; a real violation, e.g. text tokens with mean cosine
#: -0.01 against the T -> infinity floor 0, is orders of magnitude larger).
MEASURED_ROUNDING_EPS = 16


def measured_cosine_on_floor(cosine, seq_len, dtype):
    """Clip a measured mean cosine onto the theory's floor when it lies below by rounding only.

    The theory (``Architecture.seq_len``; None: ``T -> infinity``) needs
    ``rho0 >= -1/(T - 1)`` (:func:`remprop.theory.checks.simplex_cosine_floor`); a cosine
    measured in ``dtype`` that lies within ``MEASURED_ROUNDING_EPS * eps(dtype)`` below
    it is set onto it (synthetic inputs at ``rho0 = 0`` measure about -4e-9 in float32).

    Returns
    -------
    (float, float)
        The cosine the theory starts from, and the tolerance used.
    """
    floor = simplex_cosine_floor(seq_len)
    tolerance = MEASURED_ROUNDING_EPS * float(torch.finfo(dtype).eps)
    return (floor if floor - tolerance <= cosine < floor else cosine), tolerance


def measured_input_theory(arch: Architecture, beta, depth, q0, rho0, dtype):
    """The theory's trajectory started from a measured mean input state ``(q0, rho0)``.

    :func:`remprop.theory.propagate` at the model's ``beta`` (the heads' effective beta
    is applied there) from ``q0`` and the measured ``rho0 = p/q`` put on the theory's
    floor when it lies below by rounding only (:func:`measured_cosine_on_floor`, at
    ``arch.seq_len``; ``dtype`` is the simulation's precision).

    Returns
    -------
    (RunSettings, remprop.theory.Trajectory, float)
        The run (with the clipped ``rho0``), its trajectory and the clipping tolerance.

    Raises
    ------
    ValueError
        The measured state cannot start the theory (the message names the measured
        quantities, not an option).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(d, e); docs/theory.md section 2.
    """
    rho_in, tolerance = measured_cosine_on_floor(rho0, arch.seq_len, resolve_dtype(dtype))
    try:
        run = RunSettings(arch, beta, depth, q0, rho_in)
    except ValueError as err:  # about measured quantities: name them, not an option never passed
        raise ValueError(f"the measured input state (q0 = {q0!r}, rho0 = {rho0!r}) cannot start "
                         f"the theory: {err}") from None
    return run, propagate(run.arch, run.beta, run.depth, q0=run.q0, rho0=run.rho0), tolerance


def compare(arch: Architecture | None = None, beta=0.5, depth=60, *, sim: SimulationSettings | None = None,
            observable="cosine", progress=None, theory="auto", gram_draws=8) -> Comparison:
    """Simulate ``seeds x sequences`` sequences through the stack and compare with the theory.

    Parameters
    ----------
    arch : remprop.theory.Architecture, optional
        Default BERT defaults. Numeric fields must be scalars. Its ``heads`` and
        ``qk_scaling`` set both the simulated attention and the theory (which runs each
        head at :meth:`~remprop.theory.Architecture.effective_beta`).
    beta : float
        Query/key scale of the model.
    depth : int
        Blocks L.
    sim : remprop.validation.SimulationSettings, optional
        Width d, tokens T, MLP width, causal mask, dtype, device, the seeds (one
        initialisation each), the sequences per seed and their kind (``inputs``: embedded
        pydoc text windows, or Gaussian tokens with ``q0``, ``rho0``), and ``batch_size``
        (sequences pushed through at once; None: all of a seed, at most 16). Default
        ``SimulationSettings()`` (d = 720, T = 512, 2 seeds x 2 text sequences).
    observable : {"cosine", "rho"}
        Measured quantity set against the theory's rho.
    progress : callable, optional
        Called with the number of sequences finished after each batch.
    theory : {"auto", "mean", "gram", "sampled"}
        "mean": :func:`~remprop.theory.propagate` from the mean measured input state.
        "gram": one :func:`~remprop.theory.gram_state.propagate_gram` per input sequence,
        started from its measured Gram matrix ``x x^T / d`` (float64), at finite
        ``T = sim.seq_len``; ``Comparison.theory`` then holds the mean over sequences of their
        ``q``, ``p = rho q`` and of the ``observable`` (mean pair cosine, or ``p / q``) as its
        ``rho``, and the settings record
        ``theory_cosine_se`` (Monte Carlo standard error of that mean). Whatever the
        theory, the settings record the mean
        :func:`~remprop.theory.gram_state.simplex_distance` of the input sequences as
        ``simplex_distance`` (docs/theory.md section 17), and :meth:`Comparison.summary`
        says it. "sampled": as "gram" with ``sampled=True``, ``gram_draws``
        single-initialisation chains whose token norms scatter as one initialisation's do
        (docs/theory.md section 17.1). "auto" (default): "sampled" for text inputs of an
        encoder (``sim.causal`` False) whose architecture the Gram state supports
        (:func:`~remprop.theory.gram_state.gram_support_problem`), "mean" otherwise (the
        acceptance table of docs/validation.md at 12 initialisations chose the chains).
    gram_draws : int
        Monte Carlo draws per attention layer of the Gram state (chains of "sampled").

    Returns
    -------
    Comparison

    Notes
    -----
    The theory starts from the mean measured input state (q0 and rho0 of the embedded
    text; for synthetic tokens they equal the prescribed values exactly), with the
    architecture's attention maps (finite T where ``arch.seq_len`` is set). With
    ``theory="gram"`` or ``"sampled"`` (the default for text) each sequence's measured input
    Gram matrix starts :func:`remprop.theory.propagate_gram` instead (docs/theory.md section 17). With
    ``sim.causal`` the theory is still the encoder's, which only late tokens follow
    (``docs/theory.md`` section 8).

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 1(d, e).
    """
    arch = Architecture() if arch is None else arch
    sim = check_simulation(sim)
    check_choice("observable", observable, OBSERVABLES)
    check_choice("theory", theory, THEORIES)
    if theory == "auto":
        theory = "sampled" if sim.inputs == "text" and not sim.causal and gram_support_problem(arch) is None else "mean"
    elif theory in ("gram", "sampled") and gram_support_problem(arch) is not None:
        raise ValueError(f"theory={theory!r}: {gram_support_problem(arch)}")
    gram_draws = check_positive_int("gram_draws", gram_draws)
    batch_size = min(sim.sequences, 16) if sim.batch_size is None else sim.batch_size
    dtype, device = sim.dtype, sim.device
    stacks = [SimulatedStack(arch, beta, depth, sim=sim, seed=s) for s in sim.seeds]
    start = time.perf_counter()
    traces, grams, distances = [], [], []
    for stack in stacks:
        for batch in sim.input_batches(stack.seed, batch_size):
            traces.append(stack.trace(batch.tokens, batch.mask))
            x = batch.tokens.to(torch.float64)
            batch_grams = (x @ x.transpose(1, 2) / stack.width).cpu().numpy()
            distances.extend(simplex_distance(g) for g in batch_grams)  # what the report says of the input
            if theory in ("gram", "sampled"):
                grams.extend(batch_grams)
            if progress is not None:
                progress(len(batch))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    elapsed = time.perf_counter() - start
    trace = StackTrace.concatenate(traces)
    stack = stacks[0]
    q_in, rho_measured = float(trace.q[:, 0].mean()), float(trace.rho[:, 0].mean())
    # the theory's run from the measured input state; the model's beta (propagate applies the
    # heads' effective beta: one rule, in Architecture)
    run, mean_theory, tolerance = measured_input_theory(arch, stack.beta, stack.depth, q_in, rho_measured, dtype)
    rho_in = run.rho0
    theory_kind = theory
    if theory_kind in ("gram", "sampled"):
        theory, gram_settings = _gram_theory(arch, stack, grams, gram_draws, observable, theory_kind == "sampled")
    else:
        theory, gram_settings = mean_theory, {}
    settings = {"arch": arch.to_dict(), "beta": stack.beta, "depth": stack.depth, "seq_len": stack.seq_len,
                "width": stack.width, "d_ff": stack.d_ff, "causal": stack.causal,
                "seeds": list(sim.seeds), "sequences": sim.sequences, "inputs": sim.inputs,
                "q0": q_in, "rho0": rho_in, "rho0_measured": rho_measured, "rho0_clip_tolerance": tolerance,
                "dtype": sim.dtype_name, "device": str(device), "theory": theory_kind,
                "simplex_distance": float(np.mean(distances)), **gram_settings}
    return Comparison(settings, trace, theory, theory_participation(arch, stack.beta, theory),
                      observable, elapsed)


def _gram_theory(arch, stack, grams, draws, observable, sampled=False):
    """The Gram-matrix theory of :func:`compare`: one trajectory per input sequence, averaged
    (``sampled``: its single-initialisation chains).

    Returns a :class:`~remprop.theory.Trajectory` (mean ``q``, mean ``p = rho q``, and as its
    ``rho`` the mean over sequences of the observable: the mean pair cosine, or ``p / q``)
    and the settings it adds.
    """
    if arch.seq_len is not None and arch.seq_len != stack.seq_len:
        raise ValueError(f"the Gram theory runs at the simulated T = {stack.seq_len}: arch.seq_len must be None "
                         f"or {stack.seq_len}, got {arch.seq_len}")
    runs = [propagate_gram(arch, stack.beta, g, stack.depth, draws=draws, seed=k, keep_layers=(), sampled=sampled)
            for k, g in enumerate(grams)]
    q = np.mean([r.q for r in runs], axis=0)
    p = np.mean([r.p for r in runs], axis=0)
    cosine = np.mean([r.mean_cosine if observable == "cosine" else r.rho for r in runs], axis=0)
    se = np.sqrt(np.sum([r.mean_cosine_se ** 2 for r in runs], axis=0)) / len(runs)
    beta_c = np.asarray(arch.block_beta_critical(q[:-1], p[:-1]))
    settings = {"gram_draws": draws, "theory_cosine_se": se.tolist()}
    return Trajectory(q, p, beta_c, cosine=cosine), settings


@dataclass(frozen=True)
class AttentionSweep:
    """One attention layer over a grid of ``beta`` and input cosines.

    Arrays have shape ``(len(input_cosines), len(betas))``; ``measured`` and ``spread``
    map ``cosine``, ``rho``, ``q``, ``y2``, ``entropy`` to the mean and the standard
    deviation over ``seeds x sequences``; ``theory`` maps ``cosine`` (the theory's
    ``p_A / q_A``), ``q`` and ``y2`` (asymptotic) to predictions. With
    ``settings["finite_width"]`` (softmax attention, absolute positions, no QK-norm) it also holds the theory at the
    simulated T and d (docs/theory.md section 18): ``rho_finite_width`` (``p_A / q_A`` of
    :func:`~remprop.theory.rem.finite_width.finite_width_attention_map`, to compare with the
    measured ``rho``), ``q_finite_width`` and ``cosine_finite_width`` (the expected mean
    pairwise cosine, :func:`~remprop.theory.rem.finite_width.attention_mean_cosine`, to
    compare with the measured ``cosine``).
    """

    settings: dict
    betas: np.ndarray
    input_cosines: np.ndarray
    theory: dict
    measured: dict
    spread: dict
    elapsed: float = 0.0

    def theory_curve(self, quantity: str, betas) -> np.ndarray:
        """Theory of ``quantity`` ("cosine", "q", "y2", or with ``settings["finite_width"]``
        "rho_finite_width", "q_finite_width", "cosine_finite_width") at any ``betas``: shape
        (input cosines, betas)."""
        finite_width = quantity.endswith("_finite_width")
        return _attention_theory(self.settings, self.input_cosines, betas, finite_width=finite_width)[quantity]

    def to_dict(self) -> dict:
        as_lists = lambda d: {k: np.asarray(v).tolist() for k, v in d.items()}  # noqa: E731
        return {"settings": self.settings, "betas": self.betas.tolist(),
                "input_cosines": self.input_cosines.tolist(), "theory": as_lists(self.theory),
                "measured": as_lists(self.measured), "measured_std": as_lists(self.spread),
                "elapsed_s": self.elapsed}


def _attention_theory(settings, cosines, betas, finite_width=None):
    """Theory of an :class:`AttentionSweep`; ``finite_width`` (default: the sweep's setting) adds
    the finite-T-and-width entries (softmax attention only)."""
    arch = Architecture(**settings["arch"])
    entry = REGISTRY[arch.attention_map(1.0).name]  # the stand-alone pair of this attention component
    q0 = settings["q0"]
    p0 = q0 * np.asarray(cosines, dtype=float)[:, None]
    betas = np.asarray(betas, dtype=float)[None, :]
    q_a, p_a = entry.theory(q0, p0, beta=betas, sigma_v2=arch.sigma_v2, sigma_b2=arch.sigma_b2, heads=arch.heads,
                            qk_scaling=arch.qk_scaling)
    with np.errstate(invalid="ignore"):  # 0/0 where Y2 = 0 and there is no value bias
        cosine = np.asarray(p_a / q_a)
    out = {"cosine": cosine, "q": np.asarray(q_a),
           "y2": np.asarray(participation_ratio(arch.effective_beta(betas), q0, p0)) + 0.0 * p0}
    if finite_width is None:
        finite_width = settings.get("finite_width", False)
    if finite_width and not arch.attention.gain_controlled and not arch.positions.rotary and not arch.qk_norm:
        sizes = dict(width=settings["width"], seq_len=settings["seq_len"], heads=arch.heads)
        beta_eff = arch.effective_beta(betas)
        q_w, p_w = finite_width_attention_map(beta_eff, q=q0, p=p0, sigma_v2=arch.sigma_v2, sigma_b2=arch.sigma_b2,
                                              **sizes)
        out.update(q_finite_width=np.asarray(q_w), rho_finite_width=np.asarray(p_w / q_w),
                   cosine_finite_width=np.asarray(attention_mean_cosine(beta_eff, q=q0, p=p0, sigma_v2=arch.sigma_v2,
                                                                        sigma_b2=arch.sigma_b2, **sizes)))
    return out


def attention_sweep(betas, input_cosines=(0.0,), *, arch: Architecture | None = None,
                    sim: SimulationSettings | None = None, progress=None, finite_width=False) -> AttentionSweep:
    """Measure one attention layer (no skip, no LayerNorm) against its theory map.

    For every seed, input cosine and beta, ``sim.sequences`` synthetic sequences
    (:func:`~remprop.validation.inputs.gaussian_tokens` with ``sim.q0`` and the input cosine)
    pass through one attention layer of the kind ``arch.attention`` with the value
    variances of ``arch``. The weights of a seed are the same draw at every beta (scaled),
    which makes the curves smooth in beta.

    Parameters
    ----------
    betas : array_like
        Query/key scales, > 0.
    input_cosines : array_like
        Input rho0 values (``sim.rho0`` and ``sim.inputs`` are not read).
    arch : Architecture, optional
        Supplies ``attention``, ``sigma_v2``, ``sigma_b2``, ``heads`` and ``qk_scaling``.
    sim : remprop.validation.SimulationSettings, optional
        Width, tokens, seeds, sequences per seed, ``q0``, dtype and device, as :func:`compare`.
    progress : callable, optional
        Called with the number of sequences finished after each sequence batch.
    finite_width : bool
        Also set the theory at the simulated T and d beside the measurements (softmax
        attention; :class:`AttentionSweep`, docs/theory.md section 18); recorded in
        ``settings["finite_width"]``.

    Returns
    -------
    AttentionSweep

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Fig. 2 (output cosine) and Fig. 5 (Y2).
    """
    arch = Architecture() if arch is None else arch
    betas = np.atleast_1d(as_float_array("betas", betas, positive=True)).ravel()
    cosines = np.atleast_1d(as_float_array("input_cosines", input_cosines, low=-1.0, high=1.0)).ravel()
    sim = check_simulation(sim)
    seed_list, sequences, width, seq_len = sim.seeds, sim.sequences, sim.width, sim.seq_len
    heads, qk_scaling = arch.heads, arch.qk_scaling
    if width % heads:
        raise ValueError(f"heads must divide width, got heads={heads}, width={width}")
    dtype, device = sim.dtype, sim.device
    entry = REGISTRY[arch.attention_map(1.0).name]  # the stand-alone pair of this attention component
    sigma_v2, sigma_b2 = check_scalar("sigma_v2", arch.sigma_v2), check_scalar("sigma_b2", arch.sigma_b2)
    q0 = sim.q0
    names = ("q", "p", "rho", "cosine", "y2", "entropy")
    samples = {k: np.empty((len(cosines), len(betas), len(seed_list) * sequences)) for k in names}
    start = time.perf_counter()
    with torch.no_grad():
        for s_index, seed in enumerate(seed_list):
            cols = slice(s_index * sequences, (s_index + 1) * sequences)
            for r_index, rho in enumerate(cosines):
                x = gaussian_tokens(q0, float(rho), count=sequences, seq_len=seq_len, width=width, seed=seed,
                                    index=r_index, dtype=dtype, device=device).tokens
                for b_index, beta in enumerate(betas):
                    gen = generator(seed, STREAM_WEIGHTS, 0, device)
                    weights = layers.draw_attention_weights(gen, width, float(beta), seq_len, sigma_v2, sigma_b2,
                                                            dtype=dtype, device=device,
                                                            layout=layers.HeadLayout(heads, qk_scaling))
                    out, probs = entry.torch_function(x, weights, heads=heads)
                    stats = {**token_statistics(out), **attention_statistics(probs)}
                    for k in names:
                        samples[k][r_index, b_index, cols] = stats[k].cpu().numpy()
                if progress is not None:
                    progress(sequences)
    elapsed = time.perf_counter() - start
    ddof = 1 if samples["q"].shape[-1] > 1 else 0
    settings = {"arch": arch.to_dict(), "q0": float(q0), "width": width, "seq_len": seq_len,
                "finite_width": bool(finite_width),
                "seeds": list(seed_list), "sequences": sequences, "dtype": sim.dtype_name,
                "device": str(device)}
    return AttentionSweep(settings, betas, cosines, _attention_theory(settings, cosines, betas),
                          {k: v.mean(axis=-1) for k, v in samples.items()},
                          {k: v.std(axis=-1, ddof=ddof) for k, v in samples.items()}, elapsed)
