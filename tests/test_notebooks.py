"""The notebooks: each runs top to bottom with CI's small settings in the
suites that scripts/execute_notebooks.py's NOTEBOOKS names (the plain Keras 3
ones, the tutorial and the parsing notebook, in the torch suite; the JAX one
in JAX's; the ablations, which set TensorFlow themselves, in TensorFlow's),
and the committed copies carry the outputs of a full-settings run of this
package version."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import keras
import nbformat
import pytest

from keras_transformer import __version__

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location(
    "execute_notebooks", ROOT / "scripts" / "execute_notebooks.py"
)
execute_notebooks = importlib.util.module_from_spec(spec)
spec.loader.exec_module(execute_notebooks)
NOTEBOOKS = execute_notebooks.NOTEBOOKS


def code_cells(notebook):
    return [cell for cell in notebook.cells if cell.cell_type == "code"]


def stream_text(cell) -> str:
    return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream")


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_notebook_runs_with_small_settings(name, tmp_path):
    backend = keras.backend.backend()
    if backend not in NOTEBOOKS[name]:
        pytest.skip(f"{name} runs in the {' and '.join(NOTEBOOKS[name])} suites")
    output = tmp_path / f"{name}.ipynb"
    execute_notebooks.execute(name, quick=True, output=output)  # Raises on error.
    executed = nbformat.read(output, as_version=4)
    cells = code_cells(executed)
    assert all(cell.execution_count for cell in cells)
    header = stream_text(cells[0]) + stream_text(cells[1])
    runs_on = execute_notebooks.OWN_BACKENDS.get(name, backend)
    assert "quick=True" in header and f"backend {runs_on}," in header


@pytest.mark.parametrize("name", sorted(NOTEBOOKS))
def test_committed_notebook_holds_a_full_run_of_this_version(name):
    notebook = nbformat.read(ROOT / "notebooks" / f"{name}.ipynb", as_version=4)
    cells = code_cells(notebook)
    assert [cell.execution_count for cell in cells] == list(range(1, len(cells) + 1))
    errors = [o for cell in cells for o in cell.outputs if o.output_type == "error"]
    assert errors == []
    header = stream_text(cells[0]) + stream_text(cells[1])
    assert f"keras-transformer {__version__}," in header
    assert "quick=False" in header, "re-run: scripts/execute_notebooks.py"
    assert any(
        "image/png" in o.get("data", {}) for cell in cells for o in cell.outputs
    ), "a figure"
