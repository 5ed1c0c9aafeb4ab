"""`seqlake bench-compact --scale small` in the test suite: every run publishes every event once;
the timings are printed, never asserted."""

from __future__ import annotations

import pytest

from benchmarks.compaction import SCALES, format_report, run_compaction_bench

pytestmark = pytest.mark.spark


def test_small_compaction_bench_publishes_every_event_at_every_window_count(spark, lake_config, measurement) -> None:
    events, windows = SCALES["small"]
    bench = run_compaction_bench(spark, lake_config, events=events, window_counts=windows, namespace="bench_small")
    assert bench.ok, bench.problems
    assert [p.windows for p in bench.points] == list(windows)
    assert all(p.events == bench.events for p in bench.points)
    assert bench.points[0].one_by_one_seconds is not None
    assert all(p.duckdb_seconds > 0 for p in bench.points)
    for line in format_report(bench).splitlines():
        measurement(f"bench-compact small: {line}")
