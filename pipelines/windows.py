"""Which processing windows are closed: every source partition has moved past them."""

from __future__ import annotations

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from pipelines.landing import LandingPaths, delta_exists


def landed_windows(spark: SparkSession, paths: LandingPaths) -> list[int]:
    windows: set[int] = set()
    for path in (paths.events, paths.quarantine):
        if delta_exists(spark, path):
            windows.update(r[0] for r in spark.read.format("delta").load(path).select("window_id").distinct().collect())
    return sorted(windows)


def closed_windows(spark: SparkSession, paths: LandingPaths, end_of_stream: bool = False) -> list[int]:
    """Windows no record can arrive in any more. A window is closed once every source partition
    has delivered a record of a later window (the watermark); at the end of the stream, all are."""
    windows = landed_windows(spark, paths)
    if end_of_stream or not windows:
        return windows
    latest = [
        r[0]
        for r in spark.read.format("delta")
        .load(paths.events)
        .groupBy("source_partition")
        .agg(F.max("window_id"))
        .collect()
    ]
    watermark = min(latest)
    return [w for w in windows if w < watermark]
