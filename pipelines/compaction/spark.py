"""Window-close compaction on Spark: closed windows' landing rows become one sorted run.

One pass per batch (`seqlake.pipelines.compaction.plan`): one read of the windows' landing rows, one
aggregation grouped by (window, user, feature group, item) with the declared merge operators, one run
holding exactly those windows, one detail write, and the plan's commit, which records them and the
LSN frontier (three columns of the same rows and of the landing quarantine). The events and their
groups are cached for the pass: one action counts both from the groups, then the run's write reads
the groups and the detail write the events.

Steps, each safe to repeat: deduplicate (an event id counts in the earliest landing window it arrived
in, at its first arrival; ids that published windows hold drop), aggregate, write the run's files,
keep the original events in the detail table, publish. A window already published is a no-op; a job
killed anywhere leaves nothing visible and succeeds when run again; of two jobs racing on one window,
one publishes and the other finds it published.
"""

from __future__ import annotations

import functools
from dataclasses import replace
from typing import TYPE_CHECKING

from pyiceberg.expressions import In

from seqlake.core.config import Config
from seqlake.engines.catalog import spark_name
from seqlake.pipelines.compaction.aggregation import first_arrivals_sql
from seqlake.pipelines.compaction.plan import (
    CompactionResult,
    batch_run_id,
    batch_to_publish,
    commit_merge,
    crash_at,
    merge_to_do,
    publish_batch,
    replanning,
    window_lsns,
)
from seqlake.pipelines.compaction.quarantine import split_batch_spark
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.pipelines.landing.tables import LandingPaths, spark_scan
from seqlake.pipelines.tables import DETAIL, HISTORY
from seqlake.tableformat.evolution import by_projection, known_field_ids, select_list
from seqlake.tableformat.forgets import missed_users, remove_missed
from seqlake.tableformat.registry import files_of_runs
from seqlake.tableformat.schema import history_arrow_schema, history_read_schema

if TYPE_CHECKING:  # pyspark is imported by the Spark steps only
    from pyspark.sql import DataFrame, SparkSession

VECTORIZED_PARQUET = "spark.sql.parquet.enableVectorizedReader"


def _of_windows(table: DataFrame, windows: list[int]) -> DataFrame:
    """The rows of a window-partitioned table in the windows (ascending): the range prunes
    partitions, the set keeps it exact."""
    window = table["window_id"]
    return table.where((window >= windows[0]) & (window <= windows[-1]) & window.isin(windows))


def batch_events(
    spark: SparkSession,
    config: Config,
    paths: LandingPaths,
    windows: list[int],
    published: set[int],
    landing: DataFrame | None = None,
) -> DataFrame:
    """The batch's events, each once.

    An event id belongs to the earliest landing window it arrived in (within the detail retention),
    and within a window to its first arrival: a pure function of the landing tier, so windows
    compacted in any order, in any batches, or at the same time, agree on where each event goes. Ids
    that a published window holds in detail drop too (an old event imported again after its window
    was published). `landing`: the landing table as the caller loaded it already (the batch's rows
    and the earlier windows' come from that one load)."""
    from pyspark.sql import functions as F

    retention = config.layout.detail_retention_windows
    if landing is None:
        landing = spark.read.format("delta").load(paths.events)
    window = F.col("window_id")
    # View names carry the batch: batches compacted in parallel threads of one session stay apart.
    view = f"_seqlake_landing_{batch_run_id(windows)}"
    _of_windows(landing, windows).createOrReplaceTempView(view)
    events = spark.sql(first_arrivals_sql(view, retention)).alias("e")
    e_window, e_id = F.col("e.window_id"), F.col("e.event_id")
    # Arrivals in earlier windows outside the batch (published ones, or ones left for later).
    earlier = (
        landing.where((window >= windows[0] - retention) & (window < windows[-1]) & ~window.isin(windows))
        .select("event_id", "window_id")
        .alias("x")
    )
    seen_earlier = (F.col("x.event_id") == e_id) & (F.col("x.window_id") < e_window)
    seen_earlier &= F.col("x.window_id") >= e_window - retention
    events = events.join(earlier, seen_earlier, "left_anti")
    # Only published windows' detail counts: detail rows of a window whose commit failed are not
    # published events and must not hide an event from the window it belongs to.
    elsewhere = sorted(w for w in published if w >= windows[0] - retention and w not in windows)
    if elsewhere:
        held = spark.table(spark_name(config, DETAIL)).where(window.isin(elsewhere)).select("event_id", "window_id")
        held = held.alias("d")
        in_detail = (F.col("d.event_id") == e_id) & (F.col("d.window_id") >= e_window - retention)
        events = events.join(held, in_detail, "left_anti")
    return events.select(*landing_schema(config).names)


def window_events(
    spark: SparkSession, config: Config, paths: LandingPaths, window_id: int, published: set[int]
) -> DataFrame:
    """One window's events, each once (see `batch_events`)."""
    return batch_events(spark, config, paths, [window_id], published)


