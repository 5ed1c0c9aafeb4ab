"""The inspection commands (`seqlake tables`, `describe`, `runs`, `files`) against a small warehouse,
checked against what pyiceberg and DuckDB read from the same tables; and a wrong warehouse location,
which every reading command reports in one line without creating anything there."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.landing.tables import landing_paths
from seqlake.pipelines.tables import load_existing_table
from seqlake.tableformat.registry import live_runs, run_id_of_path
from seqlake.tableformat.schema import KEY_COLUMNS
from tests import forked_commands
from tests.facade.test_sql import USER_ROWS, build_small_warehouse
from tests.snapshots import current_snapshot


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    return build_small_warehouse(tmp_path_factory.mktemp("inspect") / "warehouse")


def seqlake(*args: str, warehouse: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "SEQLAKE_WAREHOUSE": str(warehouse)}
    return forked_commands.run([sys.executable, "-m", "seqlake", *args], capture_output=True, text=True, env=env)


def as_json(*args: str, warehouse: Path) -> dict:
    done = seqlake(*args, "--output", "json", warehouse=warehouse)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_tables_lists_every_table_with_its_rows_files_and_size(small):
    root = small.config.warehouse_path()
    listed = {t["name"]: t for t in as_json("tables", warehouse=root)["tables"]}
    assert set(listed) == {"history", "history_detail", "raw_events", "landing_events", "quarantine"}
    history = load_existing_table(small.config, "history")
    files = [task.file for task in history.scan().plan_files()]
    assert listed["history"]["rows"] == sum(USER_ROWS.values())
    assert listed["history"]["files"] == len(files)
    assert listed["history"]["bytes"] == sum(f.file_size_in_bytes for f in files)
    assert listed["history"]["snapshot_id"] == current_snapshot(history).snapshot_id
    with lake_cursor() as con:
        found = con.execute("SELECT count(*) FROM delta_scan(?)", [landing_paths(small.config).events]).fetchone()
    assert found is not None  # an aggregate answers one row
    (landed,) = found
    assert listed["landing_events"]["rows"] == landed > 0 and listed["landing_events"]["format"] == "delta"
    text = seqlake("tables", warehouse=root)
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()[3:]
    assert [line.split()[0] for line in lines] == list(listed)
    assert f" {sum(USER_ROWS.values()):,} " in lines[0]  # counts as the report writes them: 5,443


def test_describe_gives_the_schema_partitioning_properties_and_snapshot(small):
    root = small.config.warehouse_path()
    history = load_existing_table(small.config, "history")
    described = as_json("describe", "history", warehouse=root)
    assert [f["name"] for f in described["schema"]] == [f.name for f in history.schema().fields]
    # Fields by name, as people write them, not by field id.
    assert described["partitioning"] == ["bucket[8](user_id)"]
    assert described["sort_order"] == [f"{name} asc nulls-first" for name in KEY_COLUMNS]
    assert described["properties"] == history.metadata.properties
    assert described["current_snapshot"]["id"] == current_snapshot(history).snapshot_id
    assert described["runs"] == len(live_runs(history)) == 2
    landing = as_json("describe", "landing_events", warehouse=root)
    assert landing["format"] == "delta" and "user_id" in [c["name"] for c in landing["schema"]]
    text = seqlake("describe", "history", warehouse=root)
    assert text.returncode == 0 and "bucket[8](user_id)" in text.stdout


def test_runs_are_the_live_run_registry(small):
    root = small.config.warehouse_path()
    history = load_existing_table(small.config, "history")
    listed = as_json("runs", warehouse=root)["runs"]
    assert listed == [
        {"run_id": r.run_id, "kind": r.kind, "windows": r.windows, "files": r.files, "rows": r.rows}
        for r in live_runs(history).values()
    ]
    text = seqlake("runs", warehouse=root).stdout
    assert all(run["run_id"] in text for run in listed)


def test_files_of_the_table_and_of_one_run(small):
    root = small.config.warehouse_path()
    history = load_existing_table(small.config, "history")
    every = as_json("files", warehouse=root)["files"]
    assert sorted(f["path"] for f in every) == sorted(t.file.file_path for t in history.scan().plan_files())
    for record in live_runs(history).values():
        chosen = as_json("files", "--run", record.run_id, warehouse=root)["files"]
        assert {f["run_id"] for f in chosen} == {record.run_id}
        assert {run_id_of_path(f["path"]) for f in chosen} == {record.run_id}
        assert (len(chosen), sum(f["rows"] for f in chosen)) == (record.files, record.rows)
    unknown = seqlake("files", "--run", "w7", warehouse=root)
    assert unknown.returncode == 1 and unknown.stderr.count("\n") == 1
    assert "run w7 is not live in seqlake.history" in unknown.stderr


@pytest.mark.parametrize(
    "command",
    [
        ["tables"],
        ["describe", "history"],
        ["runs"],
        ["files"],
        ["history", "--user", "1"],
        ["fsck"],
        ["sql", "--query", "SELECT 1"],
        ["drop-run", "--run", "w1"],
        ["export-sst", "--out", "{tmp}/sst"],
    ],
)
def test_a_wrong_warehouse_is_one_line_and_creates_nothing(tmp_path, command):
    nowhere = tmp_path / "no-such-warehouse"
    done = seqlake(*[arg.replace("{tmp}", str(tmp_path)) for arg in command], warehouse=nowhere)
    assert done.returncode == 1, done.stderr
    (line,) = done.stderr.splitlines()
    assert f"no warehouse at {nowhere}" in line and "Traceback" not in done.stderr
    assert not nowhere.exists()
