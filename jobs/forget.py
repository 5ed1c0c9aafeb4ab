"""Forget users: remove every row of the given users from the landing tier, the history table and
every table that holds a `user_id` (detail, quarantines, each tenant's training, fat-row and samples
tables), one commit per table that holds them; print the rows removed per table, then check that
none is left. Each request is recorded in the `forget_audit` table: who asked (--by), which users,
when, and the rows each table held of them (a killed forget, run again, completes the same record).

Every table records the request (`seqlake.forgets`): a job that read before it and commits after it
leaves the users out. The replaced files stay on disk while older snapshots reference them: the next
`seqlake maintain` expires every snapshot from before the forget whatever keep_snapshots says, once
older than the snapshot retention, and removes the orphan files; right away with `seqlake maintain
--snapshot-retention-hours 0 --orphan-safety-hours 0 --landing-retention-hours 0`. Running forget
again is a no-op; a forget killed half way, run again, ends where an unkilled one ends.

Before removing anything a forget leaves a tombstone that every later ingest honours: the users' raw
records up to what the warehouse and the raw source held then never land, pending or replayed. The
audit, the tombstones and (once maintain seals them) the tables' forget records keep the users only as
keyed hashes ($SEQLAKE_FORGET_KEY, the lake's secret); `--check USER` proves from the hash that the
user was forgotten (exit 1 when not).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import LANDING_ENGINE_HELP, EngineChoice, IntegerAtLeast
from seqlake.core.output import emit

if TYPE_CHECKING:
    from seqlake.core.config import Engine


@click.command("forget", help=__doc__)
@click.option(
    "--user",
    "users",
    type=IntegerAtLeast(0),
    multiple=True,
    help="A user id (repeat for more).",
)
@click.option("--check", "check", type=IntegerAtLeast(0), help="Prove that this user was forgotten; remove nothing.")
@click.option("--skip-landing", is_flag=True, help="Leave the landing tier (Delta) as it is.")
@click.option("--engine", type=EngineChoice(), help=LANDING_ENGINE_HELP)
@click.option("--by", "requested_by", help="Who asks, for the audit (default: $SEQLAKE_ACTOR, else the OS user).")
@common_options
def command(
    users: tuple[int, ...], check: int | None, skip_landing: bool, engine: Engine | None, requested_by: str | None
) -> None:
    from seqlake.core.config import resolve_engine
    from seqlake.pipelines.forget.remove import forget_users
    from seqlake.pipelines.landing.tables import landing_tier
    from seqlake.pipelines.tables import HISTORY, load_existing_table

    if (check is None) == (not users):
        raise click.UsageError("give --user (repeat for more) or --check USER")
    config = load_cli_config()
    load_existing_table(config, HISTORY)  # a warehouse without history is a mistake, not a new lake
    landing = None
    if not skip_landing:
        chosen_engine = "duckdb" if check is not None else resolve_engine(engine or config.layout.ingest_engine)
        landing = landing_tier(config, chosen_engine, "seqlake-forget")
    if check is not None:
        _check(config, check, landing)
        return
    from seqlake.core.progress import Progress

    progress = Progress("forget", measure="steps", rows_unit="rows", steps_unit="tables")
    reports = forget_users(config, list(users), landing=landing, progress=progress, requested_by=requested_by)
    progress.done()
    total = sum(r.removed for r in reports)
    chosen = sorted(set(users))
    lines = [r.line() for r in reports]
    lines.append(f"forget: {total:,} rows of {len(chosen)} user(s) removed; none left in the tables searched")
    if skip_landing:
        lines.append("forget: the landing tier was not searched (--skip-landing)")
    document = {
        "users": chosen,
        "rows_removed": total,
        "tables": reports,
        "landing_searched": not skip_landing,
    }
    emit(document, "\n".join(lines))


def _check(config, user: int, landing) -> None:
    from seqlake.core.errors import SeqlakeError
    from seqlake.pipelines.forget.check import check_forgotten

    proof = check_forgotten(config, user, landing)
    document = {
        "user": user,
        "forgotten": proof.forgotten,
        "requests": proof.requests,
        "rows_left": sum(proof.rows_left.values()),
        "rows_left_by_table": proof.rows_left,
        "raw_records_left": proof.raw_left,
        "tombstone_partitions": proof.tombstone_partitions,
    }
    if not proof.requests:
        raise SeqlakeError(f"forget --check: user {user}: no forget request names this user's keyed hash")
    if not proof.forgotten:
        left = ", ".join(f"{name}: {rows:,}" for name, rows in sorted(proof.rows_left.items())) or "none"
        raise SeqlakeError(
            f"forget --check: user {user}: not forgotten yet (request(s) unfinished or rows left: {left}); "
            f"run seqlake forget --user {user}"
        )
    requests = ", ".join(f"{r['forget_id']} by {r['requested_by']}, done {r['done_at']}" for r in proof.requests)
    raw = (
        f"; {proof.raw_left:,} raw source record(s) wait for seqlake maintain"
        if proof.raw_left
        else "; raw source clean"
    )
    emit(
        document,
        f"forget --check: user {user} forgotten (request {requests}): no row left in any table or the landing "
        f"tier; tombstone on {proof.tombstone_partitions} source partition(s){raw}",
    )


main = job_main(command)

if __name__ == "__main__":
    script_main("forget")
