"""fsck: check every invariant of a history table and report every broken one as a finding.

Invariants (SPEC.md, "Invariants"): each live file exists, is complete and reads back as written (page
checksums, footer layout digest); it is a seqlake file of a recorded run; its footer facts agree with
its Parquet metadata and with its Iceberg manifest entry (rows, bucket, key bounds, size); it has a
bloom filter on user_id and a page index; its rows are strictly ordered by the key and all belong to
its bucket; files of one run never share a user; its content checksum matches. A broken file is a
finding, and the checks go on with the next file: one run of fsck lists everything that is wrong.

The other tables seqlake writes (detail, raw source, training, samples, backfills, quarantines, the
landing tier) carry no seqlake footer: `check_files` checks what their metadata records of each live
file (it exists, its size, its row count) and, in full, that every page reads back with its CRC
verified; files with pages that carry none (a writer other than seqlake's) are listed apart.
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

from seqlake.core.errors import CorruptFileError, FsckError, UnsortedInputError
from seqlake.core.progress import Progress
from seqlake.tableformat.bucketing import bucket_of
from seqlake.tableformat.checksum import ContentChecksum
from seqlake.tableformat.footer import FileFacts, encodings_differ, layout_digest_of
from seqlake.tableformat.io import read_footer, resolve_uri
from seqlake.tableformat.page_checksums import page_checksum_counts
from seqlake.tableformat.registry import FORMAT_PROPERTY, GROUPS_PROPERTY, live_runs, run_id_of_path
from seqlake.tableformat.schema import FORMAT_VERSION, KEY_COLUMNS, STORAGE_ORDER
from seqlake.tableformat.verified import DAMAGE, describe, open_verified, verified_file
from seqlake.tableformat.verified_scan import LiveFile
from seqlake.tableformat.writer import KeyOrder


@dataclass(frozen=True)
class Finding:
    """One broken invariant: where (a file, or the table), which invariant, what is wrong."""

    path: str
    invariant: str
    message: str
    run_id: str | None = None  # the run a broken file belongs to (what a repair rebuilds)

    def __str__(self) -> str:
        return f"{self.path}: [{self.invariant}] {self.message}"


@dataclass(frozen=True)
class FsckReport:
    runs: int
    files: int
    rows: int
    bytes: int
    findings: tuple[Finding, ...] = ()
    unchecked: tuple[str, ...] = ()  # files with pages that carry no CRC: damage there reads as data


class _Broken(Exception):
    """This file cannot be checked further (it is missing, unreadable, or not a seqlake file)."""


class _Findings(list):
    def add(self, path: str, invariant: str, message: str, run_id: str | None = None) -> None:
        self.append(Finding(path, invariant, message, run_id))


def _long_bound(data_file: DataFile, field_id: int, upper: bool) -> int | None:
    bounds = data_file.upper_bounds if upper else data_file.lower_bounds
    raw = (bounds or {}).get(field_id)
    return None if raw is None else struct.unpack("<q", raw)[0]


def check_file(
    table: Table, data_file: DataFile, group_order: list[str], full: bool = True, found: list | None = None
) -> FileFacts | None:
    """Check one live file against its footer, metadata and manifest entry; return its facts.

    Every broken invariant goes into `found` (raised as FsckError when `found` is not given); None
    when the file could not be read far enough to know its facts.
    """
    findings = _Findings()
    path = data_file.file_path
    run = run_id_of_path(path)

    def fail(invariant: str, message: str) -> None:
        findings.add(path, invariant, message, run)

    try:
        facts = _check_file(table, data_file, group_order, full, fail)
    except _Broken:
        facts = None
    if found is None:
        if findings:
            raise FsckError(findings)
    else:
        found.extend(findings)
    return facts


def _check_file(table: Table, data_file: DataFile, group_order: list[str], full: bool, fail) -> FileFacts:
    path = data_file.file_path
    fs, local = resolve_uri(path)
    info = fs.get_file_info(local)
    if info.type == pa.fs.FileType.NotFound:
        fail("file-exists", "missing: the manifest lists it, the storage does not have it")
        raise _Broken
    if info.size != data_file.file_size_in_bytes:
        fail("size", f"size {info.size} differs from manifest size {data_file.file_size_in_bytes} (truncated?)")
    try:
        with verified_file(fs, local, path) as handle:
            meta = read_footer(handle)
            facts = _check_footer(table, data_file, meta, fail)
            if full and group_order:
                parquet = open_verified(handle, metadata=meta)
                _check_content(path, parquet, facts, group_order, table, fail)
    except CorruptFileError as error:
        fail("readable", error.problem)
        raise _Broken from None
    return facts


def _check_footer(table: Table, data_file: DataFile, meta: pq.FileMetaData, fail) -> FileFacts:
    path = data_file.file_path
    try:
        facts = FileFacts.from_metadata(meta.metadata)
    except DAMAGE as error:
        fail("footer-facts", f"seqlake footer metadata is unreadable: {describe(error)}")
        raise _Broken from None
    if facts is None:
        fail("footer-facts", "footer has no seqlake metadata (not written by seqlake)")
        raise _Broken
    if facts.format_version != FORMAT_VERSION:
        fail("format-version", f"format version {facts.format_version}, expected {FORMAT_VERSION}")
    if facts.run_id != run_id_of_path(path):
        fail("run-of-file", f"footer run {facts.run_id} differs from the run in its name")
    if facts.layout_digest and layout_digest_of(meta) != facts.layout_digest:
        fail("footer-digest", "the footer's schema or row-group statistics differ from what was written")
    differs = encodings_differ(meta, facts.encodings) if facts.encodings else None
    if differs:
        fail("encodings", differs)
    if facts.row_count != meta.num_rows or meta.num_rows != data_file.record_count:
        fail(
            "row-count",
            f"row counts disagree: footer facts {facts.row_count}, Parquet {meta.num_rows}, "
            f"manifest {data_file.record_count}",
        )
    if data_file.partition[0] != facts.bucket:
        fail("bucket", f"manifest bucket {data_file.partition[0]} differs from footer bucket {facts.bucket}")
    names = [meta.schema.column(i).name for i in range(meta.num_columns)]
    if "user_id" not in names:
        fail("schema", "has no user_id column")
        raise _Broken
    user_col = names.index("user_id")
    for rg in range(meta.num_row_groups):
        chunk = meta.row_group(rg).column(user_col)
        if chunk.bloom_filter_offset is None:
            fail("bloom-filter", f"row group {rg} has no bloom filter on user_id")
            break
        if not (chunk.has_column_index and chunk.has_offset_index):
            fail("page-index", f"row group {rg} has no page index on user_id")
            break
    user_field = table.schema().find_field("user_id").field_id
    low, high = _long_bound(data_file, user_field, False), _long_bound(data_file, user_field, True)
    if facts.row_count and facts.key_min and (low, high) != (facts.key_min[0], facts.key_max[0]):
        fail("manifest-bounds", f"manifest user bounds {(low, high)} differ from footer key range")
    return facts


def _check_content(path: str, parquet: pq.ParquetFile, facts: FileFacts, group_order, table, fail) -> None:
    order = KeyOrder(group_order)
    checksum = ContentChecksum(parquet.schema_arrow)
    first = last = None
    bucket_count = table.spec().fields[0].transform.num_buckets
    sorted_ok = True
    for batch in parquet.iter_batches(batch_size=65_536):
        if sorted_ok:
            try:
                order.check(batch)
            except UnsortedInputError as error:
                fail("sorted", f"rows are not sorted by {STORAGE_ORDER}: {error}")
                sorted_ok = False
        buckets = bucket_of(batch.column("user_id"), bucket_count)
        if not np.all(buckets == facts.bucket):
            fail("bucket-users", f"holds users of bucket(s) {sorted(set(buckets.tolist()) - {facts.bucket})}")
        checksum.update(batch)
        keys = [batch.column(k).cast(pa.int64()) if k == "event_ts" else batch.column(k) for k in KEY_COLUMNS]
        if first is None:
            first = [k[0].as_py() for k in keys]
        last = [k[-1].as_py() for k in keys]
    if facts.row_count and (first, last) != (facts.key_min, facts.key_max):
        fail("key-range", f"key range {first}..{last} differs from footer {facts.key_min}..{facts.key_max}")
    if checksum.hexdigest() != facts.checksum:
        fail(
            "content-checksum",
            f"content checksum {checksum.hexdigest()[:16]}… differs from footer {facts.checksum[:16]}…",
        )


def fsck_table(table: Table, full: bool = True) -> FsckReport:
    """Check the table's invariants; raise FsckError listing every broken one."""
    report = check_table(table, full)
    if report.findings:
        raise FsckError(list(report.findings))
    return report


