"""The history reader for Spark batch jobs: the same selections as `seqlake.tableformat.reader.Selection`, as
DataFrame operations that Iceberg pushes down (filters on user_id, feature_group, event_ts, lsn; a
frontier as one condition per source partition, `Frontier.sql`)."""

from __future__ import annotations

from collections.abc import Iterable

from pyspark.sql import DataFrame, SparkSession, Window
from pyspark.sql import functions as F

from seqlake.core.config import Config
from seqlake.core.errors import SchemaError
from seqlake.engines.catalog import spark_name
from seqlake.pipelines.tables import HISTORY
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
    if selection.top_k is not None:
        newest = Window.partitionBy("user_id").orderBy(*(F.col(c).desc() for c in SEQUENCE_ORDER))
        df = df.withColumn("_rank", F.row_number().over(newest)).where(F.col("_rank") <= selection.top_k)
    columns = list(dict.fromkeys(["user_id", *SEQUENCE_ORDER, *(selection.columns or df.columns)]))
    return df.select(*[c for c in columns if c != "_rank"])


def order_sequence(df: DataFrame, newest_first: bool = False) -> DataFrame:
    """Rows in sequence order per user (oldest first unless `newest_first`)."""
    keys = [F.col(c).desc() if newest_first else F.col(c).asc() for c in SEQUENCE_ORDER]
    return df.orderBy("user_id", *keys)
