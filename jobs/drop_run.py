"""Remove a damaged run from a history table, so that its windows can be compacted again.

One Iceberg commit takes the run's record out of the run registry and its files out of the current
snapshot; its windows are then unpublished, and `seqlake compact --window W` rebuilds each from the
landing tier (what `seqlake fsck --repair-plan` tells you to run). The files stay on disk for older
snapshots (time travel) until snapshots are expired. A run that is not live is refused.
"""

from __future__ import annotations

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import RUN_ID, TABLE_NAME
from seqlake.core.errors import UnknownRunError
from seqlake.core.output import emit


@click.command("drop-run", help=__doc__)
@click.option("--run", "run_id", required=True, type=RUN_ID, help="The run to remove (as fsck names it).")
@click.option("--table", default="history", show_default=True, type=TABLE_NAME, help="History table name.")
@common_options
def command(run_id: str, table: str) -> None:
    from seqlake.pipelines.tables import load_history_table
    from seqlake.tableformat.registry import commit_runs, files_of_runs, live_runs

    history = load_history_table(load_cli_config(), table)
    runs = live_runs(history)
    record = runs.get(run_id)
    if record is None:
        known = ", ".join(sorted(runs)) or "none"
        raise UnknownRunError(f"run {run_id} is not a live run of {'.'.join(history.name())} (live runs: {known})")
    files = len(files_of_runs(history, {run_id}))
    snapshot = commit_runs(history, [], replaces=[run_id], snapshot_properties={"seqlake.operation": "drop-runs"})
    windows = list(record.windows)
    rebuild = "seqlake compact " + " ".join(f"--window {w}" for w in windows)
    document = {
        "table": ".".join(history.name()),
        "run_id": run_id,
        "kind": record.kind,
        "windows": windows,
        "files": files,
        "snapshot_id": snapshot,
        "rebuild": rebuild,
    }
    emit(
        document,
        f"dropped run {run_id} ({record.kind}, {len(windows)} window(s) {windows[0]}..{windows[-1]}, "
        f"{files} file(s)); rebuild its windows: {rebuild}",
    )


main = job_main(command)

if __name__ == "__main__":
    script_main("drop-run")
