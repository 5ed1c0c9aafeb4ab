"""Reconstruction on Arrow and DuckDB, in-process: training samples as a stream of Arrow batches.

Pointers are read bucket by bucket (the training table shares history's bucket(N, user_id)), in
batches; each batch reads its users' history once per user, with the tenant's feature groups and
columns and the union of the batch's time ranges pushed down to storage, and the open windows' detail
events once per batch. The batch is then rebuilt and verified by two DuckDB queries over those Arrow
tables (`BatchPlan`: a join, a window rank, a grouped aggregation, the checksum over the
list columns), with no Python per pointer. `PrefetchingIterator` rebuilds the next batch while the
caller consumes the current one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import timedelta

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import And, In
from pyiceberg.table import Table

from pipelines.aggregation import aggregation_sql
from pipelines.parse import landing_schema
from pipelines.training.prefetch import PrefetchingIterator
from pipelines.training.reconstruct import Mode, reason_sql
from pipelines.training.sequence import ORDER_KEYS, Tenant
from pipelines.training.sequence_digest import piece_sql, pieces_checksum_sql, row_digest_sql, row_text_sql
from pipelines.training.tables import FRAGMENT, QUARANTINE_SCHEMA, REQUEST_COLUMNS, SEQUENCE, sequence_table_schema
from seqlake.config import Config
from seqlake.duckdb_session import connect, sql_literal
from seqlake.errors import SeqlakeError
from tableformat.cache import CachedHistoryReader
from tableformat.evolution import known_field_ids, projection, with_ids_from
from tableformat.io import PlainFileSystem
from tableformat.multi_reader import histories
from tableformat.reader import HistoryReader, Selection, stats_overlap
from tableformat.schema import table_arrow_schema

ONE_MICROSECOND = timedelta(microseconds=1)
# Landing columns a rebuild groups or orders by, besides items and the tenant's columns (detail events
# are deduplicated already: event ids are not needed).
REBUILD_KEYS = ("user_id", "feature_group", "event_ts", "lsn", "source_partition", "window_id")


@dataclass(frozen=True)
class SampleBatch:
    samples: pa.Table  # sequence_table_schema(tenant): verified sequences only
    quarantined: pa.Table  # QUARANTINE_SCHEMA
    assembled: pa.Table  # every rebuilt sequence, verified or not (to measure a mode against fat rows)


def pointer_batches(training: Table, fs, batch_rows: int) -> Iterator[pa.Table]:
    """The training table's rows, bucket by bucket, in batches of at most `batch_rows` that never
    mix buckets (a batch reads one bucket of history and detail)."""
    tasks = list(training.scan().plan_files())
    if any(task.delete_files for task in tasks):
        raise SeqlakeError(f"{training.name()} has row-level deletes; rewrite it before reconstructing")
    by_bucket: dict[int, list[str]] = {}
    for task in tasks:
        by_bucket.setdefault(task.file.partition[0], []).append(task.file.file_path)
    target, loose = table_arrow_schema(training.schema())  # files of older schemas read as the current one
    known = known_field_ids(training)
    first: pa.Schema | None = None  # writers differ in Arrow flavour (large strings): one schema for all
    for bucket in sorted(by_bucket):
        pending: list[pa.RecordBatch] = []
        rows = 0
        for path in sorted(by_bucket[bucket]):
            with fs.open_input_file(path) as handle:
                parquet = pq.ParquetFile(handle)
                found = projection(parquet.schema_arrow, target, loose, known)
                for batch in parquet.iter_batches(batch_size=batch_rows, columns=found.file_columns(target.names)):
                    if not found.identity:
                        batch = found.apply(pa.Table.from_batches([batch]), target.names).to_batches()[0]
                    first = first or batch.schema
                    if batch.schema != first:
                        batch = batch.cast(first)
                    pending.append(batch)
                    rows += batch.num_rows
                    if rows >= batch_rows:
                        yield pa.Table.from_batches(pending)
                        pending, rows = [], 0
        if pending:
            yield pa.Table.from_batches(pending)


def detail_events(
    detail: Table, config: Config, tenant: Tenant, fs, user_ids: list[int], windows: list[int]
) -> pa.Table:
    """Detail events of the users in the windows, of the tenant's feature groups, with only the columns
    a rebuild of the tenant's rows needs (the others are null): partition pruning by window, row
    filter by user and group."""
    schema = pa.schema([f.with_nullable(True) for f in landing_schema(config)])
    items = {config.feature_groups[g].item_column for g in tenant.feature_groups}
    needed = [n for n in schema.names if n in {*REBUILD_KEYS, *items, *tenant.columns}]
    condition = And(In("window_id", set(windows)), In("user_id", set(user_ids)))
    current = with_ids_from(schema, detail.schema())  # files of older schemas read as the current one
    known = known_field_ids(detail)
    parts = []
    for task in detail.scan(row_filter=condition).plan_files():
        with fs.open_input_file(task.file.file_path) as handle:
            parquet = pq.ParquetFile(handle)
            found = projection(parquet.schema_arrow, current, known=known)
            groups = _groups_holding(parquet.metadata, min(user_ids), max(user_ids))
            if not groups:
                continue
            rows = parquet.read_row_groups(groups, columns=found.file_columns(needed))
            rows = found.apply(rows, needed)
        mask = pc.and_(
            pc.is_in(rows["user_id"], pa.array(user_ids, pa.int64())),
            pc.is_in(rows["feature_group"], pa.array(tenant.feature_groups)),
        )
        parts.append(rows.filter(pc.and_(mask, pc.is_in(rows["window_id"], pa.array(windows, pa.int64())))))
    if not parts:
        return schema.empty_table()
    events = pa.concat_tables(parts)
    columns = {f.name: events[f.name] if f.name in needed else pa.nulls(events.num_rows, f.type) for f in schema}
    return pa.table(columns).cast(schema)


def _groups_holding(meta: pq.FileMetaData, low: int, high: int) -> list[int]:
    """Row groups whose user_id statistics overlap [low, high]."""
    column = meta.schema.to_arrow_schema().names.index("user_id")
    return [
        rg
        for rg in range(meta.num_row_groups)
        if stats_overlap(meta.row_group(rg).column(column).statistics, low, high)
    ]


class Reconstruction:
    """Rebuilds a tenant's training samples from its pointers, history and detail."""

    def __init__(
        self,
        config: Config,
        tenant: Tenant,
        training: Table,
        history: Table,
        detail: Table,
        mode: Mode = "lsn",
        filesystem=None,
        batch_rows: int = 2048,
    ) -> None:
        self.config, self.tenant, self.mode = config, tenant, mode
        self.training, self.history, self.detail = training, history, detail
        self.fs = filesystem or PlainFileSystem()
        # Neighbours share packed row groups: the cache decodes each column chunk once for all of them.
        self.reader = CachedHistoryReader(history, filesystem=self.fs)
        self.batch_rows = batch_rows
        self.plan = BatchPlan.of(config, tenant, mode)  # planned once, run per batch
        # One in-memory database for all batches (each batch a cursor: its own views, no new instance).
        self.database = connect(extensions=())

    def batches(self) -> Iterator[SampleBatch]:
        # Pointers are not history: their bytes are not counted in the tenant's reads.
        for pointers in pointer_batches(self.training, PlainFileSystem(), self.batch_rows):
            yield self.rebuild(pointers)

    def rebuild(self, pointers: pa.Table) -> SampleBatch:
        """The batch's sequences, rebuilt and verified in one DuckDB plan over Arrow."""
        history = stack_users(self._history_rows(pointers), self.reader, self.tenant)
        events = self._open_window_events(pointers) if self.mode == "lsn" else None
        return rebuild_batch(self.config, self.tenant, self.mode, pointers, history, events, self.plan, self.database)

    def _ranged_histories(self, selections: dict[int, Selection]) -> dict[int, pa.Table]:
        """Each user's rows in its own selection: one multi-user read over the union of the ranges
        (the reader's snapshot index plans files once for the batch), then each user's own range."""
        if not selections:
            return {}
        union = replace(
            next(iter(selections.values())),
            start=min(s.start for s in selections.values()),
            end=max(s.end for s in selections.values()),
        )
        found = histories(self.reader, list(selections), union, max_workers=1)
        out = {}
        for user, rows in found.items():
            own = selections[user]
            ts = rows["event_ts"]
            keep = pc.and_(
                pc.greater_equal(ts, pa.scalar(own.start, ts.type)), pc.less(ts, pa.scalar(own.end, ts.type))
            )
            out[user] = rows.filter(keep)
        return out

    def _open_window_events(self, pointers: pa.Table) -> pa.Table:
        """Detail events of the batch's users in the windows open at their captures."""
        users = pc.unique(pointers["user_id"]).to_pylist()
        windows = pc.unique(pointers["open_window"]).to_pylist()
        if not users:
            return landing_schema(self.config).empty_table()
        return detail_events(self.detail, self.config, self.tenant, self.fs, users, windows)

    def _history_rows(self, pointers: pa.Table) -> dict[int, pa.Table]:
        """Each user's history rows that the batch's requests may need, with the tenant's groups and
        columns. A request shorter than its Top-K holds the user's whole visible history, so users
        with only such requests are read together (each row group once) up to their newest range end;
        the others over the union of their requests' ranges, from one file plan for the batch."""
        tenant = self.tenant
        columns = tenant.read_columns()
        per_user = pointers.group_by("user_id").aggregate(
            [("range_start", "min"), ("range_end", "max"), ("length", "max"), ("top_k", "min")]
        )
        out: dict[int, pa.Table] = {}
        whole, whole_end = [], None
        ranged: dict[int, Selection] = {}
        for user, start, end, length, top_k in zip(
            *(
                per_user[c].to_pylist()
                for c in ("user_id", "range_start_min", "range_end_max", "length_max", "top_k_min")
            ),
            strict=True,
        ):
            if start is None:
                out[user] = self.reader.arrow_schema().empty_table().select(list(columns))
            elif length < top_k:
                whole.append(user)
                whole_end = end if whole_end is None else max(whole_end, end)
            else:
                ranged[user] = Selection(tenant.feature_groups, columns, start=start, end=end + ONE_MICROSECOND)
        out.update(self._ranged_histories(ranged))
        if whole:
            selection = Selection(tenant.feature_groups, columns, end=whole_end + ONE_MICROSECOND)
            out.update(histories(self.reader, whole, selection, max_workers=1))
        return out


