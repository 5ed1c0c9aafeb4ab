"""Check every invariant of the history table; list every broken file and invariant, exit 1 if any.

With --repair-plan, also say which runs hold broken files, which windows they cover, where each
window's events can be rebuilt from (the landing tier, or the detail table's retained events), and the
commands to run.
"""

from __future__ import annotations

import contextlib
import sys
from dataclasses import dataclass

from pipelines.landing import landing_paths
from pipelines.publication_check import landing_windows, publication_findings
from seqlake.catalog import load_existing_table, load_history_table, table_identifier
from seqlake.cli_args import ArgumentParser, table_name
from seqlake.config import Config, load_config
from seqlake.errors import SchemaError, SeqlakeError
from tableformat.fsck import Finding, FsckReport, check_table
from tableformat.registry import RunRecord, live_runs

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

    from pipelines.landing import landing_paths
    from seqlake.duckdb_session import connect

    landed: set[int] = set()
    try:
        with connect(extensions=("delta",)) as con:
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
    try:
        return set(landing_windows(landing_paths(config)).closed())
    except Exception:  # no landing tier (or an unreadable one): nothing is closed by a watermark
        return set()


def repair_plan(config: Config, table, findings: list[Finding], config_file: str | None = None) -> list[str]:
    """Lines of the plan: per damaged run, its windows, their sources and the commands to run, in order
    (with `--config FILE` when fsck had one). `seqlake compact` rebuilds the `history` table only."""
    options = f" --config {config_file}" if config_file else ""
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


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="seqlake fsck", description=__doc__)
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument("--table", default="history", type=table_name, help="history table name (default: history)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="metadata and footers only: skip re-reading rows (order, checksum)",
    )
    parser.add_argument(
        "--repair-plan", action="store_true", help="say which runs and windows to rebuild, from where and how"
    )
    args = parser.parse_args(argv)
    config = load_config(args.config)
    identifier = table_identifier(config, args.table)
    try:
        table = load_history_table(config, args.table)
    except SchemaError:
        raise  # a user mistake (no such table, not a history table): one line, exit 2
    except Exception as error:  # a catalog or metadata file that cannot be read is a finding, not a crash
        what = " ".join(str(error).split())[:300] or type(error).__name__
        print(f"seqlake fsck: BROKEN: {identifier}: [catalog] cannot load the table: {what}", file=sys.stderr)
        return 1
    report: FsckReport = check_table(table, full=not args.quick)
    for finding in report.findings:
        print(f"seqlake fsck: BROKEN: {finding}", file=sys.stderr)
    if args.repair_plan and report.findings:
        for line in repair_plan(config, table, list(report.findings), args.config):
            print(line)
    if report.findings:
        files = len({f.path for f in report.findings})
        print(f"seqlake fsck: {len(report.findings)} finding(s) in {files} file(s) or table(s)", file=sys.stderr)
        return 1
    if args.table == "history":
        findings = publication_findings(table, landing_paths(config))
        for finding in findings:
            print(f"seqlake fsck: BROKEN: {identifier}: {finding}", file=sys.stderr)
        if findings:
            return 1
    print(
        f"{identifier}: OK: {report.runs} runs, {report.files} files, {report.rows:,} rows, "
        f"{report.bytes / 2**20:,.1f} MiB"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
