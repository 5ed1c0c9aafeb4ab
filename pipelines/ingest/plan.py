"""Ingest, what both engines share: which source snapshots to consume, and where late records land.

The source is an append-only Iceberg table of raw records (as a Kafka topic would deliver them:
partition, LSN, arrival time, JSON payload). Each source snapshot is one ingest batch, identified by
its sequence number: landing and quarantine appends are idempotent per batch, so a re-run or a
replay after a crash adds nothing twice and loses nothing. How an engine reads, validates and
appends a snapshot is in its own module (`seqlake.pipelines.ingest.spark`,
`seqlake.pipelines.ingest.duckdb`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from seqlake.core.config import Config
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.pipelines.tables import HISTORY
from seqlake.tableformat.registry import published_windows


@dataclass
class IngestResult:
    batches: int = 0
    skipped: int = 0  # source snapshots already ingested by an earlier run
    records: int = 0
    landed: int = 0
    quarantined: Counter = field(default_factory=Counter)
    last_version: int = 0  # sequence number of the last source snapshot ingested in this call


def ingest_app_id(config: Config, source: str) -> str:
    return f"seqlake-ingest:{table_identifier(config, source)}"


def current_published_windows(config: Config) -> set[int]:
    """Windows the history table holds now (none before its first publication)."""
    catalog = open_catalog(config)
    identifier = table_identifier(config, HISTORY)
    return published_windows(catalog.load_table(identifier)) if catalog.table_exists(identifier) else set()


def home_windows(published: set[int]) -> dict[int, int]:
    """Each published window -> the first unpublished window after it. A record that arrives (or is
    imported with an arrival time) in a window already published lands there instead, so the next
    compaction publishes it: late data always has a home, never a window no one compacts again."""
    homes: dict[int, int] = {}
    for window in sorted(published, reverse=True):
        homes[window] = homes.get(window + 1, window + 1)
    return homes
