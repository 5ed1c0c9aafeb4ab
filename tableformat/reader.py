"""Read users' histories from the history table with every selection pushed down to storage.

A lookup is planned from the per-snapshot lookup index (`tableformat/lookup_index.py`), built once per
table snapshot: the manifests give at most one file per sorted run, the footers' row-group bounds
give the user's segments (runs of one feature group within one row group, already in sequence order),
and the selection prunes segments by their bounds (feature group, event time, LSN, and for Top-K the
newest). Only the projected columns are read, plus `event_ts` when a segment is cut by time or
several segments overlap in time and must be merged, `lsn` to break event-time ties in a merge, and
`lsn` with `source_partition` when cut by a frontier (`Selection.as_of`: LSNs count per partition).
Rows come back in sequence order, (event_ts, lsn), oldest first unless `newest_first`: one segment
as stored, segments whose time ranges do not overlap concatenated, others merged.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import (
    AlwaysTrue,
    And,
    BooleanExpression,
    GreaterThanOrEqual,
    In,
    LessThan,
    LessThanOrEqual,
)
from pyiceberg.table import Table

from seqlake.core.errors import SchemaError
from seqlake.tableformat.evolution import Projection, UnknownFieldId, known_field_ids, projection
from seqlake.tableformat.frontier import Frontier
from seqlake.tableformat.io import (
    FooterCache,
    OpenFiles,
    PlainFileSystem,
    decode_pages,
    read_byte_ranges,
    read_row_groups,
)
from seqlake.tableformat.lookup_index import (
    FileEntry,
    LookupIndex,
    ReadGroups,
    Segments,
    micros,
    select_segments,
    snapshot_key,
)
from seqlake.tableformat.schema import history_read_schema
from seqlake.tableformat.verified import DAMAGE, CorruptFileError, describe, load_footer, table_of

SEQUENCE_ORDER = ("event_ts", "lsn")


@dataclass(frozen=True)
class Selection:
    """What to read of a user's history. Times are event times, `start` inclusive, `end` exclusive,
    compared with each row's stamp (`event_ts`, its earliest event). This reader cuts by the stamp
    alone; `Lake.history`/`histories` and `seqlake history` with an `end` also rebuild (or withhold)
    rows that merged events from `end` on (`seqlake.pipelines.reads.bounded`).

    `as_of` bounds what was known: only rows the frontier covers, those whose LSN is at most the
    frontier's bound of their source partition (none of a partition it does not name). A mapping
    {partition: LSN} is taken as a Frontier; a snapshot id or an arrival time becomes one through
    `seqlake.tableformat.time_travel.frontier_as_of` (what `Lake.history(as_of=...)` calls)."""

    feature_groups: tuple[str, ...] | None = None
    columns: tuple[str, ...] | None = None
    start: datetime | None = None
    end: datetime | None = None
    as_of: Frontier | None = None  # rows the frontier covers
    top_k: int | None = None  # the newest K rows of the selection
    newest_first: bool = False

    def __post_init__(self) -> None:
        if self.top_k is not None and self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        if self.as_of is not None and not isinstance(self.as_of, Frontier):
            if not isinstance(self.as_of, Mapping):
                raise TypeError(
                    f"Selection.as_of takes a Frontier ({{source partition: LSN}}), not {self.as_of!r}; "
                    "a snapshot id or an arrival time goes to Lake.history(as_of=...)"
                )
            object.__setattr__(self, "as_of", Frontier(self.as_of))
        for name in ("start", "end"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise ValueError(f"{name} needs a time zone, got {value!r}")


class HistoryReader:
    def __init__(self, table: Table, filesystem=None, footer_cache: FooterCache | None = None) -> None:
        self.table = table
        self.fs = filesystem or PlainFileSystem()
        self.footers = footer_cache if footer_cache is not None else FooterCache()
        self.files = OpenFiles()  # data files stay open between lookups
        self.columns = [f.name for f in table.schema().fields]
        self.groups = table.metadata.properties.get("seqlake.feature-groups", "").split(",")
        self._column_set, self._group_set = frozenset(self.columns), frozenset(self.groups)
        self._schema: tuple[tuple, pa.Schema] | None = None
        self._projections: tuple[tuple | None, tuple, dict[str, Projection]] = (None, (), {})
        self._index: LookupIndex | None = None
        self._empties: dict[tuple, pa.Table] = {}
        self._index_lock = threading.Lock()
        self._paged: dict[str, tuple] = {}  # uri -> (its PagedFile, how to read its byte ranges)
        self._wanted: dict[Selection, list[str]] = {}  # checked selections -> the columns they return

    def check(self, selection: Selection) -> None:
        """Identifiers from users are checked against the schema, never pasted anywhere."""
        unknown = [c for c in selection.columns or () if c not in self._column_set]
        if unknown:
            raise SchemaError(f"unknown columns {unknown}; the history table has {self.columns}")
        groups = [g for g in selection.feature_groups or () if g not in self._group_set]
        if groups:
            raise SchemaError(f"unknown feature groups {groups}; the history table has {self.groups}")

    # -- planning ------------------------------------------------------------------------------

    def lookup_index(self) -> LookupIndex:
        """The index of the table's current snapshot: built on first use, rebuilt only when the
        snapshot changes (keeping the entries of files still live)."""
        key = snapshot_key(self.table)
        index = self._index
        if index is not None and index.key == key:
            return index
        with self._index_lock:
            if self._index is None or self._index.key != key:
                previous = self._index.entries if self._index is not None else None
                self._index = LookupIndex(self.table, self.footer, previous)
            return self._index

    def files_for_user(self, user_id: int, selection: Selection = Selection()) -> list[str]:
        """Data files that may hold the user's rows (bucket and `user_id` bounds), in plan order."""
        return [plan.uri for plan in self.lookup_index().plans([int(user_id)])]

    # -- reading -------------------------------------------------------------------------------

    def footer(self, uri: str, size: int | None = None) -> pq.FileMetaData:
        """The file's verified footer; with `size` (its manifest's), a file of another size is refused."""
        return load_footer(self.fs, self.footers, uri, size)

    def projection(self, uri: str) -> Projection:
        """How the file's columns read as the table's current ones (`seqlake.tableformat.evolution`): as
        stored, unless the file predates a column added or widened since."""
        key = (self.table.metadata.table_uuid, self.table.metadata.current_schema_id)
        if self._projections[0] != key:
            self._projections = (key, (*history_read_schema(self.table), known_field_ids(self.table)), {})
        found = self._projections[2].get(uri)
        if found is None:
            target, loose, known = self._projections[1]
            try:
                found = projection(self.footer(uri).schema.to_arrow_schema(), target, loose, known)
            except UnknownFieldId as error:
                raise CorruptFileError(table_of(uri), uri, str(error)) from None
            self._projections[2][uri] = found
        return found

    def read_groups(self, uri: str, groups: list[int], columns: list[str]) -> pa.Table:
        """The rows of `groups` (ascending) with `columns` (the step subclasses change, e.g. to cache)."""
        found, meta = self.projection(uri), self.footer(uri)
        if found.identity:
            return read_row_groups(self.fs, uri, meta, groups, columns, self.files)
        read = read_row_groups(self.fs, uri, meta, groups, found.file_columns(columns), self.files)
        return found.apply(read, columns, sum(meta.row_group(g).num_rows for g in groups))

    def read_rows(self, uri: str, rg: int, low: int, high: int, columns: list[str]) -> pa.Table | None:
        """Rows [low, high) of one row group, decoded from the pages that hold them (page index)."""
        projected = self.projection(uri)
        stored = columns if projected.identity else projected.file_columns(columns)
        if not stored:
            return None  # only columns the file predates: read_groups gives their nulls
        found = self._paged.get(uri)
        if found is None:  # files are immutable: a file's pages are read the same way in any snapshot
            entry = self.lookup_index().entry(uri)

            def read(ranges: list[tuple[int, int]]) -> list[bytes]:
                return read_byte_ranges(self.fs, uri, ranges, entry.meta, self.files)

            found = self._paged[uri] = (entry.paged(), read)
            if len(self._paged) > self.files.capacity:
                self._paged.pop(next(iter(self._paged)))
        paged, read = found
        try:
            rows = paged.read_rows(rg, low, high, stored, read, decode_pages)
        except CorruptFileError:
            raise
        except DAMAGE as error:  # a page whose checksum or encoding fails: the file is damaged
            raise CorruptFileError(table_of(uri), uri, describe(error)) from error
        if rows is None or projected.identity:
            return rows
        return projected.apply(rows, columns, high - low)

    def read_user(
        self, user_id: int, columns: Sequence[str] | None = None, selection: Selection | None = None
    ) -> pa.Table:
        """The user's selected rows in sequence order, with `columns` (default: all)."""
        selection = selection or Selection(columns=tuple(columns) if columns is not None else None)
        return self.read_users([user_id], selection)[int(user_id)]

    def read_users(
        self, user_ids: Iterable[int], selection: Selection = Selection(), max_workers: int = 1
    ) -> dict[int, pa.Table]:
        """Each user's selected rows, as `read_user` returns them, keyed in first-given order; one read
        per file for all the users it holds (files in parallel with `max_workers` > 1)."""
        wanted = self._wanted.get(selection)
        if wanted is None:  # checked once per selection: a hot lookup repeats it
            self.check(selection)
            wanted = list(dict.fromkeys(selection.columns or self.columns))
            if len(self._wanted) >= 1024:
                self._wanted.pop(next(iter(self._wanted)))
            self._wanted[selection] = wanted
        index = self.lookup_index()
        entries, segments = index.segments(user_ids, selection, self.read_groups)
        program = None
        if len(segments) == 1:  # a hot user's repeated lookup: its read program is kept with its plan
            (user,) = segments
            program = index.derived(
                ("reads", user, selection),
                lambda: plan_reads(entries, segments, selection, wanted, paging=True),
            )
        return read_segments(
            self.read_groups,
            entries,
            segments,
            selection,
            wanted,
            lambda: self.empty(wanted),
            max_workers,
            read_rows=self.read_rows,
            program=program,
        )

    def read_user_in_file(
        self, uri: str, user_id: int, wanted: list[str], selection: Selection | None = None
    ) -> pa.Table:
        """The user's selected rows in one data file, in sequence order."""
        selection = selection or Selection()
        user = int(user_id)
        index = self.lookup_index()
        entry = index.entry(uri)
        segments = select_segments(entry.segments(0, user, self.read_groups), selection, index.partitions)
        found = read_segments(
            self.read_groups,
            [entry],
            {user: segments},
            selection,
            wanted,
            lambda: self.empty(wanted),
            read_rows=self.read_rows,
        )
        return found[user]

    def empty(self, wanted: list[str]) -> pa.Table:
        """An empty result with `wanted` columns (kept per projection: building one costs a lookup)."""
        schema = self.arrow_schema()
        assert self._schema is not None  # arrow_schema() keeps it
        key = (self._schema[0], tuple(wanted))
        found = self._empties.get(key)
        if found is None:
            found = self._empties[key] = schema.empty_table().select(wanted)
        return found

    def arrow_schema(self) -> pa.Schema:
        """The table's schema in Arrow; converting it costs about a cached lookup, so once per schema."""
        key = (self.table.metadata.table_uuid, self.table.metadata.current_schema_id)
        if self._schema is None or self._schema[0] != key:
            self._schema = (key, self.table.schema().as_arrow())
        return self._schema[1]


