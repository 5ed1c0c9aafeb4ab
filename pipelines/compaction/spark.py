"""Window-close compaction on Spark: closed windows' landing rows become one sorted run.

A batch is one closed window (the steady state) or many (a backlog: an import, a job that was down),
compacted in one pass: one read of their landing rows, one aggregation grouped by (window, user,
feature group, item) with the declared merge operators, one run holding exactly those windows, one
detail write and one Iceberg commit that records them and the LSN frontier.

Steps, each safe to repeat: deduplicate (an event id counts in the earliest landing window it arrived
in, at its first arrival; ids that published windows hold drop), aggregate, write the run's files,
keep the original events in the detail table, publish. A window already published is a no-op; a job
killed anywhere leaves nothing visible and succeeds when run again; of two jobs racing on one window,
one publishes and the other finds it published.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pyiceberg.exceptions import TableAlreadyExistsError
from pyiceberg.expressions import In
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import Table
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import IdentityTransform

from seqlake.core.config import Config
from seqlake.core.errors import ForgetCommitted, SeqlakeError, SimulatedCrash
from seqlake.engines.catalog import open_catalog, spark_name, table_identifier
from seqlake.pipelines.compaction.aggregation import first_arrivals_sql
from seqlake.pipelines.compaction.merge_policy import policy_of, runs_to_merge
from seqlake.pipelines.compaction.quarantine import split_batch_spark
from seqlake.pipelines.faults import kill_point
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.pipelines.landing.tables import LandingPaths, delta_exists
from seqlake.pipelines.tables import DETAIL, HISTORY
from seqlake.tableformat.evolution import by_projection, known_field_ids, select_list
from seqlake.tableformat.forgets import ReadPoint, inherited, missed_users, read_point, remove_missed
from seqlake.tableformat.frontier import Frontier
from seqlake.tableformat.registry import (
    RunRecord,
    RunsChanged,
    WindowsAlreadyPublished,
    check_matches_config,
    commit_runs,
    create_history_table,
    files_of_runs,
    live_runs,
    published_frontier,
    published_windows,
)
from seqlake.tableformat.schema import history_arrow_schema, history_read_schema, with_field_ids
from seqlake.tableformat.writer import open_output

log = logging.getLogger(__name__)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# pyspark is imported by the Spark steps only: the in-process engine (seqlake.pipelines.compaction.duckdb) and
# the readers share this module's planning and commits without the `spark` extra.

CRASH_POINTS = ("before_write", "after_write", "after_detail", "after_commit")
VECTORIZED_PARQUET = "spark.sql.parquet.enableVectorizedReader"
COMMIT_ATTEMPTS = 5  # a publication that loses a race re-decides on the new snapshot this many times


@dataclass(frozen=True)
class CompactionResult:
    window_id: int  # the batch's last window
    run_id: str
    published: bool  # False: the windows were published before (no-op)
    events: int = 0
    rows: int = 0
    files: int = 0
    windows: tuple[int, ...] = ()  # the windows the published run holds
    quarantined: int = 0  # events of groups whose aggregate did not fit (seqlake.pipelines.compaction.quarantine)


def window_run_id(window_id: int) -> str:
    return f"w{window_id}"


def batch_run_id(windows: list[int]) -> str:
    """`w<window>` for one window, `b<first>t<last>n<count>` for a batch of several."""
    if len(windows) == 1:
        return window_run_id(windows[0])
    return f"b{windows[0]}t{windows[-1]}n{len(windows)}"


def history_tables(config: Config) -> tuple[Table, Table]:
    """The history table and the detail table, created on first use."""
    catalog = open_catalog(config)
    history_id, detail_id = table_identifier(config, HISTORY), table_identifier(config, DETAIL)
    history = create_history_table(catalog, history_id, config)
    iceberg_schema = pyarrow_to_schema(with_field_ids(landing_schema(config)))
    if catalog.table_exists(detail_id):
        # The detail table holds landing rows: its columns follow the feature groups too.
        return history, check_matches_config(catalog.load_table(detail_id), config, schema=iceberg_schema)
    # By window only: a compaction replaces its windows' partitions. Not by user bucket as well: an
    # import's backlog spans thousands of small windows, and window x bucket partitions made one tiny
    # file each (most of a catch-up's time). Files are sorted by user, so a rebuild of some users'
    # events reads only the row groups that hold them.
    spec = PartitionSpec(
        PartitionField(
            source_id=iceberg_schema.find_field("window_id").field_id,
            field_id=1000,
            transform=IdentityTransform(),
            name="window_id",
        ),
    )
    order = SortOrder(
        SortField(source_id=iceberg_schema.find_field("user_id").field_id, transform=IdentityTransform()),
        SortField(source_id=iceberg_schema.find_field("event_ts").field_id, transform=IdentityTransform()),
    )
    properties = {"write.parquet.compression-codec": "zstd", **inherited(history)}
    try:
        detail = catalog.create_table(
            detail_id, schema=iceberg_schema, partition_spec=spec, sort_order=order, properties=properties
        )
    except TableAlreadyExistsError:
        detail = catalog.load_table(detail_id)
    return history, detail


def _crash(point: str, fail_at: str | None) -> None:
    """Fault injection for the tests: a simulated crash (an exception) at `fail_at`, or a real one, the
    process killed with SIGKILL, where the environment names the point: `SEQLAKE_KILL_AT=after_detail`
    (its first passage) or `after_detail#2` (its second: inside the second batch)."""
    kill_point(point)
    if fail_at == point:
        raise SimulatedCrash(f"simulated crash at {point}")


def _of_windows(table: DataFrame, windows: list[int]) -> DataFrame:
    """The rows of a window-partitioned table in the windows (ascending): the range prunes
    partitions, the set keeps it exact."""
    window = table["window_id"]
    return table.where((window >= windows[0]) & (window <= windows[-1]) & window.isin(windows))


def batch_landing(spark: SparkSession, paths: LandingPaths, windows: list[int]) -> DataFrame:
    """The landing rows of the windows (ascending)."""
    return _of_windows(spark.read.format("delta").load(paths.events), windows)


def batch_events(
    spark: SparkSession,
    config: Config,
    paths: LandingPaths,
    windows: list[int],
    published: set[int],
    landed: DataFrame | None = None,
) -> DataFrame:
    """The batch's events, each once.

    An event id belongs to the earliest landing window it arrived in (within the detail retention),
    and within a window to its first arrival: a pure function of the landing tier, so windows
    compacted in any order, in any batches, or at the same time, agree on where each event goes. Ids
    that a published window holds in detail drop too (an old event imported again after its window
    was published). `landed` is `batch_landing` of the windows when the caller holds it already."""
    from pyspark.sql import functions as F

    retention = config.layout.detail_retention_windows
    landing = spark.read.format("delta").load(paths.events)
    window = F.col("window_id")
    # View names carry the batch: batches compacted in parallel threads of one session stay apart.
    view = f"_seqlake_landing_{batch_run_id(windows)}"
    (batch_landing(spark, paths, windows) if landed is None else landed).createOrReplaceTempView(view)
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


def window_lsns(
    spark: SparkSession, paths: LandingPaths, windows: list[int], landed: DataFrame | None = None
) -> dict[int, int]:
    """Per source partition, the highest LSN of the windows' records (landed or quarantined). LSNs
    grow with arrival, so only these windows' partitions of the landing tier are read (`landed`: the
    windows' landing rows, when the caller holds them already)."""
    from pyspark.sql import functions as F

    highest: dict[int, int] = {}
    for path in (paths.events, paths.quarantine):
        if path == paths.events and landed is not None:
            records = landed
        elif delta_exists(spark, path):
            records = _of_windows(spark.read.format("delta").load(path), windows)
        else:
            continue
        rows = records.groupBy("source_partition").agg(F.max("lsn").alias("lsn")).collect()
        for row in rows:
            highest[row["source_partition"]] = max(highest.get(row["source_partition"], -1), row["lsn"])
    return highest


