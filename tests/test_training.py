"""Masked-LM training of the simulated stack: config checks, init = simulator, resume, JSON, CLI, phases."""
import json
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")
pytest.importorskip("tokenizers", reason="the training corpus needs Hugging Face tokenizers")

from remprop.cli import main  # noqa: E402
from remprop.theory import Architecture  # noqa: E402
from remprop.validation import SimulatedStack  # noqa: E402
from remprop.validation.backend import torch_threads  # noqa: E402
from remprop.validation.measurements import token_statistics  # noqa: E402
from remprop.validation.training import MaskedLMStack, TrainConfig, TrainResult, masked_lm_corpus, train  # noqa: E402
from remprop.validation.training.batched import batch_key, train_batched  # noqa: E402
from remprop.validation.settings import SimulationSettings  # noqa: E402

#: A run of a second or less: the unit tests' size.
TINY = dict(depth=1, width=16, seq_len=16, batch_size=4, steps=4, eval_every=2, eval_batches=1, vocab_size=1024,
            device="cpu")


@pytest.fixture(autouse=True)
def one_thread():
    # one thread: reproducible reductions, and fast on a shared two-core machine
    with torch_threads(1):
        yield


@pytest.mark.parametrize("changes, message", [
    (dict(beta=0.0), "beta must be > 0"),
    (dict(width=18, arch=Architecture(heads=4)), "width must be divisible by arch.heads"),
    (dict(mask_prob=1.0), "mask_prob must be < 1"),
    (dict(mask_prob=0.0), "mask_prob must be > 0"),
    (dict(warmup_ratio=1.0), "warmup_ratio must be < 1"),
    (dict(steps=0), "steps"),
    (dict(seq_len=1), "seq_len"),
    (dict(model="gpt"), "model must be one of"),
    (dict(arch="post"), "arch must be a remprop.theory.Architecture"),
    (dict(grad_clip=float("nan")), "grad_clip must not be NaN"),
    (dict(vocab_size=10), "vocab_size"),
    (dict(beta2=1.0), "beta2 must lie in"),
    (dict(beta2=0.0), "beta2 must be > 0"),
    (dict(schedule="step"), "schedule must be one of"),
])
def test_config_rejects_bad_values(changes, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**{**TINY, **changes})


def test_init_is_the_simulator_at_the_same_seed():
    """Block 1 of the model is the simulator's block 1 (same weights, same components), so
    its q and p agree to float32 rounding -- a far tighter check than "within statistics"."""
    cfg = TrainConfig(arch=Architecture(alpha_sa=0.7, heads=2), beta=0.8, depth=2, width=32, seq_len=16, seed=3,
                      vocab_size=1024)
    corpus = masked_lm_corpus(1024)
    model = MaskedLMStack(cfg, corpus.vocab_size, torch.device("cpu"))
    ids = torch.as_tensor(corpus.test_batches(count=1, batch_size=4, seq_len=16, mask_prob=0.15)[0].inputs)
    ours, theirs = {}, {}
    with torch.no_grad():
        model.hidden(ids, lambda layer, x, probs: ours.setdefault(layer, x.clone()))
        x0 = ours[0]
        stack = SimulatedStack(cfg.arch, cfg.beta, cfg.depth,
                               sim=SimulationSettings(width=cfg.width, seq_len=cfg.seq_len, device="cpu"),
                               seed=cfg.seed)
        stack.forward(x0, observe=lambda layer, x, probs: theirs.setdefault(layer, x.clone()))
    for layer in (1, 2):
        torch.testing.assert_close(ours[layer], theirs[layer], rtol=1e-5, atol=1e-6)
        a, b = token_statistics(ours[layer]), token_statistics(theirs[layer])
        torch.testing.assert_close(a["q"], b["q"], rtol=1e-5, atol=0.0)
        torch.testing.assert_close(a["p"], b["p"], rtol=1e-4, atol=1e-6)
    # the embedded input has q0 = 1 per coordinate: q of 4 x 16 tokens x 32 coordinates of
    # N(0, 1/2) + N(0, 1/2) entries averages 2048 chi-square terms, relative std sqrt(2/2048) = 3%
    # (entries shared by repeated tokens widen it little); 5 standard deviations
    assert float(token_statistics(x0)["q"].mean()) == pytest.approx(1.0, abs=5 * math.sqrt(2 / 2048))


class _Interrupt(Exception):
    pass


