"""Reconstruction on Spark: one task per bucket runs the in-process rebuild of that bucket.

The training table and history share bucket(N, user_id). The driver plans the job's reads once
(`Reconstruction.plan`: the pointer files by bucket, history's data files by bucket, detail's
files by window, the tables' metadata without their catalog) and holds nothing else. The job is
one stage: a range of bucket numbers, one partition each, and `mapInArrow`; each task rebuilds
its bucket exactly as the in-process engine does (`Reconstruction.of_bucket`: the same reads with
pyarrow, `gather.gather_sequences`, the same row digests, checksums and verdicts, batch by batch)
and yields Arrow batches of results. Nothing joins pointers to history rows, history is never
shuffled, and no Python runs per row (the plan is read in
tests/pipelines/training/test_late_materialization.py); a task holds one batch of its bucket's
pointers and their users' rows at a time.

`write_spark_samples` writes the verified rows into samples_<tenant> with Spark's Iceberg writer,
each task its own bucket's file (no exchange before the write), in the same pass that rebuilds
them; the rows that failed are rebuilt again only when there are any. The open window's rebuild on
Spark SQL (`open_window_as_of_bounds`) stays for Spark's backfill.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import pyarrow as pa
from pyiceberg.expressions import And, EqualTo
from pyspark.sql import DataFrame, Observation, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from seqlake.core.config import Config
from seqlake.engines.catalog import spark_name
from seqlake.pipelines.compaction.aggregation import aggregation_sql
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.faults import kill_point
from seqlake.pipelines.tables import DETAIL, HISTORY, load_existing_table
from seqlake.pipelines.training.rebuild.duckdb import VERDICT_SCHEMA, RebuildPlan, Reconstruction
from seqlake.pipelines.training.rebuild.plan import Mode, quarantine_engine
from seqlake.pipelines.training.sequence import Tenant
from seqlake.pipelines.training.tables import (
    QUARANTINE,
    QUARANTINE_SCHEMA,
    create_bucketed_table,
    may_hold,
    samples_table_name,
    sequence_table_schema,
    training_table_name,
)
from seqlake.tableformat.forgets import read_point, remove_missed

RESULT_FIELDS = list(VERDICT_SCHEMA)
BATCH_BYTES = 32 * 2**20  # an Arrow batch a task hands to the JVM: bounds what the JVM holds per task
# Each task writes the rows of its one bucket: no exchange (distribution) and no sort (fanout) first.
BUCKET_WRITE = {"distribution-mode": "none", "fanout-enabled": "true"}


def result_schema(tenant: Tenant) -> pa.Schema:
    return pa.schema(list(sequence_table_schema(tenant)) + RESULT_FIELDS)


def history_frame(spark: SparkSession, config: Config) -> DataFrame:
    """The history table in Spark, read by Iceberg's (vectorized) reader."""
    return spark.read.table(spark_name(config, HISTORY))


def open_window_as_of_bounds(
    spark: SparkSession, config: Config, tenant: Tenant, pointers: DataFrame, key: str
) -> DataFrame:
    """Each pointer's open window as it stood under its LSN bound: the detail events of its user in
    that window up to the bound of each source partition, aggregated per (`key`, item) with the
    declared merge operators. `pointers` holds `key`, `user_id`, `open_window` and `lsn_bound`."""
    bounds = pointers.select(
        "user_id",
        key,
        F.col("open_window").alias("window_id"),
        F.explode("lsn_bound").alias("source_partition", "bound"),
    )
    events = spark.table(spark_name(config, DETAIL)).where(F.col("feature_group").isin(list(tenant.feature_groups)))
    visible = events.join(bounds, ["user_id", "window_id", "source_partition"]).where(F.col("lsn") <= F.col("bound"))
    view = f"_seqlake_open_window_{tenant.name}_{key.strip('_')}"
    visible.drop("bound").createOrReplaceTempView(view)
    return spark.sql(aggregation_sql(config, view, group_by_extra=(key,)))


def rebuild_plan(config: Config, tenant: Tenant, mode: Mode = "lsn") -> RebuildPlan:
    """The job's reads, planned once from the tables as they are now."""
    history, detail = history_tables(config)
    training = load_existing_table(config, training_table_name(tenant))
    return Reconstruction(config, tenant, training, history, detail, mode=mode).plan()


