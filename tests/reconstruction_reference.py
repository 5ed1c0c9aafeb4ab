"""The per-pointer reconstruction: the plain reference the set-based engines are checked against.

One request at a time: its user's visible history rows, the open window rebuilt from detail, the
candidates filtered to the captured range and before the fragment, the newest `length - W` kept,
the fragment appended, the checksum and length verified. Slow and obvious on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from seqlake.core.config import Config
from seqlake.engines.duckdb_session import connect
from seqlake.pipelines.compaction.aggregation import aggregation_sql
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.pipelines.training.rebuild.duckdb import SampleBatch
from seqlake.pipelines.training.rebuild.plan import Mode
from seqlake.pipelines.training.sequence import (
    ORDER_KEYS,
    Tenant,
    before_key,
    in_order,
    lists_of,
    newest,
    partition_by,
    sequence_checksum,
)
from seqlake.pipelines.training.tables import (
    FRAGMENT,
    QUARANTINE_SCHEMA,
    REQUEST_COLUMNS,
    SEQUENCE,
    sequence_table_schema,
)
from seqlake.tableformat.schema import history_arrow_schema

POINTER_COLUMNS = (
    "request_id",
    "user_id",
    "range_start",
    "range_end",
    "lsn_bound",
    "open_window",
    "length",
    "checksum",
    "fragment_start_ts",
    "fragment_start_lsn",
    "fragment_start_partition",
)


@dataclass(frozen=True)
class Assembled:
    sequence: pa.Table  # the model columns, in order
    checksum: bytes
    expected_checksum: bytes
    expected_length: int

    @property
    def ok(self) -> bool:
        return self.checksum == self.expected_checksum and self.sequence.num_rows == self.expected_length

    @property
    def reason(self) -> str | None:
        if self.ok:
            return None
        if self.sequence.num_rows != self.expected_length:
            return f"length {self.sequence.num_rows} != captured {self.expected_length}"
        return "checksum mismatch"


def bound_of(lsn_bound) -> dict[int, int]:
    """The pointer's LSN bound as {partition: lsn}, from a map value as Arrow gives it."""
    return {int(k): int(v) for k, v in (lsn_bound or [])}


def visible_history(rows: pa.Table, pointer: dict) -> pa.Table:
    """History rows of one request's user visible under its bound, excluding the open window's rows
    (those are rebuilt from detail)."""
    bound = bound_of(pointer["lsn_bound"])
    if not bound or rows.num_rows == 0:
        return rows.slice(0, 0)
    limits = pc.coalesce(
        pc.index_in(rows["source_partition"], pa.array(list(bound), pa.int32())), pa.scalar(-1, pa.int32())
    )
    values = pa.array([*bound.values(), -1], pa.int64())
    per_row = pc.take(values, pc.if_else(pc.equal(limits, -1), len(bound), limits))
    mask = pc.and_(pc.not_equal(rows["window_id"], pointer["open_window"]), pc.less_equal(rows["lsn"], per_row))
    return rows.filter(mask)


def fragment_of(row: dict, tenant: Tenant) -> pa.Table:
    """The captured fragment held in a training row's list columns (Arrow list scalars or Python lists)."""
    columns = {}
    for field in tenant.schema:
        value = row[f"{FRAGMENT}{field.name}"]
        if isinstance(value, pa.Scalar):
            value = value.values if value.is_valid else None
        columns[field.name] = pa.array([] if value is None else value, field.type)
    return pa.table(columns, schema=tenant.schema)


def assemble(pointer: dict, fragment: pa.Table, candidates: pa.Table, tenant: Tenant, mode: Mode) -> Assembled:
    """One request's sequence from its candidate history rows (model columns + order keys) and its
    fragment, checked against the pointer."""
    rows = candidates
    if pointer["range_start"] is not None and rows.num_rows:
        in_groups = pc.is_in(rows["feature_group"], pa.array(tenant.feature_groups))
        ts = rows["event_ts"]
        start = pa.scalar(pointer["range_start"], ts.type)
        end = pa.scalar(pointer["range_end"], ts.type)
        mask = pc.and_(in_groups, pc.and_(pc.greater_equal(ts, start), pc.less_equal(ts, end)))
        if pointer["fragment_start_ts"] is not None:
            if mode == "lsn":
                older = before_key(
                    rows,
                    pointer["fragment_start_ts"],
                    pointer["fragment_start_lsn"],
                    pointer["fragment_start_partition"],
                )
            else:
                older = pc.less(ts, pa.scalar(pointer["fragment_start_ts"], ts.type))
            mask = pc.and_(mask, older)
        rows = in_order(rows.filter(mask))
        if mode == "lsn":
            rows = newest(rows, pointer["length"] - fragment.num_rows)
    else:
        rows = rows.slice(0, 0)
    sequence = pa.concat_tables([rows.select(tenant.model_columns).cast(tenant.schema), fragment.cast(tenant.schema)])
    return Assembled(sequence, sequence_checksum(sequence, tenant), pointer["checksum"], pointer["length"])


