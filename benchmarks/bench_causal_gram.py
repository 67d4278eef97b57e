"""Causal Gram state (docs/theory.md sections 8, 8.1): the fast method against the exact one, and RoPE's price.

``--part fast`` (default): Llama 3.2 1B at full size (``model_spec("llama-3.2-1b")``: 16 layers, d_H 64,
rope base 5e5, its q0 and norm eps) in one run:

* where the exact state is affordable (T 256 and 512, ``--compare-layers`` layers, 4 draws), both methods
  as ``--replicas`` independent chains each: the last tokens' cosine per layer, its standard error, the
  difference in combined standard errors, the seconds;
* the fast state through the whole stack at check's default draws (8) at T 256-8192 (one chain; above
  T 2048 ``--long-layers`` layers, scaled to 16): seconds, tracemalloc peak against ``causal_gram_bytes``,
  and the counted work of both methods (``causal_gram_flops``); the exact seconds there are the counted
  work at the exact method's rate measured at T 512 (extrapolated, not run);
* the same stacks with the code of ``--reference`` (a commit: its ``src/remprop`` and ``theory`` exported by
  ``git archive`` and imported in a subprocess, up to ``--reference-up-to``), the plain reference of
  the speed and memory ratios, timed in the same run.

``--part rope``: the earlier comparison (one block of an OLMo-2-like decoder, RoPE against absolute
positions, exact method): the price of the rotary draws, free of the machine's speed.

One BLAS thread (``OMP_NUM_THREADS=1`` etc. before numpy loads). Writes
``benchmarks/results/bench_causal_gram.json``; other processes may share the cores: the load average
is recorded with the results.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_name, "1")

from _common import best_of, machine, print_table, write_json  # noqa: E402


def rope_part(args):
    from remprop.theory import Architecture
    from remprop.theory.causal import causal_gram_flops, propagate_causal_gram

    rope = Architecture(norm="pre", attention="softmax", activation="silu", sigma_w2=0.02, sigma_b2=0.0,
                        sigma_v2=0.02, sigma_o2=0.02, sigma_w2_out=0.08, norm_type="rms", mlp="gated",
                        positions="rope", rope_base=5e5, head_dim=128, heads=16, seq_len=args.seq_len)
    plain = rope.replace(positions="absolute")

    def run(arch):
        return propagate_causal_gram(arch, 1.0, 1, args.seq_len, 1.0, 0.0, draws=args.draws, seed=0, method="exact")

    run(rope), run(plain)  # compile / load the kernels
    rope_best, rope_all = best_of(lambda: run(rope), args.repeat)
    plain_best, plain_all = best_of(lambda: run(plain), args.repeat)
    flops = {name: causal_gram_flops(arch, 1, args.seq_len, args.draws, method="exact") for name, arch in
             (("rope", rope), ("absolute", plain))}
    print_table("Causal Gram state (exact): the price of rotary positions", [
        ("T, draws", f"{args.seq_len}, {args.draws}", ""),
        (f"one block, absolute positions, best of {args.repeat}", plain_best, "s"),
        (f"one block, RoPE (head dim 128, base 5e5), best of {args.repeat}", rope_best, "s"),
        ("RoPE / absolute", rope_best / plain_best, "x"),
        ("counted work RoPE / absolute", flops["rope"] / flops["absolute"], "x")])
    return {"seq_len": args.seq_len, "draws": args.draws, "absolute_seconds_best": plain_best,
            "absolute_seconds_all": plain_all, "rope_seconds_best": rope_best, "rope_seconds_all": rope_all,
            "ratio": rope_best / plain_best, "counted_work_ratio": flops["rope"] / flops["absolute"]}


def fast_part(args):
    import numpy as np

    from remprop.theory.causal import causal_gram_flops
    from remprop.theory.models import model_spec
    from remprop.theory.work_estimates import causal_gram_bytes

    spec = model_spec("llama-3.2-1b")
    run = _llama_run()
    run(64, 1, 1, "fast"), run(64, 1, 1, "exact")  # compile / load
    compared, rows, exact_rate = [], [], None
    for t in args.compare_lengths:
        entry = {"seq_len": t, "layers": args.compare_layers, "draws": 4, "replicas": args.replicas}
        for method in ("exact", "fast"):
            traj, seconds = run(t, args.compare_layers, 4, method, args.replicas)
            entry[method] = {"cosine": traj.cosine.tolist(), "cosine_se": traj.cosine_se.tolist(), "seconds": seconds}
        fast, exact = entry["fast"], entry["exact"]
        gap = np.abs(np.subtract(fast["cosine"], exact["cosine"]))[1:]
        z = gap / np.hypot(fast["cosine_se"], exact["cosine_se"])[1:]
        entry["max_difference"], entry["max_z"] = float(gap.max()), float(z.max())
        entry["speedup"] = entry["exact"]["seconds"] / entry["fast"]["seconds"]
        exact_rate = causal_gram_flops(spec.architecture.replace(seq_len=t), args.compare_layers, t, 4,
                                       method="exact") * args.replicas / entry["exact"]["seconds"]
        compared.append(entry)
        rows += [(f"T {t}: max |fast - exact| over {args.compare_layers} layers", entry["max_difference"], ""),
                 (f"T {t}: max |z| (combined standard errors)", entry["max_z"], ""),
                 (f"T {t}: exact / fast seconds", entry["speedup"], "x")]
    stacks = []
    reference = _reference_stacks(args) if args.reference else {}
    for t in args.stack_lengths:
        arch = spec.architecture.replace(seq_len=t)
        fast_flops = causal_gram_flops(arch, spec.depth, t, 8)
        exact_flops = causal_gram_flops(arch, spec.depth, t, 8, method="exact")
        entry = {"seq_len": t, "layers": spec.depth, "draws": 8, "fast_flops": fast_flops,
                 "exact_flops": exact_flops, "counted_ratio": exact_flops / fast_flops,
                 "estimated_bytes": causal_gram_bytes(arch, spec.depth, t, 8),
                 "exact_seconds_extrapolated": exact_flops / exact_rate}
        if t <= args.run_up_to:
            entry.update(_timed_stack(run, spec.depth, t, args.long_layers))
            label = "" if entry["layers_run"] == spec.depth else f" (from {entry['layers_run']} run)"
            rows.append((f"T {t}: fast, 16 layers, 8 draws{label}", entry["stack_seconds"], "s"))
            rows.append((f"T {t}: peak / estimated memory", entry["peak_bytes"] / entry["estimated_bytes"], ""))
            rows.append((f"T {t}: peak memory / T^2", entry["peak_bytes"] / t ** 2, "bytes"))
        if str(t) in reference:
            before = entry["reference"] = reference[str(t)]
            rows.append((f"T {t}: {args.reference[:7]} (before), 16 layers", before["stack_seconds"], "s"))
            rows.append((f"T {t}: {args.reference[:7]} peak memory / T^2", before["peak_bytes"] / t ** 2, "bytes"))
            if "stack_seconds" in entry:
                entry["speedup"] = before["stack_seconds"] / entry["stack_seconds"]
                entry["peak_ratio"] = before["peak_bytes"] / entry["peak_bytes"]
                rows.append((f"T {t}: before / after seconds", entry["speedup"], "x"))
        rows.append((f"T {t}: exact, 16 layers (extrapolated)", entry["exact_seconds_extrapolated"], "s"))
        rows.append((f"T {t}: counted work exact / fast", entry["counted_ratio"], "x"))
        stacks.append(entry)
    rows.append(("load average (1 min)", f"{machine()['load_average_1min']:.2f}", ""))
    print_table("Causal Gram state of Llama 3.2 1B: fast against exact", rows)
    return {"model": "llama-3.2-1b", "exact_rate_flops_per_second": exact_rate, "compared": compared,
            "stacks": stacks, "reference_commit": args.reference,
            "threads": {name: os.environ.get(name) for name in ("OMP_NUM_THREADS", "NUMBA_NUM_THREADS")}}


def _llama_run():
    """``run(t, depth, draws, method)``: the fast or exact causal Gram state of Llama 3.2 1B, timed."""
    import time

    from remprop.theory.causal import propagate_causal_gram
    from remprop.theory.models import model_spec

    spec = model_spec("llama-3.2-1b")

    def run(t, depth, draws, method, replicas=1):
        arch = spec.architecture.replace(seq_len=t)
        start = time.perf_counter()
        traj = propagate_causal_gram(arch, spec.beta, depth, t, spec.q0, spec.rho0, draws=draws, seed=0,
                                     norm_eps=spec.layer_norm_eps, method=method, replicas=replicas)
        return traj, time.perf_counter() - start
    return run


def _timed_stack(run, depth, t, long_layers):
    """One fast chain at T ``t`` (``depth`` layers up to T 2048, else ``long_layers`` scaled to ``depth``):
    seconds and tracemalloc's peak."""
    import tracemalloc

    layers = depth if t <= 2048 else long_layers
    tracemalloc.start()
    try:
        traj, seconds = run(t, layers, 8, "fast")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return {"layers_run": layers, "seconds": seconds, "seconds_per_layer": seconds / layers,
            "stack_seconds": seconds * depth / layers, "final_cosine": float(traj.cosine[-1]), "peak_bytes": peak}


