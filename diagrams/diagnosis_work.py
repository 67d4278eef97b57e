r"""How long :func:`~remprop.diagrams.diagnosis.diagnose` will take and how much memory it holds, before it runs.

The command line (``remprop check``) refuses a diagnosis above ``--max-seconds`` / ``--max-memory`` from
these estimates (:func:`remprop.cli.limits.check_work`); docs/real_models.md.
"""
from __future__ import annotations

from remprop.machine import machine_load
from remprop.theory import ModelSpec, model_spec
from remprop.theory import work_estimates
from remprop.theory import gram_width
from remprop.theory.causal import causal_gram_flops, compared_last_tokens
from remprop.theory.checks import check_depth
from remprop.theory.learning_rate import ceiling_seconds

from .compared_theory import (GRAM_DRAWS, headline_gram_layers, last_tokens_theory, margins_theory,
                              verdict_gram_layers)
from .diagnosis import MAX_COLLAPSE_DEPTH
from .init_deviations import effect_seconds
from .residual_strength import search_seconds

__all__ = ["diagnosis_seconds", "diagnosis_bytes", "causal_gram_seconds", "gram_layers", "MAPS_ALPHA_RUNS",
           "MAPS_LAYER_SECONDS", "GRAM_PAIR_PASSES"]


def diagnosis_seconds(spec, *, max_depth=MAX_COLLAPSE_DEPTH, causal_theory="auto", gram_draws=GRAM_DRAWS) -> float:
    """Estimated seconds of :func:`~remprop.diagrams.diagnosis.diagnose` on this machine, before it runs.

    The depth kernels of the verdicts (the model three times: its verdict, the recommended beta,
    the skip change; the other norm placement; gain-controlled attention), the ``alpha*`` search
    (:func:`~remprop.diagrams.residual_strength.search_seconds`) and the collapse-depth run
    through ``max_depth`` blocks (:func:`~remprop.theory.work_estimates.run_seconds`); with
    rotary positions the mean rotary correlation of the model's T and of each compared late
    token (:func:`~remprop.theory.work_estimates.rope_seconds`); causal models their late
    tokens' per-position maps, as many cells, and at :data:`MAPS_LAYER_SECONDS` a layer through
    ``max_depth`` blocks (their collapse depth) and :data:`MAPS_ALPHA_RUNS` times the depth (their
    ``alpha*``), and where
    :func:`~remprop.diagrams.compared_theory.last_tokens_theory` takes it the causal Gram state over
    :func:`gram_layers` (:func:`causal_gram_seconds`, timed on this machine); the learning-rate ceiling's walk
    (:func:`~remprop.theory.learning_rate.ceiling_seconds`); a model measured on its own weights, the runs
    of its deviations from the default init (:func:`~remprop.diagrams.init_deviations.effect_seconds`).
    """
    if not isinstance(spec, ModelSpec):
        spec = model_spec(spec)
    max_depth = check_depth(max_depth, name="max_depth")
    arch, depth = spec.architecture, spec.depth
    seconds = sum(work_estimates.run_seconds(a, 1, depth, passes) for a, passes in _verdict_architectures(arch))
    seconds += search_seconds(arch, depth, 1) + work_estimates.run_seconds(arch, 1, max_depth)
    seconds += ceiling_seconds(1, depth)          # the learning-rate ceiling's walk
    seconds += effect_seconds(spec, max_depth)    # own weights: each deviating group beside its default
    last = compared_last_tokens(spec.seq_len) if spec.causal else 0
    if arch.positions.rotary:
        seconds += (1 + last) * work_estimates.rope_seconds(arch.head_dim)
    if last:  # the late tokens' per-position maps (NumPy, not the kernels): collapse search, alpha*, changes
        seconds += work_estimates.run_seconds(arch, last, depth)
        seconds += MAPS_LAYER_SECONDS * (max_depth + (MAPS_ALPHA_RUNS + 4) * depth)
    layers = gram_layers(spec, causal_theory, gram_draws, max_depth)
    if layers:
        seconds += causal_gram_seconds(arch, layers, spec.seq_len, gram_draws, width=gram_width(arch, spec.width))
    return seconds


def causal_gram_seconds(arch, depth, seq_len, draws, width=None) -> float:
    """Estimated seconds of the causal Gram state (:func:`~remprop.theory.causal.propagate_causal_gram`, its
    default fast method, at the stream ``width`` where given: docs/theory.md section 8.2) on this machine,
    from short timed calls made now (so under the machine's present load).

    Its counted operations (:func:`~remprop.theory.causal.causal_gram_flops`) at the rate of a timed float32
    product of one chunk of query rows with every key (the shape of the draws' products), plus per layer
    and draw the exponentials of the causal half of the scores (``T^2 / 2``, timed on a chunk) and per
    layer the pair maps of the block (:data:`GRAM_PAIR_PASSES` passes over the ``T x T`` matrix, timed on a
    chunk; they include the MLP's pair moments at unequal token norms, interpolated from a table of
    :func:`~remprop.theory.causal.pair_moment` in ``O(T^2)``).

    Like every work estimate, the result is a quiet machine's seconds: the timings, made under the present
    load, are divided by its factor (:meth:`remprop.machine.MachineLoad.factor` on every core), which the
    command line multiplies back (its estimate line is the time at the load, :mod:`remprop.cli.limits`).
    """
    import time

    import numpy as np

    from remprop.theory.gram_threads import gram_blas_threads
    from remprop.theory.work_estimates import GRAM_ROW_CHUNK, causal_score_width

    def best(run, repeats=3):
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            run()
            times.append(time.perf_counter() - start)
        return min(times)

    t = int(seq_len)
    rng = np.random.default_rng(0)
    rows = min(GRAM_ROW_CHUNK, t)
    m = causal_score_width(arch)
    u = rng.standard_normal((rows, m), dtype=np.float32)
    v = rng.standard_normal((t, m), dtype=np.float32)
    with gram_blas_threads():   # as the Gram state's attention runs
        rate = 2.0 * rows * t * m / max(best(lambda: u @ v.T), 1e-9)
    scores = u @ v.T
    per_entry = best(lambda: np.exp(scores)) / scores.size
    chunk = rng.standard_normal((rows, t))
    per_pass = best(lambda: chunk * chunk) / chunk.size
    square = float(t) * t
    seconds = (causal_gram_flops(arch, depth, t, draws, width=width) / rate
               + depth * square * (draws * per_entry / 2 + GRAM_PAIR_PASSES * per_pass))
    load = machine_load()
    return seconds / load.factor(load.cores)


