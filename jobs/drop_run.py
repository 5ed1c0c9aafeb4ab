"""Remove a damaged run from a history table, so that its windows can be compacted again.

One Iceberg commit takes the run's record out of the run registry and its files out of the current
snapshot; its windows are then unpublished, and `seqlake compact --window W` rebuilds each from the
landing tier (what `seqlake fsck --repair-plan` tells you to run). The files stay on disk for older
snapshots (time travel) until snapshots are expired. A run that is not live is refused.
"""

from __future__ import annotations

import re
from argparse import ArgumentTypeError

from seqlake.catalog import load_history_table
from seqlake.cli_args import ArgumentParser, table_name
from seqlake.config import load_config
from seqlake.errors import SeqlakeError
from tableformat.registry import commit_runs, files_of_runs, live_runs

_RUN_ID = re.compile(r"[a-z][a-z0-9]{0,63}")


def run_id(text: str) -> str:
    """A run id as seqlake writes them (w<window>, b<first>t<last>n<count>, m...)."""
    if not _RUN_ID.fullmatch(text):
        raise ArgumentTypeError(f"{text!r} is not a run id (e.g. w491000; `seqlake fsck --repair-plan` names them)")
    return text


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="seqlake drop-run", description=__doc__)
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument("--table", default="history", type=table_name, help="history table name (default: history)")
    parser.add_argument("--run", required=True, type=run_id, help="the run to remove (as fsck names it)")
    args = parser.parse_args(argv)
    table = load_history_table(load_config(args.config), args.table)
    runs = live_runs(table)
    record = runs.get(args.run)
    if record is None:
        known = ", ".join(sorted(runs)) or "none"
        raise SeqlakeError(f"run {args.run} is not a live run of {'.'.join(table.name())} (live runs: {known})")
    files = len(files_of_runs(table, {args.run}))
    commit_runs(table, [], replaces=[args.run], snapshot_properties={"seqlake.operation": "drop-runs"})
    windows = list(record.windows)
    rebuild = "seqlake compact " + " ".join(f"--window {w}" for w in windows)
    print(
        f"dropped run {args.run} ({record.kind}, {len(windows)} window(s) {windows[0]}..{windows[-1]}, "
        f"{files} file(s)); rebuild its windows: {rebuild}"
    )
    return 0