# -- reading segments -------------------------------------------------------------------------------


# (uri, row group, first row, end row, columns) -> those rows, decoded from their pages only; None when
# the file cannot serve row ranges (then the row group is read whole).
ReadRows = Callable[[str, int, int, int, list[str]], pa.Table | None]
# A Top-K reads a segment's newest rows by pages when this many older rows can be skipped.
PAGED_SKIP_ROWS = 8192


def read_segments(
    read_groups: ReadGroups,
    entries: list[FileEntry],
    segments: dict[int, Segments],
    selection: Selection,
    wanted: list[str],
    empty: Callable[[], pa.Table],
    max_workers: int = 1,
    with_lsn: bool = False,
    read_rows: ReadRows | None = None,
    program: ReadProgram | None = None,
) -> dict[int, pa.Table]:
    """Each user's rows of its segments, cut to the selection and put in sequence order.

    Per file, one read of the union of the users' row groups, with the columns wanted plus the keys
    that cutting or merging needs. For a Top-K, a long segment's newest K rows are read by pages
    (`read_rows`) instead of its whole row group. `program` is `plan_reads` of the same arguments,
    when the caller keeps it (a hot user's)."""
    if program is None:
        program = plan_reads(entries, segments, selection, wanted, with_lsn, read_rows is not None)
    paged: dict[tuple[int, int], pa.Table] = {}  # (user, segment) -> its newest rows
    for user, plan in program.users.items():
        for i, position, rg, low, high in plan.paged:
            assert read_rows is not None  # plans read by pages only when there is a page reader
            rows = read_rows(entries[position].uri, rg, low, high, plan.paged_columns)
            if rows is None:  # a file without a usable page index: its row groups are read whole
                return read_segments(read_groups, entries, segments, selection, wanted, empty, max_workers, with_lsn)
            paged[user, i] = rows

    def read(file: FileRead) -> pa.Table:
        return read_groups(entries[file.position].uri, file.groups, file.columns)

    files = program.files
    if max_workers > 1 and len(files) > 1:
        tables = list(file_pool(max_workers).map(read, files))
    else:
        tables = [read(f) for f in files]

    result: dict[int, pa.Table] = {}
    for user, plan in program.users.items():
        if plan.whole >= 0:  # the read is the user's rows, in order: nothing to cut or combine
            result[user] = shape(tables[plan.whole], wanted, selection, empty)
            continue
        parts = [
            paged[user, i] if table < 0 else cut(tables[table], offset, n, ct, cl, selection)
            for i, (table, offset, n, ct, cl) in enumerate(plan.slices)
        ]
        if len(parts) == 1:
            rows = parts[0]
        else:
            order = [i for i in plan.order if parts[i].num_rows]
            rows = in_sequence([parts[i] for i in order], plan.merging)
        if rows is None:  # event-time ties across segments: read again with `lsn` to order them
            again = read_segments(
                read_groups, entries, {user: segments[user]}, selection, wanted, empty, 1, True, read_rows
            )
            result[user] = again[user]
            continue
        result[user] = shape(rows, wanted, selection, empty)
    return result


