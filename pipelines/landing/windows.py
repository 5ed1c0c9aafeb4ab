"""Which processing windows are closed: every source partition has moved past them.

One rule, whatever reads the records: `LandedWindows.of` takes the landing records counted per
(source partition, window) (`window_counts_sql`) and gives the windows they hold and the watermark.
`landed_windows` counts the landing tier's Delta tables with DuckDB (no JVM, whichever engine
compacts); the online view (`seqlake.pipelines.training.capture.online_view`) counts its own
snapshot of the rows above the frontier.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.landing.tables import LandingPaths, duckdb_scan


def window_counts_sql(relation: str) -> str:
    """(source_partition, window_id, rows) of a relation of landing records."""
    return f"SELECT source_partition, window_id, count(*) FROM {relation} GROUP BY source_partition, window_id"


@dataclass(frozen=True)
class LandedWindows:
    landed: list[int]  # windows with at least one record (landed or quarantined), ascending
    watermark: int | None  # windows below it are closed; None: no partition has moved past anything
    rows: dict[int, int] = field(default_factory=dict)  # landed event rows per window

    @classmethod
    def of(
        cls,
        events: Iterable[tuple[int, int, int]],
        quarantined: Iterable[tuple[int, int, int]] = (),
        waiting: Iterable[int] = (),
    ) -> LandedWindows:
        """The windows and the watermark of records counted per (source partition, window, rows):
        the landed `events`, and the `quarantined` ones (they hold a window but move no partition on).
        A window is closed once every source partition has delivered a record of a later window;
        `waiting`: partitions known to deliver that have no record among these yet (nothing is
        closed before they have)."""
        latest: dict[int, int] = {}
        rows: dict[int, int] = {}
        for partition, window, count in events:
            latest[int(partition)] = max(latest.get(int(partition), int(window)), int(window))
            rows[int(window)] = rows.get(int(window), 0) + int(count)
        windows = sorted(set(rows).union(int(window) for _, window, _ in quarantined))
        # Only quarantined records, or a partition still to deliver: no partition has moved past anything.
        moved = bool(latest) and all(partition in latest for partition in waiting)
        watermark = min(latest.values()) if moved else None
        return cls(windows, watermark, {w: rows.get(w, 0) for w in windows})

    def closed(self, end_of_stream: bool = False) -> list[int]:
        if end_of_stream:
            return self.landed
        if self.watermark is None:
            return []
        return [w for w in self.landed if w < self.watermark]


def landed_windows(paths: LandingPaths) -> LandedWindows:
    """The windows the landing tier holds, their rows and its watermark, read with DuckDB."""
    with lake_cursor() as con:
        scan = duckdb_scan(con)
        return LandedWindows.of(scan(paths.events, window_counts_sql), scan(paths.quarantine, window_counts_sql))


def closed_windows(paths: LandingPaths, end_of_stream: bool = False) -> list[int]:
    """Windows no record can arrive in any more; at the end of the stream, all are."""
    return landed_windows(paths).closed(end_of_stream)
