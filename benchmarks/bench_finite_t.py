"""Finite sequence length: cost of the exact Y2, the tables, a finite-T diagram, and accuracy.

1. Exact ``Y2`` and two-key moment per point, and the table build per T (cold cache).
2. Post-LN ReLU diagram 500 x 500 (beta, alpha) x 60 layers with ``final_state``:
   asymptotic maps against ``seq_len=512`` in the same run (target, issue 27: within 2x; the
   table build is reported separately and included in a second ratio).
3. Acceptance: ``Y2`` within 3 % relative (or 0.005 absolute) of an independent
   computation over T in [64, 4096], beta in [0.1, 6], rho in [0, 0.9] (Y2 depends on
   ``x = beta sqrt(1 - rho)`` and T only, so the sweep runs over x in [0.03, 6]):
   direct Monte Carlo of T Gaussian energies (samples chosen from a pilot run so that
   the standard error is below 1 % or 0.001) and a brute-force nested scipy quadrature
   of the t-integral (adaptive Gauss-Kronrod; none of the engine's windows or splits).

Writes ``benchmarks/results/bench_finite_t.json``. Other processes may share the
cores: the load average is recorded with the results.
"""
from __future__ import annotations

import argparse
import math
import time
import warnings

import numpy as np
from scipy import integrate

from _common import best_of, machine, print_table, write_json

#: issue 27: the finite-T diagram within 2x of the asymptotic one (was 3x).
TARGET_RATIO = 2.0


def monte_carlo(x, seq_len, rng, target_rel=0.01, target_abs=0.001, pilot=400, max_samples=60000):
    """Mean and standard error of sum_j a_j^2, samples from a pilot estimate of the variance."""
    sigma = x * math.sqrt(math.log(seq_len))

    def draw(n):
        out = []
        for start in range(0, n, 500):
            g = rng.standard_normal((min(500, n - start), seq_len)) * sigma
            g -= g.max(axis=1, keepdims=True)
            a = np.exp(g)
            a /= a.sum(axis=1, keepdims=True)
            out.append((a * a).sum(axis=1))
        return np.concatenate(out)

    values = draw(pilot)
    target = max(target_abs, target_rel * values.mean())
    needed = int(min(max_samples, math.ceil((values.std() / target) ** 2)))
    if needed > values.size:
        values = np.concatenate([values, draw(needed - values.size)])
    return values.mean(), values.std(ddof=1) / math.sqrt(values.size), values.size


