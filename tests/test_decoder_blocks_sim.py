"""The torch side of today's decoder blocks (docs/theory.md section 19): grouped-query attention,
QK-norm, attention-logit soft-capping, parallel branches, branch (sandwich) norms and a final
norm, each exact where it has an exact statement and against the theory's block iterated at
the same finite T where it has a statistical one.

Statistical tolerances are ``K * sem + bias``: ``sem`` the standard error of the mean over
independent seeds, K = 5 (|t| > 5 has probability ~3e-3 per check with 6 seeds, Student t
with 5 dof), ``bias`` the finite-size bias stated beside each check.
"""
import dataclasses
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")

from remprop.theory import Architecture, participation_moment, propagate  # noqa: E402
from remprop.validation import layers  # noqa: E402
from remprop.validation.inputs import gaussian_tokens  # noqa: E402
from remprop.validation.registry import REGISTRY  # noqa: E402
from remprop.validation.simulator import SimulatedStack  # noqa: E402
from remprop.validation.settings import SimulationSettings  # noqa: E402

torch.set_num_threads(min(2, torch.get_num_threads()))

K = 5.0
SEEDS = 6
D, T, HEADS, DEPTH, RHO0 = 128, 64, 4, 3, 0.3
#: Finite-width bias of the mean cosine: after each norm < 0.23 / d (tests/test_validation_stack.py),
#: and the O(1/d) Jensen terms of the SiLU kernel, 1e-2 of p (tests/test_rmsnorm_gated.py); per layer.
LAYER_BIAS = 0.23 / D + 0.01 * RHO0
#: A LLaMA-like block: pre-RMSNorm, SwiGLU, no biases, an output projection.
BASE = dict(norm="pre", norm_type="rms", mlp="gated", activation="silu", sigma_w2=1.0, sigma_b2=0.0, sigma_v2=1.0,
            sigma_o2=1.0, sigma_w2_out=1.0, heads=HEADS, seq_len=T)


def _sem(values, axis=0):
    return values.std(axis=axis, ddof=1) / math.sqrt(values.shape[axis])


def _run(arch, beta):
    """Per-seed mean cosine per layer (SEEDS x 2 sequences) and layer 1's Y2 per seed."""
    rho, y2 = np.empty((SEEDS, DEPTH + 1)), np.empty(SEEDS)
    for seed in range(SEEDS):
        stack = SimulatedStack(arch, beta, DEPTH,
                               sim=SimulationSettings(width=D, seq_len=T, dtype="float64", device="cpu"), seed=seed)
        x = gaussian_tokens(1.0, RHO0, count=2, seq_len=T, width=D, seed=seed, dtype="float64", device="cpu").tokens
        trace = stack.trace(x)
        rho[seed], y2[seed] = trace.rho.mean(axis=0), trace.y2[:, 0].mean()
    return rho, y2


def _assert_follows_theory(arch, beta):
    rho, y2 = _run(arch, beta)
    theory = np.asarray(propagate(arch, beta, DEPTH, q0=1.0, rho0=RHO0).rho)
    tolerance = K * _sem(rho) + np.arange(DEPTH + 1) * LAYER_BIAS + 1e-9
    error = np.abs(rho.mean(axis=0) - theory)
    assert np.all(error <= tolerance), (error, tolerance)
    return rho, y2


# -- exact statements of the torch functions -------------------------------------------------

def _attention_weights(seed, kv_heads=None, width=D, heads=HEADS):
    gen = torch.Generator().manual_seed(seed)
    return layers.draw_attention_weights(gen, width, 0.8, T, 1.0, 0.01, dtype=torch.float64, device="cpu",
                                         layout=layers.HeadLayout(heads, kv_heads=kv_heads))


def _tokens(seed, width=D):
    return gaussian_tokens(1.0, RHO0, count=2, seq_len=T, width=width, seed=seed, dtype="float64",
                           device="cpu").tokens


