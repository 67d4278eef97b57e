"""GridResult: the one result type and file format of the theory's, measured and trained diagrams."""
from __future__ import annotations

import json

import numpy as np
import pytest

from remprop.diagrams import PHASE_LABELS, GridResult, TrainabilityDiagram, trainability_diagram
from remprop.theory import Architecture

AXES = {"phase": ("alpha", "beta"), "curve": ("alpha", "beta", "step"), "per_beta": ("beta",)}


def small_grid(**changes):
    fields = dict(kind="measured", alphas=[0.0, 1.0], betas=[0.5, 1.0, 2.0],
                  arrays={"phase": [[0, 1, 2], [0, 0, 2]], "curve": np.arange(24.0).reshape(2, 3, 4),
                          "per_beta": [np.inf, 1.0, np.nan]},
                  axes=dict(AXES), labels=PHASE_LABELS, settings={"depth": 3, "note": (1, 2)},
                  values={"agreement": 0.5}, provenance={"devices": ["cpu"]}, summary=("phase", "per_beta"))
    fields.update(changes)
    return GridResult(**fields)


def test_a_grid_result_round_trips_through_its_files(tmp_path):
    grid = small_grid()
    assert grid.shape == (2, 3) and grid.arrays["phase"].dtype == np.int8 and grid.settings["note"] == [1, 2]
    assert grid.fractions() == {"trainable": 0.5, "rank-collapse": 1 / 6, "entropy-collapse": 2 / 6}
    npz, js = grid.save(tmp_path / "grid.json")  # a suffix is dropped
    assert (npz.name, js.name) == ("grid.npz", "grid.json")
    back = GridResult.load(tmp_path / "grid")
    for name in AXES:
        np.testing.assert_array_equal(back.arrays[name], grid.arrays[name])
        assert back.axes[name] == AXES[name]
    assert (back.kind, back.labels, back.settings, back.values, back.provenance, back.summary) == \
        (grid.kind, grid.labels, grid.settings, grid.values, grid.provenance, grid.summary)
    summary = json.loads(js.read_text())
    assert summary["arrays"] == {"phase": [[0, 1, 2], [0, 0, 2]], "per_beta": ["inf", 1.0, "nan"]}
    assert summary["array_axes"]["curve"] == ["alpha", "beta", "step"] and "curve" not in summary["arrays"]
    assert summary["written_by"].startswith("remprop ")


def test_the_prediction_travels_with_its_grid(tmp_path):
    theory = trainability_diagram(Architecture(), [0.5, 1.0, 2.0], [0.0, 1.0], 3)
    grid = small_grid(predicted=theory.grid)
    grid.save(tmp_path / "grid")
    back = GridResult.load(tmp_path / "grid")
    np.testing.assert_array_equal(back.predicted.arrays["alpha_star"], theory.alpha_star)
    assert TrainabilityDiagram.from_grid(back.predicted).arch.to_dict() == theory.arch.to_dict()
    with np.load(tmp_path / "grid.npz") as data:
        assert "predicted.phase" in data.files and "phase" in data.files
    with pytest.raises(ValueError, match="^predicted lies on another grid"):
        small_grid(predicted=trainability_diagram(Architecture(), [0.5, 1.0, 2.0], [0.0, 2.0], 3).grid)
    with pytest.raises(ValueError, match="^predicted: a theory grid is itself the prediction"):
        GridResult(**{**_fields(theory.grid), "predicted": theory.grid})


def _fields(grid):
    return dict(kind=grid.kind, alphas=grid.alphas, betas=grid.betas, arrays=grid.arrays, axes=grid.axes,
                labels=grid.labels, settings=grid.settings, summary=grid.summary)


@pytest.mark.parametrize("changes, message", [
    (dict(kind="guessed"), "^kind must be one of"),
    (dict(alphas=[-1.0, 1.0]), "^alphas must be >= 0"),
    (dict(arrays={**small_grid().arrays, "curve": np.zeros((3, 2, 4))}), r"^curve has shape \(3, 2, 4\)"),
    (dict(arrays={**small_grid().arrays, "phase": [[0, 1, 7], [0, 0, 2]]}), r"^phase holds codes outside \[0, 1, 2\]"),
    (dict(axes={**AXES, "phase": ("alpha", "cell")}), "^phase: a grid result holds the phase code of every cell"),
    (dict(axes={"phase": AXES["phase"]}), "^axes: one tuple of axis names per array"),
    (dict(arrays={**small_grid().arrays, "meta": [1.0]}, axes={**AXES, "meta": ("x",)}), "^arrays: 'meta'"),
    (dict(summary=("phase", "nothing")), r"^summary names arrays that are not there: \['nothing'\]"),
    (dict(labels={"zero": "trainable"}), "^labels: codes must be integers"),
])
def test_an_inconsistent_grid_is_one_value_error_naming_the_field(changes, message):
    with pytest.raises(ValueError, match=message):
        small_grid(**changes)


def test_the_previous_theory_format_is_still_read(tmp_path):
    """Diagrams saved before the grid result (format remprop.trainability_diagram/1) load as before."""
    d = trainability_diagram(Architecture(norm="pre", sigma_w2=0.3), [0.5, 2.0], [0.0, 1.0, 2.0], 8, 0.9, rho0=0.2)
    old = tmp_path / "old.npz"
    np.savez(old, betas=d.betas, alphas=d.alphas, depth=d.depth, threshold=d.threshold, q0=d.q0, rho0=d.rho0,
             phase=d.phase, rho_final=d.rho_final, beta_critical_cells=d.beta_critical_cells,
             beta_critical=d.beta_critical, alpha_star=d.alpha_star, alpha_max=d.alpha_max,
             arch_json=np.array(json.dumps(d.arch.to_dict())), format=np.array("remprop.trainability_diagram/1"))
    back = TrainabilityDiagram.load(old)
    for name in ("betas", "alphas", "phase", "rho_final", "beta_critical", "beta_critical_cells", "alpha_star"):
        np.testing.assert_array_equal(getattr(back, name), getattr(d, name))
    assert (back.depth, back.threshold, back.rho0, back.alpha_max) == (8, 0.9, 0.2, d.alpha_max)
    assert back.arch.to_dict() == d.arch.to_dict()
    back.save(tmp_path / "new")  # and is written in the one format from then on
    assert json.loads((tmp_path / "new.json").read_text())["format"] == "remprop.grid_result/1"
    np.savez(old, format=np.array("remprop.trainability_diagram/1"), betas=d.betas)
    with pytest.raises(ValueError, match=f"^path: {old} .*missing arrays alphas, depth"):
        TrainabilityDiagram.load(old)
