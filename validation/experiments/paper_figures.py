"""Every reference figure of the paper, theory and simulation, in one call.

:func:`make_figures` walks the registry :data:`remprop.diagrams.paper_figures.PAPER_FIGURES`
and writes, into one folder, a PNG and the data behind it (JSON and/or npz) for each
figure of docs/theory.md section 9, plus an index ``figures.json``:

====  ==========================================================================
1ab   attention maps of one layer at a small and a large beta, Y2 theory vs measured
1c    trainability diagram of the 60-layer post-LN BERT (theory), and a simulated
      sweep classified cell by cell against the prediction (measured vs predicted)
1d    per-layer cosine, theory vs simulated BERT, beta = 0.5, 60 layers
1e    the same at beta = 3 (entropy collapse), 12 layers
1f    masked-LM training: test loss over steps, two initialisations per phase
2     one attention layer: output cosine over (beta, input cosine), theory map; and
      theory vs simulation against beta
3     one layer, one head trained at several beta: final test loss, beta_c marked
3c    query gradient norm against beta, collapsed over (T, d): theory and autograd
4     mean cosine over 100 layers: post-LN, pre-LN and gain-controlled versions
5     participation ratio Y2 against beta, theory vs simulation
6     deep post-LN training, softmax against gain-controlled attention
7     eigenvalues of the attention matrix at init: bulk radius, theory and simulation
8     entropy collapse against a trainable reference at several learning rates
9     tanh stacks: order-to-chaos boundaries and the cosine over depth on both sides
12    causal (decoder) stack: cosine of the last 50 tokens over depth
====  ==========================================================================

The theory part of a figure (:mod:`remprop.diagrams.paper_figures`) needs no torch; the
``simulate_*`` functions here are the simulated parts, named by the registry. Without
torch (the validation extra) only the theory parts are written and the index says what
was left out and why. Importing this module imports no torch.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from remprop._json import to_jsonable
from remprop.diagrams.paper_figures import PAPER_FIGURES, SIZES, FigureSizes, check_figure_ids

__all__ = ["make_figures", "FigureSet", "INDEX_NAME",
           "VALIDATION_HINT", "supported_figures", "FigureSizes", "SIZES", "simulate_1ab", "simulate_1c", "simulate_1d", "simulate_1e", "simulate_1f", "simulate_2",
           "simulate_3", "simulate_3c", "simulate_4", "simulate_5", "simulate_6", "simulate_7", "simulate_8",
           "simulate_9", "simulate_12"]

#: File name of the index written beside the figures.
INDEX_NAME = "figures.json"
#: Why a simulated part was left out.
VALIDATION_HINT = "needs the validation extra: pip install 'remprop[validation]'"


def supported_figures() -> dict:
    """Figure id -> description of every figure :func:`make_figures` draws."""
    return {figure_id: figure.description for figure_id, figure in PAPER_FIGURES.items()}


def _torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


@dataclass
class FigureSet:
    """What :func:`make_figures` wrote.

    Attributes
    ----------
    directory : Path
    files : dict
        Figure id -> list of paths written (theory part, then simulated part; PNG first).
    skipped : dict
        Figure id -> reason, for the parts not drawn (the validation extra missing).
    notes : dict
        Figure id -> short facts (agreement of the measured diagram, errors).
    elapsed_s : dict
        Figure id -> seconds.
    index : Path
        The ``figures.json`` written.
    """

    directory: Path
    files: dict
    skipped: dict
    notes: dict
    elapsed_s: dict
    index: Path

    @property
    def paths(self) -> list:
        """Every file written, figure by figure, then the index."""
        return [p for paths in self.files.values() for p in paths] + [self.index]


def make_figures(out_dir, *, quick=False, progress=False, only=None, sizes=None, device=None,
                 workers=0, threads=None) -> FigureSet:
    """Write every reference figure (PNG + data) into ``out_dir``, with an index.

    Parameters
    ----------
    out_dir : str or Path
        Folder (created if missing).
    quick : bool
        Use the ``"quick"`` sizes of :data:`~remprop.diagrams.paper_figures.SIZES` (else
        ``"full"``, the paper's).
    progress : bool
        Progress on stderr (:func:`remprop.progress.progress_bar`: bars on a terminal,
        timestamped lines with the ETA in a log): over the figures, and within each long figure.
    only : str or iterable of str, optional
        Figure ids to draw (default all), e.g. ``"1c,2"``.
    sizes : FigureSizes, optional
        Overrides the preset chosen by ``quick``.
    device : str, optional
        Simulation device (default CUDA when available, else CPU).
    workers : int
        Worker processes of the Fig. 1(c) sweep (0: in this process; see
        :func:`remprop.validation.experiments.sweep.run_sweep`).
    threads : int, optional
        torch CPU threads while simulating. Default: 1 for small sizes (``quick`` or
        custom ``sizes``: small matrices gain nothing from threads, and on a busy
        machine extra threads slow them down many times), torch's default for the
        paper's sizes.

    Returns
    -------
    FigureSet

    References
    ----------
    Giorlandino & Goldt, arXiv 2505.24333, Figs. 1(a-f), 2, 3, 4, 5, 6, 7, 8, 9 and 12.
    """
    sizes = _chosen_sizes(sizes, quick)
    chosen = check_figure_ids(only)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    simulate = _torch_available()
    with _simulation_threads(sizes, threads, simulate):
        return _make_figures(_Context(out, sizes, device, workers, progress), chosen, simulate)


def _chosen_sizes(sizes, quick) -> FigureSizes:
    sizes = sizes if sizes is not None else SIZES["quick" if quick else "full"]
    if not isinstance(sizes, FigureSizes):
        raise ValueError(f"sizes must be a FigureSizes, got {type(sizes).__name__}")
    return sizes


def _simulation_threads(sizes, threads, simulate):
    """The torch threads of :func:`make_figures` around its simulations (its ``threads`` rule), or a no-op."""
    if threads is None and sizes != SIZES["full"]:
        threads = 1
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    if not simulate or threads is None:
        return contextlib.nullcontext()
    from ..backend import torch_threads  # sets, then restores

    return torch_threads(threads)


@dataclass
class _Context:
    """What a simulated part needs: the folder, the sizes and the run options."""

    out: Path
    sizes: FigureSizes
    device: object
    workers: int
    progress: bool

    def bar(self, total, desc):
        """An inner progress bar (second line), or a no-op one."""
        from remprop.progress import progress_bar

        return progress_bar(total, desc=desc, unit="seq", leave=False, enabled=self.progress, position=1)


def _resolve(dotted):
    module, _, name = dotted.rpartition(".")
    return getattr(importlib.import_module(module), name)


def _make_figures(ctx, chosen, simulate):
    from remprop.progress import progress_bar

    files, skipped, notes, elapsed = {}, {}, {}, {}
    with progress_bar(len(chosen), desc="figures", unit="fig", enabled=ctx.progress, position=0) as bar:
        for figure_id in chosen:
            bar.set_postfix_str(f"fig {figure_id}")
            start = time.perf_counter()
            figure = PAPER_FIGURES[figure_id]
            files[figure_id] = [] if figure.theory is None else list(figure.theory(ctx.out, ctx.sizes))
            if figure.simulation is not None and simulate:
                result = _resolve(figure.simulation)(ctx)
                files[figure_id] += result["files"]
                if result.get("notes"):
                    notes[figure_id] = to_jsonable(result["notes"])
            elif figure.simulation is not None:
                skipped[figure_id] = f"simulation: {VALIDATION_HINT}"
            elapsed[figure_id] = time.perf_counter() - start
            bar.update(1)
    index = ctx.out / INDEX_NAME
    with open(index, "w", encoding="utf-8") as handle:
        json.dump(to_jsonable({
            "format": "remprop.figures/1",
            "sizes": ctx.sizes.preset(),
            "size_settings": dataclasses.asdict(ctx.sizes),
            "figures": {k: {"description": PAPER_FIGURES[k].description, "files": [os.fspath(p) for p in files[k]],
                            "elapsed_s": elapsed[k], **({"notes": notes[k]} if k in notes else {})} for k in files},
            "skipped": skipped,
        }), handle, indent=1, allow_nan=False)
    return FigureSet(ctx.out, files, skipped, notes, elapsed, index)


# -- the simulated parts, named by the registry: (context) -> {"files": [...], "notes": {...}} ----
def simulate_1ab(ctx) -> dict:
    """Fig. 1(a, b), simulated: attention maps at a small and a large beta, Y2 in the titles."""
    from remprop.diagrams.attention_figures import attention_maps_figure
    from remprop.diagrams.paper_figures import FigureResult

    from ..attention_maps import attention_map_data

    s = ctx.sizes
    with ctx.bar(len(s.map_betas), "fig 1ab") as bar:
        data = attention_map_data(s.map_betas, seq_len=s.map_seq_len, width=s.map_width, device=ctx.device)
        bar.update(len(s.map_betas))
    error = np.abs(data["y2_measured"] - data["y2_theory"])
    record = {k: v for k, v in data.items() if k != "matrices"}
    result = FigureResult("fig1ab_attention_maps", attention_maps_figure(data),
                          {**record, "abs_error_y2": error, "max_abs_error_y2": float(error.max())})
    np.savez_compressed(ctx.out / "fig1ab_attention_maps.npz", betas=data["betas"],
                        matrices=np.stack(data["matrices"]))
    files = result.paths(ctx.out) + [ctx.out / "fig1ab_attention_maps.npz"]
    return {"files": files, "notes": {"max_abs_error_y2": float(error.max())}}


def simulate_7(ctx) -> dict:
    """Fig. 7, simulated: eigenvalues of attention matrices and their bulk radius against the theory."""
    from remprop.diagrams.attention_figures import attention_spectrum_figure
    from remprop.diagrams.paper_figures import FigureResult

    from ..attention_maps import attention_spectrum_data

    s = ctx.sizes
    with ctx.bar(len(s.spectrum_betas) * s.spectrum_seeds, "fig 7") as bar:
        data = attention_spectrum_data(s.spectrum_betas, seq_len=s.spectrum_seq_len, width=s.spectrum_width,
                                       seeds=s.spectrum_seeds, device=ctx.device, progress=bar.update)
    relative = data["radius_mean"] / data["radius_theory_width"] - 1.0
    record = {k: v for k, v in data.items() if k != "eigenvalues"}
    values = data["eigenvalues"]
    result = FigureResult("fig7_attention_spectrum", attention_spectrum_figure(data),
                          {**record, "relative_error_radius": relative})
    np.savez_compressed(ctx.out / "fig7_attention_spectrum.npz", betas=data["betas"], eigenvalues_real=values.real,
                        eigenvalues_imag=values.imag)
    files = result.paths(ctx.out) + [ctx.out / "fig7_attention_spectrum.npz"]
    return {"files": files, "notes": {"max_relative_error_radius": float(np.max(np.abs(relative)))}}


def simulate_1c(ctx) -> dict:
    """Fig. 1(c), simulated: a sweep over (beta, alpha_sa), measured phases against predicted ones."""
    from remprop.diagrams.paper_figures import BERT_DIAGRAM
    from remprop.theory import Architecture

    from .measured_diagram import MeasuredDiagram
    from .sweep import SweepSpec, load_records, run_sweep

    s = ctx.sizes
    spec = SweepSpec(arch=Architecture(), betas=np.linspace(*s.sweep_betas[:2], int(s.sweep_betas[2])),
                     alphas=np.linspace(*s.sweep_alphas[:2], int(s.sweep_alphas[2])), depth=s.sweep_depth,
                     seeds=s.sweep_seeds, sequences=s.sweep_sequences, width=s.sweep_width, seq_len=s.sweep_seq_len,
                     threshold=BERT_DIAGRAM["threshold"])
    digest = hashlib.sha1(json.dumps(spec.manifest(), sort_keys=True).encode()).hexdigest()[:10]
    folder = ctx.out / f"fig1c_sweep_{digest}"  # a second run reuses the finished cells
    report = run_sweep(spec, folder, workers=ctx.workers, device=ctx.device, progress=ctx.progress)
    measured = MeasuredDiagram.from_records(spec, load_records(spec, folder))
    files = [Path(p) for p in measured.save(ctx.out / "fig1c_measured_vs_predicted")]
    return {"files": sorted(files, key=lambda p: p.suffix != ".png"),
            "notes": dict(agreement=measured.agreement, cells=int(measured.phase.size),
                          cells_agreeing=int(measured.agrees.sum()), theory=measured.theory,
                          sweep_folder=os.fspath(folder), cells_computed=report.cells_computed,
                          cells_reused=report.cells_reused)}


def _run(ctx, figure_id, name, draw, total, **settings):
    """``draw(**settings)`` with an inner progress bar over ``total`` sequences.

    Returns the FigureResult, renamed ``name`` (the file stem in the figure folder).
    """
    with ctx.bar(total, f"fig {figure_id}") as bar:
        result = draw(progress=bar.update, **settings)
    result.name = name
    return result


def _simulation(ctx, **fields):
    """The :class:`~remprop.validation.SimulationSettings` of a figure: ``fields`` on the run's device."""
    from ..settings import SimulationSettings

    return SimulationSettings(device=ctx.device, **fields)


def _layer_part(ctx, figure_id, depth):
    from .simulated_figures import FIGURES

    s = ctx.sizes
    alphas = (1.0, 1.3)
    sim = _simulation(ctx, width=s.width, seq_len=s.seq_len, seeds=s.seeds, sequences=s.sequences)
    result = _run(ctx, figure_id, f"fig{figure_id}_cosine_per_layer", FIGURES[figure_id],
                  len(alphas) * s.seeds * s.sequences, alphas=alphas, depth=depth, sim=sim)
    return {"files": result.paths(ctx.out), "notes": {"max_abs_error": result.data["max_abs_error"]}}


def simulate_1d(ctx) -> dict:
    """Fig. 1(d), simulated: :func:`~remprop.validation.experiments.simulated_figures.figure_1d` at the sizes."""
    return _layer_part(ctx, "1d", ctx.sizes.depth_1d)


def simulate_1e(ctx) -> dict:
    """Fig. 1(e), simulated: :func:`~remprop.validation.experiments.simulated_figures.figure_1e` at the sizes."""
    return _layer_part(ctx, "1e", ctx.sizes.depth_1e)


def _attention_part(ctx, figure_id, name, draw, cosines, **settings):
    s = ctx.sizes
    sim = _simulation(ctx, width=s.attention_width, seq_len=s.attention_seq_len, seeds=s.attention_seeds,
                      sequences=s.attention_sequences)
    result = _run(ctx, figure_id, name, draw, s.attention_seeds * s.attention_sequences * cosines, sim=sim,
                  **settings)
    notes = {"max_abs_error_asymptotic": result.data["max_abs_error"]}
    if "max_abs_error_finite_t" in result.data:
        notes["max_abs_error_finite_t"] = result.data["max_abs_error_finite_t"]
    if "max_abs_error_finite_width" in result.data:
        notes["max_abs_error_finite_width"] = result.data["max_abs_error_finite_width"]
    return {"files": result.paths(ctx.out), "notes": notes}


def simulate_2(ctx) -> dict:
    """Fig. 2, simulated: output cosine of one attention layer against beta, three input cosines."""
    from .simulated_figures import figure_2

    cosines = (0.1, 0.5, 0.9)
    return _attention_part(ctx, "2", "fig2_simulated_attention_cosine", figure_2, len(cosines),
                           betas=np.linspace(0.25, 4.0, ctx.sizes.betas_2), input_cosines=cosines)


def simulate_5(ctx) -> dict:
    """Fig. 5, simulated: participation ratio Y2 against beta at q = 1, p = 0."""
    from .simulated_figures import figure_5

    return _attention_part(ctx, "5", "fig5_participation_ratio", figure_5, 1,
                           betas=np.linspace(0.2, 5.0, ctx.sizes.betas_5))


def simulate_3c(ctx) -> dict:
    """Fig. 3(c), simulated: query gradient norms against autograd."""
    from .simulated_figures import figure_3c

    s = ctx.sizes
    betas = np.linspace(0.05, 3.0, s.gradient_betas)
    total = len(s.gradient_sizes) * s.gradient_seeds * len(betas)
    result = _run(ctx, "3c", "fig3c_gradient_collapse", figure_3c, total, betas=betas, sizes=s.gradient_sizes,
                  sim=_simulation(ctx, seeds=s.gradient_seeds, dtype="float64"))
    return {"files": result.paths(ctx.out), "notes": {k: v for k, v in result.data.items() if "error" in k}}


def simulate_4(ctx) -> dict:
    """Fig. 4, simulated: the four LayerNorm placements over depth, theory and simulation."""
    from .layernorm_figure import figure_4

    s = ctx.sizes
    from remprop.diagrams.figure_data import LAYERNORM_REFERENCE_RUN

    result = _run(ctx, "4", "fig4_layernorm_placement", figure_4, 4 * s.ln_seeds * s.ln_sequences,
                  run=LAYERNORM_REFERENCE_RUN.replace(depth=s.ln_depth),
                  sim=_simulation(ctx, width=s.ln_width, seq_len=s.ln_seq_len, seeds=s.ln_seeds,
                                  sequences=s.ln_sequences))
    return {"files": result.paths(ctx.out),
            "notes": {"max_abs_error_asymptotic": result.data["max_abs_error_asymptotic"]}}


def simulate_9(ctx) -> dict:
    """Fig. 9, simulated: tanh stacks on both sides of the edge of chaos, drawn over the theory."""
    from remprop.diagrams.edge_of_chaos_figures import edge_of_chaos_data, edge_of_chaos_figure
    from remprop.diagrams.paper_figures import FigureResult

    from .edge_of_chaos_simulation import simulate_edge_of_chaos

    s = ctx.sizes
    data = edge_of_chaos_data()
    with ctx.bar(2 * len(data["factors"]) * s.eoc_seeds, "fig 9") as bar:
        simulated = simulate_edge_of_chaos(data, width=s.eoc_width, seq_len=s.eoc_seq_len, seeds=s.eoc_seeds,
                                           device=ctx.device, progress=bar.update)
    notes = {f"max_abs_error_{stack}": float(np.max(np.abs(simulated[f"{stack}_mean"] - data[f"{stack}_rho"])))
             for stack in ("block", "deep")}
    result = FigureResult("fig9_edge_of_chaos", edge_of_chaos_figure(data, simulated),
                          {"figure": "figure_9", "theory": data, "simulation": simulated, **notes})
    return {"files": result.paths(ctx.out), "notes": notes}


def simulate_12(ctx) -> dict:
    """Fig. 12, simulated: causal stacks, last-token cosine and the error by position."""
    from .simulated_figures import figure_12

    s = ctx.sizes
    settings = ((0.5, 1.0), (0.5, 1.3), (1.2, 1.0))
    total = len(settings) * s.causal_seeds * s.causal_sequences
    sim = _simulation(ctx, width=s.causal_width, seq_len=s.causal_seq_len, seeds=s.causal_seeds,
                      sequences=s.causal_sequences, inputs="synthetic")
    result = _run(ctx, "12", "fig12_causal_last_tokens", figure_12, total, settings=settings, depth=s.causal_depth,
                  sim=sim, last=s.causal_last)
    return {"files": result.paths(ctx.out), "notes": {"max_abs_error_last": result.data["max_abs_error_last"]}}


# -- the training figures: runs cached under <out>/training_runs (remprop.validation.training.paper_runs) --
#: The figures whose simulated part trains models.
_TRAINED = ("1f", "3", "6", "8")


def _training_runs(figure_id, s, device) -> list:
    """``[(config, runs), ...]``: the training runs of figure ``figure_id`` at sizes ``s``, grouped by
    cost (the settings of :mod:`remprop.validation.training.paper_runs` differ in depth and width;
    skip strengths, betas and learning rates do not change a run's work)."""
    from remprop.theory import Architecture

    from ..training.paper_runs import base_config

    base, seeds = base_config(s, device), s.train_seeds
    if figure_id == "1f":
        deep, shallow = s.depth_1f
        return [(base.replace(depth=deep), (len(s.alphas_1f_trainable) + len(s.alphas_1f_rank)) * seeds),
                (base.replace(depth=shallow), len(s.betas_1f_entropy) * seeds)]
    if figure_id == "3":
        return [(base.replace(depth=1, lr=s.lr_3, arch=Architecture(heads=1)), int(s.betas_3[2]) * seeds)]
    if figure_id == "6":
        return [(base.replace(depth=s.depth_6, width=s.width_6), 2 * len(s.alphas_6) * seeds)]
    return [(base.replace(depth=s.depth_8), 2 * len(s.lrs_8) * seeds)]


def _training_total(figure_id, s) -> int:
    return sum(runs for _, runs in _training_runs(figure_id, s, None))


def _training_part(ctx, figure_id, name, compute, draw, runs, title) -> dict:
    """``compute(sizes, cache, device)`` over ``runs`` training runs, drawn by ``draw(data, title)``."""
    from remprop.diagrams.paper_figures import FigureResult

    from ..training.paper_runs import RUNS_FOLDER, RunCache

    with ctx.bar(runs, f"fig {figure_id}") as bar:
        cache = RunCache(ctx.out / RUNS_FOLDER, progress=lambda: bar.update(1))
        data = compute(ctx.sizes, cache, ctx.device)
    result = FigureResult(name, draw(data, title), data)
    notes = {"final_test_loss": {s["label"]: s["final_mean"] for s in data["settings"]},
             "unigram_loss": data["unigram_loss"], **cache.counts()}
    for key in ("beta_critical", "gap"):
        if key in data:
            notes[key] = data[key]
    return {"files": result.paths(ctx.out), "notes": notes}


def _sizes_text(s, depth, width=None):
    blocks = "1 block" if depth == 1 else f"{depth} blocks"
    return f"d = {width or s.train_width}, T = {s.train_seq_len}, {blocks}, {s.train_steps} steps"


def simulate_1f(ctx) -> dict:
    """Fig. 1(f), trained: test-loss curves, two initialisations per phase."""
    from remprop.diagrams.training_paper_figures import loss_curves_figure

    from ..training.paper_runs import loss_curves_1f

    s = ctx.sizes
    runs = _training_total("1f", s)
    title = (f"masked-LM training, post-LN: {_sizes_text(s, s.depth_1f[0])} (trainable, rank collapse), "
             f"{s.depth_1f[1]} blocks (entropy collapse)")
    return _training_part(ctx, "1f", "fig1f_training_loss", loss_curves_1f, loss_curves_figure, runs, title)


def simulate_3(ctx) -> dict:
    """Fig. 3, trained: one layer, one head, final test loss against beta with beta_c."""
    from remprop.diagrams.training_paper_figures import beta_sweep_figure

    from ..training.paper_runs import beta_sweep_3

    s = ctx.sizes
    title = f"one layer, one head, post-LN: {_sizes_text(s, 1)}, lr {s.lr_3:g}"
    return _training_part(ctx, "3", "fig3_beta_sweep", beta_sweep_3, beta_sweep_figure,
                          _training_total("3", s), title)


def simulate_6(ctx) -> dict:
    """Fig. 6, trained: softmax against gain-controlled attention in a deep post-LN stack."""
    from remprop.diagrams.training_paper_figures import loss_curves_figure

    from ..training.paper_runs import gain_control_6

    s = ctx.sizes
    title = f"post-LN, beta = 0.5: {_sizes_text(s, s.depth_6, s.width_6)}, lr {s.lr_6:g}"
    return _training_part(ctx, "6", "fig6_gain_control", gain_control_6, loss_curves_figure,
                          _training_total("6", s), title)


def simulate_8(ctx) -> dict:
    """Fig. 8, trained: beta above beta_c against beta = 0.5 at several learning rates."""
    from remprop.diagrams.training_paper_figures import loss_curves_figure

    from ..training.paper_runs import learning_rates_8

    s = ctx.sizes
    title = f"post-LN, alpha_SA = 1: {_sizes_text(s, s.depth_8)}, beta = {s.beta_8:g} against 0.5"
    return _training_part(ctx, "8", "fig8_learning_rates", learning_rates_8, loss_curves_figure,
                          _training_total("8", s), title)
