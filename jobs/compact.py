"""Close processing windows: publish each closed window's events as one sorted run of the history
table, then merge runs when there are more than `layout.max_runs`. Re-running is always safe.
Usable as `seqlake compact` or `spark-submit jobs/compact.py`.
"""

from __future__ import annotations

import argparse
import sys

from pipelines.compaction import compact_window, history_tables, merge_runs_if_needed, published_windows
from pipelines.landing import landing_paths
from pipelines.publication_check import landing_windows
from pipelines.windows import LandedWindows
from seqlake.cli_args import integer_at_least
from seqlake.config import load_config
from seqlake.errors import SeqlakeError
from seqlake.progress import Progress
from seqlake.spark_session import spark_session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="seqlake compact", description=__doc__)
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
    args = parser.parse_args(argv)
    config = load_config(args.config)
    paths = landing_paths(config)
    history, _ = history_tables(config)
    done = published_windows(history)
    state = landing_windows(paths)  # DuckDB: a refused request costs no JVM start
    if args.window:
        check_requested(args.window, state, args.end_of_stream)
    spark = spark_session(config, "seqlake-compact")
    windows = args.window or [w for w in state.closed(args.end_of_stream) if w not in done]
    progress = Progress("compact", every=0)
    for window in windows:
        result = compact_window(spark, config, paths, window)
        outcome = "published" if result.published else "already published"
        progress.add(rows=result.rows, steps=1, note=f"window {window} {outcome}: {result.events:,} events")
        merged = merge_runs_if_needed(spark, config)
        if merged:
            progress.add(note=f"merged runs into {merged}")
    progress.done(f"{len(windows)} windows" if windows else "nothing to do: no closed window awaits publication")
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
