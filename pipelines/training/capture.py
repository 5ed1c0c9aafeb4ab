"""Capture at inference: the model input of a request, and what to log instead of it.

For each request the capture returns the sequence the model reads (the tenant's feature groups and
columns, the newest `max_length` rows of the online view) and logs a light pointer (user, request
time, feature groups, event-time range, LSN bound per source partition, open window, length, Top-K,
checksum) plus the recent fragment (the newest W rows). Its cost is the Top-K of published history
plus the user's rows of the open windows: it does not grow with the length of the history.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime

import pyarrow as pa
import pyarrow.compute as pc

from pipelines.training.online_view import ViewSnapshot
from pipelines.training.sequence import (
    ORDER_KEYS,
    Tenant,
    in_order,
    lists_of,
    newest,
    partition_by,
    sequence_checksums,
)
from pipelines.training.tables import (
    FRAGMENT,
    REQUEST_COLUMNS,
    SEQUENCE,
    sequence_table_schema,
    training_schema,
)
from tableformat.multi_reader import histories
from tableformat.reader import HistoryReader, Selection


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
    pointer: dict
    fragment: pa.Table


def online_sequences(
    reader: HistoryReader, tenant: Tenant, user_ids: list[int], landing: pa.Table
) -> dict[int, pa.Table]:
    """Each user's sequence in the online view: model columns plus the order keys, oldest first."""
    columns = tuple(dict.fromkeys([*tenant.model_columns, *ORDER_KEYS]))
    # Merged Top-K is within (published Top-K) + (landing rows): read no more of published history.
    selection = Selection(feature_groups=tenant.feature_groups, columns=columns, top_k=tenant.max_length)
    published = histories(reader, user_ids, selection)
    landing = landing.filter(pc.is_in(landing["feature_group"], pa.array(tenant.feature_groups)))
    landing_by_user = partition_by(landing.select(["user_id", *columns]), "user_id")
    empty = landing.select(list(columns)).slice(0, 0)
    out = {}
    for user in user_ids:
        mine = landing_by_user[user].select(list(columns)) if user in landing_by_user else empty
        rows = pa.concat_tables([published[user].select(list(columns)).cast(mine.schema), mine])
        out[user] = newest(in_order(rows), tenant.max_length)
    return out


def capture_of(
    snapshot: ViewSnapshot, request: Request, tenant: Tenant, rows: pa.Table, fragment_events: int, checksum: bytes
) -> Capture:
    """The capture of one request whose online sequence is `rows` (order keys included) and whose
    model columns hash to `checksum`."""
    sequence = rows.select(tenant.model_columns)
    fragment_rows = newest(rows, fragment_events) if fragment_events else rows.slice(rows.num_rows)
    first = fragment_rows.slice(0, 1).to_pylist()[0] if fragment_rows.num_rows else None
    pointer = {
        "feature_groups": list(tenant.feature_groups),
        "range_start": rows["event_ts"][0].as_py() if rows.num_rows else None,
        "range_end": rows["event_ts"][-1].as_py() if rows.num_rows else None,
        "lsn_bound": sorted(snapshot.lsn_bound.items()),
        "open_window": snapshot.open_window,
        "length": rows.num_rows,
        "top_k": tenant.max_length,
        "checksum": checksum,
        "fragment_start_ts": first["event_ts"] if first else None,
        "fragment_start_lsn": first["lsn"] if first else None,
        "fragment_start_partition": first["source_partition"] if first else None,
    }
    return Capture(request, sequence, pointer, fragment_rows.select(tenant.model_columns))


def capture_requests(
    snapshot: ViewSnapshot,
    reader: HistoryReader,
    tenant: Tenant,
    requests: list[Request],
    fragment_events: int,
    landing: pa.Table | None = None,
) -> list[Capture]:
    """Captures of `requests` against one snapshot (`landing`: the snapshot's rows of their users)."""
    users = list(dict.fromkeys(r.user_id for r in requests))
    if landing is None:
        landing = snapshot.landing_rows(users)
    sequences = online_sequences(reader, tenant, users, landing)
    # Every user's sequence hashed in one vectorized pass.
    checksums = dict(zip(users, sequence_checksums([sequences[u] for u in users], tenant), strict=True))
    # Requests of one user in one snapshot see the same sequence: capture it (and hash it) once.
    first: dict[int, Capture] = {}
    captures = []
    for request in requests:
        if request.user_id in first:
            captures.append(replace(first[request.user_id], request=request))
        else:
            first[request.user_id] = capture_of(
                snapshot, request, tenant, sequences[request.user_id], fragment_events, checksums[request.user_id]
            )
            captures.append(first[request.user_id])
    return captures


def _request_columns(captures: list[Capture]) -> dict[str, list]:
    return {name: [getattr(c.request, name) for c in captures] for name in REQUEST_COLUMNS}


def training_rows(captures: list[Capture], tenant: Tenant) -> pa.Table:
    """The normalized training rows: request, labels, features, pointer, fragment."""
    columns: dict = _request_columns(captures)
    for name in (f.name for f in training_schema(tenant) if f.name not in columns and not f.name.startswith(FRAGMENT)):
        columns[name] = [c.pointer[name] for c in captures]
    columns.update(lists_of([c.fragment for c in captures], tenant, FRAGMENT))
    return pa.table(columns, schema=training_schema(tenant))


def fat_rows(captures: list[Capture], tenant: Tenant) -> pa.Table:
    """Today's training rows: the whole sequence copied into each."""
    columns: dict = _request_columns(captures)
    columns.update(lists_of([c.sequence for c in captures], tenant, SEQUENCE))
    return pa.table(columns, schema=sequence_table_schema(tenant))
