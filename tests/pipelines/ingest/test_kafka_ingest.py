"""Ingest from a Kafka topic on a real broker (Apache Kafka in KRaft mode, tests/kafka_broker.py).

The demo's stream is produced into a topic of 4 partitions, each record into its source partition. The
broker's acknowledgements (partition, offset, log-append time) and the payloads make a raw table of the
same records, whose in-process ingest is the reference. Ingest from the topic, killed (SIGKILL) at each
commit point and run again, lands exactly the reference's rows, so every LSN is its message's offset, on
the in-process engine and on Spark, each completing a run of the other killed. A second ingest finds
nothing new; a topic whose retention dropped offsets the lake still needs is refused in one line.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import pytest
from confluent_kafka import Producer, TopicPartition

from seqlake.core.config import Config
from seqlake.core.errors import SourceError
from seqlake.core.events import RAW_SCHEMA
from seqlake.core.sources import KafkaTopic
from seqlake.engines.catalog import open_catalog, table_identifier
from seqlake.engines.duckdb_session import lake_cursor
from seqlake.pipelines.faults import KILL_AT_ENV
from seqlake.pipelines.ingest.duckdb import ingest_source_in_process
from seqlake.pipelines.ingest.kafka.duckdb import ingest_topic_in_process, payload_texts
from seqlake.pipelines.ingest.kafka.plan import partition_app_id
from seqlake.pipelines.ingest.raw_source import create_raw_table, land_raw_records
from seqlake.pipelines.landing.delta_writer import applied_version
from seqlake.pipelines.landing.tables import LandingPaths, landing_paths
from seqlake.tableformat.io import engine_location
from tests.kafka_broker import KafkaBroker
from tests.pipelines.ingest.test_ingest_engines import (
    content,
    demo_records,
    seqlake_ingest,
    source_config,
    tier,
    write_config,
)

PARTITIONS = 4
RAW = "kafka_records"  # the raw table of the records the topic holds


@dataclass(frozen=True)
class Topic:
    config: Config
    topic: KafkaTopic
    ends: dict[int, int]  # each partition's end offset
    reference: dict[str, tuple[int, str]]  # the landing tier's content after ingesting the raw table


def produce(
    broker: KafkaBroker, name: str, partition_count: int, messages: Iterable[tuple[int, bytes | None]]
) -> pa.Table:
    """A new topic holding `messages` (partition, value): the raw records the broker acknowledged."""
    broker.create_topic(name, partition_count)
    producer = Producer({"bootstrap.servers": broker.bootstrap_servers, "enable.idempotence": True})
    acknowledged: list[tuple[int, int, int, bytes | None]] = []

    def delivered(error, message) -> None:
        assert error is None, error
        acknowledged.append((message.partition(), message.offset(), message.timestamp()[1], message.value()))

    for partition, value in messages:
        producer.produce(name, value=value, partition=partition, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    acknowledged.sort(key=lambda m: m[:2])
    partitions, offsets, times, values = (list(column) for column in zip(*acknowledged, strict=True))
    arrival = pa.array(times, pa.int64()).cast(RAW_SCHEMA.field("arrival_ts").type)
    columns = [pa.array(partitions, pa.int32()), pa.array(offsets, pa.int64()), arrival, payload_texts(values)]
    return pa.table(columns, schema=RAW_SCHEMA)


def stream(config: Config) -> Iterable[tuple[int, bytes | None]]:
    for batch in demo_records(config):
        for partition, payload in zip(batch["source_partition"].to_pylist(), batch["payload"].to_pylist(), strict=True):
            yield partition % PARTITIONS, payload.encode()


@pytest.fixture(scope="module")
def topic(kafka_broker: KafkaBroker, lake_config: Config) -> Topic:
    config = source_config(lake_config, "kafka_ingest")
    name = "demo_" + secrets.token_hex(4)
    records = produce(kafka_broker, name, PARTITIONS, stream(config))
    # The log-append times are the broker's clock: the records land in the windows they arrived in.
    raw = create_raw_table(open_catalog(config), table_identifier(config, RAW), replace=True)
    land_raw_records(raw, records.to_batches())
    reference = tier(config, "reference")
    ingest_source_in_process(config, RAW, reference)
    last = records.group_by("source_partition").aggregate([("lsn", "max")]).to_pylist()
    ends = {row["source_partition"]: row["lsn_max"] + 1 for row in last}
    return Topic(config, KafkaTopic(kafka_broker.bootstrap_servers, name), ends, content(config, reference))


def positions(paths: LandingPaths, topic: KafkaTopic) -> list[tuple[int, int]]:
    """Each partition's (quarantine, events) txn versions: the next offset each has landed."""
    apps = [partition_app_id(topic, p) for p in range(PARTITIONS)]
    return [(applied_version(paths.quarantine, app), applied_version(paths.events, app)) for app in apps]


