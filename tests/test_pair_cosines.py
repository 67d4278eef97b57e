"""Per-pair cosines of a text sequence: the Gram theory against a simulated stack (issue 14's figure)."""
import numpy as np
import pytest

pytest.importorskip("torch")

from remprop.theory import Architecture  # noqa: E402
from remprop.validation.pair_cosines import pair_cosine_comparison, pair_cosine_figure  # noqa: E402
from remprop.validation.text import pydoc_corpus  # noqa: E402
from remprop.validation.settings import SimulationSettings  # noqa: E402


@pytest.fixture(scope="module")
def result():
    return pair_cosine_comparison(Architecture(norm="pre"), 0.5, 2, layers=(1, 2),
                                  sim=SimulationSettings(width=128, seq_len=64, sequences=8), seed=1, draws=4)


def test_pairs_layers_and_the_repeated_mask(result):
    T = 64
    ids = pydoc_corpus().windows(8, T)[0]
    i, j = np.triu_indices(T, 1)
    np.testing.assert_array_equal(result.repeated, ids[i] == ids[j])
    assert result.repeated.any() and not result.repeated.all()
    for layer in (1, 2):
        assert result.measured[layer].shape == result.theory[layer].shape == (T * (T - 1) // 2,)
        assert np.all(np.abs(result.theory[layer]) <= 1 + 1e-12)
    assert result.settings["simplex_distance"] > 0.05       # text is far from a simplex (Gaussian: ~1/sqrt(d))


def test_repeated_words_stay_closer_in_theory_and_simulation(result):
    """Repeated words share their embedding, so their pair cosines sit above the rest's.
    The split (mean over repeated pairs minus mean over the rest) of the theory, started from
    the same input, must match the simulated one. Measured at these sizes over seeds 1-8:
    split (simulated - theory) = -0.019 +- 0.028 after block 1 and -0.001 +- 0.021 after
    block 2 (mean +- s.d. over seeds), so 0.11 is 4 s.d. of one seed's difference; the
    splits themselves are 0.26 and 0.11, so both must exceed 0.05 in both."""
    means = result.means()
    for layer in (1, 2):
        simulated = means[(layer, "repeated")][0] - means[(layer, "rest")][0]
        theory = means[(layer, "repeated")][1] - means[(layer, "rest")][1]
        assert simulated > 0.05 and theory > 0.05, (layer, simulated, theory)
        assert abs(simulated - theory) <= 0.11, (layer, simulated, theory)


def test_figure_and_bad_input(result, tmp_path):
    figure = pair_cosine_figure(result, tmp_path / "pairs.png")
    assert (tmp_path / "pairs.png").stat().st_size > 1000 and len(figure.axes) == 2
    with pytest.raises(ValueError, match="sequence"):
        pair_cosine_comparison(sim=SimulationSettings(sequences=8), sequence=8)
    with pytest.raises(ValueError, match="layers"):
        pair_cosine_comparison(depth=2, layers=(3,))
