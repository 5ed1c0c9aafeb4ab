"""Apply the configuration's schema to the warehouse's tables: feature-group columns added, widened
(int8 -> int16 -> int32 -> int64, float32 -> float64) or retired in the configuration become Iceberg
schema changes of history, detail, the compaction quarantine and the tenants' tables, and Delta
column changes of the landing tier (on Spark). One commit per table; no data file is rewritten: old
files read with nulls for the columns they predate. Running it again does nothing.

Refused before any change: a narrowing or another type change, a removed feature group or key
column, and a tenant whose columns change while its training table holds captures.
"""

from __future__ import annotations

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.core.output import emit


@click.command("migrate", help=__doc__)
@click.option("--dry-run", is_flag=True, help="Print what would change, change nothing.")
@click.option("--skip-landing", is_flag=True, help="Leave the landing tier (Delta, needs Spark) as it is.")
@common_options
def command(dry_run: bool, skip_landing: bool) -> None:
    from seqlake.pipelines.landing.schema import LANDING
    from seqlake.pipelines.landing.tables import landing_paths
    from seqlake.pipelines.maintenance.migrate import migrate

    config = load_cli_config()
    paths = None if skip_landing else landing_paths(config)
    planned = migrate(config, paths=paths, dry_run=True)  # refusals are raised here, before any JVM starts
    spark = None
    if not dry_run and any(diff.table == LANDING for diff in planned):
        from seqlake.engines.spark_session import spark_session

        spark = spark_session(config, "seqlake-migrate")
    changes = planned if dry_run else migrate(config, spark=spark, paths=paths)
    lines = [f"migrate: {d.describe() if not d.empty else d.table + ': column types recorded'}" for d in changes]
    lines.append(f"migrate: {len(changes)} table(s) {'would change' if dry_run else 'changed'}")
    document = {
        "dry_run": dry_run,
        "tables": [{"table": d.table, "adds": d.added, "widens": d.widened, "retires": d.retired} for d in changes],
    }
    emit(document, "\n".join(lines))


main = job_main(command)

if __name__ == "__main__":
    script_main("migrate")
