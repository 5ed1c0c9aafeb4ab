"""Check every invariant of the history table; list every broken file and invariant, exit 1 if any.

With --repair-plan, also say which runs hold broken files, which windows they cover, where each
window's events can be rebuilt from (the landing tier, or the detail table's retained events), and the
commands to run.

Checking the history table, it also checks the files of every other table seqlake writes (detail, raw
source, training, samples, backfills, quarantines, the landing tier): each exists with the size and
row count its Iceberg manifest or Delta log records, every page carries a CRC and reads back with it
verified (--quick: sizes and footers only). It reports every table (the landing tier included) that
holds live rows of a forgotten user from before the forget, with the `seqlake forget` command that
removes them.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import TABLE_NAME
from seqlake.core.errors import SeqlakeError
from seqlake.core.invocation import command_options
from seqlake.core.output import emit

if TYPE_CHECKING:
    from seqlake.core.config import Config
    from seqlake.tableformat.fsck import Finding
    from seqlake.tableformat.registry import RunRecord

DETAIL = "history_detail"


@dataclass(frozen=True)
class WindowSource:
    window: int
    landing: bool  # the landing tier still holds the window's events
    detail: bool  # the detail table retains the window's events


def _windows(record: RunRecord) -> list[int]:
    return list(record.windows)  # the exact set the run holds


def window_sources(config: Config, windows: list[int]) -> list[WindowSource]:
    """Where each window's events still are: landing rows (Delta) and detail rows (Iceberg)."""
    from pyiceberg.expressions import EqualTo

    from seqlake.engines.duckdb_session import lake_cursor
    from seqlake.pipelines.landing.tables import landing_paths
    from seqlake.pipelines.tables import load_existing_table

    landed: set[int] = set()
    try:
        with lake_cursor() as con:
            rows = con.execute(
                "SELECT DISTINCT window_id FROM delta_scan(?) WHERE window_id BETWEEN ? AND ?",
                [landing_paths(config).events, min(windows), max(windows)],
            ).fetchall()
        landed = {w for (w,) in rows}
    except Exception:  # no landing tier (or an unreadable one): rebuild from detail only
        landed = set()
    detail = None
    with contextlib.suppress(SeqlakeError):
        detail = load_existing_table(config, DETAIL)
    sources = []
    for window in windows:
        retained = detail is not None and any(detail.scan(row_filter=EqualTo("window_id", window)).plan_files())
        sources.append(WindowSource(window, window in landed, retained))
    return sources


def _closed_without_end_of_stream(config: Config) -> set[int]:
    from seqlake.pipelines.landing.tables import landing_paths
    from seqlake.pipelines.landing.windows import landed_windows

    try:
        return set(landed_windows(landing_paths(config)).closed())
    except Exception:  # no landing tier (or an unreadable one): nothing is closed by a watermark
        return set()


# What rewrites a table without runs when one of its files is broken (its name -> the line's advice).
def _rewrite_advice(name: str) -> str:
    if name.startswith("samples_") and name != "samples_quarantine":
        return f"seqlake samples --tenant {name.removeprefix('samples_')} rewrites the whole table"
    if name == "samples_quarantine":
        return "seqlake samples --tenant TENANT rewrites each tenant's rows"
    if name.startswith("backfill_") and not name.startswith("backfill_pointers_"):
        return f"seqlake backfill --labels FILE --tenant {name.removeprefix('backfill_')} rewrites it from the labels"
    if name.startswith(("training_", "fatrow_")):
        return "its rows were logged at capture and cannot be rebuilt from the lake: restore the file from a copy"
    if name == "raw_events":
        return "restore the file from a copy, or import its source records again into a new raw table"
    if name in ("landing_events", "quarantine"):
        return "restore the file from a copy; windows already published are in history and history_detail"
    return "restore the file from a copy (no seqlake command rebuilds it)"


def other_table_plan(name: str, findings: list[Finding]) -> list[str]:
    """The plan for a table without sorted runs: its broken files and what rewrites them."""
    files = sorted({f.path for f in findings})
    lines = [f"repair plan: table {name}: {len(files)} broken file(s)"]
    lines += [f"  file {path}" for path in files]
    lines.append(f"    then: {_rewrite_advice(name)}")
    return lines


