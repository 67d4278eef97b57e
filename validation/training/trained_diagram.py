r"""The trained diagram: trained cells classified and set against the theory.

The theory calls a cell trainable, rank-collapsed or entropy-collapsed from signal
propagation at initialisation. Here each cell ``(alpha_sa, beta)`` is *trained*
(``remprop.validation.training.train``, masked-language modelling on real text, one run
per seed) and classified from what training achieved:

**Trained fraction.** With ``U`` the unigram loss (cross-entropy of the masked tokens under
the training split's token frequencies: the loss of a model that learned the frequencies
and nothing about context), ``L`` a cell's final test loss (mean over seeds) and ``R`` the
smallest ``L`` of the grid (the best-trained cell, the reference),

.. math:: f = \frac{U - L}{U - R},

the share of the best achievable improvement over the unigram baseline that the cell
achieved (``f = 1`` for the reference, ``f <= 0`` for a cell that learned no more than the
frequencies). A cell is **trainable** when ``f >= 3/4`` (:data:`TRAINED_FRACTION`).

*Why this rule.* Both failure modes leave a model near the unigram loss: a rank-collapsed
stack gives every token the same representation, so its masked-token prediction cannot
depend on the context; an entropy-collapsed stack has attention frozen onto a few keys with
vanishing query/key gradients. Trained cells sit near ``f = 1``. But training partly undoes
a collapse within its budget, and how much was measured before any grid ran, on a pilot
(seed 100, post-LN, depth 24, d = 64, T = 64, 300 AdamW steps at lr 1e-3, unigram loss
U = 5.750): trainable (alpha_SA 1, beta 0.5) L = 5.468, f = 1; rank-collapsed at init
(alpha_SA 0.3, beta 0.5) L = 5.585, f = 0.59, and (alpha_SA 0.1, beta 0.5) L = 5.608,
f = 0.51; entropy-collapsed (alpha_SA 1, beta 6) L = 5.696, f = 0.19. Deep rank-collapsed
stacks still recover about half of the improvement, so the midpoint 1/2 would call them
trained; 3/4 lies between the clusters (0.59 and 1) with a margin of about a quarter on
either side. The rule depends neither on the grid's size nor on the unit of the loss,
and it is fixed before the grid runs, without the theory's boundary. ``U`` and ``R``
come from the same data and the same training budget as ``L``, so the rule needs no
absolute loss scale. When no cell beats the unigram loss (``U <= R``), every cell is
non-trainable. The reference is the best cell of the grid, so a grid must hold at least
one trainable cell for the rule to mean anything (the theory's trainable region;
:class:`TrainedDiagram` reports ``R``).

**Naming the failure.** A non-trainable cell is named by the measurements at
initialisation (``result.init``, mean over seeds), exactly as the theory names it:

* **entropy collapse** when the mean attention entropy of some layer is below
  :data:`ENTROPY_FRACTION` ``x log T`` (the entropy of rows spread evenly over ``sqrt(T)``
  keys; an entropy-collapsed row holds O(1) keys, a spread one O(T)); the smallest over
  the layers, which for post-LN is the first layer's (the theory's first-layer rule);
* else **rank collapse** when the mean token cosine after the last block is above the
  theory's threshold (``remprop.theory.DEFAULT_THRESHOLD`` unless set);
* else **untrained** (:data:`UNTRAINED`): it did not train and the initialisation shows
  neither signature (too few steps, a too large learning rate, ...).

A cell with a run whose numbers stopped being finite (``TrainResult.diverged``: its final
test loss is NaN) is **diverged** (:data:`DIVERGED`): an outcome of the grid, not an error,
and not trainable (``f = 0``); the reference ``R`` is the best finite loss.

Entropy collapse wins when both signatures are there, as in
:func:`remprop.diagrams.classify_phases`. A trainable cell is trainable whatever its
initialisation shows: training is the verdict, the initialisation only names failures.

**Against the theory.** :func:`remprop.diagrams.trainability_diagram` on the same grid,
architecture and depth, with the finite-T participation ratio at the trained sequence
length (``theory="finite-T"``, the default) or ``T -> infinity`` (``"asymptotic"``),
started from ``q0 = 1`` (the embeddings are scaled so) and the measured input cosine.
Two agreements: the fraction of cells whose trained phase is the theory's phase, and the
fraction on which trained and theory agree about *trainable or not*.

**At the grid's learning rate.** The phase at initialisation says nothing about the rate; the
theory's learning-rate window (:func:`remprop.diagrams.learning_rate.diagram_window`,
docs/theory.md section 20: a floor below which the stack cannot move within its steps and a
ceiling above which the updates break it) does. :meth:`TrainedDiagram.predicted_at_rate`
relabels the cells trainable at init whose window excludes the grid's ``lr``; the same two
agreements are then reported against it (``agreement_at_rate``,
``agreement_trainable_at_rate``). A cell outside the window agrees when it did not train
(untrained or diverged); a collapsed cell keeps its phase.

**Running.** The grid is trained by
:func:`~remprop.validation.training.trained_grid.run_trained_grid` (resumable cell by cell,
on dask or in this process); this module reads its records (plain JSON).

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333, Fig. 1(c, f) and Fig. 3;
docs/theory.md section 6; docs/training.md.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from remprop.diagrams import (ENTROPY_COLLAPSE, PHASE_LABELS, RANK_COLLAPSE, TRAINABLE, TrainabilityDiagram,
                              trainability_diagram)
from remprop.diagrams.grid_result import CELL_AXES, ComparedView, GridResult, cell_array, check_arrays, suffixed
from remprop.diagrams.learning_rate import (LR_ABOVE_CEILING, LR_BELOW_FLOOR, LR_LABELS, diagram_window,
                                            phases_at_rate)
from remprop.theory import DEFAULT_THRESHOLD

from ..experiments.cell_store import MANIFEST_NAME
from ..experiments.measured_diagram import resolve_theory, theory_architecture
from ..experiments.cell_runner import cell_key
from .trained_grid import TrainedGridSpec, load_trained_records

__all__ = ["TrainedDiagram", "classify_trained", "trained_fraction", "predicted_diagram", "run_verdict",
           "TRAINED_FRACTION", "ENTROPY_FRACTION",
           "UNTRAINED", "DIVERGED", "TRAINED_LABELS"]

#: A cell is trainable when its trained fraction is at least this.
TRAINED_FRACTION = 0.75
#: Entropy collapse: some layer's mean attention entropy at init below this times log T.
ENTROPY_FRACTION = 0.5
#: Code of a cell that did not train and whose initialisation shows neither collapse.
UNTRAINED = 3
#: Code of a cell with a run that diverged (a non-finite loss or weights).
DIVERGED = 4
#: Phase code -> label of the trained diagram (the theory's three, UNTRAINED and DIVERGED).
TRAINED_LABELS = {**PHASE_LABELS, UNTRAINED: "untrained", DIVERGED: "diverged"}
#: The format of the JSON-only files this type wrote before the grid result's format.
_FORMAT_V1 = "remprop.trained_diagram/1"
#: The arrays of a trained grid and their axes (all listed in its JSON summary too).
_ARRAYS = {"phase": CELL_AXES, "final_test_loss": CELL_AXES, "final_test_loss_std": CELL_AXES,
           "fraction": CELL_AXES, "init_entropy_min": CELL_AXES, "init_cosine_final": CELL_AXES,
           "eval_steps": ("step",), "test_loss": CELL_AXES + ("step",)}
_RULES = {
    "trained_fraction": "f = (unigram_loss - final_test_loss) / (unigram_loss - reference_loss), "
                        "reference = the best cell",
    "trainable": f"f >= {TRAINED_FRACTION}",
    "entropy_collapse": f"not trainable and the smallest per-layer attention entropy at init "
                        f"< {ENTROPY_FRACTION} log T",
    "rank_collapse": "not trainable, not entropy-collapsed, token cosine after the last block at "
                     "init > threshold",
    "untrained": "not trainable and neither signature at init",
    "diverged": "a run's loss or weights stopped being finite (its final test loss is NaN)",
}


# -- classification -------------------------------------------------------------------------
def trained_fraction(final_loss, unigram_loss, reference_loss=None):
    r"""Share of the best improvement over the unigram loss that each cell achieved.

    .. math:: f = (U - L) / (U - R), \quad R = \min L \text{ unless given}

    ``f`` is 0 everywhere when ``U <= R`` (nothing beat the unigram baseline); a ``nan``
    loss (a diverged run) gives ``f = 0``. See the module docstring.
    """
    loss = np.asarray(final_loss, dtype=float)
    unigram = np.asarray(unigram_loss, dtype=float)
    reference = _best(loss) if reference_loss is None else float(reference_loss)
    gain = np.broadcast_to(unigram, loss.shape) - reference
    with np.errstate(invalid="ignore", divide="ignore"):
        f = np.where(gain > 0, (unigram - loss) / np.where(gain > 0, gain, 1.0), 0.0)
    return np.where(np.isfinite(f), f, 0.0)


def _best(loss) -> float:
    """The smallest finite loss (NaN when none is finite)."""
    finite = np.asarray(loss, dtype=float)[np.isfinite(loss)]
    return float(finite.min()) if finite.size else float("nan")


def classify_trained(fraction, init_entropy_min, init_cosine_final, seq_len, threshold=DEFAULT_THRESHOLD,
                     diverged=False):
    """Trained phase code of each cell (module docstring): DIVERGED where ``diverged``, else
    TRAINABLE when ``fraction >= TRAINED_FRACTION``, else ENTROPY_COLLAPSE when
    ``init_entropy_min < ENTROPY_FRACTION log T``, else RANK_COLLAPSE when
    ``not init_cosine_final <= threshold``, else UNTRAINED."""
    fraction, entropy, cosine, diverged = np.broadcast_arrays(
        *(np.asarray(v, dtype=float) for v in (fraction, init_entropy_min, init_cosine_final)),
        np.asarray(diverged, dtype=bool))
    phase = np.full(fraction.shape, UNTRAINED, dtype=np.int8)
    with np.errstate(invalid="ignore"):
        phase[~(cosine <= threshold)] = RANK_COLLAPSE
        phase[entropy < ENTROPY_FRACTION * np.log(seq_len)] = ENTROPY_COLLAPSE
        phase[fraction >= TRAINED_FRACTION] = TRAINABLE
    phase[diverged] = DIVERGED
    return phase


def predicted_diagram(config, betas, alphas, theory="auto", threshold=DEFAULT_THRESHOLD,
                      input_rho=0.0) -> TrainabilityDiagram:
    """The theory's diagram of training runs of ``config`` on a (beta, alpha_SA) grid.

    :func:`remprop.diagrams.trainability_diagram` of ``config.arch`` at ``config.depth``, with
    the finite-T attention at the trained sequence length (``theory="finite-T"``, the
    default ``"auto"``) or ``T -> infinity``, started from ``q0 = 1`` (the embeddings are
    scaled so) and the input cosine ``input_rho`` (docs/theory.md section 6).
    """
    arch = theory_architecture(config.arch, resolve_theory(theory), config.seq_len)
    return trainability_diagram(arch, np.atleast_1d(np.asarray(betas, dtype=float)),
                                np.atleast_1d(np.asarray(alphas, dtype=float)), config.depth, threshold, q0=1.0,
                                rho0=input_rho)


def run_verdict(result, theory="auto", threshold=DEFAULT_THRESHOLD) -> dict:
    """The theory's phase at init of one training run beside what the run achieved.

    The phase is that of :func:`predicted_diagram` at the run's ``(alpha_SA, beta)``,
    started from the run's measured input cosine (``result.init["token_cosine"][0]``). One
    run has no grid reference ``R``, so the trained-fraction rule (module docstring) cannot
    label it; the outcome is its final test loss ``L`` against the unigram loss ``U``:
    ``gain = U - L`` nats (> 0: it learned more than the token frequencies).

    Beside the phase at init stands the theory's learning-rate window at the run's width and
    steps (:func:`remprop.diagrams.learning_rate.diagram_window`, docs/theory.md section 20) and
    what it expects at the run's ``lr``: a cell trainable at init trains only inside it.

    Returns
    -------
    dict
        ``theory_phase`` (label), ``theory``, ``lr_window`` (``(floor, ceiling)``, None where the
        window has no derivation), ``expected_at_rate`` (a label of
        :data:`remprop.diagrams.learning_rate.LR_LABELS`, or None), ``final_test_loss``,
        ``unigram_loss``, ``gain``, ``beat_unigram`` (bool), ``diverged`` (bool) and ``line``: one
        line of two sentences saying all that, the theory's expectation first ("verdict: theory's
        phase at init (...): trainable; at lr ... not expected to train (lr below floor).") and then
        what the run did ("The run: final test loss ...").
    """
    config = result.config
    cosine = np.asarray(result.init.get("token_cosine", []), dtype=float)
    rho = float(np.clip(cosine[0], -1.0, 1.0)) if cosine.size and np.isfinite(cosine[0]) else 0.0
    theory = resolve_theory(theory)
    predicted = predicted_diagram(config, config.beta, config.arch.alpha_sa, theory, threshold, rho)
    phase = PHASE_LABELS[int(predicted.phase[0, 0])]
    window, at_rate = _window_and_phases(predicted, config)
    if window is not None:  # one cell
        window, at_rate = tuple(float(edge[0, 0]) for edge in window), LR_LABELS[int(at_rate[0, 0])]
    rate = "" if window is None else (
        f"; at lr {config.lr:g} (its window {window[0]:.2g} - {window[1]:.2g}): "
        + ("expected to train" if at_rate == PHASE_LABELS[TRAINABLE] else f"not expected to train ({at_rate})"))
    loss, unigram = float(result.final_test_loss), float(result.unigram_loss)
    diverged = result.diverged is not None or not np.isfinite(loss)
    gain = unigram - loss
    where = (f"theory's phase at init ({theory} theory, alpha_SA {config.arch.alpha_sa:g}, beta {config.beta:g}, "
             f"depth {config.depth}): {phase}")
    # two sentences: what the theory expects, then what the run did
    if diverged:
        outcome = "diverged (loss not finite)"
    else:
        side = "below" if gain > 0 else "not below"
        outcome = (f"final test loss {loss:.4f}, {abs(gain):.4f} nats {side} the unigram loss {unigram:.4f}: it "
                   f"{'learned beyond' if gain > 0 else 'did not beat'} the token frequencies ('trainable' needs a "
                   f"grid's best cell, remprop trained-diagram)")
    return {"theory_phase": phase, "theory": theory, "lr_window": window, "expected_at_rate": at_rate,
            "final_test_loss": loss, "unigram_loss": unigram, "gain": gain,
            "beat_unigram": bool(not diverged and gain > 0), "diverged": bool(diverged),
            "line": f"verdict: {where}{rate}. The run: {outcome}"}


def _window_and_phases(predicted, config):
    """``((floor, ceiling), phases)``: the window of the cells of ``predicted`` at ``config``'s width
    and steps (:func:`~remprop.diagrams.learning_rate.diagram_window`) and the phases at
    ``config``'s rate (:func:`~remprop.diagrams.learning_rate.phases_at_rate`); ``(None, None)``
    where the window has no derivation for the block (its ``ValueError``): a trained grid still
    gets its diagram."""
    try:
        floor, ceiling = diagram_window(predicted, config.width, config.steps)
    except ValueError:
        return None, None
    return (floor, ceiling), phases_at_rate(predicted.phase, ceiling, config.lr, floor)


def _rate_values(phase, at_rate) -> dict:
    """``agreement_at_rate`` and ``agreement_trainable_at_rate`` of trained ``phase`` against the
    phases at the rate (None for both without them). Outside the window a cell agrees when it did
    not train (untrained or diverged)."""
    if at_rate is None:
        return {"agreement_at_rate": None, "agreement_trainable_at_rate": None}
    outside = (at_rate == LR_ABOVE_CEILING) | (at_rate == LR_BELOW_FLOOR)
    agrees = np.where(outside, (phase == UNTRAINED) | (phase == DIVERGED), phase == at_rate)
    agrees_trainable = (phase == TRAINABLE) == (at_rate == TRAINABLE)
    return {"agreement_at_rate": float(agrees.mean()), "agreement_trainable_at_rate": float(agrees_trainable.mean())}


def _eval_steps(config) -> list:
    """The steps of a finished run's test loss: 0, every ``eval_every``, the last."""
    return sorted({0, *range(config.eval_every, config.steps + 1, config.eval_every), config.steps})