def rebuild_batch(
    config: Config,
    tenant: Tenant,
    mode: Mode,
    pointers: pa.Table,
    history: pa.Table,
    events: pa.Table | None,
    plan: BatchPlan | None = None,
    database: duckdb.DuckDBPyConnection | None = None,
) -> SampleBatch:
    """Rebuild and verify a batch of pointers (training rows) from their users' history rows
    (`user_id` plus the tenant's read columns) and, in LSN mode, the open windows' detail events.

    The plan's first query gathers every row a sequence may hold once (history rows, rebuilt open
    window rows, fragment rows) with its row digest (SHA-256 once per row, however many requests
    hold it); the second ranks and orders narrow keys only; Arrow then gathers the rows in sequence
    order, cuts the list columns by offsets (no copy of the values) and the checksums fold the lists
    of digest pieces in integer arithmetic (no hashing per request)."""
    plan = plan or BatchPlan.of(config, tenant, mode)
    with database.cursor() if database is not None else connect(extensions=()) as con:
        flat, offsets, counts = gather_sequences(con, plan, tenant, mode, pointers, history, events)
        checked = pa.table(
            {
                **{p: pa.ListArray.from_arrays(offsets, flat[p].combine_chunks()) for p in PIECES},
                "length": pointers["length"],
                "checksum": pointers["checksum"],
                "actual_length": pa.array(counts),
            }
        )
        con.register("_checked", checked)
        verdict = con.execute(_verdict_sql()).to_arrow_table()
    seq = sequence_table_schema(tenant)
    columns = {name: pointers[name] for name in REQUEST_COLUMNS}
    for name in tenant.model_columns:
        values = flat[name].combine_chunks()
        columns[f"{SEQUENCE}{name}"] = pa.ListArray.from_arrays(offsets, values)
    assembled = pa.table(columns).cast(seq)
    ok = pc.is_null(verdict["reason"])
    failed = pa.table(
        {**{n: pointers[n] for n in ("request_id", "user_id")}, **{n: verdict[n] for n in verdict.column_names}}
    ).filter(pc.invert(ok))
    quarantined = pa.table(
        {
            "tenant": pa.repeat(pa.scalar(tenant.name), failed.num_rows),
            "request_id": failed["request_id"],
            "user_id": failed["user_id"],
            "engine": pa.repeat(pa.scalar(f"arrow/{mode}"), failed.num_rows),
            **{name: failed[name] for name in QUARANTINE_SCHEMA.names[4:]},
        }
    ).cast(QUARANTINE_SCHEMA)
    # A batch that verifies in full (the usual case) is returned as is, not copied by a filter.
    samples = assembled if failed.num_rows == 0 else assembled.filter(ok)
    return SampleBatch(samples, quarantined, assembled)


