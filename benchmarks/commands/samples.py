"""Measure training samples rebuilt from pointers against reading fat rows; print the ratios.

Builds a lake at a realistic shape in a temporary warehouse (the configured one is not touched):
histories log-uniform in length, one day of requests captured hour by hour while the day's events
are published, some of them late. Then, in one run and per tenant: the samples job in-process (and
on Spark at the tiny and small scales, or with --spark), a pyarrow and a DuckDB scan of the fat-row
table holding the same samples, bytes read, storage, capture rate and exactness. Exit status 1 if
any sample differs from its fat row or between engines. Times are wall clock on a possibly shared
machine: compare ratios.
"""

from __future__ import annotations

import click

from benchmarks.commands.common import data_option, finish, json_file_option, seed_option, step_log
from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config

SCALES = ("medium", "small", "tiny")  # benchmarks.samples.SCALES


@click.command("bench-samples", help=__doc__)
@click.option(
    "--scale",
    type=click.Choice(SCALES),
    default="small",
    show_default=True,
    help="tiny: the smallest check of every answer; small: a minute-long check; medium: about 300 users, "
    "histories of 10^3 to 2*10^4 events.",
)
@click.option(
    "--spark/--no-spark",
    "with_spark",
    default=None,
    help="Also run the samples job on Spark (local mode) and compare its samples and time.  "
    "[default: tiny and small only]",
)
@seed_option(1)
@data_option
@json_file_option
@common_options
def command(scale: str, with_spark: bool | None, seed: int, shape: str, json_file: str | None) -> int:
    from benchmarks.samples import format_report, run_samples_bench

    with step_log("bench-samples") as log:
        bench = run_samples_bench(load_cli_config(), scale, seed, log=log, shape=shape, with_spark=with_spark)
    return finish(bench, format_report(bench), json_file, log=log)


main = job_main(command)

if __name__ == "__main__":
    script_main("bench-samples")
