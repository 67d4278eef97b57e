"""The published depth recipes (remprop.diagrams.recipes, ``remprop recipes``).

The rules are checked against the published constants, ReZero against its closed form
(identity blocks), and every recipe's predicted final cosine against a simulated stack.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

from remprop.cli import main
from remprop.diagrams import RECIPES, recipe_predictions
from remprop.diagrams.recipes import check_recipe_names
from remprop.theory import Architecture

#: A Xavier-like base (unit variances, an output projection, zero biases): the variances
#: the published gains multiply.
XAVIER = Architecture(sigma_v2=1.0, sigma_w2=1.0, sigma_o2=1.0, sigma_w2_out=1.0, sigma_b2=0.0)


def test_registry_returns_architectures_for_every_recipe():
    for name, recipe in RECIPES.items():
        arch, beta = recipe(XAVIER, 0.5, depth=12, width=256)
        assert isinstance(arch, Architecture), name
        assert beta > 0, name


def test_deepnorm_constants():
    # Wang et al. 2022: alpha = (2N)^(1/4), beta = (8N)^(-1/4) on W_V, W_O, W_1, W_2
    arch, beta = RECIPES["deepnorm"](XAVIER.replace(norm="pre"), 0.5, depth=24)
    assert arch.norm == "post" and beta == 0.5
    assert arch.alpha_sa == pytest.approx(48 ** 0.25) and arch.alpha_mlp == pytest.approx(48 ** 0.25)
    for name in ("sigma_v2", "sigma_o2", "sigma_w2", "sigma_w2_out"):
        assert getattr(arch, name) == pytest.approx(192 ** -0.5), name


def test_t_fixup_gpt2_mup_and_inverse_sqrt_rules():
    arch, _ = RECIPES["t-fixup"](XAVIER, 0.5, depth=16)
    assert arch.norm == "none" and arch.sigma_v2 == pytest.approx(0.67 ** 2 / 4)
    arch, _ = RECIPES["t-fixup-decoder"](XAVIER, 0.5, depth=16)
    assert arch.sigma_w2_out == pytest.approx(144 ** -0.5)
    # GPT-2: 1/sqrt(2L) on the output projections; no projection (None) counts as 1
    arch, _ = RECIPES["gpt2"](Architecture(), 0.5, depth=10)
    assert arch.norm == "pre" and arch.sigma_o2 == pytest.approx(1 / 20) and arch.sigma_w2_out == pytest.approx(0.01)
    # muP: beta / sqrt(d_H)
    assert RECIPES["mup"](XAVIER.replace(heads=4), 0.5, depth=10, width=256)[1] == pytest.approx(0.5 / 8)
    with pytest.raises(ValueError, match="width"):
        RECIPES["mup"](XAVIER.replace(heads=3), 0.5, depth=10, width=256)
    # 1/sqrt(L): post-LN as alpha = sqrt(L) (the factor cancels in LN), else on the last layers
    arch, _ = RECIPES["inverse-sqrt-depth"](XAVIER, 0.5, depth=25)
    assert arch.alpha_sa == pytest.approx(5.0) and arch.sigma_o2 == 1.0
    arch, _ = RECIPES["inverse-sqrt-depth"](XAVIER.replace(norm="pre"), 0.5, depth=25)
    assert arch.alpha_sa == 1.0 and arch.sigma_o2 == pytest.approx(0.04) and arch.sigma_w2_out == pytest.approx(0.04)


def test_rezero_is_the_identity_in_theory():
    # zero branches: q_L = q0, rho_L = rho0 at any depth; entropy collapse exactly above
    # beta_c(q0, p0) = sqrt(2 / (q0 (q0 - p0)))
    q0, rho0 = 1.7, 0.4
    beta_c = math.sqrt(2 / (q0 * q0 * (1 - rho0)))
    below, above = (recipe_predictions(Architecture(), b, depth=50, names=["rezero"], q0=q0, rho0=rho0)[0]
                    for b in (0.9 * beta_c, 1.1 * beta_c))
    assert below.rho_final == pytest.approx(rho0, abs=1e-12) and below.q_final == pytest.approx(q0, abs=1e-12)
    assert below.beta_critical == pytest.approx(beta_c, rel=1e-12)
    assert below.phase == "trainable" and above.phase == "entropy-collapse"
    assert below.alpha_star is None


def test_recipes_rescue_a_collapsing_stack():
    # the Xavier post-LN base collapses at L = 48 (rho_L > 0.99); the depth recipes do not
    rows = {r.recipe.name: r for r in recipe_predictions(XAVIER, 0.5, depth=48, rho0=0.3)}
    assert rows["base"].phase == "rank-collapse"
    for name in ("deepnorm", "rezero", "t-fixup", "gpt2", "inverse-sqrt-depth"):
        assert rows[name].phase == "trainable", name
    assert rows["mup"].phase == "rank-collapse"  # muP only rescales the scores


def test_unknown_recipe_names():
    with pytest.raises(ValueError, match="only must name recipes"):
        check_recipe_names(["deepnorm", "fixup"])
    with pytest.raises(ValueError, match="only must name recipes"):
        recipe_predictions(XAVIER, 0.5, depth=4, names=[])


SIM = dict(depth=8, width=128, seq_len=64, seeds=6, sequences=2)


@pytest.mark.parametrize("name", list(RECIPES))
def test_recipe_prediction_against_simulated_stack(name):
    torch = pytest.importorskip("torch")
    from remprop.validation import compare
    from remprop.validation.settings import SimulationSettings

    torch.set_num_threads(1)
    arch, beta = RECIPES[name](XAVIER.replace(seq_len=SIM["seq_len"]), 0.5, depth=SIM["depth"], width=SIM["width"])
    c = compare(arch, beta, depth=SIM["depth"],
                sim=SimulationSettings(width=SIM["width"], seq_len=SIM["seq_len"], device="cpu", seeds=SIM["seeds"],
                                       sequences=SIM["sequences"], inputs="synthetic", q0=1.0, rho0=0.3),
                observable="rho")
    final = c.trace.rho[:, -1]
    # Tolerance from the seed spread. The n = seeds x sequences final cosines have sample
    # std s. Sequences of one seed share the weights, so the seed means are the independent
    # draws; each has variance between + within/m <= s^2 (m sequences per seed), so the
    # standard error of the grand mean is at most s / sqrt(seeds). 4 such errors bound a
    # Gaussian deviation with probability 1 - 6e-5. The theory is the d -> infinity map;
    # its finite-width bias on a cosine is O(1/d) per block, and the measured cosines
    # are float32 sums (rounding ~1e-6): 1/d is added as the systematic allowance.
    tolerance = 4 * final.std(ddof=1) / math.sqrt(SIM["seeds"]) + 1.0 / SIM["width"]
    error = abs(float(c.theory.rho[-1]) - float(final.mean()))
    assert error <= tolerance, (name, error, tolerance)


def test_cli_recipes_json(tmp_path, capsys):
    status = main(["recipes", "--depth", "6", "--only", "rezero,deepnorm", "--json", "--no-figure",
                   "--out", str(tmp_path), "--rho0", "0.2"])
    assert status == 0
    out = json.loads(capsys.readouterr().out)
    assert [row["recipe"] for row in out["recipes"]] == ["rezero", "deepnorm"]
    assert out["recipes"][0]["rho_final"] == pytest.approx(0.2)
    assert (tmp_path / "recipes.json").exists()


def test_cli_recipes_figure(tmp_path, capsys):
    assert main(["recipes", "--depth", "4", "--only", "base,gpt2", "--out", str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "gpt2" in text and "alpha*" in text
    assert (tmp_path / "recipes.png").stat().st_size > 0


@pytest.mark.parametrize("argv, option", [(["--only", "fixup"], "--only"), (["--width", "0"], "--width"),
                                          (["--only", "mup", "--width", "9", "--heads", "2"], "--width")])
def test_cli_recipes_bad_input(tmp_path, capsys, argv, option):
    assert main(["recipes", "--depth", "3", "--no-figure", "--out", str(tmp_path), *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and option in err