def offsets_held(paths: LandingPaths) -> dict[int, list[int]]:
    """The LSNs of each source partition, landed or quarantined."""
    query = """
        SELECT source_partition, list(lsn ORDER BY lsn) FROM (
          SELECT source_partition, lsn FROM delta_scan(?) UNION ALL SELECT source_partition, lsn FROM delta_scan(?)
        ) GROUP BY ALL"""
    with lake_cursor() as con:
        return dict(con.execute(query, [engine_location(paths.events), engine_location(paths.quarantine)]).fetchall())


def test_killed_at_each_commit_point_and_run_again_lands_the_raw_tables_rows(topic: Topic, tmp_path: Path) -> None:
    config, uri = topic.config, topic.topic.uri
    config_file = write_config(config, tmp_path / "seqlake.yaml")
    paths = landing_paths(config)
    ends = [topic.ends[p] for p in range(PARTITIONS)]
    # Killed after partition 0's quarantine commit, then after its landing commit (the run completing its
    # batch) and partition 1's.
    killed = seqlake_ingest(
        config_file, "--source", uri, "--engine", "duckdb", env_extra={KILL_AT_ENV: "ingest_quarantined#1"}
    )
    assert killed.returncode == -9, killed.stderr
    assert positions(paths, topic.topic) == [(ends[0], 0), (0, 0), (0, 0), (0, 0)]
    killed = seqlake_ingest(
        config_file, "--source", uri, "--engine", "duckdb", env_extra={KILL_AT_ENV: "ingest_landed#2"}
    )
    assert killed.returncode == -9, killed.stderr
    assert positions(paths, topic.topic) == [(ends[0], ends[0]), (ends[1], ends[1]), (0, 0), (0, 0)]
    done = seqlake_ingest(config_file, "--source", uri, "--engine", "duckdb", "--output", "json")
    assert done.returncode == 0, done.stderr
    document = json.loads(done.stdout)
    assert (document["source"], document["batches"], document["already_ingested"]) == (uri, 2, 2)

    assert content(config, paths) == topic.reference
    assert positions(paths, topic.topic) == [(end, end) for end in ends]
    assert offsets_held(paths) == {p: list(range(end)) for p, end in enumerate(ends)}
    # A second ingest with no new message adds nothing.
    again = ingest_topic_in_process(config, topic.topic, paths)
    assert (again.batches, again.skipped, again.records) == (0, PARTITIONS, 0)
    assert content(config, paths) == topic.reference


@pytest.mark.spark
def test_spark_completes_a_killed_ingest_and_lands_the_same_rows(spark, topic: Topic, tmp_path: Path) -> None:
    from seqlake.pipelines.ingest.kafka.spark import ingest_topic_spark, payload_sql

    # Spark reads a value as the in-process reader does: text, or an unreadable line of its bytes.
    values = [b'{"user_id": 1}', b"\xff\xfe{", None, b"", "é".encode()]
    frame = spark.createDataFrame([(v,) for v in values], "value binary")
    assert [row[0] for row in frame.selectExpr(payload_sql).collect()] == payload_texts(values).to_pylist()

    config = source_config(topic.config, "kafka_spark")
    config_file = write_config(config, tmp_path / "seqlake.yaml")
    paths = landing_paths(config)
    killed = seqlake_ingest(
        config_file, "--source", topic.topic.uri, "--engine", "duckdb", env_extra={KILL_AT_ENV: "ingest_quarantined#1"}
    )
    assert killed.returncode == -9, killed.stderr
    result = ingest_topic_spark(spark, config, topic.topic, paths)
    assert (result.batches, result.skipped) == (PARTITIONS, 0)
    assert content(config, paths) == topic.reference
    assert positions(paths, topic.topic) == [(topic.ends[p], topic.ends[p]) for p in range(PARTITIONS)]
    # Nothing new, for either engine.
    assert ingest_topic_spark(spark, config, topic.topic, paths).batches == 0
    assert ingest_topic_in_process(config, topic.topic, paths).batches == 0