def test_grouped_heads_are_ungrouped_heads_with_repeated_keys_and_values():
    """Grouped-query attention with K key/value heads is multi-head attention whose key and
    value heads are repeated over their groups (head h reads group h // (H / K))."""
    x = _tokens(0)
    grouped = _attention_weights(1, kv_heads=2)
    d_head = D // HEADS
    assert grouped.key.shape == (2 * d_head, D) and grouped.value_bias.shape == (2 * d_head,)

    def repeat(w):
        return w.view(2, d_head, *w.shape[1:]).repeat_interleave(HEADS // 2, dim=0).reshape(D, *w.shape[1:])

    full = layers.AttentionWeights(grouped.query, repeat(grouped.key), repeat(grouped.value),
                                   repeat(grouped.value_bias))
    for causal in (False, True):
        out_g, probs_g = layers.softmax_attention(x, grouped, heads=HEADS, causal=causal)
        out_f, probs_f = layers.softmax_attention(x, full, heads=HEADS, causal=causal)
        torch.testing.assert_close(out_g, out_f, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(probs_g, probs_f, rtol=1e-12, atol=1e-12)
    # heads of one group attend differently (own queries), but read the same values
    assert not torch.allclose(probs_g[:, 0], probs_g[:, 1])


def test_kv_heads_equal_to_heads_draws_the_same_weights():
    a, b = _attention_weights(3), _attention_weights(3, kv_heads=HEADS)
    for name in ("query", "key", "value", "value_bias"):
        assert torch.equal(getattr(a, name), getattr(b, name))
    with pytest.raises(ValueError, match="kv_heads"):
        _attention_weights(3, kv_heads=3)


@pytest.mark.parametrize("dim", [None, D])
def test_qk_norm_scores_do_not_depend_on_the_weights_scale(dim):
    """With QK-norm the scores are beta g^2 sqrt(d_H) e.f (docs/theory.md section 16): the
    query/key weights' scale drops out, the normalised queries have squared norm g^2 n per
    group of n coordinates, and ``scale`` multiplies the scores."""
    x = _tokens(4)
    w = _attention_weights(5)
    norm = layers.QKNorm(gain=1.7, dim=dim, scale=0.6)
    _, probs = layers.softmax_attention(x, w, heads=HEADS, qk_norm=norm)
    scaled = dataclasses.replace(w, query=9.0 * w.query, key=0.1 * w.key)
    _, probs_scaled = layers.softmax_attention(x, scaled, heads=HEADS, qk_norm=norm)
    torch.testing.assert_close(probs, probs_scaled, rtol=1e-10, atol=1e-12)
    # the scores by hand: per group of n coordinates, u -> g u / rms(u)
    n = D // HEADS if dim is None else dim
    d_head = D // HEADS

    def normed(u):
        g = u.view(*u.shape[:-1], D // n, n)
        return (1.7 * g / g.pow(2).mean(-1, keepdim=True).sqrt()).view(u.shape)

    q = normed(x @ w.query.T).view(2, T, HEADS, d_head).transpose(1, 2)
    k = normed(x @ w.key.T).view(2, T, HEADS, d_head).transpose(1, 2)
    expected = torch.softmax(0.6 * (q @ k.transpose(-1, -2)) / math.sqrt(d_head), dim=-1)
    torch.testing.assert_close(probs, expected, rtol=1e-10, atol=1e-12)


def test_logit_softcap_caps_the_scaled_scores():
    x = _tokens(6)
    w = _attention_weights(7)
    d_head = D // HEADS
    q = (x @ w.query.T).view(2, T, HEADS, d_head).transpose(1, 2)
    k = (x @ w.key.T).view(2, T, HEADS, d_head).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / math.sqrt(d_head)
    _, probs = layers.softmax_attention(x, w, heads=HEADS, logit_softcap=0.5)
    torch.testing.assert_close(probs, torch.softmax(0.5 * torch.tanh(scores / 0.5), dim=-1), rtol=1e-10, atol=1e-12)
    _, loose = layers.softmax_attention(x, w, heads=HEADS, logit_softcap=1e6)  # |c tanh(s/c) - s| <= s^3 / 3c^2
    _, plain = layers.softmax_attention(x, w, heads=HEADS)
    torch.testing.assert_close(loose, plain, rtol=1e-6, atol=1e-9)


def test_parallel_registry_entry_matches_its_theory():
    """Two independent dense branches on one input and a skip: the overlaps add
    (``alpha^2 (q, p) + 2 dense(q, p)``), on Gaussian tokens, d = T = 128, 16 seeds; the
    dense map is exact in expectation (no bias)."""
    entry = REGISTRY["parallel"]
    params = dict(alpha=0.7, sigma_w2=0.5, sigma_b2=0.01)
    q_theory, p_theory = entry.theory(1.5, 1.5 * 0.4, **params)
    q_sim, p_sim = [], []
    for seed in range(16):
        x = gaussian_tokens(1.5, 0.4, count=1, seq_len=128, width=128, seed=seed, dtype="float64",
                            device="cpu").tokens
        out = entry.simulate(x, torch.Generator().manual_seed(100 + seed), **params)
        g = out[0] @ out[0].T / out.shape[-1]
        q_sim.append(float(torch.diagonal(g).mean()))
        p_sim.append(float((g.sum() - torch.diagonal(g).sum()) / (128 * 127)))
    q_sim, p_sim = np.array(q_sim), np.array(p_sim)
    assert abs(q_sim.mean() - q_theory) <= K * _sem(q_sim) + 1e-12
    assert abs(p_sim.mean() - p_theory) <= K * _sem(p_sim) + 1e-12
    # the stand-alone pair runs the torch function that the Parallel component's torch face calls
    from remprop.theory import components as C
    calls = []
    spy = layers.BlockWeights()  # a block without weights: the branches below have none
    ctx = dataclasses.replace(_context(), weights=spy, ops=_Spy(calls))
    C.parallel(1.0, C.layer_norm(), C.layer_norm()).torch_forward(torch.ones(1, 2, 4), ctx)
    assert entry.torch_function is layers.parallel and calls == ["layer_norm", "layer_norm", "parallel"]


class _Spy:
    """The torch functions of validation/layers.py, recording the names called."""

    def __init__(self, calls):
        self.calls = calls

    def __getattr__(self, name):
        function = getattr(layers, name)

        def spy(*args, **kwargs):
            self.calls.append(name)
            return function(*args, **kwargs)
        return spy


def _context():
    from remprop.validation.registry import BlockContext
    return BlockContext()


# -- simulated stacks against the theory's block ------------------------------------------

def test_grouped_query_stack_follows_the_theory():
    """kv_heads = 1 (multi-query): the mean maps are those of ungrouped heads (docs/theory.md
    section 19); the simulated cosine per layer within K sem + the layers' finite-width bias."""
    arch = Architecture(**BASE, kv_heads=1)
    _assert_follows_theory(arch, 0.8)


def test_qk_norm_stack_and_its_participation_ratio_follow_the_theory():
    """QK-norm per head (n = d_H = 32), gain 1.3, beta 1: the cosine per layer as above, and
    layer 1's Y2 against the REM at the QK-norm effective beta (``Architecture.effective_beta``
    at the attention input), within K sem + 3 %: the energies of a normalised head are Gaussian
    only as n -> infinity (docs/theory.md section 16); uniform attention (1/T) is rejected."""
    arch = Architecture(**BASE, qk_norm=True, qk_norm_gain=1.3, head_dim=D // HEADS)
    _, y2 = _assert_follows_theory(arch, 1.0)
    q_in, p_in = arch.attention_input(1.0, RHO0)
    theory = float(participation_moment(arch.effective_beta(1.0, q=q_in, p=p_in), q_in, p_in, T))
    tolerance = K * _sem(y2) + 0.03 * theory
    assert abs(y2.mean() - theory) <= tolerance, (y2.mean(), theory, tolerance)
    assert abs(y2.mean() - 1.0 / T) > 2 * tolerance


def test_qk_norm_over_all_heads_stack_follows_the_theory():
    """OLMo 2's QK-norm over all heads at once (n = H d_H = d)."""
    _assert_follows_theory(Architecture(**BASE, qk_norm=True, head_dim=D // HEADS, qk_norm_dim=D), 1.0)


def test_parallel_stack_follows_the_theory():
    _assert_follows_theory(Architecture(**BASE, block_form="parallel"), 0.8)


@pytest.mark.parametrize("norm", ["pre", "none"])
def test_branch_norm_stack_follows_the_theory(norm):
    """Gemma 2's sandwich (pre + branch norm) and OLMo 2's norm after each branch (no pre-norm)."""
    _assert_follows_theory(Architecture(**dict(BASE, norm=norm), branch_norm=True), 0.8)


def test_final_norm_is_the_last_layer_of_the_stack():
    """arch.final_norm: layer L is the normalised last block (q = 1 per token up to the eps),
    the cosine within the theory's tolerance, the layers before it those of the stack without."""
    arch = Architecture(**BASE, final_norm=True)
    plain = SimulatedStack(arch.replace(final_norm=False), 0.8, DEPTH,
                           sim=SimulationSettings(width=D, seq_len=T, dtype="float64", device="cpu"), seed=0)
    normed = SimulatedStack(arch, 0.8, DEPTH,
                            sim=SimulationSettings(width=D, seq_len=T, dtype="float64", device="cpu"), seed=0)
    x = _tokens(0)
    a, b = plain.trace(x), normed.trace(x)
    np.testing.assert_allclose(b.q[:, -1], 1.0, rtol=1e-9)
    np.testing.assert_array_equal(a.rho[:, :-1], b.rho[:, :-1])
    _assert_follows_theory(arch, 0.8)


def test_soft_capped_stack_follows_the_theory():
    """Gemma 2's cap c = 50 at beta 0.6: the theory accepts it (its bound on the change of Y2,
    ``softcap.logit_softcap_change``, is below 5 %) and the capped simulated stack follows
    the uncapped maps; at beta 0.8 the bound exceeds 5 % and the theory refuses, naming the cap."""
    arch = Architecture(**BASE, logit_softcap=50.0)
    _assert_follows_theory(arch, 0.6)
    with pytest.raises(ValueError, match="logit_softcap"):
        propagate(arch, 0.8, DEPTH, q0=1.0, rho0=RHO0)
