"""Backfills on Spark: label pointers join history bucket by bucket, without shuffling history.

The label rows and their frontiers at ts (`backfill.ArrivalFrontiers`, one ASOF join per batch)
are first written in-process to an Iceberg table bucketed like history (`write_label_pointers`);
Spark then joins it with history on user_id as a storage-partitioned join, applies the semantics
of `pipelines/training/backfill/plan.py` as filters, rebuilds from detail with the compaction SQL
the open window (arrival) or the windows holding rows that merged events from ts on (event
time), keeps the newest `max_length` by a window rank, builds the list columns in one grouped
aggregation, and checks the emitted rows for leakage the same way. DataFrame operations and
built-in functions only.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import from_arrow_type

from seqlake.core.config import Config
from seqlake.engines.catalog import spark_name
from seqlake.pipelines.compaction.aggregation import aggregation_sql
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.tables import DETAIL, load_existing_table
from seqlake.pipelines.training.backfill.plan import LEAK_COLUMNS, AsOf, Backfill, LeakageReport
from seqlake.pipelines.training.rebuild.duckdb import detail_files
from seqlake.pipelines.training.rebuild.spark import history_frame, open_window_as_of_bounds
from seqlake.pipelines.training.sequence import ORDER_KEYS, Tenant
from seqlake.pipelines.training.tables import SEQUENCE, create_bucketed_table, drop_tables
from seqlake.tableformat.forgets import read_point, remove_missed
from seqlake.tableformat.frontier import spark_covered

# The pointer table's own columns (underscored: a label table may have a lsn_bound of its own).
POINTER_COLUMNS = ("_row", "_ts", "_lsn_bound", "_open_window", "_arrived_before", "_arrived_by")


def write_label_pointers(
    config: Config,
    labels: str | Path | pa.Table,
    tenant: Tenant,
    name: str,
    ts_column: str = "ts",
    inclusive: bool = False,
) -> list[str]:
    """The label rows with `_row`, `_ts` and their frontiers at ts in the Iceberg table `name`,
    bucketed like history (replaced): `_lsn_bound` and `_open_window` as the sequence sees them
    (what arrived before ts, or by ts when `inclusive`), `_arrived_before` and `_arrived_by` for
    the leakage checks. Returns the label's own columns."""
    job = Backfill(config, labels, tenant, ts_column=ts_column)
    try:
        drop_tables(config, [name])
        reader = job.con.cursor().execute(
            "SELECT * EXCLUDE (_bucket) FROM _labels JOIN _label_buckets USING (_row) ORDER BY _bucket, user_id"
        )
        transaction = None
        for batch in reader.to_arrow_reader(64 * 1024):
            rows = pa.Table.from_batches([batch])
            before, before_window = job.frontiers.before(rows["_ts"])
            by, by_window = job.frontiers.at(rows["_ts"])
            bounds, windows = (by, by_window) if inclusive else (before, before_window)
            rows = rows.append_column("_lsn_bound", bounds).append_column("_open_window", windows)
            rows = rows.append_column("_arrived_before", before).append_column("_arrived_by", by)
            if transaction is None:
                transaction = create_bucketed_table(config, name, rows.schema).transaction()
            transaction.append(rows)
        if transaction is not None:
            transaction.commit_transaction()
        return job.columns
    finally:
        job.close()


def label_candidates(spark: SparkSession, config: Config, tenant: Tenant, pointers: str, as_of: AsOf) -> DataFrame:
    """The rows each label row may hold (history rows, and rows rebuilt from detail), before the
    newest `max_length` are kept: a storage-partitioned join of the label pointers and history.
    Under event time, rows withheld (see `exact_event_time`) are candidates marked `_withheld`."""
    keys = spark.table(spark_name(config, pointers)).select(
        "user_id",
        "_row",
        "_ts",
        F.col("_lsn_bound").alias("lsn_bound"),
        F.col("_open_window").alias("open_window"),
    )
    history = (
        history_frame(spark, config)
        .where(F.col("feature_group").isin(list(tenant.feature_groups)))
        .select("user_id", *dict.fromkeys([*tenant.read_columns(), *LEAK_COLUMNS]))
    )
    joined = keys.hint("merge").join(history, "user_id")  # shared buckets: no shuffle of history
    columns = ["_row", *dict.fromkeys([*tenant.model_columns, *ORDER_KEYS, *LEAK_COLUMNS])]
    if as_of == "event-time":
        return exact_event_time(spark, config, tenant, keys, joined.where(F.col("event_ts") < F.col("_ts")), columns)
    visible = joined.where((F.col("window_id") != F.col("open_window")) & spark_covered("lsn_bound"))
    rebuilt = open_window_as_of_bounds(spark, config, tenant, keys, "_row").select(*columns)
    return visible.select(*columns).unionByName(rebuilt).withColumn("_withheld", F.lit(False))


def latest_event(config: Config) -> Column:
    """A history row's latest merged event time (`gather.latest_event_micros`'s rule for rows of
    files older than the column: a single event's own time, else the window's last microsecond)."""
    window_end = F.timestamp_micros((F.col("window_id") + 1) * config.layout.window_seconds * 1_000_000 - 1)
    unknown = F.when(F.col("event_count") <= 1, F.col("event_ts")).otherwise(F.greatest(window_end, F.col("event_ts")))
    return F.coalesce(F.col("last_event_ts"), unknown)