@dataclass(frozen=True)
class FileRead:
    position: int  # the file's place in the lookup's entries
    groups: list[int]  # row groups read, ascending
    columns: list[str]  # the wanted columns, then the keys that cutting or merging needs


@dataclass(frozen=True)
class UserRead:
    # Per segment: (index into the file reads, or -1 for a segment read by pages; first row in that
    # read; rows; cut by time; cut by LSN).
    slices: list[tuple[int, int, int, bool, bool]]
    paged: list[tuple[int, int, int, int, int]]  # (segment, file position, row group, first row, end row)
    paged_columns: list[str]
    merging: bool  # the segments' time ranges overlap: merged on the key, else concatenated
    order: list[int]  # segments by their oldest event time
    whole: int = -1  # the file read that is exactly the user's rows in sequence order, if one is


@dataclass(frozen=True)
class ReadProgram:
    """What `read_segments` reads and how it cuts, derived from the segments and the selection alone:
    built once for a hot user's plan and kept with it (`HistoryReader.read_users`)."""

    files: list[FileRead]
    users: dict[int, UserRead]


def plan_reads(
    entries: list[FileEntry],
    segments: dict[int, Segments],
    selection: Selection,
    wanted: list[str],
    with_lsn: bool = False,
    paging: bool = True,
) -> ReadProgram:
    """Which row groups of which files to read with which columns, and which segments of a Top-K to
    read by pages instead."""
    k = selection.top_k
    groups: list[set[int]] = [set() for _ in entries]
    need_ts, need_lsn = [False] * len(entries), [False] * len(entries)
    need_partition = [False] * len(entries)  # a cut by a frontier compares (source_partition, lsn)
    users = {}
    for user, s in segments.items():  # a handful of segments per user: plain Python is cheapest
        merge = needs_merge(s)
        lsn_for_ties = with_lsn and merge
        by_pages = set()
        if paging and k is not None:
            by_pages = set(np.flatnonzero(s.exact & (s.length - k >= PAGED_SKIP_ROWS)).tolist())
        paged = []
        rows = list(
            zip(
                s.file.tolist(),
                s.rg.tolist(),
                s.start.tolist(),
                s.length.tolist(),
                s.cut_ts.tolist(),
                s.cut_lsn.tolist(),
                strict=True,
            )
        )
        for i, (position, rg, start, n, cut_ts, cut_lsn) in enumerate(rows):
            if i in by_pages:
                paged.append((i, position, rg, start + n - k, start + n))
                continue
            groups[position].add(rg)
            need_ts[position] |= merge or cut_ts
            need_lsn[position] |= cut_lsn or lsn_for_ties
            need_partition[position] |= cut_lsn
        keys = (["event_ts"] if merge else []) + (["lsn"] if lsn_for_ties else [])
        order = np.argsort(s.ts_min, kind="stable").tolist()
        users[user] = (rows, merge, paged, list(dict.fromkeys(wanted + keys)), order, by_pages)

    files: list[FileRead] = []
    table_of: dict[int, tuple[int, dict[int, int]]] = {}
    for position in range(len(entries)):
        if not groups[position]:
            continue
        chosen = sorted(groups[position])
        keys = (["event_ts"] if need_ts[position] else []) + (["lsn"] if need_lsn[position] else [])
        keys += ["source_partition"] if need_partition[position] else []
        offsets, offset = {}, 0
        for rg in chosen:
            offsets[rg] = offset
            offset += int(entries[position].rows[rg])
        table_of[position] = (len(files), offsets)
        files.append(FileRead(position, chosen, list(dict.fromkeys(wanted + keys))))

    reads = {}
    for user, (rows, merge, paged, paged_columns, order, by_pages) in users.items():
        slices = []
        for i, (position, rg, start, n, cut_ts, cut_lsn) in enumerate(rows):
            if i in by_pages:
                slices.append((-1, 0, 0, False, False))
            else:
                table, offsets = table_of[position]
                slices.append((table, offsets[rg] + start, n, cut_ts, cut_lsn))
        reads[user] = UserRead(slices, paged, paged_columns, merge, order, _whole(slices, order, merge, files, entries))
    return ReadProgram(files, reads)


