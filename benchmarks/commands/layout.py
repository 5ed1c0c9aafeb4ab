"""Measure candidate Parquet layouts of a history file side by side and print a markdown table.

Every metric is also given as a ratio to the default layout (seqlake.tableformat.layout.DEFAULT_POLICY with
key-only statistics, 64 KiB pages). Bytes are counted exactly; times are medians of interleaved
repeats on a possibly shared machine: compare the ratios, not the absolute times.
"""

from __future__ import annotations

from pathlib import Path

import click

from benchmarks.commands.common import seed_option
from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import IntegerAtLeast
from seqlake.core.output import emit


@click.command("bench-layout", help=__doc__)
@click.option("--users", type=IntegerAtLeast(1), default=3000, show_default=True, help="Users in the file.")
@click.option(
    "--heavy-users", type=IntegerAtLeast(0), default=3, show_default=True, help="Users with exactly --heavy-rows rows."
)
@click.option("--heavy-rows", type=IntegerAtLeast(1), default=20_000, show_default=True, help="Rows of a heavy user.")
@click.option("--repeats", type=IntegerAtLeast(1), default=3, show_default=True, help="Timing repeats.")
@click.option(
    "--lookups", type=IntegerAtLeast(1), default=200, show_default=True, help="Users looked up per timed pass."
)
@seed_option(1)
@click.option("--out", metavar="FILE.md", help="Also write the table to this file.")
@common_options
def command(
    users: int, heavy_users: int, heavy_rows: int, repeats: int, lookups: int, seed: int, out: str | None
) -> None:
    if heavy_users > users:
        raise click.UsageError(f"--heavy-users must be between 0 and --users ({users}), got {heavy_users}")
    from benchmarks.layout import format_table, run_layout_bench
    from benchmarks.machine import MachineLoad

    load = MachineLoad()
    rows = run_layout_bench(
        users=users,
        heavy_users=heavy_users,
        heavy_rows=heavy_rows,
        seed=seed,
        repeats=repeats,
        lookups=lookups,
        config=load_cli_config(),
    )
    table = f"{format_table(rows)}\n\n{load.close().line()}"
    if out:
        Path(out).write_text(table + "\n")
    emit({"layouts": rows, "machine": load.to_dict()}, table)


main = job_main(command)

if __name__ == "__main__":
    script_main("bench-layout")
