"""Backfill sequences for any labelled table, point-in-time correct.

For every label row (user_id, ts, any other columns, kept as they are) the tenant's sequence as it
stood just before ts: by event time, the fold of exactly the events that happened before ts (a
history row that also merged later events of its item is rebuilt from detail), or with `--as-of
arrival` only the events that had arrived before ts (`--inclusive`: at or before; each source
partition's LSN frontier, from the landing tier's arrival times and the publications' recorded
frontiers). Past labels and requests come here; live serving requests are captured. Labels may be
an Iceberg table (its name), a Delta table (a folder), Parquet or CSV. The result replaces the
Iceberg table `--out` (default backfill_<tenant>), bucketed like history. The leakage report counts
the sequence rows known only after their label's ts: late arrivals (event time takes them in), rows
arrived or happened at ts, rows that merged events from ts on, and rows withheld because the detail
to rebuild them has expired.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Literal

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import EngineChoice, IntegerAtLeast
from seqlake.core.output import emit

if TYPE_CHECKING:
    from seqlake.core.config import Engine

AS_OF = ("event-time", "arrival")  # seqlake.pipelines.training.backfill.plan.AS_OF
# `arrow`, the in-process engine's former name, is taken as duckdb for one more release.
ENGINE = EngineChoice(aliases={"arrow": "duckdb"})


@click.command("backfill", help=__doc__)
@click.option("--labels", required=True, help="Label table: an Iceberg table name, a Delta folder, Parquet or CSV.")
@click.option("--tenant", required=True, help="The tenant whose sequences to build.")
@click.option("--as-of", type=click.Choice(AS_OF), default="event-time", show_default=True, help="Point-in-time rule.")
@click.option(
    "--inclusive",
    is_flag=True,
    help="Arrival: take in what arrived at ts too (labels that are not themselves events).",
)
@click.option("--out", help="Output Iceberg table (default: backfill_<tenant>).")
@click.option("--ts-column", default="ts", show_default=True, help="The label time column.")
@click.option(
    "--engine",
    type=ENGINE,
    default="duckdb",
    show_default=True,
    help="Where to run: duckdb (in-process, no JVM) or spark. arrow, its former name for duckdb, is deprecated.",
)
@click.option("--batch-rows", type=IntegerAtLeast(1), default=2048, show_default=True, help="Label rows per batch.")
@common_options
def command(
    labels: str,
    tenant: str,
    as_of: Literal["event-time", "arrival"],
    inclusive: bool,
    out: str | None,
    ts_column: str,
    engine: Engine,
    batch_rows: int,
) -> None:
    from seqlake.pipelines.training.backfill.plan import write_backfill
    from seqlake.pipelines.training.sequence import Tenant

    config = load_cli_config()
    chosen = Tenant(config, tenant)
    if inclusive and as_of != "arrival":
        raise click.UsageError("--inclusive applies to --as-of arrival (event time is always before ts)")
    started = time.perf_counter()
    if engine == "duckdb":
        result = write_backfill(
            config, labels, chosen, as_of, out, batch_rows=batch_rows, ts_column=ts_column, inclusive=inclusive
        )
        rows, leakage, table = result.rows, result.leakage, result.table
    else:
        from seqlake.engines.spark_session import spark_session
        from seqlake.pipelines.training.backfill.spark import write_spark_backfill

        spark = spark_session(config, "seqlake-backfill")
        rows, leakage = write_spark_backfill(spark, config, labels, chosen, as_of, out, ts_column, inclusive)
        table = out or f"backfill_{chosen.name}"
    seconds = time.perf_counter() - started
    rate = rows / seconds if seconds else 0.0
    where = f"written to {table}" if table else "no label rows, nothing written"
    document = {
        "tenant": chosen.name,
        "as_of": as_of,
        "inclusive": inclusive,
        "engine": engine,
        "rows": rows,
        "table": table,
        "leakage": leakage,
        "seconds": round(seconds, 3),
    }
    emit(
        document,
        f"{chosen.name}: {rows:,} label rows backfilled ({as_of}, {engine}), {where}, {rate:,.0f} label rows/s\n"
        f"{leakage.summary()}",
    )


main = job_main(command)

if __name__ == "__main__":
    script_main("backfill")
