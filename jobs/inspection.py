"""Inspection commands, in the spirit of pyiceberg's CLI: `tables`, `describe`, `runs`, `files`.

They read catalog and table metadata only (and, for the Delta landing tables, DuckDB's view of their
log): nothing is written, and a warehouse that does not exist is reported, never created.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import click

from seqlake.cli import job_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import RUN_ID, TABLE_NAME
from seqlake.core.output import console, emit, fact, facts_table, iso_time, print_table

if TYPE_CHECKING:
    from pyiceberg.table import Table

    from seqlake.core.config import Config

DELTA_TABLES = ("landing_events", "quarantine")  # the landing tier (seqlake.pipelines.landing.tables)


def _time_ms(ms: int | None) -> str | None:
    return iso_time(datetime.fromtimestamp(ms / 1000, tz=UTC)) if ms is not None else None


def _size(nbytes: int | None) -> str:
    if nbytes is None:
        return ""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= scale:
            return f"{nbytes / scale:,.1f} {unit}"
    return f"{nbytes:,} B"


# -- reading ---------------------------------------------------------------------------------------


def iceberg_facts(table: Table) -> dict[str, Any]:
    """Rows, files, bytes and the current snapshot of an Iceberg table, from its metadata."""
    snapshot = table.current_snapshot()
    summary = snapshot.summary if snapshot is not None else None

    def total(key: str) -> int:
        return (
            int(summary.additional_properties[key])
            if summary is not None and key in summary.additional_properties
            else 0
        )

    return {
        "name": table.name()[-1],
        "format": "iceberg",
        "rows": total("total-records"),
        "files": total("total-data-files"),
        "bytes": total("total-files-size"),
        "snapshot_id": snapshot.snapshot_id if snapshot is not None else None,
        "updated": _time_ms(snapshot.timestamp_ms if snapshot is not None else None),
        "location": table.location(),
    }


def delta_location(config: Config, name: str) -> str:
    from seqlake.pipelines.landing.tables import landing_paths

    paths = landing_paths(config)
    return paths.events if name == "landing_events" else paths.quarantine


def delta_files(location: str) -> list[tuple[str, int]] | None:
    """(file, rows) of a Delta table's live files (DuckDB reads its log); None if there is no table."""
    from seqlake.engines.duckdb_session import lake_cursor

    try:
        with lake_cursor() as con:
            return con.execute(
                "SELECT filename, count(*) FROM delta_scan(?, filename = true) GROUP BY filename ORDER BY filename",
                [location],
            ).fetchall()
    except Exception:  # not a Delta table (yet): the landing tier is created by the first ingest
        return None


def delta_facts(config: Config, name: str) -> dict[str, Any] | None:
    from seqlake.tableformat.io import resolve_uri

    location = delta_location(config, name)
    files = delta_files(location)
    if files is None:
        return None
    fs, _ = resolve_uri(location)
    sizes = [info.size for info in fs.get_file_info([resolve_uri(path)[1] for path, _ in files])]
    return {
        "name": name,
        "format": "delta",
        "rows": sum(rows for _, rows in files),
        "files": len(files),
        "bytes": sum(size or 0 for size in sizes),
        "snapshot_id": None,
        "updated": None,
        "location": location,
    }


def iceberg_tables(config: Config) -> Iterator[Table]:
    from seqlake.engines.catalog import check_warehouse, open_catalog

    check_warehouse(config)
    catalog = open_catalog(config)
    for identifier in sorted(catalog.list_tables(config.warehouse.namespace)):
        yield catalog.load_table(identifier)


def load_iceberg(config: Config, name: str) -> Table:
    from seqlake.pipelines.tables import load_existing_table

    return load_existing_table(config, name)


# -- tables ----------------------------------------------------------------------------------------


