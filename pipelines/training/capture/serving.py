"""Serving simulation: requests are captured while ingest and compaction run.

The source is ingested one snapshot (a fraction of a processing window) at a time. After each step
the online view is fixed, the users active since the previous step send requests, and every tenant's
model input is captured: its pointer and fragment go to the normalized training table, the whole
sequence to the fat-row table. Windows are compacted as soon as the watermark closes them, so later
captures read them from history while late events keep arriving around them. Ingest and compaction
run on the configured engines; Spark is needed only where one of them is spark.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from seqlake.core.config import Config, resolve_engine
from seqlake.core.progress import Progress
from seqlake.pipelines.compaction.batches import compact_in_batches
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.ingest.plan import IngestResult, ingest_app_id
from seqlake.pipelines.landing.tables import LandingPaths, last_applied_version
from seqlake.pipelines.landing.windows import closed_windows, landed_windows
from seqlake.pipelines.training.capture.online_view import ViewSnapshot
from seqlake.pipelines.training.capture.pointers import capture_batch, request_table
from seqlake.pipelines.training.capture.requests import RequestSimulator
from seqlake.pipelines.training.capture.steps import append_step, start_state
from seqlake.pipelines.training.sequence import tenants
from seqlake.pipelines.training.tables import (
    create_bucketed_table,
    fatrow_table_name,
    sequence_table_schema,
    training_schema,
    training_table_name,
)
from seqlake.tableformat.reader import HistoryReader
from seqlake.tableformat.registry import published_windows

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


@dataclass
class ServingResult:
    ingest: IngestResult = field(default_factory=IngestResult)
    capture_points: int = 0
    requests: int = 0
    captures: Counter = field(default_factory=Counter)  # per tenant
    windows_published: int = 0
    events_compacted: int = 0
    events_quarantined_at_compaction: int = 0
    merges: int = 0
    # Wall seconds per step of the loop.
    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(("ingest", "capture", "compaction"), 0.0))


def _compact(
    spark: SparkSession | None,
    config: Config,
    paths: LandingPaths,
    windows: list[int],
    result: ServingResult,
    rows: dict[int, int] | None = None,
) -> None:
    """Publish the closed windows not yet published, in batches, on the configured engine
    (`layout.compaction_engine`), merging runs after each batch. `rows`: the landed rows of each
    window, when the caller counted them already."""
    started = time.monotonic()
    history, _ = history_tables(config)
    done = published_windows(history)
    todo = [w for w in windows if w not in done]
    if todo:
        rows = rows if rows is not None else landed_windows(paths).rows
        engine = resolve_engine(config.layout.compaction_engine)
        for batch in compact_in_batches(config, paths, {w: rows.get(w, 0) for w in todo}, engine, spark):
            published = batch.result
            result.windows_published += len(published.windows) if published.published else 0
            result.events_compacted += published.events
            result.events_quarantined_at_compaction += published.quarantined
            result.merges += batch.merged_into is not None
    result.seconds["compaction"] += time.monotonic() - started


def ingest_step(spark: SparkSession | None, config: Config, source: str, paths: LandingPaths) -> IngestResult:
    """The next source snapshot, on the configured engine (`layout.ingest_engine`)."""
    if resolve_engine(config.layout.ingest_engine) == "duckdb":
        from seqlake.pipelines.ingest.duckdb import ingest_source_in_process

        return ingest_source_in_process(config, source, paths, max_snapshots=1)
    from seqlake.pipelines.ingest.spark import ingest_source

    if spark is None:
        raise ValueError("the spark ingest engine needs a Spark session")
    return ingest_source(spark, config, source, paths, max_snapshots=1)


def serve_and_capture(
    spark: SparkSession | None, config: Config, source: str, paths: LandingPaths, progress: Progress | None = None
) -> ServingResult:
    """Ingest `source` step by step, capturing requests at each step and compacting closed windows.

    A step is identified by the source snapshot it ingested; its appends are idempotent by that id
    (`seqlake.pipelines.training.capture.steps`), so a run killed anywhere and started again ends with every
    table holding every step once: a step ingested but not captured in every table is captured again
    first, from the same view, with the same requests."""
    result = ServingResult()
    simulator = RequestSimulator(config)
    profiles = tenants(config)
    training = {t.name: create_bucketed_table(config, training_table_name(t), training_schema(t)) for t in profiles}
    fatrow = {t.name: create_bucketed_table(config, fatrow_table_name(t), sequence_table_schema(t)) for t in profiles}
    ingested = last_applied_version(spark, paths.events, ingest_app_id(config, source))
    state = start_state([*training.values(), *fatrow.values()], ingested)
    reader = None
    while True:
        records = 0
        if ingested > state.step:
            step_id = ingested  # ingested by a run that was killed before it captured the step everywhere
        else:
            started = time.monotonic()
            step = ingest_step(spark, config, source, paths)
            result.seconds["ingest"] += time.monotonic() - started
            if step.batches == 0:
                break
            result.ingest.batches += step.batches
            result.ingest.records += step.records
            result.ingest.landed += step.landed
            result.ingest.quarantined.update(step.quarantined)
            step_id = ingested = step.last_version
            records = step.records
        started = time.monotonic()
        history, detail = history_tables(config)
        # The reader (its lookup index, footers and open files) outlives the snapshots, as a serving
        # process's does: a new snapshot of history updates its index instead of rebuilding it.
        reader = reader or HistoryReader(history)
        reader.table = history
        with ViewSnapshot(config, history, detail, paths) as view:
            since = state.since_time
            users = view.active_users(since) if view.now is not None else []
            requests = simulator.requests(users, view.now, state.points) if users and view.now is not None else []
            landing = view.landing_rows(sorted({r.user_id for r in requests}))
            unpublished = view.unpublished_windows()
            done = state.next(step_id, view.now)
            batch = request_table(requests)
            for tenant in profiles:
                captured = (
                    capture_batch(view, reader, tenant, batch, config.training.fragment_events, landing)
                    if requests
                    else None
                )
                append_step(training[tenant.name], captured and captured.training, done, view.read_point)
                append_step(fatrow[tenant.name], captured and captured.fat_rows, done, view.read_point)
                result.captures[tenant.name] += captured.training.num_rows if captured else 0
        result.seconds["capture"] += time.monotonic() - started
        state = done
        result.capture_points += 1
        result.requests += len(requests)
        _compact(spark, config, paths, unpublished.closed(), result, unpublished.rows)
        if progress:
            progress.add(rows=records, steps=1, note=f"{len(requests)} requests captured")
    _compact(spark, config, paths, closed_windows(paths, end_of_stream=True), result)
    return result
