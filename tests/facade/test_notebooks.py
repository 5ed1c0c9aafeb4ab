"""Every notebook in notebooks/ runs top to bottom on a small warehouse, in a kernel of this virtualenv,
and is stored with its outputs (plots visible wherever it is viewed, not only when run)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
import yaml
from nbclient.exceptions import CellExecutionError

from tests.facade.test_sql import build_small_warehouse
from tests.notebook_runner import NOTEBOOKS, execute, kernel_of_this_interpreter


@pytest.fixture(scope="module")
def project(tmp_path_factory) -> Path:
    """A user's project folder: a small warehouse, its ./seqlake.yaml (a relative warehouse path) and a
    notebooks/ folder, where Jupyter starts a notebook."""
    root = tmp_path_factory.mktemp("project")
    config = build_small_warehouse(root / "warehouse").config.model_dump(mode="json")
    config["warehouse"]["path"] = "warehouse"
    (root / "seqlake.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    (root / "notebooks").mkdir()
    return root


def test_there_are_notebooks():
    assert "analyst_walkthrough.ipynb" in [p.name for p in NOTEBOOKS]


def _outputs(notebook) -> list[list]:
    return [cell.get("outputs", []) for cell in notebook.cells if cell.cell_type == "code"]


def _kinds(outputs: list) -> list[str]:
    """What a cell shows: text, tables, pictures (values differ from one warehouse to the next)."""
    return sorted(
        {o.output_type if o.output_type == "stream" else "/".join(sorted(o.get("data", {}))) for o in outputs}
    )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom_and_is_stored_with_its_outputs(path: Path, project: Path, tmp_path):
    with kernel_of_this_interpreter(tmp_path):
        try:
            notebook = execute(path, cwd=project / "notebooks")
        except CellExecutionError as error:
            pytest.fail(f"{path.name} failed:\n{error}")
    outputs = [o for cell in _outputs(notebook) for o in cell]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert "warehouse: warehouse\n" in text  # opened from notebooks/: the project's configuration and warehouse
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 4  # every plot rendered

    # The stored copy shows what a run shows, cell by cell: refreshed with `python -m tests.notebook_runner --store`.
    stored = nbformat.read(path, as_version=4)
    assert [_kinds(cell) for cell in _outputs(stored)] == [_kinds(cell) for cell in _outputs(notebook)]
