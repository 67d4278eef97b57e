"""remprop.validation inputs: synthetic Gaussian tokens, the pydoc tokenizer, embeddings, padding."""
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="remprop.validation needs torch (the validation extra)")

from remprop.theory import Architecture  # noqa: E402
from remprop.validation.inputs import embedding_tables, gaussian_tokens, input_batches, text_tokens  # noqa: E402
from remprop.validation.measurements import token_statistics  # noqa: E402
from remprop.validation.simulator import SimulatedStack  # noqa: E402
from remprop.validation.settings import SimulationSettings  # noqa: E402
from remprop.validation.text import (  # noqa: E402
    PAD_ID,
    UNKNOWN_ID,
    TextCorpus,
    WordTokenizer,
    pydoc_corpus,
    pydoc_topic_texts,
)

torch.set_num_threads(min(2, torch.get_num_threads()))


@pytest.mark.parametrize("q0, rho0", [(1.0, 0.0), (0.02, 0.3), (3.0, 0.9), (1.0, -1.0 / 63)])
def test_gaussian_tokens_hit_q0_and_rho0(q0, rho0):
    batch = gaussian_tokens(q0, rho0, count=16, seq_len=64, width=96, seed=2, dtype="float64", device="cpu")
    assert batch.tokens.shape == (16, 64, 96) and batch.mask is None
    stats = token_statistics(batch.tokens)
    # Exact by construction (module docstring of inputs): only rounding remains.
    np.testing.assert_allclose(stats["q"].numpy(), q0, rtol=1e-12)
    np.testing.assert_allclose(stats["p"].numpy(), q0 * rho0, rtol=1e-10, atol=1e-12 * q0)
    # The mean pairwise cosine differs from p/q through the norm fluctuations
    # eps_i = |x_i|^2 / (d q) - 1, Var(eps) = 2 (1 - rho)^2 / d. Expanding 1/(|x_i| |x_j|):
    # first order, sum_{j != i} x_i.x_j = T a^2 d - d q (1 + eps_i) and sum_i eps_i = 0 give
    # + Var(eps) / (T - 1); second order gives + (3/4) rho Var(eps). Bias bound: twice their
    # sum; plus 5 standard errors over the 16 independent sequences.
    cos = stats["cosine"].numpy()
    var_eps = 2 * (1 - rho0) ** 2 / 96
    bias = 2 * (var_eps / 63 + 0.75 * abs(rho0) * var_eps)
    assert abs(cos.mean() - rho0) <= 5 * cos.std(ddof=1) / 4 + bias


def test_gaussian_tokens_are_deterministic_and_independent():
    a = gaussian_tokens(1.0, 0.2, count=2, seq_len=8, width=16, seed=3, device="cpu").tokens
    b = gaussian_tokens(1.0, 0.2, count=2, seq_len=8, width=16, seed=3, device="cpu").tokens
    c = gaussian_tokens(1.0, 0.2, count=2, seq_len=8, width=16, seed=3, index=1, device="cpu").tokens
    assert torch.equal(a, b) and not torch.equal(a, c)
    assert a.dtype == torch.float32


@pytest.mark.parametrize("kwargs, name", [
    (dict(q0=0.0), "q0"), (dict(rho0=1.5), "rho0"), (dict(rho0=-0.5), "rho0"), (dict(count=0), "count"),
    (dict(seq_len=1), "seq_len"), (dict(width=1.5), "width"), (dict(seed=-1), "seed"),
    (dict(dtype="float16"), "dtype"), (dict(device="tpu"), "device"),
])
def test_gaussian_tokens_reject_bad_input(kwargs, name):
    args = dict(q0=1.0, rho0=0.0, count=1, seq_len=8, width=8)
    args.update(kwargs)
    with pytest.raises(ValueError, match=name):
        gaussian_tokens(args.pop("q0"), args.pop("rho0"), **args)


# -- text --------------------------------------------------------------------------------
def test_tokenizer_splits_words_numbers_and_punctuation():
    tok = WordTokenizer.from_texts(["The cat sat. The cat ran 42 times!"])
    assert tok.split("Hello, World 2024!") == ["hello", ",", "world", "2024", "!"]
    # frequency order, ties alphabetical, after <pad> and <unk>
    assert tok.words[:5] == ("<pad>", "<unk>", "cat", "the", "!")
    ids = tok.encode("the cat flew")
    assert ids == [tok.words.index("the"), tok.words.index("cat"), UNKNOWN_ID]
    assert tok.decode(ids) == ["the", "cat", "<unk>"]