def test_resume_is_bit_identical(tmp_path):
    cfg = TrainConfig(**{**TINY, "steps": 20, "eval_every": 5})
    straight = train(cfg)

    def stop_at_10(step, total):
        if step == 10:
            raise _Interrupt

    with pytest.raises(_Interrupt):
        train(cfg, out=tmp_path, progress=stop_at_10)
    assert not (tmp_path / "result.json").exists()
    resumed = train(cfg, out=tmp_path)
    np.testing.assert_allclose(resumed.train_loss, straight.train_loss, rtol=0, atol=1e-6)
    np.testing.assert_allclose(resumed.test_loss, straight.test_loss, rtol=0, atol=1e-6)
    assert list(resumed.eval_steps) == [0, 5, 10, 15, 20]
    # a finished folder gives the same result again; another configuration is refused
    again = train(cfg, out=tmp_path)
    np.testing.assert_array_equal(again.test_loss, resumed.test_loss)
    with pytest.raises(ValueError, match="another configuration"):
        train(cfg.replace(lr=2e-3), out=tmp_path)


def test_result_json_round_trip_is_strict(tmp_path):
    result = train(TrainConfig(**TINY))
    assert result.train_loss.shape == (4,) and list(result.eval_steps) == [0, 2, 4]
    assert result.init["token_cosine"].shape == (2,) and result.final["qk_grad_norm"].shape == (1,)
    assert result.final_test_loss == result.test_loss[-1] and result.unigram_loss > 0
    path = result.save(tmp_path / "r.json")
    text = path.read_text()
    json.loads(text, parse_constant=lambda name: pytest.fail(f"non-strict JSON constant {name}"))
    back = TrainResult.load(path)
    assert back.config.to_dict() == result.config.to_dict()
    np.testing.assert_array_equal(back.test_loss, result.test_loss)
    np.testing.assert_array_equal(back.init["attention_entropy"], result.init["attention_entropy"])
    # a diverged run (NaN loss) still writes strict JSON and reads back as NaN
    broken = TrainResult(result.config, result.eval_steps, result.train_loss * np.nan, result.test_loss,
                         result.unigram_loss, result.init, result.final)
    assert math.isnan(TrainResult.from_dict(json.loads(json.dumps(broken.to_dict(), allow_nan=False)))
                      .train_loss[0])