@click.command("tables")
@common_options
def tables() -> None:
    """List the warehouse's tables: the Iceberg tables of the configured namespace (history, detail,
    raw source, training, quarantines) and the Delta landing tier, with rows, files, size and the
    current snapshot."""
    config = load_cli_config()
    found = [iceberg_facts(t) for t in iceberg_tables(config)]
    found += [facts for name in DELTA_TABLES if (facts := delta_facts(config, name)) is not None]
    document = {"warehouse": config.warehouse_uri(), "namespace": config.warehouse.namespace, "tables": found}

    def text() -> None:
        columns = ("name", "format", "rows", "files", "size", "snapshot", "updated")
        rows = [
            (t["name"], t["format"], fact(t["rows"]), fact(t["files"]), _size(t["bytes"]))
            + (t["snapshot_id"], t["updated"])
            for t in found
        ]  # counts as the report writes them (80,918); a snapshot id is an id, not a quantity
        numeric = (False, False, True, True, True, False, False)
        print_table(columns, rows, title=f"{config.warehouse_uri()} ({len(found)} tables)", numeric=numeric)

    emit(document, text)


# -- describe --------------------------------------------------------------------------------------


def _by_name(table: Table, field_id: int, transform: str) -> str:
    """A partition or sort field as people write it: `user_id`, `bucket[16](user_id)`, not field ids."""
    name = table.schema().find_column_name(field_id) or f"field {field_id}"
    return name if transform == "identity" else f"{transform}({name})"


def describe_iceberg(table: Table) -> dict[str, Any]:
    from seqlake.tableformat.registry import FORMAT_PROPERTY, live_runs

    metadata = table.metadata
    snapshot = table.current_snapshot()
    document = {
        **iceberg_facts(table),
        "table": ".".join(table.name()),
        "format_version": metadata.format_version,
        "schema": [
            {"id": f.field_id, "name": f.name, "type": str(f.field_type), "required": f.required}
            for f in table.schema().fields
        ],
        "partitioning": [_by_name(table, f.source_id, str(f.transform)) for f in table.spec().fields],
        "sort_order": [
            f"{_by_name(table, f.source_id, str(f.transform))} {f.direction.value} {f.null_order.value}"
            for f in table.sort_order().fields
        ],
        "properties": dict(sorted(metadata.properties.items())),
        "snapshots": len(metadata.snapshots),
        "current_snapshot": None
        if snapshot is None
        else {
            "id": snapshot.snapshot_id,
            "committed_at": _time_ms(snapshot.timestamp_ms),
            "operation": snapshot.summary.operation.value if snapshot.summary is not None else None,
            "summary": dict(snapshot.summary.additional_properties) if snapshot.summary is not None else {},
        },
    }
    if FORMAT_PROPERTY in metadata.properties:
        document["runs"] = len(live_runs(table))
    return document


def describe_delta(config: Config, name: str) -> dict[str, Any]:
    from seqlake.core.errors import SchemaError
    from seqlake.engines.duckdb_session import lake_cursor

    facts = delta_facts(config, name)
    if facts is None:
        raise SchemaError(f"the Delta table {name} does not exist at {delta_location(config, name)} (nothing landed)")
    with lake_cursor() as con:
        columns = con.execute("DESCRIBE SELECT * FROM delta_scan(?)", [facts["location"]]).fetchall()
    schema = [{"name": c[0], "type": c[1], "required": c[2] == "NO"} for c in columns]
    return {**facts, "table": name, "schema": schema}


@click.command("describe")
@click.argument("table", type=TABLE_NAME)
@common_options
def describe(table: str) -> None:
    """A table's schema, partitioning, sort order, properties and current snapshot (TABLE: a name in
    the configured namespace, or landing_events / quarantine for the Delta landing tier)."""
    config = load_cli_config()
    delta = table in DELTA_TABLES
    document = describe_delta(config, table) if delta else describe_iceberg(load_iceberg(config, table))

    def text() -> None:
        out = console()
        hidden = ("schema", "properties", "current_snapshot", "name")
        shown = {k: v for k, v in document.items() if k not in hidden and v is not None}
        shown["bytes"] = _size(document["bytes"])
        if shown.get("snapshot_id") is not None:
            shown["snapshot_id"] = str(shown["snapshot_id"])  # an id, not a quantity
        for key in ("partitioning", "sort_order"):
            if key in shown:
                shown[key] = ", ".join(shown[key]) or "-"
        out.print(facts_table(shown, title=document["table"]))
        print()
        print_table(
            [c for c in ("id", "name", "type", "required") if c in document["schema"][0]] if document["schema"] else [],
            [tuple(field.values()) for field in document["schema"]],
            title="schema",
        )
        if document.get("properties"):
            print()
            print_table(("property", "value"), document["properties"].items(), title="properties")
        current = document.get("current_snapshot")
        if current:
            print()
            facts = {
                "id": str(current["id"]),
                "committed_at": current["committed_at"],
                "operation": current["operation"],
            }
            out.print(facts_table({**facts, **current["summary"]}, title="current snapshot"))

    emit(document, text)


