"""Close processing windows: publish each closed window's events as one sorted run of the history
table, then merge runs when there are more than `layout.max_runs`. Re-running is always safe.
Usable as `seqlake compact` or `spark-submit jobs/compact.py`.
"""

from __future__ import annotations

import argparse
import sys

from pipelines.compaction import compact_window, history_tables, merge_runs_if_needed, published_windows
from pipelines.landing import landing_paths
from pipelines.windows import closed_windows
from seqlake.config import load_config
from seqlake.progress import Progress
from seqlake.spark_session import spark_session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="seqlake compact", description=__doc__)
    parser.add_argument("--config", help="configuration YAML (default: conf/seqlake.yaml)")
    parser.add_argument("--window", type=int, action="append", help="compact only this window id (repeatable)")
    parser.add_argument(
        "--end-of-stream", action="store_true", help="treat every landed window as closed (no more arrivals)"
    )
    args = parser.parse_args(argv)
    config = load_config(args.config)
    spark = spark_session(config, "seqlake-compact")
    paths = landing_paths(config)
    history, _ = history_tables(config)
    done = published_windows(history)
    windows = args.window or [w for w in closed_windows(spark, paths, args.end_of_stream) if w not in done]
    progress = Progress("compact", every=0)
    for window in windows:
        result = compact_window(spark, config, paths, window)
        state = "published" if result.published else "already published"
        progress.add(rows=result.rows, steps=1, note=f"window {window} {state}: {result.events:,} events")
        merged = merge_runs_if_needed(spark, config)
        if merged:
            progress.add(note=f"merged runs into {merged}")
    progress.done(f"{len(windows)} windows")
    return 0


if __name__ == "__main__":
    sys.exit(main())
