"""Import event files (Parquet, CSV, JSON lines, .dat) into the raw source table, mapped by a YAML mapping.

Each input file gets its own source partition(s), numbered after those the table already holds, with
LSNs 0..n-1 in arrival order; all inputs land in one commit, which the standard ingest then validates,
quarantines and lands (`seqlake ingest`). The commit records the digest of the inputs and the mapping:
importing the same files with the same mapping again is a no-op unless --force. Usable as
`seqlake import`.
"""

from __future__ import annotations

import hashlib
import struct
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from pyiceberg.table import Table

from pipelines.importers import ImportStats, import_file, load_mapping, mapping_digest
from pipelines.raw_landing import create_raw_table, land_raw_records
from seqlake.catalog import open_catalog, table_identifier
from seqlake.cli_args import ArgumentParser, integer_at_least, table_name
from seqlake.config import load_config
from seqlake.errors import SeqlakeError
from seqlake.progress import Progress

IMPORT_PROPERTY = "seqlake.import.digest"
ONE_COMMIT = 1 << 62


class _Tagged:
    """The raw table, with the import's digest recorded in the snapshot each append commits."""

    def __init__(self, table: Table, properties: dict[str, str]) -> None:
        self._table = table
        self._properties = properties

    def append(self, df: pa.Table) -> None:
        self._table.append(df, snapshot_properties=self._properties)

    def __getattr__(self, name: str):
        return getattr(self._table, name)


def import_digest(inputs: list[Path], mapping_sha: str) -> str:
    """SHA-256 over the mapping's digest and every input file's bytes, in order."""
    digest = hashlib.sha256(mapping_sha.encode())
    for path in inputs:
        file_digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                file_digest.update(block)
        digest.update(file_digest.digest())
    return digest.hexdigest()


def previous_import(table: Table, digest: str) -> int | None:
    """Snapshot id of an earlier commit of the same import, if any."""
    for snapshot in table.snapshots():
        summary = snapshot.summary
        if summary is not None and summary.additional_properties.get(IMPORT_PROPERTY) == digest:
            return snapshot.snapshot_id
    return None


def next_free_partition(table: Table) -> int:
    """One past the highest source partition in the table (0 when empty), from file metadata."""
    field_id = table.schema().find_field("source_partition").field_id
    highest = -1
    for task in table.scan().plan_files():
        bound = (task.file.upper_bounds or {}).get(field_id)
        if bound is None:  # no column metrics: read the column of this file
            column = table.scan(selected_fields=("source_partition",)).to_arrow().column("source_partition")
            return int(pc.max(column).as_py() or -1) + 1
        highest = max(highest, struct.unpack("<i", bound[:4])[0])
    return highest + 1


def _fmt_ms(value: int | None) -> str:
    if value is None:
        return "-"
    return datetime.fromtimestamp(value / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M:%S")


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="seqlake import", description=__doc__)
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument(
        "--mapping", required=True, help="import mapping YAML, or the name of one in conf/mappings/ (e.g. otto)"
    )
    parser.add_argument(
        "--input", required=True, action="append", type=Path, help="event file to import (repeat for several)"
    )
    parser.add_argument("--table", default="raw_events", type=table_name, help="raw source table (default: raw_events)")
    parser.add_argument(
        "--batch-rows", type=integer_at_least(1), default=65536, help="records per batch (default: 65536)"
    )
    parser.add_argument("--force", action="store_true", help="import even if these files were imported before")
    args = parser.parse_args(argv)

    config = load_config(args.config)
    mapping = load_mapping(args.mapping)
    mapping.check(config, str(args.mapping))
    for path in args.input:
        if not path.is_file():
            raise SeqlakeError(f"input {path}: no such file")
    catalog = open_catalog(config)
    identifier = table_identifier(config, args.table)
    table = create_raw_table(catalog, identifier)
    digest = import_digest(args.input, mapping_digest(mapping))
    earlier = previous_import(table, digest)
    if earlier is not None and not args.force:
        print(f"already imported into {identifier} (snapshot {earlier}); nothing to do (--force imports again)")
        return 0

    first = next_free_partition(table)
    stats = [ImportStats() for _ in args.input]

    def batches() -> Iterator[pa.RecordBatch]:
        for index, path in enumerate(args.input):
            yield from import_file(
                path,
                mapping,
                config,
                args.batch_rows,
                first_partition=first + index * mapping.source_partitions,
                stats=stats[index],
            )

    progress = Progress("import")
    properties = {IMPORT_PROPERTY: digest, "seqlake.import.files": ",".join(p.name for p in args.input)}
    result = land_raw_records(_Tagged(table, properties), batches(), progress, commit_rows=ONE_COMMIT)
    progress.done()
    for path, stat in zip(args.input, stats, strict=True):
        partitions = sorted(stat.partitions)
        span = f"{partitions[0]}..{partitions[-1]}" if partitions else "-"
        print(
            f"{path.name}: {stat.rows:,} events read, {stat.records:,} records (partitions {span}), "
            f"{stat.unreadable:,} unreadable lines, {stat.skipped:,} skipped; "
            f"event time {_fmt_ms(stat.min_event_ms)} .. {_fmt_ms(stat.max_event_ms)} UTC"
        )
    print(
        f"imported {result.records:,} records into {identifier} in {result.commits} commit(s) "
        f"(snapshot {result.snapshot_id}); next: seqlake ingest --source {args.table}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
