"""An import's raw records: written to data files of the raw source table as they come, published in
one commit.

The records of every input file go to Parquet data files through pyiceberg's writer (field ids,
column statistics), each file closed at `FILE_BYTES` of records and written in the background while
the next fills: memory holds at most two files' records, whatever the input's size. One snapshot
then adds every file, its summary recording what was imported (`properties`). Nothing is visible
before that commit; an import that fails or is killed before it leaves unreferenced files only,
which orphan removal deletes.
"""

from __future__ import annotations

import itertools
import uuid
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import pyarrow as pa
from pyiceberg.io.pyarrow import pyarrow_to_schema, write_file
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table, WriteTask

from seqlake.core.events import RAW_SCHEMA
from seqlake.core.progress import Progress
from seqlake.pipelines.faults import kill_point

FILE_BYTES = 128 << 20  # Arrow bytes of records per data file (some 800,000 records)


@dataclass(frozen=True)
class Landed:
    records: int
    files: int
    snapshot_id: int | None


def land_import(
    table: Table, batches: Iterable[pa.RecordBatch], properties: dict[str, str], progress: Progress | None = None
) -> Landed:
    """Append the RAW_SCHEMA `batches` to `table` in one commit whose snapshot summary holds
    `properties`; nothing is committed when there are no records."""
    write_uuid, numbers = uuid.uuid4(), itertools.count()
    metadata = table.metadata
    schema = pyarrow_to_schema(
        RAW_SCHEMA, name_mapping=table.schema().name_mapping, format_version=metadata.format_version
    )
    files: list[DataFile] = []
    pending: list[pa.RecordBatch] = []
    size = records = 0
    writing: deque[Future[list[DataFile]]] = deque()

    def write(batches: list[pa.RecordBatch], number: int) -> list[DataFile]:
        task = WriteTask(write_uuid=write_uuid, task_id=number, schema=schema, record_batches=batches)
        return list(write_file(table.io, metadata, iter([task])))

    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="seqlake-import-write") as pool:

        def flush() -> None:
            nonlocal pending, size
            if pending:
                while writing:  # one file written while the next fills
                    files.extend(writing.popleft().result())
                writing.append(pool.submit(write, pending, next(numbers)))
                if progress:
                    progress.add(steps=1)
            pending, size = [], 0

        for batch in batches:
            if not batch.num_rows:
                continue
            pending.append(batch)
            size += batch.nbytes
            records += batch.num_rows
            if progress:
                progress.add(rows=batch.num_rows, nbytes=batch.nbytes)
            if size >= FILE_BYTES:
                flush()
        flush()
        while writing:
            files.extend(writing.popleft().result())
    if not files:
        return Landed(0, 0, None)
    with (
        table.transaction() as transaction,
        transaction.update_snapshot(snapshot_properties=properties).fast_append() as append,
    ):
        for data_file in files:
            append.append_data_file(data_file)
    kill_point("raw_appended")
    table.refresh()
    snapshot = table.current_snapshot()
    return Landed(records, len(files), snapshot.snapshot_id if snapshot else None)
