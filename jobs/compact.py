"""Close processing windows: publish every closed, unpublished window's events in sorted runs of the
history table, a backlog in batches of at most `layout.compaction_batch_rows` landing rows (one pass
and one commit each), then merge runs when there are more than `layout.max_runs`. Re-running is
always safe. Usable as `seqlake compact` or `spark-submit jobs/compact.py`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from seqlake.cli import job_main, script_main
from seqlake.cli.options import common_options, load_cli_config
from seqlake.cli.types import EngineChoice, IntegerAtLeast
from seqlake.core.errors import SeqlakeError
from seqlake.core.output import emit

if TYPE_CHECKING:
    from seqlake.core.config import Config, Engine
    from seqlake.pipelines.landing.windows import LandedWindows


@click.command("compact", help=__doc__)
@click.option(
    "--window",
    "windows",
    type=IntegerAtLeast(0),
    multiple=True,
    help="Compact only this closed window id (repeatable); an open window or one without records is refused.",
)
@click.option("--end-of-stream", is_flag=True, help="Treat every landed window as closed (no more arrivals).")
@click.option(
    "--engine",
    type=EngineChoice(),
    help="spark (local mode or SEQLAKE_SPARK_MASTER) or duckdb (in-process, no JVM); the same runs "
    "(default: layout.compaction_engine of the configuration; auto: spark when pyspark is installed, else duckdb).",
)
@click.option(
    "--maintain", is_flag=True, help="Then run `seqlake maintain` (its configured policy) on the same tables."
)
@click.option(
    "--from-detail",
    is_flag=True,
    help="Rebuild the --window windows from the detail table (their landing rows are gone; after seqlake "
    "drop-run removed their damaged run); in-process, no JVM.",
)
@common_options
def command(
    windows: tuple[int, ...], end_of_stream: bool, engine: Engine | None, maintain: bool, from_detail: bool
) -> None:
    if from_detail and not windows:
        raise click.UsageError("--from-detail needs the windows to rebuild (--window W, repeatable)")
    config = load_cli_config()
    if from_detail:
        from seqlake.pipelines.compaction.detail_rebuild import rebuild_from_detail

        chosen = sorted(set(windows))
        result = rebuild_from_detail(config, chosen)
        outcome = "published from detail" if result.published else "already published: nothing to do"
        document = {"windows": chosen, "published": result.published, "events": result.events, "run_id": result.run_id}
        emit(document, f"windows {', '.join(str(w) for w in chosen)} {outcome}: {result.events:,} events")
        return
    from seqlake.core.config import resolve_engine

    chosen_engine = resolve_engine(engine or config.layout.compaction_engine)
    emit(*compact_windows(config, list(windows), end_of_stream, chosen_engine, maintain))


def compact_windows(
    config: Config, windows: list[int], end_of_stream: bool, engine: str, maintain: bool
) -> tuple[dict[str, Any], str]:
    """Publish the chosen (or every closed) window in batches, merging runs after each; the document
    and the text of what happened."""
    from seqlake.core.progress import Progress
    from seqlake.pipelines.compaction.batches import compact_in_batches
    from seqlake.pipelines.compaction.plan import history_tables
    from seqlake.pipelines.landing.tables import landing_paths
    from seqlake.pipelines.landing.windows import landed_windows
    from seqlake.tableformat.registry import published_windows as published

    paths = landing_paths(config)
    history, _ = history_tables(config)
    done = published(history)
    state = landed_windows(paths)  # DuckDB: a refused request costs no JVM start
    if windows:
        check_requested(windows, state, end_of_stream)
    spark = None
    if engine == "spark":
        from seqlake.engines.spark_session import spark_session

        spark = spark_session(config, "seqlake-compact")
    chosen = windows or [w for w in state.closed(end_of_stream) if w not in done]
    lines = [f"window {w} already published: nothing to do" for w in sorted(set(chosen) & done)]
    todo = {w: state.rows.get(w, 0) for w in chosen if w not in done}
    progress = Progress("compact", total=len(todo), measure="steps", rows_unit="events", steps_unit="windows")
    published_batches, merges = [], []
    for outcome in compact_in_batches(config, paths, todo, engine, spark):
        batch, result = outcome.windows, outcome.result
        span = f"window {batch[0]}" if len(batch) == 1 else f"windows {batch[0]}..{batch[-1]} ({len(batch)})"
        line = f"{span} {'published' if result.published else 'already published'}: {result.events:,} events"
        if result.quarantined:
            line += f", {result.quarantined:,} quarantined (aggregate out of range; see compaction_quarantine)"
        lines.append(line)
        published_batches.append(
            {
                "windows": batch,
                "run_id": result.run_id,
                "published": result.published,
                "events": result.events,
                "quarantined": result.quarantined,
            }
        )
        progress.add(rows=result.events, steps=len(batch), note=span)
        if outcome.merged_into:
            merges.append(outcome.merged_into)
            lines.append(f"merged runs into {outcome.merged_into}")
    progress.done()
    summary = f"{len(todo)} windows in {len(published_batches)} batch(es), {engine} engine"
    lines.append(summary if todo else "nothing to do: no closed window awaits publication")
    document: dict[str, Any] = {
        "engine": engine,
        "windows": len(todo),
        "events": sum(b["events"] for b in published_batches),
        "batches": published_batches,
        "already_published": sorted(set(chosen) & done),
        "merged_into": merges,
    }
    if maintain:
        from seqlake.pipelines.landing.tables import LandingTier
        from seqlake.pipelines.maintenance.steps import run_maintenance

        reports = run_maintenance(config, landing=LandingTier(paths, spark))  # the compaction's engine
        lines += [report.line() for report in reports]
        document["maintenance"] = reports
    return document, "\n".join(lines)


def check_requested(windows: list[int], state: LandedWindows, end_of_stream: bool) -> None:
    """Refuse a window that holds no record or can still receive some: publishing it would publish
    nothing, or publish it before its last events arrive (they would never reach history)."""
    closed = set(state.closed(end_of_stream))
    for window in windows:
        if window not in state.landed:
            span = f"{state.landed[0]}..{state.landed[-1]}" if state.landed else "none"
            raise SeqlakeError(f"window {window} has no records in the landing tier (landed windows: {span})")
        if window not in closed:
            raise SeqlakeError(
                f"window {window} is still open (watermark {state.watermark}): records may still arrive; "
                "pass --end-of-stream if the stream has ended"
            )


main = job_main(command)

if __name__ == "__main__":
    script_main("compact")
