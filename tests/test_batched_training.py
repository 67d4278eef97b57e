"""Batched training: a group of runs trained as one stacked model equals its one-at-a-time runs."""
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")
pytest.importorskip("tokenizers", reason="the training corpus needs Hugging Face tokenizers")

from remprop.theory import Architecture  # noqa: E402
from remprop.validation.backend import torch_threads  # noqa: E402
from remprop.validation.experiments.cell_store import CELLS_FOLDER  # noqa: E402
from remprop.validation.training import TrainConfig, train  # noqa: E402
from remprop.validation.training.batched import batch_key, train_batched  # noqa: E402
from remprop.validation.training.trained_grid import (TrainedGridSpec, load_trained_records,  # noqa: E402
                                                      run_trained_grid, train_cell)

#: Two heads, a skip strength other than 1, post-LN: every component of the block in play; seconds to train.
BASE = TrainConfig(arch=Architecture(norm="post", alpha_sa=0.7, heads=2), depth=2, width=16, seq_len=16,
                   batch_size=4, steps=6, eval_every=3, eval_batches=1, vocab_size=1024, device="cpu")
#: Float32 rounding over the steps: a batched matmul adds its products in another order than a
#: single one, an error of a few ulps (eps = 2^-23 relative) in each sum, carried from step to
#: step. Each step's loss may thus differ by about (steps so far) x (terms of the longest sum,
#: <= 64 here: batch x T of a weight gradient) x eps relative, about 5e-5 after 6 steps; a wrong
#: batch, seed or schedule moves a loss by 0.1 or more. At this depth the dynamics do not amplify
#: rounding; a deep entropy-collapsed stack does (depth 24, beta 4: a one-ulp change of the
#: initialisation moves a single run's loss by 0.04 nats at step 2 and 0.3 at step 3; its
#: vanishing query/key gradients are rounding noise that AdamW normalises to full steps), so the
#: equality is tested where the runs themselves are reproducible to rounding.
RTOL = BASE.steps * 64 * float(np.finfo(np.float32).eps)


@pytest.fixture(autouse=True)
def one_thread():
    with torch_threads(1):  # reproducible reductions, and fast on a shared two-core machine
        yield


@pytest.fixture(scope="module")
def runs():
    """Two betas x two seeds: one at a time and as one stacked model."""
    configs = [BASE.replace(beta=beta, seed=seed) for beta in (0.5, 4.0) for seed in (0, 1)]
    with torch_threads(1):
        return configs, [train(config) for config in configs], train_batched(configs)


def test_each_run_of_a_batch_equals_its_single_run(runs):
    configs, single, batched = runs
    for config, one, many in zip(configs, single, batched):
        assert many.config == config and many.run["batched"] == len(configs) and many.diverged is None
        np.testing.assert_array_equal(many.eval_steps, one.eval_steps)
        np.testing.assert_allclose(many.train_loss, one.train_loss, rtol=RTOL, atol=0)
        np.testing.assert_allclose(many.test_loss, one.test_loss, rtol=RTOL, atol=0)
        for name in one.init:  # the same model at init: the same numbers
            np.testing.assert_array_equal(many.init[name], one.init[name])
        for name in ("attention_entropy", "token_cosine"):
            np.testing.assert_allclose(many.final[name], one.final[name], rtol=RTOL, atol=0)
        assert many.unigram_loss == one.unigram_loss
    # the runs differ from each other by far more than the tolerance (seed, beta and data order matter)
    losses = np.array([one.train_loss for one in single])
    assert np.abs(losses[:, None] - losses[None]).max(axis=-1)[~np.eye(len(single), dtype=bool)].min() > 1e3 * RTOL


def test_a_diverged_run_stops_alone_as_in_its_single_run():
    # beta 1e38: the scores overflow, the test loss at init is NaN; the other run trains on, unharmed
    configs = [BASE.replace(beta=0.5, seed=0), BASE.replace(beta=1e38, seed=1)]
    single, batched = [train(config) for config in configs], train_batched(configs)
    assert single[1].diverged == batched[1].diverged == {"step": 0, "reason": "the test loss is nan"}
    assert batched[1].train_loss.size == 0 and np.isnan(batched[1].final_test_loss)
    assert batched[0].diverged is None
    np.testing.assert_allclose(batched[0].train_loss, single[0].train_loss, rtol=RTOL, atol=0)
    np.testing.assert_allclose(batched[0].test_loss, single[0].test_loss, rtol=RTOL, atol=0)


def test_batch_key_says_which_runs_share_a_model():
    assert batch_key(BASE) == batch_key(BASE.replace(beta=3.0, seed=9))
    assert batch_key(BASE) != batch_key(BASE.replace(arch=BASE.arch.replace(alpha_sa=0.3)))
    qk = BASE.replace(arch=BASE.arch.replace(qk_norm=True, seq_len=16, head_dim=8))  # beta scales the normalised scores
    assert batch_key(qk) != batch_key(qk.replace(beta=3.0))
    assert batch_key(BASE.replace(model="bert")) is None
    with pytest.raises(ValueError, match="configs must differ only in seed"):
        train_batched([BASE, BASE.replace(arch=BASE.arch.replace(alpha_sa=0.3))])
    with pytest.raises(ValueError, match="configs must hold"):
        train_batched([])
    with pytest.raises(ValueError, match="config must be a TrainConfig"):
        batch_key("post")


def test_a_batched_grid_writes_the_single_runs_records_and_resumes_per_cell(tmp_path, runs):
    configs, single, _ = runs
    spec = TrainedGridSpec(BASE, betas=(0.5, 4.0), alphas=(0.7,), seeds=2)
    report = run_trained_grid(spec, tmp_path, workers=0, batch=4)
    assert report.cells_computed == 2
    records = load_trained_records(spec, tmp_path)
    for b in range(2):
        record = records[f"a0000_b{b:04d}"]
        assert record["run"]["cells_trained_together"] == 2
        for seed, result in enumerate(record["results"]):
            one = single[2 * b + seed]
            assert result["config"]["seed"] == seed and result["config"]["beta"] == spec.betas[b]
            np.testing.assert_allclose(result["train_loss"], one.train_loss, rtol=RTOL, atol=0)
    # one record lost: only that cell is trained again, and it is the cell one-at-a-time training gives
    lost = tmp_path / CELLS_FOLDER / "a0000_b0001.json"
    lost.unlink()
    again = run_trained_grid(spec, tmp_path, workers=0, batch=4)
    assert (again.cells_computed, again.cells_reused) == (1, 1)
    alone = train_cell(spec, 0, 1)
    redone = json.loads(lost.read_text())
    for mine, theirs in zip(redone["results"], alone["results"]):
        np.testing.assert_allclose(mine["test_loss"], theirs["test_loss"], rtol=RTOL, atol=0)
    with pytest.raises(ValueError, match="batch must be an integer >= 1"):
        run_trained_grid(spec, tmp_path, workers=0, batch=0)
