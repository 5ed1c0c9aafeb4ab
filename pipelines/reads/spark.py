"""The history reader for Spark batch jobs: the same selections as `seqlake.tableformat.reader.Selection`, as
DataFrame operations that Iceberg pushes down (filters on user_id, feature_group, event_ts, lsn; a
frontier as one condition per source partition, `Frontier.sql`).

With `selection.end`, no row holds an event from `end` on (`seqlake.pipelines.reads.bounded`'s rule):
each (user, window) holding a row with event_ts < end <= its latest event (`backfill.spark.latest_event`)
is rebuilt from the detail table's events before `end` by the compaction's aggregation SQL, and
where that window's detail has expired those rows are left out (`withheld_df` lists them)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

from pyspark.sql import Column, DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from seqlake.core.config import Config
from seqlake.core.errors import SchemaError
from seqlake.engines.catalog import spark_name
from seqlake.pipelines.tables import DETAIL, HISTORY
from seqlake.tableformat.reader import SEQUENCE_ORDER, Selection


def history_df(
    spark: SparkSession, config: Config, selection: Selection | None = None, user_ids: Iterable[int] | None = None
) -> DataFrame:
    """Selected history rows of `user_ids` (all users if None) with `user_id`, the sequence keys and
    the selected columns. Top-K keeps each user's newest K rows; order rows with `order_sequence`."""
    selection = selection or Selection()
    df = spark.table(spark_name(config, HISTORY))
    unknown = [c for c in selection.columns or () if c not in df.columns]
    groups = [g for g in selection.feature_groups or () if g not in config.feature_groups]
    if unknown or groups:
        raise SchemaError(f"unknown columns {unknown} / feature groups {groups} for the history table")
    if user_ids is not None:
        df = df.where(F.col("user_id").isin([int(u) for u in user_ids]))
    if selection.feature_groups is not None:
        df = df.where(F.col("feature_group").isin(list(selection.feature_groups)))
    if selection.start is not None:
        df = df.where(F.col("event_ts") >= F.lit(selection.start))
    if selection.end is not None:
        df = df.where(F.col("event_ts") < F.lit(selection.end))
    if selection.as_of is not None:
        df = df.where(F.expr(selection.as_of.sql("source_partition", "lsn")))
    if selection.end is not None:
        df = (
            _bounded(spark, config, df, selection)
            .where(~F.col("_withheld"))
            .drop("_withheld")
            .where(_selected(selection))
        )
    if selection.top_k is not None:
        newest = Window.partitionBy("user_id").orderBy(*(F.col(c).desc() for c in SEQUENCE_ORDER))
        df = df.withColumn("_rank", F.row_number().over(newest)).where(F.col("_rank") <= selection.top_k)
    columns = list(dict.fromkeys(["user_id", *SEQUENCE_ORDER, *(selection.columns or df.columns)]))
    return df.select(*[c for c in columns if c != "_rank"])


def withheld_df(
    spark: SparkSession, config: Config, selection: Selection, user_ids: Iterable[int] | None = None
) -> DataFrame:
    """The rows `history_df` leaves out under `selection.end`: they merged events from `end` on and
    their window's detail has expired (count them: `.count()`)."""
    if selection.end is None:
        return spark.table(spark_name(config, HISTORY)).limit(0)
    rows = history_df(spark, config, replace(selection, end=None, columns=None, top_k=None), user_ids)
    rows = rows.where(F.col("event_ts") < F.lit(selection.end))
    return _bounded(spark, config, rows, selection).where("_withheld").drop("_withheld")


def _selected(selection: Selection) -> Column:
    """The selection's row conditions (rebuilt rows are checked against them again)."""
    condition = F.lit(True)
    if selection.feature_groups is not None:
        condition &= F.col("feature_group").isin(list(selection.feature_groups))
    if selection.start is not None:
        condition &= F.col("event_ts") >= F.lit(selection.start)
    if selection.as_of is not None:
        condition &= F.expr(selection.as_of.sql("source_partition", "lsn"))
    return condition


def _bounded(spark: SparkSession, config: Config, rows: DataFrame, selection: Selection) -> DataFrame:
    """`rows` (event_ts < end) as of `end`: rows with no event from `end` on as they are, the windows
    holding one rebuilt, rows of expired windows flagged `_withheld` (a rebuilt row never is)."""
    from seqlake.pipelines.compaction.aggregation import aggregation_sql
    from seqlake.pipelines.reads.bounded import detail_table
    from seqlake.pipelines.training.backfill.spark import latest_event
    from seqlake.pipelines.training.rebuild.duckdb import detail_files

    end = F.lit(selection.end)
    detail = detail_table(config)
    held = sorted(detail_files(detail)) if detail is not None else []
    rows = rows.withColumn("_spans", latest_event(config) >= end)
    pairs = rows.where("_spans").select("user_id", "window_id").distinct()
    rebuilt_pairs = pairs.where(F.col("window_id").isin(held)) if held else pairs.limit(0)
    kept = rows.join(rebuilt_pairs, ["user_id", "window_id"], "left_anti")
    columns = rows.columns[:-1]
    if detail is None:
        return kept.select(*columns, F.col("_spans").alias("_withheld"))
    events = spark.table(spark_name(config, DETAIL)).join(rebuilt_pairs, ["user_id", "window_id"])
    view = "_seqlake_history_until"
    events.where(F.col("event_ts") < end).createOrReplaceTempView(view)
    rebuilt = spark.sql(aggregation_sql(config, view, group_by_extra=("window_id",)))
    rebuilt = rebuilt.select(*(F.col(c).cast(rows.schema[c].dataType) for c in columns))
    kept = kept.select(*columns, F.col("_spans").alias("_withheld"))
    return kept.unionByName(rebuilt.withColumn("_withheld", F.lit(False)))


def order_sequence(df: DataFrame, newest_first: bool = False) -> DataFrame:
    """Rows in sequence order per user (oldest first unless `newest_first`)."""
    keys = [F.col(c).desc() if newest_first else F.col(c).asc() for c in SEQUENCE_ORDER]
    return df.orderBy("user_id", *keys)
