"""Backfill sequences for any labelled table, point-in-time correct.

For every label row (user_id, ts, any other columns, kept as they are) the tenant's sequence as it
stood at ts: by event time (history rows with event time < ts), or with `--as-of arrival` only the
events that had arrived by ts (each source partition's LSN frontier at ts, from the landing tier's
arrival times and the publications' recorded frontiers). Labels may be an Iceberg table (its name),
a Delta table (a folder), Parquet or CSV. The result replaces the Iceberg table `--out` (default
backfill_<tenant>), bucketed like history. The leakage report says how many label rows would have
received events that arrived after their ts under event-time semantics.
"""

from __future__ import annotations

import sys
import time

from pipelines.training.backfill import AS_OF, write_backfill
from pipelines.training.sequence import Tenant
from seqlake.cli_args import ArgumentParser, integer_at_least
from seqlake.config import load_config


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="seqlake backfill", description=__doc__)
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument("--labels", required=True, help="label table: Iceberg table name, Delta folder, Parquet or CSV")
    parser.add_argument("--tenant", required=True, help="the tenant whose sequences to build")
    parser.add_argument("--as-of", choices=AS_OF, default="event-time", help="point-in-time rule (default: event-time)")
    parser.add_argument("--out", help="output Iceberg table (default: backfill_<tenant>)")
    parser.add_argument("--ts-column", default="ts", help="the label time column (default: ts)")
    parser.add_argument("--engine", choices=("arrow", "spark"), default="arrow", help="where to run (default: arrow)")
    parser.add_argument("--batch-rows", type=integer_at_least(1), default=2048, help="label rows per batch")
    args = parser.parse_args(argv)
    config = load_config(args.config)
    tenant = Tenant(config, args.tenant)
    started = time.perf_counter()
    if args.engine == "arrow":
        result = write_backfill(
            config, args.labels, tenant, args.as_of, args.out, batch_rows=args.batch_rows, ts_column=args.ts_column
        )
        rows, leakage, table = result.rows, result.leakage, result.table
    else:
        from pipelines.training.spark_backfill import write_spark_backfill
        from seqlake.spark_session import spark_session

        spark = spark_session(config, "seqlake-backfill")
        rows, leakage = write_spark_backfill(spark, config, args.labels, tenant, args.as_of, args.out, args.ts_column)
        table = args.out or f"backfill_{tenant.name}"
    seconds = time.perf_counter() - started
    rate = rows / seconds if seconds else 0.0
    where = f"written to {table}" if table else "no label rows, nothing written"
    print(
        f"{tenant.name}: {rows:,} label rows backfilled ({args.as_of}, {args.engine}), {where}, "
        f"{rate:,.0f} label rows/s"
    )
    print(leakage.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
