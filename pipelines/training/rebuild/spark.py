"""Reconstruction on Spark: one task per bucket runs the in-process rebuild of that bucket.

The training table and history share bucket(N, user_id). The driver plans the job's reads once
(`Reconstruction.plan`: the pointer files by bucket, history's data files by bucket, detail's
files by window, the tables' metadata without their catalog) and holds nothing else. The job is
one stage: a range of bucket numbers, one partition each, and `mapInArrow`; each task rebuilds
its bucket exactly as the in-process engine does (`Reconstruction.of_bucket`: the same reads with
pyarrow, `gather.gather_sequences`, the same row digests, checksums and verdicts, batch by batch)
and yields Arrow batches of results (`reconstruct_with_spark`: what a Spark training job reads).
Nothing joins pointers to history rows, history is never shuffled, and no Python runs per row
(the plans are read in tests/pipelines/training/test_late_materialization.py); a task holds one
batch of its bucket's pointers and their users' rows at a time.

`write_spark_samples` (`seqlake samples --engine spark`) runs the same stage with the in-process
job's writer at its end: each task writes its bucket's verified samples as data files of
samples_<tenant> (pyiceberg's Parquet writer, as the in-process job does), and only the files'
metadata and the failures return to the driver, which commits once, fenced against forgets. The
lists never pass through the JVM, so its heap holds the plan and a few rows per bucket. The open
window's rebuild in Spark SQL (`open_window_as_of_bounds`) stays for Spark's backfill.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator

import pyarrow as pa
from pyiceberg.expressions import AlwaysTrue
from pyiceberg.table import Table
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_schema

from seqlake.core.config import Config
from seqlake.engines.catalog import spark_name
from seqlake.pipelines.compaction.aggregation import aggregation_sql
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.faults import kill_point
from seqlake.pipelines.tables import DETAIL, HISTORY, load_existing_table
from seqlake.pipelines.training.rebuild.bucket_files import BucketFiles
from seqlake.pipelines.training.rebuild.duckdb import VERDICT_SCHEMA, RebuildPlan, Reconstruction, static_table
from seqlake.pipelines.training.rebuild.plan import Mode, quarantine_engine
from seqlake.pipelines.training.rebuild.samples import replace_quarantine
from seqlake.pipelines.training.sequence import Tenant
from seqlake.pipelines.training.tables import (
    QUARANTINE_SCHEMA,
    create_bucketed_table,
    samples_table_name,
    sequence_table_schema,
    training_table_name,
)
from seqlake.tableformat.forgets import read_point

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
    schema = result_schema(tenant)
    return per_bucket(spark, plan, lambda bucket: bucket_results(plan, bucket, schema), schema)


def per_bucket(
    spark: SparkSession, plan: RebuildPlan, task: Callable[[int], Iterator[pa.RecordBatch]], schema: pa.Schema
) -> DataFrame:
    """A job of one stage: a range of positions, one partition each, and `task(bucket)`'s batches
    (in `schema`) for the bucket of pointers at that position, in `mapInArrow`."""
    buckets = plan.pointers.buckets

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for position in batch.column(0).to_pylist():
                yield from task(buckets[position])

    # One partition per bucket: a task is one bucket, whose rows its output keeps together.
    positions = spark.range(0, len(buckets), 1, max(1, len(buckets)))
    return positions.mapInArrow(run, from_arrow_schema(schema))


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


# What a samples task returns to the driver: its bucket's data files (uncommitted) and failures.
FILE_ROWS = pa.schema(
    [
        pa.field("bucket", pa.int32(), nullable=False),
        pa.field("samples", pa.int64(), nullable=False),
        pa.field("failed", pa.int64(), nullable=False),
        pa.field("data_files", pa.binary(), nullable=False),  # pickled pyiceberg DataFiles
        pa.field("quarantined", pa.binary(), nullable=False),  # QUARANTINE_SCHEMA rows, Arrow IPC
    ]
)


def write_spark_samples(spark: SparkSession, config: Config, tenant: Tenant) -> tuple[int, int]:
    """Rebuild the tenant's samples on Spark (LSN mode) and replace samples_<tenant> with the
    verified ones, and this tenant's Spark rows of the quarantine table with the failed ones (no
    commit there when it has none of them and none failed). Returns (samples, quarantined).

    One task per bucket rebuilds it (`bucket_results`' rebuild) and writes its verified samples as
    the in-process job does, data files of its bucket through pyiceberg's writer; only the files'
    metadata and the failures come back, and the driver commits once, fenced against forgets
    (`seqlake.tableformat.forgets`) like the in-process job."""
    plan = rebuild_plan(config, tenant, "lsn")
    point = read_point(plan.history)  # history as loaded first, before any read
    table = create_bucketed_table(config, samples_table_name(tenant), sequence_table_schema(tenant))  # if new
    rows = samples_files(spark, plan, table).collect() if plan.pointers.buckets else []
    kill_point("samples_rebuilt")
    out = BucketFiles(table, config.layout.bucket_count, writers=1)
    out.files = [f for r in rows for f in pickle.loads(r["data_files"])]
    failures = [pa.ipc.open_stream(r["quarantined"]).read_all() for r in rows if r["failed"]]
    out.commit(point, replacing=AlwaysTrue())
    kill_point("samples_committed")
    engine = quarantine_engine("spark", "lsn")
    replace_quarantine(config, tenant.name, [engine], [f.cast(QUARANTINE_SCHEMA) for f in failures], point)
    return sum(r["samples"] for r in rows), sum(r["failed"] for r in rows)


def samples_files(spark: SparkSession, plan: RebuildPlan, table: Table) -> DataFrame:
    """The samples job's stage: per bucket, its verified samples written as uncommitted data files
    of `table` (samples_<tenant>), and one FILE_ROWS row for the driver."""
    target, count = static_table(table), plan.config.layout.bucket_count
    return per_bucket(spark, plan, lambda bucket: iter([_write_bucket(plan, bucket, target, count)]), FILE_ROWS)


def _write_bucket(plan: RebuildPlan, bucket: int, table: Table, bucket_count: int) -> pa.RecordBatch:
    """One bucket rebuilt and its verified samples written: the row for the driver (FILE_ROWS)."""
    rebuild = Reconstruction.of_bucket(plan, bucket)
    engine = pa.scalar(quarantine_engine("spark", plan.mode))
    samples = failed = 0
    failures = []
    try:
        with BucketFiles(table, bucket_count, writers=1) as out:
            for result in rebuild.batches([bucket]):
                out.write(result.samples)
                samples += result.samples.num_rows
                if result.quarantined.num_rows:
                    failed += result.quarantined.num_rows
                    rows = result.quarantined  # rebuilt as the in-process engine does: named as Spark's
                    named = pa.repeat(engine, rows.num_rows)
                    failures.append(rows.set_column(rows.schema.get_field_index("engine"), "engine", named))
            out.finish()
            files = out.files
    finally:
        rebuild.database.close()
    sink = pa.BufferOutputStream()
    quarantined = pa.concat_tables(failures) if failures else QUARANTINE_SCHEMA.empty_table()
    with pa.ipc.new_stream(sink, QUARANTINE_SCHEMA) as stream:
        stream.write_table(quarantined.cast(QUARANTINE_SCHEMA))
    return pa.RecordBatch.from_pylist(
        [
            {
                "bucket": bucket,
                "samples": samples,
                "failed": failed,
                "data_files": pickle.dumps(files),
                "quarantined": sink.getvalue().to_pybytes(),
            }
        ],
        schema=FILE_ROWS,
    )
