"""The base install is the in-process path: importing it never loads pyspark or another extra's module,
and a command that needs an extra says which one to install."""

from __future__ import annotations

import json
import subprocess
import sys

from tests.paths import REPO_ROOT

REPO = REPO_ROOT
# The in-process path: the facade, the readers, the in-process engines, Arrow reconstruction, the jobs on them.
BASE_MODULES = (
    "seqlake",
    "seqlake.lake",
    "seqlake.core.config",
    "seqlake.engines.catalog",
    "seqlake.tableformat.reader",
    "seqlake.tableformat.multi_reader",
    "seqlake.pipelines.compaction.duckdb",
    "seqlake.pipelines.ingest.duckdb",
    "seqlake.pipelines.compaction.plan",
    "seqlake.pipelines.compaction.spark",
    "seqlake.pipelines.ingest.plan",
    "seqlake.pipelines.reads.fresh",
    "seqlake.pipelines.training.rebuild.duckdb",
    "seqlake.pipelines.training.rebuild.samples",
    "seqlake.pipelines.training.capture.pointers",
    "seqlake.jobs.history",
    "seqlake.sql_session",
    "seqlake.jobs.sql",
    "seqlake.jobs.compact",
    "seqlake.jobs.ingest",
    "seqlake.pipelines.demo.small",
    "seqlake.jobs.init",
)
EXTRA_MODULES = ("pyspark", "delta", "rocksdict", "matplotlib", "nbclient")


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO)


def test_the_in_process_path_imports_no_extra():
    code = (
        "import importlib, json, sys\n"
        f"for name in {BASE_MODULES!r}:\n"
        "    importlib.import_module(name)\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {EXTRA_MODULES!r})))\n"
    )
    done = _python(code)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []


def test_a_command_without_its_extra_names_the_extra():
    # pyspark made unimportable, as in a base install: one line naming the extra, exit 1 (a failure, not a usage error).
    code = "import sys; sys.modules['pyspark'] = None\nfrom seqlake.cli import main\nsys.exit(main(['ingest']))\n"
    done = _python(code)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "seqlake ingest: error: this command needs pyspark: pip install 'seqlake[spark]'"
    ]
