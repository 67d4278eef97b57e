"""Calibrate the work estimates of remprop.theory.work_estimates: the engine's cost per instruction.

The theory estimates a kernel's time by arithmetic (``work_estimates.kernel_speed``): per cell
and block, ``BLOCK_SECONDS`` plus the ``INSTRUCTION_SECONDS`` of each instruction of the
architecture's lowered program, and ``DISPATCH_SECONDS`` per instruction and batch of cells;
``CALL_SECONDS`` per kernel call; ``ROPE_FREQUENCY_SECONDS`` per frequency of the rotary sum.
This script measures those constants on this machine:

* for each architecture of a set that uses every kind of instruction (``instruction_kinds``),
  the final-state kernel on one batch of cells and on a single cell, with one numba thread, at the
  architecture's own numbers (beta = 1, its input state):
  ``t(D) - t(1)`` over ``D - 1`` blocks, ``D`` grown until the difference takes 30 ms, the best
  of three;
* the costs by non-negative least squares on the relative errors of both kinds of timing;
* the call cost, ``t(1)`` minus one round, on every thread (median over the architectures);
* the rotary sum's time per frequency (``rem.rope._mean_correlation``, T = 512, 2**18 frequencies).

What constants cannot follow: in a stream without a norm the MLP sees the variance grow with depth,
and the quadrature rules of tanh, GELU and SiLU take more nodes with it (up to their cap,
remprop.theory.activations.quadrature_moments): such blocks cost 10-100x more deep in the stack
than near its input (from q = 1e4 on, measured: GELU 5-740 microseconds a cell, tanh 100-350).
Their ``*_raw`` costs are those near the input, as the timing the estimates replaced measured.

Prints the constants as Python to paste into theory/work_estimates.py, and the measured against
the estimated time of every architecture; writes ``docs/data/work-estimates.json``
(``--out``). Other processes may share the cores: the load average is recorded.
"""
from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time

import numpy as np

from _common import REPO, machine, print_table

#: Wall time a timing aims at: long enough to dwarf a call's fixed cost.
CALIBRATION_SECONDS = 0.03