def lsn_frontier(history: Table, window_lsn: dict[int, int]) -> Frontier:
    """The frontier once the windows are published: per source partition, the highest LSN of their
    records or of what was published before."""
    return published_frontier(history).advanced(window_lsn)


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


def batch_to_publish(config: Config, windows: list[int]) -> tuple[Table, Table, set[int], list[int]]:
    """(history, detail, published windows, the requested windows not yet published), for either engine."""
    if not windows:
        raise SeqlakeError("no windows to compact")
    history, detail = history_tables(config)
    published = published_windows(history)
    return history, detail, published, sorted(set(windows) - published)


def merge_to_do(config: Config) -> tuple[Table, dict[str, RunRecord], list[int], str] | None:
    """(history, the runs to merge, the union of their windows, the merge's run id) when the merge
    policy (`seqlake.pipelines.compaction.merge_policy`) picks some; None otherwise. Shared by both engines.

    The registry lists runs oldest first and a merged run takes the place of the newest ones it
    replaces (it is registered last), so the list stays in age order."""
    history, _ = history_tables(config)
    live = live_runs(history)
    picked = runs_to_merge([record.rows for record in live.values()], policy_of(config))
    if picked == 0:
        return None
    runs = dict(list(live.items())[len(live) - picked :])
    windows = sorted({w for record in runs.values() for w in record.windows})
    return history, runs, windows, merge_run_id(windows)


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

    history, detail, published, todo = batch_to_publish(config, windows)
    if not todo:
        return CompactionResult(max(windows), batch_run_id(sorted(windows)), published=False)
    run_id = batch_run_id(todo)
    point = read_point(history)  # before the first read: the forgets this batch has seen

    # The batch's landing rows are read once: for its events and for its LSN frontier.
    landed = batch_landing(spark, paths, todo).persist()
    events = batch_events(spark, config, paths, todo, published, landed)
    # Users of a forget under way (it cleaned detail, not history yet) stay out of the batch.
    dropping = missed_users(history, point, detail.refresh()).to_pylist()
    events = (events.where(~F.col("user_id").isin(dropping)) if dropping else events).persist()
    split = None
    try:
        split = split_batch_spark(spark, config, events, f"_seqlake_events_{run_id}", todo)
        _crash("before_write", fail_at)
        files = write_run_with_spark(split.rows, history, config, run_id)
        _crash("after_write", fail_at)
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
        _crash("after_detail", fail_at)
        event_count = events.count() - split.quarantined
        own_lsns = window_lsns(spark, paths, todo, landed)
    finally:
        if split is not None:
            split.release()
        events.unpersist()
        landed.unpersist()
    result = publish_batch(history, todo, files, own_lsns, event_count, fail_at=fail_at, point=point)
    return replace(result, quarantined=split.quarantined) if result.published else result


