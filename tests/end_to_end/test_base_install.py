"""The base install is the in-process path: importing it never loads pyspark or another extra's module,
and a command that needs an extra says which one to install."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import yaml

from tests.paths import REPO_ROOT

OTTO = REPO_ROOT / "tests" / "data" / "otto" / "sessions-sample.jsonl"
# What a base install sees: no pyspark, no delta-spark.
BLOCK_EXTRAS = "import sys; sys.modules.update(pyspark=None, delta=None)\n"

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
    "seqlake.pipelines.ingest.kafka.duckdb",
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
EXTRA_MODULES = ("pyspark", "delta", "rocksdict", "matplotlib", "nbclient", "confluent_kafka")


def _python(code: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd)


def _seqlake_without_extras(folder: Path, *args: str) -> dict:
    """`seqlake ARGS --output json` run in `folder` with pyspark unimportable; its JSON document."""
    code = BLOCK_EXTRAS + f"from seqlake.cli import main\nsys.exit(main({[*args, '--output', 'json']!r}))\n"
    done = _python(code, cwd=folder)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout)


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
    code = (
        "import sys; sys.modules['pyspark'] = None\nfrom seqlake.cli import main\n"
        "sys.exit(main(['ingest', '--engine', 'spark']))\n"
    )
    done = _python(code)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "seqlake ingest: error: this command needs pyspark: pip install 'seqlake[spark]'"
    ]


def test_a_kafka_source_without_the_kafka_extra_names_it():
    code = (
        "import sys; sys.modules['confluent_kafka'] = None\nfrom seqlake.cli import main\n"
        "sys.exit(main(['ingest', '--engine', 'duckdb', '--source', 'kafka://127.0.0.1:9092/events']))\n"
    )
    done = _python(code)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "seqlake ingest: error: this command needs confluent_kafka: pip install 'seqlake[kafka]'"
    ]


def test_auto_engines_pick_spark_only_where_pyspark_is_installed():
    probe = "from seqlake.core.config import resolve_engine\nprint(resolve_engine('auto'))\n"
    installed, base = _python(probe), _python(BLOCK_EXTRAS + probe)
    assert installed.returncode == base.returncode == 0, installed.stderr + base.stderr
    assert (installed.stdout.strip(), base.stdout.strip()) == ("spark", "duckdb")


def test_a_starter_configuration_ingests_and_compacts_without_pyspark(tmp_path):
    # `seqlake init`'s configuration takes its engines from what is installed: in-process here.
    _seqlake_without_extras(tmp_path, "init")
    layout = yaml.safe_load((tmp_path / "seqlake.yaml").read_text())["layout"]
    assert layout.get("ingest_engine", "auto") == layout.get("compaction_engine", "auto") == "auto"
    imported = _seqlake_without_extras(tmp_path, "import", "--mapping", "otto", "--input", str(OTTO))
    ingested = _seqlake_without_extras(tmp_path, "ingest")
    assert ingested["engine"] == "duckdb"
    assert ingested["batches"] == 1 and ingested["records"] == imported["records"] > 0
    compacted = _seqlake_without_extras(tmp_path, "compact", "--end-of-stream")
    assert compacted["engine"] == "duckdb"
    assert compacted["windows"] > 0 and compacted["events"] > 0
