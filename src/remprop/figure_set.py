"""Every reference figure of the paper that remprop supports, in one call.

:func:`make_figures` writes, into one folder, a PNG and the data behind it (JSON and/or
npz) for each figure of ``THEORY.md`` section 9 that the engine supports, theory and
simulation together, plus an index ``figures.json``:

====  ==========================================================================
1c    trainability diagram of the 60-layer post-LN BERT (theory), and a simulated
      sweep classified cell by cell against the prediction (measured vs predicted)
1d    per-layer cosine, theory vs simulated BERT, beta = 0.5, 60 layers
1e    the same at beta = 3 (entropy collapse), 12 layers
2     one attention layer: output cosine over (beta, input cosine), theory map; and
      theory vs simulation against beta
4     mean cosine over 100 layers: post-LN, pre-LN and gain-controlled versions
5     participation ratio Y2 against beta, theory vs simulation
9     tanh stacks: order-to-chaos boundaries and the cosine over depth on both sides
      (theory from :mod:`remprop.diagrams.edge_of_chaos_figures`, when present)
====  ==========================================================================

Not yet supported (listed in the index and by ``remprop figures --help``): 3c (gradient
norms, THEORY.md section 7) and 12 (causal model, section 8).

Theory lines are the ``T -> infinity`` theory of the paper; where
:class:`~remprop.theory.Architecture` has the finite-T ``seq_len``, the exact finite-T
theory at the simulated ``T`` is drawn beside it (thin dashed or dotted).
:data:`SIZES` holds the two presets: ``"full"`` (the paper's sizes: d = 720, T = 512, 10
initialisations x 10 sequences for Fig. 1(d, e)) and ``"quick"`` (d = T = 128, two seeds;
under a minute on two cores). Simulated parts need the validation extra (torch);
without it only the theory parts are written and the index says what was left out.

Reference: A. Giorlandino & S. Goldt, arXiv 2505.24333.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ._json import to_jsonable

__all__ = ["make_figures", "FigureSizes", "FigureSet", "SIZES", "SUPPORTED", "NOT_YET_SUPPORTED",
           "supported_figures", "INDEX_NAME"]

#: File name of the index written beside the figures.
INDEX_NAME = "figures.json"

#: Figure id -> what it shows (the figures this module draws).
SUPPORTED = {
    "1c": "trainability diagram, 60-layer post-LN BERT: theory, and measured vs predicted",
    "1d": "per-layer cosine, theory vs simulated BERT, beta = 0.5, 60 layers",
    "1e": "per-layer cosine, theory vs simulated BERT, beta = 3 (entropy collapse), 12 layers",
    "2": "one attention layer: output cosine over beta and input cosine, theory and simulation",
    "4": "cosine over 100 layers for post-LN, pre-LN and their gain-controlled versions",
    "5": "participation ratio Y2 against beta, theory and simulation",
    "3c": "query gradient norm against beta, collapsed over (T, d): theory and autograd",
    "12": "causal (decoder) stack: cosine of the last 50 tokens over depth, theory and simulation",
}
#: Figure id -> why it is not drawn yet (every reference figure is drawn now).
NOT_YET_SUPPORTED: dict = {}
_EDGE_OF_CHAOS_MODULE = "remprop.diagrams.edge_of_chaos_figures"
_EDGE_OF_CHAOS = ("9", "tanh MLP, infinite-depth ordered/chaotic transition (edge of chaos)")
VALIDATION_HINT = "needs the validation extra: pip install 'remprop[validation]'"


@dataclass(frozen=True)
class FigureSizes:
    """Sizes of the simulations behind the figures.

    Attributes
    ----------
    width, seq_len, seeds, sequences : int
        Fig. 1(d, e): model width d, tokens T, initialisations, sequences per seed.
    depth_1d, depth_1e : int
        Blocks of Fig. 1(d) and 1(e) (paper: 60 and 12).
    attention_width, attention_seq_len, attention_seeds, attention_sequences : int
        Figs. 2 and 5 (one attention layer).
    betas_2, betas_5 : int
        Number of simulated betas in Figs. 2 and 5.
    ln_width, ln_seq_len, ln_seeds, ln_sequences, ln_depth : int
        Fig. 4.
    diagram_points : int
        Grid points per axis of the theory diagram of Fig. 1(c).
    sweep_width, sweep_seq_len, sweep_seeds, sweep_sequences, sweep_depth : int
        The simulated sweep of Fig. 1(c).
    sweep_betas, sweep_alphas : tuple
        ``(start, stop, count)`` of its grid axes.
    eoc_width, eoc_seq_len, eoc_seeds : int
        Fig. 9 (tanh stacks, one sequence per seed).
    gradient_sizes, gradient_seeds, gradient_betas : tuple, int, int
        Fig. 3(c): the (T, d) pairs, seeds per point and number of betas in [0.05, 3].
    causal_width, causal_seq_len, causal_depth, causal_seeds, causal_sequences, causal_last : int
        Fig. 12 (paper: T = 512, 50 layers, last 50 tokens).
    """

    width: int = 720
    seq_len: int = 512
    seeds: int = 10
    sequences: int = 10
    depth_1d: int = 60
    depth_1e: int = 12
    attention_width: int = 720
    attention_seq_len: int = 512
    attention_seeds: int = 4
    attention_sequences: int = 4
    betas_2: int = 16
    betas_5: int = 25
    ln_width: int = 720
    ln_seq_len: int = 512
    ln_seeds: int = 4
    ln_sequences: int = 2
    ln_depth: int = 100
    diagram_points: int = 200
    sweep_width: int = 256
    sweep_seq_len: int = 256
    sweep_seeds: int = 2
    sweep_sequences: int = 2
    sweep_depth: int = 60
    sweep_betas: tuple = (0.1, 2.6, 14)
    sweep_alphas: tuple = (0.6, 1.8, 13)
    eoc_width: int = 512
    eoc_seq_len: int = 64
    eoc_seeds: int = 4
    gradient_sizes: tuple = ((256, 128), (256, 256), (1024, 128), (1024, 256))
    gradient_seeds: int = 3
    gradient_betas: int = 14
    causal_width: int = 720
    causal_seq_len: int = 512
    causal_depth: int = 50
    causal_seeds: int = 2
    causal_sequences: int = 2
    causal_last: int = 50

    def replace(self, **changes) -> "FigureSizes":
        return dataclasses.replace(self, **changes)


#: Presets: the paper's sizes, and small ones (d = T = 128, two seeds).
SIZES = {
    "full": FigureSizes(),
    "quick": FigureSizes(width=128, seq_len=128, seeds=2, sequences=4, attention_width=128, attention_seq_len=128,
                         attention_seeds=2, attention_sequences=4, betas_2=10, betas_5=13, ln_width=128,
                         ln_seq_len=128, ln_seeds=2, ln_sequences=2, diagram_points=60, sweep_width=128,
                         sweep_seq_len=128,
                         sweep_seeds=2, sweep_sequences=2, sweep_betas=(0.2, 2.4, 8), sweep_alphas=(0.8, 1.6, 9),
                         eoc_width=128, eoc_seq_len=32, eoc_seeds=2, gradient_sizes=((128, 64), (256, 64)),
                         gradient_seeds=2, gradient_betas=8, causal_width=128, causal_seq_len=128,
                         causal_depth=12, causal_seeds=1, causal_sequences=2, causal_last=20),
}


def supported_figures() -> dict:
    """Figure id -> description of every figure :func:`make_figures` can draw here."""
    out = dict(SUPPORTED)
    if _edge_of_chaos_available():
        out[_EDGE_OF_CHAOS[0]] = _EDGE_OF_CHAOS[1]
    return dict(sorted(out.items(), key=lambda item: _figure_order(item[0])))


def not_yet_supported() -> dict:
    """Figure id -> reason, for the reference figures not drawn yet."""
    out = dict(NOT_YET_SUPPORTED)
    if not _edge_of_chaos_available():
        out[_EDGE_OF_CHAOS[0]] = f"{_EDGE_OF_CHAOS[1]}: needs {_EDGE_OF_CHAOS_MODULE} (a later issue)"
    return dict(sorted(out.items(), key=lambda item: _figure_order(item[0])))


def _figure_order(figure_id):
    digits = "".join(c for c in figure_id if c.isdigit())
    return int(digits), figure_id


def _edge_of_chaos_available() -> bool:
    try:
        return importlib.util.find_spec(_EDGE_OF_CHAOS_MODULE) is not None
    except ModuleNotFoundError:  # pragma: no cover - parent package missing
        return False


def _torch_available() -> bool:
    return importlib.util.find_spec("torch") is not None


@dataclass
class FigureSet:
    """What :func:`make_figures` wrote.

    Attributes
    ----------
    directory : Path
    files : dict
        Figure id -> list of paths written (PNG first).
    skipped : dict
        Figure id -> reason, for the parts not drawn (not yet supported, or the
        validation extra missing).
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
    """Write every supported reference figure (PNG + data) into ``out_dir``.

    Parameters
    ----------
    out_dir : str or Path
        Folder (created if missing).
    quick : bool
        Use the ``"quick"`` sizes of :data:`SIZES` (else ``"full"``, the paper's).
    progress : bool
        tqdm bars on stderr: one over the figures, one within each long figure.
    only : iterable of str, optional
        Figure ids to draw (default all supported). Ids not supported yet are refused.
    sizes : FigureSizes, optional
        Overrides the preset chosen by ``quick``.
    device : str, optional
        Simulation device (default CUDA when available, else CPU).
    workers : int
        Worker processes of the Fig. 1(c) sweep (0: in this process; see
        :func:`remprop.validation.sweep.run_sweep`).
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
    Giorlandino & Goldt, arXiv 2505.24333, Figs. 1(c, d, e), 2, 4, 5 (and 9).
    """
    sizes = sizes if sizes is not None else SIZES["quick" if quick else "full"]
    if not isinstance(sizes, FigureSizes):
        raise ValueError(f"sizes must be a FigureSizes, got {type(sizes).__name__}")
    available = supported_figures()
    chosen = list(available) if only is None else _check_only(only, available)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    simulate = _torch_available()
    if threads is None and sizes != SIZES["full"]:
        threads = 1
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int) or threads < 1):
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    with _torch_threads(threads if simulate else None):
        return _make_figures(out, sizes, chosen, available, only, simulate, device, workers, progress)


