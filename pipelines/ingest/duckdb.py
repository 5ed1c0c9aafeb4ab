"""Ingest in-process (`seqlake ingest --engine duckdb`): the Spark job's steps without a JVM.

Each source snapshot is one batch, as on Spark: the data files it added are read with pyarrow, batch by
batch (bounded memory), each slice of batches validated by one DuckDB query (`validation_sql`, the set-based rules
both engines run, records of published windows moved to their home window in it), and the valid and
malformed rows are appended to the same Delta tables with delta-rs, quarantine first, each commit
recording the snapshot's sequence number as its Delta txn version. Both engines read that record, so a
snapshot either one has applied is skipped by the other, and a run killed between the two commits is
completed by the next.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyiceberg.manifest import ManifestContent, ManifestEntryStatus
from pyiceberg.table import Table
from pyiceberg.table.snapshots import Operation, Snapshot

from seqlake.core.config import Config
from seqlake.core.errors import CommitFailed
from seqlake.core.events import RAW_SCHEMA
from seqlake.core.progress import Progress
from seqlake.engines.duckdb_session import connect
from seqlake.pipelines.commit_failures import committing
from seqlake.pipelines.faults import kill_point
from seqlake.pipelines.ingest.plan import IngestResult, ingest_app_id, ingest_snapshots
from seqlake.pipelines.ingest.validation import validation_sql
from seqlake.pipelines.landing import delta_writer
from seqlake.pipelines.landing.schema import QUARANTINE_SCHEMA, landing_schema, parsed_schema
from seqlake.pipelines.landing.tables import LandingPaths
from seqlake.pipelines.tables import load_existing_table
from seqlake.tableformat.snapshots import sequence_number

READ_BATCH_ROWS = 128 * 1024  # raw records read, and answers returned, per batch
# Raw records per validation query. DuckDB's scan of a registered stream runs ahead of a slower reader
# of the answers (the landing writer) until it has read the whole stream: one query over a whole
# snapshot held all of it (2.8 GiB at 10^7 records). A query per slice bounds that by the slice.
QUERY_ROWS = 8 * READ_BATCH_ROWS
_RAW_RECORDS = "raw_records"  # the name each batch goes by in the validation query


def added_data_files(table: Table, snapshot: Snapshot) -> list[str]:
    """The data files whose records `snapshot` delivered, as Spark's incremental read of (parent,
    snapshot] finds them: a first snapshot's every file, an append's added files, nothing for other
    operations (an overwrite or delete delivers no new record)."""
    first = snapshot.parent_snapshot_id is None
    if not first and snapshot.summary is not None and snapshot.summary.operation != Operation.APPEND:
        return []
    files = []
    for manifest in snapshot.manifests(table.io):
        added_here = manifest.added_snapshot_id == snapshot.snapshot_id
        if manifest.content != ManifestContent.DATA or not (first or added_here):
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if first or (entry.status == ManifestEntryStatus.ADDED and entry.snapshot_id == snapshot.snapshot_id):
                files.append(entry.data_file.file_path)
    return files


def snapshot_records(table: Table, snapshot: Snapshot) -> Iterator[pa.RecordBatch]:
    """The raw records `snapshot` delivered, streamed from its data files."""
    for path in added_data_files(table, snapshot):
        with table.io.new_input(path).open() as handle:
            yield from pq.ParquetFile(handle).iter_batches(batch_size=READ_BATCH_ROWS, columns=RAW_SCHEMA.names)


class BatchValidator:
    """Validates streams of raw record batches (RAW_SCHEMA) with `validation_sql` on an in-process
    DuckDB connection: one query per slice of QUERY_ROWS records, answered batch by batch (bounded
    memory), in the stream's order. Each answer batch holds rows of `parsed_schema`, typed or with their reason, a
    record of a published window in its home window of `homes` (`plan.home_windows`)."""

    def __init__(self, config: Config, homes: dict[int, int] | None = None) -> None:
        self.schema = parsed_schema(config)
        self._sql = validation_sql(config, _RAW_RECORDS, "duckdb", homes)
        self._con = connect(extensions=())

    def stream(self, records: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for piece in _slices(records, QUERY_ROWS):
            # The files' own types (Iceberg keeps microseconds): the query reads RAW_SCHEMA's columns by name.
            self._con.register(_RAW_RECORDS, pa.Table.from_batches(piece))
            try:
                for batch in self._con.execute(self._sql).to_arrow_reader(READ_BATCH_ROWS):
                    yield batch.cast(self.schema)
            finally:
                self._con.unregister(_RAW_RECORDS)

    def __call__(self, batch: pa.RecordBatch) -> pa.Table:
        """One batch's rows."""
        return pa.Table.from_batches(list(self.stream(iter([batch]))), self.schema)

    def close(self) -> None:
        self._con.close()


