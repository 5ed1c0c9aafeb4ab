"""`seqlake bench-compact` in the test suite, on the fewest events that take each of its paths: every
run publishes every event once; the timings are printed, never asserted."""

from __future__ import annotations

import pytest

from benchmarks.compaction import ONE_BY_ONE_UP_TO, format_report, run_compaction_bench

pytestmark = pytest.mark.spark

# One window (the base of the ratios), a few also compacted one window at a time, and more windows than
# the one-by-one path is timed for: the small scale's three kinds of point on a quarter of its events.
EVENTS = 1_000
WINDOW_COUNTS = (1, 3, ONE_BY_ONE_UP_TO + 1)


def test_small_compaction_bench_publishes_every_event_at_every_window_count(spark, lake_config, measurement) -> None:
    bench = run_compaction_bench(
        spark, lake_config, events=EVENTS, window_counts=WINDOW_COUNTS, namespace="bench_small"
    )
    assert bench.ok, bench.problems
    assert [p.windows for p in bench.points] == list(WINDOW_COUNTS)
    assert all(p.events == bench.events for p in bench.points)
    assert bench.points[0].one_by_one_seconds is not None
    assert bench.points[1].one_by_one_seconds is not None and bench.points[2].one_by_one_seconds is None
    assert all(p.duckdb_seconds > 0 for p in bench.points)
    for line in format_report(bench).splitlines():
        measurement(f"bench-compact small: {line}")
