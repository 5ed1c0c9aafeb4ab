"""How seqlake writes through pyiceberg: page checksums on every Parquet file, commits that find the
files they replace whatever the threads do, and partitioned overwrites in time linear in the rows.

The tables other than history runs (detail, training samples and their quarantines, the compaction
quarantine) are Iceberg tables written through pyiceberg or Spark. Iceberg's Spark writer
(parquet-java) writes page CRCs by default; pyiceberg has no table property for them, so
`enable_iceberg_page_checksums` adds `write_page_checksum=True` to the options pyiceberg hands
pyarrow's ParquetWriter. `seqlake.tableformat.page_checksums` checks that a file carries them.

A commit that replaces files (a forget's rewrite, a merge, a partial delete) looks for them in the
parent snapshot's manifests on pyiceberg's thread pool, all threads sharing one partition evaluator
that keeps the manifest it is evaluating in an attribute (pyiceberg 0.12.0). Two threads interleaving
there can skip the manifest that holds a replaced file, and the commit fails with "Missing required
files to delete". `serialize_manifest_evaluation` makes that evaluation one thread at a time (a lock
around microseconds of work; reading the manifests stays parallel).
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa
    from pyiceberg.expressions import BooleanExpression
    from pyiceberg.table import Transaction


def enable_iceberg_page_checksums() -> None:
    """Make pyiceberg's Parquet writes carry page checksums (idempotent, process-wide)."""
    from pyiceberg.io import pyarrow as iceberg_pyarrow

    original = iceberg_pyarrow._get_parquet_writer_kwargs
    if getattr(original, "_seqlake_page_checksums", False):
        return

    def with_page_checksums(table_properties):
        return original(table_properties) | {"write_page_checksum": True}

    with_page_checksums._seqlake_page_checksums = True  # type: ignore[attr-defined]  # a marker on the function
    iceberg_pyarrow._get_parquet_writer_kwargs = with_page_checksums


def serialize_manifest_evaluation() -> None:
    """Make pyiceberg's manifest partition evaluator safe to share between threads (idempotent,
    process-wide). Its `eval` sets `partition_fields` and then reads it back while visiting."""
    from pyiceberg.expressions import visitors
    from pyiceberg.manifest import ManifestFile

    original = visitors._ManifestEvalVisitor.eval
    if getattr(original, "_seqlake_serialized", False):
        return
    lock = threading.Lock()

    def serialized(self: visitors._ManifestEvalVisitor, manifest: ManifestFile) -> bool:
        with lock:
            return original(self, manifest)

    serialized._seqlake_serialized = True  # type: ignore[attr-defined]  # a marker on the function
    visitors._ManifestEvalVisitor.eval = serialized


# Partitions handed to pyiceberg at a time: its cost is (partitions in a call) x (rows in a call).
PARTITIONS_PER_CALL = 16


def overwrite_by_partition(
    transaction: Transaction,
    rows: pa.Table,
    column: str,
    overwrite_filter: BooleanExpression,
    snapshot_properties: dict[str, str],
) -> None:
    """`transaction.overwrite(rows, overwrite_filter, snapshot_properties)` for a table partitioned by
    `column`, with the same snapshots (a delete, then one append), in time linear in the rows.

    pyiceberg splits a partitioned write by filtering the whole table once per partition value, so a
    backlog of thousands of windows took seconds per thousand rows. Here the rows are sorted once (a
    stable sort: each partition keeps its rows' order) and handed to pyiceberg's writer a few
    partitions at a time, in one append.
    """
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible, _dataframe_to_data_files
    from pyiceberg.table.snapshots import Operation

    metadata = transaction.table_metadata
    _check_pyarrow_schema_compatible(
        metadata.schema(), provided_schema=rows.schema, format_version=metadata.format_version
    )
    transaction.delete(
        overwrite_filter, snapshot_properties=snapshot_properties, _isolation_operation=Operation.OVERWRITE
    )
    with transaction.update_snapshot(snapshot_properties=snapshot_properties).fast_append() as append:
        names = itertools.count(0)  # one file-name sequence for the whole append
        for chunk in _partition_chunks(rows, column, PARTITIONS_PER_CALL):
            for data_file in _dataframe_to_data_files(
                table_metadata=transaction.table_metadata,
                df=chunk,
                io=transaction._table.io,
                write_uuid=append.commit_uuid,
                counter=names,
            ):
                append.append_data_file(data_file)


def _partition_chunks(rows: pa.Table, column: str, per_chunk: int) -> Iterator[pa.Table]:
    """`rows` sorted by `column` (stably), in slices of at most `per_chunk` distinct values."""
    import numpy as np
    import pyarrow.compute as pc

    if rows.num_rows == 0:
        return
    ordered = rows.take(pc.sort_indices(rows[column]))
    values = ordered[column].combine_chunks()
    changes = np.flatnonzero(pc.not_equal(values[1:], values[:-1]).to_numpy(zero_copy_only=False)) + 1
    starts = np.concatenate(([0], changes))[::per_chunk]
    ends = np.append(starts[1:], rows.num_rows)
    for start, end in zip(starts.tolist(), ends.tolist(), strict=True):
        yield ordered.slice(start, end - start)
