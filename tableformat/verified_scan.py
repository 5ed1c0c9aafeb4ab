"""Tables as Arrow datasets whose every read is verified: what `seqlake sql`, `Lake.sql` and `Lake.table`
query as `history` and as every other table of the warehouse.

DuckDB's Parquet reader checks no page checksums, so a flipped bit in a history file would be served
as data. The SQL session's `history` view therefore reads the table's current snapshot through
pyarrow's dataset scanner (DuckDB pushes its projections and filters into it) with every page's CRC
checked as it is decoded, the check seqlake's own reader makes. When the scan is built, every live
file must be the one its manifest lists (its size) and a file seqlake wrote whose footer is intact
(`seqlake.tableformat.verified.check_footer`: the layout digest over the schema and the pruning statistics).
The footer checked is the one pyarrow keeps and prunes by. Files whose columns differ from the
current schema (written before a migration) read through their `seqlake.tableformat.evolution` projection.

The other tables (detail, raw source, training, samples, backfills, quarantines, the Delta landing
tier) are written by pyiceberg, Spark or pyarrow with a CRC on every page too, but carry no seqlake
footer. `table_scan` and `files_scan` read them the same way and check, when the scan is built, what
their metadata records of each file: its size (the manifest's `file_size_in_bytes`, the Delta log's
`size`) and its row count (`record_count`, Delta's `numRecords`) against the footer's. A replaced or
truncated file fails that; a damaged page fails its CRC when it is decoded. Their footers have no digest:
a flipped row-group statistic that still parses is what this does not catch (see SPEC.md).

A damaged page surfaces in DuckDB as an arrow_scan error that names no file: `find_damage` then
verifies the live files one by one and returns the error that names the table, the file and what is
wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
from pyiceberg.conversions import from_bytes
from pyiceberg.table import Table
from pyiceberg.types import PrimitiveType

from seqlake.core.errors import CorruptFileError, SeqlakeError
from seqlake.tableformat.evolution import Projection, UnknownFieldId, known_field_ids, projection, select_list
from seqlake.tableformat.io import resolve_uri
from seqlake.tableformat.schema import history_read_schema
from seqlake.tableformat.verified import (
    DAMAGE,
    check_footer,
    check_size,
    describe,
    open_verified,
    table_of,
    verified_file,
    verified_footer,
)

VERIFIED_FORMAT = ds.ParquetFileFormat(
    default_fragment_scan_options=ds.ParquetFragmentScanOptions(page_checksum_verification=True)
)


@dataclass(frozen=True)
class LiveFile:
    uri: str
    size: int  # the manifest's
    users: tuple[int, int] | None = None  # the manifest's user_id bounds (what lookups prune files by)
    rows: int | None = None  # the manifest's (or Delta log's) row count, checked against the footer's
    seqlake_file: bool = True  # a history file: its footer must carry seqlake's metadata and digest
    partition: ds.Expression | None = None  # a Delta file's partition values (in the log, not the file)


@dataclass(frozen=True)
class Part:
    """Files that read alike: one dataset, and the select list that turns its columns into the table's."""

    name: str  # the relation it is registered as
    data: ds.Dataset | pa.Table
    select: list[str]


@dataclass
class VerifiedScan:
    table: str
    parts: list[Part]
    files: list[LiveFile]

    def view_sql(self) -> str:
        """The SELECT a view of the whole table runs (the parts' rows, each as the current columns)."""
        return " UNION ALL ".join(f"SELECT {', '.join(p.select)} FROM {p.name}" for p in self.parts)

    def find_damage(self) -> CorruptFileError | None:
        """The first live file with a damaged page, footer or size, or None. Every file is read again
        (a file verified before may have been damaged since): this runs only after a scan failed."""
        for live in self.files:
            try:
                verify_file(live)
            except CorruptFileError as error:
                return error
        return None


