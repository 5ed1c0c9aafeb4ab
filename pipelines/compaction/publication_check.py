"""Check publication bookkeeping against the landing tier: no event may be left where no compaction
will ever look.

Every landing window below the watermark must be held by exactly one live run, and no two live runs
may hold the same window. Reads only the landing tier's (source partition, window) pairs, through
DuckDB: no Spark session is needed.
"""

from __future__ import annotations

from collections import Counter

import pyarrow.fs as pafs
from pyiceberg.table import Table

from seqlake.engines.duckdb_session import connect
from seqlake.pipelines.landing.tables import LandingPaths
from seqlake.pipelines.landing.windows import LandedWindows
from seqlake.tableformat.io import engine_location
from seqlake.tableformat.registry import live_runs


def is_delta_table(uri: str) -> bool:
    """Whether a Delta table exists at `uri` (without a JVM)."""
    fs, path = pafs.FileSystem.from_uri(uri)
    return fs.get_file_info(f"{path}/_delta_log").type == pafs.FileType.Directory


def _windows_by_partition(con, uri: str, rows: dict[int, int] | None = None) -> dict[int, set[int]]:
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
    """The same windows and watermark as `seqlake.pipelines.landing.windows.landed_windows`, read with DuckDB."""
    rows: dict[int, int] = {}
    with connect(extensions=("delta",)) as con:
        events = _windows_by_partition(con, paths.events, rows)
        quarantined = _windows_by_partition(con, paths.quarantine)
    windows = sorted(set().union(*events.values(), *quarantined.values()))
    watermark = min(max(ws) for ws in events.values()) if events else None
    return LandedWindows(windows, watermark, {w: rows.get(w, 0) for w in windows})


def publication_findings(history: Table, paths: LandingPaths) -> list[str]:
    """What is wrong with the publication bookkeeping (empty: nothing)."""
    findings = []
    holders: Counter[int] = Counter()
    for record in live_runs(history).values():
        holders.update(record.windows)
    for window, count in sorted(holders.items()):
        if count > 1:
            findings.append(f"window {window} is held by {count} live runs (its events count {count} times)")
    state = landing_windows(paths)
    unpublished = [w for w in state.closed() if w not in holders]
    if unpublished:
        shown = ", ".join(str(w) for w in unpublished[:20]) + (" ..." if len(unpublished) > 20 else "")
        findings.append(f"{len(unpublished)} closed landing window(s) not published: {shown} (run `seqlake compact`)")
    return findings
