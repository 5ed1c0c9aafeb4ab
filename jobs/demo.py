"""The main job, end to end on the configured warehouse: every capability seqlake has, on generated data.

Run it as `seqlake demo` (or `spark-submit jobs/demo.py`). It prints a report and writes it as
`report.json` in the warehouse. The demo owns its tables and recreates them on every run.
"""

from __future__ import annotations

import argparse
import sys
import time

from pipelines.raw_landing import create_raw_table, land_raw_records
from seqlake.catalog import open_catalog, table_identifier
from seqlake.config import Config, load_config
from seqlake.duckdb_session import connect as duckdb_connect
from seqlake.generator import EventGenerator
from seqlake.progress import Progress
from seqlake.report import Report
from seqlake.spark_session import spark_session

RAW_TABLE = "raw_events"


def run_demo(config: Config) -> Report:
    report = Report("seqlake demo report")
    started = time.monotonic()
    catalog = open_catalog(config)
    raw_id = table_identifier(config, RAW_TABLE)

    # 1. Generate the source stream and land it as delivered (malformed records included).
    generator = EventGenerator(config)
    raw_table = create_raw_table(catalog, raw_id, replace=True)
    landing = land_raw_records(raw_table, generator.batches(), Progress("generate+land"))
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

    # 2. Read the landed table back through every engine: they must agree.
    metadata_location = catalog.load_table(raw_id).metadata_location
    with duckdb_connect() as con:
        duck_rows, duck_partitions = con.execute(
            "SELECT count(*), count(DISTINCT source_partition) FROM iceberg_scan(?)",
            [metadata_location],
        ).fetchone()
    spark = spark_session(config, "seqlake-demo")
    spark_name = f"{config.warehouse.catalog_name}.{config.warehouse.namespace}.{RAW_TABLE}"
    spark_row = spark.sql(
        f"SELECT count(*) AS n, count(DISTINCT source_partition) AS p FROM {spark_name}"
    ).first()
    # pyiceberg answers from snapshot metadata alone: no data file is read.
    arrow_rows = int(catalog.load_table(raw_id).current_snapshot().summary["total-records"])
    raw = report.section("raw_landing")
    raw["table"] = raw_id
    raw["records"] = landing.records
    raw["commits"] = landing.commits
    raw["rows_pyiceberg"] = arrow_rows
    raw["rows_spark"] = spark_row["n"]
    raw["rows_duckdb"] = duck_rows
    raw["engines_agree"] = landing.records == arrow_rows == spark_row["n"] == duck_rows
    raw["partitions_duckdb"] = duck_partitions

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