def replanning(name: str, attempt: Callable[[], CompactionResult]) -> CompactionResult:
    """Run `attempt` (a batch's read, write and commit) again when a forget it did not see committed
    while it ran (ForgetCommitted: nothing of it was published); its next read sees the forget."""
    for _ in range(COMMIT_ATTEMPTS):
        try:
            return attempt()
        except ForgetCommitted as error:
            log.info("%s: %s; planning again", name, error)
    raise ForgetCommitted(f"{name}: forgets kept committing while it ran; run compact again")


def publish_batch(
    history: Table,
    windows: list[int],
    files: list,
    own_lsns: dict[int, int],
    event_count: int,
    *,
    fail_at: str | None = None,
    point: ReadPoint | None = None,
) -> CompactionResult:
    """Commit a written batch run (any engine); a lost race retries on the new snapshot, or removes
    the files when the windows were published by someone else. A forget that committed after the
    batch's read (`point`) and names a user the files hold raises ForgetCommitted (files removed):
    the batch plans again (`replanning`)."""
    run_id = batch_run_id(windows)
    row_count = sum(f.facts.row_count for f in files)
    record = RunRecord(run_id, "window" if len(windows) == 1 else "batch", windows, len(files), row_count)
    for _ in range(COMMIT_ATTEMPTS):
        properties = {
            "seqlake.window-id": str(windows[-1]),
            "seqlake.frontier": lsn_frontier(history, own_lsns).to_json(),
        }
        if len(windows) > 1:
            properties["seqlake.windows"] = json.dumps(windows)
        try:
            commit_runs(history, [(record, files)], snapshot_properties=properties, point=point)
            log.info("published run %s: windows %s, %d rows in %d files", run_id, windows, row_count, len(files))
            break
        except ForgetCommitted:
            delete_files([f.uri for f in files])
            raise
        except WindowsAlreadyPublished:
            # Another job published these windows first: ours becomes a no-op and leaves no file behind.
            log.info("run %s: windows %s were published by another job first", run_id, windows)
            delete_files([f.uri for f in files])
            return CompactionResult(windows[-1], run_id, published=False)
        except RunsChanged:
            log.info("run %s: the history table changed while committing; deciding again", run_id)
            history.refresh()  # another window or a merge committed first: decide again on the new state
    else:
        delete_files([f.uri for f in files])
        raise RunsChanged(f"windows {windows[0]}..{windows[-1]}: the history table kept changing; run compact again")
    _crash("after_commit", fail_at)
    return CompactionResult(windows[-1], run_id, True, event_count, row_count, len(files), tuple(windows))


