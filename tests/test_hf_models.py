"""Real Hugging Face models at their default initialisation against the theory (4-layer versions).

The acceptance runs of issue 7 use the full models (BERT-base, GPT-2 small, a 48-layer BERT);
CI runs 4-layer versions at T = 128 (ViT: its fixed 197 tokens).
"""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")
pytest.importorskip("transformers", reason="the Hugging Face models need transformers (the validation extra)")

from remprop.theory import causal_participation_ratio, model_spec, participation_moment  # noqa: E402
from remprop.validation import build_model, model_inputs, probe, simulate_model  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))

SEEDS = range(4)
CASES = [("bert-base", 128), ("gpt2", 128), ("vit-base", None)]


@pytest.fixture(scope="module", params=CASES, ids=[name for name, _ in CASES])
def measurement(request):
    name, seq_len = request.param
    spec = model_spec(name, seq_len=seq_len).with_depth(4)
    return simulate_model(spec, seeds=SEEDS, sequences=2)


def test_per_layer_cosine_matches_the_theory(measurement):
    """Measured mean cosine per layer against the predicted one.

    Tolerance from the statistics: at width d the weights of one initialisation shift every
    token's cosine alike (shared directions such as BERT's token-type embedding, or the mean
    token that near-uniform attention adds, overlap the random weights by O(1/sqrt(d))), so
    the spread that matters is over initialisations, not over tokens. With n = 4 seeds the
    standard error of the mean is s / sqrt(n), s the seed-to-seed std pooled over layers
    (4 x 3 degrees of freedom keep the estimate within a factor ~1.5); 5 standard errors, plus
    a floor of 2e-3 for the mean-field corrections of order 1/d and 1/T that the maps omit.
    """
    m = measurement
    per_seed = m.compared.mean(axis=1)                       # (seeds, depth + 1)
    pooled = math.sqrt(np.mean(per_seed.var(axis=0, ddof=1)))
    tolerance = 5 * pooled / math.sqrt(len(m.seeds)) + 2e-3
    assert np.all(m.error <= tolerance), (m.spec.name, m.error, tolerance)
    # the theory must track the growth of the cosine, not only its starting value
    assert m.rho_mean[-1] - m.rho_mean[0] > 3 * tolerance


def test_first_layer_participation_ratio_matches_the_library_beta(measurement):
    """Y2 of layer 1 against the exact finite-T REM value at the translated beta.

    Tolerance from the statistics: 5 standard errors of the mean over the 4 initialisations
    (the per-seed means of 12 heads x >= 128 rows x 2 sequences spread by ~0.1-0.3% here),
    plus 1% for what the map neglects at finite width (the row-to-row spread ~4/d of the
    energy variance, a second-order effect at these small energy variances). The test has
    power: uniform attention (beta -> 0, Y2 = 1/T) is 6-10% away and must be rejected.
    Causal rows: row t holds t keys (row 1: Y2 = 1), so the row mean is
    ``(1 + sum_{t=2}^T Y2(t)) / T`` with the causal REM of :func:`causal_participation_ratio`.
    """
    m = measurement
    spec = m.spec
    rho0 = float(m.rho[:, :, 0].mean())  # pre-LN: the attention sees LN(x), q = 1; post-LN: q0 = 1
    if spec.causal:
        rows = [float(causal_participation_ratio(beta, 1.0, rho0, t, spec.seq_len))
                for beta in (spec.beta, 1e-9) for t in range(2, spec.seq_len + 1)]
        theory, uniform = ((1.0 + sum(part)) / spec.seq_len for part in (rows[:spec.seq_len - 1],
                                                                         rows[spec.seq_len - 1:]))
    else:
        theory, uniform = float(participation_moment(spec.beta, 1.0, rho0, spec.seq_len)), 1.0 / spec.seq_len
    per_seed = m.y2[:, :, 0].mean(axis=1)
    tolerance = 5 * per_seed.std(ddof=1) / math.sqrt(len(per_seed)) + 0.01 * theory
    assert abs(per_seed.mean() - theory) <= tolerance, (per_seed.mean(), theory, tolerance)
    assert abs(per_seed.mean() - uniform) > 2 * tolerance, (per_seed.mean(), uniform, tolerance)