def reconstruct_with_spark(
    spark: SparkSession, config: Config, tenant: Tenant, mode: Mode = "lsn", plan: RebuildPlan | None = None
) -> DataFrame:
    """One row per request (`result_schema`): the rebuilt sequence as list columns and its
    verification, one task per bucket of pointers (`plan`, else planned now)."""
    plan = plan or rebuild_plan(config, tenant, mode)
    buckets = plan.pointers.buckets
    schema = result_schema(tenant)

    def rebuild(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for position in batch.column(0).to_pylist():
                yield from bucket_results(plan, buckets[position], schema)

    # One partition per bucket: a task is one bucket, whose rows its output keeps together.
    positions = spark.range(0, len(buckets), 1, max(1, len(buckets)))
    return positions.mapInArrow(rebuild, from_arrow_schema(schema))


def bucket_results(plan: RebuildPlan, bucket: int, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """The bucket's rebuilt sequences and their verdicts, in `schema`, in batches of about BATCH_BYTES."""
    rebuild = Reconstruction.of_bucket(plan, bucket)
    try:
        for result in rebuild.batches([bucket]):
            assert result.verdicts is not None  # rebuild_batch gives them
            columns = {name: result.assembled[name] for name in result.assembled.column_names}
            columns |= {name: result.verdicts[name] for name in result.verdicts.column_names}
            rows = pa.Table.from_pydict(columns).cast(schema)
            step = max(1, BATCH_BYTES * rows.num_rows // max(rows.nbytes, 1))
            yield from rows.to_batches(max_chunksize=step)
    finally:
        rebuild.database.close()


def write_spark_samples(spark: SparkSession, config: Config, tenant: Tenant) -> tuple[int, int]:
    """Rebuild the tenant's samples on Spark (LSN mode); replace samples_<tenant> with the verified
    ones and this tenant's Spark rows of the quarantine table with the failed ones (no commit there
    when it has none of them and none failed). Returns (samples, quarantined).

    Spark's commits are not fenced (`seqlake.tableformat.forgets`): right after each, the rows of users a
    forget removed after the job's read are deleted from what it wrote."""
    plan = rebuild_plan(config, tenant, "lsn")
    point = read_point(plan.history)  # history as loaded first, before any read
    results = reconstruct_with_spark(spark, config, tenant, "lsn", plan)
    kill_point("samples_rebuilt")
    samples = create_bucketed_table(config, samples_table_name(tenant), sequence_table_schema(tenant))  # if new
    # Counted as the rows pass to the writer: the rebuild runs once.
    counts = Observation(f"seqlake-samples-{tenant.name}")
    observed = results.observe(counts, F.count_if("ok").alias("ok"), F.count_if(~F.col("ok")).alias("failed"))
    names = sequence_table_schema(tenant).names
    observed.where("ok").select(*names).writeTo(spark_name(config, samples_table_name(tenant))).options(
        **BUCKET_WRITE
    ).overwrite(F.lit(True))
    remove_missed(samples, point)
    counted = counts.get
    verified, failures = int(counted["ok"] or 0), int(counted["failed"] or 0)
    engine = quarantine_engine("spark", "lsn")
    quarantine = create_bucketed_table(config, QUARANTINE, QUARANTINE_SCHEMA)  # if new
    if failures or may_hold(quarantine, And(EqualTo("tenant", tenant.name), EqualTo("engine", engine))):
        # Rare: the rows that failed are rebuilt again (from the same plan) rather than all kept.
        failed = results.where(~F.col("ok")) if failures else results.limit(0)
        failed.select(
            F.lit(tenant.name).alias("tenant"),
            "request_id",
            "user_id",
            F.lit(engine).alias("engine"),
            F.coalesce("reason", F.lit("unverified")).alias("reason"),
            "expected_checksum",
            "actual_checksum",
            "expected_length",
            "actual_length",
        ).select(*QUARANTINE_SCHEMA.names).writeTo(spark_name(config, QUARANTINE)).overwrite(
            (F.col("tenant") == tenant.name) & (F.col("engine") == engine)
        )
        remove_missed(quarantine, point, And(EqualTo("tenant", tenant.name), EqualTo("engine", engine)))
    return verified, failures