def gather_sequences(
    con,
    plan: BatchPlan,
    tenant: Tenant,
    mode: Mode,
    pointers: pa.Table,
    history: pa.Table,
    events: pa.Table | None,
    keep: tuple[str, ...] | None = None,
) -> tuple[pa.Table, pa.Array, np.ndarray]:
    """The plan's two queries over a batch: every sequence's rows in order, flat (the model columns,
    `keep` (default: the row digest's pieces) and `_pos`, the pointer's position), the list offsets
    and each sequence's row count."""
    keep = PIECES if keep is None else keep
    positions = pa.array(np.arange(pointers.num_rows, dtype=np.int64))
    con.register("_pointers", pointers.append_column("_pos", positions))
    con.register("_history", history)
    if mode == "lsn":
        con.register("_events", events)
    payload = con.execute(plan.payload_sql).to_arrow_table()
    payload = payload.combine_chunks().append_column("_pid", pa.array(np.arange(payload.num_rows, dtype=np.int64)))
    con.register("_payload", payload)
    order = con.execute(plan.order_sql).to_arrow_table()
    flat = payload.select([*tenant.model_columns, *keep]).take(order["_pid"].combine_chunks())
    flat = flat.append_column("_pos", order["_pos"])
    counts = np.bincount(flat["_pos"].to_numpy(), minlength=pointers.num_rows).astype(np.int32)
    offsets = pa.array(np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int32))
    return flat, offsets, counts


