"""Measure multi-user reads (`histories`) and the history cache side by side; print the ratios.

Builds a history table in a temporary warehouse (removed afterwards; the configured warehouse is not
touched): a few thousand users with heavy-tailed history lengths in several sorted runs. Then, in one
run: N users through `histories` against N x `read_user` (time ratio; opens, reads and bytes counted),
verified reads against unverified ones, the same SQL through `seqlake sql`'s verified history view
and through plain DuckDB (cost ratio), and a Zipf-skewed lookup workload through `HistoryReader` and
`CachedHistoryReader` (hit rate, speed-up). Every fast-path result is compared with the plain one; exit
status 1 if any differs.
Times are wall clock on a possibly shared machine: compare the ratios, not the absolute times.
"""

from __future__ import annotations

import click

from benchmarks.commands.common import data_option, finish, json_file_option, seed_option, step_log
from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import IntegerAtLeast, NumberAbove


@click.command("bench-reads", help=__doc__)
@click.option("--users", type=IntegerAtLeast(1), default=3000, show_default=True, help="Users in the table.")
@click.option("--heavy-users", type=IntegerAtLeast(0), default=3, show_default=True, help="Users at --heavy-rows.")
@click.option("--heavy-rows", type=IntegerAtLeast(1), default=20_000, show_default=True, help="Longest history.")
@click.option("--runs", type=IntegerAtLeast(1), default=3, show_default=True, help="Sorted runs.")
@click.option("--multi-users", type=IntegerAtLeast(1), default=256, show_default=True, help="Users per histories().")
@click.option(
    "--lookups", type=IntegerAtLeast(1), default=2000, show_default=True, help="Lookups of the cache workload."
)
@click.option(
    "--zipf", type=NumberAbove(0, strict=True), default=1.1, show_default=True, help="Zipf exponent of lookups."
)
@click.option(
    "--cache-mib",
    type=NumberAbove(0, strict=False),
    multiple=True,
    help="A cache bound to measure, MiB (repeatable; default: 64, 4 and 0); 0 caches nothing and shows what "
    "the file index alone gives.",
)
@click.option("--repeats", type=IntegerAtLeast(1), default=3, show_default=True, help="Timed multi-user repeats.")
@click.option("--workers", type=IntegerAtLeast(1), default=4, show_default=True, help="histories() threads.")
@seed_option(1)
@data_option
@click.option("--out", metavar="FILE.md", help="Also write the report to this file.")
@json_file_option
@common_options
def command(
    users: int,
    heavy_users: int,
    heavy_rows: int,
    runs: int,
    multi_users: int,
    lookups: int,
    zipf: float,
    cache_mib: tuple[float, ...],
    repeats: int,
    workers: int,
    seed: int,
    shape: str,
    out: str | None,
    json_file: str | None,
) -> int:
    if heavy_users > users:
        raise click.UsageError(f"--heavy-users ({heavy_users}) exceeds --users ({users})")
    if multi_users > users:
        raise click.UsageError(f"--multi-users ({multi_users}) exceeds --users ({users})")
    from benchmarks.reads import format_report, run_read_bench

    with step_log("bench-reads") as log:
        bench = run_read_bench(
            load_cli_config(),
            users=users,
            heavy_users=heavy_users,
            heavy_rows=heavy_rows,
            runs=runs,
            multi_users=multi_users,
            lookups=lookups,
            zipf_s=zipf,
            cache_bytes=[int(mib * 2**20) for mib in cache_mib or (64.0, 4.0, 0.0)],
            repeats=repeats,
            max_workers=workers,
            seed=seed,
            log=log,
            shape=shape,
        )
    return finish(bench, format_report(bench), json_file, report_file=out, log=log)


main = job_main(command)

if __name__ == "__main__":
    script_main("bench-reads")
