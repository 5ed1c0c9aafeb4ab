"""Every command `seqlake fsck --repair-plan` names exists and repairs the table.

A small stream is landed, ingested (`seqlake ingest`) and compacted (`seqlake compact`), both in-process
as the warehouse's configuration says (the plan's commands follow it too); one history file gets a
flipped byte in a data page. The test then does what a user
would: run fsck with --repair-plan, run each command of the plan exactly as printed, in order, and
check that the last one (fsck) passes and history holds what it held before the damage.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.demo.generator import EventGenerator
from seqlake.pipelines.ingest.raw_source import create_raw_table, land_raw_records
from seqlake.tableformat.checksum import table_checksum
from seqlake.tableformat.schema import KEY_COLUMNS
from tests import forked_commands
from tests.conftest import make_config


def seqlake(warehouse: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "SEQLAKE_WAREHOUSE": str(warehouse)}
    config_file = warehouse.parent / "seqlake.yaml"
    if config_file.exists():
        env["SEQLAKE_CONFIG"] = str(config_file)
    return forked_commands.run([sys.executable, "-m", "seqlake.cli", *args], capture_output=True, text=True, env=env)


def in_process_config(warehouse: Path):
    """The small configuration on `warehouse`, ingesting and compacting in-process, saved beside it."""
    config = make_config(warehouse, users=60, windows=3)
    layout = config.layout.model_copy(update={"ingest_engine": "duckdb", "compaction_engine": "duckdb"})
    config = config.model_copy(update={"layout": layout})
    (warehouse.parent / "seqlake.yaml").write_text(yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))
    return config


def content(config) -> str:
    history, _ = history_tables(config)
    rows = history.refresh().scan().to_arrow().sort_by([(k, "ascending") for k in KEY_COLUMNS])
    return table_checksum(rows, rows.schema)


def damage_a_file(config) -> None:
    history, _ = history_tables(config)
    path = Path(next(iter(history.refresh().scan().plan_files())).file.file_path.removeprefix("file://"))
    chunk = pq.read_metadata(path).row_group(0).column(4)
    data = bytearray(path.read_bytes())
    data[chunk.data_page_offset + chunk.total_compressed_size // 2] ^= 0x5A
    path.write_bytes(bytes(data))


def follow_the_plan(warehouse: Path, rebuild: str) -> None:
    """fsck --repair-plan, then each command it names, as printed and in order: all succeed."""
    checked = seqlake(warehouse, "fsck", "--repair-plan")
    assert checked.returncode == 1 and "Traceback" not in checked.stderr
    commands = [line.split(": ", 1)[1] for line in checked.stdout.splitlines() if re.search(r": seqlake ", line)]
    assert [c.split()[1] for c in commands] == ["drop-run", "compact", "fsck"], checked.stdout
    assert rebuild in commands[1], checked.stdout
    for command in commands:
        done = seqlake(warehouse, *command.split()[1:])
        assert done.returncode == 0, (command, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr


def test_the_repair_plan_repairs_the_table(tmp_path):
    warehouse = tmp_path / "warehouse"
    config = in_process_config(warehouse)
    raw = create_raw_table(open_catalog(config), table_identifier(config, "raw_events"))
    land_raw_records(raw, EventGenerator(config).batches(), window_seconds=config.layout.window_seconds)
    ingested = seqlake(warehouse, "ingest", "--output", "json")
    assert ingested.returncode == 0, ingested.stderr
    landed = json.loads(ingested.stdout)
    assert landed["batches"] > 0 and landed["landed"] + sum(landed["quarantined"].values()) == landed["records"] > 0
    assert landed["engine"] == "duckdb"
    done = seqlake(warehouse, "compact", "--end-of-stream")
    assert done.returncode == 0, done.stderr
    before = content(config)
    assert seqlake(warehouse, "fsck").returncode == 0

    damage_a_file(config)
    follow_the_plan(warehouse, "--window")  # from landing
    assert content(config) == before

    # The landing tier is gone: the plan rebuilds from the detail table's retained events.
    shutil.rmtree(warehouse / "landing")
    damage_a_file(config)
    follow_the_plan(warehouse, "--from-detail")
    assert content(config) == before
    refused = seqlake(warehouse, "drop-run", "--run", "w1")
    assert refused.returncode in (1, 2) and "run w1 is not a live run of" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1


def test_drop_run_refuses_what_is_not_a_run_id(tmp_path):
    warehouse = tmp_path / "warehouse"
    for run, says in (("../x", "is not a run id"), ("W1", "is not a run id"), ("", "is not a run id")):
        done = seqlake(warehouse, "drop-run", "--run", run)
        assert done.returncode in (1, 2) and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and says in done.stderr, done.stderr