def _whole(slices: list, order: list[int], merging: bool, files: list[FileRead], entries: list[FileEntry]) -> int:
    """The file read that is exactly a user's rows in sequence order (its segments whole, uncut, back
    to back from the read's first row, in time order), or -1."""
    if merging or not slices or order != list(range(len(slices))):
        return -1
    table, expected = slices[0][0], 0
    for read, offset, n, cut_ts, cut_lsn in slices:
        if read != table or read < 0 or offset != expected or cut_ts or cut_lsn:
            return -1
        expected += n
    file = files[table]
    return table if expected == sum(int(entries[file.position].rows[rg]) for rg in file.groups) else -1


_POOLS: dict[int, ThreadPoolExecutor] = {}
_POOLS_LOCK = threading.Lock()


def file_pool(workers: int) -> ThreadPoolExecutor:
    """A shared pool of `workers` threads that read files in parallel: starting threads per
    multi-user read cost a fifth of a 256-user batch (`seqlake bench-peers`)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(workers)
        if pool is None:
            pool = _POOLS[workers] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="seqlake-read")
        return pool


def cut(table: pa.Table, offset: int, length: int, cut_ts: bool, cut_lsn: bool, selection: Selection) -> pa.Table:
    """One segment's selected rows: a slice, narrowed by a binary search on its (sorted) event times,
    filtered by the frontier, and for Top-K its newest K rows."""
    rows = table if offset == 0 and length == table.num_rows else table.slice(offset, length)
    if cut_ts:
        ts = timestamps(rows["event_ts"])
        low = 0 if selection.start is None else int(np.searchsorted(ts, micros(selection.start), "left"))
        high = len(ts) if selection.end is None else int(np.searchsorted(ts, micros(selection.end), "left"))
        rows = rows.slice(low, max(0, high - low))
    if cut_lsn:
        assert selection.as_of is not None  # segments are cut by LSN only under a frontier
        rows = rows.filter(pa.array(selection.as_of.covered(rows["source_partition"], rows["lsn"])))
    if selection.top_k is not None and rows.num_rows > selection.top_k:
        rows = rows.slice(rows.num_rows - selection.top_k)
    return rows


def needs_merge(segments: Segments) -> bool:
    """Whether the segments' time ranges overlap, so their rows must be merged on the key."""
    if len(segments) < 2:
        return False
    order = np.argsort(segments.ts_min, kind="stable")
    return not bool(np.all(segments.ts_max[order][:-1] < segments.ts_min[order][1:]))