def test_pydoc_corpus_is_deterministic():
    first = pydoc_corpus()
    fresh = TextCorpus(pydoc_topic_texts())
    assert fresh.tokenizer.words == first.tokenizer.words
    np.testing.assert_array_equal(fresh.stream, first.stream)
    assert first.stream.size > 50_000 and first.tokenizer.vocab_size > 1_000
    assert first.stream.min() >= 2  # no padding or unknown ids inside the corpus
    windows = first.windows(5, 512)
    assert windows.shape == (5, 512)
    np.testing.assert_array_equal(windows, fresh.windows(5, 512))
    assert len({w.tobytes() for w in windows}) == 5


def test_padded_documents_mark_padding():
    corpus = pydoc_corpus()
    ids, mask = corpus.padded_documents(10, 300)
    lengths = np.array([min(300, d.size) for d in corpus.documents[:10]])
    np.testing.assert_array_equal(mask.sum(axis=1), lengths)
    assert (lengths < 300).any() and (lengths == 300).any()
    assert (ids[~mask] == PAD_ID).all() and (ids[mask] != PAD_ID).all()


def test_text_reject_bad_input():
    with pytest.raises(ValueError, match="length"):
        pydoc_corpus().windows(2, 10 ** 9)
    with pytest.raises(ValueError, match="count"):
        pydoc_corpus().padded_documents(10 ** 6, 8)
    with pytest.raises(ValueError, match="vocabulary"):
        WordTokenizer(["a", "a"])
    with pytest.raises(ValueError, match="texts"):
        TextCorpus([])


def test_embedding_tables_have_std_point_one():
    word, pos = embedding_tables(500, 64, 128, seed=1, device="cpu")
    assert word.shape == (500, 128) and pos.shape == (64, 128)
    for table in (word, pos):  # relative sd of a sample variance of n entries: sqrt(2/n)
        assert abs(float(table.var()) / 0.01 - 1) <= 5 * math.sqrt(2 / table.numel())


def test_text_tokens_are_word_plus_position_embeddings():
    batch = text_tokens(3, seq_len=32, width=16, seed=4, device="cpu", dtype="float64")
    word, pos = embedding_tables(pydoc_corpus().tokenizer.vocab_size, 32, 16, seed=4, device="cpu", dtype="float64")
    ids = torch.as_tensor(pydoc_corpus().windows(3, 32))
    torch.testing.assert_close(batch.tokens, word[ids] + pos, rtol=0, atol=0)
    # input_batches gives the same sequences whatever the batching
    parts = list(input_batches("text", seed=4, sequences=3, batch_size=2, seq_len=32, width=16, dtype="float64",
                               device="cpu"))
    assert [len(p) for p in parts] == [2, 1]
    torch.testing.assert_close(torch.cat([p.tokens for p in parts]), batch.tokens, rtol=0, atol=0)
    synthetic = [torch.cat([b.tokens for b in input_batches("synthetic", seed=1, sequences=3, batch_size=size,
                                                            seq_len=8, width=8, device="cpu")]) for size in (1, 3)]
    assert torch.equal(*synthetic)


def test_padding_enters_no_statistic_and_no_real_token():
    batch = text_tokens(10, seq_len=300, width=32, seed=0, padded=True, device="cpu", dtype="float64")
    mask = batch.mask
    assert (~mask).any()
    stats = token_statistics(batch.tokens, mask)
    scrambled = batch.tokens.clone()
    scrambled[~mask] = 1e3 * torch.randn(int((~mask).sum()), 32, dtype=torch.float64,
                                         generator=torch.Generator().manual_seed(0))
    for key, value in token_statistics(scrambled, mask).items():
        torch.testing.assert_close(value, stats[key], rtol=1e-12, atol=0)
    # statistics of a padded sequence equal those of its real tokens alone
    n = int(mask[0].sum())
    alone = token_statistics(batch.tokens[:1, :n])
    for key in stats:
        assert float(stats[key][0]) == pytest.approx(float(alone[key][0]), rel=1e-12)
    # through a stack: real tokens never see the padding, and traces ignore it
    stack = SimulatedStack(Architecture(), 1.0, 2,
                           sim=SimulationSettings(width=32, seq_len=300, dtype="float64", device="cpu"))
    out, out_scrambled = stack(batch.tokens, mask), stack(scrambled, mask)
    torch.testing.assert_close(out[mask], out_scrambled[mask], rtol=1e-12, atol=1e-12)
    trace, trace_scrambled = stack.trace(batch.tokens, mask), stack.trace(scrambled, mask)
    for key, value in trace.as_dict().items():
        np.testing.assert_allclose(getattr(trace_scrambled, key), value, rtol=1e-10, atol=1e-12)
