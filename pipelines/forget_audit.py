"""The audit of `seqlake forget`: who asked to forget which users, when, and how many rows each table
held of them, in the Iceberg table `forget_audit`.

A request is recorded before anything is removed: one `started` row per table with the rows it holds
of the users, in one commit; one `done` row once every table is checked clean. A forget killed half
way and run again for the same users resumes the request left `started` (its id, its counts: what
the first attempt found, which is what the request removed in all), so the audit says what was
removed however often the job was killed. The table has no `user_id` column: forget never rewrites
it, and maintenance keeps its snapshots' files.
"""

from __future__ import annotations

import getpass
import os
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import TableAlreadyExistsError
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.table import Table

from pipelines.training.tables import numbered
from seqlake.catalog import open_catalog, table_identifier
from seqlake.config import Config
from tableformat.schema import TIMESTAMP_US

AUDIT = "forget_audit"
ENV_ACTOR = "SEQLAKE_ACTOR"  # who is asking, when the operating-system user is not the one to record
STARTED, DONE = "started", "done"
ALL_TABLES = "*"

AUDIT_SCHEMA = pa.schema(
    [
        pa.field("forget_id", pa.string(), nullable=False),
        pa.field("status", pa.string(), nullable=False),  # started (per table) or done (once)
        pa.field("requested_by", pa.string(), nullable=False),
        pa.field("users", pa.list_(pa.field("element", pa.int64(), nullable=False)), nullable=False),
        pa.field("table_name", pa.string(), nullable=False),  # `*` on the done row
        pa.field("rows_removed", pa.int64(), nullable=False),
        pa.field("recorded_at", TIMESTAMP_US, nullable=False),
    ]
)


@dataclass(frozen=True)
class ForgetRequest:
    forget_id: str
    requested_by: str
    users: list[int]
    rows: dict[str, int]  # table -> rows it held of the users when the request was recorded
    resumed: bool  # a request a killed run left started


def audit_table(config: Config) -> Table:
    catalog = open_catalog(config)
    identifier = table_identifier(config, AUDIT)
    if catalog.table_exists(identifier):
        return catalog.load_table(identifier)
    try:
        return catalog.create_table(identifier, schema=pyarrow_to_schema(numbered(AUDIT_SCHEMA)))
    except TableAlreadyExistsError:
        return catalog.load_table(identifier)


def actor(requested_by: str | None = None) -> str:
    return requested_by or os.environ.get(ENV_ACTOR) or getpass.getuser()


def begin(config: Config, users: list[int], rows: dict[str, int], requested_by: str | None = None) -> ForgetRequest:
    """The request for `users`: the one a killed run left started, or a new one recorded now (one
    commit) with `rows`, the rows each table holds of them."""
    table = audit_table(config)
    pending = _pending(table, users)
    if pending is not None:
        return pending
    request = ForgetRequest(uuid.uuid4().hex, actor(requested_by), users, rows, resumed=False)
    now = datetime.now(UTC)
    records = [_row(request, STARTED, name, count, now) for name, count in sorted(rows.items())] or [
        _row(request, STARTED, ALL_TABLES, 0, now)
    ]
    table.append(pa.Table.from_pylist(records, schema=AUDIT_SCHEMA))
    return request


def finish(config: Config, request: ForgetRequest) -> None:
    """Record that every table was checked clean of the request's users (one commit)."""
    total = sum(request.rows.values())
    row = _row(request, DONE, ALL_TABLES, total, datetime.now(UTC))
    audit_table(config).append(pa.Table.from_pylist([row], schema=AUDIT_SCHEMA))


def _row(request: ForgetRequest, status: str, name: str, count: int, at: datetime) -> dict:
    return {
        "forget_id": request.forget_id,
        "status": status,
        "requested_by": request.requested_by,
        "users": request.users,
        "table_name": name,
        "rows_removed": int(count),
        "recorded_at": at,
    }


def _pending(table: Table, users: list[int]) -> ForgetRequest | None:
    """The started, unfinished request for exactly these users, if a killed run left one."""
    if table.refresh().current_snapshot() is None:
        return None
    rows = table.scan().to_arrow()
    done = set(rows.filter(pc.equal(rows["status"], DONE))["forget_id"].to_pylist())
    started = [r for r in rows.filter(pc.equal(rows["status"], STARTED)).to_pylist() if r["forget_id"] not in done]
    mine = [r for r in started if sorted(r["users"]) == users]
    if not mine:
        return None
    forget_id = mine[0]["forget_id"]
    counts = {r["table_name"]: r["rows_removed"] for r in mine if r["forget_id"] == forget_id}
    counts.pop(ALL_TABLES, None)
    return ForgetRequest(forget_id, mine[0]["requested_by"], users, counts, resumed=True)