def architectures():
    """A set of architectures that together use every kind of instruction, several times over."""
    from remprop.theory import ACTIVATIONS, Architecture

    archs = []
    for k, (activation, norm) in enumerate(itertools.product(sorted(ACTIVATIONS), ("pre", "post", "none"))):
        archs.append(Architecture(norm=norm, activation=activation, mlp=("dense", "gated")[k % 2],
                                  norm_type=("layer", "rms")[(k // 2) % 2]))
    variants = (dict(norm="none", activation="gelu"), dict(norm="none", activation="silu", mlp="gated"),
                dict(norm="none", activation="tanh"), dict(norm="none", activation="relu", seq_len=128),
                dict(seq_len=128), dict(seq_len=128, norm="post"), dict(attention="gain-controlled"),
                dict(attention="gain-controlled", seq_len=128), dict(positions="rope", head_dim=64, seq_len=256),
                dict(positions="rope", head_dim=64, seq_len=256, mlp="gated", activation="silu", norm_type="rms"),
                dict(positions="rope", head_dim=64, seq_len=4096, norm="post"),
                dict(qk_norm=True, qk_norm_dim=64, head_dim=64, seq_len=512),
                dict(qk_norm=True, qk_norm_dim=64, head_dim=64, seq_len=128, activation="gelu"),
                dict(block_form="parallel"), dict(block_form="parallel", mlp="gated", activation="gelu"),
                dict(branch_norm=True), dict(branch_norm=True, norm="none", qk_norm=True, qk_norm_dim=64, head_dim=64,
                                             seq_len=128, mlp="gated"))
    for variant in variants:
        try:
            archs.append(Architecture(**{"norm": "pre", "activation": "relu", **variant}))
        except ValueError as err:  # a combination the Architecture refuses: left out, said
            print(f"skipped {variant}: {err}")
    return archs


def timed(arch, rows, depth, repeats=1):
    """Best wall time of ``repeats`` final-state kernel calls on ``rows`` through ``depth`` blocks."""
    from remprop.theory.propagation import final_state_rows

    best = np.inf
    for _ in range(repeats):
        start = time.perf_counter()
        final_state_rows(arch, rows, depth)
        best = min(best, time.perf_counter() - start)
    return best


def per_block(arch, rows):
    """``(seconds of a one-block call, seconds per further block)`` for these rows."""
    one, depth = timed(arch, rows, 1, 3), 16
    while True:
        many = timed(arch, rows, depth)
        if many - one >= CALIBRATION_SECONDS or depth >= 1 << 22:
            break
        depth *= 4
    many = min(many, timed(arch, rows, depth, 2))  # the least disturbed of three
    return one, max((many - one) / (depth - 1), 1e-12)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(REPO / "docs" / "data" / "work-estimates.json"))
    parser.add_argument("--passes", type=int, default=2,
                        help="passes over the architectures; each timing is the least of its passes (default 2)")
    args = parser.parse_args(argv)

    import numba
    from scipy.optimize import nnls

    from remprop.theory import work_estimates as work
    from remprop.theory.kernels import BATCH, kernels_for
    from remprop.theory.propagation import kernel_tree, pack_parameters

    threads = numba.get_num_threads()
    measured = {}
    timings = ("batch_block_seconds", "single_block_seconds", "call_seconds")
    for _ in range(args.passes):  # other processes on the cores only slow a timing down: keep the least
        for arch in architectures():
            program = kernels_for(kernel_tree(arch)).program
            kinds = work.instruction_kinds(program)
            _, _, rows = pack_parameters(arch, 1.0)  # the architecture's own numbers and input
            row = rows(0, 1)
            timed(arch, row, 1)  # compile or load from the cache
            numba.set_num_threads(1)
            try:
                _, batch_block = per_block(arch, np.repeat(row, BATCH, axis=0))
                _, single_block = per_block(arch, row)
            finally:
                numba.set_num_threads(threads)
            one, round_block = per_block(arch, np.repeat(row, BATCH * threads, axis=0))
            entry = measured.setdefault(repr(arch), dict(arch=repr(arch), kinds=kinds, instructions=len(program.ops)))
            for name, value in zip(timings, (batch_block, single_block, max(one - round_block, 0.0))):
                entry[name] = min(entry.get(name, np.inf), value)
    measured = list(measured.values())

    kinds = sorted({kind for entry in measured for kind in entry["kinds"]})
    design, weights = [], []
    for entry in measured:
        counts = [1.0] + [float(entry["kinds"].count(kind)) for kind in kinds]
        for cells, seconds in ((BATCH, entry["batch_block_seconds"]), (1, entry["single_block_seconds"])):
            design.append([cells * value for value in counts] + [float(entry["instructions"])])
            weights.append(1.0 / seconds)
    design, weights = np.asarray(design), np.asarray(weights)
    costs, _ = nnls(design * weights[:, None], np.ones(len(weights)))
    block, instruction, dispatch = costs[0], dict(zip(kinds, costs[1:-1])), costs[-1]
    call = statistics.median(entry["call_seconds"] for entry in measured)

    from remprop.theory.rem.rope import _mean_correlation

    width, best = 2 * 2 ** 18, np.inf
    for base in (10000.0, 10001.0):  # two bases: the cached first call is not timed again
        start = time.perf_counter()
        _mean_correlation(512, width, base + np.random.default_rng().random())
        best = min(best, time.perf_counter() - start)
    rope = best / (width // 2)

    predicted = design @ costs
    rows = []
    for k, entry in enumerate(measured):
        entry["estimated_batch_block_seconds"] = float(predicted[2 * k])
        entry["estimated_single_block_seconds"] = float(predicted[2 * k + 1])
        rows.append((entry["arch"][:70], entry["estimated_batch_block_seconds"] / entry["batch_block_seconds"],
                     "estimate / measured (batch)"))
    ratios = np.concatenate([predicted[0::2] / [e["batch_block_seconds"] for e in measured],
                             predicted[1::2] / [e["single_block_seconds"] for e in measured]])
    print_table("Estimated over measured seconds of a block (one batch, one thread)", rows)
    print(f"estimate / measured over {ratios.size} timings: median {np.median(ratios):.3f}, "
          f"range {ratios.min():.3f} .. {ratios.max():.3f}\n")
    constants = dict(INSTRUCTION_SECONDS={kind: float(f"{value:.3g}") for kind, value in instruction.items()},
                     BLOCK_SECONDS=float(f"{block:.3g}"), DISPATCH_SECONDS=float(f"{dispatch:.3g}"),
                     CALL_SECONDS=float(f"{call:.3g}"), ROPE_FREQUENCY_SECONDS=float(f"{rope:.3g}"))
    print("# theory/work_estimates.py")
    for name, value in constants.items():
        print(f"{name} = {value!r}")
    payload = dict(benchmark="work_estimates", date=time.strftime("%Y-%m-%d"), machine=machine(),
                   batch=BATCH, passes=args.passes, constants=constants,
                   ratio_estimate_over_measured=dict(median=float(np.median(ratios)), min=float(ratios.min()),
                                                     max=float(ratios.max())),
                   architectures=measured)
    with open(args.out, "w") as handle:
        json.dump(payload, handle, indent=2, default=float)
        handle.write("\n")
    print(f"results written to {args.out}")


if __name__ == "__main__":
    main()
