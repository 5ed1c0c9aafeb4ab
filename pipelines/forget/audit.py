"""The audit of `seqlake forget`: who asked to forget which users, when, and how many rows each table
held of them, in the Iceberg table `forget_audit`.

A request is recorded before anything is removed: one `started` row per table with the rows it holds
of the users, in one commit; one `done` row once every table is checked clean. A forget killed half
way and run again for the same users resumes the request left `started` (its id, its counts: what
the first attempt found, which is what the request removed in all), so the audit says what was
removed however often the job was killed. The table has no `user_id` column: forget never rewrites
it, and maintenance keeps its snapshots' files.

Each `started` row also keeps the request's marks (`marks`, JSON): the highest LSN per source
partition and the newest arrival time the landing tier and history held when it began. A row of the
users at or below them predates the forget and must be gone (`seqlake.pipelines.forget.leftovers`, for fsck);
events that arrive later are new data (those LSNs include the raw source's: they are the tombstone's
frontier). The audit is the complete record of forgotten users: the tables' own forget records
(`seqlake.tableformat.forgets`) keep recent forgets only. It names them by keyed hash only
(`user_hashes`, `seqlake.core.forget_key`; `users` is empty), so that it can be kept for good.
"""

from __future__ import annotations

import getpass
import json
import os
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import TableAlreadyExistsError
from pyiceberg.io.pyarrow import pyarrow_to_schema
from pyiceberg.table import Table
from pyiceberg.types import ListType, StringType

from seqlake.core.config import Config
from seqlake.core.forget_key import forget_key, user_hash
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.engines.catalog_tables import load_table_if_exists
from seqlake.pipelines.training.tables import numbered
from seqlake.tableformat.schema import TIMESTAMP_US

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
        pa.field("marks", pa.string()),  # started rows: {"lsn": {partition: lsn}, "arrival": ISO time}
        # The users' keyed hashes (`seqlake.core.forget_key`); `users` is empty in every request
        # recorded with them, so the audit names no user in clear.
        pa.field("user_hashes", pa.list_(pa.field("element", pa.string(), nullable=False))),
    ]
)
MARKS = "marks"
HASHES = "user_hashes"


@dataclass(frozen=True)
class ForgetRequest:
    forget_id: str
    requested_by: str
    users: list[int]
    rows: dict[str, int]  # table -> rows it held of the users when the request was recorded
    resumed: bool  # a request a killed run left started
    marks: str | None = None  # what the warehouse held when the request began (JSON; None before marks)
    hashes: tuple[str, ...] = ()  # the users' keyed hashes, in the users' order


@dataclass(frozen=True)
class Forgotten:
    """A recorded request, as fsck checks it: its users and what predates it."""

    forget_id: str
    users: list[int]  # in clear only in requests recorded before hashes; else empty
    recorded_at: datetime
    lsn: dict[int, int]  # highest LSN per source partition at the request; {} when not recorded
    arrival: datetime | None  # newest arrival time then
    done_at: datetime | None  # when every table was checked clean (None: not finished)
    hashes: tuple[str, ...] = ()
    requested_by: str = ""


def audit_table(config: Config) -> Table:
    catalog = open_catalog(config)
    identifier = table_identifier(config, AUDIT)
    existing = load_table_if_exists(catalog, identifier)
    if existing is not None:
        return _with_marks(existing)
    try:
        return catalog.create_table(identifier, schema=pyarrow_to_schema(numbered(AUDIT_SCHEMA)))
    except TableAlreadyExistsError:
        return _with_marks(catalog.load_table(identifier))


def _with_marks(table: Table) -> Table:
    """An audit table recorded before marks (or hashes) existed gains the column (one commit, once)."""
    names = table.schema().column_names
    if MARKS not in names or HASHES not in names:
        with table.update_schema() as update:
            if MARKS not in names:
                update.add_column(MARKS, StringType())
            if HASHES not in names:
                update.add_column(HASHES, ListType(element_id=0, element_type=StringType(), element_required=True))
    return table


def actor(requested_by: str | None = None) -> str:
    return requested_by or os.environ.get(ENV_ACTOR) or getpass.getuser()


def begin(
    config: Config,
    users: list[int],
    rows: dict[str, int],
    requested_by: str | None = None,
    marks: str | None = None,
) -> ForgetRequest:
    """The request for `users`: the one a killed run left started, or a new one recorded now (one
    commit) with `rows`, the rows each table holds of them, and `marks`, what the warehouse held."""
    table = audit_table(config)
    key = forget_key()
    assert key is not None
    hashes = tuple(user_hash(key, u) for u in users)
    pending = _pending(table, users, hashes)
    if pending is not None:
        return pending
    request = ForgetRequest(
        uuid.uuid4().hex, actor(requested_by), users, rows, resumed=False, marks=marks, hashes=hashes
    )
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
        "users": [],  # the hashes name them
        "table_name": name,
        "rows_removed": int(count),
        "recorded_at": at,
        MARKS: request.marks if status == STARTED else None,
        HASHES: list(request.hashes),
    }


def _pending(table: Table, users: list[int], hashes: tuple[str, ...]) -> ForgetRequest | None:
    """The started, unfinished request for exactly these users (by their hashes, or in clear in a
    request recorded before hashes), if a killed run left one."""
    if table.refresh().current_snapshot() is None:
        return None
    rows = table.scan().to_arrow()
    done = set(rows.filter(pc.equal(rows["status"], DONE))["forget_id"].to_pylist())
    started = [r for r in rows.filter(pc.equal(rows["status"], STARTED)).to_pylist() if r["forget_id"] not in done]
    mine = [
        r
        for r in started
        if sorted(r.get(HASHES) or ()) == sorted(hashes) or (r["users"] and sorted(r["users"]) == users)
    ]
    if not mine:
        return None
    forget_id = mine[0]["forget_id"]
    counts = {r["table_name"]: r["rows_removed"] for r in mine if r["forget_id"] == forget_id}
    counts.pop(ALL_TABLES, None)
    return ForgetRequest(
        forget_id, mine[0]["requested_by"], users, counts, resumed=True, marks=mine[0].get(MARKS), hashes=hashes
    )


def requests(config: Config) -> list[Forgotten]:
    """Every recorded request (started or done), oldest first; none when no forget ever ran."""
    catalog = open_catalog(config)
    identifier = table_identifier(config, AUDIT)
    table = load_table_if_exists(catalog, identifier)
    if table is None or table.current_snapshot() is None:
        return []
    found: dict[str, Forgotten] = {}
    rows = table.scan().to_arrow().sort_by("recorded_at").to_pylist()
    done = {r["forget_id"]: r["recorded_at"] for r in rows if r["status"] == DONE}
    for r in rows:
        if r["status"] != STARTED or r["forget_id"] in found:
            continue
        marks = json.loads(r.get(MARKS) or "{}")
        arrival = datetime.fromisoformat(marks["arrival"]) if marks.get("arrival") else None
        lsn = {int(p): int(v) for p, v in marks.get("lsn", {}).items()}
        found[r["forget_id"]] = Forgotten(
            r["forget_id"],
            list(r["users"]),
            r["recorded_at"],
            lsn,
            arrival,
            done.get(r["forget_id"]),
            tuple(r.get(HASHES) or ()),
            r["requested_by"],
        )
    return list(found.values())


def finished(config: Config) -> dict[str, datetime]:
    """When each finished request finished (request id -> its `done` row's time)."""
    return {r.forget_id: r.done_at for r in requests(config) if r.done_at is not None}
