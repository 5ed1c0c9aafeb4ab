"""Compaction on DuckDB, in-process: the embedded profile's engine, no JVM.

The same steps and the same SQL as the Spark engine (`seqlake.pipelines.compaction.spark`): first
arrivals over the landing tier (`first_arrivals_sql`), the declared merge operators
(`aggregation_sql`), transpiled to DuckDB by sqlglot; the rows are cut into buckets with Iceberg's own
bucket function and written by the same file writer, the detail table is replaced per window, and the
run is committed by the plan's `publish_batch` (`seqlake.pipelines.compaction.plan`). Both engines
publish the same history content. Merges read each bucket's files of every run with DuckDB, in key
order, and stream them to the writer one bucket at a time.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator
from dataclasses import replace

import pyarrow as pa
from pyiceberg.expressions import In

from seqlake.core.config import Config
from seqlake.engines.duckdb_session import connect, lake_cursor, sql_literal
from seqlake.pipelines.compaction.aggregation import first_arrivals_sql
from seqlake.pipelines.compaction.plan import (
    CompactionResult,
    batch_to_publish,
    commit_merge,
    crash_at,
    merge_to_do,
    publish_batch,
    replanning,
    window_lsns,
)
from seqlake.pipelines.compaction.quarantine import split_batch_duckdb
from seqlake.pipelines.compaction.window_replace import replace_windows
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.pipelines.landing.tables import LandingPaths, duckdb_scan
from seqlake.tableformat.bucketing import bucket_of
from seqlake.tableformat.evolution import by_projection, known_field_ids, select_list
from seqlake.tableformat.forgets import drop_users, missed_users
from seqlake.tableformat.io import engine_location
from seqlake.tableformat.registry import files_of_runs, history_file_uri
from seqlake.tableformat.run_writer import write_run
from seqlake.tableformat.schema import STORAGE_ORDER, history_arrow_schema, history_read_schema

BATCH_ROWS = 65_536


def _local(uri: str) -> str:
    return engine_location(uri)


def _as_history(table: pa.Table, schema: pa.Schema) -> pa.Table:
    # DuckDB labels TIMESTAMPTZ with its session time zone and may widen types: cast to the target.
    return table.select(schema.names).cast(schema)


def batch_events_duckdb(con, config: Config, paths: LandingPaths, windows: list[int], detail, published) -> pa.Table:
    """The batch's events, each once, by the same rule as the Spark engine's `batch_events`."""
    retention = int(config.layout.detail_retention_windows)
    # The batch's windows as a table: DuckDB tests a row against a NOT IN list of literals one literal
    # at a time (5 s for 100K rows and a backlog of 4,557 windows), against a subquery by a hash join.
    con.register("_batch_windows", pa.table({"window_id": pa.array(windows, pa.int64())}))
    in_batch = "window_id IN (SELECT window_id FROM _batch_windows)"
    landing = f"delta_scan({sql_literal(_local(paths.events))})"  # views take no prepared parameters
    con.execute(f"CREATE OR REPLACE TEMP VIEW _batch_landing AS SELECT * FROM {landing} WHERE {in_batch}")
    con.execute(
        f"CREATE OR REPLACE TEMP VIEW _earlier AS SELECT event_id, window_id FROM {landing} "
        f"WHERE window_id >= {windows[0] - retention} AND window_id < {windows[-1]} AND NOT ({in_batch})"
    )
    elsewhere = sorted(w for w in published if w >= windows[0] - retention and w not in windows)
    held = (
        detail.scan(row_filter=In("window_id", elsewhere), selected_fields=("event_id", "window_id")).to_arrow()
        if elsewhere
        else pa.table({"event_id": pa.array([], pa.string()), "window_id": pa.array([], pa.int64())})
    )
    con.register("_held", held)
    sql = f"""
        SELECT e.* FROM ({first_arrivals_sql("_batch_landing", retention, "duckdb")}) AS e
        WHERE NOT EXISTS (
            SELECT 1 FROM _earlier AS x
            WHERE x.event_id = e.event_id AND x.window_id < e.window_id AND x.window_id >= e.window_id - {retention})
          AND NOT EXISTS (
            SELECT 1 FROM _held AS d WHERE d.event_id = e.event_id AND d.window_id >= e.window_id - {retention})
    """
    return _as_history(con.execute(sql).to_arrow_table(), landing_schema(config))


def _bucket_ordered(rows: pa.Table, bucket_count: int) -> pa.Table:
    """Rows in the writer's order: the bucket of user_id, then the storage order."""
    with_bucket = rows.append_column("_bucket", pa.array(bucket_of(rows["user_id"], bucket_count), pa.int32()))
    order = [("_bucket", "ascending")] + [(k, "ascending") for k in STORAGE_ORDER]
    return with_bucket.sort_by(order).drop_columns(["_bucket"])


