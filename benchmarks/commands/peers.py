"""Measure seqlake's point lookups against RocksDB, DuckDB over Iceberg and a memory-mapped Arrow
IPC copy, side by side on one data set; print QPS, CPU time, bytes read, on-disk size and each
target's ratio (met or not met).

Builds every system in a temporary folder (removed afterwards; the configured warehouse is not
touched). Every answer is compared across systems first; exit status 1 if any differs. Times are
wall clock on a possibly shared machine: compare the ratios, not the absolute times.
"""

from __future__ import annotations

from pathlib import Path

import click

from benchmarks.commands.common import data_option, finish, json_file_option, step_log
from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config

SCALES = ("medium", "small")  # benchmarks.peers.SCALES


@click.command("bench-peers", help=__doc__)
@click.option("--scale", type=click.Choice(SCALES), default="small", show_default=True, help="Data set size.")
@data_option
@json_file_option
@click.option(
    "--plots",
    type=click.Path(file_okay=False, path_type=Path),
    help="Write PNG plots (QPS by length and columns) here.",
)
@common_options
def command(scale: str, shape: str, json_file: str | None, plots: Path | None) -> int:
    from benchmarks.peers import format_report, plot, run_peers_bench

    with step_log("bench-peers") as log:
        bench = run_peers_bench(scale, load_cli_config(), progress=log, shape=shape)
    written = {"plot": [str(path) for path in plot(bench, plots)]} if plots else None
    return finish(bench, format_report(bench), json_file, files=written, log=log)


main = job_main(command)

if __name__ == "__main__":
    script_main("bench-peers")
