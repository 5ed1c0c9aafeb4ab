"""A bounded cache of decoded column chunks for repeated history reads.

Decoding is what a warm lookup pays for: with footers cached, `read_user` still decompresses and
decodes every projected column chunk of the user's row groups (all of a packed row group of up to
16,384 rows for a short history), and pyiceberg plans the files anew on every call. The cache keeps
what that work produces:

- `HistoryCache`: decoded column chunks keyed by (file, row group, column), LRU-evicted by their
  Arrow `nbytes` under `max_bytes`, thread-safe. Files are immutable, so an entry never goes stale;
  one entry serves every projection, selection and user that needs that chunk (neighbours packed in
  one row group share it), and `histories` uses it too.
- `CachedHistoryReader`: a `HistoryReader` whose lookups plan files from a per-snapshot file index
  (one Iceberg scan per snapshot and time/LSN bounds, then the manifests' bucket and `user_id` bounds)
  and read row groups through the cache.

Results are identical to `HistoryReader.read_user`: the same planner chooses the row groups, the same
filter and `finish` shape the rows; only where the decoded chunks come from differs. A file that the
index keeps but Iceberg would have pruned holds no selected rows of the user, so it adds nothing.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable

import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.table import Table

from tableformat.io import FooterCache
from tableformat.multi_reader import WHOLE, FileIndex, FileLayout, read_users_from_file, scan_condition
from tableformat.reader import HistoryReader, Selection

DEFAULT_MAX_BYTES = 256 * 2**20
INDEXES_KEPT = 16  # file indexes (per snapshot and time/LSN bounds) a cached reader keeps


class HistoryCache:
    """An LRU of decoded Arrow values bounded by their total `nbytes`; safe to share between threads.

    `hits` and `misses` count lookups (column chunks, for the history reader); a value larger than
    `max_bytes` is never kept."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        self.max_bytes = max_bytes
        self._entries: OrderedDict[Hashable, tuple[object, int]] = OrderedDict()
        self._lock = threading.Lock()
        self.bytes = 0
        self.hits = self.misses = self.evictions = 0

    @property
    def hit_rate(self) -> float:
        lookups = self.hits + self.misses
        return self.hits / lookups if lookups else 0.0

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def get(self, key: Hashable):
        with self._lock:
            entry = self._entries.get(key)
            if entry is None:
                self.misses += 1
                return None
            self.hits += 1
            self._entries.move_to_end(key)
            return entry[0]

    def put(self, key: Hashable, value) -> None:
        size = int(value.nbytes)
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            if size > self.max_bytes:
                return
            self._entries[key] = (value, size)
            self.bytes += size
            while self.bytes > self.max_bytes:
                _, (_, evicted) = self._entries.popitem(last=False)
                self.bytes -= evicted
                self.evictions += 1

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.bytes = 0

    def reset_stats(self) -> None:
        with self._lock:
            self.hits = self.misses = self.evictions = 0

    def __repr__(self) -> str:
        return (
            f"HistoryCache({self.bytes:,}/{self.max_bytes:,} B, {len(self._entries)} entries, "
            f"hits={self.hits}, misses={self.misses}, hit_rate={self.hit_rate:.3f})"
        )


class CachedHistoryReader(HistoryReader):
    """`HistoryReader` with decoded column chunks cached (`cache`) and file plans indexed per snapshot."""

    def __init__(
        self,
        table: Table,
        filesystem=None,
        footer_cache: FooterCache | None = None,
        cache: HistoryCache | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        super().__init__(table, filesystem, footer_cache)
        self.cache = cache if cache is not None else HistoryCache(max_bytes)
        self._indexes: OrderedDict[tuple, FileIndex] = OrderedDict()
        self._lock = threading.Lock()

    # -- planning ------------------------------------------------------------------------------

    def file_index(self, selection: Selection = WHOLE) -> FileIndex:
        """The files of the current snapshot within the selection's time and LSN bounds (one Iceberg
        scan per snapshot and bounds, kept for the next lookups)."""
        meta = self.table.metadata
        key = (str(meta.table_uuid), meta.current_snapshot_id, selection.start, selection.end, selection.as_of_lsn)
        with self._lock:
            index = self._indexes.get(key)
            if index is not None:
                self._indexes.move_to_end(key)
                return index
        index = FileIndex(self.table, scan_condition(selection))
        with self._lock:
            self._indexes[key] = index
            while len(self._indexes) > INDEXES_KEPT:
                self._indexes.popitem(last=False)
        return index

    def files_for_user(self, user_id: int, selection: Selection = WHOLE) -> list[str]:
        return [plan.uri for plan in self.file_index(selection).plans([int(user_id)])]

    # -- reading -------------------------------------------------------------------------------

    def read_user_in_file(
        self, uri: str, user_id: int, wanted: list[str], selection: Selection | None = None
    ) -> pa.Table:
        user = int(user_id)
        return read_users_from_file(self.fs, self.footers, uri, [user], wanted, selection or WHOLE, self.group_source)[
            user
        ]

    def group_source(
        self,
        uri: str,
        layout: FileLayout,
        parquet: Callable[[], pq.ParquetFile],
        groups: list[int],
        columns: list[str],
    ) -> pa.Table:
        """The rows of `groups` (ascending) with `columns`, from cached chunks; the missing chunks are
        decoded in one `read_row_groups` call and cached, one Arrow array per (row group, column)."""
        found: dict[tuple[int, str], pa.Array] = {}
        missing_groups, missing_columns = [], []
        for rg in groups:
            absent = False
            for column in columns:
                value = self.cache.get((uri, rg, column))
                if value is None:
                    absent = True
                    if column not in missing_columns:
                        missing_columns.append(column)
                else:
                    found[rg, column] = value
            if absent:
                missing_groups.append(rg)
        if missing_groups:
            read = parquet().read_row_groups(missing_groups, columns=missing_columns)
            offset = 0
            for rg in missing_groups:
                rows = layout.rows[rg]
                for column in missing_columns:
                    chunk = read[column].slice(offset, rows)
                    # One array per row group that owns its buffers, so evicting it frees its memory.
                    if len(missing_groups) == 1 and chunk.num_chunks == 1:
                        value = chunk.chunk(0)
                    else:
                        value = pa.concat_arrays(chunk.chunks) if chunk.num_chunks else pa.array([], chunk.type)
                    self.cache.put((uri, rg, column), value)
                    found[rg, column] = value
                offset += rows
        fields = [layout.schema.field(c) for c in columns]
        arrays = [pa.chunked_array([found[rg, f.name] for rg in groups], f.type) for f in fields]
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=layout.schema.metadata))
