"""Capture at inference: the model input of a request, and what to log instead of it.

For each request the capture returns the sequence the model reads (the tenant's feature groups and
columns, the newest `max_length` rows of the online view) and logs a light pointer (user, request
time, feature groups, event-time range, LSN bound per source partition, open window, length, Top-K,
checksum) plus the recent fragment (the newest W rows). Its cost is the Top-K of published history
plus the user's rows of the open windows: it does not grow with the length of the history.

A batch of requests is one plan (`capture_batch`): one multi-user Top-K read of published history,
the users' landing rows from one view query, one sort of all their rows, each user's newest rows as
a range of it, every checksum one vectorized fold, and the training and fat rows cut from those
ranges by offsets. Requests of one user in one snapshot see the same sequence: it is hashed once.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seqlake.pipelines.training.capture.online_view import ViewSnapshot
from seqlake.pipelines.training.sequence import ORDER_KEYS, Tenant, lists_of
from seqlake.pipelines.training.sequence_digest import checksum_bytes, fold_checksums, row_lanes
from seqlake.pipelines.training.tables import (
    FRAGMENT,
    REQUEST_COLUMNS,
    REQUEST_FIELDS,
    SEQUENCE,
    sequence_table_schema,
    training_schema,
)
from seqlake.tableformat.frontier import frontier_column, frontiers_of, repeated_frontier
from seqlake.tableformat.multi_reader import histories
from seqlake.tableformat.reader import HistoryReader, Selection


@dataclass(frozen=True)
class Request:
    """One inference request with the labels and small features its training row keeps."""

    request_id: str
    user_id: int
    request_ts: datetime
    label_click: bool
    label_dwell_ms: int
    surface: str
    hour_of_day: int


@dataclass(frozen=True)
class Capture:
    request: Request
    sequence: pa.Table  # the model input, in order
    pointer: dict  # the training row's pointer columns; `lsn_bound` a Frontier
    fragment: pa.Table


@dataclass(frozen=True)
class CaptureBatch:
    """A batch's captures as tables: what the training and fat-row tables receive."""

    training: pa.Table  # training_schema(tenant): request, pointer, fragment
    fat_rows: pa.Table  # sequence_table_schema(tenant): request, the whole sequence
    rows: pa.Table  # the users' online rows (model columns and order keys), user after user
    starts: np.ndarray  # per request: its sequence is rows[starts[i]:ends[i]]
    ends: np.ndarray


def request_table(requests: list[Request]) -> pa.Table:
    """Requests as Arrow columns (REQUEST_FIELDS)."""
    return pa.table(
        {f.name: pa.array([getattr(r, f.name) for r in requests], f.type) for f in REQUEST_FIELDS},
        schema=pa.schema(REQUEST_FIELDS),
    )


def _online_rows(reader: HistoryReader, tenant: Tenant, users: np.ndarray, landing: pa.Table) -> pa.Table:
    """The users' rows of the online view (`user_id`, model columns, order keys) sorted by user and
    key: published history's Top-K (the merged Top-K is within it plus the landing rows) and the
    landing rows."""
    columns = list(dict.fromkeys([*tenant.model_columns, *ORDER_KEYS]))
    selection = Selection(feature_groups=tenant.feature_groups, columns=tuple(columns), top_k=tenant.max_length)
    published = histories(reader, users.tolist(), selection)
    parts = [t for t in published.values() if t.num_rows]
    counts = np.array([t.num_rows for t in published.values()], np.int64)
    owners = np.repeat(np.fromiter(published.keys(), np.int64, len(published)), counts)
    landing = landing.filter(pc.is_in(landing["feature_group"], pa.array(tenant.feature_groups)))
    schema = pa.schema([f.remove_metadata() for f in landing.select(columns).schema])
    stacked = pa.concat_tables([t.select(columns).cast(schema) for t in [*parts, landing]])
    stacked = stacked.append_column(
        "user_id", pa.concat_arrays([pa.array(owners), landing["user_id"].combine_chunks()])
    )
    ts = stacked["event_ts"].cast(pa.int64()).to_numpy()
    order = np.lexsort(
        [stacked[k].to_numpy() for k in ("source_partition", "lsn")] + [ts, stacked["user_id"].to_numpy()]
    )
    return stacked.take(pa.array(order))