def in_sequence(parts: list[pa.Table], merging: bool) -> pa.Table | None:
    """The parts (each in sequence order, given in order of their oldest event) as one table in
    sequence order; None when event-time ties across parts need `lsn`, which was not read."""
    if not parts:
        return pa.table({})
    if len(parts) == 1:
        return parts[0]
    # Files may have read different keys (one cut by LSN, another not): keep the common columns.
    names = [set(p.column_names) for p in parts]  # once per part: column_names builds a new list
    common = [c for c in parts[0].column_names if all(c in n for n in names)]
    parts = [p.select(common) if p.column_names != common else p for p in parts]
    if not merging:  # disjoint time ranges: concatenate in time order
        return pa.concat_tables(parts)
    ts = [timestamps(p["event_ts"]) for p in parts]
    lsn = [p["lsn"].to_numpy() for p in parts] if "lsn" in common else None
    order = merge_order(ts, lsn)
    if order is None:
        return None
    return pa.concat_tables(parts).take(pa.array(order))


def merge_order(ts: list[np.ndarray], lsn: list[np.ndarray] | None) -> np.ndarray | None:
    """The merge of sorted runs on (event_ts, lsn): positions into their concatenation. A stable
    timsort finds the runs and merges them (O(n log runs)); ties in event time between runs are
    broken by `lsn` (None if it is needed and absent)."""
    times = np.concatenate(ts)
    order = np.argsort(times, kind="stable")
    ordered = times[order]
    tied = ordered[1:] == ordered[:-1]
    if tied.any():
        run = np.repeat(np.arange(len(ts)), [len(t) for t in ts])[order]
        if (tied & (run[1:] != run[:-1])).any():
            if lsn is None:
                return None
            order = np.lexsort((np.concatenate(lsn), times))
    return order