def _verdict_sql() -> str:
    """Each sequence's checksum from its rows' digest pieces, compared with the captured one."""
    actual = pieces_checksum_sql(list(PIECES), "duckdb")
    reason = reason_sql("actual_length", "length", "_actual_checksum", "checksum")
    return (
        f"SELECT {reason} AS reason, lower(hex(checksum)) AS expected_checksum, "
        "lower(hex(_actual_checksum)) AS actual_checksum, length AS expected_length, actual_length "
        f"FROM (SELECT *, {actual} AS _actual_checksum FROM _checked)"
    )


def stack_users(per_user: dict[int, pa.Table], reader: HistoryReader, tenant: Tenant) -> pa.Table:
    """One table of the users' history rows with a `user_id` column (what the plan joins on)."""
    columns = list(tenant.read_columns())
    parts = [
        rows.select(columns).append_column("user_id", pa.array(np.full(rows.num_rows, user, dtype=np.int64)))
        for user, rows in per_user.items()
        if rows.num_rows
    ]
    if not parts:
        schema = reader.arrow_schema()
        return pa.schema([schema.field(c) for c in columns] + [pa.field("user_id", pa.int64())]).empty_table()
    return pa.concat_tables(parts, promote_options="permissive")


@dataclass(frozen=True)
class BatchPlan:
    """The two queries of a batch (see `rebuild_batch`), planned once per tenant and mode."""

    payload_sql: str
    order_sql: str

    @classmethod
    def of(
        cls, config: Config, tenant: Tenant, mode: Mode, *, cut_to_length: bool = False, with_digest: bool = True
    ) -> BatchPlan:
        """`cut_to_length`: time mode keeps only the newest `length` rows too (backfills);
        `with_digest=False`: no row digests, for sequences nothing verifies."""
        return cls(payload_sql(config, tenant, mode, with_digest), order_sql(tenant, mode, cut_to_length))


