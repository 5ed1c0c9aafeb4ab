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
    required=True,
    help="A user id (repeat for more).",
)
@click.option("--skip-landing", is_flag=True, help="Leave the landing tier (Delta) as it is.")
@click.option("--engine", type=EngineChoice(), help=LANDING_ENGINE_HELP)
@click.option("--by", "requested_by", help="Who asks, for the audit (default: $SEQLAKE_ACTOR, else the OS user).")
@common_options
def command(users: tuple[int, ...], skip_landing: bool, engine: Engine | None, requested_by: str | None) -> None:
    from seqlake.core.config import resolve_engine
    from seqlake.pipelines.forget.remove import forget_users
    from seqlake.pipelines.landing.tables import landing_tier
    from seqlake.pipelines.tables import HISTORY, load_existing_table

    config = load_cli_config()
    load_existing_table(config, HISTORY)  # a warehouse without history is a mistake, not a new lake
    landing = None
    if not skip_landing:
        landing = landing_tier(config, resolve_engine(engine or config.layout.ingest_engine), "seqlake-forget")
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


main = job_main(command)

if __name__ == "__main__":
    script_main("forget")
