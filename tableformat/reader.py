"""Read users' histories from the history table with every selection pushed down to storage.

Iceberg prunes files (bucket partition, then `user_id`, `event_ts` and `lsn` bounds in the
manifests) to at most one per sorted run; the footer's statistics prune row groups (user, feature
group, event time, LSN, and for Top-K the newest row groups); projection reads only the columns asked
for plus the keys a filter needs. Rows come back in sequence order: (event_ts, lsn), oldest first
unless `newest_first`.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
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

from seqlake.errors import SchemaError
from tableformat.io import FooterCache, PlainFileSystem, read_footer
from tableformat.schema import KEY_COLUMNS

SEQUENCE_ORDER = ("event_ts", "lsn")


@dataclass(frozen=True)
class Selection:
    """What to read of a user's history. Times are event times, `start` inclusive, `end` exclusive."""

    feature_groups: tuple[str, ...] | None = None
    columns: tuple[str, ...] | None = None
    start: datetime | None = None
    end: datetime | None = None
    as_of_lsn: int | None = None  # rows whose LSN is at most this
    top_k: int | None = None  # the newest K rows of the selection
    newest_first: bool = False

    def __post_init__(self) -> None:
        if self.top_k is not None and self.top_k < 0:
            raise ValueError(f"top_k must be >= 0, got {self.top_k}")
        for name in ("start", "end"):
            value = getattr(self, name)
            if value is not None and value.tzinfo is None:
                raise ValueError(f"{name} needs a time zone, got {value!r}")


class HistoryReader:
    def __init__(self, table: Table, filesystem=None, footer_cache: FooterCache | None = None) -> None:
        self.table = table
        self.fs = filesystem or PlainFileSystem()
        self.footers = footer_cache if footer_cache is not None else FooterCache()
        self.columns = [f.name for f in table.schema().fields]
        self.groups = table.metadata.properties.get("seqlake.feature-groups", "").split(",")
        self._schema: tuple[tuple, pa.Schema] | None = None

    def check(self, selection: Selection) -> None:
        """Identifiers from users are checked against the schema, never pasted anywhere."""
        unknown = [c for c in selection.columns or () if c not in self.columns]
        if unknown:
            raise SchemaError(f"unknown columns {unknown}; the history table has {self.columns}")
        groups = [g for g in selection.feature_groups or () if g not in self.groups]
        if groups:
            raise SchemaError(f"unknown feature groups {groups}; the history table has {self.groups}")

    def files_for_user(self, user_id: int, selection: Selection = Selection()) -> list[str]:
        """Data files that may hold the user's selected rows: manifests prune the rest."""
        condition = scan_condition(selection, [user_id])
        return [task.file.file_path for task in self.table.scan(row_filter=condition).plan_files()]

    def read_user(
        self, user_id: int, columns: Sequence[str] | None = None, selection: Selection | None = None
    ) -> pa.Table:
        """The user's selected rows in sequence order, with `columns` (default: all)."""
        selection = selection or Selection(columns=tuple(columns) if columns is not None else None)
        self.check(selection)
        wanted = list(dict.fromkeys(selection.columns or self.columns))
        parts = [
            self.read_user_in_file(uri, int(user_id), wanted, selection)
            for uri in self.files_for_user(user_id, selection)
        ]
        return finish(parts, wanted, selection, self.arrow_schema())

    def read_user_in_file(
        self, uri: str, user_id: int, wanted: list[str], selection: Selection | None = None
    ) -> pa.Table:
        """The user's selected rows in one data file (the step subclasses change, e.g. to cache)."""
        return read_user_from_file(self.fs, self.footers, uri, user_id, wanted, selection or Selection())

    def arrow_schema(self) -> pa.Schema:
        """The table's schema in Arrow; converting it costs about a cached lookup, so once per schema."""
        key = (str(self.table.metadata.table_uuid), self.table.metadata.current_schema_id)
        if self._schema is None or self._schema[0] != key:
            self._schema = (key, self.table.schema().as_arrow())
        return self._schema[1]


def scan_condition(selection: Selection, user_ids: Iterable[int] | None = None) -> BooleanExpression:
    """The Iceberg filter of a lookup: the users (None: any user) and the selection's time and LSN bounds."""
    condition: BooleanExpression = AlwaysTrue()
    if user_ids is not None:
        condition = In("user_id", {int(u) for u in user_ids})
    if selection.start is not None:
        condition = And(condition, GreaterThanOrEqual("event_ts", selection.start.isoformat()))
    if selection.end is not None:
        condition = And(condition, LessThan("event_ts", selection.end.isoformat()))
    if selection.as_of_lsn is not None:
        condition = And(condition, LessThanOrEqual("lsn", int(selection.as_of_lsn)))
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


