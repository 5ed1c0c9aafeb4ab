"""Idempotent appends to the landing tier's Delta tables without a JVM: Parquet files written by pyarrow,
committed by delta-rs (the `deltalake` package).

The files are laid out as Spark's Delta writer lays them out: one `window_id=W/` folder per partition,
the partition value in the log only, every column nullable in the table schema, timestamps in
microseconds (UTC). They carry page checksums, like every Parquet file seqlake writes. Each commit
carries a Delta `txn` action (app id, version) and the same `userMetadata` the Spark writer records, so
both engines see what the other has applied (`applied_version`), and Spark, DuckDB and delta-rs read
the tables either engine created.

Writing is two steps: `write_files` streams batches into data files nothing references yet, and
`commit` adds them in one Delta commit, or nothing if the table already holds that (app id, version). A
job killed between the two leaves unreferenced files, which the landing tier's VACUUM removes.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterable
from contextlib import suppress
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.dataset as ds

from seqlake.core.errors import SeqlakeError, SparkOnlyTable
from seqlake.pipelines.commit_failures import committing
from seqlake.tableformat.io import resolve_uri

PARTITION_COLUMN = "window_id"
# Table features a blind append of plain Parquet files honours: anything else (type widening, column
# mapping, generated or identity columns, row tracking, constraints) needs Delta's own writer.
APPENDABLE_FEATURES = frozenset(
    {"appendOnly", "invariants", "deletionVectors", "v2Checkpoint", "timestampNtz", "vacuumProtocolCheck"}
)
_ROWS_PER_GROUP = 128 * 1024


@dataclass(frozen=True)
class WrittenFiles:
    """Data files written under a table and not yet committed."""

    actions: list  # deltalake AddAction
    rows: int


def storage_options(uri: str) -> dict[str, str] | None:
    """delta-rs storage options for `uri`: S3 settings from the environment, nothing for local files."""
    from seqlake.engines.storage import S3Settings, is_s3

    return S3Settings.from_env().delta_storage_options() if is_s3(uri) else None


def delta_uri(uri: str) -> str:
    """The location as delta-rs opens it: a local path for a file URI, any other URI unchanged."""
    return resolve_uri(uri)[1] if uri.startswith("file:") else uri.replace("s3a://", "s3://", 1)


def open_table(uri: str):
    """The Delta table at `uri` (None if there is none yet), or one line saying delta-rs cannot read it."""
    from deltalake import DeltaTable
    from deltalake.exceptions import DeltaError, TableNotFoundError

    location = delta_uri(uri)
    try:
        return DeltaTable(location, storage_options=storage_options(uri))
    except TableNotFoundError:
        return None
    except DeltaError as error:
        reason = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise SparkOnlyTable(
            f"the Delta table {location} cannot be read in-process ({reason}): use --engine spark"
        ) from None


def transaction_version(table, app_id: str) -> int:
    """Highest txn version `app_id` committed to `table` (0 if none): the Delta `txn` action, which
    Spark's idempotent writes (txnAppId/txnVersion) and `commit` both record, and checkpoints keep."""
    return int(table.transaction_version(app_id) or 0) if table is not None else 0


def applied_version(uri: str, app_id: str) -> int:
    """Highest txn version `app_id` committed to the Delta table at `uri` (0 if no table)."""
    return transaction_version(open_table(uri), app_id)


def check_writable_in_process(table, uri: str) -> None:
    """One line, naming `--engine spark`, unless delta-rs may commit plain Parquet files to `table`:
    appends, and the rewrites of a delete."""
    protocol = table.protocol()
    features = set(protocol.writer_features or ()) | set(protocol.reader_features or ())
    unsupported = sorted(features - APPENDABLE_FEATURES)
    if protocol.min_writer_version > 7 or (protocol.min_writer_version in (3, 4, 5, 6) and not features):
        unsupported.append(f"writer version {protocol.min_writer_version}")
    if unsupported:
        raise SparkOnlyTable(
            f"the landing table {delta_uri(uri)} uses Delta features the in-process engine does not write "
            f"({', '.join(unsupported)}): use --engine spark"
        )


def check_appendable(table, uri: str, schema: pa.Schema) -> None:
    """One line, naming `--engine spark`, unless plain Parquet files of `schema` may be appended to `table`."""
    check_writable_in_process(table, uri)
    columns = {field.name: field.type for field in pa.schema(table.schema().to_arrow())}
    wrong = [
        f"{field.name} ({_type_name(columns.get(field.name))}, configured {_type_name(field.type)})"
        for field in schema
        if columns.get(field.name) != field.type
    ]
    if wrong:
        raise SeqlakeError(
            f"the landing table {delta_uri(uri)} does not hold the configured columns: {', '.join(wrong)}"
        )


def _type_name(kind: pa.DataType | None) -> str:
    return "missing" if kind is None else str(kind)


def table_schema(schema: pa.Schema) -> pa.Schema:
    """The schema a new table gets: every column nullable, as Spark's Delta writer creates it."""
    return pa.schema([field.with_nullable(True) for field in schema])