@contextlib.contextmanager
def _torch_threads(count):
    """Set torch's CPU threads for the block (None: leave them), restore them after."""
    if count is None:
        yield
        return
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _make_figures(out, sizes, chosen, available, only, simulate, device, workers, progress):
    from tqdm import tqdm

    files, skipped, notes, elapsed = {}, {}, {}, {}
    context = _Context(out, sizes, simulate, device, workers, progress)
    with tqdm(chosen, desc="figures", unit="fig", disable=not progress, file=sys.stderr, position=0) as bar:
        for figure_id in bar:
            bar.set_postfix_str(f"fig {figure_id}")
            start = time.perf_counter()
            result = _PRODUCERS[figure_id](context)
            files[figure_id] = [Path(p) for p in result.get("files", [])]
            if result.get("skipped"):
                skipped[figure_id] = result["skipped"]
            if result.get("notes"):
                notes[figure_id] = result["notes"]
            elapsed[figure_id] = time.perf_counter() - start
    for figure_id, reason in not_yet_supported().items():
        if only is None:
            skipped[figure_id] = f"not yet supported: {reason}"
    index = out / INDEX_NAME
    with open(index, "w", encoding="utf-8") as handle:
        json.dump(to_jsonable({
            "format": "remprop.figures/1",
            "sizes": "quick" if sizes == SIZES["quick"] else ("full" if sizes == SIZES["full"] else "custom"),
            "size_settings": dataclasses.asdict(sizes),
            "figures": {k: {"description": available[k], "files": [os.fspath(p) for p in files[k]],
                            "elapsed_s": elapsed[k], **({"notes": notes[k]} if k in notes else {})} for k in files},
            "skipped": skipped,
            "not_yet_supported": not_yet_supported(),
        }), handle, indent=1, allow_nan=False)
    return FigureSet(out, files, skipped, notes, elapsed, index)