@pytest.mark.spark
def test_spark_killed_at_each_commit_point_is_completed_by_the_in_process_engine(topic: Topic, tmp_path: Path) -> None:
    config = source_config(topic.config, "kafka_spark_killed")
    config_file = write_config(config, tmp_path / "seqlake.yaml")
    paths = landing_paths(config)
    ends = [topic.ends[p] for p in range(PARTITIONS)]
    # `seqlake ingest --engine spark` killed after partition 0's quarantine commit, then after the
    # landing commits of partitions 0 and 1; its driver's JVM ends with it.
    killed = seqlake_ingest(
        config_file, "--source", topic.topic.uri, "--engine", "spark", env_extra={KILL_AT_ENV: "ingest_quarantined#1"}
    )
    assert killed.returncode == -9, killed.stderr
    assert positions(paths, topic.topic) == [(ends[0], 0), (0, 0), (0, 0), (0, 0)]
    killed = seqlake_ingest(
        config_file, "--source", topic.topic.uri, "--engine", "spark", env_extra={KILL_AT_ENV: "ingest_landed#2"}
    )
    assert killed.returncode == -9, killed.stderr
    assert positions(paths, topic.topic) == [(ends[0], ends[0]), (ends[1], ends[1]), (0, 0), (0, 0)]
    done = ingest_topic_in_process(config, topic.topic, paths)
    assert (done.batches, done.skipped) == (2, 2)
    assert content(config, paths) == topic.reference
    assert positions(paths, topic.topic) == [(end, end) for end in ends]
    assert offsets_held(paths) == {p: list(range(end)) for p, end in enumerate(ends)}


def test_a_topic_whose_retention_dropped_offsets_the_lake_needs_is_refused_in_one_line(
    kafka_broker: KafkaBroker, lake_config: Config, tmp_path: Path
) -> None:
    config = source_config(lake_config, "kafka_retention")
    name = "retention_" + secrets.token_hex(4)
    event = {"event_id": "e", "user_id": 1_000_001, "feature_group": "engagement", "event_ts": 1_767_571_200_000}
    first = [(p, json.dumps(event | {"event_id": f"{p}-{n}"}).encode()) for p in (0, 1) for n in range(5)]
    # A value that is no UTF-8 text, and a tombstone: quarantined as unreadable lines, their bytes kept.
    produce(kafka_broker, name, 2, [*first, (0, b"\xc3\x28"), (0, None)])
    topic = KafkaTopic(kafka_broker.bootstrap_servers, name)
    paths = landing_paths(config)
    landed = ingest_topic_in_process(config, topic, paths)
    assert (landed.landed, dict(landed.quarantined)) == (10, {"unreadable_line": 2})
    before = content(config, paths)
    with lake_cursor() as con:
        quarantined = con.execute(
            "SELECT lsn, payload FROM delta_scan(?) ORDER BY lsn", [engine_location(paths.quarantine)]
        ).fetchall()
    assert quarantined == [(5, '{"unreadable_line": "C328"}'), (6, '{"unreadable_line": ""}')]

    # More messages, then the first 9 of partition 1 dropped (as retention drops them): the lake has landed
    # its first 5 only.
    producer = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for p in (0, 1):
        for n in range(5, 10):
            producer.produce(name, value=json.dumps(event | {"event_id": f"{p}-{n}"}).encode(), partition=p)
    assert producer.flush(60) == 0
    admin = kafka_broker.admin()
    [deleted] = admin.delete_records([TopicPartition(name, 1, 9)]).values()
    assert deleted.result().low_watermark == 9

    refused = seqlake_ingest(
        write_config(config, tmp_path / "seqlake.yaml"), "--source", topic.uri, "--engine", "duckdb"
    )
    assert refused.returncode == 1
    [line] = refused.stderr.strip().splitlines()
    assert line.startswith(f"seqlake ingest: error: the Kafka topic {topic.uri} no longer holds messages the lake")
    assert "partition 1 offsets 5..8 " in line and "partition 0" not in line
    assert content(config, paths) == before  # nothing landed, not even partition 0's new messages
    # A topic the brokers do not have is one line too.
    with pytest.raises(SourceError, match=r"^the Kafka topic kafka://\S+/missing cannot be read: ") as missing:
        ingest_topic_in_process(config, KafkaTopic(kafka_broker.bootstrap_servers, "missing"), paths)
    assert "\n" not in str(missing.value)
