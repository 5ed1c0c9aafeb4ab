"""Ingest on Spark: consume a raw source table snapshot by snapshot into the landing tier, with quarantine.

Each source snapshot (`seqlake.pipelines.ingest.plan`) is read incrementally with Iceberg's Spark
reader, validated by `validated_records` (the shared validation SQL of
`seqlake.pipelines.ingest.validation`, which also moves records of published windows to their home
window), and appended to the landing and quarantine Delta tables with Delta's idempotent writes
(txnAppId + txnVersion), quarantine first. The per-record `parse_batch` stays as the reference the SQL
is held to (tests/pipelines/ingest/test_set_based_validation.py).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from pyiceberg.table.snapshots import Snapshot

from seqlake.core.config import Config
from seqlake.core.progress import Progress
from seqlake.engines.catalog import spark_name
from seqlake.pipelines.faults import kill_point
from seqlake.pipelines.ingest.plan import IngestResult, ingest_app_id, ingest_snapshots
from seqlake.pipelines.ingest.validation import validation_sql
from seqlake.pipelines.landing.schema import QUARANTINE_SCHEMA, landing_schema, parsed_schema
from seqlake.pipelines.landing.tables import LandingPaths, append_idempotent, is_delta_table, last_applied_version
from seqlake.pipelines.tables import load_existing_table
from seqlake.tableformat.snapshots import sequence_number

if TYPE_CHECKING:  # pyspark is imported by the Spark steps only
    from pyspark.sql import DataFrame, SparkSession

RAW_RECORDS_VIEW = "seqlake_raw_records"  # the validation query's source, one snapshot at a time
# HotSpot compiles no method larger than 8000 bytes of bytecode; the validation query's generated code
# for a whole stage is larger, so Spark compiles each of its projections apart, in methods HotSpot does
# compile (Spark's own advice for HotSpot, `spark.sql.codegen.hugeMethodLimit`).
_VALIDATION_SETTINGS = {"spark.sql.codegen.hugeMethodLimit": "8000"}


@contextmanager
def validation_settings(spark: SparkSession) -> Iterator[None]:
    """While inside, Spark plans queries as the validation query (`validated_records`) runs fastest."""
    before = {key: spark.conf.get(key, None) for key in _VALIDATION_SETTINGS}
    for key, value in _VALIDATION_SETTINGS.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, previous in before.items():
            if previous is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous)


def validated_records(
    spark: SparkSession, config: Config, raw: DataFrame, homes: dict[int, int] | None = None
) -> DataFrame:
    """`raw` records (RAW_SCHEMA's columns) validated: rows of `parsed_schema`, typed or with their
    reason, a record of a published window in its home window of `homes` (`plan.home_windows`). Plan
    it (persist it, or run an action on it) inside `validation_settings`."""
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    raw.createOrReplaceTempView(RAW_RECORDS_VIEW)
    parsed = spark.sql(validation_sql(config, RAW_RECORDS_VIEW, "spark", homes))
    return parsed.select([F.col(f.name).cast(f.dataType) for f in from_arrow_schema(parsed_schema(config))])


def _check_landing(spark: SparkSession, paths: LandingPaths, config: Config) -> None:
    """The landing tier holds the configured columns (a feature-group column added or widened in the
    configuration is `seqlake migrate`d first), or one line says what differs."""
    from pyspark.sql.pandas.types import to_arrow_schema

    from seqlake.pipelines.landing.schema import check_landing

    check_landing(to_arrow_schema(spark.read.format("delta").load(paths.events).schema), config)


def check_landing_tier(spark: SparkSession, config: Config, paths: LandingPaths) -> None:
    """Before a run's first batch: a landing tier that exists holds the configured columns."""
    if is_delta_table(paths.events):
        _check_landing(spark, paths, config)


def land_records(
    spark: SparkSession,
    config: Config,
    raw: DataFrame,
    paths: LandingPaths,
    app_id: str,
    version: int,
    homes: dict[int, int],
) -> tuple[int, Counter]:
    """Validate one batch of `raw` records (RAW_SCHEMA's columns) and append it as (app_id, version),
    records of published windows in their `homes`: (landed, Counter of quarantine reasons)."""
    from pyspark.sql import functions as F

    parsed = None
    try:
        # The count fills the cache: the validation query runs (is compiled) there, under its settings;
        # the appends read the cached rows.
        with validation_settings(spark):
            parsed = validated_records(spark, config, raw, homes).persist()
            counts = Counter({r["reason"]: r["count"] for r in parsed.groupBy("reason").count().collect()})
        valid = parsed.filter(F.col("reason").isNull()).select(*landing_schema(config).names)
        bad = parsed.filter(F.col("reason").isNotNull()).select(*QUARANTINE_SCHEMA.names)
        # Quarantine first: a crash between the two appends replays the batch, and both
        # appends skip what they already hold.
        append_idempotent(bad, paths.quarantine, app_id, version)
        kill_point("ingest_quarantined")
        append_idempotent(valid, paths.events, app_id, version)
        kill_point("ingest_landed")
    finally:
        if parsed is not None:
            parsed.unpersist()
    return counts.pop(None, 0), counts


def ingest_source(
    spark: SparkSession,
    config: Config,
    source: str,
    paths: LandingPaths,
    progress: Progress | None = None,
    max_snapshots: int | None = None,
) -> IngestResult:
    """Ingest every source snapshot not ingested yet (at most `max_snapshots`), in commit order, on Spark."""
    table = load_existing_table(config, source)
    name = spark_name(config, source)
    app_id = ingest_app_id(config, source)

    def check() -> None:
        check_landing_tier(spark, config, paths)

    def land(snapshot: Snapshot, homes: dict[int, int]) -> tuple[int, Counter]:
        reader = spark.read.format("iceberg")
        if snapshot.parent_snapshot_id is None:
            reader = reader.option("snapshot-id", snapshot.snapshot_id)
        else:
            reader = reader.option("start-snapshot-id", snapshot.parent_snapshot_id).option(
                "end-snapshot-id", snapshot.snapshot_id
            )
        return land_records(spark, config, reader.load(name), paths, app_id, sequence_number(snapshot), homes)

    done = last_applied_version(spark, paths.events, app_id)
    return ingest_snapshots(config, table, done, land, progress, max_snapshots, check)