def shape(rows: pa.Table, wanted: list[str], selection: Selection, empty: Callable[[], pa.Table]) -> pa.Table:
    """Top-K, direction and projection of a user's rows in sequence order."""
    if not rows.num_rows:
        return empty()
    if selection.top_k is not None and rows.num_rows > selection.top_k:
        rows = rows.slice(rows.num_rows - selection.top_k)
    if selection.newest_first:
        rows = rows.take(pa.array(np.arange(rows.num_rows - 1, -1, -1, dtype=np.int64)))
    return rows if rows.num_columns == len(wanted) and rows.column_names == wanted else rows.select(wanted)


def timestamps(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """Event times as int64 microseconds (zero-copy for one chunk)."""
    return column.cast(pa.int64()).to_numpy()


def read_user_from_file(
    fs, footers: FooterCache, uri: str, user_id: int, columns: list[str], selection: Selection = Selection()
) -> pa.Table:
    """One user's selected rows in one history file, with `columns` plus the sequence keys, in
    sequence order: the lookup of one file without a table (e.g. to compare file layouts)."""
    meta = load_footer(fs, footers, uri)
    entry = FileEntry(uri, meta)

    def read(path: str, groups: list[int], names: list[str]) -> pa.Table:
        return read_row_groups(fs, path, meta, groups, names)

    wanted = list(dict.fromkeys(list(columns) + list(SEQUENCE_ORDER)))
    segments = select_segments(entry.segments(0, int(user_id), read), selection)
    empty = pa.table({c: pa.array([], entry.schema.field(c).type) for c in wanted})
    return read_segments(read, [entry], {int(user_id): segments}, selection, wanted, lambda: empty)[int(user_id)]


def scan_condition(selection: Selection, user_ids: Iterable[int] | None = None) -> BooleanExpression:
    """The Iceberg filter of a lookup: the users (None: any user), the selection's time range and its
    frontier's highest LSN (files are pruned by LSN bounds; rows are cut by partition later)."""
    condition: BooleanExpression = AlwaysTrue()
    if user_ids is not None:
        condition = In("user_id", {int(u) for u in user_ids})
    if selection.start is not None:
        condition = And(condition, GreaterThanOrEqual("event_ts", selection.start.isoformat()))
    if selection.end is not None:
        condition = And(condition, LessThan("event_ts", selection.end.isoformat()))
    if selection.as_of is not None:
        condition = And(condition, LessThanOrEqual("lsn", selection.as_of.highest()))
    return condition


def finish(parts: list[pa.Table], wanted: list[str], selection: Selection, schema: pa.Schema) -> pa.Table:
    """Merge per-file parts into the final sequence: order, Top-K, projection."""
    parts = [p for p in parts if p.num_rows]
    if not parts:
        return schema.empty_table().select(wanted)
    table = pa.concat_tables(parts)
    table = table.sort_by([(k, "ascending") for k in SEQUENCE_ORDER])
    if selection.top_k is not None:
        table = table.slice(max(0, table.num_rows - selection.top_k))
    if selection.newest_first:
        table = table.take(pa.array(np.arange(table.num_rows - 1, -1, -1, dtype=np.int64)))
    return table.select(wanted)


def stats_overlap(stats, low, high, high_exclusive: bool = False) -> bool:
    """Whether a row group's [min, max] can hold a value in [low, high] (None: unbounded)."""
    if stats is None or not stats.has_min_max:
        return True
    if low is not None and stats.max < low:
        return False
    if high is None:
        return True
    return stats.min < high if high_exclusive else stats.min <= high


def row_filter(table: pa.Table, user_id: int, selection: Selection) -> pa.ChunkedArray:
    mask = pc.equal(table["user_id"], user_id)
    if selection.feature_groups is not None:
        mask = pc.and_(mask, pc.is_in(table["feature_group"], pa.array(selection.feature_groups)))
    if selection.start is not None:
        mask = pc.and_(mask, pc.greater_equal(table["event_ts"], pa.scalar(selection.start, table["event_ts"].type)))
    if selection.end is not None:
        mask = pc.and_(mask, pc.less(table["event_ts"], pa.scalar(selection.end, table["event_ts"].type)))
    if selection.as_of is not None:
        mask = pc.and_(mask, pa.array(selection.as_of.covered(table["source_partition"], table["lsn"])))
    return mask