# -- runs and files --------------------------------------------------------------------------------


def _windows_span(windows: list[int]) -> str:
    if not windows:
        return "-"
    return f"{windows[0]}" if len(windows) == 1 else f"{windows[0]}..{windows[-1]} ({len(windows)})"


@click.command("runs")
@click.option("--table", default="history", show_default=True, type=TABLE_NAME, help="History table name.")
@common_options
def runs(table: str) -> None:
    """The live sorted runs of a history table, oldest first: id, kind (window, batch or merge), the
    windows it holds, its files and rows."""
    from seqlake.pipelines.tables import load_history_table
    from seqlake.tableformat.registry import live_runs

    history = load_history_table(load_cli_config(), table)
    records = list(live_runs(history).values())
    document = {
        "table": ".".join(history.name()),
        "runs": [
            {"run_id": r.run_id, "kind": r.kind, "windows": r.windows, "files": r.files, "rows": r.rows}
            for r in records
        ],
    }

    def text() -> None:
        rows = [(r.run_id, r.kind, _windows_span(r.windows), r.files, r.rows) for r in records]
        total = sum(r.rows for r in records)
        title = f"{document['table']}: {len(records)} live runs, {total:,} rows"
        print_table(("run", "kind", "windows", "files", "rows"), rows, title=title)

    emit(document, text)


@click.command("files")
@click.option("--table", default="history", show_default=True, type=TABLE_NAME, help="Table name.")
@click.option("--run", "run_id", type=RUN_ID, help="Only the files of this live run (history tables).")
@common_options
def files(table: str, run_id: str | None) -> None:
    """The data files of a table's current snapshot: path, run (history tables), partition, rows and
    size; `--run` keeps one run's files."""
    from seqlake.core.errors import SchemaError, UnknownRunError
    from seqlake.tableformat.registry import FORMAT_PROPERTY, live_runs, run_id_of_path

    loaded = load_iceberg(load_cli_config(), table)
    history = FORMAT_PROPERTY in loaded.metadata.properties
    if run_id is not None:
        if not history:
            raise SchemaError(f"--run: table {'.'.join(loaded.name())} is not a history table (it has no runs)")
        known = live_runs(loaded)
        if run_id not in known:
            raise UnknownRunError(
                f"run {run_id} is not live in {'.'.join(loaded.name())} (live runs: {', '.join(known) or 'none'})"
            )
    found: list[dict[str, Any]] = []
    for task in loaded.scan().plan_files():
        data = task.file
        run = run_id_of_path(data.file_path) if history else None
        if run_id is not None and run != run_id:
            continue
        partition = {field.name: data.partition[i] for i, field in enumerate(loaded.spec().fields)}
        found.append(
            {
                "path": data.file_path,
                "run_id": run,
                "partition": partition,
                "rows": data.record_count,
                "bytes": data.file_size_in_bytes,
            }
        )
    found.sort(key=lambda f: f["path"])
    document = {"table": ".".join(loaded.name()), "run_id": run_id, "files": found}

    def text() -> None:
        columns = ["path", "run", "partition", "rows", "size"] if history else ["path", "partition", "rows", "size"]
        rows = []
        for f in found:
            partition = ", ".join(f"{k}={v}" for k, v in f["partition"].items())
            row = [f["path"], f["run_id"], partition, f["rows"], _size(f["bytes"])]
            rows.append(row if history else [row[0], *row[2:]])
        total = sum(f["rows"] for f in found)
        title = f"{document['table']}{f' run {run_id}' if run_id else ''}: {len(found)} files, {total:,} rows"
        print_table(columns, rows, title=title)

    emit(document, text)


tables_main = job_main(tables)
describe_main = job_main(describe)
runs_main = job_main(runs)
files_main = job_main(files)
