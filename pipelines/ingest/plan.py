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

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from seqlake.core.config import Config
from seqlake.core.errors import CommitConflict
from seqlake.core.progress import Progress
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.engines.catalog_tables import load_table_if_exists
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
    history = load_table_if_exists(catalog, identifier)
    return published_windows(history) if history is not None else set()


def home_windows(published: set[int]) -> dict[int, int]:
    """Each published window -> the first unpublished window after it. A record that arrives (or is
    imported with an arrival time) in a window already published lands there instead, so the next
    compaction publishes it: late data always has a home, never a window no one compacts again."""
    homes: dict[int, int] = {}
    for window in sorted(published, reverse=True):
        homes[window] = homes.get(window + 1, window + 1)
    return homes


def home_window_sql(window: str, homes: dict[int, int]) -> str:
    """SQL (the same in DuckDB and Spark) for the home window of the window id `window` (`home_windows`;
    any other window stays): a search over the runs of published windows, each run sending its records
    to the window after it, so a record costs one comparison when it arrives after the last published
    window and a few more (the runs' count, halved each time) when it arrives late."""
    runs: dict[int, list[int]] = {}
    for published, home in homes.items():
        runs.setdefault(home, []).append(published)
    spans = sorted((min(windows), home - 1) for home, windows in runs.items())

    def search(part: list[tuple[int, int]]) -> str:
        if len(part) == 1:
            first, last = part[0]
            return f"CASE WHEN {window} BETWEEN {first} AND {last} THEN {last + 1} ELSE {window} END"
        half = len(part) // 2
        return f"CASE WHEN {window} < {part[half][0]} THEN {search(part[:half])} ELSE {search(part[half:])} END"

    if not spans:
        return window
    return f"CASE WHEN {window} > {spans[-1][1]} THEN {window} ELSE {search(spans)} END"


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
        try:
            landed, counts = land(batch, home_windows(current_published_windows(config)))
        except CommitConflict as error:
            # Another commit to the landing tier won the race (a forget's delete, most often): nothing
            # of this batch was published, and landing it again reads and validates it anew on the new
            # snapshot. Once: a second loss is the one-line error, and a re-run lands it.
            log.warning("%s: %s; landing it again on the new snapshot", name(batch), error.cause)
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
