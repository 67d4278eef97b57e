"""The notebooks in notebooks/: shipped executed, with their outputs (a reader on GitHub or in
Jupyter sees the numbers and pictures without running anything), and each runs from top to
bottom without an error in a fresh kernel (executed with nbclient; skipped when nbclient,
nbformat or ipykernel are not installed -- the ``notebooks`` extra).

To refresh the stored outputs after a change, execute them in place, e.g.
``jupyter nbconvert --to notebook --execute --inplace notebooks/*.ipynb``."""
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


def _draws(source: str) -> bool:
    """A cell that shows a figure: ends on ``fig``, calls ``.plot(``/``.figure(``, or shows an Image."""
    lines = [line for line in source.strip().splitlines() if line.strip() and not line.lstrip().startswith("#")]
    last = lines[-1].strip() if lines else ""
    return last in ("fig", "figure") or ".plot(" in source or last.endswith(".figure()") or \
        ".figure(fine_points" in last or "Image(" in source


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_is_stored_with_its_outputs(path):
    notebook = json.loads(path.read_text(encoding="utf-8"))
    assert notebook["nbformat"] == 4
    code = [cell for cell in notebook["cells"] if cell["cell_type"] == "code"]
    # executed once, top to bottom, in one kernel
    assert [cell["execution_count"] for cell in code] == list(range(1, len(code) + 1)), path.name
    for cell in code:
        source = "".join(cell["source"])
        kinds = {key for out in cell["outputs"] for key in out.get("data", {})}
        assert not any(out["output_type"] == "error" for out in cell["outputs"]), (path.name, source[:60])
        if "print(" in source:
            assert cell["outputs"], (path.name, source[:60])
        if _draws(source):
            assert "image/png" in kinds, (path.name, source[:60])
        assert "execution" not in cell.get("metadata", {})
    assert any(cell["outputs"] for cell in code), path.name
    assert "widgets" not in notebook["metadata"]


@pytest.mark.slow
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
    streams = [out for cell in code_cells for out in cell.outputs if out.output_type == "stream"]
    assert streams, path.name
    for cell in code_cells:  # a cell that draws shows its picture (a pyplot figure or a returned Figure)
        if _draws(cell.source):
            assert "image/png" in {key for out in cell.outputs for key in out.get("data", {})}, cell.source[:60]
    print(f"{path.name}: {elapsed:.1f} s")
