"""The per-snapshot lookup index: where each user's rows are, without a scan plan per lookup.

Built once per table snapshot and shared by every read of it (single-user, multi-user, count, Top-K,
cached or not):

- `FileIndex`: the snapshot's data files from ONE Iceberg scan, with the manifests' `user_id` bounds
  and `bucket(N, user_id)` partition values as numpy arrays; a user goes to the files whose bucket
  and bounds can hold it (one file per sorted run, format invariant 5).
- `FileEntry`: one file's row groups from its footer, as numpy arrays (rows, `user_id`,
  `feature_group`, `event_ts` and `lsn` bounds). Rows are key-ordered (invariant 4), so the user
  bounds are non-decreasing and a binary search finds a user's row groups. A row group holding only
  one user and one feature group is one segment as a whole; a mixed (packed) row group's
  (user, feature group) runs are read once from its two dictionary-encoded key columns and kept.
  Files are immutable, so entries carry over to the next snapshot.
- `Segments`: a user's rows as runs of consecutive rows of one feature group in one row group,
  each already in sequence order (event_ts, lsn); the selection prunes them from the bounds alone,
  marking those only partly selected. Row groups bound `lsn` over all source partitions, so a
  frontier keeps a segment whole only when its every partition's bound is above the segment's LSNs:
  the index knows the table's partitions from its published frontier.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeVar, cast

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.expressions import AlwaysTrue, BooleanExpression
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform
from pyiceberg.types import PrimitiveType

from seqlake.tableformat.bucketing import bucket_of
from seqlake.tableformat.frontier import published_frontier
from seqlake.tableformat.page_reader import PagedFile
from seqlake.tableformat.schema import KEY_COLUMNS

LOW = np.iinfo(np.int64).min
HIGH = np.iinfo(np.int64).max
USERS_REMEMBERED = 8192  # users whose segments an index keeps (a few KiB each)
_MASK_CELLS = 1 << 22  # files x users compared at once when assigning users to files
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

T = TypeVar("T")
# (uri, row groups ascending, columns) -> the groups' rows, in group order.
ReadGroups = Callable[[str, list[int], list[str]], pa.Table]


def micros(value: datetime) -> int:
    return (value - _EPOCH) // timedelta(microseconds=1)


# -- files of a snapshot ----------------------------------------------------------------------------


@dataclass(frozen=True)
class FilePlan:
    uri: str
    users: tuple[int, ...]  # the requested users the file's bucket and user_id bounds can hold, ascending


class FileIndex:
    """The data files one Iceberg scan returned, in plan order, with what the manifests say about their
    users: the `user_id` bounds and the `bucket(N, user_id)` partition value. Assigning users to files
    needs no further Iceberg call, so one index serves any number of users."""

    def __init__(self, table: Table, condition: BooleanExpression | None = None) -> None:
        field_ = table.schema().find_field("user_id")
        user_type = cast(PrimitiveType, field_.field_type)  # user_id is a long
        specs = table.specs()
        self.uris: list[str] = []
        self.sizes: dict[str, int] = {}  # uri -> the manifest's file size (a reader checks it)
        low, high = [], []
        buckets: dict[int, list[int]] = {}  # bucket count -> each file's bucket (-1: no such partition field)
        scan = table.scan(row_filter=condition if condition is not None else AlwaysTrue())
        for i, task in enumerate(scan.plan_files()):
            data_file = task.file
            self.uris.append(data_file.file_path)
            self.sizes[data_file.file_path] = data_file.file_size_in_bytes
            lower = (data_file.lower_bounds or {}).get(field_.field_id)
            upper = (data_file.upper_bounds or {}).get(field_.field_id)
            low.append(LOW if lower is None else from_bytes(user_type, lower))
            high.append(HIGH if upper is None else from_bytes(user_type, upper))
            for position, part in enumerate(specs[data_file.spec_id].fields):
                value = data_file.partition[position]
                if (
                    part.source_id == field_.field_id
                    and isinstance(part.transform, BucketTransform)
                    and value is not None
                ):
                    column = buckets.setdefault(part.transform.num_buckets, [-1] * i)
                    column.append(int(value))
            for column in buckets.values():
                column += [-1] * (i + 1 - len(column))
        self.low = np.array(low, np.int64)
        self.high = np.array(high, np.int64)
        self.buckets = {count: np.array(values, np.int64) for count, values in buckets.items()}

    def plans(self, user_ids: Iterable[int]) -> list[FilePlan]:
        """The files that may hold any of the users, in plan order, each with the users it may hold."""
        ids = np.unique(np.fromiter((int(u) for u in user_ids), np.int64))
        if not len(ids) or not self.uris:
            return []
        held: list[list[int]] = [[] for _ in self.uris]
        step = max(1, _MASK_CELLS // len(self.uris))
        for start in range(0, len(ids), step):
            chunk = ids[start : start + step]
            mask = (self.low[:, None] <= chunk[None, :]) & (self.high[:, None] >= chunk[None, :])
            for count, file_bucket in self.buckets.items():
                mask &= (file_bucket[:, None] < 0) | (file_bucket[:, None] == bucket_of(chunk, count)[None, :])
            for i in np.flatnonzero(mask.any(axis=1)).tolist():
                held[i] += chunk[mask[i]].tolist()
        return [FilePlan(uri, tuple(users)) for uri, users in zip(self.uris, held, strict=True) if users]


# -- row groups of a file ---------------------------------------------------------------------------


@dataclass
class Segments:
    """Runs of one user's rows, each within one row group and one feature group, in sequence order.

    Bounds are the row group's (a superset of the segment's for a mixed row group); `whole` marks a
    segment that is its entire row group, whose bounds are therefore exact."""

    file: np.ndarray  # position of the file in the lookup (plan order)
    rg: np.ndarray
    start: np.ndarray  # first row within the row group
    length: np.ndarray
    group: np.ndarray  # feature group (object array of str)
    ts_min: np.ndarray  # event time bounds, microseconds
    ts_max: np.ndarray
    lsn_min: np.ndarray
    lsn_max: np.ndarray
    whole: np.ndarray
    # Left out: none cut (__post_init__ fills them in, so they are arrays from then on).
    cut_ts: np.ndarray = field(default=None)  # type: ignore[arg-type]  # only partly inside the selection's time range
    cut_lsn: np.ndarray = field(default=None)  # type: ignore[arg-type]  # only partly at or below the selection's LSN bound

    def __post_init__(self) -> None:
        if self.cut_ts is None:
            self.cut_ts = np.zeros(len(self.rg), bool)
        if self.cut_lsn is None:
            self.cut_lsn = np.zeros(len(self.rg), bool)

    def __len__(self) -> int:
        return len(self.rg)

    def take(self, index) -> Segments:
        return Segments(**{name: getattr(self, name)[index] for name in self.__dataclass_fields__})

    @classmethod
    def concat(cls, parts: list[Segments]) -> Segments:
        if not parts:
            return EMPTY_SEGMENTS
        if len(parts) == 1:
            return parts[0]
        return cls(**{name: np.concatenate([getattr(p, name) for p in parts]) for name in cls.__dataclass_fields__})

    @property
    def exact(self) -> np.ndarray:
        """Segments whose every row is selected (their row count is known without reading)."""
        return ~(self.cut_ts | self.cut_lsn)


def _empty_segments() -> Segments:
    i = np.zeros(0, np.int64)
    return Segments(i, i, i, i, np.zeros(0, object), i, i, i, i, np.zeros(0, bool))


EMPTY_SEGMENTS = _empty_segments()


def _bounds(stats, raw: bool) -> tuple:
    if stats is None or not stats.has_min_max:
        return None, None
    return (stats.min_raw, stats.max_raw) if raw else (stats.min, stats.max)


class FileEntry:
    """One history file's row groups as arrays, from its footer (Python walks the row groups once,
    when the entry is built; lookups use numpy)."""

    def __init__(self, uri: str, meta: pq.FileMetaData) -> None:
        self.uri = uri
        self.meta = meta
        self.schema = meta.schema.to_arrow_schema()
        names = self.schema.names
        n = meta.num_row_groups
        self.rows = np.zeros(n, np.int64)
        self.user_min, self.user_max = np.full(n, LOW), np.full(n, HIGH)
        self.ts_min, self.ts_max = np.full(n, LOW), np.full(n, HIGH)
        self.lsn_min, self.lsn_max = np.full(n, LOW), np.full(n, HIGH)
        self.group_min, self.group_max = np.full(n, None, object), np.full(n, None, object)
        columns = {name: names.index(name) for name in KEY_COLUMNS}
        for rg in range(n):
            group = meta.row_group(rg)
            self.rows[rg] = group.num_rows
            for name, low, high, raw in (
                ("user_id", self.user_min, self.user_max, True),
                ("event_ts", self.ts_min, self.ts_max, True),
                ("lsn", self.lsn_min, self.lsn_max, True),
                ("feature_group", self.group_min, self.group_max, False),
            ):
                lo, hi = _bounds(group.column(columns[name]).statistics, raw)
                if lo is not None:
                    low[rg], high[rg] = lo, hi
        # Key order makes both bounds non-decreasing; without statistics, every row group is searched.
        self.sorted = bool(np.all(np.diff(self.user_min) >= 0) and np.all(np.diff(self.user_max) >= 0))
        self.pure = (self.user_min == self.user_max) & (self.group_min == self.group_max) & (self.group_min != None)  # noqa: E711
        self._runs: dict[int, tuple[np.ndarray, ...]] = {}  # mixed row group -> its (user, group) runs
        self._paged: PagedFile | None = None
        self._lock = threading.Lock()

    def paged(self) -> PagedFile:
        """The footer as thrift structures, for reading row ranges by pages (parsed on first use)."""
        if self._paged is None:
            paged = PagedFile(self.meta)
            with self._lock:
                if self._paged is None:
                    self._paged = paged
        return self._paged

    def row_groups_of(self, user: int) -> np.ndarray:
        if self.sorted:
            first = np.searchsorted(self.user_max, user, "left")
            last = np.searchsorted(self.user_min, user, "right")
            return np.arange(first, max(first, last))
        return np.flatnonzero((self.user_min <= user) & (self.user_max >= user))

    def segments(self, position: int, user: int, read_groups: ReadGroups) -> Segments:
        """The user's segments in this file (`position`: the file's place in the lookup)."""
        groups = self.row_groups_of(user)
        if not len(groups):
            return EMPTY_SEGMENTS
        pure = groups[self.pure[groups]]
        parts = [self._segments(position, pure, np.zeros(len(pure), np.int64), self.rows[pure], self.group_min[pure])]
        for rg in groups[~self.pure[groups]].tolist():
            users, names, starts, lengths = self.runs(rg, read_groups)
            first, last = np.searchsorted(users, user, "left"), np.searchsorted(users, user, "right")
            count = last - first
            parts.append(
                self._segments(position, np.full(count, rg), starts[first:last], lengths[first:last], names[first:last])
            )
        segments = Segments.concat(parts)
        return segments.take(np.lexsort((segments.start, segments.rg)))  # file order

    def _segments(self, position: int, rg, start, length, group) -> Segments:
        return Segments(
            file=np.full(len(rg), position, np.int64),
            rg=np.asarray(rg, np.int64),
            start=np.asarray(start, np.int64),
            length=np.asarray(length, np.int64),
            group=np.asarray(group, object),
            ts_min=self.ts_min[rg],
            ts_max=self.ts_max[rg],
            lsn_min=self.lsn_min[rg],
            lsn_max=self.lsn_max[rg],
            whole=(np.asarray(start) == 0) & (np.asarray(length) == self.rows[rg]),
        )

    def runs(self, rg: int, read_groups: ReadGroups) -> tuple[np.ndarray, ...]:
        """(user, feature group, first row, rows) of each run of one mixed row group, read once."""
        with self._lock:
            found = self._runs.get(rg)
        if found is None:
            self.prepare([rg], read_groups)
            with self._lock:
                found = self._runs[rg]
        return found

    def prepare(self, groups: Iterable[int], read_groups: ReadGroups) -> None:
        """Read the (user, feature group) runs of the mixed row groups among `groups` not yet known,
        in one read of their two key columns."""
        with self._lock:
            missing = sorted({int(rg) for rg in groups if not self.pure[rg]} - set(self._runs))
        if not missing:
            return
        keys = read_groups(self.uri, missing, ["user_id", "feature_group"])
        users = keys["user_id"].to_numpy()
        names = np.asarray(keys["feature_group"].to_pylist(), object)
        offset = 0
        for rg in missing:
            u, g = users[offset : offset + self.rows[rg]], names[offset : offset + self.rows[rg]]
            change = np.flatnonzero((u[1:] != u[:-1]) | (g[1:] != g[:-1])) + 1
            starts = np.concatenate([[0], change]).astype(np.int64)
            lengths = np.diff(np.concatenate([starts, [len(u)]])).astype(np.int64)
            with self._lock:
                self._runs[rg] = (u[starts], g[starts], starts, lengths)
            offset += self.rows[rg]


# -- selection on segments --------------------------------------------------------------------------


def select_segments(segments: Segments, selection, partitions: frozenset[int] | None = None) -> Segments:
    """The segments that may hold selected rows, from their bounds alone; those only partly selected
    are marked (`cut_ts`, `cut_lsn`) for the reader to cut by reading their keys. Top-K keeps the
    fewest segments that surely hold the newest K selected rows. `partitions`: the source partitions
    the table's rows may belong to (None: unknown, so a frontier cuts every segment it keeps)."""
    if not len(segments):
        return segments
    if all(v is None for v in (selection.feature_groups, selection.start, selection.end, selection.as_of)):
        return segments if selection.top_k is None else segments.take(newest_segments(segments, selection.top_k))
    keep = np.ones(len(segments), bool)
    cut_ts = np.zeros(len(segments), bool)
    cut_lsn = np.zeros(len(segments), bool)
    if selection.feature_groups is not None:
        keep &= np.isin(segments.group, np.asarray(selection.feature_groups, object))
    if selection.start is not None:
        start = micros(selection.start)
        keep &= segments.ts_max >= start
        cut_ts |= segments.ts_min < start
    if selection.end is not None:
        end = micros(selection.end)
        keep &= segments.ts_min < end
        cut_ts |= segments.ts_max >= end
    if selection.as_of is not None:
        keep &= segments.lsn_min <= selection.as_of.highest()
        cut_lsn |= segments.lsn_max > selection.as_of.lowest(partitions)
    segments = Segments(**{**segments.__dict__, "cut_ts": cut_ts, "cut_lsn": cut_lsn}).take(keep)
    if selection.top_k is not None:
        segments = segments.take(newest_segments(segments, selection.top_k))
    return segments