def brute_force(x, seq_len):
    """Y2 = T int dtau E[e^{2(g - tau) - e^{g - tau}}] (1 - P(tau))^(T-1), scipy quad throughout."""
    s = x * math.sqrt(math.log(seq_len))
    if s == 0:
        return 1.0 / seq_len

    def expect(f, tau):
        # Gaussian expectation over z, with the feature of f at s z = tau as a break point
        centre = min(max(tau / s, -11.0), 11.0)
        pieces = [(-12.0, centre - 2.0 / max(s, 1e-3)), (centre - 2.0 / max(s, 1e-3), centre + 2.0 / max(s, 1e-3)),
                  (centre + 2.0 / max(s, 1e-3), 12.0)]
        total = 0.0
        for a, b in pieces:
            a, b = max(a, -12.0), min(b, 12.0)
            if b > a:
                total += integrate.quad(lambda z: f(s * z - tau) * math.exp(-0.5 * z * z),
                                        a, b, epsabs=0, epsrel=1e-12, limit=200)[0]
        return total / math.sqrt(2 * math.pi)

    def integrand(tau):
        a2 = expect(lambda y: math.exp(2 * y - math.exp(y)) if y < 700 else 0.0, tau)
        p = expect(lambda y: -math.expm1(-math.exp(y)) if y < 700 else 1.0, tau)
        return seq_len * a2 * math.exp((seq_len - 1) * math.log1p(-p)) if p < 1 else 0.0

    grid = np.linspace(-12 * s - 10, math.log(seq_len) + 12 * s + 10, 400)
    values = np.array([integrand(t) for t in grid])
    keep = np.flatnonzero(values > 1e-18 * values.max())
    lo, hi = grid[max(keep[0] - 1, 0)], grid[min(keep[-1] + 1, grid.size - 1)]
    peak = grid[np.argmax(values)]
    parts = [(lo, peak), (peak, hi)]
    return sum(integrate.quad(integrand, a, b, epsabs=0, epsrel=1e-10, limit=200)[0] for a, b in parts)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=500)
    parser.add_argument("--depth", type=int, default=60)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="smaller accuracy sweep")
    args = parser.parse_args()
    warnings.simplefilter("ignore", integrate.IntegrationWarning)

    from remprop.theory import Architecture, final_state, participation_table
    from remprop.theory.rem import ParticipationTable
    from remprop.theory.rem import table as rem_table
    from remprop.theory.rem.integral import row_moment

    # 1. exact evaluations and tables
    row_moment(np.array([1.0]), 512)  # compile / load
    xs = np.linspace(0.0, 50.0, 200)
    exact_best, _ = best_of(lambda: row_moment(xs + 1e-9, 4096), repeat=2)
    row_moment(np.array([1.0]), 512, (2, 2))  # compile / load
    pair_best, _ = best_of(lambda: row_moment(xs[:50] + 2e-9, 4096, (2, 2)), repeat=2)
    builds = {}
    for seq_len in (512, 4096, 10**7):
        start = time.perf_counter()
        ParticipationTable(seq_len, 2)
        builds[seq_len] = time.perf_counter() - start

    # 2. diagram, asymptotic vs finite T
    betas = np.linspace(0.01, 3.0, args.size)
    alphas = np.linspace(0.0, 3.0, args.size)
    asym = Architecture(alpha_sa=alphas[:, None])
    finite = asym.replace(seq_len=512)
    final_state(asym, betas[:3], 2)
    final_state(finite.replace(alpha_sa=1.0), betas[:3], 2)
    asym_best, asym_all = best_of(lambda: final_state(asym, betas, args.depth), args.repeat)
    fin_best, fin_all = best_of(lambda: final_state(finite, betas, args.depth), args.repeat)
    rem_table._cached_table.cache_clear()
    start = time.perf_counter()
    participation_table(512)
    build_512 = time.perf_counter() - start
    ratio = fin_best / asym_best
    ratio_with_build = (fin_best + build_512) / asym_best

    # 3. accuracy sweep
    rng = np.random.default_rng(2024)
    seq_lens = (64, 256, 1024, 4096)
    x_values = np.array([0.0316, 0.1, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0])
    if args.quick:
        seq_lens, x_values = (64, 4096), x_values[::3]
    sweep = []
    t0 = time.perf_counter()
    for seq_len in seq_lens:
        ours = row_moment(x_values, seq_len)
        for x, y in zip(x_values, ours):
            mean, se, n = monte_carlo(float(x), seq_len, rng)
            row = {"T": seq_len, "x": float(x), "y2": float(y), "mc": float(mean), "mc_se": float(se),
                   "mc_samples": n, "abs_err_mc": float(abs(y - mean)), "rel_err_mc": float(abs(y - mean) / mean),
                   "z_mc": float((y - mean) / se)}
            if True:  # the quadrature is cheap (~0.3 s): every point
                bf = brute_force(float(x), seq_len)
                row.update(brute_force=bf, rel_err_bf=abs(y - bf) / bf, abs_err_bf=abs(y - bf))
            sweep.append(row)
    sweep_seconds = time.perf_counter() - t0
    within = [r["rel_err_mc"] <= 0.03 or r["abs_err_mc"] <= 0.005 for r in sweep]
    bf_rows = [r for r in sweep if "brute_force" in r]

    rows = [
        ("exact Y2, per point (x in [0, 50], T = 4096)", exact_best / xs.size * 1e3, "ms"),
        ("exact two-key moment (2, 2), per point (T = 4096)", pair_best / 50 * 1e3, "ms"),
        ("table build T = 512 / 4096 / 1e7 (1000 nodes)",
         " / ".join(f"{builds[t]:.2f}" for t in (512, 4096, 10**7)), "s"),
        ("grid (beta x alpha) x depth", f"{args.size} x {args.size} x {args.depth}", ""),
        (f"ReLU diagram, asymptotic, best of {args.repeat}", asym_best, "s"),
        (f"ReLU diagram, seq_len = 512, best of {args.repeat}", fin_best, "s"),
        ("finite / asymptotic (table cached)", ratio, "x"),
        ("finite incl. cold table build / asymptotic", ratio_with_build, "x"),
        (f"target: finite within {TARGET_RATIO:g}x", "met" if ratio <= TARGET_RATIO else "NOT met", ""),
        ("accuracy sweep points (T x x)", len(sweep), ""),
        ("max |Y2 - MC| / MC", max(r["rel_err_mc"] for r in sweep), ""),
        ("max |Y2 - MC|", max(r["abs_err_mc"] for r in sweep), ""),
        ("max |z| = |Y2 - MC| / se", max(abs(r["z_mc"]) for r in sweep), ""),
        ("within 3 % or 0.005 of MC", f"{sum(within)}/{len(within)}", ""),
        ("brute-force quad points", len(bf_rows), ""),
        ("max |Y2 - quad| / quad", max((r["rel_err_bf"] for r in bf_rows), default=float("nan")), ""),
        ("sweep time", sweep_seconds, "s"),
        ("load average (1 min) / numba threads",
         f"{machine()['load_average_1min']:.2f} / {machine().get('numba_threads')}", ""),
    ]
    print_table("Finite sequence length: exact Y2, tables, diagram, accuracy", rows)
    write_json("bench_finite_t", {
        "exact_ms_per_point": exact_best / xs.size * 1e3,
        "pair_ms_per_point": pair_best / 50 * 1e3,
        "table_build_seconds": {str(k): v for k, v in builds.items()},
        "diagram": {"grid": [args.size, args.size], "depth": args.depth,
                    "asymptotic_seconds_best": asym_best, "asymptotic_seconds_all": asym_all,
                    "finite_seconds_best": fin_best, "finite_seconds_all": fin_all,
                    "table_build_seconds": build_512, "ratio": ratio,
                    "ratio_with_table_build": ratio_with_build, "target_ratio": TARGET_RATIO},
        "accuracy": sweep,
        "accuracy_within_3pct_or_0.005": f"{sum(within)}/{len(within)}",
    })


if __name__ == "__main__":
    main()
