"""Ingest the same batch for users with 0 and with 10^5 prior events; report the time ratio (target <= 1.2).

Builds two setups in the configured warehouse (catalog namespaces <namespace>_a and <namespace>_b,
recreated on every run; nothing else in the warehouse is touched), then ingests the identical raw
batch into each through the real ingest path, interleaved. Prints median times and their ratio B/A,
the bytes written to landing (must be equal), and every access to history files during ingest, seen
by the kernel (must be none). Exit status 1 if a deterministic check fails; the ratio is reported,
never checked: times are wall clock on a possibly shared machine.
"""

from __future__ import annotations

import click

from benchmarks.commands.common import finish, json_file_option, namespace_option, seed_option, step_log
from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import IntegerAtLeast


@click.command("bench-ingest", help=__doc__)
@click.option("--users", type=IntegerAtLeast(1), default=20, show_default=True, help="Users in the batch.")
@click.option("--records-per-user", type=IntegerAtLeast(1), default=1000, show_default=True, help="Events per user.")
@click.option(
    "--prior-events", type=IntegerAtLeast(0), default=100_000, show_default=True, help="Prior events per user in B."
)
@click.option(
    "--landing-prior",
    type=IntegerAtLeast(0),
    default=1000,
    show_default=True,
    help="Of those, events still in landing (an open window); the rest is published history.",
)
@click.option("--history-runs", type=IntegerAtLeast(1), default=4, show_default=True, help="Published runs of history.")
@click.option("--repeats", type=IntegerAtLeast(1), default=5, show_default=True, help="Timed ingests per setup.")
@click.option("--warmup", type=IntegerAtLeast(0), default=1, show_default=True, help="Untimed ingests per setup first.")
@namespace_option("bench_ingest")
@seed_option(7)
@json_file_option
@common_options
def command(
    users: int,
    records_per_user: int,
    prior_events: int,
    landing_prior: int,
    history_runs: int,
    repeats: int,
    warmup: int,
    namespace: str,
    seed: int,
    json_file: str | None,
) -> int:
    if landing_prior > prior_events:
        raise click.UsageError(f"--landing-prior ({landing_prior}) exceeds --prior-events ({prior_events})")
    from benchmarks.ingest import format_report, run_ingest_bench
    from seqlake.engines.spark_session import spark_session

    config = load_cli_config()
    spark = spark_session(config, "seqlake-bench-ingest")
    with step_log("bench-ingest") as log:
        bench = run_ingest_bench(
            spark,
            config,
            namespace=namespace,
            users=users,
            records_per_user=records_per_user,
            prior_events=prior_events,
            landing_prior=landing_prior,
            history_runs=history_runs,
            repeats=repeats,
            warmup=warmup,
            seed=seed,
            log=log,
        )
    return finish(bench, format_report(bench), json_file, log=log)


main = job_main(command)

if __name__ == "__main__":
    script_main("bench-ingest")
