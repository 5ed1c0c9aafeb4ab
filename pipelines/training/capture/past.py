"""Captures take the online view as it is now, so a request from the past would see its future.

A request is in the past when its user's rows in the view include one stamped after its
`request_ts`, or when it is older than the view's newest arrival by more than
`training.capture_tolerance_seconds` (clock skew between serving and the event log). Such requests
are refused together, in one line that counts the later rows and points to `seqlake backfill`;
`replay` accepts them, for a live log replayed in real time.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pyarrow as pa

from seqlake.core.errors import PastRequestError
from seqlake.engines.duckdb_session import connect


def check_not_past(
    requests: pa.Table, rows: pa.Table, now: datetime | None, tolerance_seconds: int, replay: bool
) -> int:
    """Raise `PastRequestError` for requests (`user_id`, `request_ts`) older than their users'
    online `rows` (`user_id`, `event_ts`) or than `now` by more than the tolerance, unless `replay`;
    return how many requests were in the past."""
    oldest_allowed = None if now is None else now - timedelta(seconds=tolerance_seconds)
    with connect(extensions=()) as con:
        con.execute("SET TimeZone = 'UTC'")
        con.register("_requests", requests.select(["user_id", "request_ts"]))
        con.register("_rows", rows.select(["user_id", "event_ts"]))
        # Per request, its user's rows after it; then the requests with any, or too old for the view.
        past, later, oldest = con.execute(
            "WITH q AS (SELECT row_number() OVER () AS _i, user_id, CAST(request_ts AS TIMESTAMPTZ) AS ts "
            "FROM _requests), "
            "l AS (SELECT q._i, q.ts, count(r.user_id) AS later FROM q LEFT JOIN _rows AS r "
            "ON r.user_id = q.user_id AND CAST(r.event_ts AS TIMESTAMPTZ) > q.ts GROUP BY q._i, q.ts) "
            "SELECT count(*), coalesce(sum(later), 0), min(ts) FROM l "
            "WHERE later > 0 OR ts < CAST(? AS TIMESTAMPTZ)",
            [oldest_allowed],
        ).fetchone() or (0, 0, None)
    if past and not replay:
        view = f"the view already holds {int(later):,} rows of their users stamped after their request_ts"
        if oldest_allowed is not None:
            view += f" (and takes requests at most {tolerance_seconds:,} s older than its newest arrival)"
        raise PastRequestError(
            f"capture: {int(past):,} of {requests.num_rows:,} requests are in the past ({view}; oldest request "
            f"{oldest:%Y-%m-%dT%H:%M:%SZ}). Past labels and requests are backfilled: seqlake backfill --labels FILE "
            "--tenant T --ts-column request_ts; --replay captures them anyway, for a live log replayed in real time"
        )
    return int(past)
