"""Publish N windows as sorted runs and merge them with the DuckDB engine, once with the configured
size-tiered policy and once with the old capacity merge, and print the write amplification.

Each policy gets a namespace of its own in the configured warehouse (`<namespace>_<policy>`,
recreated on every run; nothing else is touched). Reports rows rewritten per row ingested (target:
<= 4 with the default policy over >= 100 windows) and the files a lookup opens. Exit status 1 if a
policy lost, duplicated or misplaced a row or a window.
"""

from __future__ import annotations

import click

from benchmarks.commands.common import finish, json_file_option, namespace_option, seed_option, step_log
from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import IntegerAtLeast


@click.command("bench-merge", help=__doc__)
@click.option("--windows", type=IntegerAtLeast(2), default=120, show_default=True, help="Windows published.")
@click.option(
    "--rows-per-window", type=IntegerAtLeast(1), default=2_000, show_default=True, help="History rows per window."
)
@click.option("--users", type=IntegerAtLeast(1), default=500, show_default=True, help="Distinct users.")
@namespace_option("bench_merge")
@seed_option(7)
@json_file_option
@common_options
def command(windows: int, rows_per_window: int, users: int, namespace: str, seed: int, json_file: str | None) -> int:
    from benchmarks.merge import format_report, run_merge_bench

    config = load_cli_config()
    with step_log("bench-merge") as log:
        bench = run_merge_bench(
            config,
            windows=windows,
            rows_per_window=rows_per_window,
            users=users,
            namespace=namespace,
            seed=seed,
            log=log,
        )
    return finish(bench, format_report(bench, config), json_file, log=log)


main = job_main(command)

if __name__ == "__main__":
    script_main("bench-merge")