def _slices(records: Iterator[pa.RecordBatch], rows: int) -> Iterator[list[pa.RecordBatch]]:
    """`records` in order, in lists of whole batches of about `rows` records (at least one batch)."""
    piece: list[pa.RecordBatch] = []
    held = 0
    for batch in records:
        piece.append(batch)
        held += batch.num_rows
        if held >= rows:
            yield piece
            piece, held = [], 0
    if piece:
        yield piece


class _Split:
    """Parsed batches split as they stream: valid rows pass on to the landing writer, malformed rows
    are spilled to a local Arrow file (the quarantine is committed first, once the pass is over)."""

    def __init__(self, config: Config, homes: dict[int, int], spill: Path, keep_malformed: bool = True) -> None:
        self.keep_malformed = keep_malformed
        self.validate = BatchValidator(config, homes)
        self.landing = landing_schema(config)
        self.quarantine = QUARANTINE_SCHEMA
        self.reasons: Counter = Counter()
        self._spill_path = spill
        self._spilled = delta_writer.table_schema(QUARANTINE_SCHEMA)
        self._spill = pa.ipc.new_stream(str(spill), self._spilled)

    def valid(self, records: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for parsed in self.validate.stream(records):
            malformed = pc.is_valid(parsed["reason"])
            if pc.any(malformed).as_py():
                bad = parsed.filter(malformed)
                for item in pc.value_counts(bad["reason"]).to_pylist():
                    self.reasons[item["values"]] += item["counts"]
                if self.keep_malformed:
                    self._spill.write_batch(bad.select(self.quarantine.names).cast(self._spilled))
                parsed = parsed.filter(pc.invert(malformed))
            yield parsed.select(self.landing.names)

    def close(self) -> None:
        self._spill.close()  # closing twice is harmless
        self.validate.close()

    def malformed(self) -> Iterator[pa.RecordBatch]:
        self.close()
        with pa.ipc.open_stream(str(self._spill_path)) as reader:
            yield from reader


def ingest_snapshot(
    config: Config, table: Table, snapshot: Snapshot, paths: LandingPaths, app_id: str, homes: dict[int, int]
) -> tuple[int, Counter]:
    """Land one source snapshot, records of published windows in their `homes`: (landed, Counter of
    quarantine reasons)."""
    return land_records(config, snapshot_records(table, snapshot), paths, app_id, sequence_number(snapshot), homes)


def land_records(
    config: Config,
    records: Iterator[pa.RecordBatch],
    paths: LandingPaths,
    app_id: str,
    version: int,
    homes: dict[int, int],
) -> tuple[int, Counter]:
    """Validate one batch of raw `records` (RAW_SCHEMA's columns) and append it as (app_id, version), records
    of published windows in their `homes`: (landed, Counter of quarantine reasons)."""
    events = delta_writer.open_table(paths.events)
    quarantine = delta_writer.open_table(paths.quarantine)
    for existing, uri, schema in (
        (events, paths.events, landing_schema(config)),
        (quarantine, paths.quarantine, QUARANTINE_SCHEMA),
    ):
        if existing is not None:
            delta_writer.check_appendable(existing, uri, schema)
    # A run killed after its quarantine commit left this snapshot's malformed rows there already.
    quarantined = delta_writer.transaction_version(quarantine, app_id) >= version
    with (
        tempfile.TemporaryDirectory(prefix="seqlake-ingest-") as scratch,
        committing(f"landing batch {version}", why_safe="each batch lands once", sent=False),
    ):
        split = _Split(config, homes, Path(scratch) / "quarantine.arrows", keep_malformed=not quarantined)
        landed = delta_writer.write_files(paths.events, split.landing, split.valid(records))
        bad = delta_writer.write_files(paths.quarantine, split.quarantine, split.malformed())
    # Quarantine first: a crash between the two commits replays the batch, and each commit skips a
    # version its table already holds.
    pending = [(paths.quarantine, bad), (paths.events, landed)]
    try:
        delta_writer.commit(paths.quarantine, split.quarantine, bad, app_id, version, quarantine)
        pending.pop(0)
        kill_point("ingest_quarantined")
        delta_writer.commit(paths.events, split.landing, landed, app_id, version, events)
    except CommitFailed as error:
        if error.published is False:  # files no commit will reference: a landing again writes its own
            for uri, files in pending:
                delta_writer.remove_files(uri, files)
        raise
    kill_point("ingest_landed")
    return landed.rows, split.reasons


def ingest_source_in_process(
    config: Config,
    source: str,
    paths: LandingPaths,
    progress: Progress | None = None,
    max_snapshots: int | None = None,
) -> IngestResult:
    """Ingest every source snapshot not ingested yet (at most `max_snapshots`), in commit order."""
    table = load_existing_table(config, source)
    app_id = ingest_app_id(config, source)

    def land(snapshot: Snapshot, homes: dict[int, int]) -> tuple[int, Counter]:
        return ingest_snapshot(config, table, snapshot, paths, app_id, homes)

    done = delta_writer.applied_version(paths.events, app_id)
    return ingest_snapshots(config, table, done, land, progress, max_snapshots)
