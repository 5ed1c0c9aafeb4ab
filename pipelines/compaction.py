"""Window-close compaction on Spark: a closed window's landing rows become one sorted run.

Steps, each safe to repeat: deduplicate the window's events (first arrival of an event id wins;
ids already published by earlier windows are dropped), aggregate per (user, feature group, item)
with the declared merge operators, write the run's files, keep the original events in the detail
table, then publish the run in one Iceberg commit that records the window and the LSN frontier.
A window already published is a no-op; a job killed anywhere leaves nothing visible and succeeds when
run again; of two jobs racing on one window, one publishes and the other finds it published.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from pyiceberg.exceptions import CommitFailedException, TableAlreadyExistsError
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.partitioning import PartitionField, PartitionSpec
from pyiceberg.table import Table
from pyiceberg.table.sorting import SortField, SortOrder
from pyiceberg.transforms import BucketTransform, IdentityTransform
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from pipelines.aggregation import aggregation_sql, dedupe_sql
from pipelines.landing import LandingPaths, delta_exists
from pipelines.parse import landing_schema
from pipelines.spark_history import write_run_with_spark
from seqlake.catalog import open_catalog, spark_name, table_identifier
from seqlake.config import Config
from seqlake.errors import SeqlakeError
from tableformat.registry import RunRecord, commit_runs, create_history_table, files_of_runs, live_runs
from tableformat.schema import history_arrow_schema, with_field_ids
from tableformat.writer import open_output

HISTORY = "history"
DETAIL = "history_detail"
CRASH_POINTS = ("before_write", "after_write", "after_detail", "after_commit")


class SimulatedCrash(SeqlakeError):
    """Raised at a named point to test that a killed job leaves nothing half done."""


@dataclass(frozen=True)
class CompactionResult:
    window_id: int
    run_id: str
    published: bool  # False: the window was published before (no-op)
    events: int = 0
    rows: int = 0
    files: int = 0


def window_run_id(window_id: int) -> str:
    return f"w{window_id}"


def history_tables(config: Config) -> tuple[Table, Table]:
    """The history table and the detail table, created on first use."""
    catalog = open_catalog(config)
    history_id, detail_id = table_identifier(config, HISTORY), table_identifier(config, DETAIL)
    history = create_history_table(catalog, history_id, config)
    if catalog.table_exists(detail_id):
        return history, catalog.load_table(detail_id)
    iceberg_schema = pyarrow_to_schema(with_field_ids(landing_schema(config)))
    # By window (a compaction replaces its window) and by the users' bucket, as history: a rebuild of
    # one bucket's samples reads only that bucket's events. Sorted by user within each file.
    spec = PartitionSpec(
        PartitionField(
            source_id=iceberg_schema.find_field("window_id").field_id,
            field_id=1000,
            transform=IdentityTransform(),
            name="window_id",
        ),
        PartitionField(
            source_id=iceberg_schema.find_field("user_id").field_id,
            field_id=1001,
            transform=BucketTransform(config.layout.bucket_count),
            name="user_id_bucket",
        ),
    )
    order = SortOrder(
        SortField(source_id=iceberg_schema.find_field("user_id").field_id, transform=IdentityTransform()),
        SortField(source_id=iceberg_schema.find_field("event_ts").field_id, transform=IdentityTransform()),
    )
    properties = {"write.parquet.compression-codec": "zstd"}
    try:
        detail = catalog.create_table(
            detail_id, schema=iceberg_schema, partition_spec=spec, sort_order=order, properties=properties
        )
    except TableAlreadyExistsError:
        detail = catalog.load_table(detail_id)
    return history, detail


def _crash(point: str, fail_at: str | None) -> None:
    if fail_at == point:
        raise SimulatedCrash(f"simulated crash at {point}")


def window_events(spark: SparkSession, config: Config, paths: LandingPaths, window_id: int) -> DataFrame:
    """The window's events, each once: first arrival wins; ids published by other windows drop."""
    landing = spark.read.format("delta").load(paths.events).where(F.col("window_id") == window_id)
    # View names carry the window: windows compacted in parallel threads of one session stay apart.
    landing.createOrReplaceTempView(f"_seqlake_landing_w{window_id}")
    events = spark.sql(dedupe_sql(f"_seqlake_landing_w{window_id}"))
    horizon = window_id - config.layout.detail_retention_windows
    # Ids published by any other window drop, not only earlier ones: a window compacted out of order
    # (say, re-run by hand after a crash) still counts each event once.
    published = (
        spark.table(spark_name(config, DETAIL))
        .where((F.col("window_id") != window_id) & (F.col("window_id") >= horizon))
        .select("event_id")
    )
    return events.join(published, "event_id", "left_anti").select(*landing_schema(config).names)


