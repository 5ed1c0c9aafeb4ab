"""Read many users' histories at once: one Iceberg plan, then one footer and one coalesced read per file.

`histories(reader, user_ids, selection)` returns exactly what `reader.read_user(u, selection=selection)`
returns for each user (same rows, order, columns and types), with less work than a loop over users:

- plan once: one Iceberg scan with `In("user_id", ids)` and the selection's event-time and LSN bounds;
  each user then goes to the files whose bucket partition and `user_id` bounds can hold it;
- per file, the footer is read (or found in the footer cache) once and each user's row groups are
  chosen by the reader's own planner (`reader.plan_row_groups`: statistics, Top-K); the union of them
  is read for all of the file's users in ONE `read_row_groups` call, pre-buffered, so adjacent
  column chunks (those of adjacent row groups) arrive in one contiguous read;
- the rows are split per user (rows are key-ordered, so a binary search on `user_id` finds a user's
  slice of a row group) and filtered with the reader's row filter;
- files are read in parallel; `reader.finish` merges each user's parts as `read_user` does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.expressions import (
    AlwaysTrue,
    BooleanExpression,
)
from pyiceberg.table import Table
from pyiceberg.transforms import BucketTransform

from tableformat.bucketing import bucket_of
from tableformat.io import FooterCache, read_footer
from tableformat.reader import (
    SEQUENCE_ORDER,
    HistoryReader,
    Selection,
    finish,
    plan_row_groups,
    row_filter,
    scan_condition,
)
from tableformat.schema import KEY_COLUMNS

_NO_BOUND_LOW = np.iinfo(np.int64).min
_NO_BOUND_HIGH = np.iinfo(np.int64).max
_MASK_CELLS = 1 << 22  # files x users compared at once when assigning users to files
WHOLE = Selection()  # every row and column of a history


# -- planning: which files may hold which users ------------------------------------------------------


@dataclass(frozen=True)
class FilePlan:
    uri: str
    users: tuple[int, ...]  # the requested users the file's bucket and user_id bounds can hold, ascending


class FileIndex:
    """The data files one Iceberg scan returned, in plan order, with what the manifests say about their
    users: the `user_id` bounds and the `bucket(N, user_id)` partition value. Assigning users to files
    needs no further Iceberg call, so one index serves any number of users."""

    def __init__(self, table: Table, condition: BooleanExpression | None = None) -> None:
        field = table.schema().find_field("user_id")
        specs = table.specs()
        self.uris: list[str] = []
        low, high = [], []
        buckets: dict[int, list[int]] = {}  # bucket count -> each file's bucket (-1: no such partition field)
        scan = table.scan(row_filter=condition if condition is not None else AlwaysTrue())
        for i, task in enumerate(scan.plan_files()):
            data_file = task.file
            self.uris.append(data_file.file_path)
            lower = (data_file.lower_bounds or {}).get(field.field_id)
            upper = (data_file.upper_bounds or {}).get(field.field_id)
            low.append(_NO_BOUND_LOW if lower is None else from_bytes(field.field_type, lower))
            high.append(_NO_BOUND_HIGH if upper is None else from_bytes(field.field_type, upper))
            for position, part in enumerate(specs[data_file.spec_id].fields):
                value = data_file.partition[position]
                if (
                    part.source_id == field.field_id
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


def plan_files(table: Table, user_ids: Sequence[int], selection: Selection = WHOLE) -> list[FilePlan]:
    """One Iceberg scan for all users (`In("user_id", ids)` and the selection's bounds), then each user
    to the files whose bucket and user_id bounds can hold it. Plan order, as `read_user` reads files."""
    ids = list(dict.fromkeys(int(u) for u in user_ids))
    if not ids:
        return []
    return FileIndex(table, scan_condition(selection, ids)).plans(ids)


# -- reading one file for many users ---------------------------------------------------------------


@dataclass(frozen=True)
class FileLayout:
    """What a reader needs of a footer beyond the planner: the Arrow schema and each row group's rows."""

    meta: pq.FileMetaData
    schema: pa.Schema
    rows: tuple[int, ...]

    @classmethod
    def of(cls, meta: pq.FileMetaData) -> FileLayout:
        rows = tuple(meta.row_group(rg).num_rows for rg in range(meta.num_row_groups))
        return cls(meta, meta.schema.to_arrow_schema(), rows)


# (uri, layout, open the ParquetFile, row groups ascending, columns) -> the groups' rows, in group order.
GroupSource = Callable[[str, FileLayout, Callable[[], pq.ParquetFile], list[int], list[str]], pa.Table]


def read_groups_direct(
    uri: str, layout: FileLayout, parquet: Callable[[], pq.ParquetFile], groups: list[int], columns: list[str]
) -> pa.Table:
    """The uncached source: one `read_row_groups` call for all the groups."""
    return parquet().read_row_groups(groups, columns=columns)


def read_users_from_file(
    fs,
    footers: FooterCache,
    uri: str,
    user_ids: Iterable[int],
    columns: list[str],
    selection: Selection = WHOLE,
    source: GroupSource = read_groups_direct,
) -> dict[int, pa.Table]:
    """For each user, the rows `read_user_from_file(fs, footers, uri, user, columns, selection)` returns,
    from one footer and one read (through `source`) of the union of the users' row groups."""
    users = list(dict.fromkeys(int(u) for u in user_ids))
    columns = list(dict.fromkeys(columns))
    out = list(dict.fromkeys(columns + list(SEQUENCE_ORDER)))
    handle = None

    def parquet() -> pq.ParquetFile:
        nonlocal handle
        if handle is None:
            handle = fs.open_input_file(uri)
        return pq.ParquetFile(handle, metadata=meta, pre_buffer=True)

    try:
        meta = footers.get(uri)
        if meta is None:
            handle = fs.open_input_file(uri)
            meta = read_footer(handle)
            footers.put(uri, meta)
        layout = FileLayout.of(meta)
        plans = {u: plan_row_groups(meta, u, selection) for u in users}
        union = sorted({rg for plan in plans.values() for rg, _ in plan})
        empty = pa.table({c: pa.array([], layout.schema.field(c).type) for c in out})
        if not union:
            return dict.fromkeys(users, empty)
        keys = not all(only for plan in plans.values() for _, only in plan)
        read_cols = list(dict.fromkeys(out + (list(KEY_COLUMNS) if keys else [])))
        table = source(uri, layout, parquet, union, read_cols)
    finally:
        if handle is not None:
            handle.close()
    return split_users(table, layout, union, plans, selection, out, empty)


def split_users(
    table: pa.Table,
    layout: FileLayout,
    union: list[int],
    plans: dict[int, list[tuple[int, bool]]],
    selection: Selection,
    out: list[str],
    empty: pa.Table,
) -> dict[int, pa.Table]:
    """Each user's rows of `table` (the rows of row groups `union`, in order): the user's planned row
    groups, filtered as `read_user_from_file` filters them, projected to `out`."""
    starts = dict(zip(union, np.cumsum([0] + [layout.rows[rg] for rg in union]).tolist(), strict=False))
    user_col = table["user_id"].to_numpy() if "user_id" in table.column_names else None
    result = {}
    for user, plan in plans.items():
        if not plan:
            result[user] = empty
            continue
        exact = all(only for _, only in plan)
        parts = []
        for rg, _ in plan:
            start, rows = starts[rg], layout.rows[rg]
            if not exact:
                # Rows are key-ordered (format invariant 4): a user's rows of a row group are one slice.
                ids = user_col[start : start + rows]
                first, last = np.searchsorted(ids, user, "left"), np.searchsorted(ids, user, "right")
                start, rows = start + int(first), int(last - first)
            parts.append(table.slice(start, rows))
        rows = pa.concat_tables(parts) if len(parts) > 1 else parts[0]
        if not exact and narrows(selection):  # the slices hold only the user's rows: filter the rest
            rows = rows.filter(row_filter(rows, user, selection))
        result[user] = rows.select(out)
    return result


def narrows(selection: Selection) -> bool:
    """Whether the selection excludes some of a user's rows (beyond Top-K, which `finish` applies)."""
    return any(v is not None for v in (selection.feature_groups, selection.start, selection.end, selection.as_of_lsn))


# -- the multi-user lookup -----------------------------------------------------------------------


def histories(
    reader: HistoryReader, user_ids: Iterable[int], selection: Selection = WHOLE, max_workers: int = 4
) -> dict[int, pa.Table]:
    """Every user's selected history, as `reader.read_user(u, selection=selection)` returns it, keyed by
    user id in the order first given; a user without rows maps to an empty table.

    A reader with a `file_index` and a `group_source` (`tableformat.cache.CachedHistoryReader`) plans
    from its per-snapshot file index and serves row groups through its cache; any other reader plans
    with one Iceberg scan and reads row groups straight from its filesystem."""
    reader.check(selection)
    ids = list(dict.fromkeys(int(u) for u in user_ids))
    if not ids:
        return {}
    wanted = list(dict.fromkeys(selection.columns or reader.columns))
    index = getattr(reader, "file_index", None)
    plans = index(selection).plans(ids) if index is not None else plan_files(reader.table, ids, selection)
    source: GroupSource = getattr(reader, "group_source", None) or read_groups_direct

    def read(plan: FilePlan) -> dict[int, pa.Table]:
        return read_users_from_file(reader.fs, reader.footers, plan.uri, plan.users, wanted, selection, source)

    if max_workers > 1 and len(plans) > 1:
        with ThreadPoolExecutor(max_workers=min(max_workers, len(plans))) as pool:
            found = list(pool.map(read, plans))
    else:
        found = [read(plan) for plan in plans]
    parts: dict[int, list[pa.Table]] = {u: [] for u in ids}
    for rows_by_user in found:  # plan order: each user's parts in the order read_user reads its files
        for user, rows in rows_by_user.items():
            parts[user].append(rows)
    schema = reader.arrow_schema()
    return {u: finish(parts[u], wanted, selection, schema) for u in ids}
