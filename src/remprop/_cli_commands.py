"""The ``remprop`` sub-commands: each takes the parsed options and returns an exit status.

Heavy imports (NumPy, the diagrams package, matplotlib) happen inside the commands, so
that a command pays only for what it uses: ``min-alpha`` never imports matplotlib.
"""
from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

from ._cli_options import CommandLineError, architecture_from_args
from ._cli_output import dumps, format_number, format_table

__all__ = ["run_diagram", "run_min_alpha", "run_propagate", "run_figures", "run_sweep", "run_check",
           "writable_directory"]

VALIDATION_HINT = "the validation extra is needed: pip install 'remprop[validation]'"


def writable_directory(path, option="--out") -> Path:
    """Create ``path`` if needed and check that a file can be written there.

    Checked before any computation, so that a bad ``--out`` fails at once (one line,
    exit status 2) rather than after a long sweep. The check writes and removes a
    temporary file: permission bits alone say nothing when running as root.
    """
    directory = Path(path)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as err:
        reason = err.strerror or type(err).__name__
        raise CommandLineError(f"argument {option}: cannot write to {str(path)!r}: {reason}") from None
    return directory


def _progress(args) -> bool:
    """--progress / --no-progress; by default a bar only when stderr is a terminal."""
    if args.progress is None:
        return sys.stderr.isatty()
    return bool(args.progress)


def _describe(arch, depth, threshold=None) -> str:
    norm = {"post": "post-LN", "pre": "pre-LN", "none": "no-LN"}.get(arch.norm, arch.norm)
    text = f"{norm}, {arch.attention} attention, {arch.activation} MLP, depth {depth}"
    if threshold is not None:
        text += f", rank collapse when final rho > {format_number(threshold)}"
    return text


def _inputs(args, arch, **extra) -> dict:
    """The inputs of a run, for the JSON outputs (alpha_sa left out when it is swept)."""
    architecture = arch.to_dict()
    if not hasattr(args, "alpha_sa"):
        architecture.pop("alpha_sa", None)
    out = {"architecture": architecture, "depth": args.depth}
    for name in ("threshold", "q0", "rho0"):
        if hasattr(args, name):
            out[name] = getattr(args, name)
    out.update(extra)
    return out


def _subsample(count, at_most):
    """At most ``at_most`` evenly spread indices of ``range(count)``, ends included."""
    if count <= at_most:
        return list(range(count))
    return sorted({round(k * (count - 1) / (at_most - 1)) for k in range(at_most)})


# -- remprop min-alpha -------------------------------------------------------------------
def run_min_alpha(args) -> int:
    """Smallest alpha_SA with final-layer rho <= threshold, for each beta."""
    import numpy as np

    from remprop.diagrams import ALPHA_MAX, min_residual_strength

    arch = architecture_from_args(args)
    beta = np.asarray(args.beta, dtype=float) if args.beta.is_list else args.beta[0]
    alpha_star = min_residual_strength(arch, args.depth, beta, args.threshold, q0=args.q0, rho0=args.rho0)
    if args.json:
        print(dumps({"alpha_star": alpha_star, "beta": beta, **_inputs(args, arch), "alpha_max": ALPHA_MAX}))
        return 0
    print(f"smallest alpha_SA: {_describe(arch, args.depth, args.threshold)}")
    rows = [(format_number(b), format_number(a)) for b, a in
            zip(np.atleast_1d(beta), np.atleast_1d(alpha_star))]
    print(format_table(("beta", "alpha*"), rows))
    if any(np.isinf(np.atleast_1d(alpha_star))):
        print(f"alpha* = inf: no alpha_SA up to {format_number(ALPHA_MAX)} keeps rho at or below the threshold")
    return 0


# -- remprop propagate -------------------------------------------------------------------
def run_propagate(args) -> int:
    """Per-layer q, p, rho (and the critical beta of each attention input)."""
    from remprop.theory import propagate

    arch = architecture_from_args(args)
    trajectory = propagate(arch, args.beta, args.depth, q0=args.q0, rho0=args.rho0)
    q, p, rho, beta_c = trajectory.q, trajectory.p, trajectory.rho, trajectory.beta_critical
    if args.json:
        print(dumps({"layer": list(range(args.depth + 1)), "q": q, "p": p, "rho": rho,
                     "beta_critical": beta_c, **_inputs(args, arch, beta=args.beta)}))
        return 0
    print(f"order parameters layer by layer: {_describe(arch, args.depth)}, "
          f"beta {format_number(args.beta)}")
    rows = [(str(layer), format_number(q[layer], 8), format_number(p[layer], 8), format_number(rho[layer], 8),
             format_number(beta_c[layer - 1]) if layer else "-")
            for layer in range(args.depth + 1)]
    print(format_table(("layer", "q", "p", "rho", "beta_c"), rows))
    print("layer 0 is the input; beta_c is the critical beta of the layer's attention input")
    return 0


