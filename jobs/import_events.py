"""Import event files (Parquet, CSV, JSON lines, .dat) into the raw source table, mapped by a YAML mapping.

Each input file gets its own source partition(s), numbered after those the table already holds, with
LSNs 0..n-1 in arrival order; all inputs land in one commit, which the standard ingest then validates,
quarantines and lands (`seqlake ingest`). The commit records the digest of the inputs and the mapping:
importing the same files with the same mapping again is a no-op unless --force. Usable as
`seqlake import`.

An event without an id column gets the hash of its content as its id, so an event imported twice
(with --force, or in two files that overlap) counts once. The commit records the hash's scheme, and
a table keeps the scheme of its first import: a table imported into before schemes were recorded
keeps scheme 1, whose ids are computed in Python, slower than DuckDB's (scheme 2).

A CSV or .dat line that cannot be read (not UTF-8, longer than the mapping's max_line_bytes, the wrong number
of fields, a header line given header: false) becomes a record that ingest quarantines as
unreadable_line, its text kept; the summary names each by its line number and reason, and counts
every record it knows ingest will quarantine, events without a usable time included. An empty file
imports nothing, with a warning.

A file with events outside the configured event times (`events.min_event_time` ..
`events.max_event_time`) is refused, with how many and their range, since ingest would quarantine
them: widen the bounds, or pass --allow-out-of-range to import it as it is (those events are then
quarantined as event_ts_out_of_range, and the summary names them).
"""

from __future__ import annotations

import functools
import gc
import hashlib
import struct
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import TABLE_NAME, IntegerAtLeast
from seqlake.core.errors import SeqlakeError
from seqlake.core.invocation import command_options
from seqlake.core.output import emit

if TYPE_CHECKING:
    from pyiceberg.table import Table

IMPORT_PROPERTY = "seqlake.import.digest"
SHOWN_LINES = 10  # unreadable lines the text summary names (JSON: up to `files.NAMED_LINES`)


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


def import_summaries(table: Table) -> list[tuple[int, dict[str, str]]]:
    """(snapshot id, summary properties) of the table's import commits, oldest first."""
    found = []
    for snapshot in sorted(table.snapshots(), key=lambda s: (s.sequence_number or 0, s.timestamp_ms)):
        summary = snapshot.summary
        if summary is not None and IMPORT_PROPERTY in summary.additional_properties:
            found.append((snapshot.snapshot_id, dict(summary.additional_properties)))
    return found


def previous_import(table: Table, digest: str) -> int | None:
    """Snapshot id of an earlier commit of the same import, if any."""
    for snapshot_id, properties in import_summaries(table):
        if properties[IMPORT_PROPERTY] == digest:
            return snapshot_id
    return None


def next_free_partition(table: Table) -> int:
    """One past the highest source partition in the table (0 when empty), from file metadata."""
    import pyarrow.compute as pc

    field_id = table.schema().find_field("source_partition").field_id
    highest = -1
    for task in table.scan().plan_files():
        bound = (task.file.upper_bounds or {}).get(field_id)
        if bound is None:  # no column metrics: read the column of this file
            column = table.scan(selected_fields=("source_partition",)).to_arrow().column("source_partition")
            return int(pc.max(column).as_py() or -1) + 1
        highest = max(highest, struct.unpack("<i", bound[:4])[0])
    return highest + 1


def _fmt_ms(value: int | None, iso: bool = False) -> str | None:
    from seqlake.pipelines.importers.files import format_ms

    if value is None:
        return None if iso else "-"
    return format_ms(value, iso)