def other_tables(config: Config, quick: bool) -> list[tuple[str, Any]]:
    """(name, FsckReport) of every table besides history: the namespace's Iceberg tables and the
    landing tier; a table whose metadata cannot be read is a report with one finding."""
    from pyiceberg.exceptions import NoSuchNamespaceError

    from seqlake.engines.catalog import open_catalog, table_identifier
    from seqlake.pipelines.landing.live_files import delta_live_files
    from seqlake.pipelines.landing.tables import landing_paths
    from seqlake.tableformat.fsck import Finding, FsckReport, check_files
    from seqlake.tableformat.registry import FORMAT_PROPERTY
    from seqlake.tableformat.verified_scan import live_files

    catalog = open_catalog(config)
    try:
        names = sorted(identifier[-1] for identifier in catalog.list_tables(config.warehouse.namespace))
    except NoSuchNamespaceError:
        names = []
    reports = []
    for name in names:
        if name == "history":
            continue
        try:
            table = catalog.load_table(table_identifier(config, name))
            if FORMAT_PROPERTY in table.metadata.properties:
                continue  # another history table: `seqlake fsck --table NAME` checks its runs
            files = live_files(table)
        except Exception as error:  # unreadable metadata is a finding, not a crash
            what = " ".join(str(error).split())[:300] or type(error).__name__
            reports.append((name, FsckReport(0, 0, 0, 0, (Finding(name, "table-metadata", what),))))
            continue
        reports.append((name, check_files(files, full=not quick)))
    paths = landing_paths(config)
    for name, location in (("landing_events", paths.events), ("quarantine", paths.quarantine)):
        try:
            found = delta_live_files(location)
            if found is None:
                continue  # nothing landed yet
            _, files = found
        except Exception as error:
            what = " ".join(str(error).split())[:300] or type(error).__name__
            reports.append((name, FsckReport(0, 0, 0, 0, (Finding(name, "table-metadata", what),))))
            continue
        reports.append((name, check_files(files, full=not quick)))
    return reports


def repair_plan_lines(config: Config, table, findings: list[Finding], options: str = "") -> list[str]:
    """Lines of the plan: per damaged run, its windows, their sources and the commands to run, in order
    (with `options`, the --config and --profile fsck ran with, repeated in each). `seqlake compact`
    rebuilds the `history` table only."""
    from seqlake.tableformat.registry import live_runs

    name = table.name()[-1]
    table_option = "" if name == "history" else f" --table {name}"
    runs = live_runs(table)
    damaged: dict[str, int] = {}
    for finding in findings:
        if finding.run_id is not None:
            damaged[finding.run_id] = damaged.get(finding.run_id, 0) + 1
    if not damaged:
        return ["repair plan: no run holds a broken file; the findings are in the table's metadata"]
    lines = [f"repair plan: rebuild {len(damaged)} run(s) whose files are broken"]
    closed = _closed_without_end_of_stream(config)
    for run_id, count in sorted(damaged.items()):
        record = runs.get(run_id)
        if record is None:
            lines.append(f"  run {run_id}: not a recorded live run ({count} finding(s)): remove its files")
            continue
        windows = _windows(record)
        lines.append(f"  run {run_id} ({record.kind}, windows {windows[0]}..{windows[-1]}): {count} finding(s)")
        # compact publishes only windows outside every live run: the damaged run's record goes first.
        lines.append(f"    first: seqlake drop-run{options}{table_option} --run {run_id}")
        rebuild, from_detail = [], []
        for source in window_sources(config, windows):
            if source.landing:
                rebuild.append(source.window)
                lines.append(f"    window {source.window}: rebuild from landing")
            elif source.detail:
                from_detail.append(source.window)
                lines.append(f"    window {source.window}: rebuild from detail (its landing rows are gone)")
            else:
                lines.append(f"    window {source.window}: no landing or detail rows left: re-ingest its source")
        if rebuild:
            # A window published at the end of the stream is still open by the watermark.
            end = " --end-of-stream" if set(rebuild) - closed else ""
            windows_option = " ".join(f"--window {w}" for w in rebuild)
            lines.append(f"    then: seqlake compact{options} {windows_option}{end}")
        if from_detail:
            windows_option = " ".join(f"--window {w}" for w in from_detail)
            lines.append(f"    then: seqlake compact{options} --from-detail {windows_option}")
        lines.append(f"    then: seqlake fsck{options}{table_option}")
    return lines