def test_gpt2_small_is_built_with_its_scaled_residual_projections():
    spec = model_spec("gpt2").with_depth(2)
    model = build_model(spec, seed=0)
    std = model.h[0].attn.c_proj.weight.std().item()
    # 768^2 draws: the sample std is within 0.3% of 0.02 / sqrt(4) (5 sigma of sqrt(1/(2 n)))
    assert std == pytest.approx(0.02 / math.sqrt(2 * 2), rel=5 / math.sqrt(2 * 768 * 768))
    assert not model.training


def test_build_model_restores_the_global_generator():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    build_model(model_spec("bert-base").with_depth(1), seed=5)
    assert torch.equal(torch.rand(3), expected)


def test_model_inputs():
    spec = model_spec("bert-base", seq_len=64)
    ids = model_inputs(spec, 3, seed=1)
    assert ids.shape == (3, 64) and ids.dtype == torch.int64 and int(ids.max()) < 30522
    assert torch.equal(ids, model_inputs(spec, 3, seed=1))
    pixels = model_inputs(model_spec("vit-base"), 2)
    assert pixels.shape == (2, 3, 224, 224)


def test_simulate_model_rejects_bad_arguments():
    spec = model_spec("bert-base", seq_len=16).with_depth(1)
    with pytest.raises(ValueError, match="seeds"):
        simulate_model(spec, seeds=[])
    with pytest.raises(ValueError, match="sequences"):
        simulate_model(spec, sequences=0)
    with pytest.raises(ValueError, match="theory"):
        simulate_model(spec, seeds=[0], theory=[0.1, 0.2, 0.3])


def test_probe_reads_a_built_model_like_its_hidden_states():
    spec = model_spec("bert-base", seq_len=32).with_depth(2)
    model = build_model(spec, seed=3, dtype="float64")
    ids = model_inputs(spec, 2, seed=3)
    trace = probe(model, ids)
    with torch.no_grad():
        hidden = model(input_ids=ids, output_hidden_states=True).hidden_states
    for layer, h in enumerate(hidden):
        g = h @ h.transpose(1, 2) / h.shape[-1]
        n = h.shape[1]
        q = torch.diagonal(g, dim1=1, dim2=2).mean(1)
        p = (g.sum((1, 2)) - torch.diagonal(g, dim1=1, dim2=2).sum(1)) / (n * (n - 1))
        np.testing.assert_allclose(trace.rho[:, layer], (p / q).numpy(), rtol=1e-9)


def test_simulate_model_resumes_from_its_store(tmp_path, monkeypatch):
    from remprop.validation import hf_models

    config = dict(model_spec("gpt2").config, n_layer=2, n_embd=32, n_head=2, vocab_size=300, n_positions=64)
    spec = model_spec(config)
    first = simulate_model(spec, seeds=[0, 1], sequences=2, store=tmp_path / "run")
    calls = []
    measure = hf_models._measure_seed
    monkeypatch.setattr(hf_models, "_measure_seed", lambda spec, seed, *a, **kw: calls.append(seed) or measure(spec, seed, *a, **kw))
    again = simulate_model(spec, seeds=[0, 1, 2], sequences=2, store=tmp_path / "run")
    assert calls == [2]  # seeds 0 and 1 were read back, not recomputed
    np.testing.assert_array_equal(again.rho[:2], first.rho)  # JSON keeps floats bit for bit
    np.testing.assert_array_equal(again.rho_last[:2], first.rho_last)
    fresh = simulate_model(spec, seeds=[2], sequences=2)
    np.testing.assert_array_equal(again.rho[2:], fresh.rho)
    with pytest.raises(ValueError, match="different"):
        simulate_model(spec, seeds=[0], sequences=3, store=tmp_path / "run")
