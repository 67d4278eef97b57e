"""The fast Gram state (``method="fast"``) against the exact one (docs/theory.md section 8.1).

Both are Monte Carlo estimates of the same expectation. Each is run as independent replicas (their
spread over ``sqrt(replicas)`` is each one's standard error); the fast mean must lie within
``Z`` combined standard errors of the exact mean at every layer. ``Z = 4.5``: with about 40 compared
layers over the cases the chance of a false failure is below 3e-4 (two-sided normal tail 6.8e-6 per
layer) -- a bias of the fast method (its non-Gaussian scores at finite width, its projected values)
larger than the two methods' noise fails the test.
"""
import numpy as np
import pytest

from remprop.theory import Architecture
from remprop.theory.causal import CAUSAL_GRAM_METHODS, causal_gram_flops, propagate_causal_gram
from remprop.theory.checks import ParameterError
from remprop.theory.gram_state import propagate_gram
from remprop.theory.models import model_spec

Z = 4.5


def _agree(fast, fast_se, exact, exact_se):
    """``|fast - exact| <= Z sqrt(se_fast^2 + se_exact^2)`` at every layer after the input."""
    gap = np.abs(np.asarray(fast) - np.asarray(exact))[1:]
    bound = Z * np.hypot(fast_se, exact_se)[1:]
    assert np.all(bound > 0), bound
    assert np.all(gap <= bound), (gap, bound, fast, exact)


def _both(arch, beta, depth, seq_len, rho0=0.3, replicas=4, draws=4, **kwargs):
    runs = {method: propagate_causal_gram(arch, beta, depth, seq_len, 1.0, rho0, last=16, draws=draws, seed=3,
                                          method=method, replicas=replicas, **kwargs)
            for method in CAUSAL_GRAM_METHODS}
    return runs["fast"], runs["exact"]


def _decoder(seq_len=48, **fields):
    """A LLaMA-like pre-RMSNorm SwiGLU block (RoPE, d_H 32) with sigma_v^2 = 1: attention matters."""
    base = dict(norm="pre", attention="softmax", activation="silu", sigma_w2=1.0, sigma_b2=0.0, sigma_v2=1.0,
                sigma_o2=1.0, sigma_w2_out=1.0, norm_type="rms", mlp="gated", positions="rope", rope_base=1e4,
                head_dim=32, heads=2, seq_len=seq_len)
    base.update(fields)
    return Architecture(**base)


CASES = {
    "causal, absolute positions, post-LN": (Architecture(norm="post", activation="gelu", sigma_v2=1.0), 1.0, {}),
    "RoPE": (_decoder(), 1.5, {}),
    "QK-norm": (_decoder(qk_norm=True), 2.0, {}),
    "soft-cap": (_decoder(logit_softcap=1.0), 2.0, {}),
    "sliding window": (_decoder(), 1.5, {"window": (8, None)}),
}


@pytest.mark.parametrize("case", list(CASES))
def test_fast_causal_gram_equals_the_exact_one_within_its_error(case):
    arch, beta, kwargs = CASES[case]
    fast, exact = _both(arch, beta, 3, 48, **kwargs)
    _agree(fast.rho, fast.cosine_se, exact.rho, exact.cosine_se)
    _agree(fast.cosine, fast.cosine_se, exact.cosine, exact.cosine_se)
    # the fast state's stated error is small against the 0.01 at which check compares theories with modules
    # (measured 0.0005-0.003 here: 1.5-6 times the exact state's at the same draws, each draw far cheaper)
    assert np.all(fast.cosine_se[1:] < 0.005), fast.cosine_se


def test_fast_encoder_gram_state_equals_the_exact_one():
    # post-LN encoder on a text-like input (tokens repeated in groups: far from a simplex); the exact
    # state's standard error is its own (the control variate's, section 17), the fast one's from 6 seeds
    rng = np.random.default_rng(0)
    words = rng.standard_normal((6, 256))
    tokens = words[rng.integers(0, 6, 40)] + 0.7 * rng.standard_normal((40, 256))
    gram = tokens @ tokens.T / 256
    arch = Architecture(norm="post", activation="relu", sigma_v2=1.0)
    exact = propagate_gram(arch, 1.0, gram, 3, draws=16, seed=1)
    fast = np.array([propagate_gram(arch, 1.0, gram, 3, draws=8, seed=seed, method="fast").mean_cosine
                     for seed in range(6)])
    _agree(fast.mean(axis=0), fast.std(axis=0, ddof=1) / np.sqrt(6), exact.mean_cosine, exact.mean_cosine_se)


def test_fast_gram_state_runs_a_collapsed_input():
    # rho0 = 1: G = q 1 1^T is singular (the Cholesky factor needs its jitter); every token stays equal
    arch = _decoder(32)
    traj = propagate_causal_gram(arch, 1.0, 2, 32, 1.0, 1.0, last=8, draws=2)
    np.testing.assert_allclose(traj.cosine, 1.0, atol=1e-6)


def test_fast_method_counts_a_five_hundredth_of_the_exact_work_at_llama_size():
    spec = model_spec("llama-3.2-1b")
    arch = spec.architecture.replace(seq_len=2048)
    exact = causal_gram_flops(arch, spec.depth, 2048, 8, method="exact")
    fast = causal_gram_flops(arch, spec.depth, 2048, 8)
    assert exact > 500 * fast   # 613x counted (RoPE, 32 frequencies, 8 draws)
    assert causal_gram_flops(arch, 1, 4096, 4) / causal_gram_flops(arch, 1, 2048, 4) < 8  # T^2 draws, T^3 / 3 once


def test_replicas_report_a_standard_error_and_one_chain_none():
    arch = _decoder(32)
    one = propagate_causal_gram(arch, 1.0, 2, 32, 1.0, 0.3, last=8, draws=2, seed=4)
    assert one.cosine_se is None and one.settings["method"] == "fast"
    two = propagate_causal_gram(arch, 1.0, 2, 32, 1.0, 0.3, last=8, draws=2, seed=4, replicas=2)
    assert two.cosine_se.shape == (3,) and two.cosine_se[0] == 0 and np.all(two.cosine_se[1:] > 0)


@pytest.mark.parametrize("args, name", [({"method": "gaussian"}, "method"), ({"replicas": 0}, "replicas")])
def test_bad_method_or_replicas_name_the_parameter(args, name):
    with pytest.raises(ValueError, match=name) as err:
        propagate_causal_gram(_decoder(16), 1.0, 1, 16, **args)
    if isinstance(err.value, ParameterError):
        assert err.value.parameter == name
    with pytest.raises(ParameterError, match="method"):
        causal_gram_flops(_decoder(16), 1, 16, method="gaussian")
