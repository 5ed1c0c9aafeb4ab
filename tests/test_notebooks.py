"""Every notebook in notebooks/ runs top to bottom on a small warehouse, in a kernel of this virtualenv.

The kernel is this interpreter (`sys.executable`), registered under its own name in a temporary Jupyter
path, so the notebook imports the seqlake this test imports, whatever other kernels the machine has.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

from tests.test_sql import build_small_warehouse

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
KERNEL = "seqlake-test-venv"


@pytest.fixture(scope="module")
def warehouse(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("notebooks") / "warehouse"
    build_small_warehouse(root)
    return root


@pytest.fixture
def kernel_env(tmp_path, monkeypatch, warehouse) -> str:
    """A kernelspec for this interpreter and the environment the kernel inherits."""
    jupyter = tmp_path / "jupyter"
    spec = jupyter / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    monkeypatch.setenv("JUPYTER_PATH", str(jupyter))
    monkeypatch.setenv("JUPYTER_RUNTIME_DIR", str(tmp_path / "runtime"))
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.setenv("SEQLAKE_WAREHOUSE", str(warehouse))
    return KERNEL


def test_there_are_notebooks():
    assert "analyst_walkthrough.ipynb" in [p.name for p in NOTEBOOKS]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.stem for p in NOTEBOOKS])
def test_notebook_runs_top_to_bottom(path: Path, kernel_env: str, warehouse: Path):
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(
        notebook,
        kernel_name=kernel_env,
        timeout=300,
        resources={"metadata": {"path": str(path.parent)}},
    )
    try:
        client.execute()
    except CellExecutionError as error:
        pytest.fail(f"{path.name} failed:\n{error}")
    outputs = [o for cell in notebook.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.output_type == "error"]
    text = "".join(o.get("text", "") for o in outputs if o.output_type == "stream")
    assert f"warehouse: {warehouse.resolve().as_uri()}" in text  # it read SEQLAKE_WAREHOUSE, not the demo's
    assert sum("image/png" in o.get("data", {}) for o in outputs) >= 4  # every plot rendered
