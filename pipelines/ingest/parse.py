"""Parse raw source records into typed landing rows or quarantine rows, one Arrow batch at a time.

The validation is `seqlake.core.payload.validate_payload`, the reference semantics: every ingest path
(Spark's mapInArrow, local runs) calls this module, so they cannot disagree.
"""

from __future__ import annotations

import pyarrow as pa

from seqlake.core.config import Config
from seqlake.core.events import RAW_SCHEMA, event_schema
from seqlake.core.payload import validate_payload
from seqlake.tableformat.schema import TIMESTAMP_US

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


def window_ids(arrival_ts: pa.Array, window_seconds: int) -> pa.Array:
    """Processing window of each arrival: epoch-aligned windows of `window_seconds`."""
    millis = arrival_ts.cast(pa.timestamp("ms", tz="UTC")).cast(pa.int64()).to_numpy(zero_copy_only=False)
    return pa.array(millis // (window_seconds * 1000), pa.int64())


def parse_batch(batch: pa.RecordBatch, config: Config) -> pa.RecordBatch:
    """Validate every record of a RAW_SCHEMA batch; rows carry a `reason` when malformed."""
    if batch.schema.names != RAW_SCHEMA.names:
        batch = batch.select(RAW_SCHEMA.names)
    schema = parsed_schema(config)
    windows = window_ids(batch.column("arrival_ts"), config.layout.window_seconds).to_pylist()
    rows = []
    for record, window in zip(batch.to_pylist(), windows, strict=True):
        event, reason = validate_payload(record["payload"], config)
        row = {
            "source_partition": record["source_partition"],
            "lsn": record["lsn"],
            "arrival_ts": record["arrival_ts"],
            "window_id": window,
        }
        if reason is None:
            assert event is not None  # a payload without a reason parsed
            row.update(event)
            row["event_ts"] = event["event_ts"] * 1000  # payloads carry epoch milliseconds
            row["reason"] = row["payload"] = None
        else:
            row["reason"], row["payload"] = reason, record["payload"]
        rows.append(row)
    return pa.RecordBatch.from_pylist(rows, schema=schema)