@click.command("fsck", help=__doc__)
@click.option("--table", default="history", show_default=True, type=TABLE_NAME, help="History table name.")
@click.option("--quick", is_flag=True, help="Metadata and footers only: skip re-reading rows (order, checksum).")
@click.option("--repair-plan", is_flag=True, help="Say which runs and windows to rebuild, from where and how.")
@common_options
def command(table: str, quick: bool, repair_plan: bool) -> int:
    from seqlake.core.errors import SchemaError
    from seqlake.engines.catalog import check_warehouse, table_identifier
    from seqlake.pipelines.compaction.publication_check import publication_findings
    from seqlake.pipelines.forget.leftovers import forgotten_findings
    from seqlake.pipelines.landing.tables import landing_paths
    from seqlake.pipelines.tables import load_history_table
    from seqlake.tableformat.fsck import check_table

    config = load_cli_config()
    identifier = table_identifier(config, table)
    check_warehouse(config, f"table {identifier}")  # nothing to check there: one line, exit 1
    try:
        history = load_history_table(config, table)
    except SchemaError:
        raise  # no such table, or not a history table: one line, exit 1
    except Exception as error:  # a catalog or metadata file that cannot be read is a finding, not a crash
        what = " ".join(str(error).split())[:300] or type(error).__name__
        return _report(identifier, [f"{identifier}: [catalog] cannot load the table: {what}"], None, [], {})
    from seqlake.core.progress import Progress

    progress = Progress("fsck", measure="steps", rows_unit="rows", steps_unit="files", show_bytes=True)
    report = check_table(history, full=not quick, progress=progress)
    progress.done()
    findings = [str(f) for f in report.findings]
    plan = repair_plan_lines(config, history, list(report.findings), command_options()) if repair_plan else []
    if not findings and table == "history":
        findings = [f"{identifier}: {finding}" for finding in publication_findings(history, landing_paths(config))]
    forgotten = forgotten_findings(config, landing_paths(config), command_options()) if table == "history" else []
    findings += [str(f) for f in forgotten]
    facts: dict[str, Any] = {"runs": report.runs, "files": report.files, "rows": report.rows, "bytes": report.bytes}
    plan = plan if report.findings else []
    others = other_tables(config, quick) if table == "history" else []
    other_found = [f for _, other in others for f in other.findings]
    findings += [str(f) for f in other_found]
    if repair_plan:
        plan += [line for name, other in others if other.findings for line in other_table_plan(name, other.findings)]
    if others:
        facts["tables"] = [
            {
                "table": name,
                "ok": not other.findings,
                "files": other.files,
                "rows": other.rows,
                "bytes": other.bytes,
                "files_without_page_checksums": len(other.unchecked),
            }
            for name, other in others
        ]
    found = [*report.findings, *forgotten, *other_found]
    found = found if len(found) == len(findings) else []  # publication findings are lines alone
    return _report(identifier, findings, found, plan, facts)


def _report(identifier: str, lines: list[str], findings, plan: list[str], facts: dict[str, Any]) -> int:
    """Print what fsck found (findings on stderr, the plan on stdout; or one JSON document); the exit status."""
    ok = not lines
    document = {
        "table": identifier,
        "ok": ok,
        **facts,
        "findings": [asdict(f) for f in findings] if findings else [{"message": line} for line in lines],
        "repair_plan": plan,
    }

    def text() -> None:
        for line in lines:
            print(f"seqlake fsck: BROKEN: {line}", file=sys.stderr)
        for line in plan:
            print(line)
        if ok:
            print(
                f"{identifier}: OK: {facts['runs']} runs, {facts['files']} files, {facts['rows']:,} rows, "
                f"{facts['bytes'] / 2**20:,.1f} MiB"
            )
            for other in facts.get("tables", []):
                unchecked = other["files_without_page_checksums"]
                caveat = f" ({unchecked} without page checksums: damage there is not seen)" if unchecked else ""
                print(
                    f"  {other['table']}: OK: {other['files']} files, {other['rows']:,} rows, "
                    f"{other['bytes'] / 2**20:,.1f} MiB{caveat}"
                )
        elif findings:
            files = len({f.path for f in findings})
            print(f"seqlake fsck: {len(findings)} finding(s) in {files} file(s) or table(s)", file=sys.stderr)

    emit(document, text)
    return 0 if ok else 1


main = job_main(command)

if __name__ == "__main__":
    script_main("fsck")