def _check_only(only, available):
    if isinstance(only, str):
        only = [part.strip() for part in only.split(",") if part.strip()]
    chosen = []
    for figure_id in only:
        figure_id = str(figure_id).strip().lower()
        if figure_id not in available:
            later = not_yet_supported()
            if figure_id in later:
                raise ValueError(f"only: figure {figure_id} is not yet supported ({later[figure_id]})")
            raise ValueError(f"only: unknown figure {figure_id!r}; supported: {', '.join(available)}")
        if figure_id not in chosen:
            chosen.append(figure_id)
    if not chosen:
        raise ValueError("only: name at least one figure")
    return chosen


# -- the producers ----------------------------------------------------------------------------
@dataclass
class _Context:
    out: Path
    sizes: FigureSizes
    simulate: bool
    device: object
    workers: int
    progress: bool

    def bar(self, total, desc):
        """An inner progress bar (second line), or a no-op one."""
        from tqdm import tqdm

        return tqdm(total=total, desc=desc, unit="seq", leave=False, disable=not self.progress, file=sys.stderr,
                    position=1)


def _save_png(figure, path):
    figure.savefig(path, dpi=150, bbox_inches="tight")
    return path


def _finite_t() -> bool:
    from remprop.validation.measured_diagram import finite_t_available

    return finite_t_available()


