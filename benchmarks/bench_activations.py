"""General activations: a 200 x 200 x 60 tanh diagram, per-block cost, dblquad ratio, accuracy.

1. ``final_state`` over a 200 x 200 (beta, alpha_sa) grid x 60 post-LN layers with a
   tanh MLP (BERT defaults otherwise; target <= 10 s on 2 cores), and the same for GELU,
   SiLU and erf; the cost per block update and core.
2. One tanh kernel evaluation ``E[tanh(u) tanh(v)]`` plus ``E[tanh(u)^2]`` with
   ``scipy.integrate.dblquad`` / ``quad`` (epsabs 1e-10, the published approach costs about
   1.2 s per tanh block update) against the engine's cost per block update, same run.
3. Accuracy of the trapezoid rule used by the engine against Gauss-Hermite with the
   same number of nodes, for ``E[tanh(sqrt(q1) z)^2]``.

Writes ``benchmarks/results/bench_activations.json``. Other processes may share the
cores: the load average is recorded with the results.
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy import integrate

from _common import best_of, machine, print_table, write_json

TARGET_SECONDS = 10.0


def dblquad_block(q1, p1, eps=1e-10):
    """E[tanh(u)^2] (quad) and E[tanh(u) tanh(v)] (dblquad) for Var q1, Cov p1."""
    det = q1 * q1 - p1 * p1
    norm = 1.0 / (2 * math.pi * math.sqrt(det))

    def density(v, u):
        return norm * math.exp(-(q1 * u * u - 2 * p1 * u * v + q1 * v * v) / (2 * det))

    edge = 10 * math.sqrt(q1)
    m2 = integrate.quad(lambda u: math.tanh(u) ** 2 * math.exp(-u * u / (2 * q1)) / math.sqrt(2 * math.pi * q1),
                        -edge, edge, epsabs=eps)[0]
    m11 = integrate.dblquad(lambda v, u: math.tanh(u) * math.tanh(v) * density(v, u), -edge, edge, -edge, edge,
                            epsabs=eps)[0]
    return m2, m11


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--depth", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()

    import numba

    from remprop.theory import Architecture, activation_moments, final_state
    from remprop.theory.quadrature import gauss_hermite, gaussian_trapezoid

    threads = numba.get_num_threads()
    betas = np.linspace(0.01, 3.0, args.size)
    alphas = np.linspace(0.0, 3.0, args.size)
    blocks = args.size * args.size * args.depth
    timings = {}
    for activation in ("tanh", "gelu", "silu", "erf", "relu"):
        arch = Architecture(activation=activation, alpha_sa=alphas[:, None])
        final_state(arch.replace(alpha_sa=1.0), betas[:3], 2)  # compile or load
        best, runs = best_of(lambda: final_state(arch, betas, args.depth), args.repeat)
        timings[activation] = {"seconds_best": best, "seconds_all": runs,
                               "us_per_block_per_core": best * threads / blocks * 1e6}
    try:
        from remprop.diagrams import trainability_diagram
        arch = Architecture(activation="tanh")
        trainability_diagram(arch, betas[:3], alphas[:3], 2)
        diagram_best, _ = best_of(lambda: trainability_diagram(arch, betas, alphas, args.depth), args.repeat)
    except ImportError:  # pragma: no cover - the diagrams package is part of the distribution
        diagram_best = float("nan")

    # 2. dblquad against the engine, one typical post-LN block (q = 1, rho = 0.5)
    q1, p1 = 0.2 + 4e-4, 0.2 * 0.5 + 4e-4
    start = time.perf_counter()
    reference = dblquad_block(q1, p1)
    dblquad_seconds = time.perf_counter() - start
    engine = activation_moments(q1, p1, "tanh")
    engine_block = timings["tanh"]["us_per_block_per_core"] * 1e-6
    dblquad_ratio = dblquad_seconds / engine_block

    # 3. trapezoid vs Gauss-Hermite, E[tanh(s z)^2]
    accuracy = []
    z_ref, w_ref = gaussian_trapezoid(2000, 10.0)
    for q in (0.2, 1.0, 4.0):
        exact = float(np.sum(w_ref * np.tanh(math.sqrt(q) * z_ref) ** 2))
        for half in (12, 24, 48):
            z, w = gaussian_trapezoid(half)
            gz, gw = gauss_hermite(2 * half + 1)
            accuracy.append({"q1": q, "nodes": 2 * half + 1,
                             "trapezoid_error": abs(float(np.sum(w * np.tanh(math.sqrt(q) * z) ** 2)) - exact),
                             "gauss_hermite_error": abs(float(np.sum(gw * np.tanh(math.sqrt(q) * gz) ** 2)) - exact)})

    rows = [("grid (beta x alpha) x depth, post-LN", f"{args.size} x {args.size} x {args.depth}", "")]
    for activation, t in timings.items():
        rows.append((f"final_state {activation}, best of {args.repeat}", t["seconds_best"], "s"))
        rows.append((f"  {activation}: per block update and core", t["us_per_block_per_core"], "us"))
    rows += [
        ("trainability_diagram tanh (same grid)", diagram_best, "s"),
        ("target: tanh diagram <= 10 s", "met" if max(timings["tanh"]["seconds_best"], diagram_best)
         <= TARGET_SECONDS else "NOT met", ""),
        ("dblquad + quad, one tanh block (epsabs 1e-10)", dblquad_seconds, "s"),
        ("engine per tanh block and core", engine_block * 1e6, "us"),
        ("dblquad / engine", dblquad_ratio, "x"),
        ("|engine - dblquad| (E phi^2, E phi phi)",
         f"{abs(engine[0] - reference[0]):.1e}, {abs(engine[1] - reference[1]):.1e}", ""),
    ]
    for a in accuracy:
        rows.append((f"E tanh^2 q1={a['q1']:g}, {a['nodes']} nodes: trapezoid / Gauss-Hermite error",
                     f"{a['trapezoid_error']:.1e} / {a['gauss_hermite_error']:.1e}", ""))
    rows.append(("load average (1 min) / numba threads", f"{machine()['load_average_1min']:.2f} / {threads}", ""))
    print_table("General activations: diagram cost, dblquad ratio, quadrature accuracy", rows)
    write_json("bench_activations", {
        "grid": [args.size, args.size], "depth": args.depth, "final_state": timings,
        "trainability_diagram_tanh_seconds": diagram_best,
        "dblquad_seconds_per_block": dblquad_seconds, "engine_seconds_per_block_per_core": engine_block,
        "dblquad_ratio": dblquad_ratio,
        "engine_minus_dblquad": [engine[0] - reference[0], engine[1] - reference[1]],
        "quadrature_accuracy": accuracy, "target_seconds": TARGET_SECONDS,
    })


if __name__ == "__main__":
    main()