def read_user_from_file(
    fs, footers: FooterCache, uri: str, user_id: int, columns: list[str], selection: Selection = Selection()
) -> pa.Table:
    """One user's selected rows in one history file, with `columns` plus the sequence keys.

    Row groups are chosen from footer statistics; the user_id and the other key columns are read only
    when a chosen row group also holds rows the selection excludes.
    """
    columns = list(dict.fromkeys(columns))
    with fs.open_input_file(uri) as handle:
        meta = footers.get(uri)
        if meta is None:
            meta = read_footer(handle)
            footers.put(uri, meta)
        parquet = pq.ParquetFile(handle, metadata=meta, pre_buffer=False)
        plan = plan_row_groups(meta, user_id, selection)
        groups = [rg for rg, _ in plan]
        exact = all(only for _, only in plan)  # every chosen row group holds only wanted rows
        empty = {c: pa.array([], parquet.schema_arrow.field(c).type) for c in columns + list(SEQUENCE_ORDER)}
        if not groups:
            return pa.table(empty)
        needed = list(SEQUENCE_ORDER) + ([] if exact else list(KEY_COLUMNS))
        read_cols = list(dict.fromkeys(columns + needed))
        table = parquet.read_row_groups(groups, columns=read_cols)
    if not exact:
        table = table.filter(row_filter(table, user_id, selection))
    return table.select(list(dict.fromkeys(columns + list(SEQUENCE_ORDER))))


def plan_row_groups(meta: pq.FileMetaData, user_id: int, selection: Selection) -> list[tuple[int, bool]]:
    """The row groups that may hold the user's selected rows, from footer statistics alone, each with
    whether it certainly holds nothing else (then no row filter and no key columns are needed)."""
    names = meta.schema.to_arrow_schema().names
    index = {name: names.index(name) for name in ("user_id", "feature_group", "event_ts", "lsn")}
    plan: list[tuple[int, bool]] = []
    for rg in range(meta.num_row_groups):
        group = meta.row_group(rg)
        stats = {k: group.column(i).statistics for k, i in index.items()}
        if not stats_overlap(stats["user_id"], user_id, user_id):
            continue
        if not _group_overlaps(stats["feature_group"], selection.feature_groups):
            continue
        if not stats_overlap(stats["event_ts"], selection.start, selection.end, high_exclusive=True):
            continue
        if not stats_overlap(stats["lsn"], None, selection.as_of_lsn):
            continue
        plan.append((rg, _only(stats, user_id, selection)))
    if selection.top_k is not None:
        keep = set(_newest_groups(meta, plan, index["event_ts"], selection.top_k))
        plan = [(rg, only) for rg, only in plan if rg in keep]
    return plan


def _only(stats: dict, user_id: int, selection: Selection) -> bool:
    """Whether a row group certainly holds only selected rows (so no filter, no key columns needed)."""

    def known(s) -> bool:
        return s is not None and s.has_min_max

    if not (known(stats["user_id"]) and stats["user_id"].min == stats["user_id"].max == user_id):
        return False
    if selection.feature_groups is not None and not (
        known(stats["feature_group"])
        and stats["feature_group"].min == stats["feature_group"].max
        and stats["feature_group"].min in selection.feature_groups
    ):
        return False
    ts = stats["event_ts"]
    if selection.start is not None and not (known(ts) and ts.min >= selection.start):
        return False
    if selection.end is not None and not (known(ts) and ts.max < selection.end):
        return False
    return selection.as_of_lsn is None or (known(stats["lsn"]) and stats["lsn"].max <= selection.as_of_lsn)


def _group_overlaps(stats, groups: tuple[str, ...] | None) -> bool:
    if groups is None or stats is None or not stats.has_min_max:
        return True
    return any(stats.min <= g <= stats.max for g in groups)


def _newest_groups(meta: pq.FileMetaData, plan: list[tuple[int, bool]], ts_col: int, k: int) -> list[int]:
    """The fewest row groups that surely contain the newest `k` selected rows among `plan`.

    Take row groups by descending newest event time until those that hold only selected rows add up
    to k rows (a row group that also holds other rows counts for none: how many of its rows are
    selected is unknown); any other row group whose newest event is not older than the oldest event
    of those taken may still hold a top row."""
    groups = [rg for rg, _ in plan]
    if k == 0 or not groups:
        return []
    stats = {rg: meta.row_group(rg).column(ts_col).statistics for rg in groups}
    if any(s is None or not s.has_min_max for s in stats.values()):
        return groups
    only = dict(plan)
    ordered = sorted(groups, key=lambda rg: stats[rg].max, reverse=True)
    chosen, rows = [], 0
    for rg in ordered:
        chosen.append(rg)
        rows += meta.row_group(rg).num_rows if only[rg] else 0
        if rows >= k:
            break
    else:
        return groups  # never sure to hold k selected rows: keep them all
    floor = min(stats[rg].min for rg in chosen)
    chosen += [rg for rg in ordered if rg not in chosen and stats[rg].max >= floor]
    return sorted(chosen)


def row_filter(table: pa.Table, user_id: int, selection: Selection) -> pa.ChunkedArray:
    mask = pc.equal(table["user_id"], user_id)
    if selection.feature_groups is not None:
        mask = pc.and_(mask, pc.is_in(table["feature_group"], pa.array(selection.feature_groups)))
    if selection.start is not None:
        mask = pc.and_(mask, pc.greater_equal(table["event_ts"], pa.scalar(selection.start, table["event_ts"].type)))
    if selection.end is not None:
        mask = pc.and_(mask, pc.less(table["event_ts"], pa.scalar(selection.end, table["event_ts"].type)))
    if selection.as_of_lsn is not None:
        mask = pc.and_(mask, pc.less_equal(table["lsn"], selection.as_of_lsn))
    return mask
