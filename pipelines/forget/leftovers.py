"""Live rows of forgotten users: what `seqlake fsck` reports after a forget, with the command that
removes them.

The audit (`seqlake.pipelines.forget.audit`) records every forget request: its users and its marks, the
highest LSN per source partition and the newest arrival time the warehouse held when it began. A row
of one of those users predates the request, and should be gone, when
- it carries an LSN (history, detail, the compaction quarantine, the landing tier's events and
  quarantine): its LSN is at or below its source partition's mark;
- it carries a request time (each tenant's training, fat-row and samples tables): the request came at
  or before the newest arrival then;
- it is in any other table with a `user_id` (the samples quarantine, backfills): it is in a data
  file the table held when the forget reached it (the file's data sequence number is at most the one
  the table's forget record keeps for that forget: `seqlake.tableformat.forgets`; recent forgets only).
Events that arrive after a forget, and requests made after it, are new data. A request recorded
before marks existed counts every row of its users. Each table is read once, its rows of the users
only (bucket and bounds pruning), and judged with one join.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import In
from pyiceberg.table import Table

from seqlake.core import forget_key
from seqlake.core.config import Config
from seqlake.core.payload import DIGIT_RUN, USER_ID_VALUE
from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.forget import audit as forget_audit
from seqlake.pipelines.forget.landing import user_rows_in_landing
from seqlake.pipelines.landing.tables import LandingPaths, is_delta_table
from seqlake.pipelines.maintenance.steps import user_tables
from seqlake.tableformat.forgets import forgets_of
from seqlake.tableformat.fsck import Finding
from seqlake.tableformat.io import engine_location, resolve_uri
from seqlake.tableformat.schema import TIMESTAMP_US

INVARIANT = "forgotten-user"
NEVER = -(2**63)  # a user's mark when its request recorded none: every row counts


def _marks(requests: list[forget_audit.Forgotten]) -> tuple[pa.Table, pa.Table]:
    """Per user, the latest request's marks: (user_id, source_partition, lsn) and (user_id, arrival),
    with a null partition or arrival where a request recorded none (every row of the user counts)."""
    lsn: dict[tuple[int, int | None], int] = {}
    arrival: dict[int, object] = {}
    for request in requests:
        for user in request.users:
            if not request.lsn:
                lsn[(user, None)] = NEVER
            for partition, top in request.lsn.items():
                lsn[(user, partition)] = max(lsn.get((user, partition), top), top)
            arrival[user] = request.arrival if request.arrival is not None else None
    by_lsn = pa.table(
        {
            "user_id": pa.array([u for u, _ in lsn], pa.int64()),
            "source_partition": pa.array([p for _, p in lsn], pa.int32()),
            "mark_lsn": pa.array(list(lsn.values()), pa.int64()),
        }
    )
    by_time = pa.table(
        {"user_id": pa.array(list(arrival), pa.int64()), "mark_arrival": pa.array(list(arrival.values()), TIMESTAMP_US)}
    )
    return by_lsn, by_time


def _predating(rows: pa.Table, by_lsn: pa.Table, by_time: pa.Table) -> pa.Table:
    """The rows (user_id and the columns judged) that predate their user's forget."""
    names = rows.column_names
    if "lsn" in names and "source_partition" in names:
        rows = rows.set_column(
            names.index("source_partition"), "source_partition", rows["source_partition"].cast(pa.int32())
        )
        exact = rows.join(by_lsn, ["user_id", "source_partition"], join_type="inner")
        exact = exact.filter(pc.less_equal(exact["lsn"], exact["mark_lsn"]))
        unmarked = by_lsn.filter(pc.is_null(by_lsn["source_partition"])).select(["user_id"])
        anything = rows.join(unmarked, "user_id", join_type="inner")
        return pa.concat_tables([exact.select(["user_id"]), anything.select(["user_id"])])
    timed = rows.join(by_time, "user_id", join_type="inner")
    old = pc.or_kleene(pc.is_null(timed["mark_arrival"]), pc.less_equal(timed["request_ts"], timed["mark_arrival"]))
    return timed.filter(old).select(["user_id"])


def _held_at_forget(table: Table, users: list[int]) -> pa.Table:
    """The rows of `users` in live files of `table` that the table held when a forget of them
    reached it (by data sequence number, against the table's forget record)."""
    reached: dict[int, int] = {}  # user -> the highest sequence number a forget of theirs reached
    for epoch in forgets_of(table.metadata).epochs:
        for user in epoch.users:
            reached[user] = max(reached.get(user, -1), epoch.sequence)
    snapshot = table.current_snapshot()
    if snapshot is None or not reached or max(reached.values()) < 0:
        return pa.table({"user_id": pa.array([], pa.int64())})
    parts = []
    for manifest in snapshot.manifests(table.io):
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            sequence = entry.sequence_number if entry.sequence_number is not None else -1
            older = pa.array(sorted(u for u, top in reached.items() if sequence <= top and u in users), pa.int64())
            if not len(older):
                continue
            fs, path = resolve_uri(entry.data_file.file_path)
            with fs.open_input_file(path) as handle:
                ids = pq.read_table(handle, columns=["user_id"])["user_id"]
            parts.append(pa.table({"user_id": ids.filter(pc.is_in(ids, value_set=older))}))
    return pa.concat_tables(parts) if parts else pa.table({"user_id": pa.array([], pa.int64())})