def write_history_run(history, config: Config, run_id: str, rows: pa.Table) -> list:
    """Aggregated history rows written as sorted run `run_id` of `history` (files uncommitted)."""
    schema = history_arrow_schema(config, history.schema())
    rows = _bucket_ordered(_as_history(rows, schema), config.layout.bucket_count)
    return _write_sorted_run(history, config, run_id, rows.to_batches(max_chunksize=BATCH_ROWS), schema)


def _write_sorted_run(
    history, config: Config, run_id: str, batches: Iterable[pa.RecordBatch], schema: pa.Schema
) -> list:
    """Batches in the writer's order written as sorted run `run_id` of `history`, under file names
    of this attempt's own (racing or retried writers of one run never share a file)."""
    attempt = uuid.uuid4().hex[:12]
    return write_run(
        batches,
        file_uri=lambda bucket: history_file_uri(history.location(), run_id, bucket, attempt),
        schema=schema,
        run_id=run_id,
        bucket_count=config.layout.bucket_count,
        group_order=list(config.feature_groups),
    )


def compact_batch_duckdb(
    config: Config, paths: LandingPaths, windows: list[int], *, fail_at: str | None = None
) -> CompactionResult:
    """`seqlake.pipelines.compaction.spark.compact_batch` on DuckDB: the same run content, no Spark session."""
    return replanning("compaction", lambda: _compact_batch_duckdb(config, paths, windows, fail_at))


def _compact_batch_duckdb(
    config: Config, paths: LandingPaths, windows: list[int], fail_at: str | None
) -> CompactionResult:
    plan = batch_to_publish(config, windows)
    if isinstance(plan, CompactionResult):
        return plan  # every window is published already
    history, detail, todo, point = plan.history, plan.detail, plan.windows, plan.point
    with lake_cursor() as con:
        events = batch_events_duckdb(con, config, paths, todo, detail, plan.published)
        # Users of a forget under way (it cleaned detail, not history yet) stay out of the batch.
        events = drop_users(events, missed_users(history, point, detail.refresh()))
        rows, events, quarantined = split_batch_duckdb(con, config, events, todo, point)
        own_lsns = window_lsns(duckdb_scan(con), paths, todo)
    crash_at("before_write", fail_at)
    files = write_history_run(history, config, plan.run_id, rows)
    crash_at("after_write", fail_at)
    # Replace the windows' partitions, never append (a re-run replaces the same events).
    # In the table's column order: after a migration, added columns come last there.
    stored = detail.schema().as_arrow()
    detail_rows = events.select(stored.names).cast(stored)
    replace_windows(detail, detail_rows, todo, point, {"seqlake.window-id": str(todo[-1])})
    crash_at("after_detail", fail_at)
    result = publish_batch(history, todo, files, own_lsns, events.num_rows, fail_at=fail_at, point=point)
    return replace(result, quarantined=quarantined) if result.published else result


def _merged_buckets(con, by_bucket: dict[int, list[str]], names: list[str], history) -> Iterator[pa.RecordBatch]:
    """Each bucket's rows of the merged runs in storage order. Files written under older schemas
    read as the current one (a column they predate as null, a widened one cast): files of one
    schema are read together, and the groups are concatenated by name."""
    order = ", ".join(STORAGE_ORDER)
    target, loose = history_read_schema(history)
    for bucket in sorted(by_bucket):
        groups = by_projection(by_bucket[bucket], target, loose, known_field_ids(history))
        selects = [f"SELECT {', '.join(select_list(found, names))} FROM read_parquet(?)" for found, _ in groups]
        reader = con.execute(
            f"{' UNION ALL BY NAME '.join(selects)} ORDER BY {order}",
            [[_local(p) for p in uris] for _, uris in groups],
        ).to_arrow_reader(BATCH_ROWS)
        yield from reader


def merge_runs_if_needed_duckdb(config: Config) -> str | None:
    """`seqlake.pipelines.compaction.spark.merge_runs_if_needed` on DuckDB, bucket by bucket."""
    merge = merge_to_do(config)
    if merge is None:
        return None
    history = merge.history
    by_bucket: dict[int, list[str]] = {}
    for data_file in files_of_runs(history, set(merge.runs)):
        by_bucket.setdefault(int(data_file.partition[0]), []).append(data_file.file_path)
    schema = history_arrow_schema(config, history.schema())
    with connect(extensions=()) as con:
        batches = (
            pa.Table.from_batches([b]).cast(schema).to_batches()[0] if b.num_rows else b
            for b in _merged_buckets(con, by_bucket, schema.names, history)
        )
        files = _write_sorted_run(history, config, merge.run_id, (b for b in batches if b.num_rows), schema)
    return commit_merge(merge, files)
