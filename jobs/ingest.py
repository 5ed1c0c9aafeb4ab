"""Ingest the raw source table, or a Kafka topic, into the landing tier (Delta), quarantining malformed records.

Each source commit (each range of a Kafka partition's offsets) is one batch; re-running ingests only what
is new, and a replayed batch adds nothing twice, whichever engine applied it. Usable as `seqlake ingest`
or `spark-submit jobs/ingest.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import EngineChoice, EventSource
from seqlake.core.output import emit

if TYPE_CHECKING:
    from seqlake.core.config import Engine


@click.command("ingest", help=__doc__)
@click.option(
    "--source",
    default="raw_events",
    show_default=True,
    type=EventSource(),
    help="A raw source table, a source named in the configuration's `sources`, or a Kafka topic: "
    "kafka://HOST:PORT[,HOST:PORT]/TOPIC (each partition a source partition, each offset its LSN).",
)
@click.option(
    "--engine",
    type=EngineChoice(),
    help="spark (local mode or SEQLAKE_SPARK_MASTER) or duckdb (in-process: pyarrow and delta-rs, no JVM); "
    "the same landing rows (default: layout.ingest_engine of the configuration; auto: spark when pyspark "
    "is installed, else duckdb).",
)
@common_options
def command(source: str, engine: Engine | None) -> None:
    from seqlake.core.config import resolve_engine
    from seqlake.core.progress import Progress
    from seqlake.core.sources import KafkaTopic
    from seqlake.pipelines.landing.tables import landing_paths
    from seqlake.pipelines.tables import load_existing_table

    config = load_cli_config()
    where = config.event_source(source)
    topic = where if isinstance(where, KafkaTopic) else None
    engine = resolve_engine(engine or config.layout.ingest_engine)
    if engine == "spark":
        import pyspark  # noqa: F401  (without the extra: one line naming it, before anything else)
    # A missing source is one line, before a JVM starts.
    if topic is not None:
        from seqlake.pipelines.ingest.kafka.plan import topic_offsets

        topic_offsets(topic)
    else:
        load_existing_table(config, str(where))
    paths = landing_paths(config)
    spark = None
    if engine == "spark":
        from seqlake.engines.spark_session import spark_session

        spark = spark_session(config, "seqlake-ingest")
    unit = "source commits" if topic is None else "batches"
    progress = Progress("ingest", measure="steps", rows_unit="records", steps_unit=unit)
    if topic is not None and spark is not None:
        from seqlake.pipelines.ingest.kafka.spark import ingest_topic_spark

        result = ingest_topic_spark(spark, config, topic, paths, progress)
    elif topic is not None:
        from seqlake.pipelines.ingest.kafka.duckdb import ingest_topic_in_process

        result = ingest_topic_in_process(config, topic, paths, progress)
    elif spark is not None:
        from seqlake.pipelines.ingest.spark import ingest_source

        result = ingest_source(spark, config, str(where), paths, progress)
    else:
        from seqlake.pipelines.ingest.duckdb import ingest_source_in_process

        result = ingest_source_in_process(config, str(where), paths, progress)
    seconds = progress.done()
    quarantined = dict(sorted(result.quarantined.items()))
    document = {
        "source": str(where),
        "engine": engine,
        "batches": result.batches,
        "already_ingested": result.skipped,
        "records": result.records,
        "landed": result.landed,
        "quarantined": quarantined,
        "seconds": round(seconds, 3),
    }
    done = "already done" if topic is None else "partitions caught up"
    emit(
        document,
        f"ingested {result.batches} batches ({result.skipped} {done}): {result.records:,} records, "
        f"{result.landed:,} landed, {sum(quarantined.values()):,} quarantined {quarantined}",
    )


main = job_main(command)

if __name__ == "__main__":
    script_main("ingest")
