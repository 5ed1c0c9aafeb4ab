"""The landing tier's columns: typed events plus the processing window of their arrival, and its quarantine.

`check_landing` refuses a landing tier whose columns differ from the configuration (`seqlake migrate`
changes them).
"""

from __future__ import annotations

from dataclasses import replace

import pyarrow as pa
from pyiceberg.io.pyarrow import pyarrow_to_schema

from seqlake.core.config import Config
from seqlake.core.events import event_schema
from seqlake.tableformat.evolution import SchemaDiff, compare, mismatch_error
from seqlake.tableformat.schema import TIMESTAMP_US, with_field_ids

LANDING = "landing/events"  # the landing tier's name in a migration's report

QUARANTINE_SCHEMA = pa.schema(
    [
        pa.field("source_partition", pa.int32(), nullable=False),
        pa.field("lsn", pa.int64(), nullable=False),
        pa.field("arrival_ts", TIMESTAMP_US, nullable=False),
        pa.field("window_id", pa.int64(), nullable=False),
        pa.field("reason", pa.string(), nullable=False),
        pa.field("payload", pa.string(), nullable=False),
    ]
)


def _microseconds(schema: pa.Schema) -> pa.Schema:
    # Spark, Delta and Iceberg keep timestamps in microseconds; Spark's Arrow exchange accepts no other.
    return pa.schema(
        [f.with_type(TIMESTAMP_US) if pa.types.is_timestamp(f.type) else f for f in schema],
        metadata=schema.metadata,
    )


def landing_schema(config: Config) -> pa.Schema:
    """Typed events plus the processing window of their arrival (timestamps in microseconds)."""
    return _microseconds(event_schema(config).append(pa.field("window_id", pa.int64(), nullable=False)))


def parsed_schema(config: Config) -> pa.Schema:
    """Landing columns (nullable) plus the quarantine reason and the raw payload: one stream for both."""
    fields = [f.with_nullable(True) for f in landing_schema(config)]
    return pa.schema(fields + [pa.field("reason", pa.string()), pa.field("payload", pa.string())])


def landing_columns(location: str) -> pa.Schema:
    """The landing Delta table's columns, read through DuckDB's delta extension (no JVM)."""
    from seqlake.engines.duckdb_session import lake_cursor
    from seqlake.tableformat.io import engine_location

    with lake_cursor() as con:
        return con.execute("SELECT * FROM delta_scan(?) LIMIT 0", [engine_location(location)]).to_arrow_table().schema


def landing_diff(columns: pa.Schema, config: Config) -> SchemaDiff:
    """The landing tier's `columns` against the configuration. A retired column stays in the Delta
    table (new rows leave it null, compaction reads the configured columns only): no difference."""
    expected = landing_schema(config)
    actual = pyarrow_to_schema(with_field_ids([f.with_nullable(True) for f in columns]))
    wanted = pyarrow_to_schema(with_field_ids([f.with_nullable(True) for f in expected]))
    fixed = frozenset(f.name for f in expected if f.name not in config.column_types())
    diff = compare(LANDING, actual, wanted, fixed=fixed)
    return replace(diff, retired=())


def check_landing(columns: pa.Schema, config: Config) -> None:
    """Refuse a landing tier whose `columns` differ from the configuration (`seqlake migrate`)."""
    diff = landing_diff(columns, config)
    if not diff.empty:
        raise mismatch_error(diff)
