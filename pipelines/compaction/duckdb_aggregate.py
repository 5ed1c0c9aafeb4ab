"""Window-close aggregation on DuckDB: the same definition as Spark's compaction, for small local runs.

`seqlake.pipelines.compaction.spark` runs a closed window on Spark: deduplicate its events (first arrival of an
event id wins), drop ids published by earlier windows, aggregate with `aggregation_sql`. This module
runs the same three steps in-process on DuckDB, from the same SQL (`dedupe_sql` and `aggregation_sql`
transpiled by sqlglot), and returns the history rows as Arrow. Tests hold both engines to one result.
"""

from __future__ import annotations

import pyarrow as pa

from seqlake.core.config import Config
from seqlake.engines.duckdb_session import connect
from seqlake.pipelines.compaction.aggregation import dedupe_sql, publishable_rows_sql
from seqlake.tableformat.schema import STORAGE_ORDER, TIMESTAMP_US, history_arrow_schema

_EVENTS = "_seqlake_window_landing"
_PUBLISHED = "_seqlake_published_ids"
_WINDOW_EVENTS = "_seqlake_window_events"
SORT_COLUMNS = STORAGE_ORDER


def _microseconds_utc(table: pa.Table) -> pa.Table:
    """Timestamps as microseconds in UTC (what Spark reads and history stores)."""
    schema = pa.schema(
        [f.with_type(TIMESTAMP_US) if pa.types.is_timestamp(f.type) else f for f in table.schema],
        metadata=table.schema.metadata,
    )
    return table if schema.equals(table.schema) else table.cast(schema)


def aggregate_window_local(
    config: Config,
    events: pa.Table,
    already_published_event_ids: pa.Array | pa.ChunkedArray | None = None,
) -> pa.Table:
    """History rows of one window's landing rows (`seqlake.pipelines.landing.schema.landing_schema` columns).

    Each event id counts once: its first arrival (smallest (source_partition, lsn)) is kept, and ids
    in `already_published_event_ids` (events of earlier windows) are dropped. The result has exactly
    `history_arrow_schema(config)` and is sorted by (user_id, feature_group, event_ts, lsn,
    source_partition).
    """
    schema = history_arrow_schema(config)
    con = connect(extensions=())
    try:
        con.register(_EVENTS, _microseconds_utc(events))
        con.execute(f"CREATE TEMP VIEW _seqlake_deduped AS {dedupe_sql(_EVENTS, 'duckdb')}")
        if already_published_event_ids is not None and len(already_published_event_ids) > 0:
            ids = already_published_event_ids
            ids = ids if isinstance(ids, pa.ChunkedArray) else pa.chunked_array([ids])
            published = pa.table({"event_id": ids.cast(pa.string())})
            con.register(_PUBLISHED, published)
            con.execute(
                f"CREATE TEMP VIEW {_WINDOW_EVENTS} AS SELECT * FROM _seqlake_deduped AS e "
                f"WHERE NOT EXISTS (SELECT 1 FROM {_PUBLISHED} AS p WHERE p.event_id = e.event_id)"
            )
        else:
            con.execute(f"CREATE TEMP VIEW {_WINDOW_EVENTS} AS SELECT * FROM _seqlake_deduped")
        columns = ", ".join(schema.names)
        order = ", ".join(SORT_COLUMNS)
        result = con.execute(
            f"SELECT {columns} FROM ({publishable_rows_sql(config, _WINDOW_EVENTS, 'duckdb')}) ORDER BY {order}"
        ).to_arrow_table()
    finally:
        con.close()
    # DuckDB labels TIMESTAMPTZ with its session time zone and may widen or narrow types: cast to history.
    return result.cast(schema)