# Payload kinds: a published history row, an open-window row rebuilt for one request, a fragment row.
HISTORY, REBUILT, FRAGMENT_ROW = 0, 1, 2
# A payload row's digest, as the four 16-bit pieces the checksum's lanes fold.
PIECES = ("_p0", "_p1", "_p2", "_p3")


def payload_sql(config: Config, tenant: Tenant, mode: Mode, with_digest: bool = True) -> str:
    """Every row a batch's sequences may hold, once, with its row digest's pieces (PIECES; left out
    with `with_digest=False`) and `_kind`:
    the tenant's history rows (a user's requests share most of them: their text is computed once),
    in LSN mode the open window rebuilt from detail as of each request's bound (`_pos` set), and
    each request's fragment rows (`_pos` and `_ord`, their order in the fragment, set).

    Inputs: `_pointers` (training rows plus `_pos`), `_history` (the users' history rows),
    `_events` (LSN mode: the open windows' detail events)."""
    model = tenant.model_columns
    groups = ", ".join(sql_literal(g) for g in tenant.feature_groups)
    keys = ", ".join(dict.fromkeys([*model, *ORDER_KEYS]))
    text = row_text_sql(tenant.schema, model, "duckdb") if with_digest else "CAST(NULL AS VARCHAR)"
    parts = [
        f"SELECT {HISTORY} AS _kind, user_id, window_id, {keys}, {text} AS _text "
        f"FROM _history WHERE feature_group IN ({groups})"
    ]
    if mode == "lsn":
        rebuilt = aggregation_sql(config, "_visible_events", "duckdb", group_by_extra=("_pos",))
        parts.append(
            f"SELECT {REBUILT} AS _kind, _pos, {keys}, {text} AS _text FROM ({rebuilt}) "
            f"WHERE feature_group IN ({groups})"
        )
    unnested = ", ".join(f"unnest({FRAGMENT}{c}) AS {c}" for c in model)
    fragment = f"SELECT _pos, unnest(range(len({FRAGMENT}event_ts))) AS _ord, {unnested} FROM _pointers"
    parts.append(f"SELECT {FRAGMENT_ROW} AS _kind, _pos, _ord, {', '.join(model)}, {text} AS _text FROM ({fragment})")
    ctes = ""
    if mode == "lsn":
        ctes = (
            f"WITH {_BOUNDS}, _visible_events AS (SELECT b._pos, e.* FROM _events AS e JOIN _bounds AS b "
            "ON e.user_id = b.user_id AND e.window_id = b.window_id "
            "AND e.source_partition = b.source_partition AND e.lsn <= b.lsn_bound) "
        )
    pieces = ", ".join(f"{piece_sql('_digest', k, 'duckdb')} AS {p}" for k, p in enumerate(PIECES))
    rows = " UNION ALL BY NAME ".join(parts)
    if not with_digest:
        return f"{ctes}SELECT * EXCLUDE (_text) FROM ({rows})"
    digested = f"SELECT * EXCLUDE (_text), {row_digest_sql('_text', 'duckdb')} AS _digest FROM ({rows})"
    return f"{ctes}SELECT * EXCLUDE (_digest), {pieces} FROM ({digested})"


