"""Compact the same events spread over N closed windows (N = 1 .. 200) and print the cost curve.

Each N gets a namespace of its own in the configured warehouse (`<namespace>_n<N>`, recreated on
every run; nothing else is touched). Reports seconds per N, the ratio to N = 1 (target: <= 2x at the
largest N) and, for small N, the time of compacting one window per pass. Exit status 1 if any run
did not publish every event exactly once; times are reported, never checked.
"""

from __future__ import annotations

import click

from benchmarks.commands.common import finish, json_file_option, namespace_option, seed_option, step_log
from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import IntegerAtLeast

SCALES = ("medium", "small")  # benchmarks.compaction.SCALES


@click.command("bench-compact", help=__doc__)
@click.option(
    "--scale",
    type=click.Choice(SCALES),
    default="medium",
    show_default=True,
    help="small: 4K events, N = 1, 5, 20; medium: 100K events, N = 1, 10, 50, 200.",
)
@click.option("--events", type=IntegerAtLeast(100), help="Override the scale's event count.")
@namespace_option("bench_compact")
@seed_option(7)
@json_file_option
@common_options
def command(scale: str, events: int | None, namespace: str, seed: int, json_file: str | None) -> int:
    from benchmarks.compaction import SCALES as sizes
    from benchmarks.compaction import format_report, run_compaction_bench
    from seqlake.engines.spark_session import spark_session

    config = load_cli_config()
    default_events, windows = sizes[scale]
    spark = spark_session(config, "seqlake-bench-compact")
    with step_log("bench-compact") as log:
        bench = run_compaction_bench(
            spark,
            config,
            events=events or default_events,
            window_counts=windows,
            namespace=namespace,
            seed=seed,
            log=log,
        )
    return finish(bench, format_report(bench), json_file, log=log)


main = job_main(command)

if __name__ == "__main__":
    script_main("bench-compact")
