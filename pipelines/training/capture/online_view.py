"""The online view inference reads: published history up to the frontier plus landing rows above it.

A `ViewSnapshot` fixes one moment: the landing rows above the frontier are read once (one Delta
version) into a DuckDB temporary table, so every capture taken from the snapshot sees the same data
and the same LSN bound. Its cost is bounded by the open windows, not by anyone's history length:
published history is read per user with the capture's Top-K pushed down.

Landing rows are turned into history rows exactly as compaction will: first arrival of an event id
wins, ids already published by another window (the detail table, within retention) drop, and each
window's rows aggregate with the declared merge operators. So a row of a window that is complete at
the snapshot equals the row compaction publishes, and a row of the window still open equals what
that window's detail events up to the LSN bound aggregate to.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa
from pyiceberg.table import Table

from seqlake.core.config import Config
from seqlake.engines.duckdb_session import lake_cursor, sql_literal
from seqlake.pipelines.compaction.aggregation import dedupe_sql, publishable_rows_sql
from seqlake.pipelines.landing.schema import landing_schema
from seqlake.pipelines.landing.tables import LandingPaths, is_delta_table
from seqlake.pipelines.landing.windows import LandedWindows, window_counts_sql
from seqlake.tableformat.forgets import read_point
from seqlake.tableformat.io import engine_location
from seqlake.tableformat.registry import published_frontier, published_windows
from seqlake.tableformat.schema import history_arrow_schema

_ABOVE = "_seqlake_above_frontier"


class ViewSnapshot:
    """The online view at one moment; close it (or use it as a context manager) when done."""

    def __init__(self, config: Config, history: Table, detail: Table, paths: LandingPaths) -> None:
        self.config = config
        self.history = history
        # Before anything is read: what a capture step's appends check (`seqlake.tableformat.forgets`).
        self.read_point = read_point(history)
        self.frontier = published_frontier(history)
        self._con = lake_cursor()
        self._detail_location = detail.metadata_location if detail.current_snapshot() else None
        self._load_landing(paths)
        bounds = self._con.execute(f"SELECT source_partition, max(lsn) FROM {_ABOVE} GROUP BY 1").fetchall()
        # The LSN bound: the highest LSN visible per source partition (published or landed).
        self.lsn_bound = self.frontier.advanced({int(p): int(lsn) for p, lsn in bounds})
        above = self._con.execute(f"SELECT max(window_id), max(arrival_ts) FROM {_ABOVE}").fetchone()
        assert above is not None  # an aggregate answers one row
        newest, now = above
        # Rows of this window may still change after the snapshot; every older window is complete.
        # With nothing above the frontier, every visible window is published and complete: the open
        # window is the next one, which holds no visible rows.
        self.open_window = int(newest) if newest is not None else max(published_windows(history), default=-1) + 1
        self.now: datetime | None = now.astimezone(UTC) if now is not None else None

    def _load_landing(self, paths: LandingPaths) -> None:
        columns = ", ".join(f"e.{c}" for c in landing_schema(self.config).names)
        if not is_delta_table(paths.events):
            empty = landing_schema(self.config).empty_table()
            self._con.register("_empty", empty)
            self._con.execute(f"CREATE TEMP TABLE {_ABOVE} AS SELECT * FROM _empty")
            return
        published = self.frontier.sql("e.source_partition", "e.lsn")
        self._con.execute(
            f"CREATE TEMP TABLE {_ABOVE} AS SELECT {columns} FROM delta_scan(?) AS e WHERE NOT ({published})",
            [engine_location(paths.events)],
        )

    def unpublished_windows(self) -> LandedWindows:
        """The unpublished windows, their rows and the watermark, from the view (every row of an
        unpublished window is above the frontier: LSNs grow with arrival, windows publish in order).
        A partition with nothing above the frontier has not moved past anything yet."""
        counts = self._con.execute(window_counts_sql(_ABOVE)).fetchall()
        return LandedWindows.of(counts, waiting=self.frontier)

    def active_users(self, since: datetime | None) -> list[int]:
        """Users with events that arrived after `since` (all landed users if None), ascending."""
        where = "" if since is None else "WHERE arrival_ts > ?"
        rows = self._con.execute(
            f"SELECT DISTINCT user_id FROM {_ABOVE} {where} ORDER BY 1", [] if since is None else [since]
        ).fetchall()
        return [int(r[0]) for r in rows]

    def landing_rows(self, user_ids: list[int]) -> pa.Table:
        """The users' unpublished history rows as compaction will publish them (per window)."""
        con = self._con
        con.register("_users", pa.table({"user_id": pa.array(user_ids, pa.int64())}))
        con.execute(
            f"CREATE OR REPLACE TEMP VIEW _user_landing AS SELECT * FROM {_ABOVE} "
            "WHERE user_id IN (SELECT user_id FROM _users)"
        )
        con.execute(f"CREATE OR REPLACE TEMP VIEW _user_first AS {dedupe_sql('_user_landing', 'duckdb')}")
        if self._detail_location is None:
            con.execute("CREATE OR REPLACE TEMP VIEW _user_events AS SELECT * FROM _user_first")
        else:
            retention = self.config.layout.detail_retention_windows
            con.execute(
                "CREATE OR REPLACE TEMP VIEW _user_events AS SELECT * FROM _user_first AS e WHERE NOT EXISTS ("
                f"SELECT 1 FROM iceberg_scan({sql_literal(self._detail_location)}) AS d "
                "WHERE d.user_id IN (SELECT user_id FROM _users) "
                "AND d.event_id = e.event_id AND d.window_id <> e.window_id "
                f"AND d.window_id >= e.window_id - {int(retention)})"
            )
        names = history_arrow_schema(self.config).names
        sql = publishable_rows_sql(self.config, "_user_events", "duckdb", group_by_extra=("window_id",))
        rows = con.execute(f"SELECT {', '.join(names)} FROM ({sql})").to_arrow_table()
        return rows.cast(history_arrow_schema(self.config))

    def close(self) -> None:
        self._con.close()

    def __enter__(self) -> ViewSnapshot:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