def test_cli_train_writes_json_and_png(tmp_path, capsys):
    argv = ["train", "--depth", "1", "--width", "16", "--seq-len", "16", "--batch-size", "4", "--steps", "3",
            "--eval-every", "3", "--eval-batches", "1", "--vocab-size", "1024", "--device", "cpu",
            "--out", str(tmp_path), "--no-progress", "--json"]
    assert main(argv) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["config"]["steps"] == 3 and len(data["test_loss"]) == 2
    assert (tmp_path / "train.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((tmp_path / "train.json").read_text())["final_test_loss"] == data["final_test_loss"]


@pytest.mark.parametrize("argv, option", [(["--mask-prob", "1.5"], "--mask-prob"),
                                          (["--width", "18", "--heads", "4"], "--width"),
                                          (["--warmup-ratio", "1"], "--warmup-ratio"),
                                          (["--model", "bert", "--norm", "pre"], "--norm")])
def test_cli_train_bad_input_names_the_option(tmp_path, capsys, argv, option):
    assert main(["train", "--steps", "1", "--vocab-size", "1024", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and option in err[0]


# -- the three phases, trained -------------------------------------------------------------
#: The size at which the phases separate on two CPU cores (docs/training.md): about 5 s a run.
PHASE_SIZE = dict(depth=10, width=32, seq_len=32, batch_size=16, steps=300, lr=3e-3, eval_every=100,
                  eval_batches=2, vocab_size=1024, device="cpu")
PHASES = {"trainable": (Architecture(), 0.5),                   # post-LN, alpha 1, beta < beta_c = sqrt(2)
          "rank collapse": (Architecture(alpha_sa=0.1), 0.5),   # theory: rho_10 = 1 - 1e-8 at init
          "entropy collapse": (Architecture(), 6.0)}            # beta = 6 > beta_c = sqrt(2)
SEEDS = (0, 1, 2)
#: Seed-to-seed standard deviation of the final test loss at PHASE_SIZE, measured over
#: seeds 0-2 (docs/training.md): trainable 0.042, rank collapse 0.012, entropy collapse 0.049.
SPREAD = {"trainable": 0.042, "rank collapse": 0.012, "entropy collapse": 0.049}


@pytest.mark.slow
def test_trainable_beats_both_collapsed_phases():
    """Mean final test loss over 3 seeds: trainable < each collapsed phase by a margin.

    The margin is two standard errors of the difference of two 3-seed means,
    ``2 sqrt((s_T^2 + s_C^2) / 3)`` with the measured spreads above (0.050 against rank
    collapse, 0.075 against entropy collapse): were the phases not separated (equal means),
    the difference would exceed it with probability ~2%, so the test can fail. Measured
    gaps, one run at a time: 0.118 (rank collapse) and 0.105 (entropy collapse).

    The nine runs are trained as two stacked models (``train_batched``: the six runs of
    alpha_SA 1, trainable and entropy-collapsed, as one; the three rank-collapsed ones as the
    other), 60% of the CPU time of one run at a time (90 s against 150 s on the loaded
    two-core machine). A stacked run is its single run to float rounding
    (``tests/test_batched_training.py``) where the dynamics do not amplify rounding: the
    trainable means agree to 1e-4 (5.1016 against 5.1015). The collapsed stacks amplify it
    (docs/training.md, "Batched training"), so there a stacked run is another realisation of
    its seed's run, spread as much (entropy collapse, seeds 0-2: 5.236, 5.309, 5.222 stacked,
    5.172, 5.266, 5.182 alone): the same test at another draw. Measured gaps, stacked: 0.086
    (rank collapse) and 0.154 (entropy collapse).
    """
    configs = {name: [TrainConfig(arch=arch, beta=beta, seed=seed, **PHASE_SIZE) for seed in SEEDS]
               for name, (arch, beta) in PHASES.items()}
    groups = {}  # the runs that share a stacked model (batch_key), trained together
    for name, runs in configs.items():
        for seed, config in zip(SEEDS, runs):
            groups.setdefault(batch_key(config), []).append((name, seed, config))
    trained = {}
    for group in groups.values():
        for (name, seed, _), result in zip(group, train_batched([config for *_, config in group])):
            trained[name, seed] = result
    finals, inits = {}, {}
    for name in PHASES:
        results = [trained[name, seed] for seed in SEEDS]
        assert all(r.config == c for r, c in zip(results, configs[name]))
        finals[name] = np.mean([r.final_test_loss for r in results])
        inits[name] = results[0].init
        assert all(np.isfinite(r.test_loss).all() for r in results), name
    # the runs start in their phases: tokens aligned after the last block, attention near one-hot
    assert inits["rank collapse"]["token_cosine"][-1] > 0.99 > inits["trainable"]["token_cosine"][-1]
    assert inits["entropy collapse"]["attention_entropy"].max() < 0.25 * np.log(PHASE_SIZE["seq_len"])  # ~ 1 key
    assert inits["trainable"]["attention_entropy"].min() > 0.5 * np.log(PHASE_SIZE["seq_len"])
    for name in ("rank collapse", "entropy collapse"):
        margin = 2 * np.sqrt((SPREAD["trainable"] ** 2 + SPREAD[name] ** 2) / len(SEEDS))
        assert finals[name] - finals["trainable"] > margin, (name, finals)


def test_verdict_sets_the_theory_phase_at_init_beside_the_trained_outcome(tmp_path, capsys):
    from dataclasses import replace

    from remprop.diagrams import ENTROPY_COLLAPSE, PHASE_LABELS, TRAINABLE, trainability_diagram
    from remprop.validation.training.trained_diagram import run_verdict

    argv = ["train", "--depth", "1", "--width", "16", "--seq-len", "16", "--batch-size", "4", "--steps", "3",
            "--eval-every", "3", "--eval-batches", "1", "--vocab-size", "1024", "--device", "cpu",
            "--out", str(tmp_path), "--no-progress"]
    assert main(argv) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    result = TrainResult.load(tmp_path / "train.json")
    verdict = run_verdict(result)
    assert last == verdict["line"] and last.startswith("verdict: theory's phase at init (finite-T theory")
    # the phase is the trained diagram's theory at the run's (alpha_SA, beta), from the measured input cosine
    cfg = result.config
    for beta in (0.5, 40.0):
        expected = trainability_diagram(cfg.arch.replace(seq_len=cfg.seq_len), np.array([beta]),
                                        np.array([cfg.arch.alpha_sa]), cfg.depth,
                                        rho0=float(result.init["token_cosine"][0])).phase[0, 0]
        shown = run_verdict(replace(result, config=cfg.replace(beta=beta)))
        assert shown["theory_phase"] == PHASE_LABELS[expected] and f": {PHASE_LABELS[expected]};" in shown["line"]
    assert {run_verdict(replace(result, config=cfg.replace(beta=b)))["theory_phase"] for b in (0.5, 40.0)} == \
        {PHASE_LABELS[TRAINABLE], PHASE_LABELS[ENTROPY_COLLAPSE]}
    # the learning-rate window at the run's width and steps, and what it expects at the run's rate
    # (also at depth 4 and 300 steps: the window of the run's own depth 1 and 3 steps is empty, its
    # floor above its ceiling; the verdict reads the sizes from the config only)
    from remprop.theory import learning_rate_ceiling
    rho0 = float(result.init["token_cosine"][0])
    for depth, steps in ((cfg.depth, cfg.steps), (4, 300)):
        window = learning_rate_ceiling(cfg.arch.replace(seq_len=cfg.seq_len), cfg.beta, depth=depth, width=cfg.width,
                                       steps=steps, q0=1.0, rho0=rho0)
        shown = run_verdict(replace(result, config=cfg.replace(depth=depth, steps=steps)))["lr_window"]
        assert shown == (pytest.approx(float(window.floor)), pytest.approx(float(window.ceiling)))
    floor, ceiling = float(window.floor), float(window.ceiling)
    assert floor < ceiling
    for lr, expected in ((floor / 2, "lr below floor"), (ceiling * 2, "lr above ceiling"),
                         (math.sqrt(floor * ceiling), "trainable")):
        shown = run_verdict(replace(result, config=cfg.replace(lr=lr, depth=4, steps=300)))
        assert shown["expected_at_rate"] == expected, (lr, shown["line"])
        assert ("expected to train." in shown["line"]) == (expected == "trainable"), shown["line"]
        assert ("not expected to train" in shown["line"]) == (expected != "trainable"), shown["line"]
    # the outcome: the final loss against the unigram loss, in either direction
    assert verdict["gain"] == pytest.approx(result.unigram_loss - result.final_test_loss)
    worse = run_verdict(replace(result, test_loss=np.append(result.test_loss[:-1], result.unigram_loss + 0.5)))
    assert not worse["beat_unigram"] and "0.5000 nats not below the unigram loss" in worse["line"]
    assert "did not beat" in worse["line"]
    better = run_verdict(replace(result, test_loss=np.append(result.test_loss[:-1], result.unigram_loss - 0.25)))
    assert better["beat_unigram"] and "0.2500 nats below the unigram loss" in better["line"]
    diverged = run_verdict(replace(result, diverged={"step": 2, "reason": "x"}))
    assert diverged["diverged"] and diverged["line"].endswith(". The run: diverged (loss not finite)")
    # two sentences: the theory's expectation, then the run's outcome (not "expected not to train ... trained")
    for shown in (verdict, worse, better, diverged):
        expectation, outcome = shown["line"].split(". The run: ")
        assert expectation.startswith("verdict: theory's phase at init") and "loss" not in expectation
        assert "expected not to train" not in shown["line"] and "trained:" not in shown["line"]


def test_schedule_and_beta2_reach_the_optimiser():
    """The recipe axes of the scale sweep: a half-cosine decay after the warm-up and AdamW's beta2; the
    defaults (None) keep the keys of older runs."""
    import math

    import torch.nn as nn

    from remprop.validation.training.loop import optimiser

    base = TrainConfig(**{**TINY, "steps": 100, "warmup_ratio": 0.1, "lr": 1.0})
    assert "beta2" not in base.to_dict() and "schedule" not in base.to_dict()
    cosine = base.replace(schedule="cosine", beta2=0.95)
    assert TrainConfig.from_dict(cosine.to_dict()).to_dict() == cosine.to_dict()
    assert cosine.to_dict()["beta2"] == 0.95 and cosine.to_dict()["schedule"] == "cosine"
    rates = {}
    for name, config in (("linear", base), ("cosine", cosine)):
        optimizer, scheduler = optimiser(nn.Linear(3, 3), config)
        rates[name] = []
        for _ in range(100):
            rates[name].append(optimizer.param_groups[0]["lr"])
            optimizer.step()
            scheduler.step()
        betas = optimizer.param_groups[0]["betas"]
        assert betas == ((0.9, 0.95) if name == "cosine" else (0.9, 0.999))
    # warm-up alike; after it, u = (100 - s) / 90: linear u, cosine (1 - cos(pi u)) / 2
    assert rates["linear"][:10] == rates["cosine"][:10] == [s / 10 for s in range(10)]
    for s in (10, 40, 55, 90, 99):
        u = (100 - s) / 90
        assert rates["linear"][s] == pytest.approx(u, rel=1e-12)
        assert rates["cosine"][s] == pytest.approx(0.5 * (1 - math.cos(math.pi * u)), rel=1e-12)
