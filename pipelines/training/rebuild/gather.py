"""Which rows each pointer's sequence holds, in order: vectorized index arithmetic over sorted keys.

A request's sequence is, in its user's history sorted by (event_ts, lsn, source_partition), one
contiguous range (the captured event-time range, older than the fragment's first key) found by
binary search, minus the rows invisible under the pointer's LSN bound (late arrivals) and the open
window's rows, plus that window rebuilt from detail as of the bound (inserted at their keys), cut to
the newest `length - W`, then the fragment. Requests of one user overlap heavily: they all index
one copy of the user's rows. The result is an index (`take`) into one table of source rows (history,
rebuilt open-window rows, fragment rows) and the offsets of each sequence in it, so the list columns
are one gather per column and the checksum one vectorized fold (`sequence_digest.fold_checksums`).

Everything is numpy over whole batches (searchsorted, repeat, cumsum), never a loop per pointer or
row; the open window's rebuild is the compaction's aggregation SQL, run by DuckDB over Arrow.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seqlake.core.config import Config
from seqlake.engines.duckdb_session import connect
from seqlake.pipelines.compaction.aggregation import aggregation_sql
from seqlake.pipelines.training.rebuild.plan import Mode
from seqlake.pipelines.training.sequence import Tenant
from seqlake.pipelines.training.tables import FRAGMENT
from seqlake.tableformat.frontier import bound_matrix


@dataclass(frozen=True)
class SequenceRows:
    """Every sequence of a batch: sequence p is `rows.take(take[offsets[p]:offsets[p + 1]])`."""

    rows: pa.Table  # source rows: history, rebuilt open-window rows, fragment rows
    take: np.ndarray  # int64 indices into rows, sequence after sequence, oldest row first
    offsets: np.ndarray  # int64, one more than there are pointers
    # Per pointer, under an exact event-time bound: rows left out because they merged events at or
    # after the bound and their window's detail has expired (None: no bound, or nothing left out).
    withheld: np.ndarray | None = None

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def lists(self, columns: list[str]) -> dict[str, pa.ListArray]:
        """List columns, one value per pointer: one gather per column, offsets shared."""
        offsets = pa.array(self.offsets.astype(np.int32))
        index = pa.array(self.take)
        return {c: pa.ListArray.from_arrays(offsets, _array(self.rows[c]).take(index)) for c in columns}


def _array(values: pa.Array | pa.ChunkedArray) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        return values.chunk(0) if values.num_chunks == 1 else values.combine_chunks()
    return values


def _micros(values) -> np.ndarray:
    """Timestamps (or int64) as int64 microseconds; nulls as 0 (callers mask them)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    if pa.types.is_timestamp(values.type):
        values = values.cast(pa.timestamp("us", tz=values.type.tz)).cast(pa.int64())
    return values.cast(pa.int64()).fill_null(0).to_numpy(zero_copy_only=False)


def _numpy(values, kind=np.int64, fill=0) -> np.ndarray:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values.fill_null(fill).to_numpy(zero_copy_only=False).astype(kind, copy=False)


def _valid(values) -> np.ndarray:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values.is_valid().to_numpy(zero_copy_only=False)