def _figure_1c(ctx):
    from remprop.diagrams import trainability_diagram, trainability_figure
    from remprop.diagrams.gallery import BERT_DIAGRAM
    from remprop.theory import Architecture

    s = ctx.sizes
    files, notes = [], {}
    diagram = trainability_diagram(Architecture(), np.linspace(*BERT_DIAGRAM["beta_range"], s.diagram_points),
                                   np.linspace(*BERT_DIAGRAM["alpha_range"], s.diagram_points),
                                   BERT_DIAGRAM["depth"], BERT_DIAGRAM["threshold"])
    base = ctx.out / f"fig1c_theory_bert_L{BERT_DIAGRAM['depth']}"
    files.append(_save_png(trainability_figure(diagram), base.with_suffix(".png")))
    files += [Path(p) for p in diagram.save(base)]
    if not ctx.simulate:
        return {"files": files, "skipped": f"measured diagram: {VALIDATION_HINT}"}
    from remprop.validation.measured_diagram import MeasuredDiagram
    from remprop.validation.sweep import SweepSpec, load_records, run_sweep

    spec = SweepSpec(arch=Architecture(), betas=np.linspace(*s.sweep_betas[:2], int(s.sweep_betas[2])),
                     alphas=np.linspace(*s.sweep_alphas[:2], int(s.sweep_alphas[2])), depth=s.sweep_depth,
                     seeds=s.sweep_seeds, sequences=s.sweep_sequences, width=s.sweep_width, seq_len=s.sweep_seq_len,
                     threshold=BERT_DIAGRAM["threshold"])
    digest = hashlib.sha1(json.dumps(spec.manifest(), sort_keys=True).encode()).hexdigest()[:10]
    folder = ctx.out / f"fig1c_sweep_{digest}"
    report = run_sweep(spec, folder, workers=ctx.workers, device=ctx.device, progress=ctx.progress)
    measured = MeasuredDiagram.from_records(spec, load_records(spec, folder))
    files += [Path(p) for p in measured.save(ctx.out / "fig1c_measured_vs_predicted")]
    files = files[:1] + [p for p in files if p.suffix == ".png" and p != files[0]] + \
        [p for p in files[1:] if p.suffix != ".png"]
    notes.update(agreement=measured.agreement, cells=int(measured.phase.size),
                 cells_agreeing=int(measured.agrees.sum()), theory=measured.theory, sweep_folder=os.fspath(folder),
                 cells_computed=report.cells_computed, cells_reused=report.cells_reused)
    return {"files": files, "notes": notes}


#: Markers of successive simulated curves (shapes tell them apart in greyscale).
_MARKERS = ("o", "s", "^", "D", "v")


def _curve_colours(n):
    """``n`` colours of increasing lightness (viridis), distinct in greyscale too."""
    from matplotlib import colormaps

    return [colormaps["viridis"](x) for x in np.linspace(0.0, 0.8, max(n, 1))]


def _theory_and_simulation(ax, x_fine, curves, x_points, finite_label, every=1):
    """Draw, per curve: theory (T -> inf) solid, finite-T theory dashed, simulation markers with std bars.

    ``curves``: list of dicts with ``label``, ``theory`` (on ``x_fine``), ``finite`` (on
    ``x_fine`` or None), ``mean`` and ``std`` (on ``x_points``).
    """
    from matplotlib.lines import Line2D

    handles = []
    for k, (curve, colour) in enumerate(zip(curves, _curve_colours(len(curves)))):
        marker = _MARKERS[k % len(_MARKERS)]
        ax.plot(x_fine, curve["theory"], "-", color=colour, linewidth=1.8)
        if curve.get("finite") is not None:
            ax.plot(x_fine, curve["finite"], "--", color=colour, linewidth=1.1)
        shown = slice(None, None, every)  # every ``every``-th point, so that deep stacks stay readable
        ax.errorbar(np.asarray(x_points)[shown], np.asarray(curve["mean"])[shown],
                    yerr=np.asarray(curve["std"])[shown], fmt=marker, ms=4, color=colour,
                    markerfacecolor="white", markeredgewidth=1.1, elinewidth=0.8, capsize=1.5)
        handles.append(Line2D([], [], color=colour, marker=marker, markerfacecolor="white", linewidth=1.8,
                              label=curve["label"]))
    handles.append(Line2D([], [], color="0.2", linewidth=1.8, label=r"theory, $T \to \infty$"))
    if any(curve.get("finite") is not None for curve in curves):
        handles.append(Line2D([], [], color="0.2", linestyle="--", linewidth=1.1, label=finite_label))
    handles.append(Line2D([], [], color="0.2", marker="o", markerfacecolor="white", linestyle="none",
                          label=r"simulation (mean $\pm$ std)"))
    return handles


