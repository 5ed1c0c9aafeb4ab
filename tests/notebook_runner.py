"""Execute the notebooks in notebooks/ in a kernel of this interpreter, and store them with outputs.

    .venv/bin/python -m tests.notebook_runner --store   # after `make demo`, from the project root

runs every notebook on the configured warehouse (the demo's, or `SEQLAKE_WAREHOUSE`) with the current
directory as the kernel's, and writes each back with its outputs, so plots show wherever the notebook
is viewed. The tests execute them too (tests/facade/test_notebooks.py), on a small warehouse of their own.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))
KERNEL = "seqlake-venv"
# The kernel the stored notebooks name: whoever opens one picks their own Python 3.
STORED_KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}


@contextmanager
def kernel_of_this_interpreter(folder: Path) -> Iterator[dict[str, str]]:
    """A kernelspec for `sys.executable` in a Jupyter path of its own under `folder`; yields the
    environment variables that make Jupyter find it (set while the block runs)."""
    spec = folder / "jupyter" / "kernels" / KERNEL
    spec.mkdir(parents=True)
    argv = [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(json.dumps({"argv": argv, "display_name": KERNEL, "language": "python"}))
    env = {
        "JUPYTER_PATH": str(folder / "jupyter"),
        "JUPYTER_RUNTIME_DIR": str(folder / "runtime"),
        "IPYTHONDIR": str(folder / "ipython"),
        "MPLBACKEND": "Agg",
    }
    with mock.patch.dict(os.environ, env):
        yield env


def execute(path: Path, cwd: Path, timeout: int = 300) -> nbformat.NotebookNode:
    """The notebook at `path`, executed top to bottom with `cwd` as the kernel's current directory
    (inside `kernel_of_this_interpreter`); raises nbclient's CellExecutionError on a failing cell."""
    notebook = nbformat.read(path, as_version=4)
    client = NotebookClient(notebook, kernel_name=KERNEL, timeout=timeout, resources={"metadata": {"path": str(cwd)}})
    client.execute()
    return notebook


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.notebook_runner", description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", action="store_true", help="write each executed notebook back with its outputs")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder, kernel_of_this_interpreter(Path(folder)):
        for path in NOTEBOOKS:
            notebook = execute(path, Path.cwd())
            notebook.metadata["kernelspec"] = STORED_KERNELSPEC
            if args.store:
                nbformat.write(notebook, path)
            print(f"{path.name}: executed{' and stored with its outputs' if args.store else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
