"""Pipeline state outlives snapshot expiry: the LSN frontier, the published windows and the run
registry are table properties, so expiring every old snapshot of the history and detail tables loses
nothing, and ingest, compaction and merges carry on with every event once."""

from __future__ import annotations

from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.compaction.duckdb import compact_batch_duckdb, merge_runs_if_needed_duckdb
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.landing.tables import is_delta_table
from seqlake.tableformat.registry import FRONTIER_PROPERTY, live_runs, published_frontier, published_windows
from tests.pipelines.compaction.test_publication_races import (
    assert_every_valid_event_once,
    closed_unpublished,
    deliver,
    new_lake,
)
from tests.snapshots import current_snapshot, summary


def expire_all_but_current(table) -> int:
    """Expire every snapshot but the current one (pyiceberg's maintenance API); return how many."""
    table.refresh()
    current = table.current_snapshot().snapshot_id
    old = [s.snapshot_id for s in table.snapshots() if s.snapshot_id != current]
    if old:
        table.maintenance.expire_snapshots().by_ids(old).commit()
    table.refresh()
    assert [s.snapshot_id for s in table.snapshots()] == [current]
    return len(old)


def landed_frontier(lake, windows: set[int]) -> dict[int, int]:
    """Per source partition, the highest LSN of the windows' landed or quarantined records."""
    highest: dict[int, int] = {}
    with lake_cursor() as con:
        for uri in (lake.paths.events, lake.paths.quarantine):
            if not is_delta_table(uri):
                continue
            rows = con.execute(
                "SELECT source_partition, max(lsn) FROM delta_scan(?) WHERE list_contains(?, window_id) GROUP BY ALL",
                [uri.removeprefix("file://"), sorted(windows)],
            ).fetchall()
            for partition, lsn in rows:
                highest[int(partition)] = max(highest.get(int(partition), -1), int(lsn))
    return highest


def compact_closed(lake, end_of_stream: bool = False) -> None:
    for window in closed_unpublished(lake, end_of_stream):
        compact_batch_duckdb(lake.config, lake.paths, [window])
        merge_runs_if_needed_duckdb(lake.config)


def test_expiring_every_old_snapshot_loses_no_frontier_window_or_run(lake_config) -> None:
    lake = new_lake(lake_config, max_runs=2)
    deliver(lake, 4)
    compact_closed(lake)
    history, detail = history_tables(lake.config)
    history.refresh()
    # The newest snapshot is a merge: it records no frontier of its own, the table property does.
    properties = summary(current_snapshot(history)).additional_properties
    assert properties.get("seqlake.operation") == "merge-runs"
    assert FRONTIER_PROPERTY not in properties
    frontier, runs, windows = published_frontier(history), live_runs(history), published_windows(history)
    assert frontier and frontier == landed_frontier(lake, windows)

    assert expire_all_but_current(history) > 0 and expire_all_but_current(detail) > 0
    history = history_tables(lake.config)[0]
    assert (published_frontier(history), live_runs(history), published_windows(history)) == (frontier, runs, windows)

    # Keep going: more arrivals, publications and merges, another expiry, the end of the stream.
    deliver(lake, 2)
    compact_closed(lake)
    expire_all_but_current(history_tables(lake.config)[0])
    deliver(lake, len(lake.chunks))
    compact_closed(lake, end_of_stream=True)
    history = history_tables(lake.config)[0].refresh()
    assert published_frontier(history) == landed_frontier(lake, published_windows(history))
    assert_every_valid_event_once(lake)
