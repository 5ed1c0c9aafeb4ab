"""Backfills on Spark: label pointers join history bucket by bucket, without shuffling history.

The label rows and their frontiers at ts (`backfill.ArrivalFrontiers`, one ASOF join per batch)
are first written in-process to an Iceberg table bucketed like history (`write_label_pointers`);
Spark then joins it with history on user_id as a storage-partitioned join, applies the semantics
of `pipelines/training/backfill/plan.py` as filters, rebuilds the open window from detail with the
compaction SQL (arrival), keeps the newest `max_length` by a window rank, builds the list columns
in one grouped aggregation, and counts leakage the same way. DataFrame operations and built-in
functions only.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_type

from seqlake.core.config import Config
from seqlake.engines.catalog import spark_name
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.tables import load_existing_table
from seqlake.pipelines.training.backfill.plan import AsOf, Backfill, LeakageReport
from seqlake.pipelines.training.rebuild.spark import history_frame, open_window_as_of_bounds
from seqlake.pipelines.training.sequence import ORDER_KEYS, Tenant
from seqlake.pipelines.training.tables import SEQUENCE, create_bucketed_table, drop_tables
from seqlake.tableformat.forgets import read_point, remove_missed
from seqlake.tableformat.frontier import spark_covered

# The pointer table's own columns (underscored: a label table may have a lsn_bound of its own).
POINTER_COLUMNS = ("_row", "_ts", "_lsn_bound", "_open_window")


def write_label_pointers(
    config: Config, labels: str | Path | pa.Table, tenant: Tenant, name: str, ts_column: str = "ts"
) -> list[str]:
    """The label rows with `_row`, `_ts` and their frontiers at ts (`lsn_bound`, `open_window`) in
    the Iceberg table `name` (as `_lsn_bound`, `_open_window`), bucketed like history (replaced).
    Returns the label's own columns."""
    job = Backfill(config, labels, tenant, ts_column=ts_column)
    try:
        drop_tables(config, [name])
        reader = job.con.cursor().execute(
            "SELECT * EXCLUDE (_bucket) FROM _labels JOIN _label_buckets USING (_row) ORDER BY _bucket, user_id"
        )
        transaction = None
        for batch in reader.to_arrow_reader(64 * 1024):
            rows = pa.Table.from_batches([batch])
            bounds, windows = job.frontiers.at(rows["_ts"])
            rows = rows.append_column("_lsn_bound", bounds).append_column("_open_window", windows)
            if transaction is None:
                transaction = create_bucketed_table(config, name, rows.schema).transaction()
            transaction.append(rows)
        if transaction is not None:
            transaction.commit_transaction()
        return job.columns
    finally:
        job.close()


def label_candidates(spark: SparkSession, config: Config, tenant: Tenant, pointers: str, as_of: AsOf) -> DataFrame:
    """The history rows (and, for arrival, the rebuilt open window) each label row may hold, before the
    newest `max_length` are kept: a storage-partitioned join of the label pointers and history."""
    keys = spark.table(spark_name(config, pointers)).select(
        "user_id", "_row", "_ts", F.col("_lsn_bound").alias("lsn_bound"), F.col("_open_window").alias("open_window")
    )
    history = (
        history_frame(spark, config)
        .where(F.col("feature_group").isin(list(tenant.feature_groups)))
        .select("user_id", *tenant.read_columns())
    )
    joined = keys.hint("merge").join(history, "user_id")  # shared buckets: no shuffle of history
    columns = ["_row", "lsn_bound", *dict.fromkeys([*tenant.model_columns, *ORDER_KEYS])]
    if as_of == "event-time":
        return joined.where(F.col("event_ts") < F.col("_ts")).select(*columns)
    visible = joined.where((F.col("window_id") != F.col("open_window")) & spark_covered("lsn_bound"))
    rebuilt = open_window_as_of_bounds(spark, config, tenant, keys, "_row")
    rebuilt = rebuilt.join(keys.select("_row", "lsn_bound"), "_row").select(*columns)
    return visible.select(*columns).unionByName(rebuilt)


def _newest(candidates: DataFrame, tenant: Tenant) -> DataFrame:
    newest_first = Window.partitionBy("_row").orderBy(*(F.col(k).desc() for k in ORDER_KEYS))
    return candidates.withColumn("_rank", F.row_number().over(newest_first)).where(F.col("_rank") <= tenant.max_length)


def backfill_with_spark(
    spark: SparkSession, config: Config, tenant: Tenant, pointers: str, columns: list[str], as_of: AsOf
) -> tuple[DataFrame, LeakageReport]:
    """The label rows (`columns`) with the tenant's `seq_` list columns, and the leakage report."""
    model = tenant.model_columns
    kept = _newest(label_candidates(spark, config, tenant, pointers, as_of), tenant)
    lists = kept.groupBy("_row").agg(
        F.array_sort(F.collect_list(F.struct((-F.col("_rank")).alias("_ord"), *model))).alias("_rows")
    )
    seq = [f"{SEQUENCE}{c}" for c in model]
    labels = spark.table(spark_name(config, pointers))
    out = labels.select("_row", *columns).join(
        lists.select("_row", *(F.col("_rows")[c].alias(s) for c, s in zip(model, seq, strict=True))), "_row", "left"
    )
    for field, name in zip(tenant.schema, seq, strict=True):
        out = out.withColumn(name, F.coalesce(F.col(name), F.array().cast(from_arrow_type(pa.list_(field.type)))))
    late = _newest(label_candidates(spark, config, tenant, pointers, "event-time"), tenant)
    per_label = late.where(~spark_covered("lsn_bound")).groupBy("_row").count()
    totals = per_label.agg(F.count("*").alias("labels"), F.sum("count").alias("rows")).collect()[0]
    report = LeakageReport(labels.count(), int(totals["labels"] or 0), int(totals["rows"] or 0))
    return out.drop("_row"), report


def write_spark_backfill(
    spark: SparkSession,
    config: Config,
    labels: str | Path | pa.Table,
    tenant: Tenant,
    as_of: AsOf = "event-time",
    out: str | None = None,
    ts_column: str = "ts",
) -> tuple[int, LeakageReport]:
    """`write_backfill` on Spark: the output table replaced, bucketed like history."""
    name = out or f"backfill_{tenant.name}"
    pointers = f"backfill_pointers_{tenant.name}"
    history, _ = history_tables(config)
    point = read_point(history)  # before the first read
    columns = write_label_pointers(config, labels, tenant, pointers, ts_column)
    try:
        rows, report = backfill_with_spark(spark, config, tenant, pointers, columns, as_of)
        rows.writeTo(spark_name(config, name)).partitionedBy(
            F.bucket(config.layout.bucket_count, "user_id")
        ).createOrReplace()
        # Spark's commit is not fenced, and its new table has no forget record: history's counts.
        remove_missed(load_existing_table(config, name), point, None, history)
        spark.catalog.refreshTable(spark_name(config, name))
    finally:
        drop_tables(config, [pointers])
    return report.label_rows, report
