"""Import, ingest and compact a Taobao-shaped event file on each engine, beside the floor; print the ratios.

The file is generated (wide hashed ids, Zipf users and items, bursty sessions over 9 days, 216 hourly
windows) in a temporary folder, with a warehouse of its own per engine (the configured one is not
touched). Each step (`seqlake import`, `ingest`, `compact --end-of-stream`, `fsck`) runs as its own
process: its seconds, events/s, peak RSS and ratio to the floor, the same work done by DuckDB in one
statement (read the CSV, drop duplicates, group by user, item and window with the merge operators, sort,
write zstd Parquet). Exit status 1 if an engine's history differs from the floor's groups. Times are
wall clock on a possibly shared machine: compare the ratios.
"""

from __future__ import annotations

from pathlib import Path

import click

from benchmarks.commands.common import finish, json_file_option, seed_option, step_log
from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import IntegerAtLeast

SCALES = ("small", "medium", "large")  # benchmarks.pipeline.SCALES
ENGINES = ("duckdb", "spark")


@click.command("bench-pipeline", help=__doc__)
@click.option(
    "--scale",
    "scales",
    type=click.Choice(SCALES),
    multiple=True,
    help="small: 10^5 events; medium: 10^6; large: 10^7 (repeatable: growth between scales is reported; "
    "default: small).",
)
@click.option(
    "--engine",
    "engines",
    type=click.Choice(ENGINES),
    multiple=True,
    help="Engine of ingest and compaction (repeatable; default: both).",
)
@click.option("--events", type=IntegerAtLeast(1000), help="Override the event count of a single --scale.")
@click.option(
    "--work-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Folder for the generated file and the warehouses (default: the system's temporary folder).",
)
@click.option("--plots", type=click.Path(file_okay=False, path_type=Path), help="Write a PNG plot to this folder.")
@seed_option(7)
@json_file_option
@common_options
def command(
    scales: tuple[str, ...],
    engines: tuple[str, ...],
    events: int | None,
    work_dir: Path | None,
    plots: Path | None,
    seed: int,
    json_file: str | None,
) -> int:
    from benchmarks.pipeline import format_report, plot, run_pipeline_bench

    with step_log("bench-pipeline") as log:
        bench = run_pipeline_bench(
            load_cli_config(), scales or ("small",), engines or ENGINES, seed, events, work_dir, log
        )
    files = {"plot": [str(p) for p in plot(bench, plots)]} if plots else None
    return finish(bench, format_report(bench), json_file, files=files, log=log)


main = job_main(command)

if __name__ == "__main__":
    script_main("bench-pipeline")
