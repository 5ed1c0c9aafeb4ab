"""Validate N demo payloads record by record (the reference, what ingest ran before) and with the
set-based SQL on DuckDB (and on Spark with --spark), and print records per second each way.

Nothing is written to the warehouse. Exit status 1 if the SQL's rows differ from the reference's;
times are reported, never checked.
"""

from __future__ import annotations

import click

from benchmarks.commands.common import finish, json_file_option, seed_option, step_log
from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import IntegerAtLeast


@click.command("bench-validate", help=__doc__)
@click.option("--records", type=IntegerAtLeast(1), default=1_000_000, show_default=True, help="Demo records validated.")
@click.option("--spark", "on_spark", is_flag=True, help="Also validate with the SQL on Spark (local mode).")
@seed_option(7)
@json_file_option
@common_options
def command(records: int, on_spark: bool, seed: int, json_file: str | None) -> int:
    from benchmarks.validation import format_report, run_validation_bench

    config = load_cli_config()
    spark = None
    if on_spark:
        from seqlake.engines.spark_session import spark_session

        spark = spark_session(config, "seqlake-bench-validate")
    with step_log("bench-validate") as log:
        bench = run_validation_bench(config, records=records, seed=seed, spark=spark, log=log)
    return finish(bench, format_report(bench), json_file, log=log)


main = job_main(command)

if __name__ == "__main__":
    script_main("bench-validate")