def _quoted(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def history_scan(table: Table, sql_types: dict[pa.DataType, str], prefix: str = "seqlake_history") -> VerifiedScan:
    """The verified scan of `table`'s current snapshot; CorruptFileError if a live file is not what
    its manifest lists (size, seqlake footer, layout digest). `sql_types` names each Arrow type of the
    table's columns as DuckDB spells it (for the columns a file predates, and widened ones)."""
    target, loose = history_read_schema(table)
    return table_scan(table, sql_types, target, loose, prefix, seqlake_files=True)


def table_scan(
    table: Table,
    sql_types: dict[pa.DataType, str],
    target: pa.Schema,
    loose: frozenset[str],
    prefix: str,
    seqlake_files: bool = False,
) -> VerifiedScan:
    """The verified scan of any Iceberg table's current snapshot, read as the columns `target` (files
    of older schemas through their projection); CorruptFileError if a live file's size or row count is
    not its manifest's (and, with `seqlake_files`, its footer not seqlake's)."""
    name = ".".join(table.name()[1:]) or "history"
    files = live_files(table, seqlake_files, with_users="user_id" in target.names)
    return files_scan(files, target, sql_types, prefix, loose, known_field_ids(table), name)


def live_files(table: Table, seqlake_files: bool = False, with_users: bool = True) -> list[LiveFile]:
    """The current snapshot's data files as its manifests list them (size, rows, user_id bounds)."""
    name = ".".join(table.name()[1:])
    files: list[LiveFile] = []
    user_field = (
        table.schema().find_field("user_id") if with_users and "user_id" in table.schema().column_names else None
    )
    if table.metadata.current_snapshot_id is None:
        return files
    for task in table.scan().plan_files():
        data_file = task.file
        if task.delete_files:
            raise SeqlakeError(f"table {name}: {data_file.file_path} has row-level deletes, which seqlake never writes")
        users = None
        if user_field is not None:
            low = (data_file.lower_bounds or {}).get(user_field.field_id)
            high = (data_file.upper_bounds or {}).get(user_field.field_id)
            if low is not None and high is not None:
                user_type = cast(PrimitiveType, user_field.field_type)  # user_id is a long
                users = (int(from_bytes(user_type, low)), int(from_bytes(user_type, high)))
        size, rows = data_file.file_size_in_bytes, data_file.record_count
        files.append(LiveFile(data_file.file_path, size, users, rows, seqlake_file=seqlake_files))
    return files


def files_scan(
    files: list[LiveFile],
    target: pa.Schema,
    sql_types: dict[pa.DataType, str],
    prefix: str,
    loose: frozenset[str] = frozenset(),
    known: frozenset[tuple[str, int]] | None = None,
    name: str = "",
    project: bool = True,
) -> VerifiedScan:
    """The verified scan of `files` (each checked against what its table's metadata records of it),
    grouped by how their columns project onto `target` by field id. Without `project` (Delta, whose
    files carry no field ids and whose partition values are in the log), one dataset of `target`'s
    columns, matched by name as delta-rs reads them."""
    if not project:
        fragments = [_fragment(live)[0] for live in files]
        if not fragments:
            return VerifiedScan(name, [Part(f"{prefix}_0", target.empty_table(), ["*"])], files)
        dataset = ds.FileSystemDataset(fragments, target, VERIFIED_FORMAT, fragments[0].filesystem)
        return VerifiedScan(name, [Part(f"{prefix}_0", dataset, ["*"])], files)
    groups: dict[tuple, tuple[Projection, pa.Schema, list[ds.Fragment]]] = {}
    for live in files:
        fragment, meta = _fragment(live)
        file_schema = meta.schema.to_arrow_schema()
        try:
            found = projection(file_schema, target, loose, known)
        except UnknownFieldId as error:
            raise CorruptFileError(table_of(live.uri), live.uri, str(error)) from None
        key = (found.identity, tuple(found.sources.items()), tuple((n, str(f.type)) for n, f in found.fields.items()))
        groups.setdefault(key, (found, file_schema, []))[2].append(fragment)
    parts = []
    for i, (found, file_schema, fragments) in enumerate(groups.values()):
        columns = [file_schema.field(s) for s in dict.fromkeys(found.sources.values()) if s is not None]
        schema = target if found.identity else pa.schema(columns)
        dataset = ds.FileSystemDataset(fragments, schema, VERIFIED_FORMAT, fragments[0].filesystem)
        select = select_list(found, target.names, sql_types=sql_types, quote=_quoted)
        parts.append(Part(f"{prefix}_{i}", dataset, select))
    if not parts:  # no files: the table's columns, no rows
        parts.append(Part(f"{prefix}_0", target.empty_table(), [_quoted(c) for c in target.names]))
    return VerifiedScan(name, parts, files)


def _fragment(live: LiveFile) -> tuple[ds.ParquetFileFragment, pq.FileMetaData]:
    """The file as a dataset fragment whose footer is checked (the one pyarrow keeps and prunes its row
    groups by), with the manifest's user_id bounds as its guarantee: a lookup skips the whole file,
    as seqlake's reader does (`seqlake.tableformat.lookup_index.FileIndex`)."""
    fs, path = resolve_uri(live.uri)
    table = table_of(live.uri)
    try:
        info = fs.get_file_info(path)
        if info.type == pa.fs.FileType.NotFound:
            raise CorruptFileError(table, live.uri, "missing (the file does not exist)")
        check_size(info.size, live.size, live.uri)
        guarantee = None
        if live.users is not None:
            guarantee = (ds.field("user_id") >= live.users[0]) & (ds.field("user_id") <= live.users[1])
        if live.partition is not None:
            guarantee = live.partition if guarantee is None else guarantee & live.partition
        fragment = VERIFIED_FORMAT.make_fragment(path, fs, guarantee, file_size=live.size)
        fragment.ensure_complete_metadata()
        meta = check_footer(fragment.metadata, live.uri, seqlake_file=live.seqlake_file)
        check_rows(meta.num_rows, live.rows, live.uri)
    except CorruptFileError:
        raise
    except DAMAGE as error:
        raise CorruptFileError(table, live.uri, describe(error)) from error
    return fragment, meta


def check_rows(actual: int, expected: int | None, uri: str) -> None:
    """CorruptFileError unless the footer counts the rows its table's metadata records (when known)."""
    if expected is not None and actual != expected:
        raise CorruptFileError(
            table_of(uri), uri, f"{actual} rows in its footer, the table's metadata records {expected} (replaced?)"
        )


def verify_file(live: LiveFile) -> None:
    """Read every page of a live file with its checksum checked; CorruptFileError if any fails."""
    fs, path = resolve_uri(live.uri)
    with verified_file(fs, path, live.uri) as handle:
        meta = verified_footer(handle, live.uri, size=live.size, seqlake_file=live.seqlake_file)
        check_rows(meta.num_rows, live.rows, live.uri)
        parquet = open_verified(handle, metadata=meta)
        for group in range(meta.num_row_groups):
            parquet.read_row_group(group)
