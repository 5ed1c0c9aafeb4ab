"""The Kafka broker as the tests run it: keyed JSON messages produced into a 4-partition topic come
back, through confluent-kafka and through Spark's Kafka batch source, with their partitions, offsets
and the broker's log-append times (tests/kafka_broker.py)."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass

import confluent_kafka as kafka
import pytest
from confluent_kafka import OFFSET_BEGINNING, TIMESTAMP_LOG_APPEND_TIME, Consumer, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

from seqlake.engines.spark_session import spark_jars
from tests.kafka_broker import KafkaBroker

PARTITIONS = 4
USERS = 12
MESSAGES = 60
PRODUCER_TIMESTAMP_MS = 1_000  # what a producer claims; the broker's log-append time replaces it


@dataclass(frozen=True, order=True)
class Message:
    partition: int
    offset: int
    timestamp_ms: int
    key: bytes
    value: bytes


def _message(message: kafka.Message) -> Message:
    """A delivered or consumed message, whose timestamp must be the broker's append time."""
    kind, timestamp = message.timestamp()
    assert kind == TIMESTAMP_LOG_APPEND_TIME
    partition, offset, key, value = message.partition(), message.offset(), message.key(), message.value()
    assert partition is not None and offset is not None and key is not None and value is not None
    return Message(partition, offset, timestamp, key, value)


@dataclass(frozen=True)
class Produced:
    topic: str
    messages: list[Message]  # as the broker acknowledged them, in (partition, offset) order
    began_ms: int
    ended_ms: int

    def end_offsets(self) -> dict[int, int]:
        return {p: 1 + max(m.offset for m in self.messages if m.partition == p) for p in range(PARTITIONS)}


def _produce(broker: KafkaBroker) -> Produced:
    """A new topic of PARTITIONS partitions, with MESSAGES keyed JSON events of USERS users."""
    topic = "events_" + secrets.token_hex(4)
    broker.create_topic(topic, PARTITIONS)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers})
    acknowledged: list[Message] = []

    def delivered(error: kafka.KafkaError | None, message: kafka.Message) -> None:
        assert error is None, error
        acknowledged.append(_message(message))

    began_ms = time.time_ns() // 1_000_000
    for n in range(MESSAGES):
        user = n % USERS
        event = {"user_id": user, "event": "click" if n % 3 else "view", "n": n}
        producer.produce(
            topic,
            key=str(user).encode(),
            value=json.dumps(event).encode(),
            timestamp=PRODUCER_TIMESTAMP_MS,
            on_delivery=delivered,
        )
    assert producer.flush() == 0
    ended_ms = time.time_ns() // 1_000_000
    return Produced(topic, sorted(acknowledged), began_ms, ended_ms)


def _consume(broker: KafkaBroker, produced: Produced) -> list[Message]:
    """Every message of the topic, read from each partition's start to its end offset."""
    consumer = Consumer(
        {"bootstrap.servers": broker.bootstrap_servers, "group.id": "smoke", "enable.auto.commit": False}
    )
    consumer.assign([TopicPartition(produced.topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    ends = produced.end_offsets()
    read: list[Message] = []
    try:
        for _ in range(10 * MESSAGES):
            if len(read) == sum(ends.values()):
                break
            message = consumer.poll(1.0)
            if message is None:
                continue
            assert message.error() is None, message.error()
            read.append(_message(message))
    finally:
        consumer.close()
    return sorted(read)


def _end_offsets(broker: KafkaBroker, topic: str) -> dict[int, int]:
    admin = broker.admin()
    asked = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(PARTITIONS)}
    return {tp.partition: future.result().offset for tp, future in admin.list_offsets(asked).items()}


def test_keyed_messages_come_back_with_partitions_offsets_and_log_append_times(kafka_broker, measurement):
    measurement(f"Kafka broker (KRaft) start-up: {kafka_broker.startup_seconds} s")
    produced = _produce(kafka_broker)
    assert len(produced.messages) == MESSAGES
    assert _consume(kafka_broker, produced) == produced.messages
    # The topic holds those messages and no others: its end offsets are theirs.
    assert _end_offsets(kafka_broker, produced.topic) == produced.end_offsets()
    # Each partition's offsets run from 0 without gaps, and each user's messages share one partition.
    for p in range(PARTITIONS):
        assert [m.offset for m in produced.messages if m.partition == p] == list(range(produced.end_offsets()[p]))
    partitions_of_users: dict[bytes, set[int]] = {}
    for m in produced.messages:
        partitions_of_users.setdefault(m.key, set()).add(m.partition)
    assert len(partitions_of_users) == USERS
    assert all(len(partitions) == 1 for partitions in partitions_of_users.values())
    assert len({m.partition for m in produced.messages}) > 1
    # The timestamps are the broker's append times, not the producer's.
    assert all(produced.began_ms - 1_000 <= m.timestamp_ms <= produced.ended_ms + 1_000 for m in produced.messages)


@pytest.mark.spark
def test_sparks_kafka_batch_source_reads_the_same_messages(spark, kafka_broker):
    produced = _produce(kafka_broker)
    bounds = {
        "startingOffsets": {produced.topic: {str(p): 0 for p in range(PARTITIONS)}},
        "endingOffsets": {produced.topic: {str(p): end for p, end in produced.end_offsets().items()}},
    }
    reader = spark.read.format("kafka").option("kafka.bootstrap.servers", kafka_broker.bootstrap_servers)
    reader = reader.option("subscribe", produced.topic)
    for name, offsets in bounds.items():
        reader = reader.option(name, json.dumps(offsets))
    rows = reader.load().selectExpr(
        "partition", "offset", "CAST(unix_millis(timestamp) AS BIGINT) AS timestamp_ms", "timestampType", "key", "value"
    )
    read = rows.collect()
    assert {row.timestampType for row in read} == {1}  # LogAppendTime
    messages = sorted(
        Message(row.partition, row.offset, row.timestamp_ms, bytes(row.key), bytes(row.value)) for row in read
    )
    assert messages == produced.messages


def test_spark_loads_the_kafka_source_and_none_of_the_servers_jars():
    names = [jar.name for jar in spark_jars()]
    for source in ("spark-sql-kafka-0-10_2.13-", "spark-token-provider-kafka-0-10_2.13-", "kafka-clients-"):
        assert sum(name.startswith(source) for name in names) == 1, source
    # The broker and the REST catalog server run in JVMs of their own, from folders Spark never reads.
    assert not [name for name in names if name.startswith(("kafka_2.13-", "kafka-server-", "jetty-", "iceberg-core-"))]