def _reference_stacks(args):
    """The stacks of :func:`_timed_stack` with the code of commit ``args.reference``, in a subprocess that
    imports it (``git archive`` of its ``src/remprop`` and ``theory``): ``{str(T): entry}``."""
    from _common import REPO

    lengths = [t for t in args.stack_lengths if t <= args.reference_up_to]
    with tempfile.TemporaryDirectory() as folder:
        archive = subprocess.run(["git", "-C", str(REPO), "archive", args.reference, "src/remprop", "theory"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", folder], input=archive, check=True)
        package = os.path.join(folder, "pkg")
        os.makedirs(package)
        os.rename(os.path.join(folder, "src", "remprop"), os.path.join(package, "remprop"))
        os.rename(os.path.join(folder, "theory"), os.path.join(package, "remprop", "theory"))
        out = os.path.join(folder, "reference.json")
        env = dict(os.environ, PYTHONPATH=package)
        subprocess.run([sys.executable, __file__, "--part", "reference-stacks", "--json-out", out,
                        "--long-layers", str(args.long_layers), "--stack-lengths", *map(str, lengths)],
                       check=True, env=env, cwd=folder)
        with open(out) as handle:
            return json.load(handle)


def reference_part(args):
    """``--part reference-stacks`` (run by :func:`_reference_stacks` under the reference's code)."""
    import remprop.theory

    run = _llama_run()
    run(64, 1, 1, "fast")  # compile / load
    result = {str(t): _timed_stack(run, 16, t, args.long_layers) for t in args.stack_lengths}
    for entry in result.values():
        entry["code"] = os.path.dirname(remprop.theory.__file__)
    with open(args.json_out, "w") as handle:
        json.dump(result, handle)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("fast", "rope", "reference-stacks"), default="fast")
    parser.add_argument("--seq-len", type=int, default=256, help="rope part: T")
    parser.add_argument("--draws", type=int, default=8, help="rope part: draws")
    parser.add_argument("--repeat", type=int, default=3, help="rope part: timings")
    parser.add_argument("--compare-lengths", type=int, nargs="+", default=[256, 512])
    parser.add_argument("--compare-layers", type=int, default=2)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--stack-lengths", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096, 8192])
    parser.add_argument("--run-up-to", type=int, default=8192, help="longest T the fast stack is run at")
    parser.add_argument("--reference", default="ac5a34e",
                        help="commit whose code times the same stacks (before; empty: none)")
    parser.add_argument("--reference-up-to", type=int, default=2048, help="longest T the reference is run at")
    parser.add_argument("--json-out", help="reference-stacks part: where its JSON goes")
    parser.add_argument("--long-layers", type=int, default=2, help="layers run above T 2048 (scaled to 16)")
    args = parser.parse_args(argv)
    if args.part == "reference-stacks":
        reference_part(args)
    elif args.part == "rope":
        write_json("bench_causal_gram", rope_part(args))
    else:
        write_json("bench_causal_gram", {"part": "fast", **fast_part(args)})


if __name__ == "__main__":
    main()