# -- remprop diagram ---------------------------------------------------------------------
def run_diagram(args) -> int:
    """Trainability diagram over (beta, alpha_SA): PNG + npz + json, and a summary."""
    import numpy as np

    arch = architecture_from_args(args)
    directory = writable_directory(args.out)
    from remprop.diagrams import trainability_diagram

    betas = np.asarray(args.betas, dtype=float)
    alphas = np.asarray(args.alphas, dtype=float)
    result = trainability_diagram(arch, betas, alphas, args.depth, args.threshold,
                                  q0=args.q0, rho0=args.rho0, progress=_progress(args))
    stem = directory / args.name
    result.save(stem)
    png = Path(f"{stem}.png")
    _draw(result, png)
    files = [str(path) for path in (png, Path(f"{stem}.npz"), Path(f"{stem}.json")) if path.exists()]
    alpha_star = np.atleast_1d(np.asarray(result.alpha_star, dtype=float))
    beta_c = np.atleast_1d(np.asarray(result.beta_critical, dtype=float))
    if args.json:
        print(dumps({"files": files, "beta": betas, "alpha_star": alpha_star, "beta_critical": beta_c,
                     "alpha": alphas, **_inputs(args, arch)}))
        return 0
    print(f"trainability diagram: {_describe(arch, args.depth, args.threshold)}")
    print(f"grid: {betas.size} betas in [{format_number(betas.min())}, {format_number(betas.max())}], "
          f"{alphas.size} alphas in [{format_number(alphas.min())}, {format_number(alphas.max())}]")
    finite = beta_c[np.isfinite(beta_c)]
    if finite.size and np.ptp(finite) <= 1e-12 * abs(finite[0]):
        print(f"beta_c = {format_number(finite[0])} (entropy collapse above)")
    elif finite.size:
        print(f"beta_c from {format_number(finite.min())} to {format_number(finite.max())} over the grid "
              f"(entropy collapse above)")
    rows = [(format_number(betas[k]), format_number(alpha_star[k]), format_number(beta_c[k]))
            for k in _subsample(betas.size, 9)]
    print(format_table(("beta", "alpha*", "beta_c"), rows))
    print("wrote " + ", ".join(files))
    return 0