def published_frontier(history: Table) -> dict[int, int]:
    """Highest published LSN per source partition (from the newest window publication)."""
    for snapshot in sorted(history.snapshots(), key=lambda s: s.sequence_number, reverse=True):
        raw = snapshot.summary.additional_properties.get("seqlake.frontier") if snapshot.summary else None
        if raw:
            return {int(k): v for k, v in json.loads(raw).items()}
    return {}


def lsn_frontier(spark: SparkSession, paths: LandingPaths, history: Table, window_id: int) -> dict[str, int]:
    """The frontier once the window is published: per source partition, the highest LSN of its records
    (landed or quarantined) or of what was published before. LSNs grow with arrival, so only this
    window's partition of the landing tier is read, never the whole of it."""
    frontier = published_frontier(history)
    for path in (paths.events, paths.quarantine):
        if not delta_exists(spark, path):
            continue
        rows = (
            spark.read.format("delta")
            .load(path)
            .where(F.col("window_id") == window_id)
            .groupBy("source_partition")
            .agg(F.max("lsn").alias("lsn"))
            .collect()
        )
        for row in rows:
            frontier[row["source_partition"]] = max(frontier.get(row["source_partition"], -1), row["lsn"])
    return {str(k): v for k, v in sorted(frontier.items())}


def _detail_has_window(detail: Table, window_id: int) -> bool:
    return any(
        s.summary is not None and s.summary.additional_properties.get("seqlake.window-id") == str(window_id)
        for s in detail.snapshots()
    )


def compact_window(
    spark: SparkSession,
    config: Config,
    paths: LandingPaths,
    window_id: int,
    *,
    fail_at: str | None = None,
) -> CompactionResult:
    """Publish closed window `window_id` as one sorted run (or do nothing if it is published)."""
    history, detail = history_tables(config)
    run_id = window_run_id(window_id)
    if window_id in published_windows(history):
        return CompactionResult(window_id, run_id, published=False)

    events = window_events(spark, config, paths, window_id).persist()
    try:
        events.createOrReplaceTempView(f"_seqlake_events_w{window_id}")
        rows = spark.sql(aggregation_sql(config, f"_seqlake_events_w{window_id}")).select(
            *history_arrow_schema(config).names
        )
        _crash("before_write", fail_at)
        files = write_run_with_spark(rows, history, config, run_id)
        _crash("after_write", fail_at)
        detail.refresh()
        if not _detail_has_window(detail, window_id):
            # Replace the window's partition, never append: two jobs racing on one window both get
            # here, and the second must replace the first's (identical) events, not add them again.
            events.writeTo(spark_name(config, DETAIL)).option(
                "snapshot-property.seqlake.window-id", str(window_id)
            ).overwrite(F.col("window_id") == F.lit(window_id))
        _crash("after_detail", fail_at)
        event_count = events.count()
    finally:
        events.unpersist()

    row_count = sum(f.facts.row_count for f in files)
    record = RunRecord(run_id, "window", [window_id, window_id], len(files), row_count)
    properties = {
        "seqlake.window-id": str(window_id),
        "seqlake.frontier": json.dumps(lsn_frontier(spark, paths, history, window_id)),
    }
    try:
        commit_runs(history, [(record, files)], snapshot_properties=properties)
    except (CommitFailedException, SeqlakeError):
        # Another job published this window first: ours becomes a no-op.
        history.refresh()
        if run_id in live_runs(history):
            _delete_files([f.uri for f in files])
            return CompactionResult(window_id, run_id, published=False)
        raise
    _crash("after_commit", fail_at)
    return CompactionResult(window_id, run_id, True, event_count, row_count, len(files))


def published_windows(history: Table) -> set[int]:
    covered: set[int] = set()
    for record in live_runs(history).values():
        covered.update(range(record.windows[0], record.windows[1] + 1))
    return covered


def merge_runs_if_needed(spark: SparkSession, config: Config) -> str | None:
    """Capacity merge: when the table holds more than `layout.max_runs` runs, rewrite them into one."""
    history, _ = history_tables(config)
    runs = live_runs(history)
    if len(runs) <= config.layout.max_runs:
        return None
    first = min(r.windows[0] for r in runs.values())
    last = max(r.windows[1] for r in runs.values())
    run_id = f"m{first}t{last}"
    paths = [f.file_path for f in files_of_runs(history, set(runs))]
    names = history_arrow_schema(config).names
    rows = (
        spark.read.parquet(*paths).select(*names)
        if paths
        else spark.createDataFrame([], spark.table(spark_name(config, HISTORY)).schema)
    )
    files = write_run_with_spark(rows, history, config, run_id)
    record = RunRecord(run_id, "merge", [first, last], len(files), sum(f.facts.row_count for f in files))
    commit_runs(history, [(record, files)], replaces=list(runs))
    return run_id


def _delete_files(uris: list[str]) -> None:
    for uri in uris:
        fs, path = open_output(uri)
        fs.delete_file(path)
