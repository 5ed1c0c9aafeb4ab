"""An import's raw records: written to data files of the raw source table as they come, published in
one commit.

`RawFiles` writes records to Parquet data files through pyiceberg's writer (field ids, column
statistics), each file closed at `FILE_BYTES` of records and written in the background while the
next fills: memory holds at most two files' records, whatever the input's size. `commit` then adds
every file in one snapshot whose summary records what was imported. Nothing is visible before that
commit: a failed import deletes the files it wrote (`abort`), and one killed before it leaves
unreferenced files only, which orphan removal deletes. The records of one input file can be taken
back (`mark`, `rollback`) when its import starts again in another order.
"""

from __future__ import annotations

import itertools
import uuid
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.io.pyarrow import pyarrow_to_schema, write_file
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, WriteTask

from seqlake.core.events import RAW_SCHEMA
from seqlake.core.progress import Progress
from seqlake.pipelines.faults import kill_point

FILE_BYTES = 64 << 20  # Arrow bytes of records per data file (some 400,000 records)


@dataclass(frozen=True)
class Mark:
    """What was written up to a point (`RawFiles.mark`)."""

    files: int
    records: int
    shown: tuple[int, int]  # rows and bytes the progress display counted


@dataclass(frozen=True)
class Landed:
    records: int
    files: int
    snapshot_id: int | None


class RawFiles:
    """Data files of raw records for `table`, written as batches come; published by `commit`."""

    def __init__(self, table: Table, progress: Progress | None = None) -> None:
        self.table = table
        self.progress = progress
        self.files: list[DataFile] = []
        self.records = 0
        self._schema = pyarrow_to_schema(
            RAW_SCHEMA, name_mapping=table.schema().name_mapping, format_version=table.metadata.format_version
        )
        self._uuid, self._numbers = uuid.uuid4(), itertools.count()
        self._pending: list[pa.RecordBatch] = []
        self._pending_bytes = 0
        self._shown = (0, 0)
        self._writing: deque[tuple[int, Future[list[DataFile]]]] = deque()  # (records, file)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="seqlake-import-write")

    def write(self, batch: pa.RecordBatch) -> None:
        if not batch.num_rows:
            return
        self._pending.append(batch)
        self._pending_bytes += batch.nbytes
        self._show(batch.num_rows, batch.nbytes)
        if self._pending_bytes >= FILE_BYTES:
            self._flush()

    def mark(self) -> Mark:
        """A point to roll back to: every record written so far is in files."""
        self._flush()
        self._wait()
        return Mark(len(self.files), self.records, self._shown)

    def rollback(self, mark: Mark) -> None:
        """Forget the records written after `mark`, deleting their files."""
        self._pending, self._pending_bytes = [], 0
        self._wait()
        self._delete(self.files[mark.files :])
        self.files, self.records = self.files[: mark.files], mark.records
        self._show(mark.shown[0] - self._shown[0], mark.shown[1] - self._shown[1])

    def commit(self, properties: dict[str, str]) -> Landed:
        """One snapshot adding every file, its summary holding `properties`; none without records."""
        self._flush()
        self._wait()
        self._pool.shutdown()
        if not self.files:
            return Landed(0, 0, None)
        transaction = self.table.transaction()
        with transaction.update_snapshot(snapshot_properties=properties).fast_append() as append:
            for data_file in self.files:
                append.append_data_file(data_file)
        transaction.commit_transaction()
        committed, self.files = self.files, []  # the table's now: never deleted here
        kill_point("raw_appended")
        self.table.refresh()
        snapshot = self.table.current_snapshot()
        return Landed(self.records, len(committed), snapshot.snapshot_id if snapshot else None)

    def abort(self) -> None:
        """Delete every file written (nothing was committed)."""
        self._pending = []
        try:
            self._wait()
        finally:
            self._pool.shutdown(cancel_futures=True)
            self._delete(self.files)
            self.files = []

    def _flush(self) -> None:
        if not self._pending:
            return
        while self._writing:  # one file written while the next fills
            self._collect()
        batches, rows = self._pending, sum(b.num_rows for b in self._pending)
        self._pending, self._pending_bytes = [], 0
        self._writing.append((rows, self._pool.submit(self._write, batches, next(self._numbers))))
        if self.progress:
            self.progress.add(steps=1)

    def _write(self, batches: list[pa.RecordBatch], number: int) -> list[DataFile]:
        task = WriteTask(write_uuid=self._uuid, task_id=number, schema=self._schema, record_batches=batches)
        return list(write_file(self.table.io, self.table.metadata, iter([task])))

    def _collect(self) -> None:
        rows, written = self._writing.popleft()
        self.files.extend(written.result())
        self.records += rows

    def _wait(self) -> None:
        while self._writing:
            self._collect()

    def _show(self, rows: int, nbytes: int) -> None:
        self._shown = (self._shown[0] + rows, self._shown[1] + nbytes)
        if self.progress:
            self.progress.add(rows=rows, nbytes=nbytes)

    def _delete(self, files: list[DataFile]) -> None:
        for data_file in files:
            self.table.io.delete(data_file.file_path)
