"""The event model: what arrives on the wire (raw records) and what a valid event looks like (typed).

A raw record is what a source partition delivers, like a Kafka message: its partition, its offset
there (the LSN: arrival order within the partition), the arrival time, and a JSON payload that may be
malformed. A typed event is a payload that passed validation, with columns from the configuration.
"""

from __future__ import annotations

import pyarrow as pa

from seqlake.core.arrow_types import ARROW_TYPES
from seqlake.core.config import Config, EventsSpec

TIMESTAMP = pa.timestamp("ms", tz="UTC")

# One record as delivered by a source partition. `lsn` is strictly increasing within a partition.
RAW_SCHEMA = pa.schema(
    [
        pa.field("source_partition", pa.int32(), nullable=False),
        pa.field("lsn", pa.int64(), nullable=False),
        pa.field("arrival_ts", TIMESTAMP, nullable=False),
        pa.field("payload", pa.string(), nullable=False),
    ]
)

# Keys every payload carries; event_ts is epoch milliseconds.
PAYLOAD_KEYS = ("event_id", "user_id", "feature_group", "event_ts")

# The default bounds of event time (`events` in the configuration; epoch milliseconds, 2000-01-01 ..
# 2100-01-01): ingest quarantines an event outside the configured ones as event_ts_out_of_range.
MIN_EVENT_TS_MS = EventsSpec().min_event_ms
MAX_EVENT_TS_MS = EventsSpec().max_event_ms


def event_schema(config: Config) -> pa.Schema:
    """The typed event: key columns, arrival bookkeeping, then every feature-group column."""
    fields = [
        pa.field("user_id", pa.int64(), nullable=False),
        pa.field("feature_group", pa.string(), nullable=False),
        pa.field("event_ts", TIMESTAMP, nullable=False),
        pa.field("source_partition", pa.int32(), nullable=False),
        pa.field("lsn", pa.int64(), nullable=False),
        pa.field("arrival_ts", TIMESTAMP, nullable=False),
        pa.field("event_id", pa.string(), nullable=False),
    ]
    fields += [pa.field(name, ARROW_TYPES[kind]) for name, kind in config.column_types().items()]
    return pa.schema(fields)
