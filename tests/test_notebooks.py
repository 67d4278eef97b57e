"""The notebooks in notebooks/: stored without outputs, and each runs from top to bottom
without an error in a fresh kernel (executed with nbclient; skipped when nbclient,
nbformat or ipykernel are not installed -- the ``notebooks`` extra)."""
from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parent.parent / "notebooks").glob("*.ipynb"))
#: Seconds a notebook may take (each is written to finish in well under a minute).
TIMEOUT_PER_CELL = 120


def test_there_is_a_tour_and_one_notebook_per_theme():
    names = [path.stem for path in NOTEBOOKS]
    assert names[0] == "00_tour" and len(names) >= 5, names


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_without_outputs(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    assert notebook["nbformat"] == 4
    for cell in notebook["cells"]:
        if cell["cell_type"] == "code":
            assert cell["outputs"] == [] and cell["execution_count"] is None, (path.name, cell["source"][:1])
        assert "execution" not in cell.get("metadata", {})
    assert "widgets" not in notebook["metadata"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_without_error(path, tmp_path):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    pytest.importorskip("torch")
    notebook = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(notebook, timeout=TIMEOUT_PER_CELL, kernel_name="python3",
                                     resources={"metadata": {"path": str(tmp_path)}})
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError naming the cell on any error
    elapsed = time.perf_counter() - start
    code_cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert all(cell.execution_count is not None for cell in code_cells)
    errors = [out for cell in code_cells for out in cell.outputs if out.output_type == "error"]
    assert not errors
    # Every notebook shows something: printed numbers and, where it draws, the pictures.
    kinds = {key for cell in code_cells for out in cell.outputs for key in out.get("data", {})}
    streams = [out for cell in code_cells for out in cell.outputs if out.output_type == "stream"]
    assert streams, path.name
    if any("fig" in "".join(cell.source).split("\n")[-1] or "Image(" in "".join(cell.source) for cell in code_cells):
        assert "image/png" in kinds, path.name
    print(f"{path.name}: {elapsed:.1f} s")
