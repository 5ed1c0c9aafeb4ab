"""Rebuild published windows from the detail table when their landing rows are gone.

The detail table keeps each published window's events (first arrivals, without the events the
compaction quarantine holds), so the fold of a window's detail rows is the window's history rows.
After `seqlake drop-run` removed a damaged run, `seqlake compact --from-detail --window W` publishes W
again from there, in-process on DuckDB, with the same aggregation SQL and run writer as compaction.
"""

from __future__ import annotations

from dataclasses import replace

from pyiceberg.expressions import In

from seqlake.core.config import Config
from seqlake.core.errors import SeqlakeError
from seqlake.engines.duckdb_session import connect
from seqlake.pipelines.compaction.duckdb import write_history_run
from seqlake.pipelines.compaction.plan import (
    CompactionResult,
    batch_to_publish,
    publish_batch,
    replanning,
    window_lsns_sql,
)
from seqlake.pipelines.compaction.quarantine import split_batch_duckdb
from seqlake.tableformat.forgets import drop_users, missed_users


def rebuild_from_detail(config: Config, windows: list[int]) -> CompactionResult:
    """Publish `windows` (not held by a live run) as one run folded from their detail rows."""
    return replanning("rebuild from detail", lambda: _rebuild(config, windows))


def _rebuild(config: Config, windows: list[int]) -> CompactionResult:
    plan = batch_to_publish(config, windows)
    if isinstance(plan, CompactionResult):
        return plan  # every window is published already
    history, detail, todo, point = plan.history, plan.detail, plan.windows, plan.point
    events = detail.scan(row_filter=In("window_id", todo)).to_arrow()
    missing = sorted(set(todo) - set(events["window_id"].unique().to_pylist()))
    if missing:
        raise SeqlakeError(f"window(s) {missing} have no rows in the detail table: nothing to rebuild them from")
    with connect(extensions=()) as con:
        events = drop_users(events, missed_users(history, point, detail.refresh()))  # a forget under way
        rows, kept, quarantined = split_batch_duckdb(con, config, events, todo, point)
        # The frontier is past these LSNs already (the windows were published): it stays where it is.
        con.register("_kept", kept)
        own_lsns = {
            int(partition): int(lsn) for partition, lsn in con.execute(window_lsns_sql(todo)("_kept")).fetchall()
        }
    files = write_history_run(history, config, plan.run_id, rows)
    result = publish_batch(history, todo, files, own_lsns, kept.num_rows, point=point)
    return replace(result, quarantined=quarantined) if result.published else result
