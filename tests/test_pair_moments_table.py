"""The pair-moment table of the fast causal Gram state's MLP (``pair_moments_table``): each pair against the
quadrature ``pair_moment`` itself, on the widened, cached grid of a built-in activation; nearby variances
(the next layer's) read the same quadrature."""
from __future__ import annotations

import numpy as np
import pytest

from remprop.theory.activations import pair_moments as P


@pytest.mark.parametrize("activation", ["gelu", "silu", "tanh"])
@pytest.mark.parametrize("spread", [0.003, 0.04, 0.6, 2.5])
def test_table_equals_the_quadrature_pair_by_pair(activation, spread):
    # the docstring's promise: within 1e-6 of E[phi^2] (the largest second moment of the tokens);
    # a deterministic check (no sampling), at spreads that take 3, 3, 5 and 11 variance nodes
    rng = np.random.default_rng(1)
    t = 24
    logs = np.log(0.8) + spread * rng.random(t)
    logs[[0, 1]] = np.log(0.8), np.log(0.8) + spread
    variances = np.exp(logs)
    x = rng.standard_normal((t, 3 * t))
    corr = np.corrcoef(x)
    cov = corr * np.sqrt(np.outer(variances, variances))
    table = P.pair_moments_table(activation, variances, cov)
    direct = P.pair_moment(activation, variances[:, None], variances[None, :], cov)
    scale = float(np.max(np.diag(direct)))
    assert np.max(np.abs(table - direct)) <= 1e-6 * scale


def test_nearby_variances_share_one_quadrature():
    P._cached_grid.cache_clear()
    variances = np.exp(np.linspace(0.100, 0.104, 16))
    P.pair_grid("gelu", variances)
    P.pair_grid("gelu", variances * np.exp(0.001))   # inside the same cells of GRID_STEP
    info = P._cached_grid.cache_info()
    assert (info.misses, info.hits) == (1, 1)
    # the same arrays, not a copy: one quadrature a walk
    assert P.pair_grid("gelu", variances)[0] is P.pair_grid("gelu", variances)[0]
