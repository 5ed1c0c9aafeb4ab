"""A bounded cache of decoded column chunks for repeated history reads.

Decoding is what a warm lookup pays for: with footers cached and the lookup planned from the
per-snapshot lookup index, `read_user` still decompresses and decodes every projected column chunk
of the user's row groups (all of a packed row group of up to 16,384 rows for a short history). The
cache keeps what that work produces:

- `HistoryCache`: decoded column chunks keyed by (file, row group, column), LRU-evicted by their
  Arrow `nbytes` under `max_bytes`, thread-safe. Files are immutable, so an entry never goes stale;
  one entry serves every projection, selection and user that needs that chunk (neighbours packed in
  one row group share it), and `histories` uses it too.
- `CachedHistoryReader`: a `HistoryReader` whose row groups are read through the cache, and which
  also keeps each user's assembled result per (snapshot, selection) for selections without time or
  LSN bounds (serving reads; a bounded selection belongs to one request): a hot user's repeated
  lookup is one cache hit, returning the same zero-copy slices.

Sizing: every entry counts its Arrow `nbytes` against `max_bytes` (an assembled result counts the
chunk bytes it references once more, so the bound is conservative). Size it to the working set: the
decoded bytes of the hot users' asked columns (about 8 B a row for an int64 column, 4 B for int32,
plus the dictionary-decoded strings), twice over when their assembled results are kept too.
`hits`, `misses`, `hit_rate` and `bytes` report how it does.

Results are identical to `HistoryReader.read_user`: the same index plans the segments and the same
code cuts and orders them; only where the decoded chunks come from differs.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any

import pyarrow as pa
from cachetools import LRUCache
from pyiceberg.table import Table

from seqlake.tableformat.counted_cache import CountedCache
from seqlake.tableformat.io import FooterCache
from seqlake.tableformat.reader import HistoryReader, Selection

DEFAULT_MAX_BYTES = 1024 * 2**20  # 1 GiB: a realistic hot working set of long histories


class _BytesLRU(LRUCache):
    """cachetools' LRU weighed by Arrow `nbytes`, counting what it evicts."""

    def __init__(self, max_bytes: int) -> None:
        super().__init__(maxsize=max_bytes, getsizeof=lambda value: int(value.nbytes))
        self.evictions = 0

    def popitem(self):
        self.evictions += 1
        return super().popitem()


class HistoryCache(CountedCache[Hashable, Any]):
    """An LRU of decoded Arrow values bounded by their total `nbytes` (cachetools); safe to share
    between threads.

    `hits` and `misses` count lookups (column chunks, for the history reader); a value larger than
    `max_bytes` is never kept."""

    _entries: _BytesLRU

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
        super().__init__(_BytesLRU(max_bytes))
        self.max_bytes = max_bytes

    @property
    def bytes(self) -> int:
        return int(self._entries.currsize)

    @property
    def evictions(self) -> int:
        return self._entries.evictions

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: Hashable) -> bool:
        return key in self._entries

    def get(self, key: Hashable):
        return self.lookup(key)

    def put(self, key: Hashable, value) -> None:
        with self._lock:
            self._entries.pop(key, None)
            if int(value.nbytes) <= self.max_bytes:
                self._entries[key] = value

    def clear(self) -> None:
        with self._lock:
            evictions = self._entries.evictions  # emptying it is not eviction
            self._entries = _BytesLRU(self.max_bytes)
            self._entries.evictions = evictions

    def reset_stats(self) -> None:
        with self._lock:
            self.hits = self.misses = self._entries.evictions = 0

    def __repr__(self) -> str:
        return (
            f"HistoryCache({self.bytes:,}/{self.max_bytes:,} B, {len(self._entries)} entries, "
            f"hits={self.hits}, misses={self.misses}, hit_rate={self.hit_rate:.3f})"
        )


class CachedHistoryReader(HistoryReader):
    """`HistoryReader` whose row groups come from decoded column chunks cached in `cache`."""

    def __init__(
        self,
        table: Table,
        filesystem=None,
        footer_cache: FooterCache | None = None,
        cache: HistoryCache | None = None,
        max_bytes: int = DEFAULT_MAX_BYTES,
        keep_results: bool = True,
    ) -> None:
        super().__init__(table, filesystem, footer_cache)
        self.cache = cache if cache is not None else HistoryCache(max_bytes)
        self.keep_results = keep_results  # False: cache decoded chunks only, assemble every lookup

    def read_users(
        self, user_ids: Iterable[int], selection: Selection | None = None, max_workers: int = 1
    ) -> dict[int, pa.Table]:
        """As `HistoryReader.read_users`, with each user's assembled result kept for its next lookup
        with the same selection in the same snapshot (its columns are slices of the cached chunks)."""
        selection = selection or Selection()
        bounded = any(v is not None for v in (selection.start, selection.end, selection.as_of))
        if not self.keep_results or bounded:  # a time range or a frontier is one request's: rarely asked again
            return super().read_users(user_ids, selection, max_workers)
        self.check(selection)
        snapshot = self.lookup_index().key
        ids = list(dict.fromkeys(int(u) for u in user_ids))
        found = {u: self.cache.get(("user", snapshot, u, selection)) for u in ids}
        missing = [u for u, rows in found.items() if rows is None]
        if missing:
            for user, rows in super().read_users(missing, selection, max_workers).items():
                self.cache.put(("user", snapshot, user, selection), rows)
                found[user] = rows
        return found

    def read_rows(self, uri: str, rg: int, low: int, high: int, columns: list[str]) -> pa.Table | None:
        """Rows [low, high) of one row group: sliced from its cached chunks when all are cached, else
        decoded from their pages and cached as such (a hot user's Top-K asks the same range again)."""
        if all((uri, rg, c) in self.cache for c in columns):
            return self.read_groups(uri, [rg], columns).slice(low, high - low)
        key = (uri, rg, low, high, tuple(columns))
        rows = self.cache.get(key)
        if rows is None:
            rows = super().read_rows(uri, rg, low, high, columns)
            if rows is not None:
                self.cache.put(key, rows)
        return rows

    def read_groups(self, uri: str, groups: list[int], columns: list[str]) -> pa.Table:
        """The rows of `groups` (ascending) with `columns`, from cached chunks; the missing chunks are
        decoded in one `read_row_groups` call and cached, one Arrow array per (row group, column)."""
        if self.cache.max_bytes == 0:  # nothing can be kept: no bookkeeping, no copies
            return super().read_groups(uri, groups, columns)
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
            read = super().read_groups(uri, missing_groups, missing_columns)
            offset = 0
            meta = self.footer(uri)
            for rg in missing_groups:
                rows = meta.row_group(rg).num_rows
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
        schema = self.lookup_index().entry(uri).schema
        projected = self.projection(uri).fields  # the file's fields, or the current ones it predates
        fields = [projected[c] for c in columns]
        arrays = [pa.chunked_array([found[rg, f.name] for rg in groups], f.type) for f in fields]
        return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=schema.metadata))
