"""One name per idea, one argument order: the old spellings of one release.

The critical beta is ``beta_critical`` and the minimum residual strength ``alpha_star``, as the
attributes and JSON keys of every result already were; beta comes first (after the architecture,
before the state and the depth) wherever a function takes it. Each old spelling still works for
one release, warns :class:`DeprecationWarning` naming the new one, and gives the same result
(bit for bit: the alias calls the new function); each moved argument order refuses an old
positional call with a ``TypeError`` that names the old order instead of swapping silently.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from remprop import diagrams, theory
from remprop.diagrams import learning_rate as lr_diagrams
from remprop.diagrams.recipes import RECIPES, recipe_predictions, recipes_seconds
from remprop.theory import Architecture, RunSettings
from remprop.theory import rem, symbolic
from remprop.theory.components import attention_scale
from remprop.theory.rem import asymptotic, finite_width, rope

ARCH = Architecture()


def _same(old, new):
    """Equal results, arrays or nested tuples of them."""
    if isinstance(new, tuple):
        return len(old) == len(new) and all(_same(a, b) for a, b in zip(old, new))
    return np.array_equal(np.asarray(old), np.asarray(new), equal_nan=True)


def _warns_naming(new_name):
    return pytest.warns(DeprecationWarning, match=rf"deprecated .*use {new_name}")


@pytest.mark.parametrize("old, new, args, kwargs", [
    (theory.critical_beta, theory.beta_critical, (np.array([1.0, 2.0]), np.array([0.0, 0.5])), {}),
    (rem.critical_beta, rem.beta_critical, (1.0, 0.3), {}),
    (asymptotic.critical_beta, asymptotic.beta_critical, (1.0, 1.0), {}),  # collapsed tokens: inf
    (rope.rope_critical_beta, rope.rope_beta_critical, (1.0, 0.2, 512), {}),
    (rem.rope_critical_beta, rope.rope_beta_critical, (1.0, 0.2), {"seq_len": 64, "head_dim": 32}),
    (attention_scale.critical_beta, attention_scale.beta_critical, (Architecture(norm="pre"), [1.5, 1.2, 1.4]), {}),
    (attention_scale.block_critical_beta, attention_scale.block_beta_critical, (ARCH, 1.0, 0.4), {}),
    (symbolic.min_residual_strength_law, symbolic.alpha_star_law, (200,), {"threshold": 0.95}),
])
def test_renamed_functions_warn_and_agree(old, new, args, kwargs):
    want = new(*args, **kwargs)
    with _warns_naming(new.__name__):
        got = old(*args, **kwargs)
    assert _same(got, want)
    assert old.__name__ != new.__name__ and new.__name__ in old.__doc__


def test_renamed_methods_warn_and_agree():
    arch = Architecture(norm="pre", heads=4, qk_scaling="head")
    with _warns_naming(r"Architecture\.beta_critical"):
        got = arch.critical_beta(first=1.6, smallest=1.3)
    assert got == arch.beta_critical(first=1.6, smallest=1.3) == pytest.approx(1.3 / arch.beta_scale)
    with _warns_naming(r"Architecture\.block_beta_critical"):
        got = arch.block_critical_beta(1.0, 0.2)
    assert got == arch.block_beta_critical(1.0, 0.2)


def test_attention_growth_budget_keyword_beta_c():
    want = theory.attention_growth_budget(0.5, beta_critical=1.4, width=64, seq_len=128)
    with _warns_naming(r"attention_growth_budget\(beta_critical=\.\.\.\)"):
        assert theory.attention_growth_budget(0.5, beta_c=1.4, width=64, seq_len=128) == want
    assert want == theory.attention_growth_budget(0.5, 1.4, 64, 128)
    with pytest.raises(TypeError, match="beta_critical"):
        theory.attention_growth_budget(0.5, beta_c=1.4, beta_critical=1.4, width=64, seq_len=128)


def test_min_residual_strength_keeps_its_old_argument_order():
    betas = np.array([0.3, 1.7])
    want = diagrams.alpha_star(ARCH, betas, 12, 0.95, rho0=0.1)
    for call in (lambda f: f(ARCH, 12, betas, 0.95, rho0=0.1),                       # old positional order
                 lambda f: f(ARCH, depth=12, beta=betas, threshold=0.95, rho0=0.1)):  # keywords
        with _warns_naming(r"alpha_star\(\)"):
            assert _same(call(diagrams.min_residual_strength), want)
    run = RunSettings(ARCH, betas, 12, rho0=0.1, threshold=0.95)
    with _warns_naming(r"alpha_star\(\)"):
        assert _same(diagrams.min_residual_strength(run), want)
    assert "min_residual_strength" not in diagrams.__all__ and "alpha_star" in diagrams.__all__


def test_min_alpha_at_rate_keeps_its_old_arguments():
    arch, betas = Architecture(seq_len=64), np.array([0.5, 0.3])
    want = lr_diagrams.alpha_star_at_rate(RunSettings(arch, betas, 6, 1.0, 0.1, 0.99), 1e-3, 64, 200)
    with _warns_naming(r"alpha_star_at_rate\(\)"):
        got = lr_diagrams.min_alpha_at_rate(arch, 6, betas, 1e-3, 64, 200, None, rho0=0.1)
    assert _same(got, want)


def test_attention_mean_cosine_sampling_keywords():
    kwargs = dict(q=1.0, p=0.3, sigma_v2=1.0, sigma_b2=0.0, seq_len=16)
    want = finite_width.attention_mean_cosine(1.5, sampling=finite_width.CosineSampling(64, 3), **kwargs)
    with _warns_naming(r"attention_mean_cosine\(sampling="):
        got = finite_width.attention_mean_cosine(1.5, samples=64, seed=3, **kwargs)
    assert got == want
    assert want != finite_width.attention_mean_cosine(1.5, sampling=finite_width.CosineSampling(64, 4), **kwargs)
    with pytest.raises(ValueError, match="samples"):
        finite_width.CosineSampling(8)


def _record(key, value):
    return {"key": key, "value": value}


def _records(keys):
    return [_record(key, int(key[1:])) for key in keys]


def test_run_cells_old_keywords(tmp_path):
    from remprop.validation.experiments.cell_runner import CellGroups, run_cells
    from remprop.validation.experiments.cell_store import CellStore

    cells = {f"c{i}": (f"c{i}", i) for i in range(3)}
    with _warns_naming(r"run_cells\(progress=LABEL\)"):
        report = run_cells(CellStore(tmp_path / "a", {"grid": "a"}), cells, _record, workers=0, desc="cells")
    assert report.cells_computed == 3
    new = CellStore(tmp_path / "b", {"grid": "b"})
    run_cells(new, cells, _records, workers=0, groups=CellGroups(lambda key: "all", lambda keys: (tuple(keys),)))
    old = CellStore(tmp_path / "c", {"grid": "c"})
    with _warns_naming(r"run_cells\(groups=CellGroups"):
        run_cells(old, cells, _records, workers=0, group_by=lambda key: "all", group_args=lambda keys: (tuple(keys),))
    assert old.done() == new.done() == set(cells)


# -- one argument order: an old positional call is refused, naming the old order -------------
@pytest.mark.parametrize("call, old_order", [
    (lambda: theory.update_sensitivity(ARCH, 8, 0.5), r"update_sensitivity\(arch, depth, beta"),
    (lambda: theory.sub_block_sensitivities(ARCH, 8, 0.5), r"sub_block_sensitivities\(arch, depth, beta"),
    (lambda: theory.learning_rate_ceiling(Architecture(seq_len=64), 8, 64, 100, 0.5),
     r"learning_rate_ceiling\(arch, depth, width, steps, beta"),
    (lambda: recipe_predictions(ARCH, 8, 0.5), r"recipe_predictions\(arch, depth, beta"),
    (lambda: recipes_seconds(ARCH, 8, 0.5), r"recipes_seconds\(arch, depth, beta"),
    (lambda: RECIPES["deepnorm"](ARCH, 8, 0.5), r"__call__\(arch, depth, beta"),
    (lambda: theory.softmax_attention_map(1.0, 0.2, 0.5), r"softmax_attention_map\(q, p, beta"),
    (lambda: theory.gain_controlled_attention_map(1.0, 0.2, 0.5), r"gain_controlled_attention_map\(q, p, beta"),
    (lambda: theory.rope_softmax_attention_map(1.0, 0.2, 0.5), r"rope_softmax_attention_map\(q, p, beta"),
    (lambda: finite_width.finite_width_attention_map(1.0, 0.2, 0.5, width=16, seq_len=16),
     r"finite_width_attention_map\(q, p, beta"),
    (lambda: finite_width.attention_mean_cosine(1.0, 0.2, 0.5, seq_len=16), r"attention_mean_cosine\(q, p, beta"),
    (lambda: rope.rope_score_covariance(1, 2, 1.0, 0.2, 0.5, 64), r"rope_score_covariance\(distance_1, distance_2, q"),
])
def test_an_old_positional_order_is_a_type_error_naming_it(call, old_order):
    with pytest.raises(TypeError, match=old_order):
        call()


def test_the_new_orders_give_the_old_results():
    """The same numbers through the new order (keywords: no order at all)."""
    arch = Architecture(alpha_sa=2.0, seq_len=128)
    assert theory.update_sensitivity(arch, 0.5, depth=48) == theory.update_sensitivity(arch, beta=0.5, depth=48)
    q_a, p_a = theory.softmax_attention_map(0.7, q=1.2, p=0.3, seq_len=64)
    y2 = theory.participation_ratio(0.7, 1.2, 0.3, 64)  # beta first here too
    assert q_a == pytest.approx(0.2 * (0.3 + 0.9 * y2) + 4e-4, rel=1e-12)
    assert math.isfinite(p_a)
