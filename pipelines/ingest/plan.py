"""Ingest, what both engines share: which source snapshots to consume, and where late records land.

The source is an append-only Iceberg table of raw records (as a Kafka topic would deliver them:
partition, LSN, arrival time, JSON payload). Each source snapshot is one ingest batch, identified by
its sequence number: landing and quarantine appends are idempotent per batch, so a re-run or a
replay after a crash adds nothing twice and loses nothing. How an engine reads, validates and
appends a snapshot is in its own module (`seqlake.pipelines.ingest.spark`,
`seqlake.pipelines.ingest.duckdb`). A Kafka topic's batches are ranges of a partition's offsets
(`seqlake.pipelines.ingest.kafka`), landed by the same loop (`land_batches`).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from seqlake.core.config import Config
from seqlake.core.progress import Progress
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.pipelines.tables import HISTORY
from seqlake.tableformat.registry import published_windows
from seqlake.tableformat.snapshots import in_commit_order, sequence_number

log = logging.getLogger(__name__)

# Lands one source snapshot with the home windows of the moment: (rows landed, quarantine reasons).
LandSnapshot = Callable[[Snapshot, dict[int, int]], tuple[int, Counter]]


@dataclass
class IngestResult:
    batches: int = 0
    skipped: int = 0  # source snapshots already ingested by an earlier run
    records: int = 0
    landed: int = 0
    quarantined: Counter = field(default_factory=Counter)
    last_version: int = 0  # sequence number of the last source snapshot ingested in this call


def ingest_app_id(config: Config, source: str) -> str:
    return f"seqlake-ingest:{table_identifier(config, source)}"


def current_published_windows(config: Config) -> set[int]:
    """Windows the history table holds now (none before its first publication)."""
    catalog = open_catalog(config)
    identifier = table_identifier(config, HISTORY)
    return published_windows(catalog.load_table(identifier)) if catalog.table_exists(identifier) else set()


def home_windows(published: set[int]) -> dict[int, int]:
    """Each published window -> the first unpublished window after it. A record that arrives (or is
    imported with an arrival time) in a window already published lands there instead, so the next
    compaction publishes it: late data always has a home, never a window no one compacts again."""
    homes: dict[int, int] = {}
    for window in sorted(published, reverse=True):
        homes[window] = homes.get(window + 1, window + 1)
    return homes


Parsed = TypeVar("Parsed", pa.RecordBatch, pa.Table)


def redirect_published(batch: Parsed, homes: dict[int, int]) -> Parsed:
    """`batch` (validated rows) with the window of records in published windows replaced by their home
    window. Spark's engine does the same as a join (`seqlake.pipelines.ingest.spark`)."""
    if not homes:
        return batch
    position = pc.index_in(batch["window_id"], value_set=pa.array(list(homes), pa.int64()))
    redirected = pc.take(pa.array(list(homes.values()), pa.int64()), position)
    window = pc.coalesce(redirected, batch["window_id"])
    return batch.set_column(batch.schema.get_field_index("window_id"), "window_id", window)


def ingest_snapshots(
    config: Config,
    table: Table,
    done: int,
    land: LandSnapshot,
    progress: Progress | None = None,
    max_snapshots: int | None = None,
    check: Callable[[], None] | None = None,
) -> IngestResult:
    """Ingest every snapshot of the source `table` not ingested yet (its sequence number above `done`,
    the highest the landing tier records), at most `max_snapshots`, in commit order: `land` lands
    each with the home windows of the moment (`home_windows`). `check` runs once before the first,
    when there is one to ingest."""
    snapshots = in_commit_order(table)
    pending = [s for s in snapshots if sequence_number(s) > done]
    result = IngestResult(skipped=len(snapshots) - len(pending))
    if pending and check is not None:
        check()
    todo = pending if max_snapshots is None else pending[: max(max_snapshots, 0)]
    land_batches(config, todo, land, lambda snapshot: f"snapshot {sequence_number(snapshot)}", result, progress)
    if todo:
        result.last_version = sequence_number(todo[-1])
    return result


Batch = TypeVar("Batch")


def land_batches(
    config: Config,
    batches: list[Batch],
    land: Callable[[Batch, dict[int, int]], tuple[int, Counter]],
    name: Callable[[Batch], str],
    result: IngestResult,
    progress: Progress | None = None,
) -> IngestResult:
    """Land `batches` in order, each with the home windows of the moment (`home_windows`), counted into
    `result`; `name` says which batch landed (in the log and the progress line)."""
    if progress:
        progress.set_total(len(batches))
    for batch in batches:
        landed, counts = land(batch, home_windows(current_published_windows(config)))
        records = landed + sum(counts.values())
        result.batches += 1
        result.landed += landed
        result.quarantined.update(counts)
        result.records += records
        note = name(batch)
        log.info("%s: %d landed, quarantined %s", note, landed, dict(counts))
        if progress:
            progress.add(rows=records, steps=1, note=note)
    return result