def plan_batches(window_rows: dict[int, int], max_rows: int) -> list[list[int]]:
    """Windows (ascending) cut into batches of at most `max_rows` landing rows each; a window larger
    than the bound is a batch of its own. Bounds the memory and the size of each pass."""
    batches: list[list[int]] = []
    current: list[int] = []
    rows = 0
    for window in sorted(window_rows):
        if current and rows + window_rows[window] > max_rows:
            batches.append(current)
            current, rows = [], 0
        current.append(window)
        rows += window_rows[window]
    if current:
        batches.append(current)
    return batches


def merge_run_id(windows: list[int]) -> str:
    """`m<first>t<last>n<count>`: the count tells runs over the same span apart (a window published
    after a merge joins the next one)."""
    return f"m{windows[0]}t{windows[-1]}n{len(windows)}"


def merge_runs_if_needed(spark: SparkSession, config: Config) -> str | None:
    """Merge the runs the merge policy picks (the newest ones) into one that holds the union of
    their window sets. Returns the new run's id, or None when there was
    nothing to merge or a concurrent commit changed the runs first (its files are then removed)."""
    from seqlake.pipelines.compaction.spark_runs import write_run_with_spark

    todo = merge_to_do(config)
    if todo is None:
        return None
    history, runs, windows, run_id = todo
    point = read_point(history)
    paths = [f.file_path for f in files_of_runs(history, set(runs))]
    names = history_arrow_schema(config).names
    target, loose = history_read_schema(history)
    # Spark's vectorized Parquet reader knows no BYTE_STREAM_SPLIT pages (history's float columns,
    # SPEC "Encodings"); its row reader does. Set for this job's read only.
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
        files = write_run_with_spark(rows, history, config, run_id)
    finally:
        spark.conf.set(vectorized, previous)
    return commit_merge(history, list(runs), windows, run_id, files, point)


def commit_merge(
    history: Table, replaced: list[str], windows: list[int], run_id: str, files: list, point: ReadPoint
) -> str | None:
    """Commit a written merge run (any engine) in place of `replaced`; None, with its files removed,
    when another job published or merged first, or a forget the merge's read (`point`) did not see
    committed (the rewrite is stale; the next compaction decides)."""
    record = RunRecord(run_id, "merge", windows, len(files), sum(f.facts.row_count for f in files))
    kill_point("merge_written")
    try:
        commit_runs(history, [(record, files)], replaces=replaced, point=point)
    except (RunsChanged, WindowsAlreadyPublished, ForgetCommitted):
        log.info("merge %s of %s: another job committed first; the next compaction decides", run_id, replaced)
        delete_files([f.uri for f in files])
        return None
    log.info("merged runs %s into %s (%d rows)", replaced, run_id, record.rows)
    kill_point("merge_committed")
    return run_id


def delete_files(uris: list[str]) -> None:
    for uri in uris:
        fs, path = open_output(uri)
        with suppress(FileNotFoundError):
            fs.delete_file(path)
