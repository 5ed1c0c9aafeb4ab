"""Ingest the raw source table into the landing tier (Delta), quarantining malformed records.

Each source commit is one batch; re-running ingests only what is new, and a replayed batch adds
nothing twice. Usable as `seqlake ingest` or `spark-submit jobs/ingest.py`.
"""

from __future__ import annotations

import click

from seqlake.cli import job_main, script_main
from seqlake.cli_options import common_options, load_cli_config
from seqlake.cli_types import TABLE_NAME
from seqlake.output import emit


@click.command("ingest", help=__doc__)
@click.option("--source", default="raw_events", show_default=True, type=TABLE_NAME, help="Raw source table.")
@common_options
def command(source: str) -> None:
    from pipelines.ingest import ingest_source
    from pipelines.landing import landing_paths
    from seqlake.catalog import load_existing_table
    from seqlake.progress import Progress
    from seqlake.spark_session import spark_session

    config = load_cli_config()
    load_existing_table(config, source)  # a missing source is one line, before a JVM starts
    spark = spark_session(config, "seqlake-ingest")
    progress = Progress("ingest", measure="steps", rows_unit="records", steps_unit="source commits")
    result = ingest_source(spark, config, source, landing_paths(config), progress)
    seconds = progress.done()
    quarantined = dict(sorted(result.quarantined.items()))
    document = {
        "source": source,
        "batches": result.batches,
        "already_ingested": result.skipped,
        "records": result.records,
        "landed": result.landed,
        "quarantined": quarantined,
        "seconds": round(seconds, 3),
    }
    emit(
        document,
        f"ingested {result.batches} batches ({result.skipped} already done): {result.records:,} records, "
        f"{result.landed:,} landed, {sum(quarantined.values()):,} quarantined {quarantined}",
    )


main = job_main(command)

if __name__ == "__main__":
    script_main("ingest")
