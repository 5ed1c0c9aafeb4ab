"""Keep the warehouse small: drop detail rows past retention, expire old snapshots, remove orphan
files and vacuum the landing tier; each step prints what it removed and how many bytes.

Never removed: a snapshot younger than `maintenance.snapshot_retention_hours` or among the newest
`maintenance.keep_snapshots`, a file a live snapshot references, a file younger than
`maintenance.orphan_safety_hours`, detail rows within `layout.detail_retention_windows` or needed by a
training pointer, the raw source table's snapshots. The options override the configuration.
"""

from __future__ import annotations

import argparse
import sys

from pipelines.landing import landing_paths
from pipelines.maintenance import run_maintenance
from seqlake.cli_args import ArgumentParser
from seqlake.config import load_config


def _hours(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"{text} is negative")
    return value


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(
        prog="seqlake maintain", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument("--snapshot-retention-hours", type=_hours, help="expire snapshots older than this")
    parser.add_argument("--orphan-safety-hours", type=_hours, help="never remove a file younger than this")
    parser.add_argument("--landing-retention-hours", type=_hours, help="Delta VACUUM retention of the landing tier")
    parser.add_argument("--skip-landing", action="store_true", help="do not vacuum the landing tier (no JVM)")
    args = parser.parse_args(argv)

    config = load_config(args.config)
    overrides = {
        key: value
        for key, value in (
            ("snapshot_retention_hours", args.snapshot_retention_hours),
            ("orphan_safety_hours", args.orphan_safety_hours),
            ("landing_retention_hours", args.landing_retention_hours),
        )
        if value is not None
    }
    config = config.model_copy(update={"maintenance": config.maintenance.model_copy(update=overrides)})
    spark = None
    if not args.skip_landing:
        from seqlake.spark_session import spark_session

        spark = spark_session(config, "seqlake-maintain")
    reports = run_maintenance(config, spark=spark, paths=landing_paths(config))
    for report in reports:
        print(report.line())
    total = sum(r.bytes for r in reports if r.step != "drop-detail")
    print(f"maintain: {total:,} bytes removed from storage")
    return 0


if __name__ == "__main__":
    sys.exit(main())
