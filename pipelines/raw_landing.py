"""Land raw source records (as delivered, malformed ones included) in an Iceberg table.

The stream is appended in chunks of `commit_rows` rows, one Iceberg commit per chunk, so memory
stays bounded by one chunk whatever the stream's length.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.catalog import Catalog
from pyiceberg.table import Table

from seqlake.events import RAW_SCHEMA
from seqlake.progress import Progress


@dataclass(frozen=True)
class LandingResult:
    records: int
    commits: int
    snapshot_id: int | None


def create_raw_table(catalog: Catalog, identifier: str, replace: bool = False) -> Table:
    if replace and catalog.table_exists(identifier):
        catalog.purge_table(identifier)
    if catalog.table_exists(identifier):
        return catalog.load_table(identifier)
    return catalog.create_table(identifier, schema=RAW_SCHEMA)


def land_raw_records(
    table: Table,
    batches: Iterable[pa.RecordBatch],
    progress: Progress | None = None,
    commit_rows: int = 500_000,
) -> LandingResult:
    """Append the record batches to `table`, committing every `commit_rows` rows."""
    pending: list[pa.RecordBatch] = []
    pending_rows = records = commits = 0

    def flush() -> None:
        nonlocal pending, pending_rows, commits
        if pending:
            table.append(pa.Table.from_batches(pending, schema=RAW_SCHEMA))
            commits += 1
            pending, pending_rows = [], 0

    for batch in batches:
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
