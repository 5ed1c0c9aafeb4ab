"""Forget users: remove every stored row of some users, one commit per table that holds them.

- The landing tier (Delta, on Spark): the users' events, and quarantined records whose payload names
  one of them as far as one can be read from it (`seqlake.payload.named_user_ids`: a numeric or
  mangled id, a truncated payload), never a cast that fails on a malformed id.
- The history table: each file of a live run that holds one of the users is rewritten without their
  rows by the run writer (same run, same bucket: sorted, footers and checksums as compaction writes
  them), all in one commit that also updates the run registry; the runs keep their windows.
- Every other Iceberg table of the namespace with a `user_id` column (detail, compaction quarantine,
  each tenant's training, fat-row and samples tables, the samples quarantine): one copy-on-write delete.

The raw source table (a message log's stand-in, raw payloads, no `user_id` column) is not touched: a
real log forgets by its own retention. Each step is one commit and a no-op when the table no longer
holds the users, so a killed run, run again, ends where an unkilled one ends. Afterwards every table
is scanned again: a row left is an error.

The bytes stay on disk while old snapshots reference the replaced files: `seqlake maintain` removes
them once it expires those snapshots (`maintenance.snapshot_retention_hours`) and removes the orphan
files; `vacuum` removes the landing tier's old files after `maintenance.landing_retention_hours`.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Sequence
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.expressions import In
from pyiceberg.table import Table

from pipelines import forget_audit
from pipelines.compaction import COMMIT_ATTEMPTS, HISTORY, _crash, delete_files, history_tables
from pipelines.faults import kill_point
from pipelines.landing import LandingPaths
from pipelines.maintenance import StepReport, user_tables
from pipelines.publication_check import is_delta_table
from seqlake.config import Config
from seqlake.errors import RunsChanged, SeqlakeError, UsersRemain
from seqlake.payload import DIGIT_RUN, USER_ID_VALUE
from seqlake.progress import Progress
from tableformat.evolution import known_field_ids, projection
from tableformat.registry import commit_file_rewrite, history_file_uri, live_runs, run_id_of_path
from tableformat.run_writer import write_run
from tableformat.schema import history_arrow_schema, history_read_schema
from tableformat.writer import open_output

log = logging.getLogger(__name__)

FORGET_STEP = "forget"
READ_ROWS = 65_536


def _users(users: Sequence[int]) -> list[int]:
    chosen = sorted({int(u) for u in users})
    if not chosen:
        raise SeqlakeError("forget needs at least one user id")
    return chosen


# -- history -----------------------------------------------------------------------------------------


def _open_parquet(uri: str) -> pq.ParquetFile:
    fs, path = open_output(uri)
    return pq.ParquetFile(fs.open_input_file(path))


def _rows_of(parquet: pq.ParquetFile, users: pa.Array) -> int:
    ids = parquet.read(columns=["user_id"])["user_id"]
    return pc.sum(pc.is_in(ids, value_set=users)).as_py() or 0


def _kept_batches(
    parquet: pq.ParquetFile, users: pa.Array, schema: pa.Schema, history: Table
) -> Iterator[pa.RecordBatch]:
    """The file's rows without the users', in their stored order, with the table's current columns
    (a column the file predates reads as null, a widened one cast: `tableformat.evolution`)."""
    target, loose = history_read_schema(history)
    found = projection(parquet.schema_arrow, target, loose, known_field_ids(history))
    columns = found.file_columns(schema.names)
    for batch in parquet.iter_batches(batch_size=READ_ROWS, columns=columns):
        kept = pa.Table.from_batches([batch.filter(pc.invert(pc.is_in(batch.column("user_id"), value_set=users)))])
        rows = found.apply(kept, schema.names)
        arrays = [rows.column(f.name).combine_chunks().cast(f.type) for f in schema]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


def forget_history(history: Table, config: Config, users: Sequence[int]) -> StepReport:
    """Rewrite every live history file that holds one of the users without their rows, in one commit."""
    report = StepReport(FORGET_STEP, history.name()[-1], unit="rows")
    wanted = pa.array(_users(users), pa.int64())
    schema = history_arrow_schema(config, history.schema())
    for _ in range(COMMIT_ATTEMPTS):
        history.refresh()
        runs = live_runs(history)
        # Bucket partitions and the manifests' user_id bounds prune to the candidate files.
        candidates = [task.file for task in history.scan(row_filter=In("user_id", wanted.to_pylist())).plan_files()]
        replaced, written, removed = [], [], 0
        attempt = f"f{uuid.uuid4().hex[:11]}"
        try:
            for data_file in candidates:
                with _open_parquet(data_file.file_path) as parquet:
                    found = _rows_of(parquet, wanted)
                    if not found:
                        continue
                    run_id = run_id_of_path(data_file.file_path)
                    replaced.append(data_file)
                    removed += found
                    written += write_run(
                        _kept_batches(parquet, wanted, schema, history),
                        file_uri=partial(history_file_uri, history.location(), run_id, attempt=attempt),
                        schema=schema,
                        run_id=run_id,
                        bucket_count=config.layout.bucket_count,
                        group_order=list(config.feature_groups),
                    )
            if not replaced:
                report.notes.append("no row left to remove")
                return report
            _crash("forget_written", None)
            commit_file_rewrite(
                history, runs, replaced, written, snapshot_properties={"seqlake.operation": "forget-users"}
            )
        except RunsChanged:
            log.info("forget: %s changed while rewriting; planning again", history.name()[-1])
            delete_files([item.uri for item in written])  # a publication or merge came first: plan again
            continue
        except BaseException:
            delete_files([item.uri for item in written])
            raise
        report.removed = removed
        report.bytes = sum(f.file_size_in_bytes for f in replaced)
        report.notes.append(f"{len(replaced)} files rewritten as {len(written)}")
        return report
    raise RunsChanged(f"{history.name()[-1]}: the runs kept changing while forgetting users; run forget again")


# -- other Iceberg tables ----------------------------------------------------------------------------


def tables_with_users(config: Config) -> list[Table]:
    """Every table of the namespace (besides history) with a `user_id` column, by name."""
    return user_tables(config, besides=(HISTORY,))


def user_rows(table: Table, users: Sequence[int]) -> int:
    """Rows of the users in the table's current snapshot."""
    if table.refresh().current_snapshot() is None:
        return 0
    scan = table.scan(row_filter=In("user_id", list(users)), selected_fields=("user_id",))
    return sum(batch.num_rows for batch in scan.to_arrow_batch_reader())


