"""Typed reads of pyiceberg's snapshot metadata, whose hints leave fields optional that every
snapshot seqlake reads carries (format-v2 tables, summaries written by pyiceberg and Spark)."""

from __future__ import annotations

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot


def sequence_number(snapshot: Snapshot) -> int:
    """A snapshot's sequence number (every format-v2 snapshot has one)."""
    assert snapshot.sequence_number is not None, f"snapshot {snapshot.snapshot_id} has no sequence number"
    return snapshot.sequence_number


def in_commit_order(table: Table) -> list[Snapshot]:
    """The table's snapshots, oldest commit first."""
    return sorted(table.snapshots(), key=sequence_number)


def total_records(snapshot: Snapshot | None) -> int:
    """A table's rows at `snapshot`, from its summary alone (0 for a table without a snapshot)."""
    if snapshot is None:
        return 0
    records = snapshot.summary["total-records"] if snapshot.summary is not None else None
    assert records is not None, f"snapshot {snapshot.snapshot_id} has no record count in its summary"
    return int(records)