@click.command("import", help=__doc__)
@click.option("--mapping", required=True, help="Import mapping YAML, or the name of one in conf/mappings/ (e.g. otto).")
@click.option(
    "--input",
    "inputs",
    required=True,
    multiple=True,
    type=click.Path(path_type=Path),
    help="Event file to import (repeat for several).",
)
@click.option("--table", default="raw_events", show_default=True, type=TABLE_NAME, help="Raw source table.")
@click.option("--batch-rows", type=IntegerAtLeast(1), default=65536, show_default=True, help="Records per batch.")
@click.option("--force", is_flag=True, help="Import even if these files were imported before.")
@click.option(
    "--allow-out-of-range",
    is_flag=True,
    help="Import a file with events outside the configured event times (ingest quarantines them).",
)
@common_options
def command(
    mapping: str, inputs: tuple[Path, ...], table: str, batch_rows: int, force: bool, allow_out_of_range: bool
) -> None:
    from seqlake.core.progress import Progress
    from seqlake.engines.catalog import open_catalog, table_identifier
    from seqlake.pipelines.importers import ImportStats, import_file, load_mapping, mapping_digest
    from seqlake.pipelines.importers.commit import RawFiles
    from seqlake.pipelines.importers.ids import SCHEME_PROPERTY, table_scheme
    from seqlake.pipelines.ingest.raw_source import create_raw_table

    # The modules just loaded hold most of the process's objects: the collector's full passes, which
    # the progress display's allocations trigger while records stream, need not walk them again.
    gc.freeze()
    config = load_cli_config()
    chosen = load_mapping(mapping)
    chosen.check(config, str(mapping))
    for path in inputs:
        if not path.is_file():
            raise SeqlakeError(f"input {path}: no such file")
    catalog = open_catalog(config)
    identifier = table_identifier(config, table)
    raw = create_raw_table(catalog, identifier)
    digest = import_digest(list(inputs), mapping_digest(chosen))
    earlier = previous_import(raw, digest)
    if earlier is not None and not force:
        document = {"table": identifier, "already_imported": True, "snapshot_id": earlier, "records": 0}
        emit(
            document, f"already imported into {identifier} (snapshot {earlier}); nothing to do (--force imports again)"
        )
        return

    first = next_free_partition(raw)
    scheme = table_scheme(properties for _, properties in import_summaries(raw))
    stats = [ImportStats() for _ in inputs]

    progress = Progress("import", rows_unit="records", show_bytes=True)
    properties = {
        IMPORT_PROPERTY: digest,
        "seqlake.import.files": ",".join(p.name for p in inputs),
        SCHEME_PROPERTY: str(scheme),
    }
    written = RawFiles(raw, progress)
    try:
        for index, path in enumerate(inputs):
            mark = written.mark()
            records = import_file(
                path,
                chosen,
                config,
                batch_rows,
                first_partition=first + index * chosen.source_partitions,
                stats=stats[index],
                allow_out_of_range=allow_out_of_range,
                id_scheme=scheme,
                restart=functools.partial(written.rollback, mark),  # written as they come, while in order
            )
            for batch in records:
                written.write(batch)
        result = written.commit(properties)
    except BaseException:
        written.abort()
        raise
    seconds = progress.done()
    files = []
    lines = []
    for path, stat in zip(inputs, stats, strict=True):
        partitions = sorted(stat.partitions)
        span = f"{partitions[0]}..{partitions[-1]}" if partitions else "-"
        rows_in = stat.rows + stat.unreadable
        if not rows_in:
            what = "an empty file" if path.stat().st_size == 0 else "no events in it"
            print(f"seqlake import: warning: {path}: {what}: nothing imported from it", file=sys.stderr)
        files.append(
            {
                "input": str(path),
                "rows_in": rows_in,  # = records + skipped
                "events": stat.rows,
                "records": stat.records,
                "partitions": partitions,
                "unreadable": stat.unreadable,
                "unreadable_lines": [{"line": n, "reason": r} for n, r in stat.unreadable_lines],
                "no_time": stat.no_time,
                "quarantined": stat.quarantined,  # of the records: what ingest will quarantine, known now
                "skipped": stat.skipped,
                "first_event": _fmt_ms(stat.min_event_ms, iso=True),
                "last_event": _fmt_ms(stat.max_event_ms, iso=True),
                "out_of_range": stat.out_of_range,
                "first_out_of_range": _fmt_ms(stat.min_out_of_range_ms, iso=True),
                "last_out_of_range": _fmt_ms(stat.max_out_of_range_ms, iso=True),
            }
        )
        lines.append(
            f"{path.name}: {stat.rows:,} events read, {stat.records:,} records (partitions {span}), "
            f"{stat.unreadable:,} unreadable lines, {stat.no_time:,} without a usable time, {stat.skipped:,} skipped; "
            f"event time {_fmt_ms(stat.min_event_ms)} .. {_fmt_ms(stat.max_event_ms)} UTC"
        )
        if stat.unreadable_lines:
            named = "; ".join(f"line {n:,}: {reason}" for n, reason in stat.unreadable_lines[:SHOWN_LINES])
            more = stat.unreadable - min(len(stat.unreadable_lines), SHOWN_LINES)
            lines.append(
                f"{path.name}: unreadable: {named}"
                + (f" (and {more:,} more; --output json names up to 1,000)" if more else "")
            )
        if stat.quarantined or stat.skipped:
            lines.append(
                f"{path.name}: {rows_in:,} rows in = {stat.records - stat.quarantined:,} records to validate + "
                f"{stat.quarantined:,} ingest quarantines (unreadable, without a usable time or out of range) + "
                f"{stat.skipped:,} skipped"
            )
        if stat.out_of_range:
            lines.append(
                f"{path.name}: {stat.out_of_range:,} events outside the configured event times, from "
                f"{_fmt_ms(stat.min_out_of_range_ms)} to {_fmt_ms(stat.max_out_of_range_ms)} UTC: "
                "ingest quarantines them as event_ts_out_of_range (--allow-out-of-range)"
            )
    lines.append(
        f"imported {result.records:,} records into {identifier} in {int(result.files > 0)} commit(s) "
        f"(snapshot {result.snapshot_id}); next: seqlake ingest{command_options()} --source {table}"
    )
    document = {
        "table": identifier,
        "already_imported": False,
        "snapshot_id": result.snapshot_id,
        "records": result.records,
        "commits": int(result.files > 0),
        "id_scheme": scheme,
        "files": files,
        "seconds": round(seconds, 3),
    }
    emit(document, "\n".join(lines))


main = job_main(command)

if __name__ == "__main__":
    script_main("import")