def check_table(table: Table, full: bool = True, progress: Progress | None = None) -> FsckReport:
    """Check every invariant of the table and every live file; the report lists what is broken.
    `progress` counts the files checked (of all live files), their rows and bytes."""
    found = _Findings()
    name = ".".join(table.name())
    if table.metadata.properties.get(FORMAT_PROPERTY) != FORMAT_VERSION:
        found.add(name, "table-format", f"table property {FORMAT_PROPERTY} is not {FORMAT_VERSION}")
    try:
        runs = live_runs(table)
    except DAMAGE as error:
        found.add(name, "run-registry", f"the runs property is unreadable: {describe(error)}")
        runs = {}
    group_order = _group_order(table, found)
    try:
        tasks = list(table.scan().plan_files())
    except DAMAGE as error:
        found.add(name, "table-metadata", f"manifests are unreadable: {describe(error)}")
        return FsckReport(len(runs), 0, 0, 0, tuple(found))
    files_per_run: dict[str, int] = defaultdict(int)
    rows_per_run: dict[str, int] = defaultdict(int)
    users_per_run: dict[str, list[tuple[int, int, int, str]]] = defaultdict(list)
    files = rows = size = 0
    if progress is not None:
        progress.set_total(len(tasks))
    for task in tasks:
        data_file = task.file
        run = run_id_of_path(data_file.file_path)
        files_per_run[run] += 1
        files, size = files + 1, size + data_file.file_size_in_bytes
        if run not in runs:
            found.add(data_file.file_path, "recorded-run", f"belongs to run {run}, which is not a recorded live run")
        facts = check_file(table, data_file, group_order, full, found)
        # A file that cannot be read counts with its manifest's rows: its run record is not what is wrong.
        count = facts.row_count if facts is not None else data_file.record_count
        rows_per_run[run] += count
        rows += count
        if facts is not None and facts.row_count and facts.key_min:
            users_per_run[run].append((facts.bucket, facts.key_min[0], facts.key_max[0], data_file.file_path))
        if progress is not None:
            progress.add(rows=count, nbytes=data_file.file_size_in_bytes, steps=1)
    for run, spans in users_per_run.items():
        spans.sort()
        for (b1, _, hi1, p1), (b2, lo2, _, p2) in itertools.pairwise(spans):
            # Files of different buckets never share a user; files of one bucket must not overlap.
            if b1 == b2 and lo2 <= hi1:
                found.add(p2, "disjoint-users", f"user range overlaps {p1} in run {run} (bucket {b1})", run)
    for run, record in runs.items():
        if (files_per_run[run], rows_per_run[run]) != (record.files, record.rows):
            found.add(
                name,
                "run-record",
                f"run {run} records {record.files} files / {record.rows} rows, "
                f"found {files_per_run[run]} / {rows_per_run[run]}",
                run,
            )
    return FsckReport(len(runs), files, rows, size, tuple(found))