def capture_batch(
    snapshot: ViewSnapshot,
    reader: HistoryReader,
    tenant: Tenant,
    requests: pa.Table | list[Request],
    fragment_events: int,
    landing: pa.Table | None = None,
) -> CaptureBatch:
    """Captures of `requests` (REQUEST_FIELDS columns) against one snapshot, as one plan
    (`landing`: the snapshot's rows of their users, read if not given)."""
    requests = request_table(requests) if isinstance(requests, list) else requests
    n = requests.num_rows
    request_users = requests["user_id"].to_numpy()
    users = np.unique(request_users)
    if landing is None:
        landing = snapshot.landing_rows(users.tolist())
    rows = _online_rows(reader, tenant, users, landing)
    row_users = rows["user_id"].to_numpy()
    # Each user's newest max_length rows: the end of its run, back by at most max_length.
    user_starts = np.searchsorted(row_users, users, "left")
    user_ends = np.searchsorted(row_users, users, "right")
    user_starts = np.maximum(user_starts, user_ends - tenant.max_length)
    user_lengths = user_ends - user_starts
    checksums = checksum_bytes(
        fold_checksums(
            row_lanes(rows, tenant.schema),
            np.repeat(user_starts - (np.cumsum(user_lengths) - user_lengths), user_lengths)
            + np.arange(int(user_lengths.sum()), dtype=np.int64),
            np.concatenate([[0], np.cumsum(user_lengths)]),
        )
    )
    at = np.searchsorted(users, request_users)
    starts, ends = user_starts[at], user_ends[at]
    lengths = ends - starts
    fragment_starts = np.maximum(starts, ends - max(fragment_events, 0))
    has_rows = lengths > 0
    first = np.where(has_rows, starts, 0)
    last = np.where(has_rows, ends - 1, 0)
    has_fragment = ends > fragment_starts
    key = np.where(has_fragment, fragment_starts, 0)

    def at_rows(column: str, index: np.ndarray, valid: np.ndarray, kind: pa.DataType) -> pa.Array:
        values = rows[column].combine_chunks().take(pa.array(index)) if rows.num_rows else pa.nulls(n, kind)
        return pc.if_else(pa.array(valid), values, pa.scalar(None, kind)).cast(kind)

    schema = training_schema(tenant)
    groups = pa.array([list(tenant.feature_groups)] * 1, pa.list_(pa.string())).take(pa.array(np.zeros(n, np.int64)))
    columns = {name: requests[name] for name in REQUEST_COLUMNS}
    columns.update(
        {
            "feature_groups": groups,
            "range_start": at_rows("event_ts", first, has_rows, schema.field("range_start").type),
            "range_end": at_rows("event_ts", last, has_rows, schema.field("range_end").type),
            "lsn_bound": repeated_frontier(snapshot.lsn_bound, n),
            "open_window": pa.array(np.full(n, snapshot.open_window, np.int64)),
            "length": pa.array(lengths.astype(np.int32)),
            "top_k": pa.array(np.full(n, tenant.max_length, np.int32)),
            "checksum": checksums.take(pa.array(at)),
            "fragment_start_ts": at_rows("event_ts", key, has_fragment, schema.field("fragment_start_ts").type),
            "fragment_start_lsn": at_rows("lsn", key, has_fragment, pa.int64()),
            "fragment_start_partition": at_rows("source_partition", key, has_fragment, pa.int32()),
            "replayed": pa.array(np.zeros(n, np.bool_)),  # a live request (`capture.past` marks replayed ones)
        }
    )
    fragments = _lists(rows, tenant, fragment_starts, ends)
    columns.update({f"{FRAGMENT}{name}": values for name, values in fragments.items()})
    training = pa.table(columns).cast(schema)
    fat = {name: requests[name] for name in REQUEST_COLUMNS}
    fat.update({f"{SEQUENCE}{name}": values for name, values in _lists(rows, tenant, starts, ends).items()})
    return CaptureBatch(training, pa.table(fat).cast(sequence_table_schema(tenant)), rows, starts, ends)


def _lists(rows: pa.Table, tenant: Tenant, starts: np.ndarray, ends: np.ndarray) -> dict[str, pa.Array]:
    """List columns of the model columns, one list per range [starts[i], ends[i]) of `rows`."""
    lengths = ends - starts
    take = pa.array(
        np.repeat(starts - (np.cumsum(lengths) - lengths), lengths) + np.arange(int(lengths.sum()), dtype=np.int64)
    )
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    return {
        f.name: pa.ListArray.from_arrays(offsets, rows[f.name].combine_chunks().take(take).cast(f.type))
        for f in tenant.schema
    }


def capture_requests(
    snapshot: ViewSnapshot,
    reader: HistoryReader,
    tenant: Tenant,
    requests: list[Request],
    fragment_events: int,
    landing: pa.Table | None = None,
) -> list[Capture]:
    """Captures of `requests` against one snapshot, one object per request (the Python API; the
    pipeline takes `capture_batch`'s tables)."""
    return captures_of(capture_batch(snapshot, reader, tenant, requests, fragment_events, landing), tenant, requests)


def captures_of(batch: CaptureBatch, tenant: Tenant, requests: list[Request]) -> list[Capture]:
    """A batch's captures, one object per request."""
    model = batch.rows.select(tenant.model_columns).cast(tenant.schema)
    pointers = batch.training.select([n for n in training_schema(tenant).names if n not in REQUEST_COLUMNS])
    bounds = frontiers_of(pointers["lsn_bound"])
    captures = []
    for request, start, end, pointer, bound in zip(
        requests, batch.starts.tolist(), batch.ends.tolist(), pointers.to_pylist(), bounds, strict=True
    ):
        fragment = {k: pointer.pop(k) for k in list(pointer) if k.startswith(FRAGMENT)}
        pointer["lsn_bound"] = bound
        sequence = model.slice(start, end - start)
        captures.append(
            Capture(
                request, sequence, pointer, sequence.slice(sequence.num_rows - len(fragment[f"{FRAGMENT}event_ts"]))
            )
        )
    return captures


def _request_columns(captures: list[Capture]) -> dict[str, list]:
    return {name: [getattr(c.request, name) for c in captures] for name in REQUEST_COLUMNS}


def training_rows(captures: list[Capture], tenant: Tenant) -> pa.Table:
    """The normalized training rows: request, labels, features, pointer, fragment."""
    columns: dict = _request_columns(captures)
    for name in (f.name for f in training_schema(tenant) if f.name not in columns and not f.name.startswith(FRAGMENT)):
        columns[name] = [c.pointer[name] for c in captures]
    columns["lsn_bound"] = frontier_column(columns["lsn_bound"])
    columns.update(lists_of([c.fragment for c in captures], tenant, FRAGMENT))
    return pa.table(columns, schema=training_schema(tenant))


def fat_rows(captures: list[Capture], tenant: Tenant) -> pa.Table:
    """Today's training rows: the whole sequence copied into each."""
    columns: dict = _request_columns(captures)
    columns.update(lists_of([c.sequence for c in captures], tenant, SEQUENCE))
    return pa.table(columns, schema=sequence_table_schema(tenant))
