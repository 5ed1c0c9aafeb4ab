"""Close processing windows: publish every closed, unpublished window's events in sorted runs of the
history table, a backlog in batches of at most `layout.compaction_batch_rows` landing rows (one pass
and one commit each), then merge runs when there are more than `layout.max_runs`. Re-running is
always safe. Usable as `seqlake compact` or `spark-submit jobs/compact.py`.
"""

from __future__ import annotations

import sys

from pipelines.compaction import compact_batch, history_tables, merge_runs_if_needed, plan_batches, published_windows
from pipelines.landing import landing_paths
from pipelines.publication_check import landing_windows
from pipelines.windows import LandedWindows
from seqlake.cli_args import ArgumentParser, integer_at_least
from seqlake.config import load_config
from seqlake.errors import SeqlakeError
from seqlake.progress import Progress
from seqlake.spark_session import spark_session


def main(argv: list[str] | None = None) -> int:
    parser = ArgumentParser(prog="seqlake compact", description=__doc__)
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument(
        "--window",
        type=integer_at_least(0),
        action="append",
        help="compact only this closed window id (repeatable); an open window or one without records is refused",
    )
    parser.add_argument(
        "--end-of-stream", action="store_true", help="treat every landed window as closed (no more arrivals)"
    )
    parser.add_argument(
        "--engine",
        choices=("spark", "duckdb"),
        help="spark (local mode or SEQLAKE_SPARK_MASTER) or duckdb (in-process, no JVM); same runs "
        "(default: layout.compaction_engine of the configuration)",
    )
    parser.add_argument(
        "--maintain", action="store_true", help="then run `seqlake maintain` (its configured policy) on the same tables"
    )
    parser.add_argument(
        "--from-detail",
        action="store_true",
        help="rebuild the --window windows from the detail table (their landing rows are gone; after "
        "seqlake drop-run removed their damaged run); in-process, no JVM",
    )
    args = parser.parse_args(argv)
    config = load_config(args.config)
    engine = args.engine or config.layout.compaction_engine
    if args.from_detail:
        if not args.window:
            parser.error("--from-detail needs the windows to rebuild (--window W, repeatable)")
        from pipelines.detail_rebuild import rebuild_from_detail

        result = rebuild_from_detail(config, sorted(set(args.window)))
        outcome = "published from detail" if result.published else "already published: nothing to do"
        print(f"windows {', '.join(str(w) for w in sorted(set(args.window)))} {outcome}: {result.events:,} events")
        return 0
    paths = landing_paths(config)
    history, _ = history_tables(config)
    done = published_windows(history)
    state = landing_windows(paths)  # DuckDB: a refused request costs no JVM start
    if args.window:
        check_requested(args.window, state, args.end_of_stream)
    if engine == "spark":
        spark = spark_session(config, "seqlake-compact")

        def compact(batch: list[int]):
            return compact_batch(spark, config, paths, batch)

        def merge() -> str | None:
            return merge_runs_if_needed(spark, config)
    else:
        from pipelines.duckdb_compaction import compact_batch_duckdb, merge_runs_if_needed_duckdb

        def compact(batch: list[int]):
            return compact_batch_duckdb(config, paths, batch)

        def merge() -> str | None:
            return merge_runs_if_needed_duckdb(config)

    windows = args.window or [w for w in state.closed(args.end_of_stream) if w not in done]
    progress = Progress("compact", measure="steps", rows_unit="events", steps_unit="windows")
    for window in sorted(set(windows) & done):
        progress.add(note=f"window {window} already published: nothing to do")
    todo = {w: state.rows.get(w, 0) for w in windows if w not in done}
    batches = plan_batches(todo, config.layout.compaction_batch_rows)
    for batch in batches:
        result = compact(batch)
        span = f"window {batch[0]}" if len(batch) == 1 else f"windows {batch[0]}..{batch[-1]} ({len(batch)})"
        outcome = "published" if result.published else "already published"
        note = f"{span} {outcome}: {result.events:,} events"
        if result.quarantined:
            note += f", {result.quarantined:,} quarantined (aggregate out of range; see compaction_quarantine)"
        progress.add(rows=result.events, steps=len(batch), note=note)
        merged = merge()
        if merged:
            progress.add(note=f"merged runs into {merged}")
    summary = f"{len(todo)} windows in {len(batches)} batch(es), {engine} engine"
    progress.done(summary if todo else "nothing to do: no closed window awaits publication")
    if args.maintain:
        from pipelines.maintenance import run_maintenance

        session = spark if args.engine == "spark" else None  # DuckDB: no JVM, the landing VACUUM waits
        for report in run_maintenance(config, spark=session, paths=paths):
            print(report.line())
    return 0


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


if __name__ == "__main__":
    sys.exit(main())