def _finding(name: str, found: pa.Table, requests: list[forget_audit.Forgotten], options: str) -> Finding | None:
    if not found.num_rows:
        return None
    users = sorted(set(found["user_id"].to_pylist()))
    ids = sorted({r.forget_id for r in requests if set(r.users) & set(users)})
    shown = ", ".join(str(u) for u in users[:10]) + (f" and {len(users) - 10} more" if len(users) > 10 else "")
    command = f"seqlake forget{options} " + " ".join(f"--user {u}" for u in users)
    return Finding(
        name,
        INVARIANT,
        f"{found.num_rows:,} live row(s) of forgotten user(s) {shown} (forget request(s) {', '.join(ids)}) "
        f"that predate their forget; remove them: {command}",
    )


def _table_rows(table: Table, users: list[int]) -> pa.Table:
    columns = [c for c in ("user_id", "lsn", "source_partition", "request_ts") if c in table.schema().column_names]
    return table.scan(row_filter=In("user_id", users), selected_fields=tuple(columns)).to_arrow()


def matching_users(ids: pa.Array, hashes: set[str], key: bytes) -> set[int]:
    """The distinct ids among `ids` whose keyed hash is one of `hashes` (each distinct id hashed once)."""
    if not hashes or not len(ids):
        return set()
    distinct = pc.unique(pc.drop_null(ids.cast(pa.int64()))).to_pylist()
    return {int(u) for u in distinct if u >= 0 and forget_key.user_hash(key, int(u)) in hashes}


def forgotten_users(
    config: Config, requests: list[forget_audit.Forgotten], paths: LandingPaths | None
) -> list[forget_audit.Forgotten]:
    """The requests with their users: in clear where a request recorded them so, else every user id a
    table (landing included) holds whose keyed hash the request keeps."""
    hashes = {h for r in requests for h in r.hashes}
    key = forget_key.forget_key(required=False) if hashes else None
    if key is None:
        return requests
    found: set[int] = set()
    for table in user_tables(config):
        if table.refresh().current_snapshot() is not None:
            ids = table.scan(selected_fields=("user_id",)).to_arrow()["user_id"].combine_chunks()
            found |= matching_users(ids, hashes, key)
    if paths is not None:
        with lake_cursor() as con:
            for uri, quarantine in ((paths.events, False), (paths.quarantine, True)):
                if not is_delta_table(uri):
                    continue
                if quarantine:
                    sql = (
                        "SELECT DISTINCT TRY_CAST(d AS BIGINT) AS user_id FROM (SELECT unnest(flatten(list_transform("
                        "regexp_extract_all(payload, ?, 1), v -> regexp_extract_all(v, ?)))) AS d FROM delta_scan(?))"
                    )
                    ids = con.execute(sql, [USER_ID_VALUE, DIGIT_RUN, engine_location(uri)]).to_arrow_table()["user_id"]
                else:
                    sql = "SELECT DISTINCT user_id FROM delta_scan(?)"
                    ids = con.execute(sql, [engine_location(uri)]).to_arrow_table()["user_id"]
                found |= matching_users(ids.combine_chunks(), hashes, key)
    by_hash = {forget_key.user_hash(key, u): u for u in found}
    return [replace(r, users=sorted(set(r.users) | {by_hash[h] for h in r.hashes if h in by_hash})) for r in requests]


def forgotten_findings(config: Config, paths: LandingPaths | None, options: str = "") -> list[Finding]:
    """One finding per table (landing included) holding live rows of forgotten users that predate
    their forget; none when no forget was ever recorded. `options` (--config, --profile) go into the
    command each finding names."""
    requests = forget_audit.requests(config)
    if not requests:
        return []
    requests = forgotten_users(config, requests, paths)
    users = sorted({u for r in requests for u in r.users})
    if not users:
        return []
    by_lsn, by_time = _marks(requests)
    findings: list[Finding] = []
    namespace = config.warehouse.namespace
    for table in user_tables(config):  # history among them; none is created (fsck changes nothing)
        if table.refresh().current_snapshot() is None:
            continue
        columns = table.schema().column_names
        judged = ("lsn" in columns and "source_partition" in columns) or "request_ts" in columns
        found = _predating(_table_rows(table, users), by_lsn, by_time) if judged else _held_at_forget(table, users)
        finding = _finding(f"{namespace}.{table.name()[-1]}", found, requests, options)
        if finding is not None:
            findings.append(finding)
    if paths is not None:
        per_table: dict[str, list[pa.Table]] = defaultdict(list)
        with lake_cursor() as con:
            for name, uri, quarantine in (("events", paths.events, False), ("quarantine", paths.quarantine, True)):
                if is_delta_table(uri):
                    rows = user_rows_in_landing(con, uri, pa.array(users, pa.int64()), quarantine)
                    per_table[name].append(_predating(rows, by_lsn, by_time))
        for name, parts in per_table.items():
            finding = _finding(f"landing/{name}", pa.concat_tables(parts), requests, options)
            if finding is not None:
                findings.append(finding)
    return findings
