"""Time-range reads that never return a row with content from `end` on.

A history row folds one item's events of one processing window and is stamped with the earliest
(`event_ts`); `last_event_ts` is the latest (`gather.latest_event_micros` reads it, and the rule for
files older than the column). Cutting by the stamp alone (`Selection.end`, what the storage reader
does) would return a row that also merged events at or after `end`, e.g. a view before `end` and the
buy after it. Here a row is returned only if everything folded into it happened before `end`:

- rows whose latest event is before `end` are returned as stored (the usual case: the read costs
  three more bookkeeping columns, and nothing else);
- each (user, window) holding a row with event_ts < end <= its latest event is rebuilt from the
  detail table's events of that user and window with event_ts < end, by the compaction's
  aggregation SQL (`gather.rebuild_windows_until`: one DuckDB query for every such window of the
  read), and its rows replaced by the rebuilt ones; the rebuilt rows keep the stamp of their
  earliest event, `lsn` the largest LSN among those events, `last_event_ts` their latest;
- where that window's detail has expired (`seqlake gc`), the rows that merged events from `end` on
  are withheld: counted per user (`BoundedRead.withheld`, the schema metadata `seqlake.withheld` of
  each result table, `withheld_rows`), and `Lake.history`/`histories` warn (`WithheldRowsWarning`).

Top-K and order apply after the rebuild (a user with such rows is read again without Top-K). Reads
without `end` go straight to the storage reader.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table

from seqlake.core.config import Config
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.pipelines.training.rebuild.duckdb import detail_events, detail_files
from seqlake.pipelines.training.rebuild.gather import WindowDetail, latest_event_micros, rebuild_windows_until
from seqlake.tableformat.evolution import known_field_ids
from seqlake.tableformat.lookup_index import micros
from seqlake.tableformat.reader import HistoryReader, Selection, finish, row_filter

WITHHELD_KEY = b"seqlake.withheld"
# What deciding a row's visibility at `end` reads besides the selection's columns.
BOUND_KEYS = ("event_ts", "lsn", "last_event_ts", "event_count", "window_id")


class WithheldRowsWarning(UserWarning):
    """A time-range read left out rows that merged events from `end` on, whose window's detail has
    expired (they cannot be rebuilt as of `end`); `withheld` counts them."""

    def __init__(self, withheld: int, end: datetime) -> None:
        self.withheld = withheld
        super().__init__(
            f"{withheld:,} history row{'' if withheld == 1 else 's'} withheld: they merged events from "
            f"{end.isoformat()} on and their window's detail has expired"
        )


def withheld_message(withheld: int) -> str:
    """The CLI's line for rows left out (as the backfill words it)."""
    return f"{withheld:,} row{'' if withheld == 1 else 's'} withheld (merged events from --end on; detail expired)"


def withheld_rows(rows: pa.Table) -> int:
    """Rows a bounded read left out of this result (its schema metadata; 0 when none)."""
    found = (rows.schema.metadata or {}).get(WITHHELD_KEY)
    return int(found) if found else 0


@dataclass(frozen=True)
class BoundedRead:
    rows: dict[int, pa.Table]  # per user, as `HistoryReader.read_users` returns them
    withheld: dict[int, int] = field(default_factory=dict)  # per user with rows left out

    @property
    def total_withheld(self) -> int:
        return sum(self.withheld.values())


@dataclass(frozen=True)
class _AllOf:
    """A detail read of every feature group and column (`duckdb.ReadProfile`)."""

    feature_groups: tuple[str, ...]
    columns: tuple[str, ...]


def table_detail(config: Config, detail: Table | None, fs) -> WindowDetail:
    """The windows the detail table holds and their events (every group and column), planned once."""
    files = detail_files(detail) if detail is not None else {}
    profile = _AllOf(tuple(config.feature_groups), tuple(config.column_types()))

    def events(users: list[int], windows: list[int]) -> pa.Table:
        paths = [path for w in windows for path in files.get(w, [])]
        if detail is None or not users or not paths:
            return pa.schema([f.with_nullable(True) for f in landing_schema(config)]).empty_table()
        known = known_field_ids(detail)
        return detail_events(config, profile, fs, paths, users, windows, detail.schema(), known)

    return WindowDetail(frozenset(files), events)


