"""The layer rule of ARCHITECTURE.md, as import-linter contracts (pyproject.toml): each layer imports
only those below it, the format core never imports the application configuration, and no package's
modules import each other in a cycle. The contracts hold on the tree, and fail on a tree with one
upward import or one cycle added."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess:
    # The package is found on PYTHONPATH first: `root`'s seqlake, not the installed one.
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run(
        [str(LINT), "--config", str(REPO / "pyproject.toml"), "--no-cache"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
    )


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of the package (the links to tableformat/, pipelines/ and jobs/ followed)."""
    shutil.copytree(REPO / "seqlake", tmp_path / "seqlake", ignore=shutil.ignore_patterns("__pycache__", "data"))
    return tmp_path


def test_the_tree_keeps_every_contract() -> None:
    done = _lint(REPO)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "Contracts: 3 kept, 0 broken." in done.stdout


@pytest.mark.parametrize(
    ("module", "added", "broken"),
    [
        # core reaching up to a command
        ("core/errors.py", "import seqlake.jobs.history", "seqlake.core is not allowed to import seqlake.jobs"),
        # the format core reaching up to a pipeline step
        (
            "tableformat/reader.py",
            "from seqlake.pipelines.compaction import spark",
            "seqlake.tableformat is not allowed to import seqlake.pipelines",
        ),
        # the format core taking the application configuration
        ("tableformat/footer.py", "from seqlake.core.config import Config", "seqlake.core.config"),
        # a cycle inside the format core: writer imports layout, layout imports writer
        ("tableformat/layout.py", "import seqlake.tableformat.writer", "No cycles are allowed in seqlake.tableformat"),
    ],
)
def test_one_upward_import_or_cycle_breaks_a_contract(tree: Path, module: str, added: str, broken: str) -> None:
    path = tree / "seqlake" / module
    path.write_text(path.read_text() + f"\n{added}  # noqa\n")
    done = _lint(tree)
    assert done.returncode == 1, done.stdout[-3000:]
    assert broken in done.stdout, done.stdout[-3000:]
    assert "BROKEN" in done.stdout
