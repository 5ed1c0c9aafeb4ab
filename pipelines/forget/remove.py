"""Forget users: remove every stored row of some users, one commit per table, in this order:

- The landing tier (Delta, on Spark or in-process: `seqlake.pipelines.forget.landing`): the users'
  events, and quarantined records whose payload names one of them as far as one can be read from it
  (`seqlake.core.payload.named_user_ids`: a numeric or mangled id, a truncated payload), never a cast
  that fails on a malformed id.
- Every other Iceberg table of the namespace with a `user_id` column (detail, compaction quarantine,
  each tenant's training, fat-row and samples tables, the samples quarantine): one copy-on-write delete.
- The history table, last: each file of a live run that holds one of the users is rewritten without
  their rows by the run writer (same run, same bucket: sorted, footers and checksums as compaction
  writes them), all in one commit that also updates the run registry; the runs keep their windows.

The raw source table (a message log's stand-in, raw payloads, no `user_id` column) is not rewritten
here: the request's tombstone (`seqlake.pipelines.ingest.tombstones`, recorded before any delete)
keeps every later ingest from landing their records at or below its frontier, and `maintain` rewrites
the raw files that hold them.

Each Iceberg table's commit also records the request as an epoch of the table's forget record
(`seqlake.tableformat.forgets`; history last, so an epoch in history's record means every table is clean): a
job that read before the forget and commits after it drops the users' rows or plans again, so none
comes back. A table without their rows gets that record alone. Each step is one commit and a no-op
when the table records the request and holds none of the users, so a killed run, run again, ends where
an unkilled one ends. Afterwards every table is scanned again; one that still holds a row of theirs
(a job that committed meanwhile) or lacks the record (a table created meanwhile) gets another pass,
and one left after the passes is an error.

The bytes stay on disk while old snapshots reference the replaced files: `seqlake maintain` expires
every snapshot from before the forget (`maintenance.snapshot_retention_hours`; `keep_snapshots` does
not keep them) and removes the orphan files; `vacuum` removes the landing tier's old files after
`maintenance.landing_retention_hours`.
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Iterator, Sequence
from contextlib import suppress
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException, NoSuchTableError
from pyiceberg.expressions import In
from pyiceberg.table import Table

from seqlake.core.config import Config
from seqlake.core.errors import RunsChanged, SeqlakeError, UsersRemain
from seqlake.core.progress import Progress
from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.compaction.plan import COMMIT_ATTEMPTS, delete_files, history_tables
from seqlake.pipelines.faults import kill_point
from seqlake.pipelines.forget import audit as forget_audit
from seqlake.pipelines.forget.landing import FORGET_STEP, forget_landing, landing_rows
from seqlake.pipelines.ingest import tombstones as forget_tombstones
from seqlake.pipelines.landing.tables import LandingPaths, LandingTier, is_delta_table
from seqlake.pipelines.maintenance.steps import StepReport, user_tables
from seqlake.pipelines.tables import HISTORY
from seqlake.tableformat.deletes import nothing_matched_is_fine
from seqlake.tableformat.evolution import known_field_ids, projection
from seqlake.tableformat.forgets import Epoch, Forgets, forgets_of, last_sequence_number, record_forget
from seqlake.tableformat.io import engine_location, resolve_uri
from seqlake.tableformat.registry import (
    commit_file_rewrite,
    history_file_uri,
    live_runs,
    published_frontier,
    run_id_of_path,
)
from seqlake.tableformat.run_writer import write_run
from seqlake.tableformat.schema import history_arrow_schema, history_read_schema

log = logging.getLogger(__name__)

READ_ROWS = 65_536


def _users(users: Sequence[int]) -> list[int]:
    chosen = sorted({int(u) for u in users})
    if not chosen:
        raise SeqlakeError("forget needs at least one user id")
    return chosen


# -- history -----------------------------------------------------------------------------------------


def _open_parquet(uri: str) -> pq.ParquetFile:
    fs, path = resolve_uri(uri)
    return pq.ParquetFile(fs.open_input_file(path))


def _rows_of(parquet: pq.ParquetFile, users: pa.Array) -> int:
    ids = parquet.read(columns=["user_id"])["user_id"]
    return pc.sum(pc.is_in(ids, value_set=users)).as_py() or 0


def _kept_batches(
    parquet: pq.ParquetFile, users: pa.Array, schema: pa.Schema, history: Table
) -> Iterator[pa.RecordBatch]:
    """The file's rows without the users', in their stored order, with the table's current columns
    (a column the file predates reads as null, a widened one cast: `seqlake.tableformat.evolution`)."""
    target, loose = history_read_schema(history)
    found = projection(parquet.schema_arrow, target, loose, known_field_ids(history))
    columns = found.file_columns(schema.names)
    for batch in parquet.iter_batches(batch_size=READ_ROWS, columns=columns):
        kept = pa.Table.from_batches([batch.filter(pc.invert(pc.is_in(batch.column("user_id"), value_set=users)))])
        rows = found.apply(kept, schema.names)
        arrays = [rows.column(f.name).combine_chunks().cast(f.type) for f in schema]
        yield pa.RecordBatch.from_arrays(arrays, schema=schema)


@dataclass(frozen=True)
class Fence:
    """What a forget records in each table: its epoch, and what folds older epochs away."""

    epoch: Epoch
    finished: dict[str, datetime]  # finished requests -> when (`forget_audit.finished`)
    now: datetime  # one time for every table of the run: each folds the same epochs

    def record(self, table: Table) -> tuple[Forgets, Forgets]:
        """The table's forget record, and what it becomes with this request."""
        current = forgets_of(table.metadata)
        return current, current.recording(self.epoch, last_sequence_number(table), self.finished, self.now)


