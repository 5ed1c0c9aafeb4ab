"""Backfills: a tenant's sequence for every row of any labelled table, point-in-time correct.

A label row is `(user_id, ts, any other columns)`; each gets the tenant's sequence (its feature
groups and columns, the newest `max_length` rows, oldest first) as it stood just before `ts`. A
label is usually the outcome of the interaction at `ts`, which must not be its own input: every
bound is strict.

- event time (`as_of="event-time"`): the fold of exactly the events that happened before `ts`
  (`event_ts < ts`), late arrivals included: what a replay by event time gives. A history row
  merges one item's events of a processing window and is stamped with the earliest of them
  (`event_ts`); a row whose latest event (`last_event_ts`) is at or after `ts` is not taken as it
  stands: its window is rebuilt from the detail table's events before `ts` with the compaction's
  SQL (`gather.gather_sequences(exact_until=...)`). Once a window's detail has expired, such rows
  are withheld, and counted.
- arrival (`as_of="arrival"`): only what had arrived before `ts` (`arrival_ts < ts`; with
  `inclusive`, `<= ts`, for labels that are not themselves events). Per source partition p, the
  frontier F_p(ts) is the highest LSN of p that had arrived: the largest of the LSNs of p's landing
  records that arrived before ts, and of the frontiers recorded by publications whose windows had
  all ended (a window's records all arrive before its end). LSNs are arrival order within a
  partition, so "LSN <= F_p(ts)" is "arrived before ts" (publication points alone are lower bounds:
  without the landing records the rule is conservative). The sequence is then what a capture just
  before `ts` would have read: history rows with `lsn <= F_p(ts)` outside the window open at `ts`
  (the newest window any landing record arrived in), that window rebuilt from the detail table's
  events up to the frontiers. It equals `seqlake samples` for a captured request.

The leakage report checks every emitted sequence for each way the future can get in: rows that
arrived after `ts` (late arrivals; event time takes them in by definition), rows that arrived or
happened exactly at `ts` (the label's own event), and rows that merged events from `ts` on. It is
0 on data without late arrivals.

The plan is the samples job's (`gather.gather_sequences`): label rows become pointers (no
fragment, no checksum), read bucket by bucket in batches, one set-based plan per batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Literal

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.table import Table

from seqlake.core.config import Config
from seqlake.core.errors import ForgetCommitted, SchemaError
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.engines.duckdb_session import connect, sql_literal
from seqlake.pipelines.faults import kill_point
from seqlake.pipelines.landing.tables import is_delta_table, landing_paths
from seqlake.pipelines.tables import load_existing_table
from seqlake.pipelines.training.rebuild.duckdb import Reconstruction
from seqlake.pipelines.training.rebuild.gather import (
    SequenceRows,
    WindowDetail,
    gather_sequences,
    latest_event_micros,
)
from seqlake.pipelines.training.sequence import Tenant, list_schema
from seqlake.pipelines.training.tables import FRAGMENT, SEQUENCE, create_bucketed_table, training_schema
from seqlake.tableformat.bucketing import bucket_of
from seqlake.tableformat.forgets import ATTEMPTS, ReadPoint, drop_users, fenced_transaction, read_point
from seqlake.tableformat.frontier import as_frontier_column, bound_matrix
from seqlake.tableformat.io import engine_location
from seqlake.tableformat.schema import TIMESTAMP_US
from seqlake.tableformat.time_travel import publication_points

AsOf = Literal["event-time", "arrival"]
AS_OF: tuple[AsOf, ...] = ("event-time", "arrival")
EARLIEST = datetime(1, 1, 1, tzinfo=UTC)  # range of an unbounded side (event time is never outside)
LATEST = datetime(9000, 1, 1, tzinfo=UTC)
ONE_MICROSECOND = timedelta(microseconds=1)
INTERNAL = ("_row", "_ts", "_bucket")  # columns the job adds to the label rows while it runs


@dataclass
class LeakageReport:
    """What of the future the emitted sequences hold, per kind: rows that arrived after the label's
    ts, rows that arrived or happened at ts, rows that merged events from ts on; and rows withheld
    (they merged events from ts on, and their window's detail has expired)."""

    label_rows: int = 0
    leaking_rows: int = 0  # label rows whose sequence holds a row of any kind below
    late_arrivals: int = 0
    at_label_time: int = 0
    merged_after: int = 0
    withheld: int = 0

    @property
    def leaked_events(self) -> int:
        """Sequence rows of every kind, over all label rows (a row of two kinds counts twice)."""
        return self.late_arrivals + self.at_label_time + self.merged_after

    def add(self, leaks: Leaks) -> None:
        self.label_rows += len(leaks.late)
        self.leaking_rows += int(np.count_nonzero(leaks.late + leaks.at_ts + leaks.merged))
        self.late_arrivals += int(leaks.late.sum())
        self.at_label_time += int(leaks.at_ts.sum())
        self.merged_after += int(leaks.merged.sum())
        self.withheld += int(leaks.withheld.sum())

    def summary(self) -> str:
        share = self.leaking_rows / self.label_rows if self.label_rows else 0.0
        text = (
            f"leakage: {self.leaking_rows:,} of {self.label_rows:,} label rows ({share:.2%}) hold rows known only "
            f"after their ts: {self.late_arrivals:,} arrived later, {self.at_label_time:,} arrived or happened "
            f"at ts, {self.merged_after:,} merged events from ts on"
        )
        if self.withheld:
            text += (
                f"; {self.withheld:,} rows withheld (they merged events from ts on and their window's "
                "detail has expired)"
            )
        return text


@dataclass(frozen=True)
class Leaks:
    """Per label row, sequence rows of each kind (see `LeakageReport`)."""

    late: np.ndarray
    at_ts: np.ndarray
    merged: np.ndarray
    withheld: np.ndarray


@dataclass
class BackfillResult:
    tenant: str
    as_of: AsOf
    rows: int
    table: str | None
    leakage: LeakageReport = field(default_factory=LeakageReport)


def label_pointers(tenant: Tenant, labels: pa.Table, as_of: AsOf) -> pa.Table:
    """Pointers (the training table's pointer and fragment columns) for label rows carrying
    `user_id`, `_ts`, `lsn_bound` and `open_window`: no fragment, the tenant's length, and the
    event-time range `[EARLIEST, ts)` (event time) or unbounded (arrival)."""
    n = labels.num_rows
    ts = labels["_ts"].cast(TIMESTAMP_US)
    if as_of == "event-time":
        end = pc.subtract(ts, pa.scalar(ONE_MICROSECOND))
    else:
        end = pa.repeat(pa.scalar(LATEST, TIMESTAMP_US), n)
    length = pa.repeat(pa.scalar(tenant.max_length, pa.int32()), n)
    columns = {
        "user_id": labels["user_id"],
        "range_start": pa.repeat(pa.scalar(EARLIEST, TIMESTAMP_US), n),
        "range_end": end,
        "lsn_bound": labels["lsn_bound"],
        "open_window": labels["open_window"],
        "length": length,
        "top_k": length,
        "fragment_start_ts": pa.nulls(n, TIMESTAMP_US),
        "fragment_start_lsn": pa.nulls(n, pa.int64()),
        "fragment_start_partition": pa.nulls(n, pa.int32()),
    }
    empty = pa.array(np.zeros(n + 1, dtype=np.int32))
    for f in training_schema(tenant):
        if f.name.startswith(FRAGMENT):
            columns[f.name] = pa.ListArray.from_arrays(empty, pa.array([], f.type.value_type))
    return pa.table(columns)


@dataclass(frozen=True)
class BackfillBatch:
    sequences: dict[str, pa.Array]  # seq_<model column> list arrays, in label order
    leaks: Leaks


# History columns the leakage checks read besides the sequence's (`gather.latest_event_micros`).
LEAK_COLUMNS = ("lsn", "source_partition", "last_event_ts", "event_count", "window_id")


def backfill_batch(
    config: Config,
    tenant: Tenant,
    as_of: AsOf,
    labels: pa.Table,
    history: pa.Table,
    events: pa.Table | None,
    detail: WindowDetail,
    con=None,
) -> BackfillBatch:
    """The sequences of a batch of label rows from their users' history rows and detail.

    `labels`: `user_id`, `_ts`, and the frontiers: `lsn_bound` and `open_window` as the sequence
    sees them (strict, or inclusive when asked), `arrived_before` and `arrived_by` the frontiers of
    what arrived before and at `_ts`, for the leakage checks. `events`: arrival, the open windows'
    detail events; `detail`: event time, the detail the windows spanning a label's ts are rebuilt from."""
    pointers = label_pointers(tenant, labels, as_of)
    if as_of == "event-time":
        rows = gather_sequences(
            config, tenant, "time", pointers, history, None, cut_to_length=True, extra=LEAK_COLUMNS, exact_until=detail
        )
    else:
        rows = gather_sequences(config, tenant, "lsn", pointers, history, events, con=con, extra=LEAK_COLUMNS)
    sequences = {
        f"{SEQUENCE}{name}": values.cast(pa.list_(tenant.schema.field(name).type))
        for name, values in rows.lists(tenant.model_columns).items()
    }
    return BackfillBatch(sequences, leaks(config, rows, labels))


def leaks(config: Config, rows: SequenceRows, labels: pa.Table) -> Leaks:
    """Per label row (`_ts`, `arrived_before`, `arrived_by`): its sequence's rows that arrived after
    ts, arrived or happened at ts, or merged events from ts on."""
    n = labels.num_rows
    owner = np.repeat(np.arange(n, dtype=np.int64), rows.lengths)
    # Per source row once, then per sequence row by index (labels of one user share rows), or the
    # sequence rows taken first when they are fewer (short sequences of long histories).
    pool, index = rows.rows.select(["event_ts", *LEAK_COLUMNS]), np.asarray(rows.take, np.int64)
    if len(index) < pool.num_rows:
        pool, index = pool.take(pa.array(index)), np.arange(len(index), dtype=np.int64)
    lsn = _int64(pool["lsn"])[index]
    partition = _int64(pool["source_partition"])[index]
    before, column = bound_matrix(labels["arrived_before"], partition)
    by, _ = bound_matrix(labels["arrived_by"], partition)
    ts = pc.cast(labels["_ts"], TIMESTAMP_US).cast(pa.int64()).to_numpy(zero_copy_only=False)[owner]
    first = _int64(pc.cast(pool["event_ts"], TIMESTAMP_US).cast(pa.int64()))[index]
    last = latest_event_micros(pool, config.layout.window_seconds)[index]
    late = lsn > by[owner, column]
    at_ts = ((lsn > before[owner, column]) & ~late) | (first == ts)
    merged = (last >= ts) & (first < ts)

    def per_label(mask: np.ndarray) -> np.ndarray:
        return np.bincount(owner, weights=mask, minlength=n).astype(np.int64)

    withheld = rows.withheld if rows.withheld is not None else np.zeros(n, np.int64)
    return Leaks(per_label(late), per_label(at_ts), per_label(merged), withheld)


def _int64(values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Values as int64 (nulls 0: LSNs and partitions of no row)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    return values.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64, copy=False)


# -- frontiers at a time --------------------------------------------------------------------------


def publication_table(history: Table, window_seconds: int) -> pa.Table:
    """The publications' frontiers as arrival points (`seqlake.tableformat.time_travel.publication_points`),
    one row per (point, source partition), with no landing window. A point is its windows' end, and
    their records all arrived before it: they count as arrived at its last microsecond."""
    points = publication_points(history, window_seconds)
    times = [at - ONE_MICROSECOND for at, frontier in points for _ in frontier]
    return pa.table(
        {
            "source_partition": pa.array([p for _, frontier in points for p in frontier], pa.int32()),
            "arrival_ts": pa.array(times, TIMESTAMP_US),
            "lsn": pa.array([lsn for _, frontier in points for lsn in frontier.values()], pa.int64()),
            "window_id": pa.nulls(len(times), pa.int64()),
        }
    )


class ArrivalFrontiers:
    """F_p(ts) and the open window at ts for many label rows at once: arrival points reduced to
    running maxima per partition once, then one ASOF join per batch of label rows."""

    def __init__(self, con, arrivals_sql: str) -> None:
        """`arrivals_sql`: a query of (source_partition, arrival_ts, lsn, window_id) rows; window_id
        NULL for points that are no landing record (publication frontiers)."""
        self.con = con
        # One read of the points (a lake's whole landing tier), reduced per (partition, time); both
        # tables below derive from it.
        con.execute(
            "CREATE OR REPLACE TEMP TABLE _arrival_points AS SELECT source_partition, "
            "CAST(arrival_ts AS TIMESTAMPTZ) AS arrival_ts, max(lsn) AS lsn, max(window_id) AS window_id "
            f"FROM ({arrivals_sql}) GROUP BY ALL"
        )
        con.execute(
            "CREATE OR REPLACE TABLE _arrival_lsns AS SELECT source_partition, arrival_ts, "
            "max(lsn) OVER (PARTITION BY source_partition ORDER BY arrival_ts) AS lsn FROM _arrival_points"
        )
        con.execute(
            "CREATE OR REPLACE TABLE _arrival_windows AS SELECT arrival_ts, "
            "max(window_id) OVER (ORDER BY arrival_ts) AS window_id FROM "
            "(SELECT arrival_ts, max(window_id) AS window_id FROM _arrival_points "
            "WHERE window_id IS NOT NULL GROUP BY ALL)"
        )
        con.execute("DROP TABLE _arrival_points")

    def before(self, ts: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
        """`at`, of what arrived strictly before each time (times are whole microseconds)."""
        return self.at(pc.subtract(pc.cast(ts, TIMESTAMP_US), pa.scalar(ONE_MICROSECOND)))

    def at(self, ts: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
        """Per time: the frontier map {source partition: LSN} of what arrived at or before it, and
        the open window (-1: none)."""
        con = self.con
        con.register("_label_ts", pa.table({"_i": pa.array(np.arange(len(ts), dtype=np.int64)), "_ts": ts}))
        found = con.execute(
            "WITH l AS (SELECT _i, CAST(_ts AS TIMESTAMPTZ) AS _ts FROM _label_ts), "
            "p AS (SELECT DISTINCT source_partition FROM _arrival_lsns), "
            "f AS (SELECT l._i, a.source_partition, a.lsn FROM (l CROSS JOIN p) AS lp "
            "ASOF JOIN _arrival_lsns AS a ON lp.source_partition = a.source_partition AND lp._ts >= a.arrival_ts "
            "JOIN l ON l._i = lp._i), "
            "m AS (SELECT _i, map(list(source_partition ORDER BY source_partition), "
            "list(lsn ORDER BY source_partition)) AS lsn_bound FROM f GROUP BY _i), "
            "w AS (SELECT l._i, a.window_id FROM l ASOF JOIN _arrival_windows AS a ON l._ts >= a.arrival_ts) "
            "SELECT l._i, m.lsn_bound, coalesce(w.window_id, -1) AS open_window FROM l "
            "LEFT JOIN m USING (_i) LEFT JOIN w USING (_i) ORDER BY l._i"
        ).to_arrow_table()
        # A label row before every arrival point has no frontier: the empty one (nothing visible).
        return as_frontier_column(found["lsn_bound"]), found["open_window"].cast(pa.int64()).combine_chunks()


def lake_arrivals_sql(con, config: Config, history: Table) -> str:
    """The arrival points of a lake: its landing records and its publications' frontiers."""
    con.register("_publication_points", publication_table(history, config.layout.window_seconds))
    parts = ["SELECT source_partition, arrival_ts, lsn, window_id FROM _publication_points"]
    events = landing_paths(config).events
    if is_delta_table(events):
        scan = f"delta_scan({sql_literal(engine_location(events))})"
        parts.append(f"SELECT source_partition, arrival_ts, lsn, window_id FROM {scan}")
    return " UNION ALL ".join(parts)


# -- label tables ----------------------------------------------------------------------------------


def label_source_sql(con, config: Config, labels: str | Path | pa.Table) -> str:
    """A query of the label rows: an Arrow table, a Delta table (a folder with `_delta_log`), Parquet
    or CSV files (by extension, or a folder of Parquet files), else an Iceberg table's name."""
    if isinstance(labels, pa.Table):
        con.register("_label_arrow", labels)
        return "SELECT * FROM _label_arrow"
    text = str(labels)
    path = Path(text)
    if path.is_dir() and is_delta_table(str(path.resolve())):
        return f"SELECT * FROM delta_scan({sql_literal(str(path.resolve()))})"
    if path.suffix.lower() in (".csv", ".tsv") or text.lower().endswith(".csv.gz"):
        return f"SELECT * FROM read_csv({sql_literal(text)}, auto_detect = true)"
    if path.suffix.lower() == ".parquet" or path.is_dir():
        pattern = f"{text.rstrip('/')}/**/*.parquet" if path.is_dir() else text
        return f"SELECT * FROM read_parquet({sql_literal(pattern)})"
    if path.exists():
        raise SchemaError(f"{text}: a label table is Iceberg (a table name), Delta (a folder), Parquet or CSV")
    table = load_existing_table(config, text)
    if table.current_snapshot() is None:
        raise SchemaError(f"label table {text} is empty")
    return f"SELECT * FROM iceberg_scan({sql_literal(table.metadata_location)})"


def load_labels(con, config: Config, labels: str | Path | pa.Table, ts_column: str = "ts") -> list[str]:
    """Label rows into the table `_labels` with `_row`, `_ts` (UTC) and `_bucket`; returns the
    label's own column names (kept as they are, `user_id` as int64)."""
    source = label_source_sql(con, config, labels)
    names = [d[0] for d in con.execute(f"SELECT * FROM ({source}) LIMIT 0").description]
    missing = [c for c in ("user_id", ts_column) if c not in names]
    if missing:
        raise SchemaError(
            f"label rows need columns user_id and {ts_column}; missing {', '.join(missing)} (found {names})"
        )
    clash = [c for c in names if c.startswith(SEQUENCE) or c in INTERNAL]
    if clash:
        raise SchemaError(f"label columns {clash} clash with the backfill's output columns")
    try:
        con.execute(
            f"CREATE OR REPLACE TABLE _labels AS SELECT * REPLACE (CAST(user_id AS BIGINT) AS user_id), "
            f'CAST("{ts_column}" AS TIMESTAMPTZ) AS _ts, row_number() OVER () AS _row FROM ({source})'
        )
    except Exception as error:  # DuckDB's conversion errors are one line: keep them
        raise SchemaError(f"label rows: user_id must be an integer and {ts_column} a timestamp ({error})") from error
    (nulls,) = con.execute("SELECT count(*) FROM _labels WHERE user_id IS NULL OR _ts IS NULL").fetchone()
    if nulls:
        raise SchemaError(f"{nulls} label rows have no user_id or {ts_column}")
    rows = con.execute("SELECT _row, user_id FROM _labels").to_arrow_table()
    buckets = pa.table(
        {"_row": rows["_row"], "_bucket": pa.array(bucket_of(rows["user_id"], config.layout.bucket_count))}
    )
    con.register("_label_buckets_arrow", buckets)
    con.execute("CREATE OR REPLACE TABLE _label_buckets AS SELECT * FROM _label_buckets_arrow")
    con.unregister("_label_buckets_arrow")
    return names


class Backfill:
    """A running backfill: `batches()` (or iterating it) streams the label rows with their sequence
    columns; as a context manager it closes itself."""

    def __init__(
        self,
        config: Config,
        labels: str | Path | pa.Table,
        tenant: Tenant,
        as_of: AsOf = "event-time",
        batch_rows: int = 2048,
        ts_column: str = "ts",
        point: ReadPoint | None = None,
        inclusive: bool = False,
    ) -> None:
        """`inclusive`: arrival semantics take in what arrived at `ts` too (labels that are not
        events themselves); by default only what arrived before it."""
        if as_of not in AS_OF:
            raise SchemaError(f"as_of must be one of {', '.join(AS_OF)}, not {as_of!r}")
        if inclusive and as_of != "arrival":
            raise SchemaError("inclusive applies to arrival semantics (event time is always before ts)")
        from seqlake.pipelines.compaction.plan import history_tables

        self.config, self.tenant, self.as_of, self.batch_rows = config, tenant, as_of, batch_rows
        self.inclusive = inclusive
        self.history, self.detail = history_tables(config)
        # Before the first read: what the output's commit checks (a run again keeps its first one).
        self.point = point or read_point(self.history)
        self.con = connect()
        self.con.execute("SET TimeZone = 'UTC'")
        self.columns = load_labels(self.con, config, labels, ts_column)
        self.frontiers = ArrivalFrontiers(self.con, lake_arrivals_sql(self.con, config, self.history))
        self.reconstruction = Reconstruction(config, tenant, None, self.history, self.detail)  # type: ignore[arg-type]
        self.leakage = LeakageReport()

    def schema(self, labels: pa.Schema) -> pa.Schema:
        return pa.schema(list(labels) + list_schema(self.tenant, SEQUENCE))

    def batches(self) -> Iterator[pa.Table]:
        """Label rows bucket by bucket (history's buckets), users together, in batches: the order that
        reads each history file once, not the labels' own (each row keeps its label columns)."""
        reader = (
            self.con.cursor()
            .execute(
                "SELECT l.* EXCLUDE (_row), b._bucket FROM _labels AS l JOIN _label_buckets AS b USING (_row) "
                "ORDER BY b._bucket, l.user_id, l._ts, l._row"
            )
            .to_arrow_reader(self.batch_rows)
        )
        for batch in reader:
            if batch.num_rows:
                yield self.rebuild(pa.Table.from_batches([batch]))

    def rebuild(self, labels: pa.Table) -> pa.Table:
        before, before_window = self.frontiers.before(labels["_ts"])
        by, by_window = self.frontiers.at(labels["_ts"])
        bounds, windows = (by, by_window) if self.inclusive else (before, before_window)
        keys = pa.table(
            {
                "user_id": labels["user_id"],
                "_ts": labels["_ts"],
                "lsn_bound": bounds,
                "open_window": windows,
                "arrived_before": before,
                "arrived_by": by,
            }
        )
        pointers = label_pointers(self.tenant, keys, self.as_of)
        reconstruction = self.reconstruction
        history = reconstruction.history_rows(pointers, LEAK_COLUMNS)
        events = reconstruction._open_window_events(pointers) if self.as_of == "arrival" else None
        detail = WindowDetail(reconstruction.detail_windows(), reconstruction.window_events)
        found = backfill_batch(self.config, self.tenant, self.as_of, keys, history, events, detail)
        self.leakage.add(found.leaks)
        out = labels.select(self.columns)
        for name, values in found.sequences.items():
            out = out.append_column(name, values)
        return out

    def __iter__(self) -> Iterator[pa.Table]:
        return self.batches()

    def __enter__(self) -> Backfill:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self.con.close()


def write_backfill(
    config: Config,
    labels: str | Path | pa.Table,
    tenant: Tenant,
    as_of: AsOf = "event-time",
    out: str | None = None,
    batch_rows: int = 2048,
    ts_column: str = "ts",
    inclusive: bool = False,
) -> BackfillResult:
    """Backfill `labels` into the Iceberg table `out` (default `backfill_<tenant>`, bucketed like
    history), replacing it in one commit. Rows of users a forget removed after the job's read are
    left out and the commit is fenced on that check (`seqlake.tableformat.forgets`); a forget that reaches
    the table before the commit makes the backfill run again."""
    name = out or f"backfill_{tenant.name}"
    point = None  # the first attempt's: a job that began before a forget leaves its users out, run again or not
    for _ in range(ATTEMPTS):
        job = Backfill(config, labels, tenant, as_of, batch_rows, ts_column, point, inclusive)
        point = job.point
        try:
            rows = _write_once(config, job, name)
        except CommitFailedException:
            continue
        finally:
            job.close()
        return BackfillResult(tenant.name, as_of, rows, name if rows else None, job.leakage)
    raise ForgetCommitted(f"{name}: forgets kept committing during the backfill; run it again")


def _write_once(config: Config, job: Backfill, name: str) -> int:
    rows = 0
    transaction, missed = None, pa.array([], pa.int64())
    for batch in job.batches():
        if transaction is None:
            catalog = open_catalog(config)
            identifier = table_identifier(config, name)
            if catalog.table_exists(identifier):
                catalog.purge_table(identifier)
            # A new table starts with history's forget record (forgets finished since the read count).
            transaction, missed = fenced_transaction(
                create_bucketed_table(config, name, batch.schema, catalog), job.point
            )
        batch = drop_users(batch, missed)
        transaction.append(batch.cast(_iceberg_schema(transaction, batch.schema)))
        rows += batch.num_rows
    if transaction is not None:
        kill_point("backfill_written")
        transaction.commit_transaction()
    return rows


def _iceberg_schema(transaction, schema: pa.Schema) -> pa.Schema:
    from pyiceberg.io.pyarrow import schema_to_pyarrow

    table_schema = schema_to_pyarrow(transaction.table_metadata.schema(), include_field_ids=False)
    return pa.schema([table_schema.field(f.name) for f in schema])
