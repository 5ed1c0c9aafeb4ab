"""fsck: check every invariant of a history table, stopping at the first broken file.

Invariants (SPEC.md, "Invariants"): each live file is a seqlake file of a recorded run; its footer
facts agree with its Parquet metadata and with its Iceberg manifest entry (rows, bucket, key bounds,
size); it has a bloom filter on user_id and a page index; its rows are strictly ordered by the key and
all belong to its bucket; files of one run never share a user; its content checksum matches.
"""

from __future__ import annotations

import itertools
import struct
from collections import defaultdict
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from pyiceberg.manifest import DataFile
from pyiceberg.table import Table

from seqlake.errors import SeqlakeError
from tableformat.bucketing import bucket_of
from tableformat.checksum import ContentChecksum
from tableformat.footer import FileFacts
from tableformat.registry import FORMAT_PROPERTY, GROUPS_PROPERTY, live_runs, run_id_of_path
from tableformat.schema import FORMAT_VERSION, KEY_COLUMNS, STORAGE_ORDER
from tableformat.writer import KeyOrder, UnsortedInputError, open_output


class FsckError(SeqlakeError):
    """An invariant is broken; the message names the file and the invariant."""


@dataclass(frozen=True)
class FsckReport:
    runs: int
    files: int
    rows: int
    bytes: int


def _fail(path: str, message: str) -> None:
    raise FsckError(f"{path}: {message}")


def _long_bound(data_file: DataFile, field_id: int, upper: bool) -> int | None:
    bounds = data_file.upper_bounds if upper else data_file.lower_bounds
    raw = (bounds or {}).get(field_id)
    return None if raw is None else struct.unpack("<q", raw)[0]


def check_file(table: Table, data_file: DataFile, group_order: list[str], full: bool = True) -> FileFacts:
    """Check one live file against its footer, metadata and manifest entry; return its facts."""
    path = data_file.file_path
    fs, local = open_output(path)
    with fs.open_input_file(local) as handle:
        parquet = pq.ParquetFile(handle)
        meta = parquet.metadata
        facts = FileFacts.from_metadata(meta.metadata)
        if facts is None:
            _fail(path, "footer has no seqlake metadata (not written by seqlake)")
        if facts.format_version != FORMAT_VERSION:
            _fail(path, f"format version {facts.format_version}, expected {FORMAT_VERSION}")
        if facts.run_id != run_id_of_path(path):
            _fail(path, f"footer run {facts.run_id} differs from the run in its name")
        if facts.row_count != meta.num_rows or meta.num_rows != data_file.record_count:
            _fail(
                path,
                f"row counts disagree: footer facts {facts.row_count}, Parquet {meta.num_rows}, "
                f"manifest {data_file.record_count}",
            )
        if data_file.partition[0] != facts.bucket:
            _fail(path, f"manifest bucket {data_file.partition[0]} differs from footer bucket {facts.bucket}")
        user_col = meta.schema.to_arrow_schema().get_field_index("user_id")
        for rg in range(meta.num_row_groups):
            chunk = meta.row_group(rg).column(user_col)
            if chunk.bloom_filter_offset is None:
                _fail(path, f"row group {rg} has no bloom filter on user_id")
            if not (chunk.has_column_index and chunk.has_offset_index):
                _fail(path, f"row group {rg} has no page index on user_id")
        user_field = table.schema().find_field("user_id").field_id
        low, high = _long_bound(data_file, user_field, False), _long_bound(data_file, user_field, True)
        if facts.row_count and (low, high) != (facts.key_min[0], facts.key_max[0]):
            _fail(path, f"manifest user bounds {(low, high)} differ from footer key range")
        actual_size = fs.get_file_info(local).size
        if actual_size != data_file.file_size_in_bytes:
            _fail(path, f"size {actual_size} differs from manifest size {data_file.file_size_in_bytes}")
        if full:
            _check_content(path, parquet, facts, group_order, table)
    return facts


def _check_content(path: str, parquet: pq.ParquetFile, facts: FileFacts, group_order, table) -> None:
    order = KeyOrder(group_order)
    checksum = ContentChecksum(parquet.schema_arrow)
    first = last = None
    bucket_count = table.spec().fields[0].transform.num_buckets
    for batch in parquet.iter_batches(batch_size=65_536):
        try:
            order.check(batch)
        except UnsortedInputError as error:
            _fail(path, f"rows are not sorted by {STORAGE_ORDER}: {error}")
        buckets = bucket_of(batch.column("user_id"), bucket_count)
        if not np.all(buckets == facts.bucket):
            _fail(path, f"holds users of bucket(s) {sorted(set(buckets.tolist()) - {facts.bucket})}")
        checksum.update(batch)
        keys = [batch.column(k).cast(pa.int64()) if k == "event_ts" else batch.column(k) for k in KEY_COLUMNS]
        if first is None:
            first = [k[0].as_py() for k in keys]
        last = [k[-1].as_py() for k in keys]
    if facts.row_count and (first, last) != (facts.key_min, facts.key_max):
        _fail(path, f"key range {first}..{last} differs from footer {facts.key_min}..{facts.key_max}")
    if checksum.hexdigest() != facts.checksum:
        _fail(path, f"content checksum {checksum.hexdigest()[:16]}… differs from footer {facts.checksum[:16]}…")


def fsck_table(table: Table, full: bool = True) -> FsckReport:
    """Check the table's invariants; raise FsckError at the first broken one."""
    name = ".".join(table.name())
    if table.metadata.properties.get(FORMAT_PROPERTY) != FORMAT_VERSION:
        raise FsckError(f"{name}: table property {FORMAT_PROPERTY} is not {FORMAT_VERSION}")
    runs = live_runs(table)
    group_order = _group_order(table)
    files_per_run: dict[str, int] = defaultdict(int)
    rows_per_run: dict[str, int] = defaultdict(int)
    users_per_run: dict[str, list[tuple[int, int, int, str]]] = defaultdict(list)
    files = rows = size = 0
    for task in table.scan().plan_files():
        data_file = task.file
        run = run_id_of_path(data_file.file_path)
        if run not in runs:
            _fail(data_file.file_path, f"belongs to run {run}, which is not a recorded live run")
        facts = check_file(table, data_file, group_order, full)
        files_per_run[run] += 1
        rows_per_run[run] += facts.row_count
        if facts.row_count:
            users_per_run[run].append((facts.bucket, facts.key_min[0], facts.key_max[0], data_file.file_path))
        files, rows, size = files + 1, rows + facts.row_count, size + data_file.file_size_in_bytes
    for run, spans in users_per_run.items():
        spans.sort()
        for (b1, _, hi1, p1), (b2, lo2, _, p2) in itertools.pairwise(spans):
            # Files of different buckets never share a user; files of one bucket must not overlap.
            if b1 == b2 and lo2 <= hi1:
                raise FsckError(f"{p2}: user range overlaps {p1} in run {run} (bucket {b1})")
    for run, record in runs.items():
        if (files_per_run[run], rows_per_run[run]) != (record.files, record.rows):
            raise FsckError(
                f"{name}: run {run} records {record.files} files / {record.rows} rows, "
                f"found {files_per_run[run]} / {rows_per_run[run]}"
            )
    return FsckReport(len(runs), files, rows, size)


def _group_order(table: Table) -> list[str]:
    raw = table.metadata.properties.get(GROUPS_PROPERTY)
    if raw:
        return raw.split(",")
    raise FsckError(f"{'.'.join(table.name())}: table property seqlake.feature-groups is missing")