def forget_in_table(table: Table, users: Sequence[int]) -> StepReport:
    """Delete the users' rows (copy-on-write: files holding them are rewritten), in one commit."""
    report = StepReport(FORGET_STEP, table.name()[-1], unit="rows")
    chosen = _users(users)
    found = user_rows(table, chosen)
    if found:
        before = {t.file.file_path: t.file.file_size_in_bytes for t in table.scan().plan_files()}
        table.delete(In("user_id", chosen), snapshot_properties={"seqlake.operation": "forget-users"})
        after = {t.file.file_path for t in table.refresh().scan().plan_files()}
        report.bytes = sum(size for path, size in before.items() if path not in after)
    report.removed = found
    return report


# -- landing (Delta) ---------------------------------------------------------------------------------


def names_users(users: Sequence[int]):
    """A Spark condition on a quarantined record: its raw payload names one of the users, as
    `seqlake.payload.named_user_ids` reads it (the same two regular expressions, and try-casts that
    give null, never an error, for a run of digits beyond a BIGINT)."""
    from pyspark.sql import functions as F

    values = F.regexp_extract_all(F.col("payload"), F.lit(USER_ID_VALUE), F.lit(1))
    digits = F.flatten(F.transform(values, lambda value: F.regexp_extract_all(value, F.lit(DIGIT_RUN), F.lit(0))))
    return F.exists(digits, lambda run: run.try_cast("bigint").isin(list(users)))