def bounds_table(pointers: pa.Table) -> pa.Table:
    """(request_id, user_id, window_id, source_partition, lsn_bound): one row per request and partition,
    for the open window each request must rebuild."""
    requests, users, windows, partitions, lsns = [], [], [], [], []
    for request_id, user_id, window, bound in zip(
        pointers["request_id"].to_pylist(),
        pointers["user_id"].to_pylist(),
        pointers["open_window"].to_pylist(),
        pointers["lsn_bound"].to_pylist(),
        strict=True,
    ):
        for partition, lsn in bound_of(bound).items():
            requests.append(request_id)
            users.append(user_id)
            windows.append(window)
            partitions.append(partition)
            lsns.append(lsn)
    return pa.table(
        {
            "request_id": pa.array(requests, pa.string()),
            "user_id": pa.array(users, pa.int64()),
            "window_id": pa.array(windows, pa.int64()),
            "source_partition": pa.array(partitions, pa.int32()),
            "lsn_bound": pa.array(lsns, pa.int64()),
        }
    )


def rebuild_rows(config: Config, detail_events: pa.Table, bounds: pa.Table) -> pa.Table:
    """The open windows' history rows as they were at each request's bound, from detail events
    (landing columns), with a leading `request_id` column."""
    schema = history_arrow_schema(config)
    with connect(extensions=()) as con:
        con.register("_events", detail_events.select(landing_schema(config).names))
        con.register("_bounds", bounds)
        con.execute(
            "CREATE TEMP VIEW _visible AS SELECT b.request_id, e.* FROM _events AS e JOIN _bounds AS b "
            "ON e.user_id = b.user_id AND e.window_id = b.window_id "
            "AND e.source_partition = b.source_partition AND e.lsn <= b.lsn_bound"
        )
        sql = aggregation_sql(config, "_visible", "duckdb", group_by_extra=("request_id",))
        rows = con.execute(f"SELECT request_id, {', '.join(schema.names)} FROM ({sql})").to_arrow_table()
    return rows.cast(pa.schema([pa.field("request_id", pa.string()), *schema]))


def candidate_columns(tenant: Tenant) -> list[str]:
    return list(dict.fromkeys([*tenant.model_columns, *ORDER_KEYS]))


def reference_rebuild(
    config: Config, tenant: Tenant, mode: Mode, pointers: pa.Table, history: pa.Table, events: pa.Table | None
) -> SampleBatch:
    """What `rebuild_batch` returns, one pointer at a time."""
    per_user = partition_by(history, "user_id")
    empty = history.slice(0, 0)
    history_rows = {user: per_user.get(user, empty) for user in set(pointers["user_id"].to_pylist())}
    rebuilt = {}
    if mode == "lsn":
        assert events is not None  # LSN mode rebuilds the open window from its events
        bounds = bounds_table(pointers)
        rebuilt = partition_by(rebuild_rows(config, events, bounds), "request_id") if events.num_rows else {}
    sequences, ok, bad = [], [], []
    columns = candidate_columns(tenant)
    fragment_columns = [n for n in pointers.column_names if n.startswith(FRAGMENT)]
    for i, row in enumerate(pointers.select(list(POINTER_COLUMNS)).to_pylist()):
        user_rows = history_rows[row["user_id"]]  # every pointer's user has an entry
        if mode == "lsn":
            candidates = visible_history(user_rows, row).select(columns)
            own = rebuilt.get(row["request_id"])
            if own is not None:
                candidates = pa.concat_tables([candidates, own.select(columns).cast(candidates.schema)])
        else:
            candidates = user_rows.select(columns)
        fragment = fragment_of({n: pointers[n][i] for n in fragment_columns}, tenant)
        result = assemble(row, fragment, candidates, tenant, mode)
        sequences.append(result.sequence)
        ok.append(result.ok)
        if not result.ok:
            bad.append(_quarantine_row(tenant, row, result, engine=f"duckdb/{mode}"))
    assembled = pointers.select(list(REQUEST_COLUMNS))
    for name, values in lists_of(sequences, tenant, SEQUENCE).items():
        assembled = assembled.append_column(name, values)
    assembled = assembled.cast(sequence_table_schema(tenant))
    quarantined = pa.Table.from_pylist(bad, schema=QUARANTINE_SCHEMA)
    return SampleBatch(assembled.filter(pa.array(ok, pa.bool_())), quarantined, assembled)


def _quarantine_row(tenant: Tenant, pointer: dict, result, engine: str) -> dict:
    return {
        "tenant": tenant.name,
        "request_id": pointer["request_id"],
        "user_id": pointer["user_id"],
        "engine": engine,
        "reason": result.reason,
        "expected_checksum": result.expected_checksum.hex(),
        "actual_checksum": result.checksum.hex(),
        "expected_length": result.expected_length,
        "actual_length": result.sequence.num_rows,
    }
