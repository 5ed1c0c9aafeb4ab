"""Backfills: a tenant's sequence for every row of any labelled table, point-in-time correct.

A label row is `(user_id, ts, any other columns)`; each gets the tenant's sequence (its feature
groups and columns, the newest `max_length` rows, oldest first) as it stood at `ts`:

- event time (`as_of="event-time"`): the published history rows whose event time is strictly
  before `ts` (`event_ts < ts`: a label is usually the outcome of the interaction at `ts`, which
  must not be its own input). What a replay by event time gives, late arrivals included.
- arrival (`as_of="arrival"`): only what had arrived by `ts`. Per source partition p, the frontier
  F_p(ts) is the highest LSN of p that had arrived by `ts`: the largest of the LSNs of p's landing
  records with `arrival_ts <= ts`, and of the frontiers recorded by publications once every window
  published up to them had ended by `ts` (a window's records all arrive before its end). LSNs are
  arrival order within a partition, so "LSN <= F_p(ts)" is "arrived by ts" (publication points
  alone are lower bounds: without the landing records the rule is conservative). The sequence is then
  what a capture at `ts` would have read: history rows with `lsn <= F_p(ts)` outside the window
  open at `ts` (the newest window any landing record arrived in by `ts`), that window rebuilt
  from the detail table's events up to the frontiers; no event-time bound. It equals
  `seqlake samples` for a captured request at its request time.

The leakage report counts, under event-time semantics, the label rows whose sequence holds rows
that arrived after `ts` (a row with `lsn > F_p(ts)`: at least one of its events arrived later),
and how many such rows.

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
from seqlake.pipelines.training.rebuild.gather import SequenceRows, gather_sequences
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
    """Under event-time semantics: label rows whose sequence holds rows that arrived after their ts."""

    label_rows: int = 0
    leaking_rows: int = 0  # label rows with at least one late sequence row
    leaked_events: int = 0  # late sequence rows over all label rows

    def add(self, leaked: np.ndarray) -> None:
        self.label_rows += len(leaked)
        self.leaking_rows += int(np.count_nonzero(leaked))
        self.leaked_events += int(leaked.sum())

    def summary(self) -> str:
        share = self.leaking_rows / self.label_rows if self.label_rows else 0.0
        return (
            f"leakage under event-time semantics: {self.leaking_rows:,} of {self.label_rows:,} label rows "
            f"({share:.2%}) would receive {self.leaked_events:,} sequence rows that arrived after their ts"
        )


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
    leaked: np.ndarray  # per label row: event-time sequence rows that arrived after ts


def backfill_batch(
    config: Config,
    tenant: Tenant,
    as_of: AsOf,
    labels: pa.Table,
    history: pa.Table,
    events: pa.Table | None,
    con=None,
) -> BackfillBatch:
    """The sequences of a batch of label rows (`user_id`, `_ts`, `lsn_bound`, `open_window`) from
    their users' history rows and, for arrival semantics, the open windows' detail events."""
    pointers = label_pointers(tenant, labels, "event-time")
    rows = gather_sequences(
        config, tenant, "time", pointers, history, None, cut_to_length=True, extra=("lsn", "source_partition")
    )
    leaked = _leaked(rows, pointers)
    if as_of == "arrival":
        pointers = label_pointers(tenant, labels, "arrival")
        rows = gather_sequences(config, tenant, "lsn", pointers, history, events, con=con)
    sequences = {
        f"{SEQUENCE}{name}": values.cast(pa.list_(tenant.schema.field(name).type))
        for name, values in rows.lists(tenant.model_columns).items()
    }
    return BackfillBatch(sequences, leaked)


def _leaked(rows: SequenceRows, pointers: pa.Table) -> np.ndarray:
    """Per label: sequence rows above their partition's frontier (a partition with no frontier had
    delivered nothing by ts)."""
    owner = np.repeat(np.arange(pointers.num_rows, dtype=np.int64), rows.lengths)
    lsn = rows.rows["lsn"].combine_chunks().fill_null(0).to_numpy(zero_copy_only=False)[rows.take]
    partition = rows.rows["source_partition"].combine_chunks().fill_null(0).to_numpy(zero_copy_only=False)
    matrix, column = bound_matrix(pointers["lsn_bound"], partition[rows.take].astype(np.int64))
    late = lsn > matrix[owner, column]
    return np.bincount(owner, weights=late, minlength=pointers.num_rows).astype(np.int64)


# -- frontiers at a time --------------------------------------------------------------------------


def publication_table(history: Table, window_seconds: int) -> pa.Table:
    """The publications' frontiers as arrival points (`seqlake.tableformat.time_travel.publication_points`),
    one row per (point, source partition), with no landing window."""
    points = publication_points(history, window_seconds)
    times = [at for at, frontier in points for _ in frontier]
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

    def at(self, ts: pa.Array | pa.ChunkedArray) -> tuple[pa.Array, pa.Array]:
        """Per time: the frontier map {source partition: LSN} and the open window (-1: none)."""
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
    ) -> None:
        if as_of not in AS_OF:
            raise SchemaError(f"as_of must be one of {', '.join(AS_OF)}, not {as_of!r}")
        from seqlake.pipelines.compaction.plan import history_tables

        self.config, self.tenant, self.as_of, self.batch_rows = config, tenant, as_of, batch_rows
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
        bounds, windows = self.frontiers.at(labels["_ts"])
        keys = pa.table(
            {"user_id": labels["user_id"], "_ts": labels["_ts"], "lsn_bound": bounds, "open_window": windows}
        )
        pointers = label_pointers(self.tenant, keys, self.as_of)
        reconstruction = self.reconstruction
        history = reconstruction.history_rows(pointers)
        events = reconstruction._open_window_events(pointers) if self.as_of == "arrival" else None
        found = backfill_batch(self.config, self.tenant, self.as_of, keys, history, events)
        self.leakage.add(found.leaked)
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
) -> BackfillResult:
    """Backfill `labels` into the Iceberg table `out` (default `backfill_<tenant>`, bucketed like
    history), replacing it in one commit. Rows of users a forget removed after the job's read are
    left out and the commit is fenced on that check (`seqlake.tableformat.forgets`); a forget that reaches
    the table before the commit makes the backfill run again."""
    name = out or f"backfill_{tenant.name}"
    point = None  # the first attempt's: a job that began before a forget leaves its users out, run again or not
    for _ in range(ATTEMPTS):
        job = Backfill(config, labels, tenant, as_of, batch_rows, ts_column, point)
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