def exact_event_time(
    spark: SparkSession, config: Config, tenant: Tenant, keys: DataFrame, before: DataFrame, columns: list[str]
) -> DataFrame:
    """Event-time candidates: the rows before each label's ts that merged no event from ts on as
    they are; each (label, window) holding a row that did, rebuilt from the window's detail events
    before ts; where detail has expired, those rows withheld (`_withheld`, dropped by the caller)."""
    rows = before.withColumn("_spans", latest_event(config) >= F.col("_ts"))
    held = sorted(detail_files(history_tables(config)[1]))
    pairs = rows.where("_spans").select("_row", "user_id", "window_id", "_ts").distinct()
    rebuilt_pairs = pairs.where(F.col("window_id").isin(held))
    kept = rows.join(rebuilt_pairs.select("_row", "window_id"), ["_row", "window_id"], "left_anti")
    events = spark.table(spark_name(config, DETAIL)).where(F.col("feature_group").isin(list(tenant.feature_groups)))
    visible = events.join(rebuilt_pairs, ["user_id", "window_id"]).where(F.col("event_ts") < F.col("_ts"))
    view = f"_seqlake_backfill_until_{tenant.name}"
    visible.drop("_ts").createOrReplaceTempView(view)
    rebuilt = spark.sql(aggregation_sql(config, view, group_by_extra=("_row", "window_id")))
    rebuilt = rebuilt.select(*columns).withColumn("_withheld", F.lit(False))
    return kept.select(*columns, F.col("_spans").alias("_withheld")).unionByName(rebuilt)


def _newest(candidates: DataFrame, tenant: Tenant) -> DataFrame:
    newest_first = Window.partitionBy("_row").orderBy(*(F.col(k).desc() for k in ORDER_KEYS))
    return candidates.withColumn("_rank", F.row_number().over(newest_first)).where(F.col("_rank") <= tenant.max_length)


def backfill_with_spark(
    spark: SparkSession, config: Config, tenant: Tenant, pointers: str, columns: list[str], candidates: DataFrame
) -> tuple[DataFrame, LeakageReport]:
    """The label rows (`columns`) with the tenant's `seq_` list columns from their `candidates`
    (`label_candidates`, read twice: persist them), and the leakage report."""
    model = tenant.model_columns
    kept = _newest(candidates.where(~F.col("_withheld")), tenant)
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
    return out.drop("_row"), _leakage(config, kept, candidates, labels)


def _leakage(config: Config, kept: DataFrame, candidates: DataFrame, labels: DataFrame) -> LeakageReport:
    """`plan.leaks` over the emitted rows, summed in one aggregation."""
    frontiers = labels.select("_row", "_ts", "_arrived_before", "_arrived_by")
    rows = kept.join(frontiers, "_row")
    late = ~spark_covered("_arrived_by")
    at_ts = (~spark_covered("_arrived_before") & ~late) | (F.col("event_ts") == F.col("_ts"))
    merged = (latest_event(config) >= F.col("_ts")) & (F.col("event_ts") < F.col("_ts"))
    per_label = rows.groupBy("_row").agg(
        F.sum(late.cast("int")).alias("late"),
        F.sum(at_ts.cast("int")).alias("at"),
        F.sum(merged.cast("int")).alias("merged"),
    )
    totals = per_label.agg(
        F.sum(((F.col("late") + F.col("at") + F.col("merged")) > 0).cast("int")).alias("leaking"),
        F.sum("late").alias("late"),
        F.sum("at").alias("at"),
        F.sum("merged").alias("merged"),
    ).collect()[0]
    withheld = candidates.where("_withheld").count()
    return LeakageReport(
        labels.count(),
        int(totals["leaking"] or 0),
        int(totals["late"] or 0),
        int(totals["at"] or 0),
        int(totals["merged"] or 0),
        withheld,
    )


def write_spark_backfill(
    spark: SparkSession,
    config: Config,
    labels: str | Path | pa.Table,
    tenant: Tenant,
    as_of: AsOf = "event-time",
    out: str | None = None,
    ts_column: str = "ts",
    inclusive: bool = False,
) -> tuple[int, LeakageReport]:
    """`write_backfill` on Spark: the output table replaced, bucketed like history."""
    name = out or f"backfill_{tenant.name}"
    pointers = f"backfill_pointers_{tenant.name}"
    history, _ = history_tables(config)
    point = read_point(history)  # before the first read
    columns = write_label_pointers(config, labels, tenant, pointers, ts_column, inclusive)
    # Unpersisted at the end: Spark would serve a later run's same plan (same table names) from it.
    candidates = label_candidates(spark, config, tenant, pointers, as_of).persist()
    try:
        rows, report = backfill_with_spark(spark, config, tenant, pointers, columns, candidates)
        rows.writeTo(spark_name(config, name)).partitionedBy(
            F.bucket(config.layout.bucket_count, "user_id")
        ).createOrReplace()
        # Spark's commit is not fenced, and its new table has no forget record: history's counts.
        remove_missed(load_existing_table(config, name), point, None, history)
        spark.catalog.refreshTable(spark_name(config, name))
    finally:
        candidates.unpersist()
        drop_tables(config, [pointers])
    return report.label_rows, report
