"""Apply the configuration's schema to the warehouse's tables: feature-group columns added, widened
(int8 -> int16 -> int32 -> int64, float32 -> float64) or retired in the configuration become Iceberg
schema changes of history, detail, the compaction quarantine and the tenants' tables, and Delta
column changes of the landing tier (on Spark). One commit per table; no data file is rewritten: old
files read with nulls for the columns they predate. Running it again does nothing.

Refused before any change: a narrowing or another type change, a removed feature group or key
column, and a tenant whose columns change while its training table holds captures.
"""

from __future__ import annotations

import argparse
import sys

from pipelines.landing import landing_paths
from pipelines.migrate import LANDING, migrate
from seqlake.cli_args import ArgumentParser
from seqlake.config import load_config


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="seqlake migrate", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument("--dry-run", action="store_true", help="print what would change, change nothing")
    parser.add_argument(
        "--skip-landing", action="store_true", help="leave the landing tier (Delta, needs Spark) as it is"
    )
    args = parser.parse_args(argv)

    config = load_config(args.config)
    paths = None if args.skip_landing else landing_paths(config)
    plans = migrate(config, paths=paths, dry_run=True)  # refusals are raised here, before any JVM starts
    spark = None
    if not args.dry_run and any(p.table == LANDING for p in plans):
        from seqlake.spark_session import spark_session

        spark = spark_session(config, "seqlake-migrate")
    changes = migrate(config, spark=spark, paths=paths, dry_run=args.dry_run)
    for diff in changes:
        print(f"migrate: {diff.describe() if not diff.empty else diff.table + ': column types recorded'}")
    verb = "would change" if args.dry_run else "changed"
    print(f"migrate: {len(changes)} table(s) {verb}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
