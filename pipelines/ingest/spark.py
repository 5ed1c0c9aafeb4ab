"""Ingest: consume a raw source table snapshot by snapshot into the landing tier, with quarantine.

The source is an append-only Iceberg table of raw records (as a Kafka topic would deliver them:
partition, LSN, arrival time, JSON payload). Each source snapshot is one ingest batch, identified by
its sequence number: landing and quarantine appends are idempotent per batch, so a re-run or a
replay after a crash adds nothing twice and loses nothing.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from seqlake.core.config import Config
from seqlake.core.progress import Progress
from seqlake.engines.catalog import open_catalog, spark_name, table_identifier
from seqlake.pipelines.faults import kill_point
from seqlake.pipelines.ingest.parse import parse_batch
from seqlake.pipelines.landing.schema import QUARANTINE_SCHEMA, landing_schema, parsed_schema
from seqlake.pipelines.landing.tables import LandingPaths, append_idempotent, delta_exists, last_applied_version
from seqlake.pipelines.tables import HISTORY, load_existing_table
from seqlake.tableformat.registry import published_windows
from seqlake.tableformat.snapshots import in_commit_order, sequence_number

if TYPE_CHECKING:  # the planning here is shared with the in-process engine, which runs without pyspark
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)


@dataclass
class IngestResult:
    batches: int = 0
    skipped: int = 0  # source snapshots already ingested by an earlier run
    records: int = 0
    landed: int = 0
    quarantined: Counter = field(default_factory=Counter)
    last_version: int = 0  # sequence number of the last source snapshot ingested in this call


def ingest_app_id(config: Config, source: str) -> str:
    return f"seqlake-ingest:{table_identifier(config, source)}"


def current_published_windows(config: Config) -> set[int]:
    """Windows the history table holds now (none before its first publication)."""
    catalog = open_catalog(config)
    identifier = table_identifier(config, HISTORY)
    return published_windows(catalog.load_table(identifier)) if catalog.table_exists(identifier) else set()


def home_windows(published: set[int]) -> dict[int, int]:
    """Each published window -> the first unpublished window after it. A record that arrives (or is
    imported with an arrival time) in a window already published lands there instead, so the next
    compaction publishes it: late data always has a home, never a window no one compacts again."""
    homes: dict[int, int] = {}
    for window in sorted(published, reverse=True):
        homes[window] = homes.get(window + 1, window + 1)
    return homes


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
