"""Check publication bookkeeping against the landing tier: no event may be left where no compaction
will ever look.

Every landing window below the watermark must be held by exactly one live run, and no two live runs
may hold the same window. Reads only the landing tier's (source partition, window) pairs, through
DuckDB: no Spark session is needed.
"""

from __future__ import annotations

from collections import Counter

from pyiceberg.table import Table

from seqlake.pipelines.landing.tables import LandingPaths
from seqlake.pipelines.landing.windows import landed_windows
from seqlake.tableformat.registry import live_runs


def publication_findings(history: Table, paths: LandingPaths) -> list[str]:
    """What is wrong with the publication bookkeeping (empty: nothing)."""
    findings = []
    holders: Counter[int] = Counter()
    for record in live_runs(history).values():
        holders.update(record.windows)
    for window, count in sorted(holders.items()):
        if count > 1:
            findings.append(f"window {window} is held by {count} live runs (its events count {count} times)")
    state = landed_windows(paths)
    unpublished = [w for w in state.closed() if w not in holders]
    if unpublished:
        shown = ", ".join(str(w) for w in unpublished[:20]) + (" ..." if len(unpublished) > 20 else "")
        findings.append(f"{len(unpublished)} closed landing window(s) not published: {shown} (run `seqlake compact`)")
    return findings