def compact_window(
    spark: SparkSession,
    config: Config,
    paths: LandingPaths,
    window_id: int,
    *,
    fail_at: str | None = None,
) -> CompactionResult:
    """Publish closed window `window_id` as one sorted run (or do nothing if it is published)."""
    return compact_batch(spark, config, paths, [window_id], fail_at=fail_at)


def compact_batch(
    spark: SparkSession,
    config: Config,
    paths: LandingPaths,
    windows: list[int],
    *,
    fail_at: str | None = None,
) -> CompactionResult:
    """Publish closed windows as one sorted run that holds exactly them; windows published already
    are left out (all of them: a no-op)."""
    return replanning("compaction", lambda: _compact_batch(spark, config, paths, windows, fail_at))


def _compact_batch(
    spark: SparkSession, config: Config, paths: LandingPaths, windows: list[int], fail_at: str | None
) -> CompactionResult:
    from pyspark.sql import functions as F

    from seqlake.pipelines.compaction.quarantine import compaction_quarantine_table
    from seqlake.pipelines.compaction.spark_runs import write_run_with_spark

    plan = batch_to_publish(config, windows)
    if isinstance(plan, CompactionResult):
        return plan  # every window is published already
    history, detail, todo, run_id, point = plan.history, plan.detail, plan.windows, plan.run_id, plan.point

    # One load of the landing table (one Delta log read) for the batch's events and its LSN frontier.
    # The batch's landing rows are not cached: the events are, and the frontier reads three columns.
    landing = spark.read.format("delta").load(paths.events)
    events = batch_events(spark, config, paths, todo, plan.published, landing)
    # Users of a forget under way (it cleaned detail, not history yet) stay out of the batch.
    dropping = missed_users(history, point, detail.refresh()).to_pylist()
    events = (events.where(~F.col("user_id").isin(dropping)) if dropping else events).persist()
    split = None
    try:
        split = split_batch_spark(spark, config, events, f"_seqlake_events_{run_id}", todo)
        crash_at("before_write", fail_at)
        files = write_run_with_spark(split.rows, history, config, run_id)
        split.run_written()
        crash_at("after_write", fail_at)
        # Replace the windows' partitions, never append: a re-run after a failed commit, or a job
        # racing on the same windows, replaces the same events instead of adding them again.
        split.kept.writeTo(spark_name(config, DETAIL)).option(
            "snapshot-property.seqlake.window-id", str(todo[-1])
        ).overwrite(F.col("window_id").isin(todo))
        # Spark's commits are not fenced: a forget that reached these tables meanwhile is undone here.
        scope = In("window_id", todo)
        remove_missed(detail, point, scope)
        if split.quarantined:
            remove_missed(compaction_quarantine_table(config), point, scope)
        crash_at("after_detail", fail_at)
        own_lsns = window_lsns(spark_scan(spark, {paths.events: _of_windows(landing, todo)}), paths, todo)
    finally:
        if split is not None:
            split.release()
        events.unpersist()
    result = publish_batch(history, todo, files, own_lsns, split.events, fail_at=fail_at, point=point)
    return replace(result, quarantined=split.quarantined) if result.published else result


def merge_runs_if_needed(spark: SparkSession, config: Config) -> str | None:
    """Merge the runs the merge policy picks (the newest ones) into one that holds the union of
    their window sets. Returns the new run's id, or None when there was
    nothing to merge or a concurrent commit changed the runs first (its files are then removed)."""
    from seqlake.pipelines.compaction.spark_runs import write_run_with_spark

    merge = merge_to_do(config)
    if merge is None:
        return None
    history = merge.history
    paths = [f.file_path for f in files_of_runs(history, set(merge.runs))]
    names = history_arrow_schema(config).names
    target, loose = history_read_schema(history)
    # Spark's vectorized Parquet reader knows no BYTE_STREAM_SPLIT pages (float columns of older
    # history files or of LayoutPolicy.byte_stream_split, SPEC "Encodings"); its row reader does.
    # Set for this job's read only.
    vectorized = VECTORIZED_PARQUET
    previous = spark.conf.get(vectorized)
    assert previous is not None  # a SQL configuration with a default value
    spark.conf.set(vectorized, "false")
    try:
        # Files of one schema are read together, each as the current schema (seqlake.tableformat.evolution).
        parts = [
            spark.read.parquet(*uris).selectExpr(*select_list(found, names))
            for found, uris in by_projection(paths, target, loose, known_field_ids(history))
        ]
        rows = (
            functools.reduce(lambda a, b: a.unionByName(b), parts)
            if parts
            else spark.createDataFrame([], spark.table(spark_name(config, HISTORY)).select(*names).schema)
        )
        files = write_run_with_spark(rows, history, config, merge.run_id)
    finally:
        spark.conf.set(vectorized, previous)
    return commit_merge(merge, files)
