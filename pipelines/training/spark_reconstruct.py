"""Reconstruction on Spark: pointers join history bucket by bucket, without shuffling history.

The training table and history share bucket(N, user_id), so the join is a storage-partitioned join:
each task reads one bucket of pointers and the same bucket of history (`pointer_history_join`; the
plan is checked in tests/test_late_materialization.py). Visibility is a filter on the joined rows;
the open window's rows are rebuilt from the detail table's events up to each bound with the same
aggregation SQL as compaction. Each request's candidates then meet its pointer and fragment in a
cogrouped Arrow function that assembles and verifies the sequence with the shared Python rules.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from pipelines.aggregation import aggregation_sql
from pipelines.compaction import DETAIL, HISTORY, spark_name
from pipelines.training.reconstruct import Mode, assemble, candidate_columns, fragment_of
from pipelines.training.sequence import Tenant, lists_of
from pipelines.training.tables import (
    QUARANTINE,
    QUARANTINE_SCHEMA,
    SEQUENCE,
    samples_table_name,
    sequence_table_schema,
    training_table_name,
)
from seqlake.config import Config

RESULT_FIELDS = [
    pa.field("ok", pa.bool_(), nullable=False),
    pa.field("reason", pa.string()),  # null when ok
    pa.field("actual_checksum", pa.string(), nullable=False),
    pa.field("expected_checksum", pa.string(), nullable=False),
    pa.field("actual_length", pa.int32(), nullable=False),
    pa.field("expected_length", pa.int32(), nullable=False),
]


def result_schema(tenant: Tenant) -> pa.Schema:
    return pa.schema(list(sequence_table_schema(tenant)) + RESULT_FIELDS)


def _bound_of_row() -> Column:
    return F.coalesce(F.try_element_at(F.col("lsn_bound"), F.col("source_partition")), F.lit(-1))


def pointer_history_join(spark: SparkSession, config: Config, tenant: Tenant, mode: Mode) -> DataFrame:
    """Each request's visible history rows (open window excluded in LSN mode), from a storage-
    partitioned join of the training table with history on user_id."""
    pointers = spark.table(spark_name(config, training_table_name(tenant))).select(
        "user_id", "request_id", "range_start", "range_end", "open_window", "lsn_bound", "fragment_start_ts"
    )
    history = (
        spark.table(spark_name(config, HISTORY))
        .where(F.col("feature_group").isin(list(tenant.feature_groups)))
        .select("user_id", *tenant.read_columns())
    )
    # A sort-merge join over the shared buckets (never a broadcast of the pointers).
    joined = pointers.hint("merge").join(history, "user_id")
    visible = F.col("event_ts").between(F.col("range_start"), F.col("range_end"))
    if mode == "lsn":
        visible &= (F.col("window_id") != F.col("open_window")) & (F.col("lsn") <= _bound_of_row())
    else:
        visible &= F.col("fragment_start_ts").isNull() | (F.col("event_ts") < F.col("fragment_start_ts"))
    return joined.where(visible).select("user_id", "request_id", *candidate_columns(tenant))


def rebuilt_open_window(spark: SparkSession, config: Config, tenant: Tenant) -> DataFrame:
    """The open window's rows of each request's user, as of its bound, from detail events."""
    bounds = spark.table(spark_name(config, training_table_name(tenant))).select(
        "user_id",
        "request_id",
        F.col("open_window").alias("window_id"),
        F.explode("lsn_bound").alias("source_partition", "bound"),
    )
    events = spark.table(spark_name(config, DETAIL)).where(F.col("feature_group").isin(list(tenant.feature_groups)))
    visible = events.join(bounds, ["user_id", "window_id", "source_partition"]).where(F.col("lsn") <= F.col("bound"))
    view = f"_seqlake_visible_{tenant.name}"
    visible.drop("bound").createOrReplaceTempView(view)
    rows = spark.sql(aggregation_sql(config, view, group_by_extra=("request_id",)))
    return rows.select("user_id", "request_id", *candidate_columns(tenant))


def reconstruct_with_spark(spark: SparkSession, config: Config, tenant: Tenant, mode: Mode = "lsn") -> DataFrame:
    """One row per request: the rebuilt sequence as list columns and its verification."""
    candidates = pointer_history_join(spark, config, tenant, mode)
    if mode == "lsn":
        candidates = candidates.unionByName(rebuilt_open_window(spark, config, tenant))
    pointers = spark.table(spark_name(config, training_table_name(tenant)))
    schema = result_schema(tenant)

    def rebuild(rows: pa.Table, pointer: pa.Table) -> pa.Table:
        row = pointer.to_pylist()[0]
        result = assemble(row, fragment_of(row, tenant), rows, tenant, mode)
        out = {f.name: [row[f.name]] for f in sequence_table_schema(tenant) if not f.name.startswith(SEQUENCE)}
        out.update(lists_of([result.sequence], tenant, SEQUENCE))
        out.update(
            ok=[result.ok],
            reason=[result.reason],
            actual_checksum=[result.checksum.hex()],
            expected_checksum=[result.expected_checksum.hex()],
            actual_length=[result.sequence.num_rows],
            expected_length=[result.expected_length],
        )
        return pa.table(out, schema=schema)

    keys = ["user_id", "request_id"]
    return candidates.groupBy(*keys).cogroup(pointers.groupBy(*keys)).applyInArrow(rebuild, from_arrow_schema(schema))


def write_spark_samples(spark: SparkSession, config: Config, tenant: Tenant) -> tuple[int, int]:
    """Rebuild the tenant's samples on Spark (LSN mode); replace samples_<tenant> with the verified
    ones and this tenant's Spark rows of the quarantine table with the failed ones. Returns
    (samples, quarantined)."""
    results = reconstruct_with_spark(spark, config, tenant, "lsn").persist()
    try:
        names = sequence_table_schema(tenant).names
        results.where("ok").select(*names).writeTo(spark_name(config, samples_table_name(tenant))).overwrite(
            F.lit(True)
        )
        engine = "spark/lsn"
        failed = results.where(~F.col("ok")).select(
            F.lit(tenant.name).alias("tenant"),
            "request_id",
            "user_id",
            F.lit(engine).alias("engine"),
            F.coalesce("reason", F.lit("unverified")).alias("reason"),
            "expected_checksum",
            "actual_checksum",
            "expected_length",
            "actual_length",
        )
        failed.select(*QUARANTINE_SCHEMA.names).writeTo(spark_name(config, QUARANTINE)).overwrite(
            (F.col("tenant") == tenant.name) & (F.col("engine") == engine)
        )
        counts = {r["ok"]: r["count"] for r in results.groupBy("ok").count().collect()}
    finally:
        results.unpersist()
    return counts.get(True, 0), counts.get(False, 0)