def newest_segments(segments: Segments, k: int) -> np.ndarray:
    """Positions (ascending) of the fewest segments that surely contain the newest `k` selected rows.

    Take segments by descending newest event time until fully selected ones add up to k rows (a cut
    segment counts for none: how many of its rows are selected is unknown); any other segment whose
    newest event is not older than the oldest event of those taken may still hold a top row."""
    if k == 0:
        return np.zeros(0, np.int64)
    order = np.argsort(-segments.ts_max, kind="stable")
    held = np.cumsum(np.where(segments.exact, segments.length, 0)[order])
    enough = np.searchsorted(held, k, "left")
    if enough >= len(order):
        return np.arange(len(segments))  # never sure to hold k selected rows: keep them all
    chosen = order[: enough + 1]
    floor = segments.ts_min[chosen].min()
    return np.flatnonzero(segments.ts_max >= floor)


# -- the snapshot index -----------------------------------------------------------------------------


class LookupIndex:
    """Files and row-group arrays of one table snapshot; `segments(users, selection)` is a lookup's
    whole plan. Safe to share between threads."""

    def __init__(
        self,
        table: Table,
        footer: Callable[[str, int | None], pq.FileMetaData],
        entries: dict[str, FileEntry] | None = None,
    ) -> None:
        meta = table.metadata
        self.key = snapshot_key(table)
        self.files = FileIndex(table) if meta.current_snapshot_id is not None else None
        # The source partitions of the table's rows: those its frontier names (None if it records none).
        self.partitions: frozenset[int] | None = frozenset(published_frontier(table)) or None
        self._footer = footer
        live = set(self.files.uris) if self.files is not None else set()
        self._entries = {uri: e for uri, e in (entries or {}).items() if uri in live}
        self._users: dict[int, tuple[list[FileEntry], Segments]] = {}
        self._plans: dict[tuple, tuple[list[FileEntry], Segments]] = {}  # (user, selection bounds) -> plan
        self._derived: dict[Hashable, object] = {}  # what readers derive from a hot user's plan
        self._lock = threading.Lock()

    def entry(self, uri: str) -> FileEntry:
        with self._lock:
            found = self._entries.get(uri)
        if found is None:
            size = self.files.sizes.get(uri) if self.files is not None else None
            found = FileEntry(uri, self._footer(uri, size))  # the footer of the file the manifest lists
            with self._lock:
                found = self._entries.setdefault(uri, found)
        return found

    @property
    def entries(self) -> dict[str, FileEntry]:
        with self._lock:
            return dict(self._entries)

    def plans(self, user_ids: Iterable[int]) -> list[FilePlan]:
        return self.files.plans(user_ids) if self.files is not None else []

    def segments(
        self, user_ids: Iterable[int], selection, read_groups: ReadGroups
    ) -> tuple[list[FileEntry], dict[int, Segments]]:
        """The files that hold any of the users' selected rows (plan order) and each user's selected
        segments (`file` refers to the position in that list)."""
        if isinstance(user_ids, list | tuple) and len(user_ids) == 1:
            ids = [int(user_ids[0])]
        else:
            ids = list(dict.fromkeys(int(u) for u in user_ids))
        if len(ids) == 1:  # a hot user's repeated lookup: its plan is remembered, not recomputed
            key = (
                ids[0],
                selection.feature_groups,
                selection.start,
                selection.end,
                selection.as_of,
                selection.top_k,
            )
            with self._lock:
                planned = self._plans.get(key)
            if planned is None:
                user_entries, user_found = self.user_segments(ids[0], read_groups)
                planned = (user_entries, select_segments(user_found, selection, self.partitions))
                with self._lock:
                    if len(self._plans) >= USERS_REMEMBERED:
                        self._plans.pop(next(iter(self._plans)))
                    self._plans[key] = planned
            return planned[0], {ids[0]: planned[1]}
        with self._lock:
            known = {u: self._users[u] for u in ids if u in self._users}
        missing = [u for u in ids if u not in known]
        if missing:  # one pass over the files for all of them: mixed row groups' keys read together
            plans = self.plans(missing)
            for plan in plans:
                entry = self.entry(plan.uri)
                entry.prepare(np.concatenate([entry.row_groups_of(u) for u in plan.users]).tolist(), read_groups)
            for user in missing:
                known[user] = self.user_segments(user, read_groups)
        # One list of files for all users, in first-seen order; each user's `file` renumbered into it.
        entries: list[FileEntry] = []
        position: dict[str, int] = {}
        found: dict[int, Segments] = {}
        for user in ids:
            files, segments = known[user]
            numbers = []
            for entry in files:
                if entry.uri not in position:
                    position[entry.uri] = len(entries)
                    entries.append(entry)
                numbers.append(position[entry.uri])
            renumber = np.array(numbers, np.int64)
            if len(segments):
                segments = Segments(**{**segments.__dict__, "file": renumber[segments.file]})
            found[user] = select_segments(segments, selection, self.partitions)
        return entries, found

    def derived(self, key: Hashable, build: Callable[[], T]) -> T:
        """A reader's value derived from this snapshot's plans (a hot user's read program), built once
        per key and kept, at most USERS_REMEMBERED of them, with the snapshot."""
        found = self._derived.get(key)
        if found is None:
            found = build()
            with self._lock:
                if len(self._derived) >= USERS_REMEMBERED:
                    self._derived.pop(next(iter(self._derived)))
                self._derived[key] = found
        return cast(T, found)

    def user_segments(self, user: int, read_groups: ReadGroups) -> tuple[list[FileEntry], Segments]:
        """One user's files and all its segments, remembered for the next lookups of hot users."""
        with self._lock:
            found = self._users.get(user)
        if found is not None:
            return found
        plans = self.plans([user])
        entries = [self.entry(plan.uri) for plan in plans]
        found = (entries, Segments.concat([e.segments(i, user, read_groups) for i, e in enumerate(entries)]))
        with self._lock:
            if len(self._users) >= USERS_REMEMBERED:
                self._users.pop(next(iter(self._users)))  # oldest first: dicts keep insertion order
            self._users[user] = found
        return found


def snapshot_key(table: Table) -> tuple:
    meta = table.metadata
    return (meta.table_uuid, meta.current_snapshot_id)