def _draw(result, path: Path) -> None:
    """Draw ``result.plot`` on an off-screen figure (no pyplot, no display needed)."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7.0, 5.0), layout="constrained")
    result.plot(ax=figure.add_subplot())
    figure.savefig(path, dpi=150)


# -- remprop figures ---------------------------------------------------------------------
def run_figures(args) -> int:
    """Every supported reference figure (PNG + data), and what is not supported yet."""
    directory = writable_directory(args.out)
    from . import figure_set

    result = figure_set.make_figures(directory, quick=args.quick, progress=_progress(args), only=args.only,
                                     device=None if args.device == "auto" else args.device, workers=args.workers,
                                     threads=args.threads)
    if args.json:
        print(dumps({"files": [str(path) for path in result.paths], "quick": args.quick,
                     "figures": {k: [str(p) for p in v] for k, v in result.files.items()},
                     "notes": result.notes, "skipped": result.skipped, "elapsed_s": result.elapsed_s,
                     "index": str(result.index)}))
        return 0
    described = figure_set.supported_figures()
    for figure_id, paths in result.files.items():
        print(f"figure {figure_id}: {described[figure_id]} ({result.elapsed_s[figure_id]:.1f} s)")
        for path in paths:
            print(f"  {os.fspath(path)}")
        notes = result.notes.get(figure_id, {})
        if "agreement" in notes:
            print(f"  measured vs predicted ({notes['theory']} theory): {notes['cells_agreeing']}/{notes['cells']} "
                  f"cells agree ({100 * notes['agreement']:.1f}%)")
    for figure_id, reason in result.skipped.items():
        print(f"figure {figure_id}: {reason}")
    print(f"index: {os.fspath(result.index)}")
    return 0


# -- remprop sweep -----------------------------------------------------------------------
def run_sweep(args) -> int:
    """Simulated (beta, alpha_SA) grid, classified as the theory classifies, against the prediction."""
    import numpy as np

    arch = architecture_from_args(args)
    directory = writable_directory(args.out)
    try:
        import torch  # noqa: F401 - the simulations need it
    except ImportError as err:
        raise CommandLineError(f"{VALIDATION_HINT} ({err})", prog="remprop sweep") from None
    from remprop.validation.measured_diagram import MeasuredDiagram
    from remprop.validation.sweep import SweepSpec, load_records, run_sweep as sweep_cells

    spec = SweepSpec(arch=arch, betas=np.asarray(args.betas, dtype=float), alphas=np.asarray(args.alphas, dtype=float),
                     depth=args.depth, seeds=args.seeds, sequences=args.sequences, width=args.width,
                     seq_len=args.seq_len, threshold=args.threshold, q0=args.q0, rho0=args.rho0, inputs=args.inputs,
                     dtype=args.dtype, threads=args.threads)
    report = sweep_cells(spec, directory, workers=args.workers, scheduler=args.scheduler,
                         device=None if args.device == "auto" else args.device, progress=_progress(args))
    diagram = MeasuredDiagram.from_records(spec, load_records(spec, directory), theory=args.theory)
    files = [str(path) for path in diagram.save(directory / "measured_diagram")]
    if args.json:
        print(dumps({"files": files, "agreement": diagram.agreement, "cells": int(diagram.phase.size),
                     "cells_agreeing": int(diagram.agrees.sum()), "theory": diagram.theory,
                     "confusion_predicted_vs_measured": diagram.confusion(),
                     "backend": report.backend, "workers": report.workers, "cells_computed": report.cells_computed,
                     "cells_reused": report.cells_reused, "elapsed_s": report.elapsed_s,
                     "cells_per_minute": report.cells_per_minute, "devices": list(diagram.devices),
                     "measured_phase": diagram.phase, "predicted_phase": diagram.predicted.phase,
                     "beta": spec.betas, "alpha": spec.alphas, **_inputs(args, arch)}))
        return 0
    print(f"measured trainability diagram: {_describe(arch, args.depth, args.threshold)}")
    print(f"grid: {len(spec.betas)} betas x {len(spec.alphas)} alphas, d={spec.width}, T={spec.seq_len}, "
          f"{len(spec.seeds)} seed(s) x {spec.sequences} sequence(s) per cell")
    rate = f", {report.cells_per_minute:.1f} cells/min" if report.cells_computed else ""
    print(f"cells: {report.cells_computed} computed, {report.cells_reused} already on disk; backend {report.backend}; "
          f"{report.elapsed_s:.1f} s{rate}; device(s) {', '.join(diagram.devices)}")
    print(diagram.summary())
    print("wrote " + ", ".join(files))
    return 0


# -- remprop check -----------------------------------------------------------------------
def run_check(args) -> int:
    """Diagnose a real model: report, JSON, and the model on its trainability diagram."""
    import dataclasses
    import re

    from remprop.diagrams import diagnose
    from remprop.theory import model_spec

    if (args.config is None) == (args.model is None):
        raise CommandLineError("give the model once: a shipped name or config path as MODEL or --hf-config")
    spec = model_spec(args.config or args.model, seq_len=args.seq_len, pixel_std=args.pixel_std)
    if args.depth is not None:
        spec = spec.with_depth(args.depth)
    if args.rho0 is not None:
        spec = dataclasses.replace(spec, rho0=args.rho0)
    directory = writable_directory(args.out)
    stem = directory / (args.name or "check-" + re.sub(r"[^A-Za-z0-9._-]+", "_", spec.name).strip("_"))
    diagnosis = diagnose(spec, args.threshold, max_depth=args.max_depth)
    measured = None
    if args.simulate:
        try:
            from remprop.validation import simulate_model
        except ImportError as err:
            raise CommandLineError(f"--simulate: {VALIDATION_HINT} ({err})") from None
        progress = (lambda seed: print(f"  simulated seed {seed}", file=sys.stderr)) if sys.stderr.isatty() else None
        try:
            measurement = simulate_model(spec, seeds=args.seeds, sequences=args.sequences, device=args.device,
                                         theory=diagnosis.compared_rho, progress=progress,
                                         store=Path(f"{stem}.simulation"))
        except ImportError as err:
            raise CommandLineError(f"--simulate: {VALIDATION_HINT} ({err})") from None
        measured = measurement.summary()
    result = diagnosis.to_dict()
    if measured is not None:
        result["simulation"] = measured
    files = []
    if args.figure:
        from remprop.diagrams import model_figure

        png = Path(f"{stem}.png")
        figure = model_figure(diagnosis, measured)
        figure.savefig(png, dpi=120)
        files.append(str(png))
    json_path = Path(f"{stem}.json")
    json_path.write_text(dumps(result) + "\n")
    files.append(str(json_path))
    result["files"] = files
    if args.json:
        print(dumps(result))
        return 0
    print(diagnosis.report())
    if measured is not None:
        print(f"\nsimulated at random init ({len(measured['seeds'])} seeds x {measured['sequences']} "
              f"sequences, {measured['compared']}): |theory - measured| max {measured['max_error']:.4f}, "
              f"mean {measured['mean_error']:.4f}")
        rows = [(str(layer), format_number(t, 4), format_number(m, 4), format_number(e, 3))
                for layer, (t, m, e) in enumerate(zip(measured["theory"], measured["rho_mean"], measured["rho_std"]))]
        print(format_table(("layer", "theory", "measured", "std over seeds"), rows))
    print("wrote " + ", ".join(files))
    return 0
