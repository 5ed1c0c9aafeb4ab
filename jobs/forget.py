"""Forget users: remove every row of the given users from the landing tier, the history table and
every table that holds a `user_id` (detail, quarantines, each tenant's training, fat-row and samples
tables), one commit per table that holds them; print the rows removed per table, then check that
none is left. Each request is recorded in the `forget_audit` table: who asked (--by), which users,
when, and the rows each table held of them (a killed forget, run again, completes the same record).

The replaced files stay on disk while older snapshots reference them: the bytes are gone once
`seqlake maintain` has expired those snapshots and removed the orphan files (right away with
`seqlake maintain --snapshot-retention-hours 0`). Running forget again is a no-op; a forget killed
half way, run again, ends where an unkilled one ends.
"""

from __future__ import annotations

import argparse
import sys

from pipelines.compaction import HISTORY
from pipelines.forget import forget_users
from pipelines.landing import landing_paths
from seqlake.catalog import load_existing_table
from seqlake.cli_args import ArgumentParser
from seqlake.config import load_config


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="seqlake forget", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument("--user", type=int, action="append", required=True, help="a user id (repeat for more)")
    parser.add_argument(
        "--skip-landing", action="store_true", help="leave the landing tier (Delta, needs Spark) as it is"
    )
    parser.add_argument("--by", help="who asks, for the audit (default: $SEQLAKE_ACTOR, else the OS user)")
    args = parser.parse_args(argv)

    config = load_config(args.config)
    load_existing_table(config, HISTORY)  # a warehouse without history is a mistake, not a new lake
    spark = None
    if not args.skip_landing:
        from seqlake.spark_session import spark_session

        spark = spark_session(config, "seqlake-forget")
    reports = forget_users(config, args.user, spark=spark, paths=landing_paths(config), requested_by=args.by)
    for report in reports:
        print(report.line())
    total = sum(r.removed for r in reports)
    print(f"forget: {total:,} rows of {len(set(args.user))} user(s) removed; none left in the tables searched")
    if args.skip_landing:
        print("forget: the landing tier was not searched (--skip-landing)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
