"""Land raw source records (as delivered, malformed ones included) in an Iceberg table.

This table plays the part of a message log (a Kafka topic): each commit is what arrived during one
processing window (or `commit_rows` rows, whichever comes first), so memory stays bounded by one
commit whatever the stream's length, and ingest can consume it commit by commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from seqlake.core.events import RAW_SCHEMA
from seqlake.core.progress import Progress
from seqlake.core.windows import window_ids
from seqlake.engines.catalog_tables import load_table_if_exists
from seqlake.pipelines.faults import kill_point


@dataclass(frozen=True)
class LandingResult:
    records: int
    commits: int
    snapshot_id: int | None


def create_raw_table(catalog: Catalog, identifier: str, replace: bool = False) -> Table:
    if replace and catalog.table_exists(identifier):
        catalog.purge_table(identifier)
    existing = load_table_if_exists(catalog, identifier)
    if existing is not None:
        return existing
    return catalog.create_table(identifier, schema=RAW_SCHEMA)


def land_raw_records(
    table: Table,
    batches: Iterable[pa.RecordBatch],
    progress: Progress | None = None,
    commit_rows: int = 500_000,
    window_seconds: int | None = None,
) -> LandingResult:
    """Append the record batches to `table`: one commit per arrival window (if `window_seconds`)
    and at least every `commit_rows` rows."""
    pending: list[pa.RecordBatch] = []
    pending_rows = records = commits = 0

    def flush() -> None:
        nonlocal pending, pending_rows, commits
        if pending:
            table.append(pa.Table.from_batches(pending, schema=RAW_SCHEMA))
            kill_point("raw_appended")
            commits += 1
            pending, pending_rows = [], 0

    for batch in _split_by_window(batches, window_seconds):
        if pending and window_seconds and _window(batch, window_seconds) != _window(pending[-1], window_seconds):
            flush()
        pending.append(batch)
        pending_rows += batch.num_rows
        records += batch.num_rows
        if progress:
            progress.add(rows=batch.num_rows, nbytes=batch.nbytes)
        if pending_rows >= commit_rows:
            flush()
            if progress:
                progress.add(steps=1)
    flush()
    table.refresh()
    snapshot = table.current_snapshot()
    return LandingResult(records, commits, snapshot.snapshot_id if snapshot else None)


def _window(batch: pa.RecordBatch, window_seconds: int) -> int:
    return int(window_ids(batch.column("arrival_ts").slice(0, 1), window_seconds)[0].as_py())


def _split_by_window(batches: Iterable[pa.RecordBatch], window_seconds: int | None) -> Iterable[pa.RecordBatch]:
    """Cut batches where the arrival window changes (arrival time is non-decreasing per partition
    but batches interleave partitions, so cut on any change)."""
    for batch in batches:
        if not window_seconds or batch.num_rows == 0:
            yield batch
            continue
        windows = window_ids(batch.column("arrival_ts"), window_seconds).to_numpy()
        cuts = np.flatnonzero(np.diff(windows)) + 1
        for start, end in zip(np.r_[0, cuts], np.r_[cuts, len(windows)], strict=True):
            yield batch.slice(start, end - start)