def write_files(uri: str, schema: pa.Schema, batches: Iterable[pa.RecordBatch]) -> WrittenFiles:
    """Stream `batches` (of `schema`) into Parquet files partitioned by window under the table at `uri`;
    memory stays bounded by pyarrow's dataset writer. Nothing is committed."""
    filesystem, root = resolve_uri(uri)
    schema = table_schema(schema)
    written: list = []

    def visit(file) -> None:
        written.append((file.path, file.size, file.metadata))

    reader = pa.RecordBatchReader.from_batches(schema, (batch.cast(schema) for batch in batches))
    ds.write_dataset(
        reader,
        root,
        format="parquet",
        filesystem=filesystem,
        partitioning=ds.partitioning(pa.schema([schema.field(PARTITION_COLUMN)]), flavor="hive"),
        basename_template=f"part-{uuid.uuid4()}-{{i}}.zstd.parquet",
        existing_data_behavior="overwrite_or_ignore",  # new names only: nothing is overwritten
        file_options=ds.ParquetFileFormat().make_write_options(compression="zstd", write_page_checksum=True),
        max_partitions=1 << 20,  # an import's backlog spans thousands of windows
        max_rows_per_group=_ROWS_PER_GROUP,
        file_visitor=visit,
    )
    return WrittenFiles([_add_action(root, *file) for file in written], sum(meta.num_rows for _, _, meta in written))


def _add_action(root: str, path: str, size: int, meta):
    from deltalake.transaction import AddAction

    relative = path[len(root.rstrip("/")) + 1 :]
    folder = relative.split("/", 1)[0]
    name, _, value = folder.partition("=")
    assert name == PARTITION_COLUMN, relative
    return AddAction(
        path=relative,
        size=size,
        partition_values={PARTITION_COLUMN: value},
        modification_time=int(time.time() * 1000),
        data_change=True,
        stats=json.dumps(_file_stats(meta)),
    )


def _file_stats(meta) -> dict:
    """Delta file statistics from the Parquet footer: row and null counts, and min/max of the integer
    columns (exact; timestamps and strings are left out, which only costs data skipping)."""
    nulls: dict[str, int] = {}
    low: dict[str, int] = {}
    high: dict[str, int] = {}
    for group in range(meta.num_row_groups):
        row_group = meta.row_group(group)
        for index in range(row_group.num_columns):
            column = row_group.column(index)
            name = column.path_in_schema
            stats = column.statistics
            if stats is None:
                continue
            if stats.has_null_count:
                nulls[name] = nulls.get(name, 0) + stats.null_count
            if stats.has_min_max and column.physical_type in ("INT32", "INT64") and _is_integer(stats):
                low[name] = min(low.get(name, stats.min), stats.min)
                high[name] = max(high.get(name, stats.max), stats.max)
    return {"numRecords": meta.num_rows, "minValues": low, "maxValues": high, "nullCount": nulls}


def _is_integer(stats) -> bool:
    logical = str(stats.logical_type)
    return logical == "None" or logical.startswith("Int(")


def commit(
    uri: str, schema: pa.Schema, files: WrittenFiles, app_id: str, version: int, table=None, what: str = ""
) -> bool:
    """Add `files` to the table at `uri` in one commit recording (app_id, version); False (nothing
    committed) if the table already holds that version. `table` is the table as the caller read it, if
    it did: a concurrent commit of the same app id then fails this one instead of adding it twice.

    A commit that does not complete is a `CommitFailed` naming `what` (default: the version and the
    table): `CommitConflict` when another commit won the race (the caller may land the batch again
    on the new snapshot), `StoreRefused` when the store refused the log entry."""
    from deltalake import CommitProperties, Schema, Transaction
    from deltalake.transaction import create_table_with_add_actions

    if table is None:
        table = open_table(uri)
    if transaction_version(table, app_id) >= version:
        return False
    properties = CommitProperties(
        app_transactions=[Transaction(app_id, version)],
        custom_metadata={"userMetadata": json.dumps({"app": app_id, "version": version})},
    )
    # The txn version makes a re-run skip a commit that did complete, whatever the answer said.
    safe = "each batch lands once"
    with committing(what or f"committing batch {version} to {delta_uri(uri)}", why_safe=safe):
        if table is None:
            create_table_with_add_actions(
                delta_uri(uri),
                Schema.from_arrow(table_schema(schema)),
                files.actions,
                mode="append",
                partition_by=[PARTITION_COLUMN],
                storage_options=storage_options(uri),
                commit_properties=properties,
            )
        else:
            table.create_write_transaction(
                files.actions,
                mode="append",
                schema=table.schema(),
                partition_by=[PARTITION_COLUMN],
                commit_properties=properties,
            )
    return True


def remove_files(uri: str, files: WrittenFiles) -> None:
    """Delete written files no commit references (a lost race's), best effort: VACUUM removes any left."""
    filesystem, root = resolve_uri(uri)
    for action in files.actions:
        with suppress(OSError):
            filesystem.delete_file(f"{root.rstrip('/')}/{action.path}")