def _landing_conditions(paths: LandingPaths, users: Sequence[int]) -> dict:
    """Each landing table's Spark condition for the users' rows: events by id, quarantine by payload."""
    from pyspark.sql import functions as F

    return {paths.events: F.col("user_id").isin(list(users)), paths.quarantine: names_users(users)}


def forget_landing(spark, paths: LandingPaths, users: Sequence[int]) -> list[StepReport]:
    """Delta DELETE of the users' landing events and of quarantined records naming them; a table
    without their rows gets no commit."""
    from delta.tables import DeltaTable

    chosen = _users(users)
    reports = []
    for uri, condition in _landing_conditions(paths, chosen).items():
        report = StepReport(FORGET_STEP, f"landing/{uri.rstrip('/').rsplit('/', 1)[-1]}", unit="rows")
        reports.append(report)
        if not is_delta_table(uri):
            report.notes.append("no table")
            continue
        report.removed = spark.read.format("delta").load(uri).where(condition).count()
        if report.removed:
            DeltaTable.forPath(spark, uri).delete(condition)
    return reports


def landing_rows(spark, paths: LandingPaths, users: Sequence[int]) -> int:
    """Rows of the users in the landing tier: their events, and quarantined records naming them."""
    chosen = _users(users)
    return sum(
        spark.read.format("delta").load(uri).where(condition).count()
        for uri, condition in _landing_conditions(paths, chosen).items()
        if is_delta_table(uri)
    )


# -- all of it ---------------------------------------------------------------------------------------


def forget_users(
    config: Config,
    users: Sequence[int],
    *,
    spark=None,
    paths: LandingPaths | None = None,
    progress: Progress | None = None,
    requested_by: str | None = None,
) -> list[StepReport]:
    """Remove the users from the landing tier (with a Spark session), the history table and every
    other table holding a `user_id`; then check that none of their rows is left in any of them.
    `progress` counts the tables done and the rows removed. The request is audited
    (`pipelines.forget_audit`): who, which users, when, the rows each table held of them; the last
    report says which request it was.

    Upstream first: once the landing tier no longer holds their events, no compaction running
    meanwhile can publish them again. Raises UsersRemain if a table still holds a row of theirs."""
    chosen = _users(users)
    history, _ = history_tables(config)
    held = {table.name()[-1]: user_rows(table, chosen) for table in [history, *tables_with_users(config)]}
    if spark is not None and paths is not None:
        held["landing"] = landing_rows(spark, paths, chosen)
    request = forget_audit.begin(config, chosen, {name: rows for name, rows in held.items() if rows}, requested_by)
    kill_point("forget_audited")
    reports: list[StepReport] = []
    others = tables_with_users(config)
    landing = spark is not None and paths is not None
    if progress is not None:
        progress.set_total(1 + len(others) + (2 if landing else 0))  # landing: events and quarantine

    def done(report: StepReport) -> None:
        reports.append(report)
        if progress is not None:
            progress.add(rows=report.removed, steps=1, note=report.target)
        _crash("forget_committed", None)

    if landing:
        assert paths is not None  # landing says so
        for report in forget_landing(spark, paths, chosen):
            done(report)
    done(forget_history(history, config, chosen))
    for table in others:
        done(forget_in_table(table, chosen))
    left = {table.name()[-1]: user_rows(table, chosen) for table in [history, *tables_with_users(config)]}
    if spark is not None and paths is not None:
        left["landing"] = landing_rows(spark, paths, chosen)
    remaining = {name: rows for name, rows in left.items() if rows}
    if remaining:
        raise UsersRemain(f"rows of the forgotten users remain: {remaining}")
    forget_audit.finish(config, request)
    audit = StepReport(FORGET_STEP, forget_audit.AUDIT, unit="rows")
    resumed = ", resumed after a killed run" if request.resumed else ""
    audit.notes.append(
        f"request {request.forget_id} by {request.requested_by}{resumed}: "
        f"{sum(request.rows.values()):,} rows of {len(chosen)} user(s) recorded as removed"
    )
    return [*reports, audit]
