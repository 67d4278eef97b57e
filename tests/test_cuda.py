"""The CUDA path of remprop.validation: the same measurements on the GPU as on the CPU.

Skipped where torch sees no CUDA device (CI runs on CPU machines). CUDA draws its
random numbers from its own generators, so a GPU run is a different sample of the same
initialisation distribution: GPU and CPU results are compared statistically, within the
spread over seeds and sequences, never bit for bit.
"""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

from remprop.theory import Architecture  # noqa: E402
from remprop.validation import compare  # noqa: E402
from remprop.validation.simulator import SimulatedStack  # noqa: E402
from remprop.validation.inputs import gaussian_tokens  # noqa: E402
from remprop.validation.settings import SimulationSettings  # noqa: E402


def _standard_error(comparison):
    return comparison.std("cosine") / math.sqrt(comparison.samples)


@pytest.mark.parametrize("norm", ["post", "pre"])
def test_compare_on_cuda_is_the_cpu_measurement(norm):
    """Per-layer mean cosine on CUDA and on the CPU: two independent samples of the same
    mean. Each is a mean over 4 seeds x 2 sequences; their difference has standard error
    sqrt(se_cpu^2 + se_gpu^2); 4 of those per layer keep 7 layers x 2 norms from a false
    alarm (two-sided 6e-5 each)."""
    arch = Architecture(norm=norm, seq_len=64)
    sim = SimulationSettings(width=128, seq_len=64, dtype="float32", device="cpu", seeds=4, sequences=2,
                             inputs="synthetic", rho0=0.2)
    runs = {device: compare(arch, 1.0, depth=6, sim=sim.replace(device=device)) for device in ("cpu", "cuda")}
    cpu, gpu = runs["cpu"], runs["cuda"]
    assert gpu.settings["device"].startswith("cuda")
    difference = np.abs(gpu.mean("cosine") - cpu.mean("cosine"))
    bound = 4.0 * np.hypot(_standard_error(gpu), _standard_error(cpu)) + 1e-6
    assert np.all(difference[1:] <= bound[1:]), (difference, bound)
    # and the theory is the same on both (started from the measured input, which is exact
    # for synthetic tokens up to float32 rounding)
    np.testing.assert_allclose(gpu.theory.rho, cpu.theory.rho, rtol=1e-4, atol=1e-5)


def test_stack_float64_on_cuda_keeps_the_input_statistics():
    """gaussian_tokens fixes q0 and p0 exactly (to rounding) on any device."""
    batch = gaussian_tokens(1.3, 0.4, count=2, seq_len=32, width=64, device="cuda", dtype="float64")
    x = batch.tokens
    assert x.is_cuda
    gram = torch.einsum("bid,bjd->bij", x, x) / x.shape[-1]
    q = gram.diagonal(dim1=1, dim2=2).mean(-1)
    off = (gram.sum((1, 2)) - gram.diagonal(dim1=1, dim2=2).sum(-1)) / (32 * 31)
    torch.testing.assert_close(q, torch.full_like(q, 1.3), rtol=1e-12, atol=0)
    torch.testing.assert_close(off, torch.full_like(off, 1.3 * 0.4), rtol=1e-10, atol=1e-12)
    stack = SimulatedStack(Architecture(norm="pre"), 0.5, 3,
                           sim=SimulationSettings(width=64, seq_len=32, dtype="float64", device="cuda"), seed=1)
    trace = stack.trace(x)
    assert np.all(np.isfinite(np.asarray(trace.q))) and np.all(np.isfinite(np.asarray(trace.p)))


def test_training_on_cuda_uses_bf16_and_learns():
    pytest.importorskip("tokenizers", reason="the training corpus needs Hugging Face tokenizers")
    from remprop.validation.training import TrainConfig, train

    cfg = TrainConfig(depth=2, width=64, seq_len=32, batch_size=16, steps=60, eval_every=30, eval_batches=2,
                      vocab_size=1024, lr=3e-3, device="cuda")
    result = train(cfg)
    assert result.run["device"].startswith("cuda") and result.run["autocast"] == "bfloat16"
    losses = np.asarray(result.test_loss, dtype=float)
    assert np.all(np.isfinite(losses))
    # at step 0 the loss is about log V = 6.93 nats; the CPU runs of this size (tests/test_training.py
    # sizes) drop by more than 1 nat in 60 steps at lr 3e-3 (learning the unigram frequencies
    # alone is worth ~1.5 nats here), so a drop of 0.5 fails only if nothing is learned
    assert losses[-1] < losses[0] - 0.5, losses
