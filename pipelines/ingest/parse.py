"""The reference validation of a batch of raw records, record by record (`validate_payload`).

Ingest runs the set-based `seqlake.pipelines.ingest.validation` instead; this is what its tests and the
ingest benchmark compare it with: the same rows of `parsed_schema`, built one Python row at a time.
"""

from __future__ import annotations

import pyarrow as pa

from seqlake.core.config import Config
from seqlake.core.events import RAW_SCHEMA
from seqlake.core.payload import validate_payload
from seqlake.core.windows import window_ids
from seqlake.pipelines.landing.schema import parsed_schema


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
