"""Time travel on a history table: a snapshot id or an arrival time, as the frontier a read applies.

Every time-travel read is a frontier (`seqlake.tableformat.frontier.Frontier`) over the current
snapshot: the rows of partition p with LSN <= F[p]. A snapshot id or an arrival time names one:

- a snapshot id: the frontier the table had at that snapshot, i.e. the one its newest publication at
  or before it recorded (merges and rewrites record none: they change no frontier);
- an arrival time T: the frontier of the newest publication current at T in arrival time. Every
  record of a processing window arrives before the window ends, so a publication's frontier counts
  from the end of the newest window published up to it (`publication_points`); what had arrived by
  T and was published later is not shown, so the answer is a lower bound of what had arrived.

Reading the current snapshot under an older frontier, not the older snapshot's files, never shows
rows a forget removed since, and the frontier a publication recorded bounds arrival, not
publication: a window published out of order after the snapshot, whose records all lie under its
frontier, shows too. Publication summaries expire with their snapshots; the current frontier is a
table property and never does. A snapshot or a time whose frontier is no longer recorded is an
error, never an empty answer.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime

from pyiceberg.table import Table
from pyiceberg.table.snapshots import Snapshot

from seqlake.core.errors import SchemaError
from seqlake.tableformat.frontier import FRONTIER_PROPERTY, Frontier, published_frontier
from seqlake.tableformat.registry import published_windows
from seqlake.tableformat.snapshots import in_commit_order

WINDOW_PROPERTY = "seqlake.window-id"  # the newest window a publication's snapshot published

AsOf = Frontier | Mapping[int, int] | int | datetime


def _name(table: Table) -> str:
    return ".".join(table.name())


def _recorded(snapshot: Snapshot) -> Frontier | None:
    raw = snapshot.summary.additional_properties.get(FRONTIER_PROPERTY) if snapshot.summary else None
    return Frontier.from_json(raw) if raw else None


def snapshot_frontier(table: Table, snapshot_id: int) -> Frontier:
    """The table's frontier at snapshot `snapshot_id`: the current one's is the table property, an
    older one's the frontier its newest publication at or before it recorded (empty when nothing was
    published by then). SchemaError for a snapshot the table does not keep, or one whose
    publications before it have expired."""
    snapshot = table.snapshot_by_id(int(snapshot_id))
    if snapshot is None:
        raise SchemaError(
            f"{_name(table)} has no snapshot {snapshot_id} (expired, or never this table's); "
            f"`seqlake describe {table.name()[-1]}` shows the current one"
        )
    current = table.current_snapshot()
    if current is not None and current.snapshot_id == snapshot.snapshot_id:
        return published_frontier(table)
    found: Snapshot | None = snapshot
    while found is not None:
        recorded = _recorded(found)
        if recorded is not None:
            return recorded
        if _first(found):
            return Frontier()  # the table's first snapshots: nothing published yet
        found = table.snapshot_by_id(found.parent_snapshot_id) if found.parent_snapshot_id is not None else None
    raise SchemaError(
        f"{_name(table)}: the publications before snapshot {snapshot_id} have expired, so its frontier is unknown"
    )


def publication_points(table: Table, window_seconds: int) -> list[tuple[datetime, Frontier]]:
    """The publications' recorded frontiers as arrival points, oldest commit first: a frontier
    counts from the end of the newest window published up to it (every LSN it covers had arrived by
    then). Snapshot summaries expire with their snapshots; the table's current frontier is always a
    point, at the end of the newest window published."""
    points: list[tuple[datetime, Frontier]] = []
    newest: int | None = None
    for snapshot in in_commit_order(table):
        props = snapshot.summary.additional_properties if snapshot.summary else {}
        recorded = _recorded(snapshot)
        if WINDOW_PROPERTY not in props or recorded is None:
            continue
        window = int(props[WINDOW_PROPERTY])
        newest = window if newest is None else max(newest, window)
        points.append((_window_end(newest, window_seconds), recorded))
    current = published_frontier(table)
    windows = published_windows(table)
    if current and (windows or newest is not None):
        last = max([*windows, *([newest] if newest is not None else [])])
        points.append((_window_end(last, window_seconds), current))
    return points


def _window_end(window: int, window_seconds: int) -> datetime:
    return datetime.fromtimestamp((window + 1) * window_seconds, UTC)


def arrival_frontier(table: Table, at: datetime, window_seconds: int) -> Frontier:
    """The frontier of the publications current at arrival time `at` (`publication_points`): per
    source partition, the highest LSN of those whose point is at or before `at`. SchemaError when no
    point is that old and the table's older snapshots have expired (what they recorded is unknown)."""
    if at.tzinfo is None:
        raise ValueError(f"an arrival time needs a time zone, got {at!r}")
    frontier, reached = Frontier(), False
    for point, recorded in publication_points(table, window_seconds):
        if point <= at:
            frontier, reached = frontier.advanced(recorded), True
    if not reached and _truncated(table):
        raise SchemaError(
            f"{_name(table)}: no publication current at {at.isoformat()} is recorded any more (its snapshots "
            "expired); the oldest kept is later"
        )
    return frontier


def _first(snapshot: Snapshot) -> bool:
    """Whether `snapshot` is the table's first commit (sequence numbers count commits from 1; expiry
    may drop the parent link of the oldest kept one, never its number)."""
    return (snapshot.sequence_number or 0) <= 1


def _truncated(table: Table) -> bool:
    """Whether older snapshots of the table have expired."""
    ordered = in_commit_order(table)
    return bool(ordered) and not _first(ordered[0])


def frontier_as_of(table: Table, as_of: AsOf, window_seconds: int) -> Frontier:
    """The frontier of a time-travel read: `as_of` a Frontier (or a {partition: LSN} mapping) as it
    is, an int a snapshot id of `table` (`snapshot_frontier`), a datetime an arrival time
    (`arrival_frontier`; windows of `window_seconds`)."""
    if isinstance(as_of, Frontier):
        return as_of
    if isinstance(as_of, Mapping):
        return Frontier(as_of)
    if isinstance(as_of, datetime):
        return arrival_frontier(table, as_of, window_seconds)
    if isinstance(as_of, int) and not isinstance(as_of, bool):
        return snapshot_frontier(table, as_of)
    raise TypeError(f"as_of takes a Frontier, a snapshot id (int) or an arrival time (datetime), not {as_of!r}")
