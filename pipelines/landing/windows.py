"""Which processing windows are closed: every source partition has moved past them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from seqlake.engines.duckdb_session import connect
from seqlake.pipelines.landing.tables import LandingPaths, delta_exists, is_delta_table
from seqlake.tableformat.io import engine_location

if TYPE_CHECKING:  # LandedWindows is shared with the in-process engine, which runs without pyspark
    from pyspark.sql import SparkSession


@dataclass(frozen=True)
class LandedWindows:
    landed: list[int]  # windows with at least one record (landed or quarantined), ascending
    watermark: int | None  # windows below it are closed; None: no partition has moved past anything
    rows: dict[int, int] = field(default_factory=dict)  # landed event rows per window (when counted)

    def closed(self, end_of_stream: bool = False) -> list[int]:
        if end_of_stream:
            return self.landed
        if self.watermark is None:
            return []
        return [w for w in self.landed if w < self.watermark]


def _windows_by_partition(spark: SparkSession, path: str) -> dict[int, set[int]]:
    """{source partition: windows it has records in}, from one scan of a landing table."""
    if not delta_exists(spark, path):
        return {}
    found: dict[int, set[int]] = {}
    for row in spark.read.format("delta").load(path).select("source_partition", "window_id").distinct().collect():
        found.setdefault(row["source_partition"], set()).add(row["window_id"])
    return found


def landed_windows(spark: SparkSession, paths: LandingPaths) -> LandedWindows:
    """The windows the landing tier holds and its watermark: a window is closed once every source
    partition has delivered a record of a later window."""
    events = _windows_by_partition(spark, paths.events)
    quarantined = _windows_by_partition(spark, paths.quarantine)
    windows = sorted(set().union(*events.values(), *quarantined.values()))
    # Only quarantined records: no partition has moved past anything.
    watermark = min(max(ws) for ws in events.values()) if events else None
    return LandedWindows(windows, watermark)


def closed_windows(spark: SparkSession, paths: LandingPaths, end_of_stream: bool = False) -> list[int]:
    """Windows no record can arrive in any more; at the end of the stream, all are."""
    return landed_windows(spark, paths).closed(end_of_stream)


def _duckdb_windows_by_partition(con, uri: str, rows: dict[int, int] | None = None) -> dict[int, set[int]]:
    """{source partition: windows it has records in}; adds the rows per window to `rows`."""
    if not is_delta_table(uri):
        return {}  # nothing has landed there yet
    path = engine_location(uri)
    counted = con.execute(
        "SELECT source_partition, window_id, count(*) FROM delta_scan(?) GROUP BY ALL", [path]
    ).fetchall()
    found: dict[int, set[int]] = {}
    for partition, window, count in counted:
        found.setdefault(int(partition), set()).add(int(window))
        if rows is not None:
            rows[int(window)] = rows.get(int(window), 0) + int(count)
    return found


def landing_windows(paths: LandingPaths) -> LandedWindows:
    """The same windows and watermark as `landed_windows`, read with DuckDB (no JVM)."""
    rows: dict[int, int] = {}
    with connect(extensions=("delta",)) as con:
        events = _duckdb_windows_by_partition(con, paths.events, rows)
        quarantined = _duckdb_windows_by_partition(con, paths.quarantine)
    windows = sorted(set().union(*events.values(), *quarantined.values()))
    watermark = min(max(ws) for ws in events.values()) if events else None
    return LandedWindows(windows, watermark, {w: rows.get(w, 0) for w in windows})
