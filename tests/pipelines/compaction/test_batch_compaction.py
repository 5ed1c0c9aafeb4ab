"""Catch-up compaction: a backlog of closed windows published in batches, one pass each, with exactly
the content that compacting the windows one by one gives, whatever is killed on the way."""

from __future__ import annotations

import pytest

from seqlake.core.errors import SimulatedCrash
from seqlake.pipelines.compaction.duckdb import compact_batch_duckdb, merge_runs_if_needed_duckdb
from seqlake.pipelines.compaction.plan import CRASH_POINTS, history_tables, plan_batches
from seqlake.pipelines.compaction.spark import compact_batch
from seqlake.tableformat.checksum import table_checksum
from seqlake.tableformat.registry import live_runs
from seqlake.tableformat.schema import KEY_COLUMNS
from tests.pipelines.compaction.test_publication_races import (
    assert_every_valid_event_once,
    closed_unpublished,
    compact_all,
    deliver,
    import_old_events,
    new_lake,
)

pytestmark = pytest.mark.spark

SEED = 4242
SHAPE = {"windows": 6, "duplicate_share": 0.08, "very_late_share": 0.08}


def content(lake) -> str:
    history, _ = history_tables(lake.config)
    rows = history.refresh().scan().to_arrow().sort_by([(k, "ascending") for k in KEY_COLUMNS])
    return table_checksum(rows, rows.schema)


def detail_ids(lake) -> list[dict]:
    """(event id, window) of every detail row, sorted: what each engine's detail holds."""
    _, detail = history_tables(lake.config)
    rows = detail.refresh().scan(selected_fields=("event_id", "window_id")).to_arrow()
    return rows.sort_by([("event_id", "ascending")]).to_pylist()


@pytest.fixture(scope="module")
def one_by_one(lake_config):
    """The reference: the same stream, every window compacted on its own, in order, in-process (Spark's
    batches are held to it: the engines publish the same runs)."""
    lake = new_lake(lake_config, max_runs=100, seed=SEED, **SHAPE)
    deliver(lake, len(lake.chunks))
    for window in closed_unpublished(lake, end_of_stream=True):
        assert compact_batch_duckdb(lake.config, lake.paths, [window]).published
    return lake


def test_plan_batches_bounds_rows_per_pass() -> None:
    assert plan_batches({1: 5, 2: 5, 3: 5, 4: 20, 5: 1}, 10) == [[1, 2], [3], [4], [5]]
    assert plan_batches({7: 3}, 1) == [[7]]
    assert plan_batches({}, 10) == []


def test_a_spark_batch_publishes_what_duckdb_window_by_window_publishes(spark, lake_config, one_by_one) -> None:
    lake = new_lake(lake_config, max_runs=100, seed=SEED, **SHAPE)
    deliver(lake, len(lake.chunks))
    windows = closed_unpublished(lake, end_of_stream=True)
    result = compact_batch(spark, lake.config, lake.paths, windows)
    assert result.published and result.windows == tuple(windows)
    history, _ = history_tables(lake.config)
    [run] = live_runs(history.refresh()).values()
    assert run.kind == "batch" and run.windows == windows
    assert content(lake) == content(one_by_one)
    assert detail_ids(lake) == detail_ids(one_by_one)
    assert_every_valid_event_once(lake)


# Spark's batch passes its own points (seqlake.pipelines.compaction.spark: before the write, after it,
# after the detail); after_commit is the shared commit's (plan.publish_batch), crashed on DuckDB below.
SPARK_POINTS = [point for point in CRASH_POINTS if point != "after_commit"]


@pytest.mark.parametrize("point", SPARK_POINTS)
def test_a_batch_killed_anywhere_reruns_to_the_same_content(spark, lake_config, one_by_one, point) -> None:
    lake = new_lake(lake_config, max_runs=100, seed=SEED, **SHAPE)
    deliver(lake, len(lake.chunks))
    windows = closed_unpublished(lake, end_of_stream=True)
    first, rest = windows[:3], windows[3:]
    compact_batch(spark, lake.config, lake.paths, first[:1])  # one window published before the batch
    with pytest.raises(SimulatedCrash):
        compact_batch(spark, lake.config, lake.paths, first + rest[:1], fail_at=point)
    # The re-run plans differently (one batch over everything left): the content is the same.
    compact_batch(spark, lake.config, lake.paths, windows)
    assert content(lake) == content(one_by_one)
    assert_every_valid_event_once(lake)


def test_batches_interleaved_with_late_imports_and_single_windows(spark, lake_config) -> None:
    lake = new_lake(lake_config, max_runs=2, seed=None, **SHAPE)
    deliver(lake, 4)
    closed = closed_unpublished(lake)
    assert len(closed) >= 2
    compact_batch(spark, lake.config, lake.paths, closed[1:])  # out of order: the first window waits
    import_old_events(lake)
    deliver(lake, 1)
    # The import's partition has ended, so it holds the watermark back: close what landed, as
    # `compact --end-of-stream` does after an import; later arrivals in these windows find a home.
    compact_batch(spark, lake.config, lake.paths, closed_unpublished(lake, end_of_stream=True))
    deliver(lake, len(lake.chunks))
    compact_all(spark, lake)
    assert_every_valid_event_once(lake)


# -- the DuckDB engine ---------------------------------------------------------------------------------


def test_duckdb_batches_publish_what_window_by_window_publishes(lake_config, one_by_one) -> None:
    lake = new_lake(lake_config, max_runs=100, seed=SEED, **SHAPE)
    deliver(lake, len(lake.chunks))
    windows = closed_unpublished(lake, end_of_stream=True)
    assert compact_batch_duckdb(lake.config, lake.paths, windows[:2]).published
    assert compact_batch_duckdb(lake.config, lake.paths, windows).windows == tuple(windows[2:])
    assert content(lake) == content(one_by_one)
    assert detail_ids(lake) == detail_ids(one_by_one)
    assert_every_valid_event_once(lake)


@pytest.mark.parametrize("point", ["after_write", "after_detail", "after_commit"])
def test_duckdb_batch_killed_anywhere_reruns_to_the_same_content(lake_config, one_by_one, point) -> None:
    lake = new_lake(lake_config, max_runs=2, seed=SEED, **SHAPE)
    deliver(lake, len(lake.chunks))
    windows = closed_unpublished(lake, end_of_stream=True)
    for window in windows[:3]:  # three runs, then a merge by DuckDB
        compact_batch_duckdb(lake.config, lake.paths, [window])
    assert merge_runs_if_needed_duckdb(lake.config) is not None
    with pytest.raises(SimulatedCrash):
        compact_batch_duckdb(lake.config, lake.paths, windows[3:], fail_at=point)
    compact_batch_duckdb(lake.config, lake.paths, windows)
    assert content(lake) == content(one_by_one)
    assert_every_valid_event_once(lake)