class SortedHistory:
    """The batch's history rows of the tenant's groups, each user's rows one segment in key order
    (event_ts, lsn, source_partition), and binary searches inside segments."""

    def __init__(self, history: pa.Table, tenant: Tenant) -> None:
        if history.num_rows:
            history = history.filter(pc.is_in(history["feature_group"], pa.array(tenant.feature_groups)))
        user = _numpy(history["user_id"])
        ts, lsn = _micros(history["event_ts"]), _numpy(history["lsn"])
        partition = _numpy(history["source_partition"])
        if not _in_segments(user, ts, lsn, partition):
            order = np.lexsort((partition, lsn, ts, user))
            history = history.take(pa.array(order))
            user, ts, lsn, partition = user[order], ts[order], lsn[order], partition[order]
        self.rows, self.user, self.ts, self.lsn, self.partition = history, user, ts, lsn, partition
        first = np.flatnonzero(np.concatenate([[True], user[1:] != user[:-1]])) if len(user) else np.zeros(0, np.int64)
        self.segment_starts = first.astype(np.int64)
        self.segment_ends = np.concatenate([first[1:], [len(user)]]).astype(np.int64)
        self._by_user = np.argsort(user[first], kind="stable")
        self._users = user[first][self._by_user]
        segment = np.repeat(np.arange(len(first), dtype=np.int64), self.segment_ends - self.segment_starts)
        # One monotone int64 key (segment, event time): times relative to the batch's earliest when
        # the product fits, else their dense ranks.
        self.low = int(ts.min()) if len(ts) else 0
        span = int(ts.max()) - self.low + 2 if len(ts) else 2
        self.times = None
        if span * (len(first) + 1) >= 2**62:
            self.times = np.unique(ts)
            span = len(self.times) + 1
        self.width = span
        self.keys = segment * span + self._time_keys(ts, inclusive=False)

    def _time_keys(self, ts: np.ndarray, inclusive: bool) -> np.ndarray:
        """Keys of times inside a segment: rows compare as `ts`, a query `inclusive` counts ties."""
        if self.times is not None:
            return np.searchsorted(self.times, ts, side="right" if inclusive else "left")
        if inclusive:  # rows' keys are 0 .. width - 2
            return np.clip(ts - self.low, -1, self.width - 2) + 1
        return np.clip(ts - self.low, 0, self.width - 1)

    def segments(self, users: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Segment number (-1 when absent), start and end of each user's rows."""
        if len(self._users) == 0:
            nothing = np.zeros(len(users), np.int64)
            return nothing - 1, nothing, nothing.copy()
        at = np.minimum(np.searchsorted(self._users, users), len(self._users) - 1)
        found = self._users[at] == users
        segment = np.where(found, self._by_user[at], -1)
        start = np.where(found, self.segment_starts[np.maximum(segment, 0)], 0)
        end = np.where(found, self.segment_ends[np.maximum(segment, 0)], 0)
        return segment, start, end

    def count_before(self, segment: np.ndarray, start: np.ndarray, ts: np.ndarray, inclusive: bool) -> np.ndarray:
        """Index of the first row of each segment with event_ts >= ts (> ts when `inclusive`)."""
        if len(self.keys) == 0:
            return start.copy()
        query = np.maximum(segment, 0) * self.width + self._time_keys(ts, inclusive)
        return np.where(segment >= 0, np.searchsorted(self.keys, query, side="left"), start)

    def first_at_or_after(
        self, segment: np.ndarray, start: np.ndarray, ts: np.ndarray, lsn: np.ndarray, partition: np.ndarray
    ) -> np.ndarray:
        """Index of the first row of each segment whose (event_ts, lsn, partition) >= the key: rows of
        the same event time are few, so they are compared one by one, all keys at once."""
        low = self.count_before(segment, start, ts, inclusive=False)
        high = self.count_before(segment, start, ts, inclusive=True)
        ties = high - low
        if not ties.any():
            return low
        owner = np.repeat(np.arange(len(low)), ties)
        row = np.repeat(low, ties) + _ranks(ties)
        before = (self.lsn[row] < lsn[owner]) | (
            (self.lsn[row] == lsn[owner]) & (self.partition[row] < partition[owner])
        )
        return low + np.bincount(owner, weights=before, minlength=len(low)).astype(np.int64)


def _in_segments(user: np.ndarray, ts: np.ndarray, lsn: np.ndarray, partition: np.ndarray) -> bool:
    """Whether each user's rows are one run, in key order (users in any order)."""
    if len(user) < 2:
        return True
    du, dt, dl, dp = (np.diff(a) for a in (user, ts, lsn, partition))
    same = du == 0
    ordered = (dt > 0) | ((dt == 0) & ((dl > 0) | ((dl == 0) & (dp >= 0))))
    if not np.all(ordered | ~same):
        return False
    runs = user[np.concatenate([[True], ~same])]
    return len(np.unique(runs)) == len(runs)


def _ranks(counts: np.ndarray) -> np.ndarray:
    """0, 1, ..., counts[i] - 1 for each i, concatenated."""
    total = int(counts.sum())
    starts = np.cumsum(counts) - counts
    return np.arange(total, dtype=np.int64) - np.repeat(starts, counts)


def _spans(starts: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """starts[i], starts[i] + 1, ..., starts[i] + counts[i] - 1 for each i, concatenated."""
    return np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(int(counts.sum()), dtype=np.int64)


@dataclass(frozen=True)
class _Pointers:
    user: np.ndarray
    has_range: np.ndarray
    start: np.ndarray
    end: np.ndarray
    has_fragment_key: np.ndarray
    key_ts: np.ndarray
    key_lsn: np.ndarray
    key_partition: np.ndarray
    open_window: np.ndarray
    need: np.ndarray  # history rows kept before the fragment (the newest ones)
    fragment_lengths: np.ndarray

    @classmethod
    def of(cls, pointers: pa.Table, tenant: Tenant, cut: bool) -> _Pointers:
        n = pointers.num_rows
        fragment = pointers[f"{FRAGMENT}event_ts"].combine_chunks()
        fragment_lengths = _numpy(pc.list_value_length(fragment)) if n else np.zeros(0, np.int64)
        need = _numpy(pointers["length"]) - fragment_lengths if cut else np.full(n, np.iinfo(np.int64).max)
        return cls(
            user=_numpy(pointers["user_id"]),
            has_range=_valid(pointers["range_start"]) & _valid(pointers["range_end"]),
            start=_micros(pointers["range_start"]),
            end=_micros(pointers["range_end"]),
            has_fragment_key=_valid(pointers["fragment_start_ts"]),
            key_ts=_micros(pointers["fragment_start_ts"]),
            key_lsn=_numpy(pointers["fragment_start_lsn"]),
            key_partition=_numpy(pointers["fragment_start_partition"]),
            open_window=_numpy(pointers["open_window"]),
            need=need,
            fragment_lengths=fragment_lengths,
        )


_REBUILD_SQL: dict[int, tuple[Config, str]] = {}


def _rebuild_sql(config: Config) -> str:
    """The open window's aggregation per (pointer, item) in DuckDB, translated once per configuration."""
    found = _REBUILD_SQL.get(id(config))
    if found is None or found[0] is not config:
        if len(_REBUILD_SQL) >= 8:  # a process has few configurations: keep the newest few
            _REBUILD_SQL.clear()
        found = _REBUILD_SQL[id(config)] = (config, aggregation_sql(config, "_visible_events", "duckdb", ("_pos",)))
    return found[1]


def rebuilt_open_window(
    config: Config, tenant: Tenant, pointers: pa.Table, events: pa.Table, con: duckdb.DuckDBPyConnection | None = None
) -> pa.Table:
    """Each pointer's open window as of its LSN bound (`_pos`, the pointer's position, then the
    history columns): its user's detail events in that window up to the bound of their source
    partition, aggregated per (pointer, item) with the declared merge operators, the tenant's
    groups only."""
    own = con is None
    if con is None:
        con = connect(extensions=())
    try:
        keys = pointers.select(["user_id", "open_window", "lsn_bound"])
        con.register("_pointers", keys.append_column("_pos", pa.array(np.arange(keys.num_rows, dtype=np.int64))))
        con.register("_events", events)
        visible = (
            "WITH _bounds AS (SELECT _pos, user_id, open_window AS window_id, "
            "unnest(map_keys(lsn_bound)) AS source_partition, unnest(map_values(lsn_bound)) AS lsn_bound "
            "FROM _pointers), "
            "_visible_events AS (SELECT b._pos, e.* FROM _events AS e JOIN _bounds AS b "
            "ON e.user_id = b.user_id AND e.window_id = b.window_id "
            "AND e.source_partition = b.source_partition AND e.lsn <= b.lsn_bound) "
        )
        groups = pa.array(tenant.feature_groups)
        rows = con.execute(f"{visible}{_rebuild_sql(config)}").to_arrow_table()
    finally:
        if own:
            con.close()
    return rows.filter(pc.is_in(rows["feature_group"], groups))


@dataclass(frozen=True)
class WindowDetail:
    """The detail events a time-bounded gather rebuilds windows from: the windows the detail table
    still holds, and `events(users, windows)`, their landing rows of those users."""

    windows: frozenset[int]
    events: Callable[[list[int], list[int]], pa.Table]


def latest_event_micros(rows: pa.Table, window_seconds: int) -> np.ndarray:
    """Each history row's latest merged event time (`last_event_ts`) in microseconds. A null is a
    single-event row's (its event time); in files written before the column every row reads null,
    and a row of more events then ends at its window's last microsecond (a window's events all
    arrived, so happened, before its end)."""
    ts = _micros(rows["event_ts"])
    if "last_event_ts" not in rows.column_names:
        raise ValueError("latest_event_micros needs the rows' last_event_ts")
    last = _micros(rows["last_event_ts"])
    known = _valid(rows["last_event_ts"])
    if known.all():
        return last
    window_end = (_numpy(rows["window_id"]) + 1) * window_seconds * 1_000_000 - 1
    single = _numpy(rows["event_count"], fill=2) <= 1 if "event_count" in rows.column_names else False
    return np.where(known, last, np.where(single, ts, np.maximum(window_end, ts)))


def gather_sequences(
    config: Config,
    tenant: Tenant,
    mode: Mode,
    pointers: pa.Table,
    history: pa.Table,
    events: pa.Table | None,
    *,
    cut_to_length: bool | None = None,
    extra: tuple[str, ...] = (),
    con: duckdb.DuckDBPyConnection | None = None,
    exact_until: WindowDetail | None = None,
) -> SequenceRows:
    """Every pointer's sequence as indices into one table of source rows (the model columns plus
    `extra` history columns, null on fragment rows).

    `pointers`: training rows (pointer and fragment columns); `history`: the users' history rows
    (`user_id` and the tenant's read columns), in any order; `events`: LSN mode, the open windows'
    detail events. LSN mode keeps the newest `length - W` candidates (history visible under the
    bound outside the open window, and the open window rebuilt); time mode takes every history row
    of the range before the fragment's first event time, cut to `length - W` only with
    `cut_to_length` (backfills)."""
    lsn_mode = mode == "lsn"
    cut = lsn_mode if cut_to_length is None else cut_to_length or lsn_mode
    p = _Pointers.of(pointers, tenant, cut)
    n = pointers.num_rows
    h = SortedHistory(history, tenant)
    segment, seg_start, _ = h.segments(p.user)
    # The candidate range: [range_start, range_end] and older than the fragment's first key.
    low = h.count_before(segment, seg_start, p.start, inclusive=False)
    high = h.count_before(segment, seg_start, p.end, inclusive=True)
    if lsn_mode:
        before_fragment = h.first_at_or_after(segment, seg_start, p.key_ts, p.key_lsn, p.key_partition)
    else:
        before_fragment = h.count_before(segment, seg_start, p.key_ts, inclusive=False)
    high = np.where(p.has_fragment_key, np.minimum(high, before_fragment), high)
    high = np.where(p.has_range, np.maximum(high, low), low)

    # Rows some pointer may not see (above the lowest bound of their partition, or in an open
    # window): only those are checked per pointer. A range keeps its newest `need` rows plus as
    # many as it holds such rows.
    hidden = None
    if lsn_mode and h.rows.num_rows:
        matrix, column = bound_matrix(pointers["lsn_bound"], h.partition)
        window = _numpy(h.rows["window_id"])
        hidden = (h.lsn > matrix.min(axis=0, initial=np.iinfo(np.int64).max)[column]) | np.isin(
            window, np.unique(p.open_window)
        )
        if hidden.any():
            before = np.concatenate([[0], np.cumsum(hidden)])
            maybe = before[high] - before[low]
        else:
            hidden, maybe = None, np.zeros(n, np.int64)
    elif exact_until is not None and h.rows.num_rows:
        last = latest_event_micros(h.rows, config.layout.window_seconds)
        window = _numpy(h.rows["window_id"])
        # Rows of a (user, window) that holds a row spanning time: a pointer inside the span sees the
        # window rebuilt, or the spanning rows withheld.
        spans = last > h.ts
        hidden = None
        if spans.any():
            owner_window = _user_windows(h, window)
            hidden = np.isin(owner_window, np.unique(owner_window[spans]))
            before = np.concatenate([[0], np.cumsum(hidden)])
            maybe = before[high] - before[low]
        else:
            maybe = np.zeros(n, np.int64)
    else:
        maybe = np.zeros(n, np.int64)
    need = np.maximum(p.need, 0)
    low = high - np.minimum(high - low, np.minimum(need, high - low) + maybe)
    counts = high - low
    rebuilt = None
    if lsn_mode and events is not None and events.num_rows:
        rebuilt = _candidates(rebuilt_open_window(config, tenant, pointers, events, con), p)
        rebuilt = rebuilt if rebuilt.num_rows else None
    bounded = None
    if not lsn_mode and hidden is not None and exact_until is not None:
        bounded = _bounded_windows(config, tenant, pointers, p, h, hidden, last, window, low, counts, exact_until, con)
        rebuilt = bounded.rebuilt if bounded.rebuilt.num_rows else None

    source_names = list(dict.fromkeys([*tenant.model_columns, *extra]))
    schema = pa.schema(
        [
            tenant.schema.field(c) if c in tenant.model_columns else h.rows.schema.field(c).with_nullable(True)
            for c in source_names
        ]
    )
    parts = [h.rows.select(source_names).cast(schema)]
    if hidden is None and rebuilt is None:
        # Every candidate is visible: each range is its sequence's history part as it stands.
        kept_starts, kept_counts, kept = low, counts, None
    else:
        owner = np.repeat(np.arange(n, dtype=np.int64), counts)
        row = _spans(low, counts)
        visible = np.ones(len(row), bool)
        if bounded is not None:
            visible = bounded.visible
        elif hidden is not None:
            check = np.flatnonzero(hidden[row])
            who, where = owner[check], row[check]
            visible[check] = (window[where] != p.open_window[who]) & (h.lsn[where] <= matrix[who, column[where]])
        source = row
        if rebuilt is not None:
            owner, source, visible = _merge_rebuilt(h, rebuilt, segment, seg_start, low, counts, owner, row, visible)
            parts.append(rebuilt.select(source_names).cast(schema))
        # Keep the newest `need` visible candidates of each pointer.
        seen = np.cumsum(visible)
        per_pointer = np.bincount(owner, weights=visible, minlength=n).astype(np.int64)
        first = np.concatenate([[0], np.cumsum(np.bincount(owner, minlength=n))])[:-1].astype(np.int64)
        rank = seen - np.concatenate([[0], seen])[first][owner]  # 1-based among the pointer's visible ones
        keep = visible & (rank > per_pointer[owner] - np.minimum(need, per_pointer)[owner])
        kept = source[keep]
        kept_counts = np.bincount(owner[keep], minlength=n).astype(np.int64)
        kept_starts = np.cumsum(kept_counts) - kept_counts

    # Each sequence: its kept rows, then its fragment's rows (source rows after history and rebuilt).
    fragment = _fragment_rows(pointers, tenant, source_names, schema)
    parts.append(fragment)
    base = sum(part.num_rows for part in parts[:-1])
    fragment_starts = np.cumsum(p.fragment_lengths) - p.fragment_lengths
    lengths = np.stack([kept_counts, p.fragment_lengths], axis=1).ravel()
    if kept is None:
        take = _spans(np.stack([kept_starts, base + fragment_starts], axis=1).ravel(), lengths)
    else:  # kept rows are listed apart: positions in [kept rows, fragment rows], then source rows
        lookup = np.concatenate([kept, base + np.arange(fragment.num_rows, dtype=np.int64)])
        take = lookup[_spans(np.stack([kept_starts, len(kept) + fragment_starts], axis=1).ravel(), lengths)]
    offsets = np.concatenate([[0], np.cumsum(kept_counts + p.fragment_lengths)]).astype(np.int64)
    rows = pa.concat_tables(parts).combine_chunks()
    return SequenceRows(rows, take, offsets, None if bounded is None else bounded.withheld)


def _user_windows(h: SortedHistory, window: np.ndarray) -> np.ndarray:
    """One int64 per row naming its (user segment, window)."""
    segment = np.repeat(np.arange(len(h.segment_starts), dtype=np.int64), h.segment_ends - h.segment_starts)
    _, dense = np.unique(window, return_inverse=True)
    return segment * (int(dense.max()) + 1 if len(dense) else 1) + dense


@dataclass(frozen=True)
class _Bounded:
    visible: np.ndarray  # per candidate (owner, row) of the spans, in candidate order
    rebuilt: pa.Table  # rebuilt windows' rows, candidates of their pointers, sorted by (pointer, key)
    withheld: np.ndarray  # per pointer


def _bounded_windows(config, tenant, pointers, p: _Pointers, h, hidden, last, window, low, counts, detail, con):
    """Under an exact event-time bound: which candidates each pointer sees, and its rebuilt windows."""
    n = len(low)
    owner = np.repeat(np.arange(n, dtype=np.int64), counts)
    row = _spans(low, counts)
    check = np.flatnonzero(hidden[row])
    who, where = owner[check], row[check]
    straddles = last[where] > p.end[who]
    # (pointer, window) pairs as one int64: those holding a row that merged events after the end.
    first, width = int(window.min()), int(window.max()) - int(window.min()) + 1
    pair_of = who * width + (window[where] - first)
    pairs = np.unique(pair_of[straddles])
    pair_owner, pair_window = pairs // width, pairs % width + first
    held = np.isin(pair_window, np.fromiter(detail.windows, np.int64, len(detail.windows)))
    rebuilt_here = np.isin(pair_of, pairs[held])
    lost = straddles & ~rebuilt_here
    visible = np.ones(len(row), bool)
    visible[check] = ~rebuilt_here & ~lost
    withheld = np.bincount(who[lost], minlength=n).astype(np.int64)
    rebuilt = _rebuild_until(config, tenant, p, pair_owner[held], pair_window[held], detail, con)
    return _Bounded(visible, _candidates(rebuilt, p), withheld)


def _rebuild_until(config, tenant, p: _Pointers, owner: np.ndarray, windows: np.ndarray, detail, con) -> pa.Table:
    """The (pointer, window) pairs' rows from the window's detail events of the pointer's user with
    event_ts <= its range_end, aggregated per (pair, item) by the compaction's SQL (`_pos`: the pointer)."""
    users = p.user[owner]
    if len(owner) == 0:
        events = detail.events([], [])
    else:
        events = detail.events(np.unique(users).tolist(), np.unique(windows).tolist())
    return rebuild_windows_until(config, tenant.feature_groups, owner, users, windows, p.end[owner], events, con)


def rebuild_windows_until(
    config: Config,
    feature_groups: tuple[str, ...],
    owner: np.ndarray,
    users: np.ndarray,
    windows: np.ndarray,
    until: np.ndarray,
    events: pa.Table,
    con: duckdb.DuckDBPyConnection | None = None,
) -> pa.Table:
    """Pairs i = (users[i], windows[i]) rebuilt from `events` (detail rows) of that user and window
    with event_ts <= until[i] (int64 microseconds, inclusive), aggregated per (pair, item) by the
    compaction's SQL in one DuckDB query: `_pos` (owner[i], whom the pair is for), `_pair` (i), then
    the history columns; rows of `feature_groups` only. Each row is stamped with its earliest event."""
    own = con is None
    if con is None:
        con = connect(extensions=())
    try:
        pairs = pa.table(
            {
                "_pos": pa.array(owner, pa.int64()),
                "_pair": pa.array(np.arange(len(owner), dtype=np.int64)),
                "user_id": pa.array(users, pa.int64()),
                "window_id": pa.array(windows, pa.int64()),
                "_until": pa.array(until, pa.int64()),
            }
        )
        con.register("_bounded_pairs", pairs)
        con.register("_bounded_events", events)
        visible = (
            "WITH _visible_events AS (SELECT b._pos, b._pair, e.* FROM _bounded_events AS e "
            "JOIN _bounded_pairs AS b ON e.user_id = b.user_id AND e.window_id = b.window_id "
            "AND epoch_us(e.event_ts) <= b._until) "
        )
        rows = con.execute(f"{visible}{_until_sql(config)}").to_arrow_table()
        con.unregister("_bounded_pairs")
        con.unregister("_bounded_events")
    finally:
        if own:
            con.close()
    return rows.filter(pc.is_in(rows["feature_group"], pa.array(feature_groups)))


_UNTIL_SQL: dict[int, tuple[Config, str]] = {}


def _until_sql(config: Config) -> str:
    """The bounded windows' aggregation per (pointer, pair, item) in DuckDB, translated once."""
    found = _UNTIL_SQL.get(id(config))
    if found is None or found[0] is not config:
        if len(_UNTIL_SQL) >= 8:
            _UNTIL_SQL.clear()
        sql = aggregation_sql(config, "_visible_events", "duckdb", ("_pos", "_pair"))
        found = _UNTIL_SQL[id(config)] = (config, sql)
    return found[1]


def _candidates(rows: pa.Table, p: _Pointers) -> pa.Table:
    """Rebuilt rows (with `_pos`), each a candidate of its pointer: in its range, older than its
    fragment, sorted by (pointer, key)."""
    if not rows.num_rows:
        return rows
    pos = _numpy(rows["_pos"])
    ts, lsn, partition = _micros(rows["event_ts"]), _numpy(rows["lsn"]), _numpy(rows["source_partition"])
    inside = p.has_range[pos] & (ts >= p.start[pos]) & (ts <= p.end[pos])
    key_ts, key_lsn, key_partition = p.key_ts[pos], p.key_lsn[pos], p.key_partition[pos]
    older = (ts < key_ts) | ((ts == key_ts) & ((lsn < key_lsn) | ((lsn == key_lsn) & (partition < key_partition))))
    inside &= ~p.has_fragment_key[pos] | older
    order = np.flatnonzero(inside)
    order = order[np.lexsort((partition[order], lsn[order], ts[order], pos[order]))]
    return rows.take(pa.array(order))


def _merge_rebuilt(h: SortedHistory, rebuilt: pa.Table, segment, seg_start, low, counts, owner, row, visible):
    """Insert the rebuilt rows (sorted by pointer, key) among their pointers' history candidates at
    their keys: the merged (owner, source row, visible), source rows of `rebuilt` after history's."""
    pos = _numpy(rebuilt["_pos"])
    ts, lsn, partition = _micros(rebuilt["event_ts"]), _numpy(rebuilt["lsn"]), _numpy(rebuilt["source_partition"])
    at = h.first_at_or_after(segment[pos], seg_start[pos], ts, lsn, partition)
    at = np.clip(at, low[pos], low[pos] + counts[pos])  # a position among the pointer's candidates
    candidate_starts = np.concatenate([[0], np.cumsum(counts)])[:-1]
    insert = candidate_starts[pos] + at - low[pos]  # non-decreasing: rebuilt rows are sorted
    total = len(owner) + len(pos)
    is_rebuilt = np.zeros(total, bool)
    is_rebuilt[insert + np.arange(len(pos))] = True
    merged_owner = np.empty(total, np.int64)
    merged_source = np.empty(total, np.int64)
    merged_visible = np.ones(total, bool)
    merged_owner[is_rebuilt], merged_owner[~is_rebuilt] = pos, owner
    merged_source[is_rebuilt] = h.rows.num_rows + np.arange(len(pos), dtype=np.int64)
    merged_source[~is_rebuilt] = row
    merged_visible[~is_rebuilt] = visible
    return merged_owner, merged_source, merged_visible


def _fragment_rows(pointers: pa.Table, tenant: Tenant, names: list[str], schema: pa.Schema) -> pa.Table:
    """The fragments' rows, pointer after pointer, in `schema` (columns beyond the model's null)."""
    columns = {}
    for name in names:
        field = schema.field(name)
        if name in tenant.model_columns:
            lists = pointers[f"{FRAGMENT}{name}"].combine_chunks()
            columns[name] = pc.list_flatten(lists).cast(field.type)
        else:
            columns[name] = None
    count = len(next(c for c in columns.values() if c is not None)) if columns else 0
    return pa.table({n: c if c is not None else pa.nulls(count, schema.field(n).type) for n, c in columns.items()})
