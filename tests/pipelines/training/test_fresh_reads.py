"""Fresh reads: published history plus landing rows above the frontier equal what compaction will publish."""

from __future__ import annotations

import pytest

from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.pipelines.compaction.plan import history_tables
from seqlake.pipelines.compaction.spark import compact_window
from seqlake.pipelines.demo.full import reset_demo_tables
from seqlake.pipelines.demo.generator import EventGenerator
from seqlake.pipelines.ingest.raw_source import create_raw_table, land_raw_records
from seqlake.pipelines.ingest.spark import ingest_source
from seqlake.pipelines.landing.tables import landing_paths
from seqlake.pipelines.landing.windows import closed_windows
from seqlake.pipelines.reads.fresh import fresh_history
from seqlake.tableformat.reader import HistoryReader, Selection
from seqlake.tableformat.registry import published_frontier
from tests.conftest import make_config

pytestmark = pytest.mark.spark


def test_fresh_read_before_publication_equals_history_after(spark, lake_config):
    # No retransmissions: a fresh read does not look up ids published by other windows (documented).
    config = make_config(
        lake_config.warehouse_path(), users=40, heavy_users=1, max_events=800, windows=3, duplicate_share=0.0
    )
    reset_demo_tables(config)
    raw = create_raw_table(open_catalog(config), table_identifier(config, "raw_events"))
    land_raw_records(raw, EventGenerator(config).batches(), window_seconds=config.layout.window_seconds)
    paths = landing_paths(config)
    ingest_source(spark, config, "raw_events", paths)
    windows = closed_windows(paths, end_of_stream=True)
    compact_window(spark, config, paths, windows[0])

    history, _ = history_tables(config)
    published = published_frontier(history.refresh())
    assert published and all(lsn >= 0 for lsn in published.values())
    users = [1_000_000, 1_000_001, 1_000_017]
    selection = Selection(columns=("item_id", "event_count", "watch_time_ms", "window_id"))
    fresh = {u: fresh_history(HistoryReader(history), config, paths, u, selection) for u in users}
    assert any(r.num_rows > HistoryReader(history).read_user(u).num_rows for u, r in fresh.items())

    for window in windows[1:]:
        compact_window(spark, config, paths, window)
    history.refresh()
    for user in users:
        assert fresh[user].to_pylist() == HistoryReader(history).read_user(user, selection=selection).to_pylist()
