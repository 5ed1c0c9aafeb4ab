"""Ingest from a Kafka topic in-process (`seqlake ingest --engine duckdb --source kafka://...`).

Each batch's messages are read with confluent-kafka (librdkafka) from an assigned partition, never as a
member of a consumer group and never committing an offset, in Arrow batches of raw records (bounded
memory), then validated and appended as a raw table's snapshot is
(`seqlake.pipelines.ingest.duckdb.land_records`).

A message's value is its payload when it is UTF-8 text; any other value (or none, a tombstone) arrives as
an unreadable line holding the value's bytes in hexadecimal (`payload_sql` on Spark builds the same text),
so it is quarantined as `unreadable_line` with nothing lost.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pyarrow as pa

from seqlake.core.config import Config
from seqlake.core.errors import SourceError
from seqlake.core.events import RAW_SCHEMA
from seqlake.core.payload import unreadable_line_payload
from seqlake.core.progress import Progress
from seqlake.core.sources import KafkaTopic
from seqlake.pipelines.ingest.duckdb import READ_BATCH_ROWS, land_records
from seqlake.pipelines.ingest.kafka.plan import (
    MAX_BATCH_RECORDS,
    REQUEST_SECONDS,
    Batch,
    client_settings,
    ingest_topic,
    partition_app_id,
)
from seqlake.pipelines.ingest.plan import IngestResult
from seqlake.pipelines.landing import delta_writer
from seqlake.pipelines.landing.tables import LandingPaths

_CONSUME_MESSAGES = 10_000  # messages librdkafka hands over per call
# A partition that gives nothing (no message, no end) for this long: its brokers stopped answering.
STALL_SECONDS = 4 * REQUEST_SECONDS


def _consumer(topic: KafkaTopic):
    from confluent_kafka import Consumer

    return Consumer(
        {
            **client_settings(topic),
            # librdkafka asks for a group id; the consumer never joins it (assign) nor commits to it.
            "group.id": "seqlake-ingest",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,  # the end of a range whose last offsets are no messages (markers)
            "isolation.level": "read_committed",
            "auto.offset.reset": "error",  # an offset the topic dropped meanwhile: an error, never a jump
        }
    )


def batch_records(topic: KafkaTopic, batch: Batch) -> Iterator[pa.RecordBatch]:
    """The messages of `batch` as raw records (RAW_SCHEMA), in offset order."""
    from confluent_kafka import KafkaError, TopicPartition

    consumer = _consumer(topic)
    offsets: list[int] = []
    times: list[int] = []
    values: list[bytes | None] = []
    try:
        consumer.assign([TopicPartition(topic.topic, batch.partition, batch.start)])
        position, heard = batch.start, time.monotonic()
        while position < batch.end:
            messages = consumer.consume(_CONSUME_MESSAGES, timeout=1.0)
            if not messages and time.monotonic() - heard > STALL_SECONDS:
                raise SourceError(f"the Kafka brokers of {topic} stopped answering at {batch} (offset {position})")
            for message in messages:
                heard = time.monotonic()
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        raise SourceError(f"reading {batch} of the Kafka topic {topic} failed: {error.str()}")
                    position = max(position, message.offset())  # no message before the end
                    continue
                offset = message.offset()
                if offset >= batch.end:
                    position = batch.end
                    break
                offsets.append(offset)
                times.append(message.timestamp()[1])
                values.append(message.value())
                position = offset + 1
            if len(offsets) >= READ_BATCH_ROWS:
                yield _records(batch.partition, offsets, times, values)
                offsets, times, values = [], [], []
    finally:
        consumer.close()
    if offsets:
        yield _records(batch.partition, offsets, times, values)


def _records(partition: int, offsets: list[int], times: list[int], values: list[bytes | None]) -> pa.RecordBatch:
    arrival = RAW_SCHEMA.field("arrival_ts").type
    columns = [
        pa.array(np.full(len(offsets), partition, np.int32)),
        pa.array(offsets, pa.int64()),
        pa.array(times, pa.int64()).cast(arrival),
        payload_texts(values),
    ]
    return pa.RecordBatch.from_arrays(columns, schema=RAW_SCHEMA)


def payload_texts(values: list[bytes | None]) -> pa.Array:
    """The values as text; where one is not UTF-8 (or none), an unreadable line of its bytes in hexadecimal."""
    raw = pa.array(values, pa.binary())
    if raw.null_count == 0:
        try:
            return raw.cast(pa.string())  # checks every value is UTF-8
        except pa.ArrowInvalid:
            pass
    return pa.array([_payload(value) for value in values], pa.string())


def _payload(value: bytes | None) -> str:
    if value is not None:
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            pass
    return unreadable_line_payload((value or b"").hex().upper())


def ingest_topic_in_process(
    config: Config,
    topic: KafkaTopic,
    paths: LandingPaths,
    progress: Progress | None = None,
    max_batch_records: int = MAX_BATCH_RECORDS,
) -> IngestResult:
    """Land every message of `topic` the landing tier does not hold yet, batch by batch, in-process."""

    def recorded(uri: str, app_id: str) -> int:
        return delta_writer.applied_version(uri, app_id)

    def land(batch: Batch, homes: dict[int, int]) -> tuple[int, Counter]:
        app_id = partition_app_id(topic, batch.partition)
        return land_records(config, batch_records(topic, batch), paths, app_id, batch.end, homes)

    return ingest_topic(config, topic, paths, recorded, land, progress, max_batch_records)
