"""Which processing windows are closed: every source partition has moved past them."""

from __future__ import annotations

from pyspark.sql import SparkSession

from pipelines.landing import LandingPaths, delta_exists


def _windows_by_partition(spark: SparkSession, path: str) -> dict[int, set[int]]:
    """{source partition: windows it has records in}, from one scan of a landing table."""
    if not delta_exists(spark, path):
        return {}
    found: dict[int, set[int]] = {}
    for row in spark.read.format("delta").load(path).select("source_partition", "window_id").distinct().collect():
        found.setdefault(row["source_partition"], set()).add(row["window_id"])
    return found


def closed_windows(spark: SparkSession, paths: LandingPaths, end_of_stream: bool = False) -> list[int]:
    """Windows no record can arrive in any more. A window is closed once every source partition
    has delivered a record of a later window (the watermark); at the end of the stream, all are."""
    events = _windows_by_partition(spark, paths.events)
    quarantined = _windows_by_partition(spark, paths.quarantine)
    windows = sorted(set().union(*events.values(), *quarantined.values()))
    if end_of_stream or not windows:
        return windows
    if not events:
        return []  # only quarantined records: no partition has moved past anything
    watermark = min(max(ws) for ws in events.values())
    return [w for w in windows if w < watermark]