#: The time of one block's pair maps (norms, dense layers, the MLP's pair-moment table, skips, the fast
#: attention's float32 copies and the products slower than the timed chunk) in passes over the ``T x T``
#: Gram matrix: 8 layers at T = 2048, the model's width, 8 draws, one BLAS thread, load 3.4 on two cores:
#: Llama 3.2 1B 6.7 s, SmolLM2 135M 8.6 s, OLMo 2 1B 12.5 s, beside 2.1-3.0 s for the counted operations
#: at the timed rate and 0.6-0.7 ns a pass entry: 190, 330 and 430 passes.
GRAM_PAIR_PASSES = 300


#: Runs of the per-position maps that Brent's search of their ``alpha*`` takes at most (counted: about
#: 40 at a tolerance of 1e-9 on [0, 1e3]).
MAPS_ALPHA_RUNS = 60
#: Seconds per layer of the per-position maps of the compared late tokens (50 rows, one NumPy pass per
#: layer): measured 1.4e-4 s (a RoPE SwiGLU decoder, 1000 layers in 0.14 s on two loaded cores), rounded up.
MAPS_LAYER_SECONDS = 2e-4


def gram_layers(spec, causal_theory="auto", gram_draws=GRAM_DRAWS, max_depth=MAX_COLLAPSE_DEPTH) -> int:
    """Layers of causal Gram state a diagnosis of ``spec`` runs: none where the per-position maps judge it
    (:func:`~remprop.diagrams.compared_theory.last_tokens_theory`), the headline's
    (:func:`~remprop.diagrams.compared_theory.headline_gram_layers`) and, where
    :func:`~remprop.diagrams.compared_theory.margins_theory` takes the Gram state too, the whole verdict's
    (:func:`~remprop.diagrams.compared_theory.verdict_gram_layers`)."""
    chosen = last_tokens_theory(spec, causal_theory, gram_draws, max_depth)
    if chosen is None or chosen[0] != "gram":
        return 0
    if margins_theory(spec, causal_theory, gram_draws, max_depth)[0] == "gram":
        return verdict_gram_layers(spec.depth, max_depth)
    return headline_gram_layers(spec.depth, max_depth)


def diagnosis_bytes(spec, *, max_depth=MAX_COLLAPSE_DEPTH, causal_theory="auto", gram_draws=GRAM_DRAWS) -> int:
    """Bytes :func:`~remprop.diagrams.diagnosis.diagnose` and its JSON hold at their peak, before it runs.

    Four trajectories through the model's depth alive at once (the verdict's, the
    recommended beta's and their temporaries), the late tokens' trajectories of a causal
    model, the collapse-depth trajectory through ``max_depth`` blocks
    (:func:`~remprop.theory.work_estimates.trajectory_bytes`), and the per-layer lists of
    :meth:`~remprop.diagrams.diagnosis.Diagnosis.to_dict` with their JSON text (three numbers a layer, about 100 bytes each);
    where :func:`~remprop.diagrams.compared_theory.last_tokens_theory` takes it, the causal Gram state
    (:func:`~remprop.theory.work_estimates.causal_gram_bytes`: with RoPE, its chunks of rotating
    frequencies).
    """
    if not isinstance(spec, ModelSpec):
        spec = model_spec(spec)
    max_depth = check_depth(max_depth, name="max_depth")
    depth = spec.depth
    last = compared_last_tokens(spec.seq_len) if spec.causal else 0
    gram = (work_estimates.causal_gram_bytes(spec.architecture, depth, spec.seq_len, gram_draws)
            if gram_layers(spec, causal_theory, gram_draws, max_depth) else 0)
    return (work_estimates.trajectory_bytes(4 + last, depth + 1) + work_estimates.trajectory_bytes(1 + last, max_depth + 1)
            + 300 * (depth + 1) + gram)


def _verdict_architectures(arch):
    """The architectures :func:`diagnose` propagates through the model's depth, with their passes:
    the model itself (its verdict, the recommended beta, the skip change), the other norm
    placement (not for a parallel block, nor where the norm is not defined) and gain-controlled attention."""
    runs = [(arch, 3), (arch.replace(attention="gain-controlled"), 1)]
    if not arch.block_form.parallel and arch.norm.other.value in arch.norm_type.kind.placements:
        runs.append((arch.replace(norm=arch.norm.other.value), 1))
    return runs
