"""Keep the warehouse small: drop detail rows past retention, expire old snapshots, remove orphan
files (and the files of a landing folder that holds no table yet, which a killed first ingest left)
and vacuum the landing tier; each step prints what it removed and how many bytes.

Never removed: a snapshot younger than `maintenance.snapshot_retention_hours` or among the newest
`maintenance.keep_snapshots`, a file a live snapshot references, a file younger than
`maintenance.orphan_safety_hours`, detail rows within `layout.detail_retention_windows` or needed by a
training pointer, a raw source snapshot not ingested yet. What a forget left goes too: the raw source's
records its tombstone covers (files rewritten), the users named in the tables' forget records (sealed
to keyed hashes) and in old metadata files, the landing Delta logs' old commit files (checkpointed
first, removed after the landing retention). The options override the configuration.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import HOURS, LANDING_ENGINE_HELP, EngineChoice
from seqlake.core.output import emit

if TYPE_CHECKING:
    from seqlake.core.config import Engine


@click.command("maintain", help=__doc__)
@click.option("--snapshot-retention-hours", type=HOURS, help="Expire snapshots older than this.")
@click.option("--orphan-safety-hours", type=HOURS, help="Never remove a file younger than this.")
@click.option("--landing-retention-hours", type=HOURS, help="Delta VACUUM retention of the landing tier.")
@click.option("--skip-landing", is_flag=True, help="Do not VACUUM the landing tier's Delta tables.")
@click.option("--engine", type=EngineChoice(), help=LANDING_ENGINE_HELP)
@common_options
def command(
    snapshot_retention_hours: float | None,
    orphan_safety_hours: float | None,
    landing_retention_hours: float | None,
    skip_landing: bool,
    engine: Engine | None,
) -> None:
    from seqlake.core.config import resolve_engine
    from seqlake.pipelines.landing.tables import landing_tier
    from seqlake.pipelines.maintenance.steps import run_maintenance

    config = load_cli_config()
    overrides = {
        key: value
        for key, value in (
            ("snapshot_retention_hours", snapshot_retention_hours),
            ("orphan_safety_hours", orphan_safety_hours),
            ("landing_retention_hours", landing_retention_hours),
        )
        if value is not None
    }
    config = config.model_copy(update={"maintenance": config.maintenance.model_copy(update=overrides)})
    chosen = "duckdb" if skip_landing else resolve_engine(engine or config.layout.ingest_engine)
    landing = landing_tier(config, chosen, "seqlake-maintain")  # no JVM when the landing VACUUM is skipped
    from seqlake.core.progress import Progress

    progress = Progress("maintain", measure="steps", steps_unit="steps", show_bytes=True)
    reports = run_maintenance(config, landing=landing, vacuum=not skip_landing, progress=progress)
    progress.done()
    # Dropped detail rows and rewritten small files are freed as orphans, counted by that step.
    total = sum(r.bytes for r in reports if r.step not in ("drop-detail", "rewrite-small-files"))
    document = {"steps": reports, "bytes_removed": total}
    emit(document, "\n".join([*(r.line() for r in reports), f"maintain: {total:,} bytes removed from storage"]))


main = job_main(command)

if __name__ == "__main__":
    script_main("maintain")