def _curve(result, length) -> np.ndarray:
    """A run's test-loss curve, NaN after a divergence (padded to ``length``)."""
    curve = np.full(length, np.nan)
    values = np.asarray([float(v) for v in result["test_loss"]], dtype=float)[:length]
    curve[:values.size] = values
    return curve


def _cell_arrays(spec, records, name, part, reduce):
    """``reduce`` over layers of ``result[part][name]``, mean over seeds, per cell (alpha, beta)."""
    out = np.full(spec.shape, np.nan)
    for a, b in spec.cells():
        values = [reduce(np.asarray([float(v) for v in r[part][name]], dtype=float))
                  for r in records[cell_key(a, b)]["results"]]
        out[a, b] = float(np.mean(values))
    return out


@dataclass(frozen=True, eq=False)
class TrainedDiagram(ComparedView):
    """Trained phases of a (beta, alpha_sa) grid beside the theory's.

    A view on a :class:`~remprop.diagrams.grid_result.GridResult` of kind ``"trained"``
    whose ``predicted`` is the theory's grid. Arrays over the grid have axes
    ``(alpha, beta)`` like :class:`~remprop.diagrams.TrainabilityDiagram`.

    Attributes
    ----------
    grid : GridResult
        The numbers, settings (the grid's manifest, the theory), files.
    spec : TrainedGridSpec
    predicted : TrainabilityDiagram
        The theory on the same grid.
    theory : str
        ``"finite-T"`` or ``"asymptotic"``: the theory of ``predicted``.
    final_test_loss, final_test_loss_std : ndarray
        Mean and standard deviation over seeds (ddof 1; 0 for one seed) of the final test loss.
    unigram_loss, reference_loss : float
        The unigram baseline ``U`` (mean over all runs) and the reference ``R`` (best cell).
    fraction : ndarray
        Trained fraction ``f`` (:func:`trained_fraction`).
    init_entropy_min, init_cosine_final : ndarray
        At initialisation, mean over seeds: the smallest per-layer mean attention entropy, and
        the mean token cosine after the last block.
    phase : ndarray of int8
        Trained phase codes (:data:`TRAINED_LABELS`).
    eval_steps : ndarray
        Steps of the test-loss curves.
    test_loss : ndarray, shape (alphas, betas, evals)
        Test-loss curves, mean over seeds.
    input_rho : float
        Measured input cosine where the results carry it (else 0); the theory starts there.
    devices : tuple of str
    """

    grid: GridResult
    spec: TrainedGridSpec
    predicted: TrainabilityDiagram

    KIND = "trained"
    #: The trained fraction at which a cell is trainable (module docstring).
    TRAINED_FRACTION = TRAINED_FRACTION

    theory = property(lambda self: self.grid.settings["theory"], doc="The theory of ``predicted``.")
    final_test_loss = cell_array("final_test_loss", "Final test loss per cell, mean over seeds.")
    final_test_loss_std = cell_array("final_test_loss_std", "Its standard deviation over seeds.")
    fraction = cell_array("fraction", "Trained fraction f per cell.")
    init_entropy_min = cell_array("init_entropy_min", "Smallest per-layer mean attention entropy at init.")
    init_cosine_final = cell_array("init_cosine_final", "Mean token cosine after the last block at init.")
    eval_steps = cell_array("eval_steps", "Steps of the test-loss curves.")
    test_loss = cell_array("test_loss", "Test-loss curves per cell, mean over seeds.")
    unigram_loss = property(lambda self: float(self.grid.values["unigram_loss"]), doc="The unigram baseline U.")
    reference_loss = property(lambda self: float(self.grid.values["reference_loss"]), doc="The best cell's loss R.")
    input_rho = property(lambda self: float(self.grid.values["input_rho"]), doc="Input cosine the theory starts at.")
    devices = property(lambda self: tuple(self.grid.provenance.get("devices", ())), doc="Devices of the cells.")

    @classmethod
    def from_records(cls, spec: TrainedGridSpec, records: dict, theory="auto") -> "TrainedDiagram":
        """Classify the records of a complete grid (see the module docstring)."""
        theory = resolve_theory(theory)
        missing = [cell_key(a, b) for a, b in spec.cells() if cell_key(a, b) not in records]
        if missing:
            raise ValueError(f"records: {len(missing)} of {len(spec.cells())} cells are missing (first: {missing[0]})")
        cfg = spec.config
        runs = lambda a, b: records[cell_key(a, b)]["results"]  # noqa: E731
        finals = np.array([[[float(r["final_test_loss"]) for r in runs(a, b)] for b in range(spec.shape[1])]
                           for a in range(spec.shape[0])])
        loss = finals.mean(axis=-1)
        spread = finals.std(axis=-1, ddof=1) if finals.shape[-1] > 1 else np.zeros(spec.shape)
        unigram = float(np.mean([float(r["unigram_loss"]) for rec in records.values() for r in rec["results"]]))
        fraction = trained_fraction(loss, unigram)
        entropy = _cell_arrays(spec, records, "attention_entropy", "init", np.min)
        cosine = _cell_arrays(spec, records, "token_cosine", "init", lambda v: v[-1])
        phase = classify_trained(fraction, entropy, cosine, cfg.seq_len, spec.threshold, ~np.isfinite(loss))
        # the input cosine, where the per-layer cosine includes the input (depth + 1 values)
        first = [np.asarray([float(v) for v in r["init"]["token_cosine"]], dtype=float) for rec in records.values()
                 for r in rec["results"]]
        starts = [v[0] for v in first if v.size == cfg.depth + 1 and np.isfinite(v[0])]
        input_rho = float(np.clip(np.mean(starts), -1.0, 1.0)) \
            if starts and all(v.size == cfg.depth + 1 for v in first) else 0.0
        predicted = predicted_diagram(cfg, spec.betas, spec.alphas, theory, spec.threshold, input_rho)
        steps = np.asarray(_eval_steps(cfg), dtype=float)
        curves = np.array([[np.mean([_curve(r, steps.size) for r in runs(a, b)], axis=0)
                            for b in range(spec.shape[1])] for a in range(spec.shape[0])])
        devices = sorted({str(r.get("run", {}).get("device", "?")) for r in records.values()})
        arrays = dict(phase=phase, final_test_loss=loss, final_test_loss_std=spread, fraction=fraction,
                      init_entropy_min=entropy, init_cosine_final=cosine, eval_steps=steps, test_loss=curves)
        agrees_trainable = (phase == TRAINABLE) == (predicted.phase == TRAINABLE)
        values = {"unigram_loss": unigram, "reference_loss": _best(loss), "input_rho": input_rho,
                  **cls.comparison_values(phase, predicted.phase, TRAINED_LABELS),
                  "agreement_trainable": float(agrees_trainable.mean()),
                  **_rate_values(phase, _window_and_phases(predicted, cfg)[1])}
        grid = GridResult("trained", spec.alphas, spec.betas, arrays, dict(_ARRAYS), TRAINED_LABELS,
                          {"grid": spec.manifest(), "theory": theory, "rules": _RULES}, values,
                          {"devices": devices}, tuple(_ARRAYS), predicted.grid)
        return cls(grid, spec, predicted)

    @classmethod
    def from_grid(cls, grid: GridResult) -> "TrainedDiagram":
        """The diagram of a trained grid: the training grid's spec and the prediction checked again."""
        check_arrays(grid, _ARRAYS)
        if grid.predicted is None:
            raise ValueError("predicted: a trained grid carries the theory's prediction")
        try:
            spec = TrainedGridSpec.from_manifest(grid.settings["grid"])
        except (TypeError, ValueError, KeyError) as err:
            raise ValueError(f"settings.grid: {err}") from None
        resolve_theory(grid.settings["theory"])
        if not (np.array_equal(spec.betas, grid.betas) and np.array_equal(spec.alphas, grid.alphas)):
            raise ValueError("settings.grid: its betas and alphas are not the grid's")
        return cls(grid, spec, TrainabilityDiagram.from_grid(grid.predicted))

    @classmethod
    def load(cls, path) -> "TrainedDiagram":
        """Read a diagram written by :meth:`save` (:meth:`GridView.load
        <remprop.diagrams.grid_result.GridView.load>`). A trained diagram of the previous
        format (``<path>.json`` only, ``remprop.trained_diagram/1``) is not read: the error
        says to make it again from its grid folder."""
        json_path, npz_path = suffixed(path, ".json"), suffixed(path, ".npz")
        if not npz_path.exists() and json_path.exists():
            try:
                old = json.loads(json_path.read_text(encoding="utf-8")).get("format") == _FORMAT_V1
            except (OSError, ValueError, AttributeError):
                old = False
            if old:
                raise ValueError(f"path: {json_path} is a trained diagram in the format before "
                                 "remprop.grid_result/1, which is not read; make it again from its grid folder with "
                                 "`remprop trained-diagram --out FOLDER` and the same options (every trained cell "
                                 "is reused)")
        return super().load(path)

    @classmethod
    def from_folder(cls, out, theory="auto") -> "TrainedDiagram":
        """Read a finished grid folder; a missing or damaged manifest, a missing cell or a
        damaged record is one ``ValueError`` naming the folder or the file."""
        path = Path(out) / MANIFEST_NAME
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ValueError(f"out: {out} holds no trained grid (no {MANIFEST_NAME})") from None
        except (OSError, ValueError):
            raise ValueError(f"out: {path} is not a readable grid manifest") from None
        try:
            spec = TrainedGridSpec.from_manifest(manifest)
        except (TypeError, ValueError, KeyError) as err:
            raise ValueError(f"out: {path} is not a valid trained-grid manifest ({err})") from None
        return cls.from_records(spec, load_trained_records(spec, out), theory)

    # -- comparison -----------------------------------------------------------------------
    @property
    def agrees_trainable(self) -> np.ndarray:
        """Per cell: trained and predicted agree about trainable or not."""
        return (self.phase == TRAINABLE) == (self.predicted.phase == TRAINABLE)

    @property
    def agreement_trainable(self) -> float:
        """Fraction of cells on which trained and predicted agree about trainable or not."""
        return float(self.agrees_trainable.mean())

    def predicted_at_rate(self):
        """The theory's phases at the grid's learning rate (module docstring): cells trainable at
        init whose window excludes ``lr`` become ``LR_BELOW_FLOOR`` or ``LR_ABOVE_CEILING``
        (:data:`remprop.diagrams.learning_rate.LR_LABELS`); None for a block form the window has no
        derivation for."""
        return _window_and_phases(self.predicted, self.spec.config)[1]

    @property
    def agreement_at_rate(self):
        """Fraction of cells whose trained phase agrees with :meth:`predicted_at_rate` (None without it)."""
        return self._rate_value("agreement_at_rate")

    @property
    def agreement_trainable_at_rate(self):
        """Fraction of cells on which trained and :meth:`predicted_at_rate` agree about trainable or
        not (None without it)."""
        return self._rate_value("agreement_trainable_at_rate")

    def _rate_value(self, name):
        if name not in self.grid.values:  # a grid written before the window was reported
            return _rate_values(self.phase, self.predicted_at_rate())[name]
        return self.grid.values[name]

    def summary(self) -> str:
        """One line: agreements (at init and at the grid's rate), grid and training sizes."""
        cfg, n = self.spec.config, self.phase.size
        at_rate = self.agreement_at_rate
        rate = "" if at_rate is None else (
            f"; with the learning-rate window at lr {cfg.lr:g}: phase {round(at_rate * n)}/{n} "
            f"({100 * at_rate:.1f}%), trainable-or-not {round(self.agreement_trainable_at_rate * n)}/{n} "
            f"({100 * self.agreement_trainable_at_rate:.1f}%)")
        return (f"trained vs predicted ({self.theory} theory): phase agrees in {int(self.agrees.sum())}/{n} cells "
                f"({100 * self.agreement:.1f}%), trainable-or-not in {int(self.agrees_trainable.sum())}/{n} "
                f"({100 * self.agreement_trainable:.1f}%){rate}; "
                f"{self.spec.shape[1]} betas x {self.spec.shape[0]} alphas, "
                f"depth {cfg.depth}, d={cfg.width}, T={cfg.seq_len}, {cfg.steps} steps, "
                f"{len(self.spec.seeds)} seed(s) per cell"
                + (f"; {diverged} cell(s) diverged" if (diverged := int((self.phase == DIVERGED).sum())) else ""))

    # -- output ---------------------------------------------------------------------------
    def figure(self, fine_points=120):
        """Trained phases over the theory's (see :mod:`remprop.diagrams.trained_figures`)."""
        from remprop.diagrams.trained_figures import trained_diagram_figure

        return trained_diagram_figure(self, fine_points=fine_points)

    def save(self, path, *, figure=True) -> list:
        """Write ``<path>.npz`` (all arrays, the prediction's too), ``<path>.json`` (the summary,
        strict JSON, :mod:`remprop.diagrams.grid_result`) and with ``figure`` ``<path>.png``;
        return the paths. :meth:`load` reads them back."""
        return super().save(path, figure=figure)