def forget_history(history: Table, config: Config, users: Sequence[int], fence: Fence) -> StepReport:
    """Rewrite every live history file that holds one of the users without their rows, in one commit
    that also records the request in history's forget record (that record alone when no file holds
    them)."""
    report = StepReport(FORGET_STEP, history.name()[-1], unit="rows")
    wanted = pa.array(_users(users), pa.int64())
    schema = history_arrow_schema(config, history.schema())
    for _ in range(COMMIT_ATTEMPTS):
        history.refresh()
        runs = live_runs(history)
        current, updated = fence.record(history)
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
                if updated != current:
                    _commit_record(history, updated)
                report.notes.append("no row left to remove")
                return report
            kill_point("forget_written")
            commit_file_rewrite(
                history,
                runs,
                replaced,
                written,
                snapshot_properties={"seqlake.operation": "forget-users"},
                forgets=updated,
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


def forget_in_table(table: Table, users: Sequence[int], fence: Fence) -> StepReport:
    """Delete the users' rows (copy-on-write: files holding them are rewritten) and record the request
    in the table's forget record, in one commit (the record alone when the table holds none of them;
    no commit when it records the request already and holds none). A commit that loses a race, or
    after which a row of theirs is found (a job committed in between), is planned again."""
    report = StepReport(FORGET_STEP, table.name()[-1], unit="rows")
    chosen = _users(users)
    for _ in range(COMMIT_ATTEMPTS):
        found = user_rows(table, chosen)  # refreshes the table
        current, updated = fence.record(table)
        if not found and updated == current:
            return report
        before = {t.file.file_path: t.file.file_size_in_bytes for t in table.scan().plan_files()} if found else {}
        try:
            with table.transaction() as transaction:
                if found:
                    with nothing_matched_is_fine():  # a race can leave nothing to match: checked below
                        transaction.delete(
                            In("user_id", chosen), snapshot_properties={"seqlake.operation": "forget-users"}
                        )
                staged = transaction.table_metadata.current_snapshot_id != table.metadata.current_snapshot_id
                record_forget(transaction, updated, snapshot_staged=staged)
        except CommitFailedException:
            log.info("forget: %s changed while deleting; planning again", table.name()[-1])
            continue
        after = {t.file.file_path for t in table.refresh().scan().plan_files()}
        report.bytes += sum(size for path, size in before.items() if path not in after)
        report.removed += found
    if user_rows(table, chosen):
        raise RunsChanged(f"{table.name()[-1]}: the table kept changing while forgetting users; run forget again")
    return report


def _commit_record(table: Table, updated: Forgets) -> None:
    """A forget's commit of the record alone (the table holds none of its users)."""
    try:
        with table.transaction() as transaction:
            record_forget(transaction, updated, snapshot_staged=False)
    except CommitFailedException as error:
        raise RunsChanged(f"{'.'.join(table.name())} changed while recording a forget: {error}") from error


# -- all of it ---------------------------------------------------------------------------------------


def warehouse_marks(history: Table, paths: LandingPaths | None, source: dict[int, int] | None = None) -> str:
    """What the warehouse holds now, as the audit keeps it for fsck (JSON): the highest LSN per source
    partition and the newest arrival time of the landing tier (events and quarantine) and of history's
    frontier, and the highest LSNs of the raw source tables (`source`: records not ingested yet). A row
    of a forgotten user at or below them predates the forget."""
    lsn = {int(p): int(v) for p, v in published_frontier(history).items()}
    for partition, top in (source or {}).items():
        lsn[int(partition)] = max(lsn.get(int(partition), -1), int(top))
    arrival = None
    if paths is not None:
        with lake_cursor() as con:
            for uri in (paths.events, paths.quarantine):
                if not is_delta_table(uri):
                    continue
                rows = con.execute(
                    "SELECT source_partition, max(lsn), max(arrival_ts) FROM delta_scan(?) GROUP BY ALL",
                    [engine_location(uri)],
                ).fetchall()
                for partition, top, newest in rows:
                    lsn[int(partition)] = max(lsn.get(int(partition), -1), int(top))
                    if newest is not None:
                        newest = newest.astimezone(UTC)
                        arrival = newest if arrival is None else max(arrival, newest)
    document = {"lsn": {str(p): v for p, v in sorted(lsn.items())}, "arrival": arrival.isoformat() if arrival else None}
    return json.dumps(document)


PASSES = 3  # passes over the tables: another starts when a table gained a row of theirs meanwhile


def forget_users(
    config: Config,
    users: Sequence[int],
    *,
    landing: LandingTier | None = None,
    progress: Progress | None = None,
    requested_by: str | None = None,
) -> list[StepReport]:
    """Remove the users from the landing tier (when given, on its engine), every table holding a
    `user_id` and the history table (last); then check that none of their rows is left in any of
    them and that every table records the request. `progress` counts the tables done and the rows
    removed. The request is audited (`seqlake.pipelines.forget.audit`): who, which users, when, the rows each
    table held of them; the last report says which request it was.

    Upstream first: once the landing tier no longer holds their events, no compaction running
    meanwhile can publish them again; history last: once it records the request, every table is
    clean and every job reading from then on has seen it. Raises UsersRemain if a table still holds
    a row of theirs after the passes."""
    chosen = _users(users)
    history, _ = history_tables(config)
    held = {table.name()[-1]: user_rows(table, chosen) for table in [history, *tables_with_users(config)]}
    if landing is not None:
        held["landing"] = landing_rows(landing, chosen)
    paths = landing.paths if landing is not None else None
    source = forget_tombstones.source_frontier(config)
    marks = warehouse_marks(history, paths if paths is not None and is_delta_table(paths.events) else None, source)
    held_rows = {name: rows for name, rows in held.items() if rows}
    request = forget_audit.begin(config, chosen, held_rows, requested_by, marks)
    # The tombstone before any delete: an ingest that validates from now on drops their records at or
    # below the frontier (the marks a resumed request recorded), pending or replayed.
    frontier = {int(p): int(v) for p, v in json.loads(request.marks or marks)["lsn"].items()}
    forget_tombstones.record(config, request.forget_id, chosen, frontier)
    kill_point("forget_audited")
    now = datetime.now(UTC)
    epoch = Epoch(request.forget_id, tuple(chosen), now.isoformat(), hashes=request.hashes)
    fence = Fence(epoch, forget_audit.finished(config), now)
    found: dict[str, StepReport] = {}
    if progress is not None:  # landing: events and quarantine
        progress.set_total(1 + len(tables_with_users(config)) + (2 if landing is not None else 0))

    def done(report: StepReport) -> None:
        if report.target in found:  # another pass over the table
            found[report.target].removed += report.removed
            found[report.target].bytes += report.bytes
        else:
            found[report.target] = report
        if progress is not None:
            progress.add(rows=report.removed, steps=1, note=report.target)
        kill_point("forget_committed")

    remaining: dict[str, int] = {}
    # Users a finished forget still listed in history's record removed, with no row of theirs
    # anywhere: a job that read before that forget drops them by its epoch, one that read after
    # holds none. Nothing to remove or record (a request again for users already gone).
    gone = {u for e in forgets_of(history.refresh().metadata).epochs for u in e.users}
    passes = 0 if set(chosen) <= gone and not held_rows else PASSES
    if landing is not None and not passes:
        for report in forget_landing(landing, chosen):
            done(report)
    for n in range(passes):
        # Landing again on a later pass when it gained their rows: an ingest that validated before the
        # tombstone and committed after the landing's delete.
        if landing is not None and (n == 0 or landing_rows(landing, chosen)):
            for report in forget_landing(landing, chosen):
                done(report)
        for table in tables_with_users(config):  # listed again each pass: a table may be new
            with suppress(NoSuchTableError):  # dropped meanwhile (a backfill replacing its table)
                done(forget_in_table(table, chosen, fence))
        done(forget_history(history, config, chosen, fence))
        remaining, unrecorded = _left(config, history, chosen, request.forget_id)
        if landing is not None:
            remaining |= {"landing": landing_rows(landing, chosen)}
            remaining = {name: rows for name, rows in remaining.items() if rows}
        if not remaining and not unrecorded:
            break
        log.info("forget: a pass left %s (rows) and %s (without the record); passing again", remaining, unrecorded)
    if landing is not None:
        remaining |= {"landing": landing_rows(landing, chosen)}
    remaining = {name: rows for name, rows in remaining.items() if rows}
    if remaining:
        raise UsersRemain(f"rows of the forgotten users remain: {remaining}")
    forget_audit.finish(config, request)
    audit = StepReport(FORGET_STEP, forget_audit.AUDIT, unit="rows")
    resumed = ", resumed after a killed run" if request.resumed else ""
    audit.notes.append(
        f"request {request.forget_id} by {request.requested_by}{resumed}: "
        f"{sum(request.rows.values()):,} rows of {len(chosen)} user(s) recorded as removed"
    )
    return [*found.values(), audit]


def _left(config: Config, history: Table, users: list[int], forget_id: str) -> tuple[dict[str, int], list[str]]:
    """(rows of the users each table still holds, the tables whose record lacks the request)."""
    rows: dict[str, int] = {}
    unrecorded: list[str] = []
    for table in [history, *tables_with_users(config)]:
        with suppress(NoSuchTableError):
            count = user_rows(table, users)
            if count:
                rows[table.name()[-1]] = count
            if forget_id not in forgets_of(table.metadata).ids:
                unrecorded.append(table.name()[-1])
    return rows, unrecorded
