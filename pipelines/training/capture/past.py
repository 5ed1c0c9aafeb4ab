"""Captures take the online view as it is now, so a request from the past would see its future.

A request is in the past when the view already holds a row of its user (the tenant's feature
groups: published history and the landing rows above the frontier) stamped after its
`request_ts`, or when it is older than the view's time (`ViewSnapshot.now`, its newest arrival) by
more than `training.capture_tolerance_seconds` (clock skew between serving and the event log). One
grouped DuckDB query over the batch finds them. They are refused together, in one line that counts
the later events and points to `seqlake backfill`; `replay` accepts them, for a live log replayed
in real time, and their training rows record it (`replayed`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from seqlake.core.errors import PastRequestError
from seqlake.engines.duckdb_session import connect
from seqlake.pipelines.training.capture.online_view import ViewSnapshot
from seqlake.pipelines.training.capture.pointers import CaptureBatch, Request, capture_batch, request_table
from seqlake.pipelines.training.sequence import Tenant
from seqlake.tableformat.reader import HistoryReader

REPLAYED = "replayed"  # the training table's column (`tables.POINTER_FIELDS`)

# Per request (in order): whether the view holds a later row of its user (`seen`), whether it is
# older than the view allows (`stale`), and, on each user's first request only, how many rows of
# that user are later than its oldest request (so that a sum counts every later row once).
_PAST_SQL = """
WITH q AS (SELECT _i, user_id, CAST(request_ts AS TIMESTAMPTZ) AS ts FROM _requests),
firsts AS (SELECT user_id, min(ts) AS first_ts FROM q GROUP BY user_id),
later AS (
    SELECT r.user_id, max(CAST(r.event_ts AS TIMESTAMPTZ)) AS newest, count(*) AS later
    FROM _rows AS r JOIN firsts AS f ON r.user_id = f.user_id AND CAST(r.event_ts AS TIMESTAMPTZ) > f.first_ts
    GROUP BY r.user_id
)
SELECT
    q.ts,
    coalesce(l.newest > q.ts, false) AS seen,
    coalesce(q.ts < CAST(? AS TIMESTAMPTZ), false) AS stale,
    CASE WHEN row_number() OVER (PARTITION BY q.user_id ORDER BY q._i) = 1 THEN coalesce(l.later, 0) ELSE 0 END
        AS later
FROM q LEFT JOIN later AS l USING (user_id)
ORDER BY q._i
"""


@dataclass(frozen=True)
class PastRequests:
    """The requests of a batch that are in the past for a view."""

    past: np.ndarray  # bool per request, in order
    seen: int  # requests before a row the view holds of their user
    stale: int  # requests older than the view's time by more than the tolerance
    later_events: int  # the view's rows of those users stamped after their (oldest) request
    oldest: datetime | None  # the oldest request in the past

    @property
    def count(self) -> int:
        return int(self.past.sum())

    def message(self, requests: int, tenant: str, now: datetime | None, tolerance_seconds: int) -> str:
        """The one line a refused capture prints."""
        reasons = []
        if self.seen:
            reasons.append(f"request_ts before events the view already holds: {self.later_events:,} later events")
        if self.stale and now is not None:
            reasons.append(
                f"{self.stale:,} of them more than {tolerance_seconds:,} s older than the view's time "
                f"{now:%Y-%m-%dT%H:%M:%SZ}"
            )
        oldest = f"; oldest {self.oldest:%Y-%m-%dT%H:%M:%SZ}" if self.oldest is not None else ""
        return (
            f"capture: {self.count:,} of {requests:,} requests are in the past ({'; '.join(reasons)}{oldest}); "
            f"past labels and requests are backfilled: seqlake backfill --labels FILE --tenant {tenant} "
            "--ts-column request_ts (or pass --replay, replay=True, to capture a live log replayed in real time)"
        )


def past_requests(requests: pa.Table, rows: pa.Table, now: datetime | None, tolerance_seconds: int) -> PastRequests:
    """Which `requests` (`user_id`, `request_ts`) are older than a row of their user among `rows`
    (`user_id`, `event_ts`: the view's rows a capture read) or than `now` by more than the tolerance."""
    oldest_allowed = None if now is None else now - timedelta(seconds=tolerance_seconds)
    asked = requests.select(["user_id", "request_ts"])
    asked = asked.append_column("_i", pa.array(np.arange(asked.num_rows, dtype=np.int64)))
    with connect(extensions=()) as con:
        con.execute("SET TimeZone = 'UTC'")
        con.register("_requests", asked)
        con.register("_rows", rows.select(["user_id", "event_ts"]))
        flagged = con.execute(_PAST_SQL, [oldest_allowed]).to_arrow_table()
    seen, stale = flagged["seen"], flagged["stale"]
    past = pc.or_(seen, stale)
    oldest = pc.min(pc.filter(flagged["ts"], past)).as_py() if asked.num_rows else None
    return PastRequests(
        past=past.to_numpy(zero_copy_only=False).astype(bool),
        seen=int(pc.sum(seen.cast(pa.int64())).as_py() or 0),
        stale=int(pc.sum(stale.cast(pa.int64())).as_py() or 0),
        later_events=int(pc.sum(flagged["later"]).as_py() or 0),
        oldest=oldest,
    )


def capture_now(
    view: ViewSnapshot,
    reader: HistoryReader,
    tenant: Tenant,
    requests: pa.Table | list[Request],
    fragment_events: int,
    tolerance_seconds: int,
    replay: bool = False,
) -> CaptureBatch:
    """`capture_batch` of requests served now: requests in the past for the view raise
    `PastRequestError` (one line), unless `replay`; their training rows then record `replayed`."""
    table = request_table(requests) if isinstance(requests, list) else requests
    batch = capture_batch(view, reader, tenant, table, fragment_events)
    found = past_requests(table, batch.rows, view.now, tolerance_seconds)
    if not found.count:
        return batch
    if not replay:
        raise PastRequestError(found.message(table.num_rows, tenant.name, view.now, tolerance_seconds))
    training = batch.training
    index = training.schema.get_field_index(REPLAYED)
    field = training.schema.field(index)
    return replace(batch, training=training.set_column(index, field, pa.array(found.past, field.type)))
