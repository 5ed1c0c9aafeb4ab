"""A table's snapshot and a snapshot's parts, for tests that know they exist: pyiceberg types them as
optional (an empty table has no current snapshot, a v1 snapshot no sequence number or summary)."""

from __future__ import annotations

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot, Summary


def current_snapshot(table: Table) -> Snapshot:
    snapshot = table.current_snapshot()
    assert snapshot is not None, "the table has no snapshot"
    return snapshot


def snapshot_by_id(table: Table, snapshot_id: int) -> Snapshot:
    snapshot = table.snapshot_by_id(snapshot_id)
    assert snapshot is not None, f"the table has no snapshot {snapshot_id}"
    return snapshot


def sequence_number(snapshot: Snapshot) -> int:
    assert snapshot.sequence_number is not None, "a v1 snapshot"
    return snapshot.sequence_number


def summary(snapshot: Snapshot) -> Summary:
    assert snapshot.summary is not None, f"snapshot {snapshot.snapshot_id} has no summary"
    return snapshot.summary
