"""Ingest on Spark: consume a raw source table snapshot by snapshot into the landing tier, with quarantine.

Each source snapshot (`seqlake.pipelines.ingest.plan`) is read incrementally with Iceberg's Spark
reader, validated by `parse_batch` in `mapInArrow`, and appended to the landing and quarantine Delta
tables with Delta's idempotent writes (txnAppId + txnVersion), quarantine first.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from seqlake.core.config import Config
from seqlake.core.progress import Progress
from seqlake.engines.catalog import spark_name
from seqlake.pipelines.faults import kill_point
from seqlake.pipelines.ingest.parse import parse_batch
from seqlake.pipelines.ingest.plan import IngestResult, current_published_windows, home_windows, ingest_app_id
from seqlake.pipelines.landing.schema import QUARANTINE_SCHEMA, landing_schema, parsed_schema
from seqlake.pipelines.landing.tables import LandingPaths, append_idempotent, delta_exists, last_applied_version
from seqlake.pipelines.tables import load_existing_table
from seqlake.tableformat.snapshots import in_commit_order, sequence_number

if TYPE_CHECKING:  # pyspark is imported by the Spark steps only
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


def redirect_published(spark: SparkSession, parsed: DataFrame, homes: dict[int, int]) -> DataFrame:
    """`parsed` with the window of records in published windows replaced by their home window."""
    from pyspark.sql import functions as F

    if not homes:
        return parsed
    mapping = spark.createDataFrame(list(homes.items()), "window_id long, _home_window long")
    columns = parsed.columns
    return (
        parsed.join(F.broadcast(mapping), "window_id", "left")
        .withColumn("window_id", F.coalesce(F.col("_home_window"), F.col("window_id")))
        .select(*columns)
    )


def _check_landing(spark: SparkSession, paths: LandingPaths, config: Config) -> None:
    """The landing tier holds the configured columns (a feature-group column added or widened in the
    configuration is `seqlake migrate`d first), or one line says what differs."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from seqlake.pipelines.landing.schema import check_landing

    check_landing(to_arrow_schema(spark.read.format("delta").load(paths.events).schema), config)


def ingest_source(
    spark: SparkSession,
    config: Config,
    source: str,
    paths: LandingPaths,
    progress: Progress | None = None,
    max_snapshots: int | None = None,
) -> IngestResult:
    """Ingest every source snapshot not ingested yet (at most `max_snapshots`), in commit order, on Spark."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    table = load_existing_table(config, source)
    name = spark_name(config, source)
    app_id = ingest_app_id(config, source)
    done = last_applied_version(spark, paths.events, app_id)
    snapshots = in_commit_order(table)
    result = IngestResult()
    if snapshots and sequence_number(snapshots[-1]) > done and delta_exists(spark, paths.events):
        _check_landing(spark, paths, config)
    parsed_spark_schema = from_arrow_schema(parsed_schema(config))
    landing_columns = landing_schema(config).names

    def parse(batches):
        for batch in batches:
            yield parse_batch(batch, config)

    if progress:
        pending = sum(sequence_number(s) > done for s in snapshots)
        progress.set_total(pending if max_snapshots is None else min(pending, max_snapshots))
    for snapshot in snapshots:
        if sequence_number(snapshot) <= done:
            result.skipped += 1
            continue
        if max_snapshots is not None and result.batches >= max_snapshots:
            break
        reader = spark.read.format("iceberg")
        if snapshot.parent_snapshot_id is None:
            reader = reader.option("snapshot-id", snapshot.snapshot_id)
        else:
            reader = reader.option("start-snapshot-id", snapshot.parent_snapshot_id).option(
                "end-snapshot-id", snapshot.snapshot_id
            )
        parsed = reader.load(name).mapInArrow(parse, parsed_spark_schema)
        parsed = redirect_published(spark, parsed, home_windows(current_published_windows(config))).persist()
        try:
            counts = {r["reason"]: r["count"] for r in parsed.groupBy("reason").count().collect()}
            valid = parsed.filter(F.col("reason").isNull()).select(*landing_columns)
            bad = parsed.filter(F.col("reason").isNotNull()).select(*QUARANTINE_SCHEMA.names)
            # Quarantine first: a crash between the two appends replays the batch, and both
            # appends skip what they already hold.
            append_idempotent(bad, paths.quarantine, app_id, sequence_number(snapshot))
            kill_point("ingest_quarantined")
            append_idempotent(valid, paths.events, app_id, sequence_number(snapshot))
            kill_point("ingest_landed")
        finally:
            parsed.unpersist()
        landed = counts.pop(None, 0)
        result.batches += 1
        result.last_version = sequence_number(snapshot)
        result.landed += landed
        result.quarantined.update(counts)
        result.records += landed + sum(counts.values())
        log.info("source commit %d: %d landed, quarantined %s", sequence_number(snapshot), landed, counts or {})
        if progress:
            progress.add(rows=landed + sum(counts.values()), steps=1, note=f"snapshot {sequence_number(snapshot)}")
    return result