def bounded_read(
    config: Config,
    reader: HistoryReader,
    user_ids: Iterable[int],
    selection: Selection,
    detail: Callable[[], WindowDetail],
    max_workers: int = 1,
) -> BoundedRead:
    """Each user's selected rows, none holding events from `selection.end` on (see the module).
    `detail` gives the detail windows, called only when some row needs a rebuild."""
    users = list(dict.fromkeys(int(u) for u in user_ids))
    if selection.end is None:
        return BoundedRead(reader.read_users(users, selection, max_workers))
    reader.check(selection)
    wanted = list(dict.fromkeys(selection.columns or reader.columns))
    keys = [k for k in BOUND_KEYS if k in reader.columns]
    keyed = replace(selection, columns=tuple(dict.fromkeys([*wanted, *keys])))
    found = reader.read_users(users, keyed, max_workers)
    end = micros(selection.end)
    window_seconds = config.layout.window_seconds
    affected = [u for u, rows in found.items() if rows.num_rows and (_latest(rows, window_seconds) >= end).any()]
    if not affected:
        return BoundedRead({u: _project(rows, wanted) for u, rows in found.items()})
    if selection.top_k is not None or selection.newest_first:  # Top-K and order after the rebuild
        found.update(reader.read_users(affected, replace(keyed, top_k=None, newest_first=False), max_workers))

    parts = [found[u] for u in affected]
    rows = pa.concat_tables(parts)
    owner = np.repeat(np.arange(len(affected), dtype=np.int64), [p.num_rows for p in parts])
    spans = _latest(rows, window_seconds) >= end
    window = rows["window_id"].combine_chunks().to_numpy(zero_copy_only=False).astype(np.int64)
    first = int(window.min())
    width = int(window.max()) - first + 1
    pair_of = owner * width + (window - first)  # (user, window) as one int64
    pairs = np.unique(pair_of[spans])
    pair_owner, pair_window = pairs // width, pairs % width + first
    windows = detail()
    held = np.isin(pair_window, np.fromiter(windows.windows, np.int64, len(windows.windows)))
    rebuilt_pair = np.isin(pair_of, pairs[held])
    lost = spans & ~rebuilt_pair
    keep = ~rebuilt_pair & ~lost

    rebuilt = None
    if held.any():
        user_of = np.asarray(affected, np.int64)
        who, where = user_of[pair_owner[held]], pair_window[held]
        events = windows.events(np.unique(who).tolist(), np.unique(where).tolist())
        groups = selection.feature_groups or tuple(g for g in reader.groups if g)
        until = np.full(len(who), end - 1, np.int64)  # event_ts < end
        rebuilt = rebuild_windows_until(config, tuple(groups), pair_owner[held], who, where, until, events)
        rebuilt = _like(rebuilt, rows.schema)

    out = {u: _project(rows, wanted) for u, rows in found.items()}
    withheld: dict[int, int] = {}
    lost_per = np.bincount(owner[lost], minlength=len(affected))
    keep_owner = owner[keep]
    kept = rows.filter(pa.array(keep))
    kept_starts = np.searchsorted(keep_owner, np.arange(len(affected) + 1))
    rebuilt_owner = None if rebuilt is None else rebuilt["_pos"].to_numpy()
    schema = reader.arrow_schema()
    for i, user in enumerate(affected):  # per user, not per row: assembling each result
        mine = [kept.slice(int(kept_starts[i]), int(kept_starts[i + 1] - kept_starts[i]))]
        if rebuilt is not None and rebuilt_owner is not None:
            theirs = rebuilt.filter(pa.array(rebuilt_owner == i))
            mine.append(theirs.filter(row_filter(theirs, user, selection)).select(rows.column_names).cast(rows.schema))
        result = finish(mine, wanted, selection, schema)
        if lost_per[i]:
            withheld[user] = int(lost_per[i])
            metadata = {**(result.schema.metadata or {}), WITHHELD_KEY: str(int(lost_per[i])).encode()}
            result = result.replace_schema_metadata(metadata)
        out[user] = result
    return BoundedRead(out, withheld)


def _latest(rows: pa.Table, window_seconds: int) -> np.ndarray:
    """Each row's latest merged event (`latest_event_micros`); a table older than `last_event_ts`
    without the column reads it as null."""
    if "last_event_ts" not in rows.column_names:
        rows = rows.append_column("last_event_ts", pa.nulls(rows.num_rows, pa.timestamp("us", tz="UTC")))
    return latest_event_micros(rows, window_seconds)


def _project(rows: pa.Table, wanted: list[str]) -> pa.Table:
    return rows if rows.column_names == wanted else rows.select(wanted)


def _like(rebuilt: pa.Table, schema: pa.Schema) -> pa.Table:
    """Rebuilt rows (`_pos`, then history columns) with the read's columns and types (a column the
    rebuild does not give, null), and `user_id` and `source_partition` for the selection's filters."""
    columns: dict[str, pa.ChunkedArray | pa.Array] = {"_pos": rebuilt["_pos"]}
    for name in dict.fromkeys([*schema.names, "user_id", "source_partition"]):
        kind = schema.field(name).type if name in schema.names else rebuilt.schema.field(name).type
        if name in rebuilt.column_names:
            columns[name] = pc.cast(rebuilt[name], kind)
        else:
            columns[name] = pa.nulls(rebuilt.num_rows, kind)
    return pa.table(columns)


def detail_table(config: Config) -> Table | None:
    """The detail table, or None when there is none (then every window's detail counts as expired)."""
    from seqlake.engines.catalog import open_catalog, table_identifier
    from seqlake.engines.catalog_tables import load_table_if_exists
    from seqlake.pipelines.tables import DETAIL

    return load_table_if_exists(open_catalog(config), table_identifier(config, DETAIL))


def lake_detail(config: Config, reader: HistoryReader) -> Callable[[], WindowDetail]:
    """The warehouse's detail windows, loaded when first asked for."""
    return lambda: table_detail(config, detail_table(config), reader.fs)