def _layer_figure(ctx, figure_id, beta, depth):
    if not ctx.simulate:
        return {"skipped": VALIDATION_HINT}
    from matplotlib.figure import Figure

    from remprop.theory import Architecture, propagate
    from remprop.validation import compare
    from remprop.validation.figures import FigureResult

    s = ctx.sizes
    alphas = (1.0, 1.3)
    comparisons = []
    with ctx.bar(len(alphas) * s.seeds * s.sequences, f"fig {figure_id}") as bar:
        for alpha in alphas:
            comparisons.append(compare(Architecture(alpha_sa=alpha), beta, depth, s.seq_len, s.width, s.seeds,
                                       s.sequences, inputs="text", device=ctx.device, progress=bar.update))
    finite_t = _finite_t()
    curves, finite = [], {}
    for alpha, comparison in zip(alphas, comparisons):
        rho_finite = None
        if finite_t:
            arch = Architecture(alpha_sa=alpha, seq_len=s.seq_len)
            rho_finite = propagate(arch, beta, depth, q0=comparison.settings["q0"],
                                   rho0=comparison.settings["rho0"]).rho
            finite[f"{alpha:g}"] = rho_finite
        curves.append({"label": rf"$\alpha_{{SA}} = {alpha:g}$", "theory": comparison.theory.rho,
                       "finite": rho_finite, "mean": comparison.mean("cosine"), "std": comparison.std("cosine")})
    ax = Figure(figsize=(6.6, 4.4), layout="constrained").add_subplot()
    layers = comparisons[0].layers
    handles = _theory_and_simulation(ax, layers, curves, layers, f"theory, finite $T = {s.seq_len}$",
                                     every=max(1, depth // 30))
    ax.set_xlim(-0.02 * depth, 1.02 * depth)  # whole markers at both ends
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(r"layer $\ell$")
    ax.set_ylabel(r"mean token cosine $\rho_\ell$")
    ax.set_title(rf"post-LN BERT, $\beta = {beta:g}$ ($\beta_c = \sqrt{{2}}$), $d = {s.width}$, "
                 f"$T = {s.seq_len}$, {comparisons[0].samples} text sequences", fontsize=9)
    ax.legend(handles=handles, fontsize=7.5, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    ax.grid(alpha=0.3)
    data = {"figure": f"figure_{figure_id}",
            "comparisons": [c.to_dict(per_sequence=False) for c in comparisons],
            "max_abs_error": {f"{a:g}": c.max_abs_error for a, c in zip(alphas, comparisons)},
            "theory_rho_finite_t": finite or None}
    paths = FigureResult(f"fig{figure_id}_cosine_per_layer", ax.figure, to_jsonable(data)).save(ctx.out)
    return {"files": [Path(paths["png"]), Path(paths["json"])],
            "notes": {"max_abs_error": data["max_abs_error"]}}


def _figure_1d(ctx):
    return _layer_figure(ctx, "1d", 0.5, ctx.sizes.depth_1d)


def _figure_1e(ctx):
    return _layer_figure(ctx, "1e", 3.0, ctx.sizes.depth_1e)


def _figure_2(ctx):
    from remprop.diagrams import attention_phase_data, attention_phase_figure

    s = ctx.sizes
    files = []
    points = 80 if s.diagram_points <= 80 else 300
    data = attention_phase_data(np.linspace(0.05, 4.0, points), np.linspace(0.0, 0.99, points))
    base = ctx.out / "fig2_theory_attention_phase"
    files.append(_save_png(attention_phase_figure(data=data), base.with_suffix(".png")))
    np.savez(base.with_suffix(".npz"), **{k: np.asarray(v) for k, v in data.items()})
    files.append(base.with_suffix(".npz"))
    if not ctx.simulate:
        return {"files": files, "skipped": f"simulation: {VALIDATION_HINT}"}
    from matplotlib.figure import Figure

    from remprop.theory import Architecture, softmax_attention_map
    from remprop.validation import attention_sweep
    from remprop.validation.figures import FigureResult

    arch = Architecture(sigma_v2=1.0, sigma_b2=0.0)
    cosines = (0.1, 0.5, 0.9)
    with ctx.bar(s.attention_seeds * s.attention_sequences * len(cosines), "fig 2") as bar:
        sweep = attention_sweep(np.linspace(0.25, 4.0, s.betas_2), cosines, arch=arch, width=s.attention_width,
                                seq_len=s.attention_seq_len, seeds=s.attention_seeds,
                                sequences=s.attention_sequences, device=ctx.device, progress=bar.update)
    fine = np.linspace(sweep.betas.min(), sweep.betas.max(), 300)
    theory = sweep.theory_curve("cosine", fine)
    finite_t = _finite_t()
    curves, finite = [], []
    for k, rho in enumerate(cosines):
        curve = {"label": f"input cosine {rho:g}", "theory": theory[k], "finite": None,
                 "mean": sweep.measured["cosine"][k], "std": sweep.spread["cosine"][k]}
        if finite_t:
            q_a, p_a = softmax_attention_map(1.0, rho, fine, 1.0, 0.0, seq_len=s.attention_seq_len)
            curve["finite"] = np.asarray(p_a / q_a)
            finite.append(curve["finite"])
        curves.append(curve)
    ax = Figure(figsize=(6.6, 4.4), layout="constrained").add_subplot()
    handles = _theory_and_simulation(ax, fine, curves, sweep.betas, f"theory, finite $T = {s.attention_seq_len}$")
    ax.set_xlim(0, fine.max() * 1.02)
    ax.set_ylim(-0.02, 1.02)
    ax.set_xlabel(r"query/key scale $\beta$")
    ax.set_ylabel(r"output cosine $p_A / q_A$")
    n = s.attention_seeds * s.attention_sequences
    ax.set_title(f"one softmax attention layer, $d = {s.attention_width}$, $T = {s.attention_seq_len}$, "
                 f"{n} sequences;" "\n" r"$q = 1$, $\sigma_v^2 = 1$, no value bias, no skip or LayerNorm", fontsize=9)
    ax.legend(handles=handles, fontsize=7.5, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    ax.grid(alpha=0.3)
    err = np.abs(sweep.theory["cosine"] - sweep.measured["cosine"])
    data = {"figure": "figure_2", **sweep.to_dict(), "max_abs_error_asymptotic": float(err.max()),
            "theory_cosine_finite_t": {"betas": fine.tolist(), "cosine": [f.tolist() for f in finite]}
            if finite else None}
    notes = {"max_abs_error_asymptotic": float(err.max())}
    if finite:
        at_points = [np.asarray(np.divide(*softmax_attention_map(1.0, rho, sweep.betas, 1.0, 0.0,
                                                                  seq_len=s.attention_seq_len)[::-1]))
                     for rho in cosines]
        notes["max_abs_error_finite_t"] = float(np.max(np.abs(np.array(at_points) - sweep.measured["cosine"])))
        data["max_abs_error_finite_t"] = notes["max_abs_error_finite_t"]
    paths = FigureResult("fig2_simulated_attention_cosine", ax.figure, to_jsonable(data)).save(ctx.out)
    return {"files": files[:1] + [Path(paths["png"])] + files[1:] + [Path(paths["json"])], "notes": notes}


def _figure_4(ctx):
    s = ctx.sizes
    if not ctx.simulate:
        from remprop.diagrams import layernorm_placement_data, layernorm_placement_figure

        data = layernorm_placement_data(s.ln_depth)
        base = ctx.out / "fig4_theory_layernorm_placement"
        png = _save_png(layernorm_placement_figure(data=data), base.with_suffix(".png"))
        with open(base.with_suffix(".json"), "w", encoding="utf-8") as handle:
            json.dump(to_jsonable({"layers": data["layers"], "rho": data["rho"], "q": data["q"],
                                   "settings": data["settings"]}), handle, allow_nan=False)
        return {"files": [png, base.with_suffix(".json")], "skipped": f"simulation: {VALIDATION_HINT}"}
    from remprop.validation.layernorm_figure import figure_4

    with ctx.bar(4 * s.ln_seeds * s.ln_sequences, "fig 4") as bar:
        result = figure_4(depth=s.ln_depth, width=s.ln_width, seq_len=s.ln_seq_len, seeds=s.ln_seeds,
                          sequences=s.ln_sequences, device=ctx.device, progress=bar.update)
    result.name = "fig4_layernorm_placement"
    paths = result.save(ctx.out)
    return {"files": [Path(paths["png"]), Path(paths["json"])],
            "notes": {"max_abs_error_asymptotic": result.data["max_abs_error_asymptotic"]}}


def _figure_5(ctx):
    if not ctx.simulate:
        return {"skipped": VALIDATION_HINT}
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    from remprop.theory import Architecture, participation_ratio
    from remprop.validation import attention_sweep
    from remprop.validation.figures import FigureResult

    s = ctx.sizes
    with ctx.bar(s.attention_seeds * s.attention_sequences, "fig 5") as bar:
        sweep = attention_sweep(np.linspace(0.2, 5.0, s.betas_5), (0.0,), arch=Architecture(),
                                width=s.attention_width, seq_len=s.attention_seq_len, seeds=s.attention_seeds,
                                sequences=s.attention_sequences, device=ctx.device, progress=bar.update)
    fine = np.linspace(sweep.betas.min(), sweep.betas.max(), 300)
    finite = None
    if _finite_t():
        finite = np.asarray(participation_ratio(fine, 1.0, 0.0, seq_len=s.attention_seq_len))
    curve = {"label": "input cosine 0", "theory": sweep.theory_curve("y2", fine)[0], "finite": finite,
             "mean": sweep.measured["y2"][0], "std": sweep.spread["y2"][0]}
    ax = Figure(figsize=(6.6, 4.4), layout="constrained").add_subplot()
    handles = _theory_and_simulation(ax, fine, [curve], sweep.betas, f"theory, finite $T = {s.attention_seq_len}$")
    ax.axvline(np.sqrt(2.0), color="black", linestyle=":", linewidth=1.0)
    handles.append(Line2D([], [], color="black", linestyle=":", linewidth=1.0, label=r"$\beta_c = \sqrt{2}$"))
    ax.set_xlim(0, fine.max() * 1.02)
    ax.set_ylim(-0.02, 1.0)
    ax.set_xlabel(r"query/key scale $\beta$")
    ax.set_ylabel(r"participation ratio $Y_2 = \langle \sum_j a_{ij}^2 \rangle$")
    n = s.attention_seeds * s.attention_sequences
    ax.set_title(f"attention rows as a Random Energy Model: $d = {s.attention_width}$, "
                 f"$T = {s.attention_seq_len}$, {n} sequences, $q = 1$, $p = 0$", fontsize=9)
    ax.legend(handles=handles[1:], fontsize=7.5, loc="upper left", frameon=True, framealpha=0.9)
    ax.grid(alpha=0.3)
    err = np.abs(sweep.theory["y2"] - sweep.measured["y2"])[0]
    data = {"figure": "figure_5", **sweep.to_dict(), "abs_error_y2_asymptotic": err.tolist(),
            "theory_y2_finite_t": None if finite is None else {"betas": fine.tolist(), "y2": finite.tolist()}}
    notes = {"max_abs_error_asymptotic": float(err.max())}
    if finite is not None:
        at_points = np.asarray(participation_ratio(sweep.betas, 1.0, 0.0, seq_len=s.attention_seq_len))
        data["abs_error_y2_finite_t"] = np.abs(at_points - sweep.measured["y2"][0]).tolist()
        notes["max_abs_error_finite_t"] = float(max(data["abs_error_y2_finite_t"]))
    paths = FigureResult("fig5_participation_ratio", ax.figure, to_jsonable(data)).save(ctx.out)
    return {"files": [Path(paths["png"]), Path(paths["json"])], "notes": notes}


def _figure_9(ctx):
    from matplotlib.lines import Line2D

    from remprop.diagrams.edge_of_chaos_figures import edge_of_chaos_data, edge_of_chaos_figure

    s = ctx.sizes
    data = edge_of_chaos_data()
    figure = edge_of_chaos_figure(data)
    record = {"figure": "figure_9", "theory": data}
    notes, skipped = {}, None
    if ctx.simulate:
        from remprop.validation.edge_of_chaos_simulation import simulate_edge_of_chaos

        with ctx.bar(2 * len(data["factors"]) * s.eoc_seeds, "fig 9") as bar:
            simulated = simulate_edge_of_chaos(data, width=s.eoc_width, seq_len=s.eoc_seq_len, seeds=s.eoc_seeds,
                                               device=ctx.device, progress=bar.update)
        record["simulation"] = simulated
        layers = np.arange(int(data["depth"]) + 1)
        every = max(1, int(data["depth"]) // 20)
        for ax, stack, theory in ((figure.axes[1], "block", data["block_rho"]),
                                  (figure.axes[2], "deep", data["deep_rho"])):
            curves = [line for line in ax.lines if len(line.get_xdata()) == layers.size]
            for k in range(len(data["factors"])):
                colour = curves[k].get_color() if len(curves) == len(data["factors"]) else "black"
                ax.errorbar(layers[::every], simulated[f"{stack}_mean"][k][::every],
                            yerr=simulated[f"{stack}_std"][k][::every], fmt="o", ms=3.5, color=colour,
                            markerfacecolor="white", elinewidth=0.8, capsize=1.5)
            handles, labels = ax.get_legend_handles_labels()
            handles.append(Line2D([], [], color="0.3", marker="o", markerfacecolor="white", linestyle="none"))
            labels.append(f"simulation, $d = {s.eoc_width}$, $T = {s.eoc_seq_len}$ (mean $\\pm$ std)")
            ax.legend(handles, labels, fontsize=7, loc="center right")
            notes[f"max_abs_error_{stack}"] = float(np.max(np.abs(simulated[f"{stack}_mean"] - theory)))
    else:
        skipped = f"simulation: {VALIDATION_HINT}"
    base = ctx.out / "fig9_edge_of_chaos"
    png = _save_png(figure, base.with_suffix(".png"))
    with open(base.with_suffix(".json"), "w", encoding="utf-8") as handle:
        json.dump(to_jsonable(record), handle, allow_nan=False)
    result = {"files": [png, base.with_suffix(".json")], "notes": notes}
    if skipped:
        result["skipped"] = skipped
    return result


def _figure_3c(ctx):
    if not ctx.simulate:
        return {"skipped": VALIDATION_HINT}
    from remprop.validation.figures import FigureResult
    from remprop.validation.figures_gradients import figure_3c

    s = ctx.sizes
    betas = np.linspace(0.05, 3.0, s.gradient_betas)
    with ctx.bar(len(s.gradient_sizes) * s.gradient_seeds * len(betas), "fig 3c") as bar:
        result = figure_3c(betas=betas, sizes=s.gradient_sizes, seeds=s.gradient_seeds, device=ctx.device,
                           progress=lambda done: bar.update(done))
    paths = FigureResult("fig3c_gradient_collapse", result.figure, to_jsonable(result.data)).save(ctx.out)
    notes = {key: value for key, value in result.data.items() if "error" in key}
    return {"files": [Path(paths["png"]), Path(paths["json"])], "notes": to_jsonable(notes)}


def _figure_12(ctx):
    if not ctx.simulate:
        return {"skipped": VALIDATION_HINT}
    from remprop.validation.figures import FigureResult
    from remprop.validation.figures_causal import figure_12

    s = ctx.sizes
    settings = ((0.5, 1.0), (0.5, 1.3), (1.2, 1.0))
    with ctx.bar(len(settings) * s.causal_seeds * s.causal_sequences, "fig 12") as bar:
        result = figure_12(settings=settings, depth=s.causal_depth, seq_len=s.causal_seq_len, width=s.causal_width,
                           seeds=s.causal_seeds, sequences=s.causal_sequences, last=s.causal_last,
                           device=ctx.device, progress=lambda done: bar.update(done))
    paths = FigureResult("fig12_causal_last_tokens", result.figure, to_jsonable(result.data)).save(ctx.out)
    return {"files": [Path(paths["png"]), Path(paths["json"])],
            "notes": to_jsonable({"max_abs_error_last": result.data["max_abs_error_last"]})}


_PRODUCERS = {"1c": _figure_1c, "1d": _figure_1d, "1e": _figure_1e, "2": _figure_2, "3c": _figure_3c,
              "4": _figure_4, "5": _figure_5, "9": _figure_9, "12": _figure_12}
