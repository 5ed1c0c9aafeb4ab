"""The main job, end to end on the configured warehouse: every capability seqlake has, on generated data.

Run it as `seqlake demo` (or `spark-submit jobs/demo.py`). It prints a report and writes it as
`report.json` in the warehouse. The demo owns its tables and recreates them on every run.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import time

from pipelines.compaction import DETAIL, HISTORY, compact_window, history_tables, merge_runs_if_needed
from pipelines.ingest import ingest_source
from pipelines.landing import landing_paths
from pipelines.raw_landing import create_raw_table, land_raw_records
from pipelines.windows import closed_windows
from seqlake.catalog import open_catalog, table_identifier
from seqlake.config import Config, load_config
from seqlake.duckdb_session import connect as duckdb_connect
from seqlake.generator import EventGenerator
from seqlake.progress import Progress
from seqlake.report import Report
from seqlake.spark_session import spark_session
from tableformat.fsck import fsck_table
from tableformat.registry import live_runs

RAW_TABLE = "raw_events"


def reset_demo_tables(config: Config) -> None:
    """The demo starts from nothing: drop its tables and landing folders."""
    catalog = open_catalog(config)
    for name in (RAW_TABLE, HISTORY, DETAIL):
        identifier = table_identifier(config, name)
        if catalog.table_exists(identifier):
            catalog.purge_table(identifier)
    landing = config.warehouse_path() / "landing"
    if landing.exists():
        shutil.rmtree(landing)


def run_demo(config: Config) -> Report:
    report = Report("seqlake demo report")
    started = time.monotonic()
    reset_demo_tables(config)
    catalog = open_catalog(config)
    raw_id = table_identifier(config, RAW_TABLE)

    # 1. Generate the source stream and land it as delivered, one commit per arrival window.
    generator = EventGenerator(config)
    raw_table = create_raw_table(catalog, raw_id)
    landing = land_raw_records(
        raw_table, generator.batches(), Progress("generate"), window_seconds=config.layout.window_seconds
    )
    stats = generator.stats
    gen = report.section("generated")
    gen["users"] = stats.users
    gen["events"] = stats.events
    gen["records"] = stats.records
    gen["late_events"] = stats.late
    gen["very_late_events"] = stats.very_late
    gen["duplicate_records"] = stats.duplicates
    gen["malformed_records"] = dict(sorted(stats.malformed.items()))
    gen["max_history_length"] = int(max(stats.history_lengths))
    gen["source_partitions"] = config.generator.source_partitions
    gen["windows"] = config.generator.windows

    # 2. Read the raw table back through every engine: they must agree.
    metadata_location = catalog.load_table(raw_id).metadata_location
    with duckdb_connect() as con:
        duck_rows, duck_partitions = con.execute(
            "SELECT count(*), count(DISTINCT source_partition) FROM iceberg_scan(?)", [metadata_location]
        ).fetchone()
    spark = spark_session(config, "seqlake-demo")
    spark_name = f"{config.warehouse.catalog_name}.{config.warehouse.namespace}.{RAW_TABLE}"
    spark_rows = spark.sql(f"SELECT count(*) AS n FROM {spark_name}").first()["n"]
    # pyiceberg answers from snapshot metadata alone: no data file is read.
    arrow_rows = int(catalog.load_table(raw_id).current_snapshot().summary["total-records"])
    raw = report.section("raw_landing")
    raw["table"] = raw_id
    raw["records"] = landing.records
    raw["commits"] = landing.commits
    raw["rows_pyiceberg"] = arrow_rows
    raw["rows_spark"] = spark_rows
    raw["rows_duckdb"] = duck_rows
    raw["engines_agree"] = landing.records == arrow_rows == spark_rows == duck_rows
    raw["partitions_duckdb"] = duck_partitions

    # 3. Ingest into the landing tier (Delta), quarantining malformed records.
    paths = landing_paths(config)
    ingested = ingest_source(spark, config, RAW_TABLE, paths, Progress("ingest"))
    ingest = report.section("ingest")
    ingest["batches"] = ingested.batches
    ingest["records"] = ingested.records
    ingest["events_landed"] = ingested.landed
    ingest["quarantined"] = dict(sorted(ingested.quarantined.items()))
    ingest["quarantined_total"] = sum(ingested.quarantined.values())

    # 4. Close every window in arrival order; merge runs by capacity.
    progress = Progress("compact", every=0)
    published = merges = events = 0
    for window in closed_windows(spark, paths, end_of_stream=True):
        result = compact_window(spark, config, paths, window)
        published += result.published
        events += result.events
        progress.add(rows=result.rows, steps=1, note=f"window {window}: {result.events:,} events")
        merges += merge_runs_if_needed(spark, config) is not None
    history, detail = history_tables(config)
    history.refresh()
    runs = live_runs(history)
    snapshot = history.current_snapshot()
    compaction = report.section("compaction")
    compaction["windows_published"] = published
    compaction["events_compacted"] = events
    compaction["history_rows"] = int(snapshot.summary["total-records"]) if snapshot else 0
    compaction["runs_per_bucket"] = len(runs)
    compaction["merges"] = merges
    compaction["runs"] = ", ".join(f"{r.run_id}[{r.windows[0]}..{r.windows[1]}]" for r in runs.values())
    compaction["detail_events"] = int(detail.refresh().current_snapshot().summary["total-records"])

    # 5. Check every invariant of the history table.
    checked = fsck_table(history)
    check = report.section("fsck")
    check["ok"] = True
    check["files"] = checked.files
    check["rows"] = checked.rows
    check["mib"] = round(checked.bytes / 2**20, 2)

    run = report.section("run")
    run["warehouse"] = config.warehouse_uri()
    run["seconds"] = round(time.monotonic() - started, 1)
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="seqlake demo", description=__doc__)
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    report = run_demo(config)
    print(report.render())
    path = config.warehouse_path() / "report.json"
    report.write_json(path)
    print(f"\nreport written to {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
