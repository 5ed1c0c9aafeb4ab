"""Data files of a table partitioned by bucket(N, user_id), written one bucket's rows at a time.

pyiceberg's `append` splits any Arrow table by partition: it computes each row's bucket and filters
the table once per bucket it finds, which copies every list column of a table that holds one bucket
already (a samples batch does: pointers are read bucket by bucket). `BucketFiles` writes such rows as
one data file of their bucket through pyiceberg's own Parquet writer (field ids, statistics, page
checksums), and `commit` publishes the files in the same transaction as the rows they replace.
"""

from __future__ import annotations

import itertools
import uuid
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.exceptions import CommitFailedException
from pyiceberg.expressions import BooleanExpression
from pyiceberg.io.pyarrow import pyarrow_to_schema, write_file
from pyiceberg.manifest import DataFile
from pyiceberg.partitioning import PartitionFieldValue, PartitionKey
from pyiceberg.table import Table, WriteTask

from seqlake.core.errors import ForgetCommitted, SeqlakeError
from seqlake.tableformat.bucketing import bucket_of
from seqlake.tableformat.deletes import nothing_matched_is_fine
from seqlake.tableformat.forgets import (
    ATTEMPTS,
    ReadPoint,
    drop_users,
    fenced_transaction,
    files_holding,
)
from seqlake.tableformat.io import resolve_uri


class BucketFiles:
    """Data files for `table`, written as batches come (`writers` files at a time, in the
    background); nothing is visible before `commit`."""

    def __init__(self, table: Table, bucket_count: int, writers: int = 2) -> None:
        self.table, self.bucket_count = table, bucket_count
        self.files: list[DataFile] = []
        self._uuid = uuid.uuid4()
        self._counter = itertools.count()
        self._pool = ThreadPoolExecutor(max_workers=writers, thread_name_prefix="seqlake-write")
        self._writers = writers
        self._pending: deque[Future] = deque()

    def write(self, rows: pa.Table) -> None:
        """Write `rows` (all of one bucket of user_id) as one data file; waits while `writers`
        files are being written (their rows stay in memory until then)."""
        if not rows.num_rows:
            return
        buckets = bucket_of(rows["user_id"], self.bucket_count)
        bucket = int(buckets[0])
        if not np.all(buckets == bucket):
            raise SeqlakeError(f"rows of buckets {sorted(set(buckets.tolist()))} given as one bucket")
        while len(self._pending) >= self._writers:
            self.files.extend(self._pending.popleft().result())
        self._pending.append(self._pool.submit(self._write, rows, bucket, next(self._counter)))

    def _write(self, rows: pa.Table, bucket: int, number: int) -> list[DataFile]:
        metadata = self.table.metadata
        spec, schema = metadata.spec(), metadata.schema()
        [field] = spec.fields
        key = PartitionKey([PartitionFieldValue(field, bucket)], spec, schema)
        file_schema = pyarrow_to_schema(
            rows.schema, name_mapping=schema.name_mapping, format_version=metadata.format_version
        )
        task = WriteTask(
            write_uuid=self._uuid,
            task_id=number,
            schema=file_schema,
            record_batches=rows.to_batches(),
            partition_key=key,
        )
        return list(write_file(self.table.io, metadata, iter([task])))

    def finish(self) -> None:
        """Wait for the files being written (an error of one is raised here)."""
        try:
            while self._pending:
                self.files.extend(self._pending.popleft().result())
        finally:
            self.close()

    def close(self) -> None:
        """Stop writing: files not started are not written (a failed job leaves unreferenced files
        at most, which orphan removal deletes)."""
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> BucketFiles:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def commit(self, point: ReadPoint, replacing: BooleanExpression | None = None) -> None:
        """One commit: delete the rows matching `replacing` (if any), then add the written files.

        `point` is where the job's reads began: a written file holding users a forget removed after
        it is rewritten without them first, and the commit is fenced on that check
        (`seqlake.tableformat.forgets`); a forget that reaches the table meanwhile makes it check again."""
        self.finish()
        for _ in range(ATTEMPTS):
            transaction, missed = fenced_transaction(self.table.refresh(), point)
            self._leave_out(missed)
            if replacing is not None and self.table.current_snapshot() is not None:
                with nothing_matched_is_fine():
                    transaction.delete(replacing)
            if self.files:
                with transaction.update_snapshot().fast_append() as append:
                    for data_file in self.files:
                        append.append_data_file(data_file)
            try:
                transaction.commit_transaction()
                return
            except CommitFailedException:
                continue
        raise ForgetCommitted(f"{'.'.join(self.table.name())}: forgets kept committing; run the job again")

    def _leave_out(self, users: pa.Array) -> None:
        """Rewrite the written files that hold rows of `users` without them (one filter per file)."""
        holding = set(files_holding([f.file_path for f in self.files], users))
        if not holding:
            return
        kept = [f for f in self.files if f.file_path not in holding]
        for data_file in (f for f in self.files if f.file_path in holding):
            fs, path = resolve_uri(data_file.file_path)
            with fs.open_input_file(path) as handle:
                rows = drop_users(pq.read_table(handle), users)
            if rows.num_rows:
                kept += self._write(rows, int(data_file.partition[0]), next(self._counter))
            self.table.io.delete(data_file.file_path)  # never committed
        self.files = kept