def _group_order(table: Table, found: _Findings) -> list[str]:
    raw = table.metadata.properties.get(GROUPS_PROPERTY)
    if raw:
        return raw.split(",")
    found.add(".".join(table.name()), "table-format", "table property seqlake.feature-groups is missing")
    return []


def check_files(files: list[LiveFile], full: bool = True, progress: Progress | None = None) -> FsckReport:
    """Check the live files of a table without seqlake footers (as its metadata lists them: an Iceberg
    manifest or the Delta log); the report lists every broken one (`runs` is 0: these tables have none)."""
    found = _Findings()
    unchecked: list[str] = []
    rows = size = 0
    if progress is not None:
        progress.set_total(len(files))
    for live in files:
        _check_plain_file(live, full, found.add, unchecked)
        rows, size = rows + (live.rows or 0), size + live.size
        if progress is not None:
            progress.add(rows=live.rows or 0, nbytes=live.size, steps=1)
    return FsckReport(0, len(files), rows, size, tuple(found), tuple(unchecked))


def _check_plain_file(live: LiveFile, full: bool, fail, unchecked: list[str]) -> None:
    fs, local = resolve_uri(live.uri)
    info = fs.get_file_info(local)
    if info.type == pa.fs.FileType.NotFound:
        fail(live.uri, "file-exists", "missing: the table's metadata lists it, the storage does not have it")
        return
    if info.size != live.size:
        fail(live.uri, "size", f"size {info.size} differs from the size its table's metadata records, {live.size}")
    try:
        with verified_file(fs, local, live.uri) as handle:
            meta = read_footer(handle)
            if live.rows is not None and meta.num_rows != live.rows:
                fail(
                    live.uri,
                    "row-count",
                    f"{meta.num_rows} rows in its footer, its table's metadata records {live.rows}",
                )
            if not full:
                return
            pages, with_crc = page_checksum_counts(handle, meta)
            if with_crc < pages:
                # Not damage (another writer, e.g. delta-rs's own), but pyarrow checks only the pages
                # that carry a CRC: a flip in the others would read as data. Reported, not a finding.
                unchecked.append(live.uri)
            parquet = open_verified(handle, metadata=meta)
            for group in range(meta.num_row_groups):
                parquet.read_row_group(group)
    except CorruptFileError as error:
        fail(live.uri, "readable", error.problem)