_BOUNDS = (
    "_bounds AS (SELECT _pos, user_id, open_window AS window_id, "
    "unnest(map_keys(lsn_bound)) AS source_partition, unnest(map_values(lsn_bound)) AS lsn_bound "
    "FROM _pointers)"
)


def order_sql(tenant: Tenant, mode: Mode, cut_to_length: bool = False) -> str:
    """Narrow keys only: for each request (`_pos`), the payload rows (`_pid`) of its sequence in
    order. Candidates (history visible under the bound outside the open window, and the request's
    rebuilt open window in LSN mode) in the request's range and before its fragment; the newest
    `length - W` kept by rank; then the fragment.

    Inputs: `_pointers`, `_payload` (what `payload_sql` returned, plus `_pid`)."""
    groups = ", ".join(sql_literal(g) for g in tenant.feature_groups)
    ctes = []
    if mode == "lsn":
        ctes.append(_BOUNDS)
        ctes.append(
            "_candidates AS (SELECT b._pos, h._pid, h.feature_group, h.event_ts, h.lsn, h.source_partition "
            "FROM _payload AS h JOIN _bounds AS b ON h.user_id = b.user_id AND h.source_partition = b.source_partition "
            f"WHERE h._kind = {HISTORY} AND h.window_id <> b.window_id AND h.lsn <= b.lsn_bound "
            "UNION ALL SELECT _pos, _pid, feature_group, event_ts, lsn, source_partition FROM _payload "
            f"WHERE _kind = {REBUILT})"
        )
        older = (
            "(c.event_ts < p.fragment_start_ts OR (c.event_ts = p.fragment_start_ts AND (c.lsn < p.fragment_start_lsn "
            "OR (c.lsn = p.fragment_start_lsn AND c.source_partition < p.fragment_start_partition))))"
        )
        keep = "QUALIFY _rank <= p._need"
    else:
        ctes.append(
            "_candidates AS (SELECT p._pos, h._pid, h.feature_group, h.event_ts, h.lsn, h.source_partition "
            f"FROM _payload AS h JOIN _pointers AS p USING (user_id) WHERE h._kind = {HISTORY})"
        )
        older = "c.event_ts < p.fragment_start_ts"
        keep = "QUALIFY _rank <= p._need" if cut_to_length else ""
    ctes.append(
        "_needs AS (SELECT _pos, range_start, range_end, fragment_start_ts, fragment_start_lsn, "
        f"fragment_start_partition, length - len({FRAGMENT}event_ts) AS _need FROM _pointers)"
    )
    ctes.append(
        f"_kept AS (SELECT c._pos, c._pid, row_number() OVER (PARTITION BY c._pos ORDER BY {_newest_first()}) "
        "AS _rank FROM _candidates AS c JOIN _needs AS p USING (_pos) "
        f"WHERE c.feature_group IN ({groups}) AND c.event_ts BETWEEN p.range_start AND p.range_end "
        f"AND (p.fragment_start_ts IS NULL OR {older}) {keep})"
    )
    return (
        f"WITH {', '.join(ctes)} SELECT _pos, _pid FROM (SELECT _pos, 0 AS _part, -_rank AS _ord, _pid FROM _kept "
        f"UNION ALL SELECT _pos, 1, _ord, _pid FROM _payload WHERE _kind = {FRAGMENT_ROW}) ORDER BY _pos, _part, _ord"
    )


def _newest_first() -> str:
    return ", ".join(f"c.{k} DESC" for k in ORDER_KEYS)


def sample_batches(reconstruction: Reconstruction, prefetch: int = 1) -> PrefetchingIterator:
    """Verified training samples as Arrow record batches, the next batch prefetched."""

    def batches() -> Iterator[pa.RecordBatch]:
        for result in reconstruction.batches():
            yield from result.samples.to_batches()

    return PrefetchingIterator(batches(), depth=prefetch)
