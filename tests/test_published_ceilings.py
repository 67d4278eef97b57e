"""The learning-rate ceiling against the rates real models were pre-trained at (issue 41).

Every published rate trained, so it must not lie above what the ceiling allows: the top of its
measured band (:data:`~remprop.theory.learning_rate.CEILING_BAND`: above ``band[1]`` times the
predicted ceiling, every run of the scale sweep failed). And the ceiling must still say something:
the band's top at most 20 times the published rate. The table is the shipped one
(:func:`remprop.theory.models.pretraining.published_recipes`, docs/training.md, "Published
pre-training recipes"); the check reads each model's shipped configuration at the recipe's steps,
as ``remprop check MODEL --steps S --lr ETA`` does, with no training.
"""
from __future__ import annotations

import pytest

from remprop.diagrams.learning_rate import lr_ceiling_summary
from remprop.theory import model_spec
from remprop.theory.models.pretraining import published_recipes

#: How far above the published rate the band's top may lie and still tell the user something.
MAX_ABOVE = 20.0


@pytest.mark.parametrize("recipe", published_recipes(), ids=lambda r: r.name)
def test_a_published_rate_lies_within_what_the_ceiling_allows(recipe):
    summary = lr_ceiling_summary(model_spec(recipe.model), steps=recipe.total_steps, lr=recipe.peak_lr)
    assert summary["value"] is not None, summary["note"]
    low, high = summary["band"]
    assert recipe.peak_lr <= high, (f"{recipe.name}: published lr {recipe.peak_lr:.3g} above the ceiling's band "
                                    f"(ceiling {summary['value']:.3g}, band top {high:.3g})")
    assert high <= MAX_ABOVE * recipe.peak_lr, (f"{recipe.name}: band top {high:.3g} more than {MAX_ABOVE:g}x the "
                                                f"published lr {recipe.peak_lr:.3g}: the ceiling says nothing")
    assert summary["verdict"] in ("below", "near")
    # every published recipe is far outside the sweeps' range: the report must say so
    assert not summary["validated"] and summary["outside"]
