"""Drop detail rows no pointer needs: the windows older than `layout.detail_retention_windows`
(counted back from the newest published window) and older than the oldest open window that any
training pointer still references, removed in one Iceberg commit of the detail table (whole
partitions: no file is rewritten). The storage report counts only live detail afterwards; the
files are gone from storage once `seqlake maintain` expires the snapshots that hold them.

The same step is the first of `seqlake maintain` (and of `seqlake compact --maintain`).
"""

from __future__ import annotations

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import IntegerAtLeast
from seqlake.core.output import emit


@click.command("gc", help=__doc__)
@click.option(
    "--retention-windows",
    type=IntegerAtLeast(1),
    help="Keep this many windows back from the newest published one (default: layout.detail_retention_windows).",
)
@common_options
def command(retention_windows: int | None) -> None:
    from seqlake.pipelines.compaction.plan import history_tables
    from seqlake.pipelines.maintenance.steps import detail_keep_from, drop_detail_windows, user_tables

    config = load_cli_config()
    if retention_windows is not None:
        layout = config.layout.model_copy(update={"detail_retention_windows": retention_windows})
        config = config.model_copy(update={"layout": layout})
    history, detail = history_tables(config)
    pointers = user_tables(config, besides=(history.name()[-1], detail.name()[-1]))
    keep_from = detail_keep_from(config, history, pointers)
    report = drop_detail_windows(detail, keep_from)
    emit({"keep_from_window": keep_from, "step": report}, report.line())


main = job_main(command)

if __name__ == "__main__":
    script_main("gc")
